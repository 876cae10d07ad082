//! Kernel struct layouts from the running kernel's BTF (`/sys/kernel/btf/vmlinux`).
//!
//! The eBPF programs read kernel structs with `bpf_probe_read_kernel` at offsets computed here at
//! load time, so one `aet` binary works on any kernel with BTF. This module must never fall back
//! to a guessed offset: a member that cannot be found is an error that stops the load.

use std::path::{Path, PathBuf};

use aet_common::Offsets;
use btf_rs::{Btf, Type};

/// Where the kernel publishes its BTF.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Errors reading kernel layouts.
#[derive(Debug, thiserror::Error)]
pub enum BtfError {
    /// The BTF file could not be opened or parsed.
    #[error("cannot read kernel BTF {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: btf_rs::Error,
    },
    /// The kernel has no struct (or union) of this name.
    #[error("kernel BTF has no struct {0}")]
    NoStruct(String),
    /// The struct has no member of this name (searched through anonymous members).
    #[error("kernel BTF: struct {strukt} has no member {member}")]
    NoMember { strukt: String, member: String },
    /// The member is a bitfield or not byte-aligned, so it cannot be read as a whole value.
    #[error("kernel BTF: {strukt}.{member} is not byte-aligned")]
    Unaligned { strukt: String, member: String },
    /// A BTF lookup failed.
    #[error("kernel BTF lookup failed: {0}")]
    Lookup(#[from] btf_rs::Error),
    /// The kernel has no function (kfunc) of this name.
    #[error("kernel BTF has no function {0}")]
    NoFunc(String),
}

/// The running kernel's type information.
pub struct KernelBtf {
    btf: Btf,
}

impl KernelBtf {
    /// Reads `/sys/kernel/btf/vmlinux`.
    pub fn load() -> Result<Self, BtfError> {
        Self::load_from(Path::new(VMLINUX_BTF))
    }

    /// Reads a BTF file.
    pub fn load_from(path: &Path) -> Result<Self, BtfError> {
        // One read: btf-rs parses from a reader in small pieces otherwise.
        let bytes = std::fs::read(path).map_err(|e| BtfError::Read {
            path: path.to_owned(),
            source: btf_rs::Error::IO(e),
        })?;
        let btf = Btf::from_bytes(&bytes).map_err(|source| BtfError::Read {
            path: path.to_owned(),
            source,
        })?;
        Ok(Self { btf })
    }

    /// The BTF id and type of struct (or union) `name`, skipping forward declarations and empty
    /// stand-ins.
    fn struct_entry(&self, name: &str) -> Result<(u32, btf_rs::Struct), BtfError> {
        for id in self.btf.resolve_ids_by_name(name).unwrap_or_default() {
            if let Ok(Type::Struct(s) | Type::Union(s)) = self.btf.resolve_type_by_id(id)
                && !s.members.is_empty()
            {
                return Ok((id, s));
            }
        }
        Err(BtfError::NoStruct(name.to_owned()))
    }

    fn find_struct(&self, name: &str) -> Result<btf_rs::Struct, BtfError> {
        self.struct_entry(name).map(|(_, s)| s)
    }

    /// The BTF id of struct `name` (what `bpf_rdonly_cast` takes).
    pub fn struct_id(&self, name: &str) -> Result<u32, BtfError> {
        self.struct_entry(name).map(|(id, _)| id)
    }

    /// The BTF id of function `name` (a kfunc programs may call).
    pub fn func_id(&self, name: &str) -> Result<u32, BtfError> {
        for id in self.btf.resolve_ids_by_name(name).unwrap_or_default() {
            if let Ok(Type::Func(_)) = self.btf.resolve_type_by_id(id) {
                return Ok(id);
            }
        }
        Err(BtfError::NoFunc(name.to_owned()))
    }

    /// Strips typedefs and qualifiers.
    fn resolve(&self, mut ty: Type) -> Result<Type, BtfError> {
        for _ in 0..16 {
            match ty {
                Type::Typedef(_) | Type::Const(_) | Type::Volatile(_) | Type::Restrict(_) => {
                    let inner = ty.as_btf_type().expect("qualifier is a btf type");
                    ty = self.btf.resolve_chained_type(inner)?;
                }
                other => return Ok(other),
            }
        }
        Ok(ty)
    }

    /// Finds `member` in `s`, descending into anonymous structs and unions. Returns its bit
    /// offset, whether it is a bitfield, and its type.
    fn find_member(
        &self,
        s: &btf_rs::Struct,
        member: &str,
    ) -> Result<Option<(u32, bool, Type)>, BtfError> {
        for m in &s.members {
            let name = self.btf.resolve_name(m).unwrap_or_default();
            if name == member {
                let bitfield = m.bitfield_size().is_some_and(|b| b != 0);
                let ty = self.resolve(self.btf.resolve_chained_type(m)?)?;
                return Ok(Some((m.bit_offset(), bitfield, ty)));
            }
            if name.is_empty()
                && let Type::Struct(inner) | Type::Union(inner) =
                    self.resolve(self.btf.resolve_chained_type(m)?)?
                && let Some((bits, bitfield, ty)) = self.find_member(&inner, member)?
            {
                return Ok(Some((m.bit_offset() + bits, bitfield, ty)));
            }
        }
        Ok(None)
    }

    /// Byte offset of `strukt.member`; `member` may be a dotted path through embedded structs
    /// (`f_path.dentry`).
    pub fn offset_of(&self, strukt: &str, member: &str) -> Result<u32, BtfError> {
        let not_found = || BtfError::NoMember {
            strukt: strukt.to_owned(),
            member: member.to_owned(),
        };
        let mut current = self.find_struct(strukt)?;
        let mut total = 0u32;
        let mut parts = member.split('.').peekable();
        while let Some(part) = parts.next() {
            let (bits, bitfield, ty) = self.find_member(&current, part)?.ok_or_else(not_found)?;
            if bitfield || bits % 8 != 0 {
                return Err(BtfError::Unaligned {
                    strukt: strukt.to_owned(),
                    member: member.to_owned(),
                });
            }
            total += bits / 8;
            if parts.peek().is_some() {
                match ty {
                    Type::Struct(s) | Type::Union(s) => current = s,
                    _ => return Err(not_found()),
                }
            }
        }
        Ok(total)
    }

    /// The first of `names` that `strukt` has.
    fn offset_of_any(&self, strukt: &str, names: &[&str]) -> Result<u32, BtfError> {
        let mut last = None;
        for n in names {
            match self.offset_of(strukt, n) {
                Ok(o) => return Ok(o),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| BtfError::NoStruct(strukt.to_owned())))
    }

    /// Size in bytes of struct `strukt`.
    pub fn size_of(&self, strukt: &str) -> Result<u32, BtfError> {
        Ok(self.find_struct(strukt)?.size() as u32)
    }

    /// Number of elements of an array member.
    pub fn array_len(&self, strukt: &str, member: &str) -> Result<u32, BtfError> {
        let s = self.find_struct(strukt)?;
        match self.find_member(&s, member)? {
            Some((_, _, Type::Array(a))) => Ok(a.len() as u32),
            _ => Err(BtfError::NoMember {
                strukt: strukt.to_owned(),
                member: format!("{member} (array)"),
            }),
        }
    }

    /// The offsets of the kernel structs the eBPF programs read. The architecture-specific ones
    /// (`pt_regs` members, `thread_info.status`) are left 0 for the loader to fill; the io_uring
    /// ones are 0 on a kernel without io_uring.
    pub fn offsets(&self) -> Result<Offsets, BtfError> {
        let o = |s: &str, m: &str| self.offset_of(s, m);
        let (req_opcode, req_cmd, io_open_filename, io_statx_filename) = match (
            o("io_kiocb", "opcode"),
            o("io_kiocb", "cmd"),
            o("io_open", "filename"),
            o("io_statx", "filename"),
        ) {
            (Ok(a), Ok(b), Ok(c), Ok(d)) => (a, b, c, d),
            _ => (0, 0, 0, 0),
        };
        // An inode's change time: `i_ctime_sec`/`i_ctime_nsec` (6.11+), the timespec64
        // `__i_ctime` (6.6-6.10) or `i_ctime` (before).
        let (inode_ctime_sec, inode_ctime_nsec) = match o("inode", "i_ctime_sec") {
            Ok(sec) => (sec, o("inode", "i_ctime_nsec")?),
            Err(_) => {
                let ts = self.offset_of_any("inode", &["__i_ctime", "i_ctime"])?;
                (ts, ts + 8)
            }
        };
        Ok(Offsets {
            task_pid: o("task_struct", "pid")?,
            task_tgid: o("task_struct", "tgid")?,
            task_real_parent: o("task_struct", "real_parent")?,
            task_mm: o("task_struct", "mm")?,
            task_exit_code: o("task_struct", "exit_code")?,
            task_cred: o("task_struct", "cred")?,
            cred_uid: o("cred", "uid.val")?,
            cred_gid: o("cred", "gid.val")?,
            task_cgroups: o("task_struct", "cgroups")?,
            css_set_dfl_cgrp: o("css_set", "dfl_cgrp")?,
            cgroup_kn: o("cgroup", "kn")?,
            kernfs_node_id: o("kernfs_node", "id")?,
            cgroup_level: o("cgroup", "level")?,
            cgroup_parent_css: o("cgroup", "self.parent")?,
            css_cgroup: o("cgroup_subsys_state", "cgroup")?,
            task_start_time: o("task_struct", "start_time")?,
            mm_arg_start: o("mm_struct", "arg_start")?,
            mm_arg_end: o("mm_struct", "arg_end")?,
            mm_exe_file: o("mm_struct", "exe_file")?,
            task_files: o("task_struct", "files")?,
            files_fdt: o("files_struct", "fdt")?,
            files_fd_array: o("files_struct", "fd_array")?,
            fdt_fd: o("fdtable", "fd")?,
            fdt_max_fds: o("fdtable", "max_fds")?,
            fd_array_len: self.array_len("files_struct", "fd_array")?.min(64),
            task_fs: o("task_struct", "fs")?,
            fs_root: o("fs_struct", "root")?,
            fs_pwd: o("fs_struct", "pwd")?,
            path_mnt: o("path", "mnt")?,
            path_dentry: o("path", "dentry")?,
            file_path: o("file", "f_path")?,
            file_inode: o("file", "f_inode")?,
            inode_ino: o("inode", "i_ino")?,
            inode_sb: o("inode", "i_sb")?,
            inode_mode: o("inode", "i_mode")?,
            inode_ctime_sec,
            inode_ctime_nsec,
            inode_size: o("inode", "i_size")?,
            sb_dev: o("super_block", "s_dev")?,
            dentry_parent: o("dentry", "d_parent")?,
            dentry_name_len: o("dentry", "d_name.len")?,
            dentry_name: o("dentry", "d_name.name")?,
            dentry_inode: o("dentry", "d_inode")?,
            dentry_iname: self.offset_of_any("dentry", &["d_shortname", "d_iname"])?,
            dentry_iname_len: self
                .array_len("dentry", "d_iname")
                .or_else(|_| self.array_len("shortname_store", "string"))?,
            dentry_hash_pprev: o("dentry", "d_hash.pprev")?,
            vfsmount_root: o("vfsmount", "mnt_root")?,
            mount_mnt: o("mount", "mnt")?,
            mount_parent: o("mount", "mnt_parent")?,
            mount_mountpoint: o("mount", "mnt_mountpoint")?,
            mount_id: o("mount", "mnt_id")?,
            task_nsproxy: o("task_struct", "nsproxy")?,
            nsproxy_mnt_ns: o("nsproxy", "mnt_ns")?,
            mnt_ns_inum: o("mnt_namespace", "ns.inum")?,
            task_thread_pid: o("task_struct", "thread_pid")?,
            pid_level: o("pid", "level")?,
            file_private_data: o("file", "private_data")?,
            socket_sk: o("socket", "sk")?,
            sock_sk_peer_pid: o("sock", "sk_peer_pid")?,
            pid_numbers: o("pid", "numbers")?,
            upid_nr: o("upid", "nr")?,
            req_opcode,
            req_cmd,
            io_open_filename,
            io_statx_filename,
            filename_name: o("filename", "name")?,
            ..Offsets::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn btf() -> Option<KernelBtf> {
        if !Path::new(VMLINUX_BTF).exists() {
            eprintln!("skipping: this kernel publishes no BTF at {VMLINUX_BTF}");
            return None;
        }
        Some(KernelBtf::load().expect("vmlinux BTF parses"))
    }

    #[test]
    fn offsets_are_inside_their_structs() {
        let Some(btf) = btf() else { return };
        let off = btf.offsets().unwrap();
        let task = btf.find_struct("task_struct").unwrap().size() as u32;
        for o in [
            off.task_pid,
            off.task_tgid,
            off.task_real_parent,
            off.task_mm,
        ] {
            assert!(
                o > 0 && o < task,
                "offset {o} outside task_struct ({task} bytes)"
            );
        }
        // pid and tgid are adjacent pid_t members in every kernel since 2.6.
        assert_eq!(off.task_tgid, off.task_pid + 4);
        assert_eq!(off.mm_arg_end, off.mm_arg_start + 8);
    }

    #[test]
    fn member_inside_anonymous_union_is_found() {
        let Some(btf) = btf() else { return };
        // `mm_struct` keeps all its members inside an anonymous struct.
        assert!(btf.offset_of("mm_struct", "arg_start").unwrap() > 0);
        // dotted paths go through named members: file.f_path.dentry
        let f_path = btf.offset_of("file", "f_path").unwrap();
        let dentry = btf.offset_of("path", "dentry").unwrap();
        assert_eq!(
            btf.offset_of("file", "f_path.dentry").unwrap(),
            f_path + dentry
        );
    }

    #[test]
    fn missing_member_is_an_error_naming_it() {
        let Some(btf) = btf() else { return };
        let err = btf.offset_of("task_struct", "no_such_member").unwrap_err();
        assert!(
            err.to_string()
                .contains("task_struct has no member no_such_member"),
            "{err}"
        );
        assert!(matches!(
            btf.offset_of("no_such_struct", "x"),
            Err(BtfError::NoStruct(_))
        ));
    }
}

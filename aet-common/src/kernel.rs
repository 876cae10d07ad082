//! What the programs take from the kernel's own interfaces: the kfuncs they call, and the uapi
//! flag values they compare against.

/// Kernel functions (kfuncs) the programs call. aya cannot relocate a kfunc call, so a program
/// calls a marker helper number instead, with marker type ids in its arguments, and the loader
/// rewrites both into the running kernel's BTF ids before loading (`loader::link_kfuncs`).
pub mod kfunc {
    /// `void *bpf_rdonly_cast(const void *obj, u32 btf_id)`: a plain kernel address as a
    /// read-only, fault-safe BTF pointer of the given struct type.
    pub const RDONLY_CAST: i32 = 0x7ae7_0001;
    /// Marker type ids, by struct.
    pub const TYPE_MOUNT: i32 = 0x7ae7_0101;
    pub const TYPE_DENTRY: i32 = 0x7ae7_0102;
    pub const TYPE_FILE: i32 = 0x7ae7_0103;
    pub const TYPE_TASK: i32 = 0x7ae7_0104;
    /// Every marker type id and its struct's name.
    pub const TYPES: [(i32, &str); 4] = [
        (TYPE_MOUNT, "mount"),
        (TYPE_DENTRY, "dentry"),
        (TYPE_FILE, "file"),
        (TYPE_TASK, "task_struct"),
    ];
}

/// The kernel's user ABI flags aet reads (x86_64 values, `asm-generic`), defined once for the
/// programs, the monitor, the access classifier, the summary and enforcement alike.
pub mod uapi {
    /// `open(2)` flags.
    pub const O_ACCMODE: u32 = 0o3;
    pub const O_RDONLY: u32 = 0o0;
    pub const O_WRONLY: u32 = 0o1;
    pub const O_RDWR: u32 = 0o2;
    pub const O_CREAT: u32 = 0o100;
    pub const O_EXCL: u32 = 0o200;
    pub const O_TRUNC: u32 = 0o1000;
    pub const O_APPEND: u32 = 0o2000;
    pub const O_DIRECTORY: u32 = 0o200000;
    pub const O_NOFOLLOW: u32 = 0o400000;
    pub const O_PATH: u32 = 0o10000000;
    /// `__O_TMPFILE`: the bit that makes `O_TMPFILE` (which is `__O_TMPFILE | O_DIRECTORY`).
    pub const O_TMPFILE_BIT: u32 = 0o20000000;
    pub const O_TMPFILE: u32 = O_TMPFILE_BIT | O_DIRECTORY;
    /// What `creat(path, mode)` is: `open(path, O_CREAT | O_WRONLY | O_TRUNC, mode)`.
    pub const CREAT_FLAGS: u32 = O_CREAT | O_WRONLY | O_TRUNC;

    /// `open(2)` flags as arm and arm64 number them where they differ from the values above
    /// (`arch/arm64/include/uapi/asm/fcntl.h`): `O_DIRECTORY`, `O_NOFOLLOW`, `O_DIRECT`,
    /// `O_LARGEFILE`.
    const ARM_DIRECTORY: u32 = 0o40000;
    const ARM_NOFOLLOW: u32 = 0o100000;
    const ARM_DIRECT: u32 = 0o200000;
    const ARM_LARGEFILE: u32 = 0o400000;
    /// x86_64's `O_DIRECT` and `O_LARGEFILE` (the other two are above).
    const O_DIRECT: u32 = 0o40000;
    const O_LARGEFILE: u32 = 0o100000;

    /// arm's open flags in the numbering above, the one the ledger holds whatever machine
    /// recorded it (so one policy and one audit read every ledger alike).
    pub const fn open_flags_from_arm(f: u32) -> u32 {
        let moved = ARM_DIRECTORY | ARM_NOFOLLOW | ARM_DIRECT | ARM_LARGEFILE;
        let mut out = f & !moved;
        if f & ARM_DIRECTORY != 0 {
            out |= O_DIRECTORY;
        }
        if f & ARM_NOFOLLOW != 0 {
            out |= O_NOFOLLOW;
        }
        if f & ARM_DIRECT != 0 {
            out |= O_DIRECT;
        }
        if f & ARM_LARGEFILE != 0 {
            out |= O_LARGEFILE;
        }
        out
    }

    /// This machine's open flags in the ledger's numbering.
    pub const fn open_flags_from_native(f: u32) -> u32 {
        if cfg!(target_arch = "aarch64") {
            open_flags_from_arm(f)
        } else {
            f
        }
    }
    /// `mmap(2)` protections and flags.
    pub const PROT_READ: u32 = 1;
    pub const PROT_WRITE: u32 = 2;
    pub const PROT_EXEC: u32 = 4;
    /// The mapping type bits of `mmap`'s flags: `MAP_SHARED` (1), `MAP_PRIVATE` (2),
    /// `MAP_SHARED_VALIDATE` (3).
    pub const MAP_TYPE: u32 = 0x0f;
    pub const MAP_SHARED: u32 = 0x01;
    pub const MAP_PRIVATE: u32 = 0x02;
    pub const MAP_SHARED_VALIDATE: u32 = 0x03;
    pub const MAP_ANONYMOUS: u32 = 0x20;
    /// `*at` calls.
    pub const AT_FDCWD: i32 = -100;
    pub const AT_EMPTY_PATH: u32 = 0x1000;
    /// `fcntl` commands that duplicate an fd.
    pub const F_DUPFD: u64 = 0;
    pub const F_DUPFD_CLOEXEC: u64 = 1030;
    /// `st_mode` file types.
    pub const S_IFMT: u16 = 0o170000;
    pub const S_IFREG: u16 = 0o100000;
    pub const S_IFDIR: u16 = 0o040000;
    pub const S_IFSOCK: u16 = 0o140000;
}

#[cfg(test)]
mod tests {
    use super::uapi::*;

    /// arm's four moved flags land on x86_64's, every other bit stays.
    #[test]
    fn arm_open_flags_in_the_ledger_s_numbering() {
        assert_eq!(open_flags_from_arm(0o40000), O_DIRECTORY);
        assert_eq!(open_flags_from_arm(0o100000), O_NOFOLLOW);
        assert_eq!(open_flags_from_arm(0o200000), 0o40000);
        assert_eq!(open_flags_from_arm(0o400000), 0o100000);
        let same = O_CREAT | O_TRUNC | O_RDWR | O_PATH | O_TMPFILE_BIT | O_APPEND;
        assert_eq!(open_flags_from_arm(same), same);
        // AArch32's glibc opens a directory with O_LARGEFILE too.
        assert_eq!(
            open_flags_from_arm(0o40000 | 0o400000),
            O_DIRECTORY | 0o100000
        );
    }
}

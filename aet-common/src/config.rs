//! What userspace sets before load and the programs read: kernel struct offsets from BTF, the
//! run configuration, and the per-task and per-fd state the programs keep.

use core::mem::size_of;

/// Byte offsets of kernel struct members, read from the running kernel's BTF by userspace and
/// handed to the programs at load time. Nothing here is hard-coded.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Offsets {
    pub task_pid: u32,
    pub task_tgid: u32,
    pub task_real_parent: u32,
    pub task_mm: u32,
    pub task_exit_code: u32,
    /// `task_struct.thread_info.status` (where x86 keeps `TS_COMPAT`).
    pub task_ti_status: u32,
    /// `task_struct.cred` (the subjective credentials).
    pub task_cred: u32,
    /// `cred.uid.val` and `cred.gid.val` (real ids).
    pub cred_uid: u32,
    pub cred_gid: u32,
    /// `task_struct.cgroups`, `css_set.dfl_cgrp`, `cgroup.kn`, `kernfs_node.id`: the chain to the
    /// task's cgroup v2 id.
    pub task_cgroups: u32,
    pub css_set_dfl_cgrp: u32,
    pub cgroup_kn: u32,
    pub kernfs_node_id: u32,
    /// `cgroup.level` (the root is 0).
    pub cgroup_level: u32,
    /// `cgroup.self.parent` and `cgroup_subsys_state.cgroup`: a cgroup's parent.
    pub cgroup_parent_css: u32,
    pub css_cgroup: u32,
    /// `task_struct.start_time` (with the tid, a task's identity over time).
    pub task_start_time: u32,
    pub mm_arg_start: u32,
    pub mm_arg_end: u32,
    /// `mm_struct.exe_file`.
    pub mm_exe_file: u32,
    /// `task_struct.files`, `files_struct.fdt`, `files_struct.fd_array`, `fdtable.fd`,
    /// `fdtable.max_fds`.
    pub task_files: u32,
    pub files_fdt: u32,
    pub files_fd_array: u32,
    pub fdt_fd: u32,
    pub fdt_max_fds: u32,
    /// Entries of `files_struct.fd_array`.
    pub fd_array_len: u32,
    /// `task_struct.fs`, `fs_struct.root`, `fs_struct.pwd` (each a `struct path`).
    pub task_fs: u32,
    pub fs_root: u32,
    pub fs_pwd: u32,
    /// `path.mnt`, `path.dentry`.
    pub path_mnt: u32,
    pub path_dentry: u32,
    /// `file.f_path`, `file.f_inode`.
    pub file_path: u32,
    pub file_inode: u32,
    /// `inode.i_ino`, `inode.i_sb`, `inode.i_mode`, `super_block.s_dev`.
    pub inode_ino: u32,
    pub inode_sb: u32,
    pub inode_mode: u32,
    pub sb_dev: u32,
    /// `dentry.d_parent`, `dentry.d_name.len`, `dentry.d_name.name`, `dentry.d_inode`, the
    /// inline short name, `dentry.d_hash.pprev` (NULL once unhashed).
    pub dentry_parent: u32,
    pub dentry_name_len: u32,
    pub dentry_name: u32,
    pub dentry_inode: u32,
    pub dentry_iname: u32,
    pub dentry_hash_pprev: u32,
    /// Size of the inline short name.
    pub dentry_iname_len: u32,
    /// `vfsmount.mnt_root`; `mount.mnt` (where the vfsmount sits in its `struct mount`),
    /// `mount.mnt_parent`, `mount.mnt_mountpoint`, `mount.mnt_id`.
    pub vfsmount_root: u32,
    pub mount_mnt: u32,
    pub mount_parent: u32,
    pub mount_mountpoint: u32,
    pub mount_id: u32,
    /// `task_struct.nsproxy`, `nsproxy.mnt_ns`, `mnt_namespace.ns.inum`.
    pub task_nsproxy: u32,
    pub nsproxy_mnt_ns: u32,
    pub mnt_ns_inum: u32,
    /// `task_struct.thread_pid`, `pid.level` (0 in the initial pid namespace).
    pub task_thread_pid: u32,
    pub pid_level: u32,
    /// `file.private_data` (a socket file's `struct socket`), `socket.sk`, `sock.sk_peer_pid`,
    /// `pid.numbers`, `upid.nr`: the peer process of a unix socket, as a host pid.
    pub file_private_data: u32,
    pub socket_sk: u32,
    pub sock_sk_peer_pid: u32,
    pub pid_numbers: u32,
    pub upid_nr: u32,
    /// `io_kiocb.opcode`, `io_kiocb.cmd`, `io_open.filename`, `io_statx.filename`,
    /// `filename.name`. 0 when the kernel has no io_uring.
    pub req_opcode: u32,
    pub req_cmd: u32,
    pub io_open_filename: u32,
    pub io_statx_filename: u32,
    pub filename_name: u32,
    /// `pt_regs` member holding the syscall number at syscall exit (`orig_ax` on x86_64).
    pub regs_nr: u32,
    /// `pt_regs` members holding syscall arguments 0..5 for native syscalls.
    pub regs_args: [u32; 6],
    /// `pt_regs` members holding syscall arguments 0..5 for compat (32-bit) syscalls.
    pub regs_args_compat: [u32; 6],
    /// For the legacy object (no `bpf_task_pt_regs`): `task_struct.stack`, and where the saved
    /// user registers sit from the stack's base (`THREAD_SIZE - sizeof(struct pt_regs)`: the
    /// kernel's `task_pt_regs`). A wrong value is caught at every syscall (the registers'
    /// syscall number is checked against the tracepoint's) and counted, never trusted.
    pub task_stack: u32,
    pub stack_regs: u32,
    /// An inode's change time: its seconds (8 bytes) and nanoseconds (the low 30 bits of the
    /// 4 or 8 bytes there; 6.13 keeps a flag above them).
    pub inode_ctime_sec: u32,
    pub inode_ctime_nsec: u32,
    /// `inode.i_size`.
    pub inode_size: u32,
}

/// The programs' configuration, a global (`CONFIG`) set by userspace before load.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// Where the classic tracepoints' records keep what the programs read (their `format`).
    pub fields: RecordFields,
    /// The bit that marks a compat syscall (x86_64: `TS_COMPAT` of `thread_info.status`, at
    /// `offsets.task_ti_status` of the task; aarch64: `PSR_MODE32_BIT` of the saved `pstate`, at
    /// `offsets.task_ti_status` of the registers); 0 when there is no compat ABI.
    pub compat_mask: u32,
    /// 1: the mark is in the saved user registers, not the task.
    pub compat_in_regs: u32,
    /// aet's own mount namespace: a task in another one gets file-system walks for its objects.
    pub host_mntns: u32,
    pub offsets: Offsets,
    /// 1: socket payloads are not captured (the benchmark's baseline for what their capture
    /// costs: `AET_DEBUG_NO_PAYLOAD`).
    pub no_payload: u32,
    /// 1: the record-building classic tracepoint programs mark each run on their CPU for their
    /// witnesses (`witness`), attached where the kernel counts a classic program's skipped runs
    /// nowhere (before 6.7).
    pub witness: u32,
}

const _: () = assert!(size_of::<Offsets>() == 328);
const _: () = assert!(size_of::<Config>() == 380);

/// Offsets in the records of the classic tracepoints the programs attach to, read from each
/// one's `format` file at load (they differ between kernels). The programs run there with
/// preemption off on every kernel, where a raw tracepoint's run preemptibly since 7.0.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordFields {
    /// `task:task_newtask`: the new task's thread id (`pid`) and its `clone_flags` (8 bytes).
    pub newtask_pid: u32,
    pub newtask_flags: u32,
    /// `sched:sched_process_exit`: `group_dead` (1 byte), or 0 where the record has none (the
    /// leader's end is then the process's).
    pub exit_group_dead: u32,
    /// `sched:sched_process_exec`: the `filename` (a `__data_loc`) and `old_pid`.
    pub exec_filename: u32,
    pub exec_old_pid: u32,
    /// `io_uring:io_uring_submit_req` (`_sqe` before 6.4): the request (`req`, a pointer), or 0
    /// where the record names none (before 5.11): then `opcode` (1 byte) is read from the
    /// record itself (`io_opcode`, else 0).
    pub io_req: u32,
    pub io_opcode: u32,
    pub _pad: u32,
}

const _: () = assert!(size_of::<RecordFields>() == 32);

/// An exec's entry, kept until `sched_process_exec` or the exec's failure (keyed by thread id).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Inflight {
    pub syscall: u16,
    pub _pad: u16,
    pub dirfd: i32,
    /// User pointer to the path argument.
    pub path: u64,
    /// User pointer to `argv`.
    pub aux_ptr: u64,
    pub flags: u64,
    pub mode: u64,
}

const _: () = assert!(size_of::<Inflight>() == 40);

/// Byte accounting of one open fd of one process (`FILEIO`, keyed by `tgid << 32 | fd`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FileIo {
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub dev: u64,
    pub ino: u64,
    pub mnt_id: u32,
    /// One of [`fileio`].
    pub class: u32,
    /// Bits from [`fileio`]'s `LISTED`/`MAPPED`.
    pub marks: u32,
    pub _pad: u32,
}

const _: () = assert!(size_of::<FileIo>() == 48);

/// Values of [`FileIo::class`] and bits of [`FileIo::marks`].
pub mod fileio {
    /// Not a file aet accounts (pipe, socket, device): reads and writes are ignored.
    pub const IGNORED: u32 = 0;
    /// A regular file: bytes are counted.
    pub const REGULAR: u32 = 1;
    /// A directory: its first listing is recorded.
    pub const DIRECTORY: u32 = 2;
    /// The directory's listing was recorded.
    pub const LISTED: u32 = 1 << 0;
    /// The file's first mapping was recorded.
    pub const MAPPED: u32 = 1 << 1;
    /// The file's first executable mapping (`PROT_EXEC`) was recorded: its code ran (a shared
    /// library's text), which the ledger identifies by content.
    pub const MAPPED_EXEC: u32 = 1 << 4;
    /// A fanotify group's fd: the events read from it carry fds, each recorded as an `fd`
    /// row.
    pub const FANOTIFY: u32 = 3;
    /// A socket: the first bytes of its first message are captured (the names a connection
    /// carries), and of every message both ways when it talks to a DNS port.
    pub const SOCKET: u32 = 4;
    /// The socket's first message was captured.
    pub const SENT: u32 = 1 << 2;
    /// The socket is connected to port 53: every message it sends and receives is captured
    /// (each is a DNS query or answer).
    pub const DNS: u32 = 1 << 3;
}

//! io_uring: a request submitted through it (its open and statx paths, the kernel's copy). Its
//! results and any data it moves are not recorded, so userspace marks such a run incomplete.

use aet_common::{EventKind, Syscall, counter, section, witness};
use aya_ebpf::{macros::tracepoint, programs::TracePointContext};

use super::sched::record_field;
use crate::{
    kernel::kread,
    maps::{CONFIG, cfg, count, mark, offsets},
    record::{KERNEL, capture_str, claim, fill_header, header, scratch, send},
    task::Task,
};

const IORING_OP_OPENAT: u8 = 18;
const IORING_OP_STATX: u8 = 21;
const IORING_OP_OPENAT2: u8 = 28;

/// A request submitted to io_uring. Its open and statx paths are recorded (the kernel's copy);
/// their results and any reads are not, so userspace marks a run that used io_uring incomplete.
#[tracepoint(category = "io_uring", name = "io_uring_submit_req")]
pub(crate) fn io_uring_submit_req(ctx: TracePointContext) -> u32 {
    mark(witness::IO_URING);
    let mut task = Task::current();
    if !task.in_scope() {
        return 0;
    }
    claim();
    count(task.run, counter::IO_URING_SUBMITTED);
    let o = offsets();
    let (req, opcode): (u64, u8) = if cfg(&CONFIG.fields.io_req) != 0 {
        let req: u64 = record_field(&ctx, &CONFIG.fields.io_req);
        (req, kread(req, cfg(&o.req_opcode)))
    } else {
        // A record without the request (before 5.11): the opcode alone.
        (0, record_field(&ctx, &CONFIG.fields.io_opcode))
    };
    let Some(s) = scratch() else { return 0 };
    fill_header(
        header(s),
        &mut task,
        EventKind::IoUring,
        Syscall::None as u16,
        0,
    );
    header(s).aux = opcode as u64;
    let cmd = req + cfg(&o.req_cmd) as u64;
    let filename: u64 = match opcode {
        _ if req == 0 => 0,
        IORING_OP_OPENAT | IORING_OP_OPENAT2 => kread(cmd, cfg(&o.io_open_filename)),
        IORING_OP_STATX => kread(cmd, cfg(&o.io_statx_filename)),
        _ => 0,
    };
    if filename != 0 {
        let name: u64 = kread(filename, cfg(&o.filename_name));
        capture_str::<KERNEL>(s, section::PATH, name);
    }
    send(s);
    0
}

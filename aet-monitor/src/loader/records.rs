//! Where the classic tracepoints' records keep what the programs read. Each tracepoint's
//! `format` file says it; the layouts differ between kernels (a `comm` became a `__data_loc`,
//! `sched_process_exit` gained `group_dead`), so the offsets are read at load and handed to the
//! programs in `CONFIG`. The syscall tracepoints' records have had one layout since they exist,
//! which the programs read at fixed offsets (`sys_exit` is on every syscall of the machine):
//! it is checked here.

use aet_common::RecordFields;
use aet_kernel::tracefs::{self, Field};

use super::{LoadError, tracepoint_name};

/// A tracepoint's fields, from its `format`.
struct Record {
    name: String,
    fields: Vec<(String, Field)>,
}

impl Record {
    fn read(category: &str, name: &'static str) -> Result<Self, LoadError> {
        let name = format!("{category}/{}", tracepoint_name(category, name));
        let (category, tp) = name.split_once('/').expect("category/name");
        let fields = tracefs::fields(category, tp).map_err(|e| LoadError::RecordField {
            tracepoint: name.clone(),
            problem: format!("its format cannot be read: {e}"),
        })?;
        Ok(Self { name, fields })
    }

    fn find(&self, field: &str) -> Option<Field> {
        self.fields
            .iter()
            .find(|(n, _)| n == field)
            .map(|(_, f)| *f)
    }

    /// The offset of `field`, which must be `size` bytes.
    fn offset(&self, field: &str, size: u32) -> Result<u32, LoadError> {
        match self.find(field) {
            Some(f) if f.size == size => Ok(f.offset),
            Some(f) => Err(self.problem(format!(
                "field {field} is {} bytes, where the programs read {size}",
                f.size
            ))),
            None => Err(self.problem(format!("its record has no field {field}"))),
        }
    }

    /// `field` must sit at `offset` (a layout the programs read at a fixed offset).
    fn fixed(&self, field: &str, offset: u32, size: u32) -> Result<(), LoadError> {
        let at = self.offset(field, size)?;
        if at != offset {
            return Err(self.problem(format!(
                "field {field} is at offset {at}, where the programs read {offset}"
            )));
        }
        Ok(())
    }

    fn problem(&self, problem: String) -> LoadError {
        LoadError::RecordField {
            tracepoint: self.name.clone(),
            problem,
        }
    }
}

/// The offsets the programs read, for this kernel.
pub(super) fn record_fields() -> Result<RecordFields, LoadError> {
    let sys_exit = Record::read("raw_syscalls", "sys_exit")?;
    sys_exit.fixed("id", 8, 8)?;
    sys_exit.fixed("ret", 16, 8)?;
    Record::read("syscalls", "sys_enter_execve")?.fixed("filename", 16, 8)?;
    Record::read("syscalls", "sys_enter_execveat")?.fixed("fd", 16, 8)?;
    let newtask = Record::read("task", "task_newtask")?;
    let exit = Record::read("sched", "sched_process_exit")?;
    let exec = Record::read("sched", "sched_process_exec")?;
    let io = Record::read("io_uring", "io_uring_submit_req")?;
    Ok(RecordFields {
        newtask_pid: newtask.offset("pid", 4)?,
        newtask_flags: newtask.offset("clone_flags", 8)?,
        // Kernels before `group_dead` joined the record: the leader's end is the process's.
        exit_group_dead: match exit.find("group_dead") {
            Some(_) => exit.offset("group_dead", 1)?,
            None => 0,
        },
        exec_filename: exec.offset("filename", 4)?,
        exec_old_pid: exec.offset("old_pid", 4)?,
        // Kernels before 5.11 name no request in the record: its opcode only (the file an
        // open or statx names is not read).
        io_req: match io.find("req") {
            Some(_) => io.offset("req", 8)?,
            None => 0,
        },
        io_opcode: match io.find("req") {
            Some(_) => 0,
            None => io.offset("opcode", 1)?,
        },
        _pad: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_kernels_records_give_every_offset_the_programs_read() {
        tracefs::ensure_mounted().expect("tracefs");
        let f = record_fields().unwrap();
        assert!(f.newtask_pid >= 8 && f.newtask_flags >= 8, "{f:?}");
        assert!(f.exec_filename >= 8 && f.exec_old_pid >= 8, "{f:?}");
        assert!(f.io_req >= 8, "{f:?}");
    }

    #[test]
    fn a_field_of_another_size_or_place_is_named() {
        let r = Record {
            name: "raw_syscalls/sys_exit".into(),
            fields: vec![(
                "ret".into(),
                Field {
                    offset: 24,
                    size: 8,
                },
            )],
        };
        let e = r.fixed("ret", 16, 8).unwrap_err().to_string();
        assert_eq!(
            e,
            "tracepoint raw_syscalls/sys_exit: field ret is at offset 24, where the programs read 16"
        );
        let e = r.offset("ret", 4).unwrap_err().to_string();
        assert!(
            e.contains("field ret is 8 bytes, where the programs read 4"),
            "{e}"
        );
        let e = r.offset("id", 8).unwrap_err().to_string();
        assert!(e.ends_with("its record has no field id"), "{e}");
    }
}

//! Links the programs' kfunc calls to the running kernel. aya relocates no kfunc call, so a
//! program calls a marker helper number with marker type ids in its arguments
//! (`aet_common::kfunc`), and this rewrites both into the kernel's BTF ids before aya loads the
//! object. It must change nothing else in the object.

use aet_common::kfunc;

use super::LoadError;
use aet_kernel::btf::KernelBtf;

/// Links the programs' kfunc calls to the running kernel (aya relocates no kfunc call): every
/// call of the [`kfunc::RDONLY_CAST`] marker becomes a kfunc call of `bpf_rdonly_cast`, and every
/// load of a marker type id (`kfunc::TYPES`) into a register becomes the kernel's id of that
/// struct. Returns the patched object.
pub(super) fn link_kfuncs(elf: &[u8], btf: &KernelBtf) -> Result<Vec<u8>, LoadError> {
    use object::{Object as _, ObjectSection as _, SectionKind};
    const CALL: u8 = 0x85; // BPF_JMP | BPF_CALL
    const MOV64_IMM: u8 = 0xb7; // BPF_ALU64 | BPF_MOV | BPF_K
    const MOV32_IMM: u8 = 0xb4; // BPF_ALU | BPF_MOV | BPF_K
    const PSEUDO_KFUNC_CALL: u8 = 2;
    let cast = btf.func_id("bpf_rdonly_cast")?;
    let types = kfunc::TYPES
        .iter()
        .map(|&(marker, name)| Ok((marker, btf.struct_id(name)?)))
        .collect::<Result<Vec<_>, LoadError>>()?;
    let file = object::File::parse(elf).map_err(|e| LoadError::Kfunc(e.to_string()))?;
    let mut out = elf.to_vec();
    let mut calls = 0;
    for section in file.sections() {
        if section.kind() != SectionKind::Text {
            continue;
        }
        let Some((start, size)) = section.file_range() else {
            continue;
        };
        let code = out
            .get_mut(start as usize..(start + size) as usize)
            .ok_or_else(|| {
                LoadError::Kfunc(format!("section {start}+{size} is outside the object"))
            })?;
        for insn in code.chunks_exact_mut(8) {
            let imm = i32::from_le_bytes([insn[4], insn[5], insn[6], insn[7]]);
            let new = match insn[0] {
                CALL if insn[1] == 0 && imm == kfunc::RDONLY_CAST => {
                    insn[1] = PSEUDO_KFUNC_CALL << 4;
                    calls += 1;
                    cast
                }
                MOV64_IMM | MOV32_IMM => match types.iter().find(|&&(m, _)| m == imm) {
                    Some(&(_, id)) => id,
                    None => continue,
                },
                _ => continue,
            };
            insn[4..8].copy_from_slice(&new.to_le_bytes());
        }
    }
    if calls == 0 {
        return Err(LoadError::Kfunc("the object calls no kfunc marker".into()));
    }
    Ok(out)
}

#[cfg(test)]
pub(super) mod tests {
    use std::path::Path;

    use super::*;

    /// The kernel stand-in of `tests/fixtures/kfunc.btf` (see `make_kfunc_btf.py`): ids no real
    /// kernel gives these types, an empty `mount` stand-in before the real one, and decoys.
    pub(in crate::loader) fn fixture() -> KernelBtf {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kfunc.btf");
        KernelBtf::load_from(&p).expect("the BTF fixture loads")
    }

    /// Every kfunc marker in the embedded object is rewritten into the (fixture) kernel's own
    /// ids, and nothing else changes.
    #[test]
    fn kfunc_markers_are_linked_to_the_kernels_ids() {
        let btf = fixture();
        let object = super::super::EBPF_OBJECT;
        let linked = link_kfuncs(object, &btf).unwrap();
        assert_eq!(linked.len(), object.len());
        let want: Vec<(i32, u32)> = [
            (kfunc::TYPE_MOUNT, 4),
            (kfunc::TYPE_DENTRY, 5),
            (kfunc::TYPE_FILE, 6),
            (kfunc::TYPE_TASK, 7),
        ]
        .into();
        assert_eq!(
            want.len(),
            kfunc::TYPES.len(),
            "every marker type is in the fixture"
        );
        let (mut calls, mut types, mut changed) = (0, 0, 0);
        let mut seen_types = std::collections::BTreeSet::new();
        for (old, new) in object.chunks_exact(8).zip(linked.chunks_exact(8)) {
            if old == new {
                continue;
            }
            changed += 1;
            let imm = |i: &[u8]| i32::from_le_bytes([i[4], i[5], i[6], i[7]]);
            match old[0] {
                0x85 => {
                    assert_eq!(imm(old), kfunc::RDONLY_CAST);
                    assert_eq!((new[0], new[1]), (0x85, 0x20), "a kfunc call");
                    assert_eq!(imm(new), 11, "bpf_rdonly_cast, not its decoy");
                    calls += 1;
                }
                0xb7 | 0xb4 => {
                    let (_, id) = want
                        .iter()
                        .find(|(m, _)| *m == imm(old))
                        .expect("a marker type id");
                    assert_eq!(imm(new) as u32, *id);
                    assert_eq!(old[..4], new[..4], "only the immediate changes");
                    seen_types.insert(*id);
                    types += 1;
                }
                other => panic!("instruction {other:#x} changed"),
            }
        }
        assert!(
            calls > 0 && types >= calls,
            "{calls} calls, {types} type ids"
        );
        assert_eq!(changed, calls + types);
        assert_eq!(
            seen_types.len(),
            kfunc::TYPES.len(),
            "every marker type is used and linked"
        );
        // No marker is left behind in the program text.
        let again = link_kfuncs(&linked, &btf);
        assert!(matches!(again, Err(LoadError::Kfunc(_))), "{again:?}");
    }

    /// A kernel without the kfunc or one of the types is refused, naming what is missing.
    #[test]
    fn a_kernel_without_the_kfunc_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes =
            std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kfunc.btf"))
                .unwrap();
        // Rename every string `bpf_rdonly_cast` (and its decoy) in the string section.
        let at = bytes
            .windows(15)
            .position(|w| w == b"bpf_rdonly_cast")
            .unwrap();
        bytes[at] = b'x';
        let p = dir.path().join("old.btf");
        std::fs::write(&p, &bytes).unwrap();
        let btf = KernelBtf::load_from(&p).unwrap();
        let e = link_kfuncs(super::super::EBPF_OBJECT, &btf).unwrap_err();
        assert!(e.to_string().contains("bpf_rdonly_cast"), "{e}");
    }
}

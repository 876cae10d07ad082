//! Provenance's tests: what a later phase loaded that an earlier one wrote, classed by place.

fn is_bytecode_of(pyc: &[u8], src: &[u8]) -> bool {
    super::source_of_bytecode(pyc).as_deref() == Some(src)
}

#[test]
fn bytecode_is_named_by_its_source() {
    let src = b"/r/tests/test_a.py";
    for pyc in [
        &b"/r/tests/__pycache__/test_a.cpython-311.pyc"[..],
        b"/r/tests/__pycache__/test_a.cpython-311-pytest-9.2.0.pyc",
        b"/r/tests/__pycache__/test_a.cpython-311.pyc.140234",
    ] {
        assert!(is_bytecode_of(pyc, src), "{}", String::from_utf8_lossy(pyc));
    }
    for pyc in [
        &b"/r/tests/__pycache__/test_b.cpython-311.pyc"[..],
        b"/r/tests/test_a.cpython-311.pyc",
        b"/r/__pycache__/test_a.cpython-311.pyc",
        b"/r/tests/__pycache__/test_a.cpython-311.py",
        b"/r/tests/__pycache__/test_a.cpython-311.pycx",
    ] {
        assert!(
            !is_bytecode_of(pyc, src),
            "{}",
            String::from_utf8_lossy(pyc)
        );
    }
}

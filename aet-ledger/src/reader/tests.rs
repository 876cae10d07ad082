//! Unit tests of `reader`.

use arrow_buffer::Buffer;
use arrow_data::ArrayData;

use super::*;

/// A ledger written by aet with schema version 2 (before the fd, process and watch rows):
/// still read, the columns added since null in every row, whole or projected.
#[test]
fn a_schema_2_ledger_reads_with_the_new_columns_null() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/schema2-ledger.arrow");
    let mut l = Ledger::open(&path).unwrap();
    let m = l.meta().unwrap();
    assert_eq!(m.schema_version.as_deref(), Some("2"));
    let mut rows = Vec::new();
    while let Some(b) = l.next_batch().unwrap() {
        rows.extend(schema::rows_of(&b));
    }
    assert_eq!(rows.len() as u64, m.events_recorded.unwrap());
    assert!(rows.iter().any(|r| r.kind == "exec"));
    assert!(rows.iter().all(|r| r.fd_origin.is_none()
        && r.target_pid.is_none()
        && r.target_in_run.is_none()
        && r.source_fd.is_none()
        && r.ptrace_request.is_none()));
    // A projection, as the audit reads its columns.
    let cols = &[
        schema::col::SEQ,
        schema::col::KIND,
        schema::col::PATH,
        schema::col::TARGET_PID,
    ];
    let mut l = Ledger::open_columns(&path, cols).unwrap();
    let b = l.next_batch().unwrap().unwrap();
    let sch = b.schema();
    let names: Vec<&str> = sch.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names, *cols);
    assert_eq!(
        b.column_by_name(schema::col::TARGET_PID)
            .unwrap()
            .null_count(),
        b.num_rows()
    );
}

fn binary(offsets: &[i32], values: &[u8], nulls: Option<&[bool]>) -> ArrayData {
    let mut b = ArrayData::builder(DataType::Binary)
        .len(offsets.len() - 1)
        .add_buffer(Buffer::from_slice_ref(offsets))
        .add_buffer(Buffer::from_slice_ref(values));
    if let Some(n) = nulls {
        b = b.null_bit_buffer(Some(Buffer::from_iter(n.iter().copied())));
    }
    // SAFETY: the data is only given to `check_array`, which is what is under test.
    unsafe { b.build_unchecked() }
}

#[test]
fn check_array_accepts_what_arrow_accepts() {
    let ok = binary(&[0, 3, 3, 7], b"abcdefg", None);
    ok.validate_full().expect("arrow accepts it");
    check_array(&ok).expect("so does check_array");
    // Offsets under nulls are checked too: `value(i)` trusts them whatever the bitmap says.
    let all_null = binary(&[0, 9, 2], b"ab", Some(&[false, false]));
    assert!(check_array(&all_null).is_err());
}

#[test]
fn check_array_refuses_offsets_arrow_refuses() {
    for (offsets, what) in [
        (&[0, 5, 3, 7][..], "decreasing"),
        (&[0, 3, 9][..], "past the values"),
        (&[-1, 3, 7][..], "negative"),
    ] {
        let bad = binary(offsets, b"abcdefg", None);
        assert!(bad.validate_full().is_err(), "arrow refuses {what}");
        assert!(check_array(&bad).is_err(), "check_array refuses {what}");
    }
    // A decreasing offset under a non-null value, in a column with one null.
    let bad = binary(&[0, 5, 3, 7], b"abcdefg", Some(&[true, true, false]));
    assert!(check_array(&bad).is_err());
}

#[test]
fn check_array_checks_the_values_of_a_list() {
    let child = binary(&[0, 4, 2], b"abcd", None);
    let field = Arc::new(Field::new("item", DataType::Binary, true));
    let list = unsafe {
        ArrayData::builder(DataType::List(field))
            .len(1)
            .add_buffer(Buffer::from_slice_ref([0i32, 2]))
            .child_data(vec![child])
            .build_unchecked()
    };
    assert!(check_array(&list).is_err());
    let text = ArrayData::builder(DataType::Utf8)
        .len(0)
        .add_buffer(Buffer::from_slice_ref([0i32]))
        .add_buffer(Buffer::from_slice_ref(b""))
        .build()
        .unwrap();
    assert!(
        check_array(&text).is_err(),
        "text columns are projected as binary; anything else is refused"
    );
}

#[test]
fn lengths_past_the_file_are_errors_never_allocations() {
    let dir = tempfile::tempdir().unwrap();
    let path =
        super::super::writer::sample_ledger(&dir.path().join("l100.arrow"), 100, HashMap::new());
    let bytes = std::fs::read(&path).unwrap();
    let first = super::super::chain::batch_spans(&bytes).unwrap()[0].start as i64;
    // The footer's block: offset (i64), metadata length (i32, padded), body length (i64).
    let at = bytes
        .windows(8)
        .rposition(|w| w == first.to_le_bytes())
        .unwrap();
    let mut b = bytes.clone();
    b[at + 16..at + 24].copy_from_slice(&(1i64 << 50).to_le_bytes());
    let p = dir.path().join("huge-block.arrow");
    std::fs::write(&p, &b).unwrap();
    for open in [Ledger::open as fn(&Path) -> _, |p| {
        Ledger::open_columns(p, &["seq"])
    }] {
        let e = open(&p).err().expect("an error").to_string();
        assert!(e.contains("lies outside the file"), "{e}");
        assert!(e.contains("huge-block.arrow"), "{e}");
    }
    // An unfinished file whose last message declares a body past the end: the batches
    // before it are read and the tail is named.
    let spans = super::super::chain::batch_spans(&bytes).unwrap();
    let mut cut = bytes[..spans[0].end].to_vec();
    let meta_at = spans[0].start;
    let mut tail = bytes[meta_at..spans[0].end].to_vec();
    // The message's body length is in its flatbuffer; a cut message does as well.
    tail.truncate(tail.len() / 2);
    cut.extend_from_slice(&tail);
    let p = dir.path().join("cut.arrow");
    std::fs::write(&p, &cut).unwrap();
    let mut l = Ledger::open(&p).unwrap();
    assert_eq!(l.form(), Form::Unfinished);
    assert_eq!(
        l.read_all()
            .unwrap()
            .iter()
            .map(|b| b.num_rows())
            .sum::<usize>(),
        100
    );
    assert!(
        l.damaged_tail
            .as_deref()
            .is_some_and(|t| t.contains("not a whole message")),
        "{:?}",
        l.damaged_tail
    );
}

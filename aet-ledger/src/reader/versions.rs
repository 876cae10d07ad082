//! Ledgers of older schema versions: the columns each version added, which a reader of an older
//! ledger gets as null columns, and the check that a ledger's schema is one this aet reads.

use super::*;

/// Columns added by schema version 3 (null when a version 2 ledger is read).
pub(crate) const ADDED_IN_3: [&str; 9] = [
    schema::col::NET_FAMILY,
    schema::col::NET_ADDRESS,
    schema::col::NET_ADDRESS_RAW,
    schema::col::NET_PORT,
    schema::col::FD_ORIGIN,
    schema::col::TARGET_PID,
    schema::col::TARGET_IN_RUN,
    schema::col::SOURCE_FD,
    schema::col::PTRACE_REQUEST,
];

/// Columns added by schema version 4 (null when a version 3 ledger is read: every row of it is
/// the `agent` phase).
pub(crate) const ADDED_IN_4: [&str; 1] = [schema::col::PHASE];

/// Columns added by schema version 5 (null when an older ledger is read).
pub(crate) const ADDED_IN_5: [&str; 7] = [
    schema::col::HOST,
    schema::col::HOST_RAW,
    schema::col::HOST_SOURCE,
    schema::col::DNS_TYPE,
    schema::col::DNS_RCODE,
    schema::col::DNS_ANSWERS,
    schema::col::NET_DECISION,
];

/// Columns added by schema version 6 (null when an older ledger is read).
pub(crate) const ADDED_IN_6: [&str; 3] = [
    schema::col::NET_REASON,
    schema::col::SERVER_NAME,
    schema::col::SERVER_NAME_RAW,
];

/// Columns added by schema version 7 (null when an older ledger is read).
pub(crate) const ADDED_IN_7: [&str; 2] = [schema::col::SHA256, schema::col::SHA256_ERROR];

/// What a ledger of `version` lacks (`None`: a version this build does not read).
fn lacks(version: &str) -> Option<Vec<&'static str>> {
    let mut v: Vec<&'static str> = Vec::new();
    match version {
        SCHEMA_VERSION => return Some(v),
        "6" => {
            v.extend(ADDED_IN_7);
            return Some(v);
        }
        "5" => {}
        "4" => v.extend(ADDED_IN_5),
        "3" => v.extend(ADDED_IN_4.iter().chain(&ADDED_IN_5)),
        "2" => v.extend(ADDED_IN_3.iter().chain(&ADDED_IN_4).chain(&ADDED_IN_5)),
        _ => return None,
    }
    v.extend(ADDED_IN_6);
    v.extend(ADDED_IN_7);
    Some(v)
}

/// Checks that `schema` is a ledger schema this build reads; returns the columns it lacks
/// because an older version did not have them.
pub(super) fn check_schema(path: &Path, schema: &Schema) -> Result<Vec<&'static str>, ReadError> {
    let bad = |reason: String| ReadError::Schema {
        path: path.to_owned(),
        reason,
    };
    let may_lack = match schema.metadata().get(meta::SCHEMA_VERSION) {
        None => return Err(bad(format!("no {} metadata", meta::SCHEMA_VERSION))),
        Some(v) => lacks(v).ok_or_else(|| {
            bad(format!(
                "schema version {v}, this build reads versions 2 to {SCHEMA_VERSION}"
            ))
        })?,
    };
    let expected = schema::schema(HashMap::new());
    let mut missing = Vec::new();
    for field in expected.fields() {
        match schema.field_with_name(field.name()) {
            Ok(f) if f.data_type() == field.data_type() => {}
            Ok(f) => {
                return Err(bad(format!(
                    "column {} is {}, expected {}",
                    field.name(),
                    f.data_type(),
                    field.data_type()
                )));
            }
            Err(_) => match may_lack.iter().find(|c| **c == field.name()) {
                Some(c) => missing.push(*c),
                None => return Err(bad(format!("column {} is missing", field.name()))),
            },
        }
    }
    Ok(missing)
}

/// `b` with the columns `want` in that order: its own by name, a null column for each it lacks.
pub(super) fn fill_missing(b: &RecordBatch, want: &[Field]) -> Result<RecordBatch, ArrowError> {
    let have = b.schema();
    let (fields, columns): (Vec<Field>, Vec<_>) = want
        .iter()
        .map(|f| match have.index_of(f.name()) {
            Ok(i) => (have.field(i).clone(), b.column(i).clone()),
            Err(_) => (
                f.clone().with_nullable(true),
                arrow_array::new_null_array(f.data_type(), b.num_rows()),
            ),
        })
        .unzip();
    RecordBatch::try_new(
        Arc::new(Schema::new_with_metadata(
            fields,
            b.schema().metadata().clone(),
        )),
        columns,
    )
}

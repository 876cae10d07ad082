//! Decoding Arrow's flatbuffers without a crash: Arrow's decoders panic on some damaged input (an
//! unknown type, a batch whose metadata does not match its buffers) instead of failing. These
//! turn the panic into an error, which the readers report as a corrupt file naming it.

use arrow_schema::{ArrowError, Schema};

thread_local! {
    /// Set while this thread decodes a batch, whose panics are caught and reported as a corrupt
    /// file (see [`decoding`]).
    static DECODING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the current thread is decoding a ledger batch: a panic hook can stay quiet then, as
/// the panic becomes a "corrupt ledger" error naming the file.
pub fn decoding() -> bool {
    DECODING.get()
}

/// Runs an Arrow reader's constructor, whose schema decoding panics on a type it does not know
/// (`Type <UNKNOWN 189> not supported`) instead of failing: the panic is the same error as a
/// failure, a file that cannot be read as it says.
pub(crate) fn guarded<T>(f: impl FnOnce() -> Result<T, ArrowError>) -> Result<T, ArrowError> {
    catching(f).unwrap_or_else(|panic| {
        Err(ArrowError::ParseError(format!(
            "a schema cannot be decoded ({})",
            panic_text(&*panic)
        )))
    })
}

/// What a caught panic of Arrow's decoders said.
pub(crate) fn panic_text(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("the decoder failed")
}

/// Runs `f` as a decoding (see [`decoding`]), its panic caught.
pub(crate) fn catching<T>(f: impl FnOnce() -> T) -> std::thread::Result<T> {
    DECODING.set(true);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    DECODING.set(false);
    r
}

/// A schema message's schema; `None` when it names a type Arrow does not know (Arrow's
/// conversion panics on one: a damaged file must be an error, never a crash).
pub(crate) fn fb_schema(fb: arrow_ipc::Schema<'_>) -> Option<Schema> {
    catching(|| arrow_ipc::convert::fb_to_schema(fb)).ok()
}

/// How the footer's schema differs from the head's, field by field (names, order, types,
/// nullability, field metadata); `None` when they agree.
pub(crate) fn schema_difference(head: &Schema, footer: &Schema) -> Option<String> {
    if head.fields() == footer.fields() {
        return None;
    }
    Some(
        head.fields()
            .iter()
            .zip(footer.fields().iter())
            .position(|(a, b)| a != b)
            .map_or_else(
                || {
                    format!(
                        "the head has {} columns, the footer {}",
                        head.fields().len(),
                        footer.fields().len()
                    )
                },
                |i| {
                    format!(
                        "column {i} is {:?} ({}) at the head and {:?} ({}) in the footer",
                        head.field(i).name(),
                        head.field(i).data_type(),
                        footer.field(i).name(),
                        footer.field(i).data_type()
                    )
                },
            ),
    )
}

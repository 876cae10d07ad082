//! How one ledger column is built, stored and read back: the column kinds the column table in
//! [`super::schema`] is made of.
//!
//! A kind knows the Arrow field(s) of a column, what the writer's row holds for it ([`Kind::In`],
//! borrowed where it can be), what a reader gets back ([`Kind::Out`], owned), and how to go from
//! one to the other. Most kinds are one Arrow field; a path is two (`X` as lossy UTF-8 and
//! `X_raw` with the exact bytes when they are not UTF-8).

use std::{borrow::Cow, fmt::Debug, sync::Arc};

use arrow_array::{
    Array, ArrayRef, ArrowPrimitiveType, BinaryArray, BooleanArray, ListArray, PrimitiveArray,
    RecordBatch, StringArray,
    builder::{BinaryBuilder, BooleanBuilder, ListBuilder, PrimitiveBuilder, StringBuilder},
    cast::AsArray as _,
    types::{Int32Type, Int64Type, UInt32Type, UInt64Type},
};
use arrow_schema::{DataType, Field};

/// One column kind.
pub trait Kind {
    /// What the writer's row holds.
    type In<'a>: Clone + Debug + Default;
    /// What a reader's row holds.
    type Out: Clone + Debug + Default + PartialEq + Eq;
    type Builder;
    /// A reader over one batch's array(s) of the column.
    type Reader<'b>;
    /// The type as the docs show it (`uint64`, `utf8?`, ...; `?` when nullable).
    const DOC_TYPE: &'static str;

    /// The Arrow fields of a column called `name`.
    fn fields(name: &str) -> Vec<Field>;
    fn builder(rows: usize) -> Self::Builder;
    fn append(b: &mut Self::Builder, v: &Self::In<'_>);
    fn finish(b: &mut Self::Builder, out: &mut Vec<ArrayRef>);
    /// The reader of column `name` in `batch` (whose schema was checked).
    fn reader<'b>(batch: &'b RecordBatch, name: &str) -> Self::Reader<'b>;
    fn get(r: &Self::Reader<'_>, i: usize) -> Self::Out;
    /// What reading back a written value gives.
    fn out(v: &Self::In<'_>) -> Self::Out;
    /// A value for round-trip tests, different for each `seed` (nulls included).
    fn sample(seed: u64) -> Self::In<'static>;
}

fn array<'b, T: 'static>(batch: &'b RecordBatch, name: &str) -> &'b T {
    batch
        .column_by_name(name)
        .unwrap_or_else(|| panic!("ledger schema was checked; column {name} exists"))
        .as_any()
        .downcast_ref::<T>()
        .unwrap_or_else(|| panic!("ledger schema was checked; column {name} has its type"))
}

/// A primitive Arrow type, with the name the docs give it and sample values.
pub trait Prim: ArrowPrimitiveType<Native: Default + Eq + Debug> {
    const DOC: &'static str;
    fn sample(seed: u64) -> Self::Native;
}

macro_rules! prim {
    ($t:ty, $doc:literal, $conv:ty) => {
        impl Prim for $t {
            const DOC: &'static str = $doc;
            fn sample(seed: u64) -> Self::Native {
                (seed * 7919 + 13) as $conv
            }
        }
    };
}
prim!(UInt64Type, "uint64", u64);
prim!(Int64Type, "int64", i64);
prim!(UInt32Type, "uint32", u32);
prim!(Int32Type, "int32", i32);

/// A primitive that is never null.
pub struct Req<T>(std::marker::PhantomData<T>);
/// A primitive that may be null.
pub struct Opt<T>(std::marker::PhantomData<T>);

impl<T: Prim> Kind for Req<T> {
    type In<'a> = T::Native;
    type Out = T::Native;
    type Builder = PrimitiveBuilder<T>;
    type Reader<'b> = &'b PrimitiveArray<T>;
    const DOC_TYPE: &'static str = T::DOC;

    fn fields(name: &str) -> Vec<Field> {
        vec![Field::new(name, T::DATA_TYPE, false)]
    }
    fn builder(rows: usize) -> Self::Builder {
        PrimitiveBuilder::with_capacity(rows)
    }
    fn append(b: &mut Self::Builder, v: &T::Native) {
        b.append_value(*v);
    }
    fn finish(b: &mut Self::Builder, out: &mut Vec<ArrayRef>) {
        out.push(Arc::new(b.finish()));
    }
    fn reader<'b>(batch: &'b RecordBatch, name: &str) -> Self::Reader<'b> {
        array(batch, name)
    }
    fn get(r: &Self::Reader<'_>, i: usize) -> T::Native {
        r.value(i)
    }
    fn out(v: &T::Native) -> T::Native {
        *v
    }
    fn sample(seed: u64) -> T::Native {
        T::sample(seed)
    }
}

impl<T: Prim> Kind for Opt<T> {
    type In<'a> = Option<T::Native>;
    type Out = Option<T::Native>;
    type Builder = PrimitiveBuilder<T>;
    type Reader<'b> = &'b PrimitiveArray<T>;
    const DOC_TYPE: &'static str = const_concat(T::DOC);

    fn fields(name: &str) -> Vec<Field> {
        vec![Field::new(name, T::DATA_TYPE, true)]
    }
    fn builder(rows: usize) -> Self::Builder {
        PrimitiveBuilder::with_capacity(rows)
    }
    fn append(b: &mut Self::Builder, v: &Option<T::Native>) {
        b.append_option(*v);
    }
    fn finish(b: &mut Self::Builder, out: &mut Vec<ArrayRef>) {
        out.push(Arc::new(b.finish()));
    }
    fn reader<'b>(batch: &'b RecordBatch, name: &str) -> Self::Reader<'b> {
        array(batch, name)
    }
    fn get(r: &Self::Reader<'_>, i: usize) -> Option<T::Native> {
        r.is_valid(i).then(|| r.value(i))
    }
    fn out(v: &Option<T::Native>) -> Option<T::Native> {
        *v
    }
    fn sample(seed: u64) -> Option<T::Native> {
        (!seed.is_multiple_of(3)).then(|| T::sample(seed))
    }
}

/// The docs' name of a nullable type: `uint64` becomes `uint64?`.
const fn const_concat(doc: &'static str) -> &'static str {
    // The four primitive names, spelled out (const string concatenation is not stable).
    match doc.as_bytes() {
        b"uint64" => "uint64?",
        b"int64" => "int64?",
        b"uint32" => "uint32?",
        b"int32" => "int32?",
        _ => "?",
    }
}

/// A boolean that is never null.
pub struct Flag;
/// A boolean that may be null.
pub struct OptFlag;

impl Kind for Flag {
    type In<'a> = bool;
    type Out = bool;
    type Builder = BooleanBuilder;
    type Reader<'b> = &'b BooleanArray;
    const DOC_TYPE: &'static str = "bool";

    fn fields(name: &str) -> Vec<Field> {
        vec![Field::new(name, DataType::Boolean, false)]
    }
    fn builder(rows: usize) -> Self::Builder {
        BooleanBuilder::with_capacity(rows)
    }
    fn append(b: &mut Self::Builder, v: &bool) {
        b.append_value(*v);
    }
    fn finish(b: &mut Self::Builder, out: &mut Vec<ArrayRef>) {
        out.push(Arc::new(b.finish()));
    }
    fn reader<'b>(batch: &'b RecordBatch, name: &str) -> Self::Reader<'b> {
        array(batch, name)
    }
    fn get(r: &Self::Reader<'_>, i: usize) -> bool {
        r.value(i)
    }
    fn out(v: &bool) -> bool {
        *v
    }
    fn sample(seed: u64) -> bool {
        seed % 2 == 1
    }
}

impl Kind for OptFlag {
    type In<'a> = Option<bool>;
    type Out = Option<bool>;
    type Builder = BooleanBuilder;
    type Reader<'b> = &'b BooleanArray;
    const DOC_TYPE: &'static str = "bool?";

    fn fields(name: &str) -> Vec<Field> {
        vec![Field::new(name, DataType::Boolean, true)]
    }
    fn builder(rows: usize) -> Self::Builder {
        BooleanBuilder::with_capacity(rows)
    }
    fn append(b: &mut Self::Builder, v: &Option<bool>) {
        b.append_option(*v);
    }
    fn finish(b: &mut Self::Builder, out: &mut Vec<ArrayRef>) {
        out.push(Arc::new(b.finish()));
    }
    fn reader<'b>(batch: &'b RecordBatch, name: &str) -> Self::Reader<'b> {
        array(batch, name)
    }
    fn get(r: &Self::Reader<'_>, i: usize) -> Option<bool> {
        r.is_valid(i).then(|| r.value(i))
    }
    fn out(v: &Option<bool>) -> Option<bool> {
        *v
    }
    fn sample(seed: u64) -> Option<bool> {
        (!seed.is_multiple_of(3)).then_some(seed.is_multiple_of(2))
    }
}

const NAMES: [&str; 5] = ["open", "exec", "ENOENT", "object", "newfstatat"];

/// A name from a fixed vocabulary (`kind`), never null.
pub struct Name;
/// A name from a fixed vocabulary (`syscall`, `errno`, ...), or null.
pub struct OptName;

impl Kind for Name {
    type In<'a> = &'static str;
    type Out = String;
    type Builder = StringBuilder;
    type Reader<'b> = &'b StringArray;
    const DOC_TYPE: &'static str = "utf8";

    fn fields(name: &str) -> Vec<Field> {
        vec![Field::new(name, DataType::Utf8, false)]
    }
    fn builder(rows: usize) -> Self::Builder {
        StringBuilder::with_capacity(rows, rows * 6)
    }
    fn append(b: &mut Self::Builder, v: &&'static str) {
        b.append_value(v);
    }
    fn finish(b: &mut Self::Builder, out: &mut Vec<ArrayRef>) {
        out.push(Arc::new(b.finish()));
    }
    fn reader<'b>(batch: &'b RecordBatch, name: &str) -> Self::Reader<'b> {
        array(batch, name)
    }
    fn get(r: &Self::Reader<'_>, i: usize) -> String {
        r.value(i).to_owned()
    }
    fn out(v: &&'static str) -> String {
        (*v).to_owned()
    }
    fn sample(seed: u64) -> &'static str {
        NAMES[seed as usize % NAMES.len()]
    }
}

impl Kind for OptName {
    type In<'a> = Option<&'static str>;
    type Out = Option<String>;
    type Builder = StringBuilder;
    type Reader<'b> = &'b StringArray;
    const DOC_TYPE: &'static str = "utf8?";

    fn fields(name: &str) -> Vec<Field> {
        vec![Field::new(name, DataType::Utf8, true)]
    }
    fn builder(rows: usize) -> Self::Builder {
        StringBuilder::with_capacity(rows, rows * 6)
    }
    fn append(b: &mut Self::Builder, v: &Option<&'static str>) {
        b.append_option(*v);
    }
    fn finish(b: &mut Self::Builder, out: &mut Vec<ArrayRef>) {
        out.push(Arc::new(b.finish()));
    }
    fn reader<'b>(batch: &'b RecordBatch, name: &str) -> Self::Reader<'b> {
        array(batch, name)
    }
    fn get(r: &Self::Reader<'_>, i: usize) -> Option<String> {
        r.is_valid(i).then(|| r.value(i).to_owned())
    }
    fn out(v: &Option<&'static str>) -> Option<String> {
        v.map(str::to_owned)
    }
    fn sample(seed: u64) -> Option<&'static str> {
        (!seed.is_multiple_of(3)).then(|| NAMES[seed as usize % NAMES.len()])
    }
}

/// The phase a row belongs to: a name shared by every row of the phase (the writer clones an
/// `Arc`, not the text). Null only in ledgers older than schema 4, whose rows are all the
/// `agent` phase.
pub struct Phase;

impl Kind for Phase {
    type In<'a> = Option<Arc<str>>;
    type Out = Option<String>;
    type Builder = StringBuilder;
    type Reader<'b> = &'b StringArray;
    const DOC_TYPE: &'static str = "utf8";

    fn fields(name: &str) -> Vec<Field> {
        vec![Field::new(name, DataType::Utf8, true)]
    }
    fn builder(rows: usize) -> Self::Builder {
        StringBuilder::with_capacity(rows, rows * 5)
    }
    fn append(b: &mut Self::Builder, v: &Option<Arc<str>>) {
        b.append_option(v.as_deref());
    }
    fn finish(b: &mut Self::Builder, out: &mut Vec<ArrayRef>) {
        out.push(Arc::new(b.finish()));
    }
    fn reader<'b>(batch: &'b RecordBatch, name: &str) -> Self::Reader<'b> {
        array(batch, name)
    }
    fn get(r: &Self::Reader<'_>, i: usize) -> Option<String> {
        r.is_valid(i).then(|| r.value(i).to_owned())
    }
    fn out(v: &Option<Arc<str>>) -> Option<String> {
        v.as_deref().map(str::to_owned)
    }
    fn sample(seed: u64) -> Option<Arc<str>> {
        Some(Arc::from(if seed.is_multiple_of(2) {
            "agent"
        } else {
            "grading"
        }))
    }
}

/// A text many rows share (a program's hash, or why it could not be taken), or null: the writer
/// clones an `Arc`, not the text.
pub struct OptShared;

impl Kind for OptShared {
    type In<'a> = Option<Arc<str>>;
    type Out = Option<String>;
    type Builder = StringBuilder;
    type Reader<'b> = &'b StringArray;
    const DOC_TYPE: &'static str = "utf8?";

    fn fields(name: &str) -> Vec<Field> {
        vec![Field::new(name, DataType::Utf8, true)]
    }
    fn builder(rows: usize) -> Self::Builder {
        StringBuilder::with_capacity(rows, rows)
    }
    fn append(b: &mut Self::Builder, v: &Option<Arc<str>>) {
        b.append_option(v.as_deref());
    }
    fn finish(b: &mut Self::Builder, out: &mut Vec<ArrayRef>) {
        out.push(Arc::new(b.finish()));
    }
    fn reader<'b>(batch: &'b RecordBatch, name: &str) -> Self::Reader<'b> {
        array(batch, name)
    }
    fn get(r: &Self::Reader<'_>, i: usize) -> Option<String> {
        r.is_valid(i).then(|| r.value(i).to_owned())
    }
    fn out(v: &Option<Arc<str>>) -> Option<String> {
        v.as_deref().map(str::to_owned)
    }
    fn sample(seed: u64) -> Option<Arc<str>> {
        (!seed.is_multiple_of(3)).then(|| Arc::from(format!("{seed:064x}")))
    }
}

/// A task's `comm`: 16 NUL-padded bytes in the record, lossy UTF-8 in the ledger.
pub struct Comm;

impl Comm {
    fn text(v: &[u8; 16]) -> Cow<'_, str> {
        let name = v.split(|&b| b == 0).next().unwrap_or_default();
        String::from_utf8_lossy(name)
    }
}

impl Kind for Comm {
    type In<'a> = [u8; 16];
    type Out = String;
    type Builder = StringBuilder;
    type Reader<'b> = &'b StringArray;
    const DOC_TYPE: &'static str = "utf8";

    fn fields(name: &str) -> Vec<Field> {
        vec![Field::new(name, DataType::Utf8, false)]
    }
    fn builder(rows: usize) -> Self::Builder {
        StringBuilder::with_capacity(rows, rows * 8)
    }
    fn append(b: &mut Self::Builder, v: &[u8; 16]) {
        b.append_value(Self::text(v));
    }
    fn finish(b: &mut Self::Builder, out: &mut Vec<ArrayRef>) {
        out.push(Arc::new(b.finish()));
    }
    fn reader<'b>(batch: &'b RecordBatch, name: &str) -> Self::Reader<'b> {
        array(batch, name)
    }
    fn get(r: &Self::Reader<'_>, i: usize) -> String {
        r.value(i).to_owned()
    }
    fn out(v: &[u8; 16]) -> String {
        Self::text(v).into_owned()
    }
    fn sample(seed: u64) -> [u8; 16] {
        let mut c = [0u8; 16];
        let s = format!("comm-{seed}");
        c[..s.len().min(15)].copy_from_slice(&s.as_bytes()[..s.len().min(15)]);
        c
    }
}

/// A path: `X` (utf8, lossy when the bytes are not UTF-8) and `X_raw` (binary, set only when `X`
/// is not valid UTF-8). The exact bytes are `X_raw` if not null, else `X`.
pub struct Path;

/// The two arrays of a path column.
pub struct PathReader<'b> {
    text: &'b StringArray,
    raw: &'b BinaryArray,
}

/// The name of a path column's exact-bytes twin.
pub fn raw_name(name: &str) -> String {
    format!("{name}_raw")
}

impl Kind for Path {
    type In<'a> = Option<Cow<'a, [u8]>>;
    type Out = Option<Vec<u8>>;
    type Builder = (StringBuilder, BinaryBuilder);
    type Reader<'b> = PathReader<'b>;
    const DOC_TYPE: &'static str = "utf8?, binary?";

    fn fields(name: &str) -> Vec<Field> {
        vec![
            Field::new(name, DataType::Utf8, true),
            Field::new(raw_name(name), DataType::Binary, true),
        ]
    }
    fn builder(rows: usize) -> Self::Builder {
        (
            StringBuilder::with_capacity(rows, rows * 32),
            BinaryBuilder::new(),
        )
    }
    fn append((text, raw): &mut Self::Builder, v: &Option<Cow<'_, [u8]>>) {
        match v.as_deref() {
            None => {
                text.append_null();
                raw.append_null();
            }
            Some(p) => match std::str::from_utf8(p) {
                Ok(s) => {
                    text.append_value(s);
                    raw.append_null();
                }
                Err(_) => {
                    text.append_value(String::from_utf8_lossy(p));
                    raw.append_value(p);
                }
            },
        }
    }
    fn finish((text, raw): &mut Self::Builder, out: &mut Vec<ArrayRef>) {
        out.push(Arc::new(text.finish()));
        out.push(Arc::new(raw.finish()));
    }
    fn reader<'b>(batch: &'b RecordBatch, name: &str) -> Self::Reader<'b> {
        PathReader {
            text: array(batch, name),
            raw: array(batch, &raw_name(name)),
        }
    }
    fn get(r: &Self::Reader<'_>, i: usize) -> Option<Vec<u8>> {
        if r.raw.is_valid(i) {
            Some(r.raw.value(i).to_vec())
        } else if r.text.is_valid(i) {
            Some(r.text.value(i).as_bytes().to_vec())
        } else {
            None
        }
    }
    fn out(v: &Option<Cow<'_, [u8]>>) -> Option<Vec<u8>> {
        v.as_deref().map(<[u8]>::to_vec)
    }
    fn sample(seed: u64) -> Option<Cow<'static, [u8]>> {
        match seed % 3 {
            0 => None,
            1 => Some(Cow::Owned(format!("/s/{seed}/x.txt").into_bytes())),
            _ => {
                let mut v = format!("/s/{seed}/\n\u{e9}").into_bytes();
                v.push(0xff);
                Some(Cow::Owned(v))
            }
        }
    }
}

/// An exec's argument vector: NUL-separated bytes in the record, a list of lossy UTF-8 strings
/// in the ledger.
pub struct Argv;

impl Kind for Argv {
    type In<'a> = Option<&'a [u8]>;
    type Out = Option<Vec<String>>;
    type Builder = ListBuilder<StringBuilder>;
    type Reader<'b> = &'b ListArray;
    const DOC_TYPE: &'static str = "list<utf8>?";

    fn fields(name: &str) -> Vec<Field> {
        let item = Arc::new(Field::new("item", DataType::Utf8, true));
        vec![Field::new(name, DataType::List(item), true)]
    }
    fn builder(_rows: usize) -> Self::Builder {
        ListBuilder::new(StringBuilder::new())
    }
    fn append(b: &mut Self::Builder, v: &Option<&[u8]>) {
        match v {
            Some(argv) => {
                for arg in crate::util::split_argv(argv) {
                    b.values().append_value(String::from_utf8_lossy(arg));
                }
                b.append(true);
            }
            None => b.append(false),
        }
    }
    fn finish(b: &mut Self::Builder, out: &mut Vec<ArrayRef>) {
        out.push(Arc::new(b.finish()));
    }
    fn reader<'b>(batch: &'b RecordBatch, name: &str) -> Self::Reader<'b> {
        array(batch, name)
    }
    fn get(r: &Self::Reader<'_>, i: usize) -> Option<Vec<String>> {
        r.is_valid(i).then(|| {
            let v = r.value(i);
            let s = v.as_string::<i32>();
            (0..s.len()).map(|j| s.value(j).to_owned()).collect()
        })
    }
    fn out(v: &Option<&[u8]>) -> Option<Vec<String>> {
        v.map(|a| {
            crate::util::split_argv(a)
                .map(|x| String::from_utf8_lossy(x).into_owned())
                .collect()
        })
    }
    fn sample(seed: u64) -> Option<&'static [u8]> {
        const ARGVS: [&[u8]; 3] = [b"sh\0-c\0echo hi\0", b"cat\0/x\0", b"\xff\0\0"];
        (!seed.is_multiple_of(4)).then(|| ARGVS[seed as usize % ARGVS.len()])
    }
}

/// Texts a row owns (a DNS answer's records): a list of UTF-8 strings, or null.
pub struct Texts;

impl Kind for Texts {
    type In<'a> = Option<Vec<String>>;
    type Out = Option<Vec<String>>;
    type Builder = ListBuilder<StringBuilder>;
    type Reader<'b> = &'b ListArray;
    const DOC_TYPE: &'static str = "list<utf8>?";

    fn fields(name: &str) -> Vec<Field> {
        Argv::fields(name)
    }
    fn builder(_rows: usize) -> Self::Builder {
        ListBuilder::new(StringBuilder::new())
    }
    fn append(b: &mut Self::Builder, v: &Option<Vec<String>>) {
        match v {
            Some(items) => {
                for item in items {
                    b.values().append_value(item);
                }
                b.append(true);
            }
            None => b.append(false),
        }
    }
    fn finish(b: &mut Self::Builder, out: &mut Vec<ArrayRef>) {
        out.push(Arc::new(b.finish()));
    }
    fn reader<'b>(batch: &'b RecordBatch, name: &str) -> Self::Reader<'b> {
        array(batch, name)
    }
    fn get(r: &Self::Reader<'_>, i: usize) -> Option<Vec<String>> {
        Argv::get(r, i)
    }
    fn out(v: &Option<Vec<String>>) -> Option<Vec<String>> {
        v.clone()
    }
    fn sample(seed: u64) -> Option<Vec<String>> {
        (!seed.is_multiple_of(3))
            .then(|| vec![format!("A 10.0.0.{}", seed % 250), "CNAME x.".into()])
    }
}

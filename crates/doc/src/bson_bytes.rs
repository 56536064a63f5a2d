//! BSON bytes to a [`Document`] and back, exactly as they were written: the
//! one way bytes from a client or from storage become a document, and the
//! one way a document becomes bytes to store or send.
//!
//! The `bson` crate's serde path (`Document::from_reader`, `bson::from_slice`,
//! `bson::from_document`) reads a subdocument whose keys look like Extended
//! JSON as the value it describes: `{$numberLong: "5"}` becomes the int64 5,
//! `{$binary: ..., $type: ...}` fails. mongod stores such subdocuments as
//! they are, so this module converts element by element instead, and
//! `clippy.toml` forbids the serde readers everywhere else. The crate's
//! serde writer (`to_writer`, `to_vec`) sorts a regex's options; mongod
//! keeps them as sent, so [`encode`] writes element by element too.
//!
//! Invariants:
//! 1. No Extended JSON is interpreted: every element keeps its BSON type,
//!    its key and its place (duplicate keys aside, which a [`Document`]
//!    cannot hold: the last value wins, at the first key's place).
//! 2. Decoding recurses one level per nested document, array or code
//!    scope, and refuses a level past the maximum before it enters it, so
//!    hostile nesting cannot overflow the stack.
//! 3. Every length and string is checked (the raw reader validates as it
//!    goes); a malformed document is an error, never a panic.
//! 4. `decode(encode(d)) == d` and `encode(decode(b)) == b` for every
//!    document `b` without duplicate keys whose arrays are keyed "0", "1",
//!    ... (a [`Document`] keeps neither duplicates nor array keys; tested
//!    here, and through the server by the BSON corpus and the
//!    random-document test).

use bson::raw::{RawBsonRef, RawDocument};
use bson::spec::BinarySubtype;
use bson::{Binary, Bson, Document, JavaScriptCodeWithScope, Regex};

use crate::limits::decode_depth_max;

/// Why bytes are not a document we accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("{0}")]
    Malformed(String),
    #[error("document nesting depth {depth} exceeds the maximum of {max}")]
    TooDeep { depth: usize, max: usize },
}

impl From<bson::raw::Error> for DecodeError {
    fn from(e: bson::raw::Error) -> Self {
        DecodeError::Malformed(e.to_string())
    }
}

/// Decode one whole document (exactly `bytes`), refusing nesting deeper
/// than `depth_max` (a flat document has depth 1).
pub fn decode_with_depth(bytes: &[u8], depth_max: usize) -> Result<Document, DecodeError> {
    let raw = RawDocument::from_bytes(bytes)?;
    let max = depth_max.min(decode_depth_max);
    if max == 0 {
        return Err(DecodeError::TooDeep { depth: 1, max });
    }
    document(raw, Depth { at: 1, max })
}

/// Decode one whole document (exactly `bytes`) of any sane nesting: for
/// bytes this process wrote itself (records, catalog entries, spill runs).
pub fn decode(bytes: &[u8]) -> Result<Document, DecodeError> {
    decode_with_depth(bytes, decode_depth_max)
}

/// The nesting level being decoded (the top level is 1) and the most
/// allowed (invariant 2).
#[derive(Clone, Copy)]
struct Depth {
    at: usize,
    max: usize,
}

impl Depth {
    /// One level further in, refused past the maximum.
    fn inner(self) -> Result<Depth, DecodeError> {
        match self.at < self.max {
            true => Ok(Depth { at: self.at + 1, ..self }),
            false => Err(DecodeError::TooDeep { depth: self.at + 1, max: self.max }),
        }
    }
}

/// Convert a raw document element by element (see invariant 1), at
/// nesting level `depth`.
fn document(raw: &RawDocument, depth: Depth) -> Result<Document, DecodeError> {
    let mut out = Document::new();
    for element in raw {
        let (key, value) = element?;
        out.insert(key, value_of(value, depth)?);
    }
    Ok(out)
}

/// Decode only the top-level fields of `bytes` that `names` lists, in
/// their place, exactly as [`decode`] would decode them: the rest is
/// passed over by its length, unread, and the walk stops once every
/// name is found. For a filter that names a few fields of a large
/// document; `bytes` hold no duplicate keys (a stored record).
pub fn decode_fields(bytes: &[u8], names: &[String]) -> Result<Document, DecodeError> {
    let raw = RawDocument::from_bytes(bytes)?;
    let depth = Depth { at: 1, max: decode_depth_max };
    let mut out = Document::new();
    for element in raw.iter_elements() {
        if out.len() == names.len() {
            break;
        }
        let element = element?;
        if names.iter().any(|n| n == element.key()) {
            out.insert(element.key(), value_of(element.value()?, depth)?);
        }
    }
    Ok(out)
}

/// The values of a document keyed by position ("0", "1", ...): slot `i`
/// holds field `"i"`'s value, `None` where it is absent; fields keyed
/// otherwise or past `n` are passed over. No [`Document`] is built.
pub fn decode_positional(bytes: &[u8], n: usize) -> Result<Vec<Option<Bson>>, DecodeError> {
    let raw = RawDocument::from_bytes(bytes)?;
    let depth = Depth { at: 1, max: decode_depth_max };
    let mut out = vec![None; n];
    for element in raw.iter_elements() {
        let element = element?;
        if let Some(slot) = element.key().parse::<usize>().ok().and_then(|i| out.get_mut(i)) {
            *slot = Some(value_of(element.value()?, depth)?);
        }
    }
    Ok(out)
}

/// One raw value, found at nesting level `depth`, as a [`Bson`], without
/// interpreting its keys.
fn value_of(value: RawBsonRef<'_>, depth: Depth) -> Result<Bson, DecodeError> {
    Ok(match value {
        RawBsonRef::Document(d) => Bson::Document(document(d, depth.inner()?)?),
        RawBsonRef::Array(a) => {
            let inner = depth.inner()?;
            let mut items = Vec::new();
            for item in a {
                items.push(value_of(item?, inner)?);
            }
            Bson::Array(items)
        }
        // Kept exactly: `Regex::new` would sort the options.
        RawBsonRef::RegularExpression(r) => {
            Bson::RegularExpression(Regex { pattern: r.pattern.to_string(), options: r.options.to_string() })
        }
        RawBsonRef::JavaScriptCodeWithScope(c) => Bson::JavaScriptCodeWithScope(JavaScriptCodeWithScope {
            code: c.code.to_string(),
            scope: document(c.scope, depth.inner()?)?,
        }),
        // Scalars: the crate's conversion copies no nested bytes.
        scalar => Bson::try_from(scalar)?,
    })
}

/// Whether `doc` nests deeper than `max` (objects and arrays; the top
/// level counts as one). Recursion stops at `max`, so the stack is bounded.
pub fn deeper_than(doc: &Document, max: usize) -> bool {
    fn value(v: &Bson, room: usize) -> bool {
        match v {
            Bson::Document(d) => fields(d.values(), room),
            Bson::Array(items) => fields(items.iter(), room),
            _ => false,
        }
    }
    fn fields<'a>(mut values: impl Iterator<Item = &'a Bson>, room: usize) -> bool {
        match room {
            0 => true,
            _ => values.any(|v| value(v, room - 1)),
        }
    }
    fields(doc.values(), max)
}

/// Why a document cannot be written as BSON.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("field name {0:?} contains a null byte, which BSON cannot store")]
    NulInName(String),
    #[error("a regular expression's {0} contains a null byte, which BSON cannot store")]
    NulInRegex(&'static str),
    #[error("a document of more than 2 GiB cannot be written as BSON")]
    TooLarge,
    #[error("a document nested deeper than {0} levels")]
    TooDeep(usize),
}

/// The BSON bytes of `doc`, element by element (see invariant 4), of any
/// nesting a decoded document may have.
pub fn encode(doc: &Document) -> Result<Vec<u8>, EncodeError> {
    encode_within(doc, decode_depth_max)
}

/// As [`encode`], refusing nesting deeper than `depth_max` (a flat
/// document has depth 1) in the same pass.
pub fn encode_within(doc: &Document, depth_max: usize) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::with_capacity(64);
    write_document(&mut out, doc.iter().map(|(k, v)| (k.as_str(), v)), depth_max).map_err(|e| match e {
        EncodeError::TooDeep(_) => EncodeError::TooDeep(depth_max),
        other => other,
    })?;
    Ok(out)
}

/// The size `encode(doc)` has (or would have, if a name holds a null byte),
/// computed without writing anything.
pub fn encoded_len(doc: &Document) -> usize {
    fields_len(doc.iter().map(|(k, v)| (k.len(), v)))
}

fn fields_len<'a>(fields: impl Iterator<Item = (usize, &'a Bson)>) -> usize {
    4 + fields.map(|(name, v)| 1 + name + 1 + value_len(v)).sum::<usize>() + 1
}

fn value_len(v: &Bson) -> usize {
    match v {
        Bson::Double(_) | Bson::DateTime(_) | Bson::Timestamp(_) | Bson::Int64(_) => 8,
        Bson::String(s) | Bson::JavaScriptCode(s) | Bson::Symbol(s) => 4 + s.len() + 1,
        Bson::Document(d) => encoded_len(d),
        Bson::Array(items) => fields_len(items.iter().enumerate().map(|(i, v)| (decimal_digits(i), v))),
        Bson::Binary(b) if b.subtype == BinarySubtype::BinaryOld => 4 + 1 + 4 + b.bytes.len(),
        Bson::Binary(b) => 4 + 1 + b.bytes.len(),
        Bson::ObjectId(_) => 12,
        Bson::Boolean(_) => 1,
        Bson::RegularExpression(r) => r.pattern.len() + 1 + r.options.len() + 1,
        Bson::JavaScriptCodeWithScope(c) => 4 + 4 + c.code.len() + 1 + encoded_len(&c.scope),
        Bson::Int32(_) => 4,
        Bson::Decimal128(_) => 16,
        Bson::DbPointer(_) => pointer_value(v).len(),
        Bson::Null | Bson::Undefined | Bson::MinKey | Bson::MaxKey => 0,
    }
}

fn decimal_digits(i: usize) -> usize {
    i.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// `room`: the levels this document and what it holds may still take.
fn write_document<'a>(
    out: &mut Vec<u8>,
    fields: impl Iterator<Item = (&'a str, &'a Bson)>,
    room: usize,
) -> Result<(), EncodeError> {
    let Some(inner) = room.checked_sub(1) else { return Err(EncodeError::TooDeep(0)) };
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    for (name, value) in fields {
        out.push(value.element_type() as u8);
        write_cstring(out, name).map_err(|()| EncodeError::NulInName(name.to_string()))?;
        write_value(out, value, inner)?;
    }
    out.push(0);
    patch_length(out, start)
}

/// The document `stored` (a stored record's bytes) with the value of each
/// top-level field `sets` names replaced where it is, every other element
/// copied as it is, and no [`Document`] built: what `$set` of existing
/// top-level fields makes of it. `Ok(None)` when a named field is absent
/// (the field would be added, in `$set`'s order: the caller's general
/// path) or `stored` is not a well-formed document; values nest at most
/// `depth_max` levels with the document.
pub fn set_top_level(stored: &[u8], sets: &[(&str, &Bson)], depth_max: usize) -> Result<Option<Vec<u8>>, EncodeError> {
    let Ok(raw) = RawDocument::from_bytes(stored) else { return Ok(None) };
    // Where each element starts (its type byte) and which set names it,
    // walked by the elements' own lengths.
    let mut starts = Vec::with_capacity(16);
    let mut seen = vec![false; sets.len()];
    let mut at = 4;
    for element in raw.iter_elements() {
        let Ok(element) = element else { return Ok(None) };
        let key = element.key();
        let set = sets.iter().position(|(name, _)| *name == key);
        if let Some(s) = set {
            if std::mem::replace(&mut seen[s], true) {
                return Ok(None);
            }
        }
        starts.push((at, set));
        at += 1 + key.len() + 1 + element.len();
    }
    if at != stored.len() - 1 || seen.contains(&false) {
        return Ok(None);
    }
    let mut out = Vec::with_capacity(stored.len() + 64);
    out.extend_from_slice(&[0; 4]);
    let end = stored.len() - 1;
    for (i, &(at, set)) in starts.iter().enumerate() {
        let next = starts.get(i + 1).map_or(end, |&(n, _)| n);
        match set {
            None => out.extend_from_slice(&stored[at..next]),
            Some(s) => {
                let (name, value) = sets[s];
                out.push(value.element_type() as u8);
                write_cstring(&mut out, name).map_err(|()| EncodeError::NulInName(name.to_string()))?;
                write_value(&mut out, value, depth_max.saturating_sub(1)).map_err(|e| match e {
                    EncodeError::TooDeep(_) => EncodeError::TooDeep(depth_max),
                    other => other,
                })?;
            }
        }
    }
    out.push(0);
    patch_length(&mut out, 0)?;
    Ok(Some(out))
}

/// Append the field `name: value` to the whole document `doc` (its
/// bytes, terminator included); on error `doc` is left as it was.
pub fn append_field(doc: &mut Vec<u8>, name: &str, value: &Bson) -> Result<(), EncodeError> {
    append_with(doc, name, value.element_type() as u8, |out| write_value(out, value, decode_depth_max))
}

/// Append an element of type `kind` named `name` whose value `value`
/// writes, before `doc`'s terminator.
fn append_with(
    doc: &mut Vec<u8>,
    name: &str,
    kind: u8,
    value: impl FnOnce(&mut Vec<u8>) -> Result<(), EncodeError>,
) -> Result<(), EncodeError> {
    assert!(doc.len() >= 5 && doc.last() == Some(&0), "a whole document");
    let end = doc.len() - 1;
    doc.truncate(end);
    doc.push(kind);
    let written = write_cstring(doc, name)
        .map_err(|()| EncodeError::NulInName(name.to_string()))
        .and_then(|()| value(doc))
        .and_then(|()| {
            doc.push(0);
            patch_length(doc, 0)
        });
    if written.is_err() {
        doc.truncate(end);
        doc.push(0);
    }
    written
}

/// A document written field by field, nested documents and arrays opened
/// and closed in turn, with documents already in BSON spliced in as they
/// are (a reply's batch of stored documents, copied, never decoded).
pub struct Writer {
    out: Vec<u8>,
    /// Where each open document's length goes, the top one first.
    open: Vec<usize>,
}

impl Default for Writer {
    fn default() -> Writer {
        Writer::new()
    }
}

impl Writer {
    /// A writer with the top document open.
    pub fn new() -> Writer {
        Writer { out: vec![0; 4], open: vec![0] }
    }

    /// Open the document (or array, whose names are "0", "1", ...)
    /// `name`, which takes the fields written until its `close`.
    pub fn open(&mut self, name: &str, array: bool) -> Result<(), EncodeError> {
        self.out.push(if array { 0x04 } else { 0x03 });
        write_cstring(&mut self.out, name).map_err(|()| EncodeError::NulInName(name.to_string()))?;
        self.open.push(self.out.len());
        self.out.extend_from_slice(&[0; 4]);
        Ok(())
    }

    /// Write the field `name: value`.
    pub fn field(&mut self, name: &str, value: &Bson) -> Result<(), EncodeError> {
        self.out.push(value.element_type() as u8);
        write_cstring(&mut self.out, name).map_err(|()| EncodeError::NulInName(name.to_string()))?;
        let room = self.room();
        write_value(&mut self.out, value, room).map_err(too_deep_at_most)
    }

    /// Write the field `name` holding the document `doc`.
    pub fn document(&mut self, name: &str, doc: &Document) -> Result<(), EncodeError> {
        self.out.push(0x03);
        write_cstring(&mut self.out, name).map_err(|()| EncodeError::NulInName(name.to_string()))?;
        let room = self.room();
        write_document(&mut self.out, doc.iter().map(|(k, v)| (k.as_str(), v)), room).map_err(too_deep_at_most)
    }

    /// The levels a value written now may take: the whole stays within
    /// the nesting a decode accepts.
    fn room(&self) -> usize {
        decode_depth_max.saturating_sub(self.open.len())
    }

    /// Write the field `name` holding the encoded document `bytes` as it is.
    pub fn document_bytes(&mut self, name: &str, bytes: &[u8]) -> Result<(), EncodeError> {
        debug_assert!(bytes.len() >= 5 && bytes.last() == Some(&0), "a whole document");
        self.out.push(0x03);
        write_cstring(&mut self.out, name).map_err(|()| EncodeError::NulInName(name.to_string()))?;
        self.out.extend_from_slice(bytes);
        Ok(())
    }

    /// Close the innermost open document or array.
    pub fn close(&mut self) -> Result<(), EncodeError> {
        assert!(self.open.len() > 1, "close only what open opened");
        let start = self.open.pop().expect("checked above");
        self.out.push(0);
        patch_length(&mut self.out, start)
    }

    /// The whole document, every nested one closed.
    pub fn finish(mut self) -> Result<Vec<u8>, EncodeError> {
        while self.open.len() > 1 {
            self.close()?;
        }
        self.out.push(0);
        patch_length(&mut self.out, 0)?;
        Ok(self.out)
    }
}

/// A nesting refusal names the most levels a whole document may have.
fn too_deep_at_most(e: EncodeError) -> EncodeError {
    match e {
        EncodeError::TooDeep(_) => EncodeError::TooDeep(decode_depth_max),
        other => other,
    }
}

/// Fill in the i32 length prefix at `start` with the bytes written since.
fn patch_length(out: &mut [u8], start: usize) -> Result<(), EncodeError> {
    let len = i32::try_from(out.len() - start).map_err(|_| EncodeError::TooLarge)?;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    Ok(())
}

fn write_cstring(out: &mut Vec<u8>, s: &str) -> Result<(), ()> {
    if s.as_bytes().contains(&0) {
        return Err(());
    }
    out.extend_from_slice(s.as_bytes());
    out.push(0);
    Ok(())
}

fn write_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as i32 + 1).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
    out.push(0);
}

fn write_value(out: &mut Vec<u8>, value: &Bson, room: usize) -> Result<(), EncodeError> {
    match value {
        Bson::Double(f) => out.extend_from_slice(&f.to_le_bytes()),
        Bson::String(s) | Bson::JavaScriptCode(s) | Bson::Symbol(s) => write_string(out, s),
        Bson::Document(d) => write_document(out, d.iter().map(|(k, v)| (k.as_str(), v)), room)?,
        Bson::Array(items) => {
            let names: Vec<String> = (0..items.len()).map(|i| i.to_string()).collect();
            write_document(out, names.iter().map(String::as_str).zip(items), room)?;
        }
        Bson::Binary(b) => write_binary(out, b),
        Bson::ObjectId(id) => out.extend_from_slice(&id.bytes()),
        Bson::Boolean(b) => out.push(u8::from(*b)),
        Bson::DateTime(t) => out.extend_from_slice(&t.timestamp_millis().to_le_bytes()),
        Bson::RegularExpression(r) => {
            write_cstring(out, &r.pattern).map_err(|()| EncodeError::NulInRegex("pattern"))?;
            write_cstring(out, &r.options).map_err(|()| EncodeError::NulInRegex("options"))?;
        }
        Bson::JavaScriptCodeWithScope(c) => {
            let start = out.len();
            out.extend_from_slice(&[0; 4]);
            write_string(out, &c.code);
            write_document(out, c.scope.iter().map(|(k, v)| (k.as_str(), v)), room)?;
            patch_length(out, start)?;
        }
        Bson::Int32(n) => out.extend_from_slice(&n.to_le_bytes()),
        Bson::Timestamp(t) => {
            out.extend_from_slice(&t.increment.to_le_bytes());
            out.extend_from_slice(&t.time.to_le_bytes());
        }
        Bson::Int64(n) => out.extend_from_slice(&n.to_le_bytes()),
        Bson::Decimal128(d) => out.extend_from_slice(&d.bytes()),
        Bson::DbPointer(_) => out.extend_from_slice(&pointer_value(value)),
        Bson::Null | Bson::Undefined | Bson::MinKey | Bson::MaxKey => {}
    }
    Ok(())
}

fn write_binary(out: &mut Vec<u8>, b: &Binary) {
    if b.subtype == BinarySubtype::BinaryOld {
        // The old subtype repeats the length inside (the reader strips it).
        out.extend_from_slice(&(b.bytes.len() as i32 + 4).to_le_bytes());
        out.push(u8::from(b.subtype));
        out.extend_from_slice(&(b.bytes.len() as i32).to_le_bytes());
    } else {
        out.extend_from_slice(&(b.bytes.len() as i32).to_le_bytes());
        out.push(u8::from(b.subtype));
    }
    out.extend_from_slice(&b.bytes);
}

/// A DBPointer's value bytes as stored: namespace (length-prefixed, with
/// its terminator) then the ObjectId. The crate keeps its fields private,
/// so its own writer renders a one-field document and the value is cut out.
pub fn pointer_value(v: &Bson) -> Vec<u8> {
    assert!(matches!(v, Bson::DbPointer(_)), "a DBPointer");
    let mut d = Document::new();
    d.insert("p", v.clone());
    #[allow(clippy::disallowed_methods)] // no regex inside: the crate's writer is exact here
    let raw = bson::to_vec(&d).expect("a DBPointer encodes");
    // [doc len 4][type 1]["p\0" 2] value [doc terminator 1]
    raw[7..raw.len() - 1].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn bytes(d: &Document) -> Vec<u8> {
        encode(d).unwrap()
    }

    #[test]
    fn positional_values_land_in_their_slots() {
        let d = doc! { "2": "c", "0": { "a": [1] }, "x": 5, "7": 1 };
        let got = decode_positional(&bytes(&d), 3).unwrap();
        assert_eq!(got, vec![Some(Bson::Document(doc! { "a": [1] })), None, Some(Bson::String("c".into()))]);
        assert!(decode_positional(&[5, 0, 0, 0], 1).is_err());
    }

    #[test]
    fn appended_fields_and_documents_read_back_in_place() {
        let mut w = Writer::new();
        w.field("n", &Bson::Int32(3)).unwrap();
        w.open("c", false).unwrap();
        w.open("a", true).unwrap();
        w.document_bytes("0", &bytes(&doc! { "x": "y" })).unwrap();
        w.field("1", &Bson::Int32(2)).unwrap();
        w.close().unwrap();
        w.field("id", &Bson::Int64(0)).unwrap();
        let mut out = w.finish().unwrap();
        assert_eq!(decode(&out).unwrap(), doc! { "n": 3, "c": { "a": [{ "x": "y" }, 2], "id": 0i64 } });
        append_field(&mut out, "ok", &Bson::Double(1.0)).unwrap();
        // What a writer writes stays within the nesting a decode takes.
        let mut deep = doc! { "x": 1 };
        for _ in 0..decode_depth_max - 3 {
            deep = doc! { "d": deep };
        }
        let mut w = Writer::new();
        w.open("c", false).unwrap();
        assert!(w.document("0", &deep).is_ok(), "{} levels in all", decode_depth_max);
        w.document("1", &doc! { "d": deep.clone() }).unwrap_err();
        w.field("2", &Bson::Document(doc! { "d": deep })).unwrap_err();
        assert_eq!(decode(&out).unwrap(), doc! { "n": 3, "c": { "a": [{ "x": "y" }, 2], "id": 0i64 }, "ok": 1.0 });
        let before = out.clone();
        assert!(append_field(&mut out, "bad\0", &Bson::Null).is_err());
        assert_eq!(out, before, "a failed append leaves the document as it was");
    }

    #[test]
    fn encode_agrees_with_the_crate_writer_but_for_regex_options() {
        use bson::{oid::ObjectId, DateTime, Decimal128, Timestamp};
        let d = doc! {
            "f": 1.5, "s": "x", "d": { "a": [1, { "b": null }] }, "bin": Binary { subtype: BinarySubtype::Generic, bytes: vec![1, 2] },
            "old": Binary { subtype: BinarySubtype::BinaryOld, bytes: vec![7; 3] }, "u": Bson::Undefined,
            "o": ObjectId::from_bytes([9; 12]), "t": true, "dt": DateTime::from_millis(-5), "n": null,
            "r": Regex { pattern: "p".into(), options: "im".into() }, "c": Bson::JavaScriptCode("c".into()),
            "sym": Bson::Symbol("y".into()),
            "cws": JavaScriptCodeWithScope { code: "z".into(), scope: doc! { "q": 1 } },
            "i": 3, "ts": Timestamp { time: 7, increment: 9 }, "l": 5i64, "dec": Decimal128::from_bytes([3; 16]),
            "min": Bson::MinKey, "max": Bson::MaxKey,
        };
        #[allow(clippy::disallowed_methods)]
        let theirs = bson::to_vec(&d).unwrap();
        assert_eq!(encode(&d).unwrap(), theirs);
        assert_eq!(encoded_len(&d), theirs.len());
        let long = doc! { "a": (0..1001).map(Bson::Int32).collect::<Vec<_>>() };
        assert_eq!(encoded_len(&long), encode(&long).unwrap().len());
        assert_eq!(decode(&theirs).unwrap(), d);
        assert!(matches!(encode(&doc! { "a\0b": 1 }), Err(EncodeError::NulInName(_))));
        let deep = doc! { "a": { "b": [1] } };
        assert!(encode_within(&deep, 3).is_ok());
        assert_eq!(encode_within(&deep, 2), Err(EncodeError::TooDeep(2)));
        assert_eq!(deeper_than(&deep, 2), encode_within(&deep, 2).is_err());
    }

    #[test]
    fn extended_json_shaped_subdocuments_stay_subdocuments() {
        let d = doc! {
            "_id": 1,
            "a": { "$numberLong": "5" },
            "b": { "$binary": "aGVsbG8=", "$type": "00" },
            "c": [{ "$oid": "5f1d7e1e2b5c0a3b4c5d6e7f" }, { "$date": "2020-01-01" }],
            "d": { "x": { "$minKey": 1 }, "$undefined": true },
        };
        let raw = bytes(&d);
        let back = decode(&raw).unwrap();
        assert_eq!(back, d);
        assert_eq!(bytes(&back), raw);
        assert!(matches!(back.get("a"), Some(Bson::Document(_))));
    }

    #[test]
    fn regex_options_keep_their_order() {
        let d = doc! { "r": Bson::RegularExpression(Regex { pattern: "a".into(), options: "xi".into() }) };
        let raw = bytes(&d);
        assert_eq!(bytes(&decode(&raw).unwrap()), raw);
    }

    #[test]
    fn nesting_is_counted_and_bounded() {
        let mut d = doc! { "x": 1 };
        for _ in 0..9 {
            d = doc! { "n": [d] };
        }
        let raw = bytes(&d);
        assert!(decode_with_depth(&raw, 19).is_ok());
        assert_eq!(decode_with_depth(&raw, 18), Err(DecodeError::TooDeep { depth: 19, max: 18 }));
    }

    #[test]
    fn hostile_nesting_is_refused_at_the_depth_limit() {
        // 100,000 levels of {"": {...}} built as bytes: far past any stack.
        let levels = 100_000;
        let mut raw = Vec::new();
        for i in 0..levels {
            let len = (levels - i) * 7 + 5;
            raw.extend_from_slice(&(len as i32).to_le_bytes());
            raw.extend_from_slice(&[0x03, 0x00]);
        }
        raw.extend_from_slice(&5i32.to_le_bytes());
        raw.push(0);
        raw.extend(std::iter::repeat_n(0u8, levels));
        assert!(matches!(decode(&raw), Err(DecodeError::TooDeep { .. })));
    }

    #[test]
    fn malformed_bytes_are_an_error() {
        let mut raw = bytes(&doc! { "s": "text" });
        let at = raw.len() - 3;
        raw[at] = 0xff; // invalid UTF-8 inside the string
        assert!(matches!(decode(&raw), Err(DecodeError::Malformed(_))));
        assert!(decode(&raw[..raw.len() - 1]).is_err());
        assert!(decode(&[]).is_err());
    }
}

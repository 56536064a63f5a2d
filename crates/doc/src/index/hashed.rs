//! The values of a hashed index's keys: mongod's `BSONElementHasher`,
//! so a key, and explain's bounds on it, are the numbers mongod has for
//! the same value. MD5 over the seed (0), then per value its canonical
//! type and its bytes, numbers squashed to a 64-bit integer (so `3`,
//! `3.1` and `NumberLong(3)` hash alike), documents and arrays element by
//! element with their names; the first 8 bytes of the digest, little
//! endian. One difference: see `squashed` on Decimal128 fractions.

use bson::{Bson, Document};
use md5::{Digest, Md5};

/// The hash of `v`.
pub fn hash64(v: &Bson) -> i64 {
    let mut h = Md5::new();
    h.update(0i32.to_le_bytes());
    add(&mut h, v, None);
    let digest = h.finalize();
    i64::from_le_bytes(digest[..8].try_into().expect("an MD5 digest has 16 bytes"))
}

/// mongod's canonical type numbers (`canonicalizeBSONType`), by the
/// rank `compare::canonical_type` gives (MinKey first, MaxKey last).
const CANONICAL_NUMBERS: [i32; 17] = [-1, 0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 47, 50, 55, 60, 65, 127];

fn canonical(v: &Bson) -> i32 {
    CANONICAL_NUMBERS[usize::from(crate::compare::canonical_type(v))]
}

/// A number as a 64-bit integer, toward zero; NaN is 0, and values past
/// the range are its ends (2^63 as a double is the least, as mongod keeps
/// from older versions). A Decimal128 with a fraction truncates here
/// where mongod rounds half to even: `2.7` hashes as `2` (as the double
/// `2.7` does), not as mongod's `3`, so equal numbers always hash alike.
fn squashed(v: &Bson) -> i64 {
    let from_f64 = |d: f64| {
        if d.is_nan() {
            0
        } else if d == 9_223_372_036_854_775_808.0 {
            i64::MIN
        } else {
            // `as` truncates toward zero and saturates at the ends.
            d as i64
        }
    };
    match v {
        Bson::Int32(n) => i64::from(*n),
        Bson::Int64(n) => *n,
        Bson::Double(d) => from_f64(*d),
        Bson::Decimal128(d) => crate::decimal::truncated_i64(d),
        _ => 0,
    }
}

/// A string as BSON holds it: length (with the terminator), bytes, 0.
fn bson_string(s: &str) -> Vec<u8> {
    let mut out = ((s.len() + 1) as i32).to_le_bytes().to_vec();
    out.extend_from_slice(s.as_bytes());
    out.push(0);
    out
}

fn add(h: &mut Md5, v: &Bson, name: Option<&str>) {
    h.update(canonical(v).to_le_bytes());
    if let Some(name) = name {
        h.update(name.as_bytes());
        h.update([0]);
    }
    match v {
        Bson::Double(_) | Bson::Int32(_) | Bson::Int64(_) | Bson::Decimal128(_) => h.update(squashed(v).to_le_bytes()),
        Bson::String(s) | Bson::Symbol(s) | Bson::JavaScriptCode(s) => h.update(bson_string(s)),
        Bson::Document(d) => add_document(h, d),
        Bson::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                add(h, item, Some(&i.to_string()));
            }
            add_end(h);
        }
        Bson::JavaScriptCodeWithScope(c) => {
            // The code's bytes with their terminator, then the scope.
            h.update(c.code.as_bytes());
            h.update([0]);
            add_document(h, &c.scope);
        }
        // As stored (the old binary subtype keeps its inner length).
        Bson::Binary(_) => h.update(value_bytes(v)),
        Bson::ObjectId(o) => h.update(o.bytes()),
        Bson::Boolean(b) => h.update([u8::from(*b)]),
        Bson::DateTime(d) => h.update(d.timestamp_millis().to_le_bytes()),
        Bson::Timestamp(t) => {
            h.update(t.increment.to_le_bytes());
            h.update(t.time.to_le_bytes());
        }
        Bson::RegularExpression(r) => {
            h.update(r.pattern.as_bytes());
            h.update([0]);
            h.update(r.options.as_bytes());
            h.update([0]);
        }
        Bson::DbPointer(_) => h.update(value_bytes(v)),
        Bson::Null | Bson::Undefined | Bson::MinKey | Bson::MaxKey => {}
    }
}

/// A value's bytes as BSON holds them (after its type and name).
fn value_bytes(v: &Bson) -> Vec<u8> {
    let mut d = Document::new();
    d.insert("", v.clone());
    let bytes = crate::bson_bytes::encode(&d).unwrap_or_default();
    // Length (4), type (1), the empty name's terminator (1) ... the
    // document's terminator (1).
    bytes.get(6..bytes.len().saturating_sub(1)).map(<[u8]>::to_vec).unwrap_or_default()
}

fn add_document(h: &mut Md5, d: &Document) {
    for (k, v) in d {
        add(h, v, Some(k));
    }
    add_end(h);
}

/// The end of a document: an element of type EOO (canonical 0), with no
/// name and no value.
fn add_end(h: &mut Md5) {
    h.update(0i32.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{bson, doc};

    /// mongod's own figures for `BSONElementHasher::hash64` (its
    /// hasher_test.cpp, "determined experimentally").
    #[test]
    fn hashes_are_mongods() {
        let cases: Vec<(Bson, i64)> = vec![
            (Bson::Int32(42), -944302157085130861),
            (Bson::Double(42.123), -944302157085130861),
            (Bson::Int64(42), -944302157085130861),
            (Bson::Int32(0), 4854801880128277513),
            (Bson::Double(f64::NAN), 4854801880128277513),
            (Bson::Int32(1), 5902408780260971510),
            (Bson::Double(-1.789), 1140205862565771219),
            (Bson::Int32(i32::MIN), 6165898260261354870),
            (Bson::Int32(i32::MAX), 1143184177162245883),
            (Bson::Double(f64::MAX), 921523596458303250),
            (Bson::Int64(i64::MAX), 921523596458303250),
            (Bson::Double(-f64::MAX), 4532067210535695462),
            (Bson::MinKey, 7961148599568647290),
            (Bson::MaxKey, 5504842513779440750),
            (Bson::Undefined, 40158834000849533),
            (Bson::Null, 2338878944348059895),
            (Bson::String("abc".into()), 8478485326885698097),
            (Bson::Symbol("abc".into()), 8478485326885698097),
            (Bson::String(String::new()), 2049396243249673340),
            (Bson::Document(doc! { "a": "abc", "b": 123_i64 }), 4771603801758380216),
            (Bson::Document(doc! {}), 7980500913326740417),
            (bson!(["bar", "baz", "qux"]), -2938911267422831539),
            (bson!([]), 8849948234993459283),
            (Bson::ObjectId("010203040506070809101112".parse().unwrap()), -5588663249627035708),
            (Bson::ObjectId("000000000000000000000000".parse().unwrap()), -4293118519463489418),
            (Bson::Boolean(true), 6405873908747105701),
            (Bson::Boolean(false), 6289544573401934092),
            (Bson::DateTime(bson::DateTime::from_millis(0x5566778811223344)), 4476222765095560467),
            (Bson::DateTime(bson::DateTime::from_millis(0)), -1178696894582842035),
            (
                Bson::RegularExpression(bson::Regex { pattern: "mongodb".into(), options: String::new() }),
                -7275792090268217043,
            ),
            (Bson::RegularExpression(bson::Regex { pattern: ".*".into(), options: "i".into() }), 7095855029187981886),
            (Bson::JavaScriptCode("func f() { return 1; }".into()), 6861638109178014270),
            (Bson::Decimal128("0E+50".parse().unwrap()), 4854801880128277513),
            (
                Bson::Binary(bson::Binary {
                    subtype: bson::spec::BinarySubtype::Generic,
                    bytes: vec![0, 1, 2, 3, 4, 6],
                }),
                7252465090394235301,
            ),
        ];
        for (v, want) in cases {
            assert_eq!(hash64(&v), want, "{v:?}");
        }
    }
}

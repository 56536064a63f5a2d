//! KeyString: an order-preserving byte encoding of BSON values, so index
//! and `_id` keys compare as plain bytes exactly as `compare::compare`
//! orders the values.
//!
//! Layout: one type byte per value (ranked as the canonical type order),
//! then the value:
//! - numbers (int32, int64, double, Decimal128 alike): a NaN marker, or an
//!   ordered 8-byte double (the value rounded to the nearest double, -0 as
//!   0, beyond the double range the largest finite one) followed by the
//!   exact remainder of the value from that double (`append_remainder`;
//!   one byte when zero), so every number keeps its exact place and equal
//!   numbers of different types share a key;
//! - strings, field names, regex parts, code: bytes with 0x00 escaped as
//!   0x00 0xFF, terminated by 0x00 0x00;
//! - objects: per element the value's type byte, the field name, the value;
//!   arrays: per element the type byte and value; both end with `END`,
//!   below every type byte, so a prefix sorts first;
//! - binData: length (4 bytes), subtype, bytes; ObjectId: 12 bytes; bool:
//!   1 byte; date: sign-flipped 8 bytes; timestamp: 8 bytes.
//!
//! Invariant (checked by the property test): for all supported `a`, `b`,
//! `encode(a).cmp(&encode(b)) == compare(a, b)`.

use crate::bson_bytes::pointer_value;
use crate::decimal_math::{split_at_double, Remainder};
use bson::{Bson, Document};

/// Ends an object or array; below every type byte.
const END: u8 = 0x04;

fn type_byte(v: &Bson) -> u8 {
    // Canonical rank spaced out, so the bytes read well in dumps.
    0x0a + 10 * crate::compare::canonical_type(v)
}

/// The form a KeyString is stored in: whole up to
/// `limits::key_inline_max_bytes`, else its first that many bytes and a
/// digest of the whole. Two keys share a stored form only if they are
/// equal (but for a digest collision); order is kept between keys that
/// differ within the inline bytes, and long keys sharing those bytes
/// order by digest. `scan_bounds` turns a range of whole keys into a
/// range of stored forms holding at least every key inside it.
pub fn storable(key: Vec<u8>) -> Vec<u8> {
    use crate::limits::{key_digest_bytes, key_inline_max_bytes};
    use sha2::Digest;
    if key.len() <= key_inline_max_bytes {
        return key;
    }
    let digest = sha2::Sha256::digest(&key);
    let mut out = key;
    out.truncate(key_inline_max_bytes);
    out.extend_from_slice(&digest[..key_digest_bytes]);
    out
}

/// A range `[start, end)` of whole keys as a range of stored forms
/// (`storable`) that holds the stored form of every key inside it.
pub fn scan_bounds(start: Vec<u8>, end: Vec<u8>) -> (Vec<u8>, Vec<u8>) {
    use crate::limits::{key_digest_bytes, key_inline_max_bytes};
    let mut start = start;
    start.truncate(key_inline_max_bytes);
    let end = if end.len() <= key_inline_max_bytes {
        end
    } else {
        let mut e = end;
        e.truncate(key_inline_max_bytes);
        // Past any digest and record id that follows those bytes.
        e.extend(std::iter::repeat_n(0xff, key_digest_bytes + 9));
        e
    };
    (start, end)
}

/// Encode one value.
pub fn encode(v: &Bson) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    append(&mut out, v);
    out
}

/// Append one value's encoding to `out`.
pub fn append(out: &mut Vec<u8>, v: &Bson) {
    out.push(type_byte(v));
    append_value(out, v);
}

fn append_value(out: &mut Vec<u8>, v: &Bson) {
    match v {
        Bson::MinKey | Bson::Undefined | Bson::Null | Bson::MaxKey => {}
        Bson::Double(_) | Bson::Int32(_) | Bson::Int64(_) | Bson::Decimal128(_) => append_number(out, v),
        Bson::String(s) | Bson::Symbol(s) => append_str(out, s.as_bytes()),
        Bson::Document(d) => append_document(out, d),
        Bson::Array(items) => {
            for item in items {
                append(out, item);
            }
            out.push(END);
        }
        Bson::Binary(b) => {
            out.extend_from_slice(&(b.bytes.len() as u32).to_be_bytes());
            out.push(u8::from(b.subtype));
            out.extend_from_slice(&b.bytes);
        }
        Bson::ObjectId(o) => out.extend_from_slice(&o.bytes()),
        Bson::Boolean(b) => out.push(u8::from(*b)),
        Bson::DateTime(d) => out.extend_from_slice(&((d.timestamp_millis() as u64) ^ (1 << 63)).to_be_bytes()),
        Bson::Timestamp(t) => {
            out.extend_from_slice(&t.time.to_be_bytes());
            out.extend_from_slice(&t.increment.to_be_bytes());
        }
        Bson::RegularExpression(r) => {
            append_str(out, r.pattern.as_bytes());
            append_str(out, r.options.as_bytes());
        }
        Bson::DbPointer(_) => {
            let raw = pointer_value(v);
            out.extend_from_slice(&(raw.len() as u32).to_be_bytes());
            out.extend_from_slice(&raw);
        }
        Bson::JavaScriptCode(c) => append_str(out, c.as_bytes()),
        Bson::JavaScriptCodeWithScope(c) => {
            append_str(out, c.code.as_bytes());
            append_document(out, &c.scope);
        }
    }
}

fn append_document(out: &mut Vec<u8>, d: &Document) {
    for (k, v) in d {
        out.push(type_byte(v));
        append_str(out, k.as_bytes());
        append_value(out, v);
    }
    out.push(END);
}

fn append_str(out: &mut Vec<u8>, s: &[u8]) {
    for &b in s {
        out.push(b);
        if b == 0 {
            out.push(0xff);
        }
    }
    out.extend_from_slice(&[0, 0]);
}

/// A double's bits, flipped so unsigned byte order is numeric order.
fn ordered_f64(f: f64) -> u64 {
    let f = if f == 0.0 { 0.0 } else { f };
    let bits = f.to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits ^ (1 << 63)
    }
}

/// A number: NaN, or the nearest double then the exact remainder.
fn append_number(out: &mut Vec<u8>, v: &Bson) {
    let Some((nearest, remainder)) = split_at_double(v) else {
        out.push(0);
        return;
    };
    out.push(1);
    out.extend_from_slice(&ordered_f64(nearest).to_be_bytes());
    append_remainder(out, &remainder);
}

/// The remainder `r = value − nearest double`, exactly and in order: a
/// class byte (0x7f negative, 0x80 zero, 0x81 positive), then for nonzero
/// `r = 0.d1d2… × 10^E` the sign-flipped 2-byte `E` and the digits two per
/// byte (`10·a + b + 1`, so 1..=101, an odd count padded with 0), ended by
/// 0x00; a negative `r` inverts those bytes, so larger magnitudes sort
/// first. Digits carry no trailing zeros, so equal values encode alike.
fn append_remainder(out: &mut Vec<u8>, (negative, digits, exp): &Remainder) {
    if digits.is_empty() {
        out.push(0x80);
        return;
    }
    out.push(if *negative { 0x7f } else { 0x81 });
    let start = out.len();
    let adjusted = *exp + digits.len() as i32;
    out.extend_from_slice(&((adjusted as i16 as u16) ^ 0x8000).to_be_bytes());
    for pair in digits.chunks(2) {
        out.push(pair[0] * 10 + pair.get(1).copied().unwrap_or(0) + 1);
    }
    out.push(0);
    if *negative {
        for b in &mut out[start..] {
            *b = !*b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::compare;
    use bson::{oid::ObjectId, spec::BinarySubtype, Binary, DateTime, Timestamp};
    use proptest::prelude::*;

    fn leaf() -> impl Strategy<Value = Bson> {
        prop_oneof![
            Just(Bson::MinKey),
            Just(Bson::MaxKey),
            Just(Bson::Null),
            Just(Bson::Undefined),
            any::<i32>().prop_map(Bson::Int32),
            any::<i64>().prop_map(Bson::Int64),
            (-3i64..3).prop_map(Bson::Int64),
            any::<f64>().prop_map(Bson::Double),
            prop_oneof![Just(0.0), Just(-0.0), Just(1.0), Just(2.5), Just(9.223372036854776e18), Just(f64::NAN)]
                .prop_map(Bson::Double),
            any::<[u8; 16]>().prop_map(|b| Bson::Decimal128(bson::Decimal128::from_bytes(b))),
            (any::<bool>(), 0u64..2000, -3i32..3).prop_map(|(negative, c, e)| {
                let text = format!("{}{c}E{e}", if negative { "-" } else { "" });
                Bson::Decimal128(text.parse().unwrap())
            }),
            prop::collection::vec(prop_oneof![Just(0u8), Just(b'a'), Just(b'b'), Just(0xc3)], 0..4)
                .prop_map(|b| Bson::String(String::from_utf8_lossy(&b).into_owned())),
            "[ab]{0,3}".prop_map(Bson::Symbol),
            (0u8..3, prop::collection::vec(0u8..3, 0..3))
                .prop_map(|(s, bytes)| Bson::Binary(Binary { subtype: BinarySubtype::from(s), bytes })),
            any::<[u8; 12]>().prop_map(|b| Bson::ObjectId(ObjectId::from_bytes(b))),
            any::<bool>().prop_map(Bson::Boolean),
            any::<i64>().prop_map(|m| Bson::DateTime(DateTime::from_millis(m))),
            (any::<u32>(), any::<u32>()).prop_map(|(time, increment)| Bson::Timestamp(Timestamp { time, increment })),
            ("[ab]{0,2}", "[im]{0,2}")
                .prop_map(|(p, o)| Bson::RegularExpression(bson::Regex { pattern: p, options: o })),
            "[ab]{0,2}".prop_map(Bson::JavaScriptCode),
        ]
    }

    fn value() -> impl Strategy<Value = Bson> {
        leaf().prop_recursive(3, 16, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Bson::Array),
                prop::collection::vec(("[ab]{0,2}", inner), 0..3)
                    .prop_map(|kv| Bson::Document(kv.into_iter().collect())),
            ]
        })
    }

    /// Keys near the inline limit: a run of one byte, then a tail.
    fn long_key() -> impl Strategy<Value = Vec<u8>> {
        use crate::limits::key_inline_max_bytes as max;
        (max - 3..max + 40, 0u8..3, proptest::collection::vec(0u8..4, 0..6)).prop_map(|(n, b, tail)| {
            let mut k = vec![b; n];
            k.extend(tail);
            k
        })
    }

    proptest! {
        /// Every key inside a range has its stored form inside the
        /// range's stored bounds, and stored forms are equal only for
        /// equal keys.
        #[test]
        fn stored_forms_stay_inside_their_ranges(a in long_key(), b in long_key(), k in long_key()) {
            let (start, end) = if a <= b { (a, b) } else { (b, a) };
            if start <= k && k < end {
                let (lo, hi) = scan_bounds(start.clone(), end.clone());
                let stored = storable(k.clone());
                prop_assert!(lo <= stored && stored < hi);
            }
            prop_assert_eq!(storable(k.clone()) == storable(start.clone()), k == start);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]
        #[test]
        fn byte_order_is_mongodb_order(a in value(), b in value()) {
            let (ka, kb) = (encode(&a), encode(&b));
            prop_assert_eq!(ka.cmp(&kb), compare(&a, &b), "{:?} vs {:?}", a, b);
        }
    }

    #[test]
    fn decimals_take_their_exact_place_among_all_numbers() {
        let d = |s: &str| Bson::Decimal128(s.parse().unwrap());
        let vals = [
            d("0.1"),
            Bson::Double(0.1),
            d("0.1000000000000000055511151231257827"),
            d("0.1000000000000000055511151231257828"),
            d("0.10"),
            d("-0.1"),
            Bson::Double(-0.1),
            d("-0"),
            Bson::Int32(0),
            d("1"),
            d("1.000"),
            Bson::Int64(1),
            d("9223372036854775807"),
            d("9223372036854775806.5"),
            Bson::Int64(i64::MAX),
            Bson::Int64(i64::MAX - 1),
            Bson::Double(9.223372036854776e18),
            d("9223372036854775808"),
            d("1E+400"),
            d("-1E+400"),
            d("1.7976931348623157E+308"),
            Bson::Double(f64::MAX),
            d("1E-400"),
            d("-1E-400"),
            Bson::Double(5e-324),
            d("2.4703282292062327E-324"),
            d("2.4703282292062328E-324"),
            d("Infinity"),
            Bson::Double(f64::INFINITY),
            d("-Infinity"),
            Bson::Double(f64::NEG_INFINITY),
            d("NaN"),
            Bson::Double(f64::NAN),
            d("9.999999999999999999999999999999999E+6144"),
            d("1E-6176"),
        ];
        for a in &vals {
            for b in &vals {
                assert_eq!(encode(a).cmp(&encode(b)), compare(a, b), "{a:?} vs {b:?}");
            }
        }
        // Equal values share one key: a duplicate `_id` whatever its type.
        assert_eq!(encode(&d("1.000")), encode(&Bson::Int32(1)));
        assert_eq!(encode(&d("0.5")), encode(&Bson::Double(0.5)));
        assert_eq!(encode(&d("-0")), encode(&Bson::Double(0.0)));
    }

    #[test]
    fn integers_near_doubles_keep_their_exact_place() {
        let vals = [
            Bson::Int64(i64::MAX - 1),
            Bson::Int64(i64::MAX),
            Bson::Double(9.223372036854776e18),
            Bson::Int64((1 << 53) + 1),
            Bson::Double(9_007_199_254_740_992.0),
        ];
        for a in &vals {
            for b in &vals {
                assert_eq!(encode(a).cmp(&encode(b)), compare(a, b), "{a:?} vs {b:?}");
            }
        }
    }
}

//! KeyString: an order-preserving byte encoding of BSON values, so index
//! and `_id` keys compare as plain bytes exactly as `compare::compare`
//! orders the values.
//!
//! Layout: one type byte per value (ranked as the canonical type order),
//! then the value:
//! - numbers: a NaN marker, or an ordered 8-byte double (the value rounded
//!   to the nearest double, -0 as 0) followed by the exact 8-byte signed
//!   difference of an integer from that double, so every int64 and double
//!   keeps its exact place;
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

use crate::compare::{number, pointer_value, Number};
use bson::{Bson, Document};

/// Ends an object or array; below every type byte.
const END: u8 = 0x04;

fn type_byte(v: &Bson) -> u8 {
    // Canonical rank spaced out, so the bytes read well in dumps.
    0x0a + 10 * crate::compare::canonical_type(v)
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("Decimal128 values cannot be indexed yet")]
    Decimal128,
}

/// Encode one value.
pub fn encode(v: &Bson) -> Result<Vec<u8>, KeyError> {
    let mut out = Vec::with_capacity(16);
    append(&mut out, v)?;
    Ok(out)
}

/// Append one value's encoding to `out`.
pub fn append(out: &mut Vec<u8>, v: &Bson) -> Result<(), KeyError> {
    out.push(type_byte(v));
    append_value(out, v)
}

fn append_value(out: &mut Vec<u8>, v: &Bson) -> Result<(), KeyError> {
    match v {
        Bson::MinKey | Bson::Undefined | Bson::Null | Bson::MaxKey => {}
        Bson::Decimal128(_) => return Err(KeyError::Decimal128),
        Bson::Double(_) | Bson::Int32(_) | Bson::Int64(_) => append_number(out, number(v).expect("a number")),
        Bson::String(s) | Bson::Symbol(s) => append_str(out, s.as_bytes()),
        Bson::Document(d) => append_document(out, d)?,
        Bson::Array(items) => {
            for item in items {
                append(out, item)?;
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
            append_document(out, &c.scope)?;
        }
    }
    Ok(())
}

fn append_document(out: &mut Vec<u8>, d: &Document) -> Result<(), KeyError> {
    for (k, v) in d {
        out.push(type_byte(v));
        append_str(out, k.as_bytes());
        append_value(out, v)?;
    }
    out.push(END);
    Ok(())
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

fn append_number(out: &mut Vec<u8>, n: Number) {
    let (nearest, delta) = match n {
        Number::Float(f) if f.is_nan() => {
            out.push(0);
            return;
        }
        Number::Float(f) => (f, 0i64),
        Number::Int(i) => {
            let d = i as f64;
            // |i - d| <= 512 for every i64: the difference fits easily.
            (d, (i128::from(i) - d as i128) as i64)
        }
    };
    out.push(1);
    out.extend_from_slice(&ordered_f64(nearest).to_be_bytes());
    out.extend_from_slice(&((delta as u64) ^ (1 << 63)).to_be_bytes());
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

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]
        #[test]
        fn byte_order_is_mongodb_order(a in value(), b in value()) {
            let (ka, kb) = (encode(&a).unwrap(), encode(&b).unwrap());
            prop_assert_eq!(ka.cmp(&kb), compare(&a, &b), "{:?} vs {:?}", a, b);
        }
    }

    #[test]
    fn decimal_is_refused_not_misordered() {
        let d = Bson::Decimal128("1.5".parse().unwrap());
        assert_eq!(encode(&d), Err(KeyError::Decimal128));
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
                assert_eq!(encode(a).unwrap().cmp(&encode(b).unwrap()), compare(a, b), "{a:?} vs {b:?}");
            }
        }
    }
}

//! BSON values in MongoDB's comparison order (what sort, `$gt` and indexes
//! agree on): first by canonical type, then within the type.
//!
//! Canonical type order: MinKey < undefined < null < numbers < strings and
//! symbols < objects < arrays < binData < ObjectId < bool < date <
//! timestamp < regex < DBPointer < JavaScript < JavaScript with scope <
//! MaxKey. Numbers of every type compare by value (NaN below every other
//! number and equal to itself, -0 equal to 0); strings byte-wise (no
//! collation); objects element by element (type, then field name, then
//! value; a prefix sorts first); arrays element by element; binData by
//! length, then subtype, then bytes.
//!
//! Decimal128 compares exactly with every number type (`decimal.rs`).

use crate::bson_bytes::pointer_value;
use bson::{Bson, Document};
use std::cmp::Ordering;

/// Canonical type rank (MongoDB's `canonicalizeBSONType`).
pub fn canonical_type(v: &Bson) -> u8 {
    match v {
        Bson::MinKey => 0,
        Bson::Undefined => 1,
        Bson::Null => 2,
        Bson::Double(_) | Bson::Int32(_) | Bson::Int64(_) | Bson::Decimal128(_) => 3,
        Bson::String(_) | Bson::Symbol(_) => 4,
        Bson::Document(_) => 5,
        Bson::Array(_) => 6,
        Bson::Binary(_) => 7,
        Bson::ObjectId(_) => 8,
        Bson::Boolean(_) => 9,
        Bson::DateTime(_) => 10,
        Bson::Timestamp(_) => 11,
        Bson::RegularExpression(_) => 12,
        Bson::DbPointer(_) => 13,
        Bson::JavaScriptCode(_) => 14,
        Bson::JavaScriptCodeWithScope(_) => 15,
        Bson::MaxKey => 16,
    }
}

/// A number as MongoDB compares it.
#[derive(Debug, Clone, Copy)]
pub enum Number {
    Int(i64),
    Float(f64),
}

pub fn number(v: &Bson) -> Option<Number> {
    Some(match v {
        Bson::Int32(i) => Number::Int((*i).into()),
        Bson::Int64(i) => Number::Int(*i),
        Bson::Double(d) => Number::Float(*d),
        Bson::Decimal128(d) => Number::Float(d.to_string().parse().unwrap_or(f64::NAN)),
        _ => return None,
    })
}

/// Exact comparison of an integer with a double (NaN below everything).
fn cmp_int_float(i: i64, f: f64) -> Ordering {
    if f.is_nan() {
        return Ordering::Greater;
    }
    if f >= 9_223_372_036_854_775_808.0 {
        return Ordering::Less;
    }
    if f < -9_223_372_036_854_775_808.0 {
        return Ordering::Greater;
    }
    let t = f.trunc();
    match i.cmp(&(t as i64)) {
        Ordering::Equal => 0.0f64.partial_cmp(&(f - t)).expect("finite"),
        o => o,
    }
}

pub fn cmp_numbers(a: Number, b: Number) -> Ordering {
    match (a, b) {
        (Number::Int(x), Number::Int(y)) => x.cmp(&y),
        (Number::Int(x), Number::Float(y)) => cmp_int_float(x, y),
        (Number::Float(x), Number::Int(y)) => cmp_int_float(y, x).reverse(),
        (Number::Float(x), Number::Float(y)) => match (x.is_nan(), y.is_nan()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Less,
            (false, true) => Ordering::Greater,
            (false, false) => x.partial_cmp(&y).expect("not NaN"),
        },
    }
}

/// Compare two values in MongoDB's order.
pub fn compare(a: &Bson, b: &Bson) -> Ordering {
    let (ta, tb) = (canonical_type(a), canonical_type(b));
    if ta != tb {
        return ta.cmp(&tb);
    }
    match (a, b) {
        (Bson::Decimal128(_), _) | (_, Bson::Decimal128(_)) => {
            crate::decimal::compare_exact(a, b).expect("both are numbers")
        }
        _ if ta == 3 => cmp_numbers(number(a).unwrap(), number(b).unwrap()),
        (Bson::String(_) | Bson::Symbol(_), _) => str_of(a).cmp(str_of(b)),
        (Bson::Document(x), Bson::Document(y)) => compare_documents(x, y),
        (Bson::Array(x), Bson::Array(y)) => {
            for (l, r) in x.iter().zip(y) {
                let o = compare(l, r);
                if o != Ordering::Equal {
                    return o;
                }
            }
            x.len().cmp(&y.len())
        }
        (Bson::Binary(x), Bson::Binary(y)) => x
            .bytes
            .len()
            .cmp(&y.bytes.len())
            .then(u8::from(x.subtype).cmp(&u8::from(y.subtype)))
            .then(x.bytes.cmp(&y.bytes)),
        (Bson::ObjectId(x), Bson::ObjectId(y)) => x.bytes().cmp(&y.bytes()),
        (Bson::Boolean(x), Bson::Boolean(y)) => x.cmp(y),
        (Bson::DateTime(x), Bson::DateTime(y)) => x.timestamp_millis().cmp(&y.timestamp_millis()),
        (Bson::Timestamp(x), Bson::Timestamp(y)) => (x.time, x.increment).cmp(&(y.time, y.increment)),
        (Bson::RegularExpression(x), Bson::RegularExpression(y)) => {
            x.pattern.as_bytes().cmp(y.pattern.as_bytes()).then(x.options.as_bytes().cmp(y.options.as_bytes()))
        }
        (Bson::DbPointer(_), Bson::DbPointer(_)) => {
            let (x, y) = (pointer_value(a), pointer_value(b));
            x.len().cmp(&y.len()).then(x.cmp(&y))
        }
        (Bson::JavaScriptCode(x), Bson::JavaScriptCode(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Bson::JavaScriptCodeWithScope(x), Bson::JavaScriptCodeWithScope(y)) => {
            x.code.as_bytes().cmp(y.code.as_bytes()).then_with(|| compare_documents(&x.scope, &y.scope))
        }
        // MinKey, undefined, null, MaxKey: one value each.
        _ => Ordering::Equal,
    }
}

/// Objects: element by element, each by type, then field name, then value.
pub fn compare_documents(x: &Document, y: &Document) -> Ordering {
    for ((kx, vx), (ky, vy)) in x.iter().zip(y) {
        let o = canonical_type(vx)
            .cmp(&canonical_type(vy))
            .then_with(|| kx.as_bytes().cmp(ky.as_bytes()))
            .then_with(|| compare(vx, vy));
        if o != Ordering::Equal {
            return o;
        }
    }
    x.len().cmp(&y.len())
}

fn str_of(v: &Bson) -> &[u8] {
    match v {
        Bson::String(s) | Bson::Symbol(s) => s.as_bytes(),
        _ => unreachable!("strings only"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{bson, doc, oid::ObjectId, spec::BinarySubtype, Binary, DateTime, Timestamp};

    #[test]
    fn types_order_canonically() {
        let ascending = [
            Bson::MinKey,
            Bson::Null,
            bson!(-1.5),
            Bson::String("a".into()),
            bson!({}),
            bson!([]),
            Bson::Binary(Binary { subtype: BinarySubtype::Generic, bytes: vec![] }),
            Bson::ObjectId(ObjectId::from_bytes([0; 12])),
            Bson::Boolean(false),
            Bson::DateTime(DateTime::from_millis(-5)),
            Bson::Timestamp(Timestamp { time: 0, increment: 0 }),
            Bson::RegularExpression(bson::Regex { pattern: "a".into(), options: "".into() }),
            Bson::MaxKey,
        ];
        for w in ascending.windows(2) {
            assert_eq!(compare(&w[0], &w[1]), Ordering::Less, "{:?} < {:?}", w[0], w[1]);
        }
    }

    #[test]
    fn numbers_compare_by_value_across_types() {
        assert_eq!(compare(&bson!(1), &bson!(1.0)), Ordering::Equal);
        assert_eq!(compare(&bson!(1i64), &bson!(1.5)), Ordering::Less);
        assert_eq!(compare(&bson!(f64::NAN), &bson!(f64::NEG_INFINITY)), Ordering::Less);
        assert_eq!(compare(&bson!(f64::NAN), &bson!(f64::NAN)), Ordering::Equal);
        assert_eq!(compare(&bson!(-0.0), &bson!(0)), Ordering::Equal);
        // 2^63 - 1 is below the double 2^63 it rounds to.
        assert_eq!(compare(&bson!(i64::MAX), &bson!(9_223_372_036_854_775_808.0)), Ordering::Less);
        assert_eq!(compare(&bson!((1i64 << 53) + 1), &bson!(9_007_199_254_740_992.0)), Ordering::Greater);
    }

    #[test]
    fn documents_compare_by_type_then_name_then_value() {
        assert_eq!(compare_documents(&doc! { "a": 1 }, &doc! { "a": 1, "b": 1 }), Ordering::Less);
        assert_eq!(compare_documents(&doc! { "b": 1 }, &doc! { "a": 2 }), Ordering::Greater);
        // A string value sorts after any number whatever the names.
        assert_eq!(compare_documents(&doc! { "a": "x" }, &doc! { "b": 1 }), Ordering::Greater);
        assert_eq!(compare(&bson!([1, 2]), &bson!([1, 3])), Ordering::Less);
        assert_eq!(compare(&bson!([1]), &bson!([1, 0])), Ordering::Less);
    }

    #[test]
    fn bindata_compares_length_first() {
        let b = |subtype: u8, bytes: Vec<u8>| Bson::Binary(Binary { subtype: subtype.into(), bytes });
        assert_eq!(compare(&b(0, vec![9]), &b(0, vec![0, 0])), Ordering::Less);
        assert_eq!(compare(&b(5, vec![0]), &b(0, vec![1])), Ordering::Greater);
    }
}

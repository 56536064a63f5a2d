//! Values printed the way mongod prints them in error messages
//! (`{_id: 1, a: "x"}`, `ObjectId('…')`).

use bson::{Bson, Document};
use std::fmt::Write;

/// A value, as mongod prints one in an error message.
pub fn value(v: &Bson) -> String {
    let mut out = String::new();
    write_value(&mut out, v, false);
    out
}

/// A value as mongod's `BSONObj::toString` prints it (E11000 messages):
/// documents and arrays with spaces inside their brackets, `{ a: [ 1 ] }`.
pub fn spaced(v: &Bson) -> String {
    let mut out = String::new();
    write_value(&mut out, v, true);
    out
}

/// A document: `{a: 1, b: "x"}`.
pub fn document(d: &Document) -> String {
    let mut out = String::new();
    write_document(&mut out, d, false);
    out
}

/// One field: `a: 1`.
pub fn field(name: &str, v: &Bson) -> String {
    let mut out = format!("{name}: ");
    write_value(&mut out, v, false);
    out
}

/// An element with no name, as some messages print one (`1`, `"x"`).
pub fn element(v: &Bson) -> String {
    value(v)
}

fn write_document(out: &mut String, d: &Document, spaced: bool) {
    let pad = if spaced && !d.is_empty() { " " } else { "" };
    out.push('{');
    out.push_str(pad);
    for (i, (k, v)) in d.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(k);
        out.push_str(": ");
        write_value(out, v, spaced);
    }
    out.push_str(pad);
    out.push('}');
}

fn write_value(out: &mut String, v: &Bson, spaced: bool) {
    match v {
        Bson::Double(d) if d.is_finite() && d.fract() == 0.0 && d.abs() < 1e15 => {
            let _ = write!(out, "{d:.1}");
        }
        Bson::Double(d) if d.is_nan() => out.push_str("nan.0"),
        Bson::Double(d) if d.is_infinite() => out.push_str(if *d > 0.0 { "inf.0" } else { "-inf.0" }),
        Bson::Double(d) => {
            let _ = write!(out, "{d}");
        }
        Bson::String(s) => {
            let _ = write!(out, "\"{s}\"");
        }
        Bson::Document(d) => write_document(out, d, spaced),
        Bson::Array(items) => {
            let pad = if spaced && !items.is_empty() { " " } else { "" };
            out.push('[');
            out.push_str(pad);
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_value(out, item, spaced);
            }
            out.push_str(pad);
            out.push(']');
        }
        Bson::Boolean(b) => {
            let _ = write!(out, "{b}");
        }
        Bson::Null => out.push_str("null"),
        Bson::Undefined => out.push_str("undefined"),
        Bson::Int32(i) => {
            let _ = write!(out, "{i}");
        }
        Bson::Int64(i) => {
            let _ = write!(out, "{i}");
        }
        Bson::ObjectId(o) => {
            let _ = write!(out, "ObjectId('{o}')");
        }
        Bson::DateTime(d) => {
            let _ = write!(out, "new Date({})", d.timestamp_millis());
        }
        Bson::Timestamp(t) => {
            let _ = write!(out, "Timestamp({}, {})", t.time, t.increment);
        }
        Bson::RegularExpression(r) => {
            let _ = write!(out, "/{}/{}", r.pattern, r.options);
        }
        Bson::Decimal128(d) => {
            let _ = write!(out, "NumberDecimal(\"{d}\")");
        }
        Bson::MinKey => out.push_str("MinKey"),
        Bson::MaxKey => out.push_str("MaxKey"),
        other => {
            let _ = write!(out, "{other}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn prints_like_mongod() {
        let oid = bson::oid::ObjectId::parse_str("65a1b2c3d4e5f60718293a4b").unwrap();
        assert_eq!(
            document(&doc! { "_id": oid, "a": 1, "b": "x", "c": [1.5, 2.0], "d": null }),
            "{_id: ObjectId('65a1b2c3d4e5f60718293a4b'), a: 1, b: \"x\", c: [1.5, 2.0], d: null}"
        );
        assert_eq!(field("a", &Bson::Int64(3)), "a: 3");
        let nested = Bson::Document(doc! { "a": [1, { "b": [] }], "c": {} });
        assert_eq!(spaced(&nested), "{ a: [ 1, { b: [] } ], c: {} }");
    }
}

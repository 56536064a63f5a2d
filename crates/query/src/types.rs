//! Helpers over BSON types that every part of the query language shares:
//! the names mongod gives the types (in its messages and in `$type`),
//! `$type`'s type codes, what counts as a number, and truthiness. A leaf:
//! it uses only `error.rs`.

use crate::error::{bad_value, err, FilterError, TYPE_MISMATCH};
use bson::Bson;
use doc::compare::{number, Number};
use doc::decimal_math::{Dec, DoubleDigits};

/// The type's name as MongoDB's errors spell it (`$type`'s aliases).
pub fn type_name(v: &Bson) -> &'static str {
    match v {
        Bson::Double(_) => "double",
        Bson::String(_) => "string",
        Bson::Document(_) => "object",
        Bson::Array(_) => "array",
        Bson::Binary(_) => "binData",
        Bson::Undefined => "undefined",
        Bson::ObjectId(_) => "objectId",
        Bson::Boolean(_) => "bool",
        Bson::DateTime(_) => "date",
        Bson::Null => "null",
        Bson::RegularExpression(_) => "regex",
        Bson::DbPointer(_) => "dbPointer",
        Bson::JavaScriptCode(_) => "javascript",
        Bson::Symbol(_) => "symbol",
        Bson::JavaScriptCodeWithScope(_) => "javascriptWithScope",
        Bson::Int32(_) => "int",
        Bson::Timestamp(_) => "timestamp",
        Bson::Int64(_) => "long",
        Bson::Decimal128(_) => "decimal",
        Bson::MinKey => "minKey",
        Bson::MaxKey => "maxKey",
    }
}

/// A `$type` argument as a BSON type number; "number" is -2 here.
pub(crate) fn type_code(v: &Bson) -> Result<i32, FilterError> {
    const NAMES: &[(&str, i32)] = &[
        ("double", 1),
        ("string", 2),
        ("object", 3),
        ("array", 4),
        ("binData", 5),
        ("undefined", 6),
        ("objectId", 7),
        ("bool", 8),
        ("date", 9),
        ("null", 10),
        ("regex", 11),
        ("dbPointer", 12),
        ("javascript", 13),
        ("symbol", 14),
        ("javascriptWithScope", 15),
        ("int", 16),
        ("timestamp", 17),
        ("long", 18),
        ("decimal", 19),
        ("minKey", -1),
        ("maxKey", 127),
        ("number", -2),
    ];
    match v {
        Bson::String(s) => NAMES
            .iter()
            .find(|(n, _)| n == s)
            .map(|(_, c)| *c)
            .ok_or_else(|| bad_value(format!("Unknown type name alias: {s}"))),
        other => match number(other) {
            Some(Number::Int(i)) if NAMES.iter().any(|(_, c)| i64::from(*c) == i && *c != -2) => Ok(i as i32),
            Some(Number::Float(f)) if NAMES.iter().any(|(_, c)| f64::from(*c) == f && *c != -2) => Ok(f as i32),
            Some(_) => Err(bad_value(format!("Invalid numerical type code: {other}"))),
            None => Err(err(TYPE_MISMATCH, "type must be represented as a number or a string")),
        },
    }
}

/// Is `v` of one of these `$type` codes ([`type_code`]'s)?
pub(crate) fn has_type(v: &Bson, codes: &[i32]) -> bool {
    let code = match v {
        Bson::Double(_) => 1,
        Bson::String(_) => 2,
        Bson::Document(_) => 3,
        Bson::Array(_) => 4,
        Bson::Binary(_) => 5,
        Bson::Undefined => 6,
        Bson::ObjectId(_) => 7,
        Bson::Boolean(_) => 8,
        Bson::DateTime(_) => 9,
        Bson::Null => 10,
        Bson::RegularExpression(_) => 11,
        Bson::DbPointer(_) => 12,
        Bson::JavaScriptCode(_) => 13,
        Bson::Symbol(_) => 14,
        Bson::JavaScriptCodeWithScope(_) => 15,
        Bson::Int32(_) => 16,
        Bson::Timestamp(_) => 17,
        Bson::Int64(_) => 18,
        Bson::Decimal128(_) => 19,
        Bson::MinKey => -1,
        Bson::MaxKey => 127,
    };
    codes.iter().any(|c| *c == code || (*c == -2 && matches!(code, 1 | 16 | 18 | 19)))
}

/// A number of any numeric type, decimals included.
pub(crate) fn is_number(v: &Bson) -> bool {
    matches!(v, Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_))
}

/// Truthiness: false, null, missing, undefined and zero are false.
pub fn truthy(v: &Option<Bson>) -> bool {
    match v {
        None | Some(Bson::Null | Bson::Undefined | Bson::Boolean(false)) => false,
        Some(Bson::Int32(0) | Bson::Int64(0)) => false,
        Some(Bson::Double(d)) => *d != 0.0,
        Some(v @ Bson::Decimal128(_)) => !matches!(
            Dec::from_bson(v, DoubleDigits::ThirtyFour),
            Some(Dec::Finite { ref digits, .. }) if digits.iter().all(|d| *d == 0)
        ),
        Some(_) => true,
    }
}

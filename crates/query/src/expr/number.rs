//! Numbers for arithmetic: [`Num`] (int, long or double) with MongoDB's
//! widening (int, then long on overflow, then double), and decimal
//! operands (`doc::decimal_math`), as mongod's expressions convert them.

use bson::Bson;
use doc::decimal_math::{Dec, DoubleDigits};

/// A number for arithmetic.
#[derive(Clone, Copy)]
pub(super) enum Num {
    Int(i32),
    Long(i64),
    Double(f64),
}

/// `v` as a [`Num`]; `None` for anything else (decimals included).
pub(super) fn num(v: &Bson) -> Option<Num> {
    match v {
        Bson::Int32(i) => Some(Num::Int(*i)),
        Bson::Int64(i) => Some(Num::Long(*i)),
        Bson::Double(d) => Some(Num::Double(*d)),
        _ => None,
    }
}

pub(super) fn f64_of(n: Num) -> f64 {
    match n {
        Num::Int(i) => i as f64,
        Num::Long(i) => i as f64,
        Num::Double(d) => d,
    }
}

pub(super) fn bson_of(n: Num) -> Bson {
    match n {
        Num::Int(i) => Bson::Int32(i),
        Num::Long(i) => Bson::Int64(i),
        Num::Double(d) => Bson::Double(d),
    }
}

pub(super) fn long(n: Num) -> i64 {
    match n {
        Num::Int(i) => i.into(),
        Num::Long(i) => i,
        Num::Double(d) => d as i64,
    }
}

/// `a op b` with MongoDB's widening: int, then long on overflow, then
/// double.
pub(super) fn arith(a: Num, b: Num, int: fn(i64, i64) -> Option<i64>, float: fn(f64, f64) -> f64) -> Num {
    match (a, b) {
        (Num::Double(_), _) | (_, Num::Double(_)) => Num::Double(float(f64_of(a), f64_of(b))),
        (Num::Int(x), Num::Int(y)) => match int(x.into(), y.into()) {
            Some(r) if i32::try_from(r).is_ok() => Num::Int(r as i32),
            Some(r) => Num::Long(r),
            None => Num::Double(float(x as f64, y as f64)),
        },
        _ => {
            let (x, y) = (long(a), long(b));
            match int(x, y) {
                Some(r) => Num::Long(r),
                None => Num::Double(float(x as f64, y as f64)),
            }
        }
    }
}

/// A number as a decimal operand: a double keeps 15 digits, as mongod's
/// expressions convert it.
pub(super) fn to_dec(v: &Bson) -> Dec {
    Dec::from_bson(v, DoubleDigits::Fifteen).unwrap_or(Dec::NaN)
}

//! mongod's integer argument parse (`parseIntegerElementToLong` and its
//! non-negative form), shared by `$skip`, `$limit` and `$size`: the same
//! four failures in the same order, each naming the argument as
//! `<label>: <value>` as mongod's `BSONElement::toString` prints it (`nan.0`,
//! `inf.0`, `{ $gt: 1 }`).

use bson::Bson;
use doc::decimal_math::{Dec, DoubleDigits, Integral};
use doc::format;

/// 2^63 as a double: the first double above every long.
const LONG_END: f64 = 9_223_372_036_854_775_808.0;

/// `v` as a long, or the reason it is not one (without a prefix: callers
/// add their own, such as "Failed to parse $size. ").
pub(crate) fn parse(label: &str, v: &Bson, non_negative: bool) -> Result<i64, String> {
    let shown = || format!("{label}: {}", format::spaced(v));
    let n = match v {
        Bson::Int32(i) => i64::from(*i),
        Bson::Int64(i) => *i,
        Bson::Double(d) if d.is_nan() => return Err(format!("Expected an integer, but found NaN in: {}", shown())),
        Bson::Double(d) if !(-LONG_END..LONG_END).contains(d) => {
            return Err(format!("Cannot represent as a 64-bit integer: {}", shown()))
        }
        Bson::Double(d) if d.fract() != 0.0 => return Err(format!("Expected an integer: {}", shown())),
        Bson::Double(d) => *d as i64,
        Bson::Decimal128(_) => {
            let exact = Dec::from_bson(v, DoubleDigits::Fifteen)
                .filter(|d| doc::compare::compare(&d.to_integral(Integral::Trunc).to_bson(), v).is_eq())
                .map(|d| d.to_f64())
                .filter(|f| (-LONG_END..LONG_END).contains(f));
            match exact {
                Some(f) => f as i64,
                None => return Err(format!("Cannot represent as a 64-bit integer: {}", shown())),
            }
        }
        _ => return Err(format!("Expected a number in: {}", shown())),
    };
    if non_negative && n < 0 {
        return Err(format!("Expected a non-negative number in: {}", shown()));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::parse;
    use bson::{Bson, Decimal128};
    use std::str::FromStr;

    #[test]
    fn failures_come_in_mongods_order_and_words() {
        let p = |v: Bson| parse("$size", &v, true);
        assert_eq!(p(Bson::Int32(3)), Ok(3));
        assert_eq!(p(Bson::Double(2.0)), Ok(2));
        assert_eq!(p(Bson::Double(-0.0)), Ok(0));
        assert_eq!(p(Bson::Double(f64::NAN)).unwrap_err(), "Expected an integer, but found NaN in: $size: nan.0");
        assert_eq!(p(Bson::Double(f64::INFINITY)).unwrap_err(), "Cannot represent as a 64-bit integer: $size: inf.0");
        assert!(p(Bson::Double(1e20)).unwrap_err().starts_with("Cannot represent as a 64-bit integer: $size: "));
        assert_eq!(p(Bson::Double(2.1)).unwrap_err(), "Expected an integer: $size: 2.1");
        assert_eq!(p(Bson::Int32(-1)).unwrap_err(), "Expected a non-negative number in: $size: -1");
        assert_eq!(p(Bson::String("x".into())).unwrap_err(), "Expected a number in: $size: \"x\"");
        let dec = |s: &str| Bson::Decimal128(Decimal128::from_str(s).unwrap());
        assert_eq!(p(dec("4.00")), Ok(4));
        assert!(p(dec("1.5")).unwrap_err().starts_with("Cannot represent as a 64-bit integer: $size: "));
        assert!(p(dec("1E+30")).unwrap_err().starts_with("Cannot represent as a 64-bit integer: "));
        assert_eq!(parse("$skip", &Bson::Int64(-5), false), Ok(-5));
    }
}

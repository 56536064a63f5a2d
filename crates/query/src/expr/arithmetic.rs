//! Arithmetic operators: `$add $subtract $multiply $divide $mod $pow`,
//! `$abs $ceil $floor $sqrt`, and `$round $trunc` (to a number of decimal
//! places). Integers widen as mongod's do (`number.rs`); a decimal
//! operand makes the result a decimal; `$add` and `$subtract` take a date
//! (milliseconds added or taken). A null or missing operand gives null.

use super::number::{arith, bson_of, f64_of, long, num, to_dec, Num};
use super::{eval_all, nullish, parse_args, parse_exactly, Env, Node, Scope};
use crate::error::{err, FilterError};
use crate::types::{is_number, type_name};
use bson::Bson;
use doc::decimal_math::{Dec, DoubleDigits, Integral};

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Op {
    Add,
    Subtract,
    Multiply,
    Divide,
    Mod,
    Abs,
    Ceil,
    Floor,
    Trunc,
    Round,
    Sqrt,
    Pow,
}

pub(super) fn parse(name: &str, arg: &Bson, scope: &Scope) -> Option<Result<Node, FilterError>> {
    let op = match name {
        "$add" => Op::Add,
        "$subtract" => Op::Subtract,
        "$multiply" => Op::Multiply,
        "$divide" => Op::Divide,
        "$mod" => Op::Mod,
        "$abs" => Op::Abs,
        "$ceil" => Op::Ceil,
        "$floor" => Op::Floor,
        "$trunc" => Op::Trunc,
        "$round" => Op::Round,
        "$sqrt" => Op::Sqrt,
        "$pow" => Op::Pow,
        _ => return None,
    };
    let args = match op {
        Op::Add | Op::Multiply => parse_args(arg, scope),
        Op::Subtract | Op::Divide | Op::Mod | Op::Pow => parse_exactly(name, 2, arg, scope),
        Op::Abs | Op::Ceil | Op::Floor | Op::Sqrt => parse_exactly(name, 1, arg, scope),
        Op::Trunc | Op::Round => parse_args(arg, scope).and_then(|args| match args.len() {
            1 | 2 => Ok(args),
            n => Err(err(
                28667,
                format!("Expression {name} takes at least 1 arguments, and at most 2, but {n} were passed in."),
            )),
        }),
    };
    Some(args.map(|args| Node::Op(super::Op::Arithmetic(op), args)))
}

pub(super) fn eval(op: Op, args: &[Node], env: &Env) -> Result<Option<Bson>, FilterError> {
    match op {
        Op::Add | Op::Multiply => add_or_multiply(op, eval_all(args, env)?),
        Op::Subtract | Op::Divide | Op::Mod | Op::Pow => {
            let v = eval_all(args, env)?;
            match (&v[0], &v[1]) {
                (a, b) if nullish(a) || nullish(b) => Ok(Some(Bson::Null)),
                (Some(a), Some(b)) => binary(op, a, b).map(Some),
                _ => unreachable!("nullish covers missing"),
            }
        }
        Op::Trunc | Op::Round => {
            let v = args[0].eval(env)?;
            let place = args.get(1).map(|p| p.eval(env)).transpose()?;
            match op {
                Op::Trunc => round_or_trunc("$trunc", Integral::Trunc, v, place),
                _ => round_or_trunc("$round", Integral::HalfEven, v, place),
            }
        }
        Op::Abs | Op::Ceil | Op::Floor | Op::Sqrt => unary(op, args[0].eval(env)?),
    }
}

fn decimal_unsupported(name: &str) -> FilterError {
    err(238, format!("{name} with Decimal128 operands is not supported yet"))
}

/// `$add` (numbers and at most one date) or `$multiply` of every value.
fn add_or_multiply(op: Op, values: Vec<Option<Bson>>) -> Result<Option<Bson>, FilterError> {
    let add = op == Op::Add;
    let name = if add { "$add" } else { "$multiply" };
    let mut acc = Num::Int(if add { 0 } else { 1 });
    let mut date: Option<i64> = None;
    // Once a decimal comes, the total is a decimal.
    let mut decimal: Option<Dec> = None;
    for v in values {
        let v = match v {
            None | Some(Bson::Null | Bson::Undefined) => return Ok(Some(Bson::Null)),
            Some(v) => v,
        };
        if let (Bson::DateTime(d), true) = (&v, add) {
            if date.is_some() {
                return Err(err(16612, "only one date allowed in an $add expression"));
            }
            date = Some(d.timestamp_millis());
            continue;
        }
        if !is_number(&v) {
            let (what, code) = if add { ("numeric or date types", 16554) } else { ("numeric types", 16555) };
            return Err(err(code, format!("{name} only supports {what}, not {}", type_name(&v))));
        }
        if decimal.is_some() || matches!(v, Bson::Decimal128(_)) {
            let total = decimal.take().unwrap_or_else(|| to_dec(&bson_of(acc)));
            let operand = to_dec(&v);
            decimal = Some(if add { total.add(&operand) } else { total.mul(&operand) });
            continue;
        }
        let n = num(&v).expect("a number, not a decimal");
        acc = match op {
            Op::Add => arith(acc, n, i64::checked_add, |a, b| a + b),
            _ => arith(acc, n, i64::checked_mul, |a, b| a * b),
        };
    }
    Ok(Some(match (date, decimal) {
        (Some(_), Some(_)) => return Err(decimal_unsupported("$add of a date")),
        (None, Some(total)) => total.to_bson(),
        (Some(ms), None) => Bson::DateTime(bson::DateTime::from_millis(ms.wrapping_add(millis(acc)))),
        (None, None) => bson_of(acc),
    }))
}

/// A number of milliseconds to add to or take from a date (a double
/// rounded).
fn millis(n: Num) -> i64 {
    match n {
        Num::Double(d) => d.round() as i64,
        other => long(other),
    }
}

/// `$subtract`, `$divide`, `$mod` or `$pow` of two values, neither null.
fn binary(op: Op, a: &Bson, b: &Bson) -> Result<Bson, FilterError> {
    let name = match op {
        Op::Subtract => "$subtract",
        Op::Divide => "$divide",
        Op::Mod => "$mod",
        _ => "$pow",
    };
    if matches!(a, Bson::Decimal128(_)) || matches!(b, Bson::Decimal128(_)) {
        return binary_decimal(op, name, a, b);
    }
    if op == Op::Subtract {
        match (a, b) {
            (Bson::DateTime(x), Bson::DateTime(y)) => {
                return Ok(Bson::Int64(x.timestamp_millis().wrapping_sub(y.timestamp_millis())))
            }
            (Bson::DateTime(x), _) if num(b).is_some() => {
                let ms = millis(num(b).expect("a number"));
                return Ok(Bson::DateTime(bson::DateTime::from_millis(x.timestamp_millis().wrapping_sub(ms))));
            }
            _ => {}
        }
    }
    let (Some(x), Some(y)) = (num(a), num(b)) else {
        return Err(not_numbers(op, name, a, b));
    };
    Ok(match op {
        Op::Subtract => bson_of(arith(x, y, i64::checked_sub, |a, b| a - b)),
        Op::Divide => {
            if f64_of(y) == 0.0 {
                return Err(err(2, "can't $divide by zero"));
            }
            Bson::Double(f64_of(x) / f64_of(y))
        }
        Op::Mod => {
            if f64_of(y) == 0.0 {
                return Err(err(16610, "can't $mod by zero"));
            }
            bson_of(arith(x, y, i64::checked_rem, |a, b| a % b))
        }
        _ => pow(x, y)?,
    })
}

/// [`binary`] with a decimal operand: decimal `$subtract`, `$divide` and
/// `$mod` of two numbers; 238 for a date with a decimal and for `$pow`;
/// a decimal with anything else is a type error.
fn binary_decimal(op: Op, name: &str, a: &Bson, b: &Bson) -> Result<Bson, FilterError> {
    let numbers = is_number(a) && is_number(b);
    match op {
        Op::Subtract if numbers => return Ok(to_dec(a).add(&to_dec(b).neg()).to_bson()),
        Op::Mod if numbers => {
            return match to_dec(a).rem(&to_dec(b)) {
                Some(r) => Ok(r.to_bson()),
                None => Err(err(16610, "can't $mod by zero")),
            }
        }
        Op::Divide if numbers => {
            return match to_dec(a).div(&to_dec(b)) {
                Some(q) => Ok(q.to_bson()),
                None => Err(err(2, "can't $divide by zero")),
            }
        }
        _ => {}
    }
    // A date with a decimal, and the other operators' decimals.
    if numbers || matches!(a, Bson::DateTime(_)) || matches!(b, Bson::DateTime(_)) {
        return Err(decimal_unsupported(name));
    }
    Err(not_numbers(op, name, a, b))
}

/// [`binary`]'s error for operands it cannot take.
fn not_numbers(op: Op, name: &str, a: &Bson, b: &Bson) -> FilterError {
    let code = match op {
        Op::Subtract => 16556,
        Op::Divide => 16609,
        Op::Mod => 16611,
        _ => 28762,
    };
    err(code, format!("{name} only supports numeric types, not {} and {}", type_name(a), type_name(b)))
}

/// `$pow` of two non-decimal numbers: a double if either is one, else an
/// integer power (an int only from two ints; a double past a long).
fn pow(x: Num, y: Num) -> Result<Bson, FilterError> {
    if matches!(x, Num::Double(_)) || matches!(y, Num::Double(_)) {
        return Ok(Bson::Double(f64_of(x).powf(f64_of(y))));
    }
    let (base, exp) = (long(x), long(y));
    if exp < 0 {
        if base == 0 {
            return Err(err(28764, "$pow cannot take a base of 0 and a negative exponent"));
        }
        return Ok(Bson::Double((base as f64).powf(exp as f64)));
    }
    // An int result only from two ints; a long in, a long out (if it fits).
    let ints = matches!((x, y), (Num::Int(_), Num::Int(_)));
    Ok(match u32::try_from(exp).ok().and_then(|e| base.checked_pow(e)) {
        Some(r) if ints && i32::try_from(r).is_ok() => Bson::Int32(r as i32),
        Some(r) => Bson::Int64(r),
        None => Bson::Double((base as f64).powf(exp as f64)),
    })
}

/// `$abs`, `$ceil`, `$floor` or `$sqrt` of `v`.
fn unary(op: Op, v: Option<Bson>) -> Result<Option<Bson>, FilterError> {
    let name = match op {
        Op::Abs => "$abs",
        Op::Ceil => "$ceil",
        Op::Floor => "$floor",
        _ => "$sqrt",
    };
    if nullish(&v) {
        return Ok(Some(Bson::Null));
    }
    let v = v.expect("not missing");
    if matches!(v, Bson::Decimal128(_)) {
        let x = to_dec(&v);
        let out = match op {
            Op::Abs => x.abs(),
            Op::Ceil => x.to_integral(Integral::Ceil),
            Op::Floor => x.to_integral(Integral::Floor),
            _ => match x.sqrt() {
                Some(root) => root,
                None => return Err(err(28714, "$sqrt's argument must be greater than or equal to 0")),
            },
        };
        return Ok(Some(out.to_bson()));
    }
    let Some(n) = num(&v) else {
        return Err(err(28765, format!("{name} only supports numeric types, not {}", type_name(&v))));
    };
    Ok(Some(match (op, n) {
        (Op::Abs, Num::Int(i)) => match i.checked_abs() {
            Some(a) => Bson::Int32(a),
            None => Bson::Int64(-(i as i64)),
        },
        (Op::Abs, Num::Long(i)) => match i.checked_abs() {
            Some(a) => Bson::Int64(a),
            None => return Err(err(28680, "can't take $abs of long long min")),
        },
        (Op::Abs, Num::Double(d)) => Bson::Double(d.abs()),
        (Op::Sqrt, n) => {
            let f = f64_of(n);
            if f < 0.0 {
                return Err(err(28714, "$sqrt's argument must be greater than or equal to 0"));
            }
            Bson::Double(f.sqrt())
        }
        (_, Num::Double(d)) => Bson::Double(match op {
            Op::Ceil => d.ceil(),
            _ => d.floor(),
        }),
        (_, n) => bson_of(n),
    }))
}

/// `$round` and `$trunc`: `v` to `place` decimal places (0 when not
/// given; -20 to 100), as mongod computes them. A double goes through a
/// 34-digit decimal and back; an integer is kept (places ≥ 0) or rounded
/// to a multiple of a power of ten, an int growing into a long; 51080
/// when that overflows a long.
fn round_or_trunc(
    name: &str,
    mode: Integral,
    v: Option<Bson>,
    place: Option<Option<Bson>>,
) -> Result<Option<Bson>, FilterError> {
    if nullish(&v) {
        return Ok(Some(Bson::Null));
    }
    let v = v.expect("not missing");
    if !is_number(&v) {
        return Err(err(51081, format!("{name} only supports numeric types, not {}", type_name(&v))));
    }
    let places = match place {
        None => 0,
        Some(p) if nullish(&p) => return Ok(Some(Bson::Null)),
        Some(p) => places_of(name, &p.expect("not missing"))?,
    };
    let exp = -(places as i32);
    Ok(Some(match &v {
        Bson::Decimal128(_) => to_dec(&v).quantize(exp, mode).to_bson(),
        Bson::Double(d) if !d.is_finite() => v,
        Bson::Double(_) => {
            let x = Dec::from_bson(&v, DoubleDigits::ThirtyFour).expect("a double");
            Bson::Double(x.quantize(exp, mode).to_f64())
        }
        _ if places >= 0 => v,
        _ => round_integer(name, mode, &v, places)?,
    }))
}

/// The places argument of `$round`/`$trunc`: a whole number in -20..=100.
fn places_of(name: &str, p: &Bson) -> Result<i64, FilterError> {
    let (n, integral) = match p {
        Bson::Int32(i) => (i64::from(*i), true),
        Bson::Int64(i) => (*i, true),
        Bson::Double(d) if d.is_finite() && d.abs() < 9.2e18 => (*d as i64, d.fract() == 0.0),
        Bson::Decimal128(_) => {
            let d = to_dec(p);
            let whole = d.to_integral(Integral::Trunc).to_f64();
            if !whole.is_finite() || whole.abs() >= 9.2e18 {
                return Err(err(31109, format!("Can't coerce out of range value {p} to long")));
            }
            // Whole when nothing is left dividing by 1, exactly.
            let one = Dec::Finite { negative: false, digits: vec![1], exp: 0 };
            let fraction = d.rem(&one);
            (whole as i64, matches!(fraction, Some(Dec::Finite { ref digits, .. }) if digits.is_empty()))
        }
        Bson::Double(d) => return Err(err(31109, format!("Can't coerce out of range value {d} to long"))),
        other => return Err(err(16004, format!("can't convert from BSON type {} to long", type_name(other)))),
    };
    if !integral {
        return Err(err(51082, format!("precision argument to  {name} must be a integral value")));
    }
    if !(-20..=100).contains(&n) {
        return Err(err(51083, format!("cannot apply {name} with precision value {n} value must be in [-20, 100]")));
    }
    Ok(n)
}

/// An int or long rounded to a multiple of 10^-places (places < 0).
fn round_integer(name: &str, mode: Integral, v: &Bson, places: i64) -> Result<Bson, FilterError> {
    let exp = -(places as i32);
    let n = long(num(v).expect("a number"));
    let rounded = Dec::from_bson(&Bson::Int64(n), DoubleDigits::Fifteen).expect("a long").quantize(exp, mode);
    let out = match &rounded {
        Dec::Finite { negative, digits, exp } => {
            let magnitude = digits.iter().fold(0i128, |acc, &d| acc * 10 + i128::from(d)) * 10i128.pow(*exp as u32);
            i64::try_from(if *negative { -magnitude } else { magnitude }).ok()
        }
        _ => None,
    };
    let Some(out) = out else {
        return Err(err(
            51080,
            format!("invalid conversion from Decimal128 result in {name} resulting from arguments: [{n}, {places}]"),
        ));
    };
    Ok(match (v, i32::try_from(out)) {
        (Bson::Int32(_), Ok(i)) => Bson::Int32(i),
        _ => Bson::Int64(out),
    })
}

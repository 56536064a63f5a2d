//! Decimal128 arithmetic as MongoDB does it: IEEE 754-2008 decimal128
//! (34 digits, exponent -6176..=6111 on the integer coefficient), every
//! result rounded once, half to even, to the nearest representable value.
//!
//! - Sums and products keep IEEE's ideal exponent when exact (`1.10 + 2.2`
//!   is `3.30`, `1.10 × 2` is `2.20`); inexact results carry 34 digits.
//! - Overflow gives ±Infinity, underflow rounds into the subnormal range
//!   down to zero; NaN and the infinities follow IEEE (`∞ − ∞` is NaN).
//! - Operands of other types convert as mongod converts them: int32 and
//!   int64 exactly; a double to 15 significant digits in updates and
//!   expressions (`$inc: {x: 0.1}` adds `0.100000000000000`), to 34 digits
//!   where mongod asks for that (the non-decimal part of `$sum`).
//!
//! Values are worked on as decimal digit strings (`Vec<u8>`, most
//! significant first): operands have at most 34 digits, and aligning two
//! exponents at the far ends of the range makes about 12,300, so every
//! operation stays small and exact before its single rounding.

use crate::decimal::{decimal, double, Big, Exact};
use bson::{Bson, Decimal128};
use std::cmp::Ordering;

const PRECISION: usize = 34;
const EXP_MIN: i32 = -6176;
const EXP_MAX: i32 = 6111;

/// A decimal value: NaN, an infinity, or `digits × 10^exp` (no leading
/// zeros; no digits is zero).
#[derive(Clone, Debug, PartialEq)]
pub enum Dec {
    NaN,
    Inf { negative: bool },
    Finite { negative: bool, digits: Vec<u8>, exp: i32 },
}

/// The direction `Dec::quantize` (and `to_integral`) rounds in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Integral {
    Floor,
    Ceil,
    Trunc,
    /// To nearest, ties to even (`$round`).
    HalfEven,
}

/// How many significant digits a double keeps when it becomes a decimal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DoubleDigits {
    /// mongod's default (`Decimal128(double)`): exactly 15 digits,
    /// trailing zeros included.
    Fifteen,
    /// The double's exact value rounded to 34 digits.
    ThirtyFour,
}

fn digits_of(v: u128) -> Vec<u8> {
    if v == 0 {
        return Vec::new();
    }
    v.to_string().bytes().map(|b| b - b'0').collect()
}

/// Add one to a digit string (`999` becomes `1000`).
fn increment(digits: &mut Vec<u8>) {
    let mut i = digits.len();
    loop {
        if i == 0 {
            digits.insert(0, 1);
            return;
        }
        i -= 1;
        if digits[i] == 9 {
            digits[i] = 0;
        } else {
            digits[i] += 1;
            return;
        }
    }
}

fn strip_leading_zeros(digits: &mut Vec<u8>) {
    let zeros = digits.iter().take_while(|&&d| d == 0).count();
    digits.drain(..zeros);
}

/// Round `digits` to at most `keep` digits, half to even (`sticky`: nonzero
/// digits lie below the last one). Returns how many digits were dropped
/// (the exponent's increase).
fn round(digits: &mut Vec<u8>, keep: usize, sticky: bool) -> i32 {
    if digits.len() <= keep {
        return 0;
    }
    let dropped = digits.len() - keep;
    let first = digits[keep];
    let rest = sticky || digits[keep + 1..].iter().any(|&d| d != 0);
    digits.truncate(keep);
    let odd = digits.last().is_some_and(|d| d % 2 == 1);
    let mut shift = dropped as i32;
    if first > 5 || (first == 5 && (rest || odd)) {
        increment(digits);
        if keep > 0 && digits.len() > keep {
            digits.pop(); // a zero: 999 rounded up to 1000
            shift += 1;
        }
    }
    shift
}

/// The decimal nearest to `±digits × 10^exp` (plus a sticky nonzero tail):
/// one rounding to 34 digits or, below the normal range, to as many as the
/// smallest exponent leaves; then clamping or overflow at the top.
fn finish(negative: bool, mut digits: Vec<u8>, exp: i32, sticky: bool) -> Dec {
    strip_leading_zeros(&mut digits);
    if digits.is_empty() && !sticky {
        return Dec::Finite { negative, digits, exp: exp.clamp(EXP_MIN, EXP_MAX) };
    }
    let len = digits.len() as i64;
    // The exponent after a plain rounding to 34 digits; below the range,
    // keep fewer digits so that the exponent lands on the minimum.
    let natural = i64::from(exp) + (len - PRECISION as i64).max(0);
    let keep =
        if natural < i64::from(EXP_MIN) { len - (i64::from(EXP_MIN) - i64::from(exp)) } else { PRECISION as i64 };
    let mut exp = i64::from(exp);
    if keep < 0 {
        // Everything lies more than a digit below the smallest unit.
        return Dec::Finite { negative, digits: Vec::new(), exp: EXP_MIN };
    }
    exp += i64::from(round(&mut digits, keep as usize, sticky));
    if exp > i64::from(EXP_MAX) {
        if digits.is_empty() {
            return Dec::Finite { negative, digits, exp: EXP_MAX };
        }
        let pad = exp - i64::from(EXP_MAX);
        if digits.len() as i64 + pad > PRECISION as i64 {
            return Dec::Inf { negative };
        }
        digits.extend(std::iter::repeat_n(0, pad as usize));
        exp = i64::from(EXP_MAX);
    }
    Dec::Finite { negative, digits, exp: exp as i32 }
}

impl Dec {
    /// A number as mongod converts it to Decimal128; `None` for other types.
    pub fn from_bson(v: &Bson, doubles: DoubleDigits) -> Option<Dec> {
        let int = |negative: bool, abs: u64| Dec::Finite { negative, digits: digits_of(abs.into()), exp: 0 };
        Some(match v {
            Bson::Int32(i) => int(*i < 0, i.unsigned_abs().into()),
            Bson::Int64(i) => int(*i < 0, i.unsigned_abs()),
            Bson::Double(f) => Dec::from_double(*f, doubles),
            Bson::Decimal128(d) => Dec::from_exact(decimal(d.bytes())),
            _ => return None,
        })
    }

    fn from_exact(e: Exact) -> Dec {
        match e {
            Exact::NaN => Dec::NaN,
            Exact::Inf { negative } => Dec::Inf { negative },
            Exact::Finite { negative, mantissa, exp2, exp10 } => {
                // Decoded BID values are integers times a power of ten.
                debug_assert_eq!(exp2, 0);
                Dec::Finite { negative, digits: digits_of(mantissa), exp: exp10 }
            }
        }
    }

    fn from_double(f: f64, doubles: DoubleDigits) -> Dec {
        let (negative, mantissa, exp2) = match double(f) {
            Exact::NaN => return Dec::NaN,
            Exact::Inf { negative } => return Dec::Inf { negative },
            Exact::Finite { negative, mantissa, exp2, .. } => (negative, mantissa, exp2),
        };
        if mantissa == 0 {
            return Dec::Finite { negative, digits: Vec::new(), exp: 0 };
        }
        let (mut digits, mut exp) = exact_digits(mantissa, exp2);
        // As mongod: first the 34-digit conversion, then 15 digits from it.
        exp += round(&mut digits, PRECISION, false);
        match doubles {
            DoubleDigits::ThirtyFour => {
                // Exact values shed trailing zeros down to exponent 0.
                while exp < 0 && digits.last() == Some(&0) {
                    digits.pop();
                    exp += 1;
                }
            }
            DoubleDigits::Fifteen => {
                exp += round(&mut digits, 15, false);
                let pad = 15 - digits.len();
                digits.extend(std::iter::repeat_n(0, pad));
                exp -= pad as i32;
            }
        }
        Dec::Finite { negative, digits, exp }
    }

    pub fn to_bson(&self) -> Bson {
        let bits: u128 = match self {
            Dec::NaN => 0x7c << 120,
            Dec::Inf { negative } => (u128::from(*negative) << 127) | (0x78 << 120),
            Dec::Finite { negative, digits, exp } => {
                let coefficient = digits.iter().fold(0u128, |acc, &d| acc * 10 + u128::from(d));
                (u128::from(*negative) << 127) | (((exp - EXP_MIN) as u128) << 113) | coefficient
            }
        };
        Bson::Decimal128(Decimal128::from_bytes(bits.to_le_bytes()))
    }

    /// `self + other`.
    pub fn add(&self, other: &Dec) -> Dec {
        match (self, other) {
            (Dec::NaN, _) | (_, Dec::NaN) => Dec::NaN,
            (Dec::Inf { negative: a }, Dec::Inf { negative: b }) if a != b => Dec::NaN,
            (inf @ Dec::Inf { .. }, _) | (_, inf @ Dec::Inf { .. }) => inf.clone(),
            (Dec::Finite { negative: na, digits: da, exp: ea }, Dec::Finite { negative: nb, digits: db, exp: eb }) => {
                let (negative, digits, exp) = exact_sum((*na, da, *ea), (*nb, db, *eb));
                finish(negative, digits, exp, false)
            }
        }
    }

    /// `-self`.
    pub fn neg(&self) -> Dec {
        match self {
            Dec::NaN => Dec::NaN,
            Dec::Inf { negative } => Dec::Inf { negative: !negative },
            Dec::Finite { negative, digits, exp } => {
                Dec::Finite { negative: !negative, digits: digits.clone(), exp: *exp }
            }
        }
    }

    /// `|self|`.
    pub fn abs(&self) -> Dec {
        match self {
            Dec::NaN => Dec::NaN,
            Dec::Inf { .. } => Dec::Inf { negative: false },
            Dec::Finite { digits, exp, .. } => Dec::Finite { negative: false, digits: digits.clone(), exp: *exp },
        }
    }

    /// `self × other`.
    pub fn mul(&self, other: &Dec) -> Dec {
        let zero = |d: &Dec| matches!(d, Dec::Finite { digits, .. } if digits.is_empty());
        match (self, other) {
            (Dec::NaN, _) | (_, Dec::NaN) => Dec::NaN,
            (Dec::Inf { .. }, o) | (o, Dec::Inf { .. }) if zero(o) => Dec::NaN,
            (Dec::Inf { negative: a }, b) | (b, Dec::Inf { negative: a }) => Dec::Inf { negative: *a != b.negative() },
            (Dec::Finite { negative: na, digits: da, exp: ea }, Dec::Finite { negative: nb, digits: db, exp: eb }) => {
                finish(na != nb, mul_digits(da, db), ea + eb, false)
            }
        }
    }

    /// `self ÷ n` for a count `n > 0` (an average); exact quotients keep
    /// the dividend's exponent where they can, as IEEE's ideal exponent.
    pub fn div_count(&self, n: u64) -> Dec {
        assert!(n > 0, "a count to divide by");
        let Dec::Finite { negative, digits, exp } = self else { return self.clone() };
        if digits.is_empty() {
            return self.clone();
        }
        // Scale so that the quotient has more than 34 digits: n < 10^20.
        const SCALE: i32 = 56;
        let mut big = Big::from(0);
        for chunk in digits.chunks(19) {
            big.mul_small(10u64.pow(chunk.len() as u32));
            let value = chunk.iter().fold(0u64, |acc, &d| acc * 10 + u64::from(d));
            big.add_small(value);
        }
        big.mul_pow10(SCALE as u32);
        let remainder = big.div_small(n);
        let mut quotient = big.into_digits();
        let mut q_exp = exp - SCALE;
        if remainder == 0 {
            while q_exp < *exp && quotient.last() == Some(&0) {
                quotient.pop();
                q_exp += 1;
            }
        }
        finish(*negative, quotient, q_exp, remainder != 0)
    }

    /// The integer `self` rounds to in `mode` (`Floor`: toward minus
    /// infinity, `Ceil`: plus infinity, `Trunc`: zero), as IEEE's
    /// quantize to exponent 0: `ceil(-0.5)` is `-0`, `1E+2` becomes `100`.
    pub fn to_integral(&self, mode: Integral) -> Dec {
        self.quantize(0, mode)
    }

    /// `self` with exponent `exp` (a multiple of `10^exp`), rounded in
    /// `mode`, sign kept: IEEE 754's quantize, except that where the
    /// coefficient would need more than 34 digits it gets 34 and the
    /// exponent stops above `exp` (as mongod's `Decimal128::quantize`:
    /// `1.298` to 100 places is `1.298000000000000000000000000000000`);
    /// infinities and NaN stay.
    pub fn quantize(&self, exp: i32, mode: Integral) -> Dec {
        let Dec::Finite { negative, digits, exp: from } = self else { return self.clone() };
        let negative = *negative;
        if digits.is_empty() {
            return Dec::Finite { negative, digits: Vec::new(), exp };
        }
        if *from >= exp {
            let pad = (*from - exp).min(PRECISION.saturating_sub(digits.len()) as i32);
            let mut out = digits.clone();
            out.extend(std::iter::repeat_n(0, pad as usize));
            return Dec::Finite { negative, digits: out, exp: *from - pad };
        }
        // Drop the digits below 10^exp, then round the rest in `mode`.
        let keep = digits.len() as i64 - (i64::from(exp) - i64::from(*from));
        let (mut out, dropped): (Vec<u8>, &[u8]) = match usize::try_from(keep) {
            Ok(k) => (digits[..k].to_vec(), &digits[k..]),
            Err(_) => (Vec::new(), &[]),
        };
        let nonzero = keep < 0 || dropped.iter().any(|&d| d != 0);
        let up = nonzero
            && match mode {
                Integral::Floor => negative,
                Integral::Ceil => !negative,
                Integral::Trunc => false,
                Integral::HalfEven => match dropped.first() {
                    // Below 10^exp by more than a digit: under a half.
                    None => false,
                    Some(&first) => {
                        let rest = dropped[1..].iter().any(|&d| d != 0);
                        let odd = out.last().is_some_and(|d| d % 2 == 1);
                        first > 5 || (first == 5 && (rest || odd))
                    }
                },
            };
        if up {
            increment(&mut out);
        }
        strip_leading_zeros(&mut out);
        Dec::Finite { negative, digits: out, exp }
    }

    /// `self mod other`, the remainder of a quotient truncated toward
    /// zero (the dividend's sign; its exponent the smaller of the two):
    /// `7.5 mod 2` is `1.5`. `None` for a zero divisor.
    pub fn rem(&self, other: &Dec) -> Option<Dec> {
        match (self, other) {
            (_, Dec::Finite { digits, .. }) if digits.is_empty() => None,
            (Dec::NaN, _) | (_, Dec::NaN) | (Dec::Inf { .. }, _) => Some(Dec::NaN),
            (x, Dec::Inf { .. }) => Some(x.clone()),
            (Dec::Finite { negative, digits: da, exp: ea }, Dec::Finite { digits: db, exp: eb, .. }) => {
                let exp = (*ea).min(*eb);
                let align = |d: &[u8], e: i32| {
                    let mut v = d.to_vec();
                    if !v.is_empty() {
                        v.extend(std::iter::repeat_n(0, (e - exp) as usize));
                    }
                    v
                };
                let (x, y) = (align(da, *ea), align(db, *eb));
                if cmp_digits(&x, &y) == Ordering::Less {
                    return Some(Dec::Finite { negative: *negative, digits: x, exp });
                }
                // |x| ≥ |y|: y is not the one zeros were appended to
                // beyond x's, so it has at most 34 digits.
                let divisor = y.iter().fold(0u128, |acc, &d| acc * 10 + u128::from(d));
                let remainder = x.iter().fold(0u128, |r, &d| (r * 10 + u128::from(d)) % divisor);
                Some(finish(*negative, digits_of(remainder), exp, false))
            }
        }
    }

    /// `√self`, correctly rounded (half to even); `None` below zero (`-0`
    /// is its own root). An exact root keeps IEEE's ideal exponent (half
    /// the operand's, rounded down) where it can: `√4.00` is `2.0`.
    pub fn sqrt(&self) -> Option<Dec> {
        let (digits, exp) = match self {
            Dec::NaN => return Some(Dec::NaN),
            Dec::Inf { negative: true } => return None,
            Dec::Inf { .. } => return Some(self.clone()),
            Dec::Finite { negative, digits, exp } if digits.is_empty() => {
                return Some(Dec::Finite { negative: *negative, digits: Vec::new(), exp: exp.div_euclid(2) })
            }
            Dec::Finite { negative: true, .. } => return None,
            Dec::Finite { digits, exp, .. } => (digits, *exp),
        };
        let ideal = exp.div_euclid(2);
        // c × 10^e with e even and c of 72 digits or more, so that the
        // root has 36 or more: enough for one rounding to 34.
        let mut c = digits.clone();
        let mut e = exp;
        let mut extra = 72usize.saturating_sub(c.len()) + (e.rem_euclid(2) as usize);
        if (e as i64 - extra as i64).rem_euclid(2) != 0 {
            extra += 1;
        }
        c.extend(std::iter::repeat_n(0, extra));
        e -= extra as i32;
        if c.len() % 2 == 1 {
            c.insert(0, 0);
        }
        // Long-hand: one root digit per pair of digits.
        let (mut root, mut rest): (Vec<u8>, Vec<u8>) = (Vec::new(), Vec::new());
        let tidy = |mut v: Vec<u8>| {
            strip_leading_zeros(&mut v);
            v
        };
        for pair in c.chunks(2) {
            rest.extend_from_slice(pair);
            rest = tidy(rest);
            let mut twenty = tidy(mul_digits(&root, &[2]));
            if !twenty.is_empty() {
                twenty.push(0);
            }
            let mut x = 9u8;
            loop {
                let trial = tidy(mul_digits(&tidy(add_digits(&twenty, &[x])), &[x]));
                if cmp_digits(&trial, &rest) != Ordering::Greater {
                    rest = tidy(sub_digits(&rest, &trial));
                    break;
                }
                x -= 1;
            }
            root.push(x);
        }
        let mut root = tidy(root);
        let mut exp = e / 2;
        let exact = rest.is_empty();
        if exact {
            while exp < ideal && root.last() == Some(&0) {
                root.pop();
                exp += 1;
            }
        }
        Some(finish(false, root, exp, !exact))
    }

    /// The nearest double (ties to even; ±Infinity past the range).
    pub fn to_f64(&self) -> f64 {
        match self {
            Dec::NaN => f64::NAN,
            Dec::Inf { negative: true } => f64::NEG_INFINITY,
            Dec::Inf { negative: false } => f64::INFINITY,
            Dec::Finite { negative, digits, exp } => {
                let text: String = digits.iter().map(|d| char::from(b'0' + d)).collect();
                let sign = if *negative { "-" } else { "" };
                let zero = if text.is_empty() { "0" } else { "" };
                format!("{sign}{zero}{text}e{exp}").parse().unwrap_or(f64::NAN)
            }
        }
    }

    /// `self ÷ other`; `None` for a zero divisor (the caller's error, as
    /// mongod checks it first). An exact quotient keeps IEEE's ideal
    /// exponent (the dividend's minus the divisor's) where it can.
    pub fn div(&self, other: &Dec) -> Option<Dec> {
        let negative = self.negative() != other.negative();
        match (self, other) {
            (_, Dec::Finite { digits, .. }) if digits.is_empty() => None,
            (Dec::NaN, _) | (_, Dec::NaN) => Some(Dec::NaN),
            (Dec::Inf { .. }, Dec::Inf { .. }) => Some(Dec::NaN),
            (Dec::Inf { .. }, _) => Some(Dec::Inf { negative }),
            (_, Dec::Inf { .. }) => Some(Dec::Finite { negative, digits: Vec::new(), exp: EXP_MIN }),
            (Dec::Finite { digits: da, exp: ea, .. }, Dec::Finite { digits: db, exp: eb, .. }) => {
                let ideal = ea - eb;
                if da.is_empty() {
                    return Some(Dec::Finite { negative, digits: Vec::new(), exp: ideal.clamp(EXP_MIN, EXP_MAX) });
                }
                // The divisor has at most 34 digits, so it and every
                // remainder (times 10, plus a digit) fit a u128.
                let divisor = db.iter().fold(0u128, |acc, &d| acc * 10 + u128::from(d));
                // Enough dividend digits for a quotient of 35 or more.
                let scale = (PRECISION as i32 + 2 + db.len() as i32 - da.len() as i32).max(0);
                let mut quotient = Vec::with_capacity(da.len() + scale as usize);
                let mut remainder = 0u128;
                for &digit in da.iter().chain(std::iter::repeat_n(&0, scale as usize)) {
                    remainder = remainder * 10 + u128::from(digit);
                    quotient.push((remainder / divisor) as u8);
                    remainder %= divisor;
                }
                let mut exp = ideal - scale;
                if remainder == 0 {
                    while exp < ideal && quotient.last() == Some(&0) {
                        quotient.pop();
                        exp += 1;
                    }
                }
                Some(finish(negative, quotient, exp, remainder != 0))
            }
        }
    }

    fn negative(&self) -> bool {
        match self {
            Dec::NaN => false,
            Dec::Inf { negative } | Dec::Finite { negative, .. } => *negative,
        }
    }
}

/// The exact decimal digits of `mantissa × 2^exp2`: `m × 2^e`, or
/// `m × 5^-e × 10^e` for `e < 0`.
fn exact_digits(mantissa: u128, exp2: i32) -> (Vec<u8>, i32) {
    let mut big = Big::from(mantissa);
    let mut exp = 0;
    if exp2 >= 0 {
        big.shl(exp2 as u32);
    } else {
        let mut n = -exp2;
        while n > 0 {
            let k = n.min(27); // 5^27 < 2^64
            big.mul_small(5u64.pow(k as u32));
            n -= k;
        }
        exp = exp2;
    }
    (big.into_digits(), exp)
}

/// `a + b` exactly, each `(negative, digits, exp)`; an exact zero from
/// opposite signs is +0 (as rounding to nearest makes it).
fn exact_sum((na, da, ea): (bool, &[u8], i32), (nb, db, eb): (bool, &[u8], i32)) -> (bool, Vec<u8>, i32) {
    let exp = ea.min(eb);
    let align = |d: &[u8], e: i32| {
        let mut v = d.to_vec();
        if !v.is_empty() {
            v.extend(std::iter::repeat_n(0, (e - exp) as usize));
        }
        v
    };
    let (xa, xb) = (align(da, ea), align(db, eb));
    if na == nb {
        return (na, add_digits(&xa, &xb), exp);
    }
    match cmp_digits(&xa, &xb) {
        Ordering::Greater => (na, sub_digits(&xa, &xb), exp),
        Ordering::Less => (nb, sub_digits(&xb, &xa), exp),
        Ordering::Equal => (false, Vec::new(), exp),
    }
}

/// A remainder for KeyString: `(negative, digits, exp)`, no leading or
/// trailing zeros, no digits for zero.
pub type Remainder = (bool, Vec<u8>, i32);

/// A number split for KeyString (`keystring.rs`): the double nearest to it
/// (ties to even; beyond the double range, the largest finite double of
/// its sign) and the exact remainder `value − double`. `None` for NaN and
/// non-numbers; infinities and doubles have remainder zero.
pub fn split_at_double(v: &Bson) -> Option<(f64, Remainder)> {
    let zero = (false, Vec::new(), 0);
    let (negative, digits, exp) = match v {
        Bson::Double(f) if f.is_nan() => return None,
        Bson::Double(f) => return Some((*f, zero)),
        // Integers: the nearest double (`as` rounds to nearest, ties to
        // even) and a small integer remainder (|r| ≤ 1024), no text.
        Bson::Int32(i) => return Some((f64::from(*i), zero)),
        Bson::Int64(i) => {
            let nearest = *i as f64;
            let r = i128::from(*i) - nearest as i128;
            let mut digits = digits_of(r.unsigned_abs());
            let mut exp = 0;
            while digits.last() == Some(&0) {
                digits.pop();
                exp += 1;
            }
            return Some((nearest, (r < 0, digits, exp)));
        }
        _ => match Dec::from_bson(v, DoubleDigits::ThirtyFour)? {
            Dec::NaN => return None,
            Dec::Inf { negative } => return Some((if negative { f64::NEG_INFINITY } else { f64::INFINITY }, zero)),
            Dec::Finite { negative, digits, exp } => (negative, digits, exp),
        },
    };
    if digits.is_empty() {
        return Some((0.0, zero));
    }
    let text: String = digits.iter().map(|d| char::from(b'0' + d)).collect();
    // Rust's float parsing rounds correctly (to nearest, ties to even).
    let magnitude = format!("{text}e{exp}").parse::<f64>().unwrap_or(f64::INFINITY).min(f64::MAX);
    let nearest = if negative { -magnitude } else { magnitude };
    let (d_digits, d_exp) = match double(magnitude) {
        Exact::Finite { mantissa, exp2, .. } if mantissa != 0 => exact_digits(mantissa, exp2),
        _ => (Vec::new(), 0),
    };
    let (r_negative, mut r_digits, mut r_exp) = exact_sum((negative, &digits, exp), (!negative, &d_digits, d_exp));
    strip_leading_zeros(&mut r_digits);
    while r_digits.last() == Some(&0) {
        r_digits.pop();
        r_exp += 1;
    }
    if r_digits.is_empty() {
        return Some((nearest, zero));
    }
    Some((nearest, (r_negative, r_digits, r_exp)))
}

fn cmp_digits(a: &[u8], b: &[u8]) -> Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

fn add_digits(a: &[u8], b: &[u8]) -> Vec<u8> {
    let (long, short) = if a.len() >= b.len() { (a, b) } else { (b, a) };
    let mut out = vec![0u8; long.len() + 1];
    let mut carry = 0;
    for i in 0..long.len() {
        let x = long[long.len() - 1 - i] + if i < short.len() { short[short.len() - 1 - i] } else { 0 } + carry;
        out[long.len() - i] = x % 10;
        carry = x / 10;
    }
    out[0] = carry;
    out
}

/// `a − b` for `a ≥ b`.
fn sub_digits(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = a.to_vec();
    let mut borrow = 0i8;
    for i in 0..out.len() {
        let at = out.len() - 1 - i;
        let mut x = out[at] as i8 - borrow - if i < b.len() { b[b.len() - 1 - i] as i8 } else { 0 };
        borrow = i8::from(x < 0);
        if x < 0 {
            x += 10;
        }
        out[at] = x as u8;
    }
    out
}

fn mul_digits(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut acc = vec![0u32; a.len() + b.len()];
    for (i, &x) in a.iter().rev().enumerate() {
        for (j, &y) in b.iter().rev().enumerate() {
            acc[i + j] += u32::from(x) * u32::from(y);
        }
    }
    let mut out = Vec::with_capacity(acc.len());
    let mut carry = 0;
    for v in acc {
        let x = v + carry;
        out.push((x % 10) as u8);
        carry = x / 10;
    }
    while carry > 0 {
        out.push((carry % 10) as u8);
        carry /= 10;
    }
    out.reverse();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Dec {
        Dec::from_bson(&Bson::Decimal128(s.parse().unwrap()), DoubleDigits::Fifteen).unwrap()
    }

    fn text(x: Dec) -> String {
        match x.to_bson() {
            Bson::Decimal128(v) => v.to_string(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn sums_keep_the_ideal_exponent_and_round_half_even() {
        let cases = [
            ("1.10", "2.2", "3.30"),
            ("1", "-1", "0"),
            ("-0", "-0", "-0"),
            ("-0", "0", "0"),
            ("0.00", "5", "5.00"),
            ("9999999999999999999999999999999999", "1", "1.000000000000000000000000000000000E+34"),
            ("1234567890123456789012345678901234", "0.5", "1234567890123456789012345678901234"),
            ("1234567890123456789012345678901235", "0.5", "1234567890123456789012345678901236"),
            ("1234567890123456789012345678901234", "0.50001", "1234567890123456789012345678901235"),
            ("1E+10", "1E-30", "10000000000.00000000000000000000000"),
            ("9.999999999999999999999999999999999E+6144", "1E+6111", "Infinity"),
            ("-9.999999999999999999999999999999999E+6144", "-1E+6111", "-Infinity"),
            ("1E-6176", "-1E-6176", "0E-6176"),
            ("Infinity", "-Infinity", "NaN"),
            ("Infinity", "1", "Infinity"),
            ("NaN", "1", "NaN"),
            ("0E+6111", "1E-6176", "1E-6176"),
        ];
        for (a, b, want) in cases {
            assert_eq!(text(d(a).add(&d(b))), want, "{a} + {b}");
            assert_eq!(text(d(b).add(&d(a))), want, "{b} + {a}");
        }
    }

    #[test]
    fn quotients_round_once_and_keep_the_ideal_exponent_when_exact() {
        let cases = [
            ("1", "3", "0.3333333333333333333333333333333333"),
            ("2", "3", "0.6666666666666666666666666666666667"),
            ("5", "2", "2.5"),
            ("1", "10", "0.1"),
            ("12", "12", "1"),
            ("8.00", "2", "4.00"),
            ("2.400", "2.0", "1.20"),
            ("1000", "100", "10"),
            ("1000", "1", "1000"),
            ("2.40E+6", "2", "1.20E+6"),
            ("-1", "4", "-0.25"),
            ("0.00", "2", "0.00"),
            ("1", "Infinity", "0E-6176"),
            ("-Infinity", "2", "-Infinity"),
            ("Infinity", "Infinity", "NaN"),
            ("1E+6111", "1E-6176", "Infinity"),
            ("9999999999999999999999999999999999", "3", "3333333333333333333333333333333333"),
        ];
        for (a, b, want) in cases {
            assert_eq!(text(d(a).div(&d(b)).unwrap()), want, "{a} / {b}");
        }
        assert!(d("1").div(&d("0.00")).is_none());
    }

    #[test]
    fn integral_values_round_in_their_direction() {
        let cases = [
            ("2.50", "2", "3", "2"),
            ("-2.5", "-3", "-2", "-2"),
            ("-0.5", "-1", "-0", "-0"),
            ("0.5", "0", "1", "0"),
            ("9.99", "9", "10", "9"),
            ("-9.99", "-10", "-9", "-9"),
            ("1E+2", "100", "100", "100"),
            (
                "1E+34",
                "1.000000000000000000000000000000000E+34",
                "1.000000000000000000000000000000000E+34",
                "1.000000000000000000000000000000000E+34",
            ),
            ("-0.00", "-0", "-0", "-0"),
            ("7", "7", "7", "7"),
            ("1E-6176", "0", "1", "0"),
            ("Infinity", "Infinity", "Infinity", "Infinity"),
        ];
        for (x, floor, ceil, trunc) in cases {
            assert_eq!(text(d(x).to_integral(Integral::Floor)), floor, "floor {x}");
            assert_eq!(text(d(x).to_integral(Integral::Ceil)), ceil, "ceil {x}");
            assert_eq!(text(d(x).to_integral(Integral::Trunc)), trunc, "trunc {x}");
        }
    }

    #[test]
    fn quantize_rounds_to_an_exponent() {
        use Integral::*;
        let cases = [
            ("2.5", 0, HalfEven, "2"),
            ("3.5", 0, HalfEven, "4"),
            ("-2.51", 0, HalfEven, "-3"),
            ("1.2345", -2, HalfEven, "1.23"),
            ("1.2350", -2, HalfEven, "1.24"),
            ("1.2250", -2, HalfEven, "1.22"),
            ("1.2250001", -2, HalfEven, "1.23"),
            ("1.5", -3, HalfEven, "1.500"),
            ("1234", 2, HalfEven, "1.2E+3"),
            ("1250", 2, HalfEven, "1.2E+3"),
            ("-0.4", 0, HalfEven, "-0"),
            ("0.0004", -2, HalfEven, "0.00"),
            ("0.005", -2, HalfEven, "0.00"),
            ("0.0051", -2, HalfEven, "0.01"),
            ("9.99", -1, HalfEven, "10.0"),
            ("5E-10", 0, Ceil, "1"),
            ("-5E-10", 0, Floor, "-1"),
            ("1.99", -1, Trunc, "1.9"),
            ("-1.99", -1, Trunc, "-1.9"),
            ("1E+28", -5, HalfEven, "10000000000000000000000000000.00000"),
            ("1E+30", -5, HalfEven, "1000000000000000000000000000000.000"),
            ("1.298", -100, HalfEven, "1.298000000000000000000000000000000"),
            ("NaN", 0, HalfEven, "NaN"),
            ("-Infinity", 0, HalfEven, "-Infinity"),
        ];
        for (x, exp, mode, want) in cases {
            assert_eq!(text(d(x).quantize(exp, mode)), want, "{x} at {exp} {mode:?}");
        }
    }

    #[test]
    fn remainders_keep_the_dividend_sign_and_the_smaller_exponent() {
        let cases = [
            ("7", "2", "1"),
            ("7.5", "2", "1.5"),
            ("-7.5", "2", "-1.5"),
            ("7.5", "-2", "1.5"),
            ("10", "3.0", "1.0"),
            ("1", "3", "1"),
            ("0.3", "0.1", "0.0"),
            ("1E+6000", "7", "1"), // 10^6 ≡ 1 (mod 7)
            ("1E+6001", "7", "3"),
            ("5", "1E+6000", "5"),
            ("-0", "3", "-0"),
            ("Infinity", "3", "NaN"),
            ("3", "Infinity", "3"),
            ("NaN", "3", "NaN"),
        ];
        for (a, b, want) in cases {
            assert_eq!(text(d(a).rem(&d(b)).unwrap()), want, "{a} mod {b}");
        }
        assert!(d("1").rem(&d("0E+5")).is_none());
    }

    #[test]
    fn square_roots_round_once_and_keep_the_ideal_exponent() {
        let cases = [
            ("4", "2"),
            ("4.00", "2.0"),
            ("0.04", "0.2"),
            ("1E+2", "1E+1"),
            ("1E+3", "31.62277660168379331998893544432719"),
            ("2", "1.414213562373095048801688724209698"),
            ("10", "3.162277660168379331998893544432719"),
            ("1E-6176", "1E-3088"),
            ("152.2756", "12.34"),
            ("9999999999999999999999999999999999", "99999999999999999.99999999999999999"),
            ("-0", "-0"),
            ("0E+3", "0E+1"),
            ("Infinity", "Infinity"),
            ("NaN", "NaN"),
        ];
        for (x, want) in cases {
            assert_eq!(text(d(x).sqrt().unwrap()), want, "sqrt {x}");
        }
        assert!(d("-1E-10").sqrt().is_none());
        assert!(d("-Infinity").sqrt().is_none());
    }

    #[test]
    fn decimals_convert_to_the_nearest_double() {
        assert_eq!(d("0.1").to_f64(), 0.1);
        assert_eq!(d("-2.50").to_f64(), -2.5);
        assert_eq!(d("1E+400").to_f64(), f64::INFINITY);
        assert_eq!(d("1E-400").to_f64(), 0.0);
        assert_eq!(d("-0").to_f64().to_bits(), (-0.0f64).to_bits());
        assert!(d("NaN").to_f64().is_nan());
    }

    #[test]
    fn products_round_and_overflow_as_ieee() {
        let cases = [
            ("1.10", "2", "2.20"),
            ("-1.5", "2", "-3.0"),
            ("0", "-3", "-0"),
            ("Infinity", "0", "NaN"),
            ("-Infinity", "-2", "Infinity"),
            ("1E+6000", "1E+6000", "Infinity"),
            ("1E-6000", "1E-6000", "0E-6176"),
            ("1.5E-6170", "1E-6", "2E-6176"),
            ("2.5E-6170", "1E-6", "2E-6176"),
            ("1E+6100", "1E+20", "1.000000000E+6120"),
            (
                "1111111111111111111111111111111111",
                "1111111111111111111111111111111111",
                "1.234567901234567901234567901234568E+66",
            ),
        ];
        for (a, b, want) in cases {
            assert_eq!(text(d(a).mul(&d(b))), want, "{a} × {b}");
            assert_eq!(text(d(b).mul(&d(a))), want, "{b} × {a}");
        }
    }

    #[test]
    fn doubles_become_decimals_as_mongod_converts_them() {
        let conv = |f: f64, digits| text(Dec::from_bson(&Bson::Double(f), digits).unwrap());
        use DoubleDigits::*;
        assert_eq!(conv(0.1, Fifteen), "0.100000000000000");
        assert_eq!(conv(0.1, ThirtyFour), "0.1000000000000000055511151231257827");
        assert_eq!(conv(2.5, Fifteen), "2.50000000000000");
        assert_eq!(conv(2.5, ThirtyFour), "2.5");
        assert_eq!(conv(1024.0, ThirtyFour), "1024");
        assert_eq!(conv(-1e300, Fifteen), "-1.00000000000000E+300");
        assert_eq!(conv(999999999999999.9, Fifteen), "1.00000000000000E+15");
        assert_eq!(conv(5e-324, Fifteen), "4.94065645841247E-324");
        assert_eq!(conv(0.0, Fifteen), "0");
        assert_eq!(conv(-0.0, Fifteen), "-0");
        assert_eq!(conv(f64::INFINITY, Fifteen), "Infinity");
        assert_eq!(conv(f64::NAN, Fifteen), "NaN");
        let int = |v: Bson| text(Dec::from_bson(&v, Fifteen).unwrap());
        assert_eq!(int(Bson::Int64(i64::MIN)), "-9223372036854775808");
        assert_eq!(int(Bson::Int32(0)), "0");
    }

    #[test]
    fn averages_divide_by_the_count() {
        assert_eq!(text(d("10").div_count(4)), "2.5");
        assert_eq!(text(d("1.00").div_count(2)), "0.50");
        assert_eq!(text(d("6.0").div_count(3)), "2.0");
        assert_eq!(text(d("1").div_count(3)), "0.3333333333333333333333333333333333");
        assert_eq!(text(d("2").div_count(3)), "0.6666666666666666666666666666666667");
        assert_eq!(text(d("-0").div_count(3)), "-0");
        assert_eq!(text(d("NaN").div_count(3)), "NaN");
    }

    #[test]
    fn results_agree_with_exact_rational_arithmetic_on_small_values() {
        // Sums and products of values with few digits are exact: compare
        // against integer arithmetic scaled by 10^4.
        let values = ["0", "1", "-1", "0.5", "-2.25", "12.3456", "999", "-0.0001"];
        let scaled = |s: &str| (s.parse::<f64>().unwrap() * 10_000.0).round() as i128;
        for a in values {
            for b in values {
                let sum = d(a).add(&d(b));
                let Bson::Decimal128(v) = sum.to_bson() else { unreachable!() };
                let got: f64 = v.to_string().parse().unwrap();
                assert_eq!((got * 10_000.0).round() as i128, scaled(a) + scaled(b), "{a} + {b}");
                let product = d(a).mul(&d(b));
                let Bson::Decimal128(v) = product.to_bson() else { unreachable!() };
                let got: f64 = v.to_string().parse().unwrap();
                let want = scaled(a) * scaled(b);
                assert_eq!((got * 1e8).round() as i128, want, "{a} × {b}");
            }
        }
    }
}

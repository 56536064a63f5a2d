//! Exact order of Decimal128 values among themselves and against int32,
//! int64 and double, as MongoDB compares them: by exact value (so
//! `NumberDecimal("0.1")` is above the double 0.1, whose binary value is
//! 0.1000000000000000055...), NaN below every number, infinities at the
//! ends. Decimal128 is decoded from its BID encoding; the comparison of
//! two finite values scales both to integers (`Big`) when their
//! magnitudes are too close to tell apart cheaply.

use bson::Bson;
use std::cmp::Ordering;

/// A number as an exact value: `mantissa × 2^exp2 × 10^exp10`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Exact {
    NaN,
    Inf { negative: bool },
    Finite { negative: bool, mantissa: u128, exp2: i32, exp10: i32 },
}

/// The largest canonical Decimal128 coefficient (34 nines).
const COEFFICIENT_MAX: u128 = 9_999_999_999_999_999_999_999_999_999_999_999;

pub(crate) fn decimal(bytes: [u8; 16]) -> Exact {
    let bits = u128::from_le_bytes(bytes);
    let negative = bits >> 127 == 1;
    let (exponent, coefficient) = if (bits >> 125) & 0b11 == 0b11 {
        match (bits >> 122) & 0b11111 {
            0b11110 => return Exact::Inf { negative },
            0b11111 => return Exact::NaN,
            // The "11" form's coefficient is always above the maximum:
            // non-canonical, which reads as zero.
            _ => ((bits >> 111) & 0x3fff, 0),
        }
    } else {
        ((bits >> 113) & 0x3fff, bits & ((1u128 << 113) - 1))
    };
    let mantissa = if coefficient > COEFFICIENT_MAX { 0 } else { coefficient };
    Exact::Finite { negative, mantissa, exp2: 0, exp10: exponent as i32 - 6176 }
}

/// Whether a Decimal128 is a NaN.
pub fn is_nan(d: &bson::Decimal128) -> bool {
    decimal(d.bytes()) == Exact::NaN
}

/// A Decimal128 as a 64-bit integer, toward zero: NaN is 0, values past
/// the range (infinities too) are its ends.
pub fn truncated_i64(d: &bson::Decimal128) -> i64 {
    let (negative, magnitude) = match decimal(d.bytes()) {
        Exact::NaN => return 0,
        Exact::Finite { mantissa: 0, .. } => return 0,
        Exact::Inf { negative } => (negative, u128::MAX),
        Exact::Finite { negative, mantissa, exp10, .. } if exp10 >= 0 => {
            let scaled = 10u128.checked_pow(exp10 as u32).and_then(|p| mantissa.checked_mul(p));
            (negative, scaled.unwrap_or(u128::MAX))
        }
        Exact::Finite { negative, mantissa, exp10, .. } => {
            (negative, 10u128.checked_pow(exp10.unsigned_abs()).map_or(0, |p| mantissa / p))
        }
    };
    match (negative, i64::try_from(magnitude)) {
        (false, Ok(n)) => n,
        (false, Err(_)) => i64::MAX,
        (true, _) if magnitude >= 1u128 << 63 => i64::MIN,
        (true, Ok(n)) => -n,
        (true, Err(_)) => i64::MIN,
    }
}

pub(crate) fn double(f: f64) -> Exact {
    if f.is_nan() {
        return Exact::NaN;
    }
    if f.is_infinite() {
        return Exact::Inf { negative: f < 0.0 };
    }
    let bits = f.to_bits();
    let negative = bits >> 63 == 1;
    let biased = ((bits >> 52) & 0x7ff) as i32;
    let fraction = bits & ((1u64 << 52) - 1);
    let (mantissa, exp2) = if biased == 0 { (fraction, -1074) } else { (fraction | (1u64 << 52), biased - 1075) };
    Exact::Finite { negative, mantissa: mantissa.into(), exp2, exp10: 0 }
}

fn exact(v: &Bson) -> Option<Exact> {
    Some(match v {
        Bson::Int32(i) => Exact::Finite { negative: *i < 0, mantissa: i.unsigned_abs().into(), exp2: 0, exp10: 0 },
        Bson::Int64(i) => Exact::Finite { negative: *i < 0, mantissa: i.unsigned_abs().into(), exp2: 0, exp10: 0 },
        Bson::Double(f) => double(*f),
        Bson::Decimal128(d) => decimal(d.bytes()),
        _ => return None,
    })
}

/// Compare two numbers exactly; `None` if either is not a number.
pub fn compare_exact(a: &Bson, b: &Bson) -> Option<Ordering> {
    Some(cmp_exact(exact(a)?, exact(b)?))
}

fn rank(e: &Exact) -> u8 {
    match e {
        Exact::NaN => 0,
        Exact::Inf { negative: true } => 1,
        Exact::Finite { mantissa: 0, .. } => 3,
        Exact::Finite { negative: true, .. } => 2,
        Exact::Finite { negative: false, .. } => 4,
        Exact::Inf { negative: false } => 5,
    }
}

fn cmp_exact(a: Exact, b: Exact) -> Ordering {
    let (ra, rb) = (rank(&a), rank(&b));
    if ra != rb {
        return ra.cmp(&rb);
    }
    match (a, b) {
        (
            Exact::Finite { negative, mantissa: ma, exp2: ea, exp10: qa },
            Exact::Finite { mantissa: mb, exp2: eb, exp10: qb, .. },
        ) if ma != 0 => {
            let magnitude = cmp_magnitude((ma, ea, qa), (mb, eb, qb));
            if negative {
                magnitude.reverse()
            } else {
                magnitude
            }
        }
        // Zeros, same-signed infinities, NaNs.
        _ => Ordering::Equal,
    }
}

/// Compare `ma × 2^ea × 10^qa` with `mb × 2^eb × 10^qb` (mantissas > 0).
fn cmp_magnitude((ma, ea, qa): (u128, i32, i32), (mb, eb, qb): (u128, i32, i32)) -> Ordering {
    // log2 estimates: far apart, the answer is clear.
    let log2 = |m: u128, e: i32, q: i32| {
        f64::from(128 - m.leading_zeros()) + f64::from(e) + f64::from(q) * std::f64::consts::LOG2_10
    };
    let (la, lb) = (log2(ma, ea, qa), log2(mb, eb, qb));
    if la - lb > 4.0 {
        return Ordering::Greater;
    }
    if lb - la > 4.0 {
        return Ordering::Less;
    }
    // Close: scale both to integers and compare them.
    let (e0, q0) = (ea.min(eb), qa.min(qb));
    let scaled = |m: u128, e: i32, q: i32| {
        let mut big = Big::from(m);
        big.mul_pow10((q - q0) as u32);
        big.shl((e - e0) as u32);
        big
    };
    scaled(ma, ea, qa).cmp(&scaled(mb, eb, qb))
}

/// A non-negative integer, little-endian 64-bit limbs, no trailing zeros.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Big(pub(crate) Vec<u64>);

impl From<u128> for Big {
    fn from(v: u128) -> Big {
        let mut b = Big(vec![v as u64, (v >> 64) as u64]);
        b.trim();
        b
    }
}

impl Big {
    fn trim(&mut self) {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
    }

    pub(crate) fn mul_small(&mut self, k: u64) {
        let mut carry = 0u128;
        for limb in &mut self.0 {
            let p = u128::from(*limb) * u128::from(k) + carry;
            *limb = p as u64;
            carry = p >> 64;
        }
        if carry > 0 {
            self.0.push(carry as u64);
        }
    }

    pub(crate) fn mul_pow10(&mut self, mut n: u32) {
        while n >= 19 {
            self.mul_small(10u64.pow(19));
            n -= 19;
        }
        if n > 0 {
            self.mul_small(10u64.pow(n));
        }
    }

    pub(crate) fn shl(&mut self, bits: u32) {
        let (limbs, bits) = ((bits / 64) as usize, bits % 64);
        if bits > 0 {
            let mut carry = 0u64;
            for limb in &mut self.0 {
                let next = *limb >> (64 - bits);
                *limb = (*limb << bits) | carry;
                carry = next;
            }
            if carry > 0 {
                self.0.push(carry);
            }
        }
        self.0.splice(0..0, std::iter::repeat_n(0, limbs));
    }
}

impl Big {
    pub(crate) fn add_small(&mut self, k: u64) {
        let mut carry = u128::from(k);
        for limb in &mut self.0 {
            if carry == 0 {
                break;
            }
            let s = u128::from(*limb) + carry;
            *limb = s as u64;
            carry = s >> 64;
        }
        if carry > 0 {
            self.0.push(carry as u64);
        }
    }

    /// Divide by `d` (> 0) in place; the remainder.
    pub(crate) fn div_small(&mut self, d: u64) -> u64 {
        let mut rem = 0u128;
        for limb in self.0.iter_mut().rev() {
            let cur = (rem << 64) | u128::from(*limb);
            *limb = (cur / u128::from(d)) as u64;
            rem = cur % u128::from(d);
        }
        self.trim();
        rem as u64
    }

    /// The decimal digits, most significant first (none for zero).
    pub(crate) fn into_digits(mut self) -> Vec<u8> {
        const CHUNK: u64 = 10_000_000_000_000_000_000; // 10^19
        let mut chunks = Vec::new();
        while !self.0.is_empty() {
            chunks.push(self.div_small(CHUNK));
        }
        let mut out = Vec::with_capacity(chunks.len() * 19);
        for (i, chunk) in chunks.iter().rev().enumerate() {
            let text = if i == 0 { chunk.to_string() } else { format!("{chunk:019}") };
            out.extend(text.bytes().map(|b| b - b'0'));
        }
        out
    }
}

impl Ord for Big {
    fn cmp(&self, other: &Big) -> Ordering {
        self.0.len().cmp(&other.0.len()).then_with(|| self.0.iter().rev().cmp(other.0.iter().rev()))
    }
}

impl PartialOrd for Big {
    fn partial_cmp(&self, other: &Big) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::Decimal128;

    fn d(s: &str) -> Bson {
        Bson::Decimal128(s.parse::<Decimal128>().unwrap())
    }

    fn cmp(a: &Bson, b: &Bson) -> Ordering {
        compare_exact(a, b).unwrap()
    }

    #[test]
    fn decimals_compare_exactly_with_every_number_type() {
        use Ordering::*;
        let cases: Vec<(Bson, Bson, Ordering)> = vec![
            (d("0.1"), Bson::Double(0.1), Less), // 0.1 as a double is 0.1000000000000000055...
            (d("0.5"), Bson::Double(0.5), Equal),
            (d("1"), Bson::Int32(1), Equal),
            (d("1.000"), Bson::Int64(1), Equal),
            (d("-0"), Bson::Double(0.0), Equal),
            (d("9223372036854775807"), Bson::Int64(i64::MAX), Equal),
            (d("9223372036854775808"), Bson::Int64(i64::MAX), Greater),
            (d("9223372036854775808"), Bson::Double(9223372036854775808.0), Equal),
            (d("1E+400"), Bson::Double(f64::MAX), Greater),
            (d("1E-400"), Bson::Double(5e-324), Less),
            // The smallest double is 4.94065645841246544176568792868...E-324.
            (d("4.9406564584124654E-324"), Bson::Double(5e-324), Less),
            (d("4.9406564584124655E-324"), Bson::Double(5e-324), Greater),
            (d("-2.5"), Bson::Int32(-2), Less),
            (d("-2.5"), d("-2.50"), Equal),
            (d("1234567890123456789012345678901234"), d("1234567890123456789012345678901233"), Greater),
            (d("1.234567890123456789012345678901234E+6000"), d("1.234567890123456789012345678901235E+6000"), Less),
            (d("NaN"), Bson::Double(f64::NAN), Equal),
            (d("NaN"), d("-Infinity"), Less),
            (d("Infinity"), Bson::Double(f64::INFINITY), Equal),
            (d("Infinity"), d("9.999999999999999999999999999999999E+6144"), Greater),
            (d("-Infinity"), Bson::Double(f64::MIN), Less),
            (Bson::Double(0.1), Bson::Double(0.1), Equal),
            (Bson::Int64(3), Bson::Double(2.5), Greater),
        ];
        for (a, b, want) in cases {
            assert_eq!(cmp(&a, &b), want, "{a} vs {b}");
            assert_eq!(cmp(&b, &a), want.reverse(), "{b} vs {a}");
        }
    }

    #[test]
    fn big_integers_scale_and_order() {
        let mut a = Big::from(5);
        a.mul_pow10(40);
        let mut b = Big::from(5);
        b.shl(133); // 5 × 2^133 ≈ 5.4e40
        assert_eq!(a.cmp(&b), Ordering::Less);
        let mut c = Big::from(1);
        c.shl(64);
        assert_eq!(c, Big(vec![0, 1]));
    }
}

//! x87 extended precision (C's `long double` on x86-64: a 64-bit
//! significand, 15-bit exponent, subnormals), as Redis's `INCRBYFLOAT`
//! computes with it: a number read as glibc's `strtold` reads it
//! (`string2ld`), one sum rounded once, and the result printed as
//! `"%.17Lf"` with trailing zeros and a trailing dot cut (`ld2string` in
//! `LD_STR_HUMAN` mode).
//!
//! Hand-written because Rust has no `long double`, and `f64` answers other
//! bytes: Redis replies `0.1` to `INCRBYFLOAT k 0.1` where `f64` would give
//! `0.10000000000000001`, and `1e17 + 1` is exact only with 64 bits. Every
//! step is exact big-integer arithmetic (`num-bigint`) followed by one
//! round-to-nearest-even to 64 bits, which is what the FPU and glibc do, so
//! the results are the same bit for bit; the test table at the end was
//! taken from redis-server 7.0 on x86-64.

use std::cmp::Ordering;

use num_bigint::BigUint;

/// Exponent of the last bit of the smallest subnormal: `2^-16445`. The
/// smallest normal value is `2^63 * 2^-16445 = 2^-16382`.
const MIN_EXP: i64 = -16445;
/// Exponent of the last bit of the largest finite value,
/// `(2^64 - 1) * 2^16320`, just under `2^16384`.
const MAX_EXP: i64 = 16320;
/// Redis's `MAX_LONG_DOUBLE_CHARS`: `string2ld` refuses anything this long
/// or longer.
const MAX_CHARS: usize = 5 * 1024;
/// Exponents are read up to this, far past any that leaves a finite
/// non-zero value, so reading them never overflows.
const EXP_CAP: i64 = 1_000_000_000;
/// Fraction digits that `"%.17Lf"` prints.
const FRACTION_DIGITS: u32 = 17;

/// A `long double` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LongDouble {
    /// `(-1)^neg * mant * 2^exp`. `mant` has its top bit set, except for
    /// zero (`mant == 0`) and subnormals (`exp == MIN_EXP`).
    Finite {
        neg: bool,
        mant: u64,
        exp: i32,
    },
    Infinite {
        neg: bool,
    },
}

/// Why a value could not be rounded to a finite one.
#[derive(Debug, PartialEq, Eq)]
enum Range {
    Overflow,
    Underflow,
}

impl LongDouble {
    pub const ZERO: LongDouble = LongDouble::Finite {
        neg: false,
        mant: 0,
        exp: 0,
    };

    /// Reads `s` as Redis's `string2ld` does, or `None` ("value is not a
    /// valid float"): the whole string must be what `strtold` reads, with
    /// nothing before or after (no spaces), as a decimal (`1.5`, `.5`,
    /// `5.`, `1e-3`), a C hexadecimal float (`0x1.8p3`) or `inf` /
    /// `infinity`, with an optional sign. NaN, a value past the largest
    /// finite one and a non-zero value that would round to zero are
    /// refused, as `strtold`'s `ERANGE` is.
    pub fn parse(s: &[u8]) -> Option<LongDouble> {
        if s.is_empty() || s.len() >= MAX_CHARS {
            return None;
        }
        let (neg, body) = match s[0] {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        if body.eq_ignore_ascii_case(b"inf") || body.eq_ignore_ascii_case(b"infinity") {
            return Some(LongDouble::Infinite { neg });
        }
        let rounded = match body {
            [b'0', x, hex @ ..] if x | 0x20 == b'x' => {
                let (digits, fraction, rest) = mantissa(hex, 16)?;
                let exp = exponent(rest, b'p')?;
                from_binary(&digits, exp - 4 * fraction as i64)
            }
            _ => {
                let (digits, fraction, rest) = mantissa(body, 10)?;
                let exp = exponent(rest, b'e')?;
                from_decimal(&digits, exp - fraction as i64)
            }
        };
        let (mant, exp) = rounded.ok()?;
        Some(LongDouble::Finite { neg, mant, exp })
    }

    pub fn is_finite(self) -> bool {
        matches!(self, LongDouble::Finite { .. })
    }

    /// `self + other` as the FPU adds them, rounding once; an overflow is
    /// infinite. `None` for a NaN (infinities of opposite signs).
    pub fn checked_add(self, other: LongDouble) -> Option<LongDouble> {
        use LongDouble::{Finite, Infinite};
        let (a, b) = match (self, other) {
            (Infinite { neg: x }, Infinite { neg: y }) => return (x == y).then_some(self),
            (Infinite { .. }, _) => return Some(self),
            (_, Infinite { .. }) => return Some(other),
            (Finite { .. }, Finite { .. }) => (self.parts(), other.parts()),
        };
        let ((a_neg, a_mant, a_exp), (b_neg, b_mant, b_exp)) = (a, b);
        if a_mant == 0 || b_mant == 0 {
            // -0 + -0 is -0; x + 0 is x.
            return Some(match (a_mant, b_mant) {
                (0, 0) => Finite {
                    neg: a_neg && b_neg,
                    mant: 0,
                    exp: 0,
                },
                (0, _) => other,
                _ => self,
            });
        }
        // Exact: both as integers times the smaller power of two.
        let q0 = a_exp.min(b_exp);
        let x = BigUint::from(a_mant) << (a_exp - q0) as u64;
        let y = BigUint::from(b_mant) << (b_exp - q0) as u64;
        let (neg, sum) = if a_neg == b_neg {
            (a_neg, x + y)
        } else {
            match x.cmp(&y) {
                // x - x is +0 when rounding to nearest.
                Ordering::Equal => return Some(LongDouble::ZERO),
                Ordering::Greater => (a_neg, x - y),
                Ordering::Less => (b_neg, y - x),
            }
        };
        Some(match round(&sum, q0, false) {
            Ok((mant, exp)) => Finite { neg, mant, exp },
            Err(Range::Overflow) => Infinite { neg },
            // A non-zero multiple of 2^q0 is at least the smallest
            // subnormal, which is never rounded away.
            Err(Range::Underflow) => unreachable!("an exact non-zero sum rounds to non-zero"),
        })
    }

    /// `ld2string(..., LD_STR_HUMAN)`: `"%.17Lf"` (the exact decimal value
    /// rounded half to even at 17 fraction digits, as glibc prints it),
    /// then trailing zeros and a trailing dot removed, and `-0` written
    /// `0`.
    pub fn to_human(self) -> String {
        let (neg, mant, exp) = match self {
            LongDouble::Infinite { neg } => return if neg { "-inf" } else { "inf" }.into(),
            LongDouble::Finite { .. } => self.parts(),
        };
        if mant == 0 {
            return "0".into();
        }
        let sign = if neg { "-" } else { "" };
        if exp >= 0 {
            // An integer: its fraction is all zeros, all cut.
            return format!("{sign}{}", BigUint::from(mant) << exp as u64);
        }
        let k = exp.unsigned_abs() as u32;
        // Under 2^(64 - k) <= 2^-58, less than half of 10^-17: prints as 0.
        if k >= 122 {
            return "0".into();
        }
        // |value| = mant * 5^k / 10^k; scaled = |value| * 10^17, rounded.
        let exact = BigUint::from(mant) * BigUint::from(5u32).pow(k);
        let scaled = if k <= FRACTION_DIGITS {
            exact * BigUint::from(10u32).pow(FRACTION_DIGITS - k)
        } else {
            let unit = BigUint::from(10u32).pow(k - FRACTION_DIGITS);
            let quot = &exact / &unit;
            let rem = exact - &quot * &unit;
            let up = match (rem << 1u32).cmp(&unit) {
                Ordering::Greater => true,
                Ordering::Equal => quot.bit(0),
                Ordering::Less => false,
            };
            if up {
                quot + 1u32
            } else {
                quot
            }
        };
        let digits = format!("{scaled:0>18}");
        let (int, fraction) = digits.split_at(digits.len() - FRACTION_DIGITS as usize);
        let fraction = fraction.trim_end_matches('0');
        match (int, fraction) {
            ("0", "") => "0".into(),
            (_, "") => format!("{sign}{int}"),
            _ => format!("{sign}{int}.{fraction}"),
        }
    }

    fn parts(self) -> (bool, u64, i64) {
        match self {
            LongDouble::Finite { neg, mant, exp } => (neg, mant, exp as i64),
            LongDouble::Infinite { .. } => unreachable!("finite values only"),
        }
    }
}

/// Splits the digits `[d...][.d...]` (at least one) off the front of `s`:
/// their values as one integer's digits, how many came after the point,
/// and the rest of `s`.
fn mantissa(s: &[u8], radix: u32) -> Option<(Vec<u8>, usize, &[u8])> {
    let digit = |b: &u8| (*b as char).to_digit(radix).map(|d| d as u8);
    let int_len = s.iter().map_while(digit).count();
    let (int, rest) = s.split_at(int_len);
    let (fraction, rest) = match rest.split_first() {
        Some((b'.', after)) => after.split_at(after.iter().map_while(digit).count()),
        _ => (&[][..], rest),
    };
    if int.is_empty() && fraction.is_empty() {
        return None;
    }
    let digits = int.iter().chain(fraction).filter_map(digit).collect();
    Some((digits, fraction.len(), rest))
}

/// Reads `rest`, what follows the digits: empty, or `marker` (either case),
/// an optional sign and at least one decimal digit, to the end (`strtold`
/// stops before a marker with no digits, which leaves bytes unread).
fn exponent(rest: &[u8], marker: u8) -> Option<i64> {
    let Some((&m, after)) = rest.split_first() else {
        return Some(0);
    };
    if m | 0x20 != marker {
        return None;
    }
    let (neg, digits) = match after.split_first() {
        Some((b'-', d)) => (true, d),
        Some((b'+', d)) => (false, d),
        _ => (false, after),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits
        .iter()
        .fold(0i64, |n, d| (n * 10 + i64::from(d - b'0')).min(EXP_CAP));
    Some(if neg { -n } else { n })
}

/// `digits * 10^exp`, correctly rounded.
fn from_decimal(digits: &[u8], exp: i64) -> Result<(u64, i32), Range> {
    let significant = digits.iter().skip_while(|d| **d == 0).count() as i64;
    if significant == 0 {
        return Ok((0, 0));
    }
    // The value is in [10^magnitude, 10^(magnitude + 1)): the largest
    // finite value is about 1.19e4932, half the smallest subnormal about
    // 1.82e-4951. Only values near those edges need the exact check.
    let magnitude = significant - 1 + exp;
    if magnitude > 4932 {
        return Err(Range::Overflow);
    }
    if magnitude < -4952 {
        return Err(Range::Underflow);
    }
    let d = BigUint::from_radix_be(digits, 10).expect("decimal digits");
    if exp >= 0 {
        return round(&(d * BigUint::from(10u32).pow(exp as u32)), 0, false);
    }
    // d / 10^k: divide d * 2^-q0 by 10^k with q0 chosen so the quotient
    // has a few bits more than 64, and keep whether a remainder was left.
    let k = exp.unsigned_abs();
    let k_bits = (k as f64 * std::f64::consts::LOG2_10).ceil() as i64;
    // The value's top bit is at least bits(d) - 2 - k_bits, so the last
    // kept bit is at least 5 above q0: the rounding bit is in the quotient.
    let q0 = d.bits() as i64 - 70 - k_bits;
    let num = d << (-q0).max(0) as u64;
    let den = BigUint::from(10u32).pow(k as u32) << q0.max(0) as u64;
    let quot = &num / &den;
    let exact = &quot * &den == num;
    round(&quot, q0, !exact)
}

/// `digits (hexadecimal) * 2^exp`, correctly rounded.
fn from_binary(digits: &[u8], exp: i64) -> Result<(u64, i32), Range> {
    let h = BigUint::from_radix_be(digits, 16).expect("hex digits");
    if h.bits() == 0 {
        return Ok((0, 0));
    }
    let top = h.bits() as i64 - 1 + exp;
    if top > MAX_EXP + 64 {
        return Err(Range::Overflow);
    }
    if top < MIN_EXP - 2 {
        return Err(Range::Underflow);
    }
    round(&h, exp, false)
}

/// Rounds `(n + f) * 2^q0` to the nearest `long double`, ties to even,
/// where `f` is 0, or, if `sticky`, some fraction strictly between 0 and 1
/// (a division's remainder). `n` is not 0.
fn round(n: &BigUint, q0: i64, sticky: bool) -> Result<(u64, i32), Range> {
    let top = n.bits() as i64 - 1 + q0;
    // The exponent of the last bit kept: 64 bits below the top, or fewer
    // for a subnormal.
    let q = (top - 63).max(MIN_EXP);
    let (mant, q) = if q <= q0 {
        debug_assert!(!sticky, "a fraction below the last bit kept");
        let m = n << (q0 - q) as u64;
        (u64::try_from(&m).expect("at most 64 bits"), q)
    } else {
        let shift = (q - q0) as u64;
        let kept = u64::try_from(&(n >> shift)).expect("at most 64 bits");
        let half = n.bit(shift - 1);
        let below = sticky || n.trailing_zeros().is_some_and(|z| z < shift - 1);
        if half && (below || kept & 1 == 1) {
            match kept.checked_add(1) {
                Some(m) => (m, q),
                // 2^64: one more bit, so one place up.
                None => (1 << 63, q + 1),
            }
        } else {
            (kept, q)
        }
    };
    if mant == 0 {
        return Err(Range::Underflow);
    }
    if q > MAX_EXP {
        return Err(Range::Overflow);
    }
    Ok((mant, q as i32))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `INCRBYFLOAT` of `by` on a key holding `start` (or none), with
    /// Redis's reply: the value, or the error line after a `-`.
    fn incrbyfloat(start: Option<&str>, by: &str) -> String {
        let parse = |s: &str| LongDouble::parse(s.as_bytes());
        let current = match start {
            None => Some(LongDouble::ZERO),
            Some(s) => parse(s),
        };
        let (Some(current), Some(by)) = (current, parse(by)) else {
            return "-ERR value is not a valid float".into();
        };
        match current.checked_add(by).filter(|v| v.is_finite()) {
            Some(sum) => sum.to_human(),
            None => "-ERR increment would produce NaN or Infinity".into(),
        }
    }

    /// (value held, increment, redis-server 7.0.15's reply on x86-64).
    #[rustfmt::skip]
    const REDIS: &[(Option<&str>, &str, &str)] = &[
        (None, "0.1", "0.1"),
        (Some("0.1"), "0.2", "0.3"),
        (Some("0.1"), "0", "0.1"),
        (Some("10.50"), "0.1", "10.6"),
        (Some("10.6"), "-5", "5.6"),
        (Some("5.0e3"), "2.0e2", "5200"),
        (None, "1e17", "100000000000000000"),
        (Some("1e17"), "1", "100000000000000001"),
        (Some("1e17"), "0.5", "100000000000000000.5"),
        (Some("1e18"), "1", "1000000000000000001"),
        (Some("1e19"), "1", "10000000000000000001"),
        (Some("1e20"), "1", "100000000000000000000"),
        (Some("18446744073709551615"), "1", "18446744073709551616"),
        (Some("18446744073709551616"), "1", "18446744073709551616"),
        (Some("18446744073709551617"), "0", "18446744073709551616"),
        (Some("9223372036854775807"), "1", "9223372036854775808"),
        (Some("-9223372036854775808"), "-1", "-9223372036854775809"),
        (Some("36893488147419103232"), "1", "36893488147419103232"),
        (Some("36893488147419103232"), "2", "36893488147419103232"),
        (Some("36893488147419103232"), "3", "36893488147419103236"),
        (Some("36893488147419103232"), "-1", "36893488147419103232"),
        (None, "1.5e-10", "0.00000000015"),
        (None, "-1.5e-10", "-0.00000000015"),
        (None, "1e-17", "0.00000000000000001"),
        (None, "5e-18", "0"),
        (None, "5.000000000000001e-18", "0.00000000000000001"),
        (None, "4.999999999999999e-18", "0"),
        (None, "-5.000000000000001e-18", "-0.00000000000000001"),
        (None, "0.000003814697265625", "0.00000381469726562"),
        (None, "0.000011444091796875", "0.00001144409179688"),
        (None, "-0.000003814697265625", "-0.00000381469726562"),
        (None, "0.000000000000000015", "0.00000000000000002"),
        (None, "0.000000000000000025", "0.00000000000000002"),
        (None, "0.999999999999999995", "1"),
        (None, "0.9999999999999999949", "0.99999999999999999"),
        (None, "0.9999999999999999951", "1"),
        (None, "-0.9999999999999999951", "-1"),
        (Some("1"), "-1", "0"),
        (Some("-0"), "0", "0"),
        (Some("-0"), "-0", "0"),
        (Some("0"), "-0.0", "0"),
        (None, "-1e-19", "0"),
        (None, "1e-19", "0"),
        (Some("0.1"), "-0.1", "0"),
        (Some("0.3"), "-0.1", "0.2"),
        (Some("1.1"), "2.2", "3.3"),
        (Some("3.14159265358979323846264338327950288"), "0", "3.14159265358979324"),
        (Some("2.718281828459045235360287"), "1", "3.71828182845904524"),
        (None, "4.9406564584124654e-324", "0"),
        (None, "2.2250738585072014e-308", "0"),
        (None, "0.30000000000000004", "0.30000000000000004"),
        (None, "12345678901234567.5", "12345678901234567.5"),
        (None, "12345678901234567.25", "12345678901234567.25"),
        (None, "99999999999999999.5", "99999999999999999.5"),
        (None, "1.9999999999999999999", "2"),
        (None, "123456789012345678901234567890", "123456789012345678899921813504"),
        (None, "1e40", "9999999999999999999783686092270256259072"),
        (None, "0.0000000000000000000000000000000000000000000000000000000000001", "0"),
        (None, "1.00000000000000000000000000000000000000001", "1"),
        (None, "0x1.8p1", "3"),
        (None, "0X1P3", "8"),
        (None, "0x.8", "0.5"),
        (None, "0x1e5", "485"),
        (None, "-0x10", "-16"),
        (None, "0x1.00000000000000008p0", "1"),
        (None, "0x1.00000000000000018p0", "1"),
        (None, "0x1p-16445", "0"),
        (None, "0x1.0000000000000001p0", "1"),
        (Some("0x1p-16445"), "0x1p-16445", "0"),
        (Some("0x1p-16382"), "-0x1p-16445", "0"),
        (None, "1e-4950", "0"),
        (None, "3.6e-4951", "0"),
        (None, "1.83e-4951", "0"),
        (Some("1e4932"), "-1e4932", "0"),
        (Some("1.18973149535723176502e+4932"), "1e4913", "-ERR increment would produce NaN or Infinity"),
        (Some("1.18973149535723176502e+4932"), "1e4932", "-ERR increment would produce NaN or Infinity"),
        (Some("-1.18973149535723176502e+4932"), "-1e4932", "-ERR increment would produce NaN or Infinity"),
        (Some("0x1.fffffffffffffffep16383"), "0x1p16319", "-ERR increment would produce NaN or Infinity"),
        (None, "00012", "12"),
        (None, "-00.000", "0"),
        (None, "1e0", "1"),
        (None, "1E+0", "1"),
        (None, "1e-0", "1"),
        (None, "0.1e1", "1"),
        (None, "100e-2", "1"),
        (None, "+1", "1"),
        (None, ".5", "0.5"),
        (None, "5.", "5"),
        (None, "5.e3", "5000"),
        (None, "-.5", "-0.5"),
        (None, "1e00000000000000000000000001", "10"),
        (None, "0e99999999999999999999", "0"),
        (None, "0x1P+4", "16"),
        (None, "0x1.p1", "2"),
        (None, "INFINITY", "-ERR increment would produce NaN or Infinity"),
        (None, "", "-ERR value is not a valid float"),
        (None, " 1", "-ERR value is not a valid float"),
        (None, "1 ", "-ERR value is not a valid float"),
        (None, "\t1", "-ERR value is not a valid float"),
        (None, "1\n", "-ERR value is not a valid float"),
        (None, "abc", "-ERR value is not a valid float"),
        (None, "1e", "-ERR value is not a valid float"),
        (None, "1e+", "-ERR value is not a valid float"),
        (None, "e5", "-ERR value is not a valid float"),
        (None, ".", "-ERR value is not a valid float"),
        (None, "-", "-ERR value is not a valid float"),
        (None, "++1", "-ERR value is not a valid float"),
        (None, "+-1", "-ERR value is not a valid float"),
        (None, ".e3", "-ERR value is not a valid float"),
        (None, "1..2", "-ERR value is not a valid float"),
        (None, "1,5", "-ERR value is not a valid float"),
        (None, "1_000", "-ERR value is not a valid float"),
        (None, "0x", "-ERR value is not a valid float"),
        (None, "0x1p", "-ERR value is not a valid float"),
        (None, "0xg", "-ERR value is not a valid float"),
        (None, "0x.p1", "-ERR value is not a valid float"),
        (None, "nan", "-ERR value is not a valid float"),
        (None, "-nan", "-ERR value is not a valid float"),
        (None, "nan(123)", "-ERR value is not a valid float"),
        (None, "NaN", "-ERR value is not a valid float"),
        (None, "infin", "-ERR value is not a valid float"),
        (None, "1\0", "-ERR value is not a valid float"),
        (None, "1e5000", "-ERR value is not a valid float"),
        (None, "-1e5000", "-ERR value is not a valid float"),
        (None, "1e-5000", "-ERR value is not a valid float"),
        (None, "1e4933", "-ERR value is not a valid float"),
        (None, "1.2e4932", "-ERR value is not a valid float"),
        (None, "1e-4952", "-ERR value is not a valid float"),
        (None, "0x1p16384", "-ERR value is not a valid float"),
        (None, "0x1p-16447", "-ERR value is not a valid float"),
        (None, "1e99999999999999999999", "-ERR value is not a valid float"),
        (None, "1e-99999999999999999999", "-ERR value is not a valid float"),
        (Some("abc"), "1", "-ERR value is not a valid float"),
        (Some(""), "1", "-ERR value is not a valid float"),
        (Some(" 1"), "1", "-ERR value is not a valid float"),
        (Some("nan"), "1", "-ERR value is not a valid float"),
        (None, "inf", "-ERR increment would produce NaN or Infinity"),
        (None, "-inf", "-ERR increment would produce NaN or Infinity"),
        (Some("inf"), "-inf", "-ERR increment would produce NaN or Infinity"),
        (Some("inf"), "1", "-ERR increment would produce NaN or Infinity"),
        (Some("-infinity"), "1", "-ERR increment would produce NaN or Infinity"),
        (Some("1"), "inf", "-ERR increment would produce NaN or Infinity"),
        (Some("1.18973149535723176502e+4932"), "1.18973149535723176502e+4932", "-ERR increment would produce NaN or Infinity"),
    ];

    #[test]
    fn replies_as_redis_on_x86_64() {
        for &(start, by, want) in REDIS {
            assert_eq!(incrbyfloat(start, by), want, "{start:?} + {by:?}");
        }
    }

    /// Results too long for the table: length, first and last digits.
    #[test]
    fn long_results_as_redis() {
        let max = "1.18973149535723176502e+4932";
        for (start, by, len, head, tail) in [
            (
                None,
                "1.7976931348623157e308",
                309,
                "17976931348623156999592104677410",
                "7720159985926376802466863339536384",
            ),
            (
                Some("1.7976931348623157e308"),
                "1.7976931348623157e308",
                309,
                "35953862697246313999184209354820",
                "5440319971852753604933726679072768",
            ),
            (
                Some(max),
                "0",
                4933,
                "11897314953572317650212638530309",
                "9662444156604419552086811989770240",
            ),
            (
                Some("0x1.fffffffffffffffep16383"),
                "0x0.fp16319",
                4933,
                "11897314953572317650212638530309",
                "9662444156604419552086811989770240",
            ),
            (
                None,
                &"9".repeat(4932),
                4933,
                "10000000000000000000060189493879",
                "0876379371163141086538418113791886622720",
            ),
        ] {
            let got = incrbyfloat(start, by);
            assert_eq!(got.len(), len, "{start:?} + {}...", &by[..12]);
            assert!(got.starts_with(head) && got.ends_with(tail), "{got}");
        }
    }

    /// `string2ld` refuses 5,120 bytes or more, whatever they say.
    #[test]
    fn input_length_limit() {
        assert_eq!(incrbyfloat(None, &"0".repeat(MAX_CHARS - 1)), "0");
        assert_eq!(
            incrbyfloat(None, &"0".repeat(MAX_CHARS)),
            "-ERR value is not a valid float"
        );
    }
}

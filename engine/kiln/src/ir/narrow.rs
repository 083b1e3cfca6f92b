//! Sub-byte and 8-bit element types of ONNX (float8 variants, e8m0, float4, 4- and 2-bit
//! integers), one element per byte in memory.
//!
//! Conversions follow the ONNX reference (which uses `ml_dtypes`): round to nearest even,
//! subnormals kept, and on overflow either saturate to the largest finite value or produce
//! the type's infinity/NaN (Cast `saturate=0`). ONNX packs the 4- and 2-bit types into
//! bytes (low bits first) only in `raw_data`; [`pack_bits`] and [`unpack_bits`] do that.
//! Each type is a `repr(transparent)` byte (`Pod`), so device code can copy slices as bytes.

use serde::{Deserialize, Serialize};
use std::fmt;

/// How a binary floating-point format encodes specials.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Specials {
    /// IEEE-like: all-ones exponent is infinity (zero mantissa) or NaN.
    Ieee,
    /// "FN": no infinity; the all-ones code (per sign) is NaN.
    Finite,
    /// "FNUZ": no infinity, no negative zero; `0x80` is the only NaN.
    FiniteUnsignedZero,
    /// No infinity and no NaN (float4 e2m1).
    None,
}

/// A small binary floating-point format: sign bit, `exp_bits`, `man_bits`.
#[derive(Clone, Copy, Debug)]
struct Format {
    exp_bits: u32,
    man_bits: u32,
    bias: i32,
    specials: Specials,
    /// Magnitude code (sign cleared) of the largest finite value.
    max_code: u8,
}

const E4M3FN: Format = Format { exp_bits: 4, man_bits: 3, bias: 7, specials: Specials::Finite, max_code: 0x7E };
const E4M3FNUZ: Format =
    Format { exp_bits: 4, man_bits: 3, bias: 8, specials: Specials::FiniteUnsignedZero, max_code: 0x7F };
const E5M2: Format = Format { exp_bits: 5, man_bits: 2, bias: 15, specials: Specials::Ieee, max_code: 0x7B };
const E5M2FNUZ: Format =
    Format { exp_bits: 5, man_bits: 2, bias: 16, specials: Specials::FiniteUnsignedZero, max_code: 0x7F };
const E2M1: Format = Format { exp_bits: 2, man_bits: 1, bias: 1, specials: Specials::None, max_code: 0x7 };

impl Format {
    fn sign_bit(self) -> u8 {
        1 << (self.exp_bits + self.man_bits)
    }

    fn magnitude_mask(self) -> u8 {
        self.sign_bit() - 1
    }

    fn nan(self, negative: bool) -> u8 {
        let sign = if negative { self.sign_bit() } else { 0 };
        match self.specials {
            Specials::Ieee => sign | (self.magnitude_mask() - 1),
            Specials::Finite => sign | self.magnitude_mask(),
            Specials::FiniteUnsignedZero => 0x80,
            // ml_dtypes maps NaN to the zero of the opposite sign; kept for bit-exactness.
            Specials::None => {
                if negative {
                    0
                } else {
                    self.sign_bit()
                }
            }
        }
    }

    fn decode(self, bits: u8) -> f32 {
        let sign_bit = self.sign_bit();
        let negative = bits & sign_bit != 0;
        let magnitude = bits & self.magnitude_mask();
        let exp_max = (1u8 << self.exp_bits) - 1;
        let exponent = magnitude >> self.man_bits;
        let mantissa = magnitude & ((1 << self.man_bits) - 1);
        match self.specials {
            Specials::FiniteUnsignedZero if bits == 0x80 => return f32::NAN,
            Specials::Finite if magnitude == self.magnitude_mask() => return f32::NAN,
            Specials::Ieee if exponent == exp_max => {
                return match (mantissa, negative) {
                    (0, false) => f32::INFINITY,
                    (0, true) => f32::NEG_INFINITY,
                    _ => f32::NAN,
                }
            }
            _ => {}
        }
        let value = if exponent == 0 {
            f64::from(mantissa) * pow2(1 - self.bias - self.man_bits as i32)
        } else {
            (f64::from(mantissa) / f64::from(1u32 << self.man_bits) + 1.0) * pow2(i32::from(exponent) - self.bias)
        };
        let value = value as f32;
        if negative {
            -value
        } else {
            value
        }
    }

    /// Rounds `x` to nearest even. On overflow: the largest finite value when `saturate`
    /// (or for formats without infinity and NaN), else infinity or NaN.
    fn encode(self, x: f64, saturate: bool) -> u8 {
        let negative = x.is_sign_negative();
        let sign = if negative { self.sign_bit() } else { 0 };
        let overflow = || match (saturate, self.specials) {
            (true, _) | (_, Specials::None) => sign | self.max_code,
            (false, Specials::Ieee) => sign | (((1u8 << self.exp_bits) - 1) << self.man_bits),
            (false, _) => self.nan(negative),
        };
        if x.is_nan() {
            return self.nan(negative);
        }
        if x.is_infinite() {
            return overflow();
        }
        let zero = if self.specials == Specials::FiniteUnsignedZero { 0 } else { sign };
        let a = x.abs();
        let min_exp = 1 - self.bias;
        // Half the smallest subnormal or less rounds to zero (ties to the even zero).
        if a <= pow2(min_exp - self.man_bits as i32 - 1) {
            return zero;
        }
        let exp = exponent_of(a).max(min_exp);
        let quantum = pow2(exp - self.man_bits as i32);
        let mut steps = (a / quantum).round_ties_even() as u32;
        let mut exp = exp;
        let implicit = 1u32 << self.man_bits;
        if steps == 2 * implicit {
            steps = implicit;
            exp += 1;
        }
        let code = if steps >= implicit {
            let biased = exp + self.bias;
            ((biased as u32) << self.man_bits) | (steps - implicit)
        } else {
            steps
        };
        if code > u32::from(self.max_code) {
            return overflow();
        }
        if code == 0 {
            return zero;
        }
        sign | code as u8
    }
}

/// 2^e as an f64 (e within the normal range).
fn pow2(e: i32) -> f64 {
    f64::from_bits(((e + 1023) as u64) << 52)
}

/// `floor(log2(a))` of a positive finite f64 (its subnormals count as far below any target).
fn exponent_of(a: f64) -> i32 {
    let biased = ((a.to_bits() >> 52) & 0x7FF) as i32;
    if biased == 0 {
        -1074
    } else {
        biased - 1023
    }
}

/// How a conversion to float8 e8m0 (a power of two) rounds a value between two powers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum E8M0Rounding {
    /// Toward +infinity (ONNX's default, `round_mode="up"`).
    #[default]
    Up,
    Down,
    Nearest,
}

impl E8M0Rounding {
    pub fn from_onnx(name: &str) -> Option<E8M0Rounding> {
        match name {
            "up" => Some(E8M0Rounding::Up),
            "down" => Some(E8M0Rounding::Down),
            "nearest" => Some(E8M0Rounding::Nearest),
            _ => None,
        }
    }
}

/// float32 → e8m0 exactly as `onnx.numpy_helper.to_float8e8m0`: the sign is dropped, NaN
/// and infinity become the NaN code 0xFF, the exponent is rounded per `rounding`, and with
/// `saturate` the largest power (2^127) is never rounded up into NaN.
fn e8m0_from_f32(x: f32, saturate: bool, rounding: E8M0Rounding) -> u8 {
    let bits = x.to_bits();
    let exponent = (bits >> 23) & 0xFF;
    if exponent == 0xFF {
        return 0xFF;
    }
    let round_up = match rounding {
        E8M0Rounding::Down => false,
        E8M0Rounding::Up => bits & 0x7F_FFFF != 0,
        E8M0Rounding::Nearest => {
            let guard = bits & 0x40_0000 != 0;
            let rest = bits & 0x3F_FFFF != 0;
            guard && (rest || exponent > 0)
        }
    };
    let round_up = round_up && !(saturate && exponent == 0xFE);
    (exponent + u32::from(round_up)) as u8
}

macro_rules! float_type {
    ($(#[$doc:meta])* $name:ident, $format:expr) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, bytemuck::Pod, bytemuck::Zeroable)]
        #[repr(transparent)]
        pub struct $name(pub u8);

        impl $name {
            pub fn to_f32(self) -> f32 {
                $format.decode(self.0)
            }
            /// Rounds to nearest even; out-of-range values saturate or become inf/NaN.
            pub fn from_f64(x: f64, saturate: bool) -> $name {
                $name($format.encode(x, saturate))
            }
            pub fn from_f32(x: f32, saturate: bool) -> $name {
                $name::from_f64(f64::from(x), saturate)
            }
        }
    };
}

float_type!(
    /// float8 e4m3 "FN": no infinity, NaN 0x7F/0xFF, largest 448.
    F8E4M3FN, E4M3FN
);
float_type!(
    /// float8 e4m3 "FNUZ": no infinity or -0, NaN 0x80, largest 240.
    F8E4M3FNUZ, E4M3FNUZ
);
float_type!(
    /// float8 e5m2: IEEE-like with infinities, largest 57344.
    F8E5M2, E5M2
);
float_type!(
    /// float8 e5m2 "FNUZ": no infinity or -0, NaN 0x80, largest 57344.
    F8E5M2FNUZ, E5M2FNUZ
);
float_type!(
    /// float4 e2m1 (low nibble of the byte): ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}, no inf/NaN.
    F4E2M1, E2M1
);

/// float8 e8m0: an unsigned power of two 2^(code-127); 0xFF is NaN; no zero.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(transparent)]
pub struct F8E8M0(pub u8);

impl F8E8M0 {
    pub fn to_f32(self) -> f32 {
        if self.0 == 0xFF {
            f32::NAN
        } else {
            pow2(i32::from(self.0) - 127) as f32
        }
    }
    /// The value is first rounded to f32 (exact for every f32/f16/bf16 input).
    pub fn from_f64(x: f64, saturate: bool, rounding: E8M0Rounding) -> F8E8M0 {
        F8E8M0(e8m0_from_f32(x as f32, saturate, rounding))
    }
}

macro_rules! int_type {
    ($(#[$doc:meta])* $name:ident, $repr:ty, $bits:expr, $signed:expr) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, bytemuck::Pod, bytemuck::Zeroable)]
        #[repr(transparent)]
        pub struct $name(pub $repr);

        impl $name {
            pub const MIN: i64 = if $signed { -(1 << ($bits - 1)) } else { 0 };
            pub const MAX: i64 = if $signed { (1 << ($bits - 1)) - 1 } else { (1 << $bits) - 1 };

            pub fn value(self) -> i64 {
                i64::from(self.0)
            }
            /// Keeps the low bits (two's complement), like a narrowing integer cast.
            pub fn wrapping(x: i128) -> $name {
                let low = (x as u64 & ((1u64 << $bits) - 1)) as i64;
                let v = if $signed && low > Self::MAX { low - (1 << $bits) } else { low };
                $name(v as $repr)
            }
            /// Clamps to the type's range.
            pub fn saturating(x: i128) -> $name {
                $name(x.clamp(i128::from(Self::MIN), i128::from(Self::MAX)) as $repr)
            }
            /// The value of a bit field of `$bits` bits (sign-extended for signed types).
            pub fn from_bits(bits: u8) -> $name {
                $name::wrapping(i128::from(bits))
            }
            pub fn to_bits(self) -> u8 {
                (self.0 as u8) & ((1u8 << $bits) - 1)
            }
        }
    };
}

int_type!(
    /// Signed 4-bit integer in [-8, 7].
    I4, i8, 4, true
);
int_type!(
    /// Unsigned 4-bit integer in [0, 15].
    U4, u8, 4, false
);
int_type!(
    /// Signed 2-bit integer in [-2, 1].
    I2, i8, 2, true
);
int_type!(
    /// Unsigned 2-bit integer in [0, 3].
    U2, u8, 2, false
);

macro_rules! display_float {
    ($($name:ident),*) => {$(
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.to_f32(), f)
            }
        }
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:#04x} = {})", stringify!($name), self.0, self.to_f32())
            }
        }
    )*};
}
display_float!(F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ, F8E8M0, F4E2M1);

macro_rules! display_int {
    ($($name:ident),*) => {$(
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.0)
            }
        }
    )*};
}
display_int!(I4, U4, I2, U2);

/// Packs `bits`-wide codes (4 or 2) into bytes, first element in the lowest bits; the last
/// byte is zero-padded.
pub fn pack_bits(codes: &[u8], bits: u32) -> Vec<u8> {
    let per_byte = (8 / bits) as usize;
    let mask = (1u8 << bits) - 1;
    codes
        .chunks(per_byte)
        .map(|chunk| chunk.iter().enumerate().fold(0u8, |byte, (i, &c)| byte | ((c & mask) << (i as u32 * bits))))
        .collect()
}

/// The first `count` `bits`-wide codes of packed bytes; `None` when the bytes hold fewer.
pub fn unpack_bits(bytes: &[u8], bits: u32, count: usize) -> Option<Vec<u8>> {
    let per_byte = (8 / bits) as usize;
    if bytes.len() < count.div_ceil(per_byte) {
        return None;
    }
    let mask = (1u8 << bits) - 1;
    Some((0..count).map(|i| (bytes[i / per_byte] >> ((i % per_byte) as u32 * bits)) & mask).collect())
}

/// `v` rounded once to the nearest f16 (ties to even). `half`'s own f64 conversion goes
/// through f32 and rounds twice, which misplaces values just off a tie.
pub fn f16_from_f64(v: f64) -> half::f16 {
    half::f16::from_f32(f32_round_to_odd(v))
}

/// `v` rounded once to the nearest bf16 (ties to even); see [`f16_from_f64`].
pub fn bf16_from_f64(v: f64) -> half::bf16 {
    half::bf16::from_f32(f32_round_to_odd(v))
}

/// The f32 nearest to `v` in round-to-odd: rounding that once more to a type with at least
/// two fewer significand bits (f16, bf16) gives the correctly rounded result, which
/// rounding f64→f32→f16 with round-to-nearest twice would not.
fn f32_round_to_odd(v: f64) -> f32 {
    let r = v as f32;
    if !r.is_finite() || r as f64 == v || r.to_bits() & 1 == 1 {
        return r;
    }
    let bits = r.to_bits();
    // r is inexact and even: the odd neighbour on v's side is the round-to-odd result.
    f32::from_bits(if v.abs() > (r as f64).abs() { bits + 1 } else { bits - 1 })
}

//! Element types as the kernels see them: [`Elem`] for every storable type (with Cast
//! semantics), [`FloatElem`] for the four float types with the type they compute in, and
//! [`IntElem`] for the eight integer types with wrapping arithmetic.

use half::{bf16, f16};
use kiln::{DataType, TensorData};
use kiln_cpu_gemm::{LayoutError, MatrixLayout};
use std::borrow::Cow;
use std::fmt::Debug;
use std::ops::{Add, Div, Mul, Neg, Sub};

/// An element value widened without loss, the pivot of every conversion.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    Float(f64),
    Int(i128),
}

/// Any type a tensor can hold.
pub trait Elem: Copy + Send + Sync + PartialEq + Debug + 'static {
    const DTYPE: DataType;
    fn pack(values: Vec<Self>) -> TensorData;
    fn view(data: &TensorData) -> Option<&[Self]>;
    fn to_scalar(self) -> Scalar;
    /// Cast semantics: float→int truncates toward zero and saturates (NaN→0), int→int
    /// wraps, →bool is `x != 0`, →float rounds to nearest even once.
    fn from_scalar(value: Scalar) -> Self;
    fn zero() -> Self;
}

/// Packs a vector into tensor data of its element type.
pub fn pack<T: Elem>(values: Vec<T>) -> TensorData {
    T::pack(values)
}

/// Converts one element to another type with Cast semantics.
pub fn cast<S: Elem, D: Elem>(x: S) -> D {
    D::from_scalar(x.to_scalar())
}

/// The f32 nearest to `v` in round-to-odd, for integers wider than f64's 53-bit
/// significand (as `kiln::f16_from_f64` does for floats).
fn f32_round_to_odd_int(v: i128) -> f32 {
    let r = v as f32;
    let back = r as i128;
    if back == v || r.to_bits() & 1 == 1 {
        return r;
    }
    let bits = r.to_bits();
    f32::from_bits(if v.unsigned_abs() > back.unsigned_abs() { bits + 1 } else { bits - 1 })
}

macro_rules! float_elem {
    (@widen true, $v:ident) => { Cow::Borrowed($v) };
    (@widen false, $v:ident) => { Cow::Owned($v.iter().map(|x| x.widen()).collect()) };
    (@narrow true, $v:ident) => { $v };
    (@narrow false, $v:ident) => { $v.into_iter().map(Self::narrow).collect() };
    ($t:ty, $variant:ident, $dtype:ident, $acc:ty,
     widen: |$w:ident| $widen:expr, narrow: |$n:ident| $narrow:expr,
     from_f64: |$f:ident| $from_f64:expr, from_int: |$i:ident| $from_int:expr,
     same: $same:tt) => {
        impl Elem for $t {
            const DTYPE: DataType = DataType::$dtype;
            fn pack(values: Vec<Self>) -> TensorData {
                TensorData::$variant(values)
            }
            fn view(data: &TensorData) -> Option<&[Self]> {
                match data {
                    TensorData::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn to_scalar(self) -> Scalar {
                Scalar::Float(FloatElem::to_f64(self))
            }
            fn from_scalar(value: Scalar) -> Self {
                match value {
                    Scalar::Float(v) => <Self as FloatElem>::from_f64(v),
                    Scalar::Int($i) => $from_int,
                }
            }
            fn zero() -> Self {
                <Self as FloatElem>::from_f64(0.0)
            }
        }

        impl FloatElem for $t {
            type Acc = $acc;
            fn widen(self) -> $acc {
                let $w = self;
                $widen
            }
            fn narrow($n: $acc) -> Self {
                $narrow
            }
            fn to_f64(self) -> f64 {
                self.widen() as f64
            }
            fn from_f64($f: f64) -> Self {
                $from_f64
            }
            fn widen_slice(values: &[Self]) -> Cow<'_, [$acc]> {
                float_elem!(@widen $same, values)
            }
            fn narrow_vec(values: Vec<$acc>) -> Vec<Self> {
                float_elem!(@narrow $same, values)
            }
        }
    };
}

float_elem!(f32, F32, F32, f32, widen: |x| x, narrow: |a| a, from_f64: |v| v as f32, from_int: |i| i as f32,
    same: true);
float_elem!(f64, F64, F64, f64, widen: |x| x, narrow: |a| a, from_f64: |v| v, from_int: |i| i as f64,
    same: true);
float_elem!(f16, F16, F16, f32, widen: |x| x.to_f32(), narrow: |a| f16::from_f32(a),
    from_f64: |v| kiln::f16_from_f64(v),
    from_int: |i| f16::from_f32(f32_round_to_odd_int(i)), same: false);
float_elem!(bf16, BF16, BF16, f32, widen: |x| x.to_f32(), narrow: |a| bf16::from_f32(a),
    from_f64: |v| kiln::bf16_from_f64(v),
    from_int: |i| bf16::from_f32(f32_round_to_odd_int(i)), same: false);

/// A float element type and the type its arithmetic runs in (f32 for f32/f16/bf16, f64 for
/// f64): a kernel widens its inputs, computes, and rounds once with [`FloatElem::narrow`].
pub trait FloatElem: Elem {
    type Acc: Real;
    fn widen(self) -> Self::Acc;
    fn narrow(value: Self::Acc) -> Self;
    fn to_f64(self) -> f64;
    /// Rounds to nearest even, once.
    fn from_f64(value: f64) -> Self;
    /// The slice in the compute type, borrowed when it already is one (f32, f64).
    fn widen_slice(values: &[Self]) -> Cow<'_, [Self::Acc]>;
    /// A vector of compute-type values rounded to this type, moved when no rounding is due.
    fn narrow_vec(values: Vec<Self::Acc>) -> Vec<Self>;
}

/// The arithmetic of f32 and f64.
pub trait Real:
    Copy
    + Send
    + Sync
    + Debug
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + 'static
{
    const ZERO: Self;
    const ONE: Self;
    const NAN: Self;
    fn of(value: f64) -> Self;
    fn to_f64(self) -> f64;
    fn exp(self) -> Self;
    fn exp_m1(self) -> Self;
    fn ln(self) -> Self;
    fn ln_1p(self) -> Self;
    fn sqrt(self) -> Self;
    fn powf(self, e: Self) -> Self;
    fn abs(self) -> Self;
    fn floor(self) -> Self;
    fn ceil(self) -> Self;
    fn round_ties_even(self) -> Self;
    fn rem(self, divisor: Self) -> Self;
    fn copysign(self, sign: Self) -> Self;
    fn tanh(self) -> Self;
    fn sin(self) -> Self;
    fn cos(self) -> Self;
    fn tan(self) -> Self;
    fn sinh(self) -> Self;
    fn cosh(self) -> Self;
    fn asin(self) -> Self;
    fn acos(self) -> Self;
    fn atan(self) -> Self;
    fn asinh(self) -> Self;
    fn acosh(self) -> Self;
    fn atanh(self) -> Self;
    fn erf(self) -> Self;
    fn is_nan(self) -> bool;
    fn is_infinite(self) -> bool;
    /// `C ← A·B (+ C)` through matrixmultiply.
    #[allow(clippy::too_many_arguments)]
    fn gemm(
        m: usize,
        k: usize,
        n: usize,
        a: &[Self],
        la: MatrixLayout,
        b: &[Self],
        lb: MatrixLayout,
        c: &mut [Self],
        lc: MatrixLayout,
        accumulate: bool,
    ) -> Result<(), LayoutError>;
}

macro_rules! real {
    ($t:ident, $gemm:path, $erf:path) => {
        impl Real for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const NAN: Self = $t::NAN;
            fn of(value: f64) -> Self {
                value as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn exp(self) -> Self {
                $t::exp(self)
            }
            fn exp_m1(self) -> Self {
                $t::exp_m1(self)
            }
            fn ln(self) -> Self {
                $t::ln(self)
            }
            fn ln_1p(self) -> Self {
                $t::ln_1p(self)
            }
            fn sqrt(self) -> Self {
                $t::sqrt(self)
            }
            fn powf(self, e: Self) -> Self {
                $t::powf(self, e)
            }
            fn abs(self) -> Self {
                $t::abs(self)
            }
            fn floor(self) -> Self {
                $t::floor(self)
            }
            fn ceil(self) -> Self {
                $t::ceil(self)
            }
            fn round_ties_even(self) -> Self {
                $t::round_ties_even(self)
            }
            fn rem(self, divisor: Self) -> Self {
                self % divisor
            }
            fn copysign(self, sign: Self) -> Self {
                $t::copysign(self, sign)
            }
            fn tanh(self) -> Self {
                $t::tanh(self)
            }
            fn sin(self) -> Self {
                $t::sin(self)
            }
            fn cos(self) -> Self {
                $t::cos(self)
            }
            fn tan(self) -> Self {
                $t::tan(self)
            }
            fn sinh(self) -> Self {
                $t::sinh(self)
            }
            fn cosh(self) -> Self {
                $t::cosh(self)
            }
            fn asin(self) -> Self {
                $t::asin(self)
            }
            fn acos(self) -> Self {
                $t::acos(self)
            }
            fn atan(self) -> Self {
                $t::atan(self)
            }
            fn asinh(self) -> Self {
                $t::asinh(self)
            }
            fn acosh(self) -> Self {
                $t::acosh(self)
            }
            fn atanh(self) -> Self {
                $t::atanh(self)
            }
            fn erf(self) -> Self {
                $erf(self)
            }
            fn is_nan(self) -> bool {
                $t::is_nan(self)
            }
            fn is_infinite(self) -> bool {
                $t::is_infinite(self)
            }
            fn gemm(
                m: usize,
                k: usize,
                n: usize,
                a: &[Self],
                la: MatrixLayout,
                b: &[Self],
                lb: MatrixLayout,
                c: &mut [Self],
                lc: MatrixLayout,
                accumulate: bool,
            ) -> Result<(), LayoutError> {
                $gemm(m, k, n, a, la, b, lb, c, lc, accumulate)
            }
        }
    };
}

real!(f32, kiln_cpu_gemm::sgemm, libm::erff);
real!(f64, kiln_cpu_gemm::dgemm, libm::erf);

/// An integer element type with the wrapping arithmetic the kernels use.
pub trait IntElem: Elem + Ord {
    const MIN: Self;
    const MAX: Self;
    const ONE: Self;
    fn wrapping_add(self, o: Self) -> Self;
    fn wrapping_sub(self, o: Self) -> Self;
    fn wrapping_mul(self, o: Self) -> Self;
    fn wrapping_neg(self) -> Self;
    /// `|x|`, wrapping (`|MIN| = MIN`); the identity for unsigned types.
    fn wrapping_abs(self) -> Self;
    /// Division truncating toward zero; `None` for a zero divisor (`MIN / -1` wraps).
    fn div_trunc(self, o: Self) -> Option<Self>;
    /// Remainder with the dividend's sign; `None` for a zero divisor.
    fn rem_trunc(self, o: Self) -> Option<Self>;
    fn bit_and(self, o: Self) -> Self;
    fn bit_or(self, o: Self) -> Self;
    fn bit_xor(self, o: Self) -> Self;
    fn bit_not(self) -> Self;
    /// `self << amount`; 0 when the amount is negative or not below the bit width (numpy).
    fn shift_left(self, amount: Self) -> Self;
    /// `self >> amount` (arithmetic for signed types); an amount that is negative or not
    /// below the bit width shifts every bit out, leaving the sign fill (numpy).
    fn shift_right(self, amount: Self) -> Self;
    fn to_i128(self) -> i128;
    /// The low bits of `v` (two's complement wrap).
    fn wrap_i128(v: i128) -> Self;
    fn to_f64(self) -> f64;
    /// Truncates toward zero and saturates; NaN gives 0.
    fn saturate_f64(v: f64) -> Self;
    fn is_negative(self) -> bool;
}

macro_rules! int_elem {
    ($t:ty, $variant:ident, $dtype:ident) => {
        impl Elem for $t {
            const DTYPE: DataType = DataType::$dtype;
            fn pack(values: Vec<Self>) -> TensorData {
                TensorData::$variant(values)
            }
            fn view(data: &TensorData) -> Option<&[Self]> {
                match data {
                    TensorData::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn to_scalar(self) -> Scalar {
                Scalar::Int(self as i128)
            }
            fn from_scalar(value: Scalar) -> Self {
                match value {
                    Scalar::Float(v) => v as $t,
                    Scalar::Int(i) => i as $t,
                }
            }
            fn zero() -> Self {
                0
            }
        }

        impl IntElem for $t {
            const MIN: Self = <$t>::MIN;
            const MAX: Self = <$t>::MAX;
            const ONE: Self = 1;
            fn wrapping_add(self, o: Self) -> Self {
                <$t>::wrapping_add(self, o)
            }
            fn wrapping_sub(self, o: Self) -> Self {
                <$t>::wrapping_sub(self, o)
            }
            fn wrapping_mul(self, o: Self) -> Self {
                <$t>::wrapping_mul(self, o)
            }
            fn wrapping_neg(self) -> Self {
                <$t>::wrapping_neg(self)
            }
            fn wrapping_abs(self) -> Self {
                if self.is_negative() {
                    <$t>::wrapping_neg(self)
                } else {
                    self
                }
            }
            fn div_trunc(self, o: Self) -> Option<Self> {
                (o != 0).then(|| <$t>::wrapping_div(self, o))
            }
            fn rem_trunc(self, o: Self) -> Option<Self> {
                (o != 0).then(|| <$t>::wrapping_rem(self, o))
            }
            fn bit_and(self, o: Self) -> Self {
                self & o
            }
            fn bit_or(self, o: Self) -> Self {
                self | o
            }
            fn bit_xor(self, o: Self) -> Self {
                self ^ o
            }
            fn bit_not(self) -> Self {
                !self
            }
            fn shift_left(self, amount: Self) -> Self {
                match u32::try_from(amount as i128) {
                    Ok(s) if s < <$t>::BITS => self << s,
                    _ => 0,
                }
            }
            fn shift_right(self, amount: Self) -> Self {
                match u32::try_from(amount as i128) {
                    Ok(s) if s < <$t>::BITS => self >> s,
                    _ => self >> (<$t>::BITS - 1) >> 1,
                }
            }
            fn to_i128(self) -> i128 {
                self as i128
            }
            fn wrap_i128(v: i128) -> Self {
                v as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn saturate_f64(v: f64) -> Self {
                v as $t
            }
            #[allow(unused_comparisons)]
            fn is_negative(self) -> bool {
                self < 0
            }
        }
    };
}

int_elem!(i8, I8, I8);
int_elem!(i16, I16, I16);
int_elem!(i32, I32, I32);
int_elem!(i64, I64, I64);
int_elem!(u8, U8, U8);
int_elem!(u16, U16, U16);
int_elem!(u32, U32, U32);
int_elem!(u64, U64, U64);

impl Elem for bool {
    const DTYPE: DataType = DataType::Bool;
    fn pack(values: Vec<Self>) -> TensorData {
        TensorData::Bool(values)
    }
    fn view(data: &TensorData) -> Option<&[Self]> {
        match data {
            TensorData::Bool(v) => Some(v),
            _ => None,
        }
    }
    fn to_scalar(self) -> Scalar {
        Scalar::Int(self as i128)
    }
    fn from_scalar(value: Scalar) -> Self {
        match value {
            // NaN is not zero: true, as numpy's bool(nan).
            Scalar::Float(v) => v != 0.0,
            Scalar::Int(i) => i != 0,
        }
    }
    fn zero() -> Self {
        false
    }
}

/// Runs `$body` with `$v` bound to the typed vector of float tensor data and gives
/// `Ok(body)`; other types give an error naming `$what`.
macro_rules! float_data {
    ($data:expr, $what:expr, $v:ident => $body:expr) => {
        match $data {
            kiln::TensorData::F32($v) => Ok($body),
            kiln::TensorData::F16($v) => Ok($body),
            kiln::TensorData::BF16($v) => Ok($body),
            kiln::TensorData::F64($v) => Ok($body),
            other => Err(format!("{} is not defined on {}", $what, other.dtype())),
        }
    };
}

/// Like [`float_data!`] with one body for float and one for integer data.
macro_rules! numeric_data {
    ($data:expr, $what:expr, $v:ident => float: $float:expr, int: $int:expr) => {
        match $data {
            kiln::TensorData::F32($v) => Ok($float),
            kiln::TensorData::F16($v) => Ok($float),
            kiln::TensorData::BF16($v) => Ok($float),
            kiln::TensorData::F64($v) => Ok($float),
            kiln::TensorData::I8($v) => Ok($int),
            kiln::TensorData::I16($v) => Ok($int),
            kiln::TensorData::I32($v) => Ok($int),
            kiln::TensorData::I64($v) => Ok($int),
            kiln::TensorData::U8($v) => Ok($int),
            kiln::TensorData::U16($v) => Ok($int),
            kiln::TensorData::U32($v) => Ok($int),
            kiln::TensorData::U64($v) => Ok($int),
            other => Err(format!("{} is not defined on {}", $what, other.dtype())),
        }
    };
}

pub(crate) use {float_data, numeric_data};

//! Binary elementwise ops with numpy broadcasting, Select and ParametricRelu.

use super::typed;
use crate::element::{pack, FloatElem, IntElem, Real};
use crate::layout::{volume, Broadcast};
use kiln::{ElementwiseOp, HostTensor, TensorData};

/// Applies `f` to every pair of broadcast elements of `a` and `b`.
pub fn zip_broadcast<A: Copy, B: Copy, R>(
    a: &[A],
    a_shape: &[usize],
    b: &[B],
    b_shape: &[usize],
    out_shape: &[usize],
    mut f: impl FnMut(A, B) -> Result<R, String>,
) -> Result<Vec<R>, String> {
    let (ia, ib) = (Broadcast::new(a_shape, out_shape)?, Broadcast::new(b_shape, out_shape)?);
    (0..volume(out_shape)).map(|i| f(a[ia.at(i)], b[ib.at(i)])).collect()
}

pub fn elementwise(
    op: ElementwiseOp,
    a: &HostTensor,
    b: &HostTensor,
    out_shape: &[usize],
) -> Result<TensorData, String> {
    macro_rules! run {
        ($kernel:ident, $v:ident) => {
            $kernel(op, $v, a.shape(), typed(b, "input 1")?, b.shape(), out_shape)
        };
    }
    match a.data() {
        TensorData::F32(v) => run!(float_binary, v),
        TensorData::F16(v) => run!(float_binary, v),
        TensorData::BF16(v) => run!(float_binary, v),
        TensorData::F64(v) => run!(float_binary, v),
        TensorData::I8(v) => run!(int_binary, v),
        TensorData::I16(v) => run!(int_binary, v),
        TensorData::I32(v) => run!(int_binary, v),
        TensorData::I64(v) => run!(int_binary, v),
        TensorData::U8(v) => run!(int_binary, v),
        TensorData::U16(v) => run!(int_binary, v),
        TensorData::U32(v) => run!(int_binary, v),
        TensorData::U64(v) => run!(int_binary, v),
        TensorData::Bool(v) => run!(bool_binary, v),
        other => Err(undefined(op, other.dtype())),
    }
}

fn undefined(op: ElementwiseOp, dtype: kiln::DataType) -> String {
    format!("{op:?} is not defined on {dtype}")
}

/// Max/min that propagate NaN (numpy `maximum`/`minimum`).
pub(super) fn nan_max<R: Real>(a: R, b: R) -> R {
    if a.is_nan() || b.is_nan() {
        R::NAN
    } else if b > a {
        b
    } else {
        a
    }
}

pub(super) fn nan_min<R: Real>(a: R, b: R) -> R {
    if a.is_nan() || b.is_nan() {
        R::NAN
    } else if b < a {
        b
    } else {
        a
    }
}

/// Remainder with the divisor's sign (Python `%`): a zero result takes the divisor's sign.
fn float_mod<R: Real>(a: R, b: R) -> R {
    let r = a.rem(b);
    if r == R::ZERO {
        R::ZERO.copysign(b)
    } else if (r < R::ZERO) != (b < R::ZERO) {
        r + b
    } else {
        r
    }
}

fn float_binary<T: FloatElem>(
    op: ElementwiseOp,
    a: &[T],
    sa: &[usize],
    b: &[T],
    sb: &[usize],
    out: &[usize],
) -> Result<TensorData, String> {
    use ElementwiseOp as E;
    let arith = |f: fn(T::Acc, T::Acc) -> T::Acc| -> Result<TensorData, String> {
        zip_broadcast(a, sa, b, sb, out, |x, y| Ok(T::narrow(f(x.widen(), y.widen())))).map(T::pack)
    };
    // Widening is exact, so comparing widened values compares the originals.
    let compare = |f: fn(T::Acc, T::Acc) -> bool| -> Result<TensorData, String> {
        zip_broadcast(a, sa, b, sb, out, |x, y| Ok(f(x.widen(), y.widen()))).map(TensorData::Bool)
    };
    match op {
        E::Sum => arith(|x, y| x + y),
        E::Sub => arith(|x, y| x - y),
        E::Prod => arith(|x, y| x * y),
        E::Div => arith(|x, y| x / y),
        E::FloorDiv => arith(|x, y| (x / y).floor()),
        E::Mod => arith(float_mod),
        E::Fmod => arith(|x, y| x.rem(y)),
        E::Pow => arith(|x, y| x.powf(y)),
        E::Max => arith(nan_max),
        E::Min => arith(nan_min),
        E::Equal => compare(|x, y| x == y),
        E::Greater => compare(|x, y| x > y),
        E::Less => compare(|x, y| x < y),
        E::GreaterOrEqual => compare(|x, y| x >= y),
        E::LessOrEqual => compare(|x, y| x <= y),
        E::And | E::Or | E::Xor | E::BitAnd | E::BitOr | E::BitXor | E::ShiftLeft | E::ShiftRight => {
            Err(undefined(op, T::DTYPE))
        }
    }
}

const DIVISION_BY_ZERO: &str = "integer division by zero";

/// `base ^ exponent` by repeated (wrapping) multiplication; a negative exponent gives
/// `1 / base^|e|` truncated toward zero: 0 unless the base is ±1.
fn int_pow<T: IntElem>(base: T, exponent: T) -> Result<T, String> {
    let e = exponent.to_i128();
    if e < 0 {
        return match base.to_i128() {
            0 => Err(format!("{DIVISION_BY_ZERO} (0 to the power {e})")),
            1 => Ok(T::ONE),
            -1 => Ok(if e % 2 == 0 { T::ONE } else { base }),
            _ => Ok(T::zero()),
        };
    }
    // Square-and-multiply equals repeated multiplication: wrapping products are products
    // modulo 2^bits, which is associative.
    let (mut result, mut square, mut e) = (T::ONE, base, e as u128);
    while e > 0 {
        if e & 1 == 1 {
            result = result.wrapping_mul(square);
        }
        square = square.wrapping_mul(square);
        e >>= 1;
    }
    Ok(result)
}

fn int_binary<T: IntElem>(
    op: ElementwiseOp,
    a: &[T],
    sa: &[usize],
    b: &[T],
    sb: &[usize],
    out: &[usize],
) -> Result<TensorData, String> {
    use ElementwiseOp as E;
    let arith = |f: fn(T, T) -> Result<T, String>| -> Result<TensorData, String> {
        zip_broadcast(a, sa, b, sb, out, f).map(T::pack)
    };
    let compare = |f: fn(T, T) -> bool| -> Result<TensorData, String> {
        zip_broadcast(a, sa, b, sb, out, |x, y| Ok(f(x, y))).map(TensorData::Bool)
    };
    match op {
        E::Sum => arith(|x, y| Ok(x.wrapping_add(y))),
        E::Sub => arith(|x, y| Ok(x.wrapping_sub(y))),
        E::Prod => arith(|x, y| Ok(x.wrapping_mul(y))),
        E::Div => arith(|x, y| x.div_trunc(y).ok_or_else(|| DIVISION_BY_ZERO.to_string())),
        E::FloorDiv => arith(|x, y| {
            let (q, r) = (x.div_trunc(y), x.rem_trunc(y));
            match (q, r) {
                (Some(q), Some(r)) if r != T::zero() && r.is_negative() != y.is_negative() => {
                    Ok(q.wrapping_sub(T::ONE))
                }
                (Some(q), _) => Ok(q),
                _ => Err(DIVISION_BY_ZERO.to_string()),
            }
        }),
        E::Mod => arith(|x, y| match x.rem_trunc(y) {
            Some(r) if r != T::zero() && r.is_negative() != y.is_negative() => Ok(r.wrapping_add(y)),
            Some(r) => Ok(r),
            None => Err(DIVISION_BY_ZERO.to_string()),
        }),
        E::Fmod => arith(|x, y| x.rem_trunc(y).ok_or_else(|| DIVISION_BY_ZERO.to_string())),
        E::Pow => arith(int_pow),
        E::Max => arith(|x, y| Ok(x.max(y))),
        E::Min => arith(|x, y| Ok(x.min(y))),
        E::BitAnd => arith(|x, y| Ok(x.bit_and(y))),
        E::BitOr => arith(|x, y| Ok(x.bit_or(y))),
        E::BitXor => arith(|x, y| Ok(x.bit_xor(y))),
        E::ShiftLeft => arith(|x, y| Ok(x.shift_left(y))),
        E::ShiftRight => arith(|x, y| Ok(x.shift_right(y))),
        E::Equal => compare(|x, y| x == y),
        E::Greater => compare(|x, y| x > y),
        E::Less => compare(|x, y| x < y),
        E::GreaterOrEqual => compare(|x, y| x >= y),
        E::LessOrEqual => compare(|x, y| x <= y),
        E::And | E::Or | E::Xor => Err(undefined(op, T::DTYPE)),
    }
}

fn bool_binary(
    op: ElementwiseOp,
    a: &[bool],
    sa: &[usize],
    b: &[bool],
    sb: &[usize],
    out: &[usize],
) -> Result<TensorData, String> {
    let f: fn(bool, bool) -> bool = match op {
        ElementwiseOp::Equal => |x, y| x == y,
        ElementwiseOp::And => |x, y| x && y,
        ElementwiseOp::Or => |x, y| x || y,
        ElementwiseOp::Xor => |x, y| x != y,
        _ => return Err(undefined(op, kiln::DataType::Bool)),
    };
    zip_broadcast(a, sa, b, sb, out, |x, y| Ok(f(x, y))).map(TensorData::Bool)
}

/// `condition ? a : b`, all three broadcast.
pub fn select(
    condition: &HostTensor,
    a: &HostTensor,
    b: &HostTensor,
    out_shape: &[usize],
) -> Result<TensorData, String> {
    let cond: &[bool] = typed(condition, "the condition")?;
    let ic = Broadcast::new(condition.shape(), out_shape)?;
    let (ia, ib) = (Broadcast::new(a.shape(), out_shape)?, Broadcast::new(b.shape(), out_shape)?);
    kiln::dispatch_data!(a.data(), va => {
        let vb = typed(b, "input 2")?;
        let out: Vec<_> = (0..volume(out_shape))
            .map(|i| if cond[ic.at(i)] { va[ia.at(i)] } else { vb[ib.at(i)] })
            .collect();
        Ok(pack(out))
    }, string _s => return Err(format!("the cpu `{}` kernels do not take string tensors", module_path!().rsplit("::").next().unwrap_or(""))))
}

/// `x < 0 ? x * slope : x` with the slope broadcast to x's shape.
pub fn parametric_relu(x: &HostTensor, slope: &HostTensor) -> Result<TensorData, String> {
    fn run<T: FloatElem>(x: &[T], shape: &[usize], slope: &[T], slope_shape: &[usize]) -> Result<TensorData, String> {
        zip_broadcast(x, shape, slope, slope_shape, shape, |v, s| {
            let v = v.widen();
            Ok(T::narrow(if v < T::Acc::ZERO { v * s.widen() } else { v }))
        })
        .map(T::pack)
    }
    crate::element::float_data!(x.data(), "ParametricRelu", v => {
        run(v, x.shape(), typed(slope, "the slope")?, slope.shape())?
    })
}

//! One-input elementwise layers: Activation and Unary.

use crate::element::{cast, float_data, numeric_data, pack, FloatElem, IntElem, Real};
use kiln::{ActivationKind, HostTensor, TensorData, UnaryOp};

/// Applies `f` in the compute type and rounds once.
fn map_float<T: FloatElem>(x: &[T], f: impl Fn(T::Acc) -> T::Acc) -> TensorData {
    pack(x.iter().map(|&v| T::narrow(f(v.widen()))).collect())
}

fn sigmoid<R: Real>(x: R) -> R {
    R::ONE / (R::ONE + (-x).exp())
}

/// `ln(1 + e^x)` without overflow for large `x`.
fn softplus<R: Real>(x: R) -> R {
    if x > R::ZERO {
        x + (-x).exp().ln_1p()
    } else {
        x.exp().ln_1p()
    }
}

fn activate<R: Real>(kind: &ActivationKind, x: R) -> R {
    use ActivationKind as A;
    let p = |v: f32| R::of(v as f64);
    let half = R::of(0.5);
    match *kind {
        A::Relu => {
            if x < R::ZERO {
                R::ZERO
            } else {
                x
            }
        }
        A::Sigmoid => sigmoid(x),
        A::Tanh => x.tanh(),
        A::LeakyRelu { alpha } => {
            if x < R::ZERO {
                p(alpha) * x
            } else {
                x
            }
        }
        A::Elu { alpha } => {
            if x < R::ZERO {
                p(alpha) * x.exp_m1()
            } else {
                x
            }
        }
        A::Selu { alpha, gamma } => p(gamma) * if x <= R::ZERO { p(alpha) * x.exp_m1() } else { x },
        A::Softsign => x / (R::ONE + x.abs()),
        A::Softplus => softplus(x),
        A::Clip { min, max } => clip(x, p(min), p(max)),
        A::HardSigmoid { alpha, beta } => clip(p(alpha) * x + p(beta), R::ZERO, R::ONE),
        A::HardSwish => x * clip(x / R::of(6.0) + half, R::ZERO, R::ONE),
        A::ScaledTanh { alpha, beta } => p(alpha) * (p(beta) * x).tanh(),
        A::ThresholdedRelu { alpha } => {
            if x > p(alpha) {
                x
            } else {
                R::ZERO
            }
        }
        A::GeluErf => half * x * (R::ONE + (x / R::of(std::f64::consts::SQRT_2)).erf()),
        A::GeluTanh => {
            let inner = R::of((2.0 / std::f64::consts::PI).sqrt()) * (x + R::of(0.044715) * x * x * x);
            half * x * (R::ONE + inner.tanh())
        }
        A::Celu { alpha } => {
            if x > R::ZERO {
                x
            } else {
                p(alpha) * (x / p(alpha)).exp_m1()
            }
        }
        A::Mish => x * softplus(x).tanh(),
        A::Swish => x * sigmoid(x),
    }
}

/// `min(max(x, lo), hi)` keeping NaN.
fn clip<R: Real>(x: R, lo: R, hi: R) -> R {
    let raised = if x < lo { lo } else { x };
    if raised > hi {
        hi
    } else {
        raised
    }
}

pub fn activation(kind: &ActivationKind, x: &HostTensor) -> Result<TensorData, String> {
    numeric_data!(x.data(), format!("{kind:?}"), v =>
        float: map_float(v, |e| activate(kind, e)),
        int: int_activation(kind, v)?)
}

/// Relu and Clip on integers; the clip bounds convert like Cast (truncate, saturate).
fn int_activation<T: IntElem>(kind: &ActivationKind, x: &[T]) -> Result<TensorData, String> {
    let (lo, hi) = match *kind {
        ActivationKind::Relu => (T::zero(), T::MAX),
        ActivationKind::Clip { min, max } => (cast::<f32, T>(min), cast::<f32, T>(max)),
        _ => return Err(format!("{kind:?} is not defined on {}", T::DTYPE)),
    };
    Ok(pack(x.iter().map(|&v| v.max(lo).min(hi)).collect()))
}

pub fn unary(op: UnaryOp, x: &HostTensor) -> Result<TensorData, String> {
    match (op, x.data()) {
        (UnaryOp::Not, TensorData::Bool(v)) => Ok(TensorData::Bool(v.iter().map(|b| !b).collect())),
        (UnaryOp::IsNan | UnaryOp::IsInf { .. }, data) => float_data!(data, format!("{op:?}"), v => classify(op, v)),
        (_, data) => numeric_data!(data, format!("{op:?}"), v => float: float_unary(op, v)?, int: int_unary(op, v)?),
    }
}

fn classify<T: FloatElem>(op: UnaryOp, x: &[T]) -> TensorData {
    let test = |v: T::Acc| match op {
        UnaryOp::IsInf { detect_positive, detect_negative } => {
            v.is_infinite() && if v > T::Acc::ZERO { detect_positive } else { detect_negative }
        }
        _ => v.is_nan(),
    };
    TensorData::Bool(x.iter().map(|&v| test(v.widen())).collect())
}

fn float_unary<T: FloatElem>(op: UnaryOp, x: &[T]) -> Result<TensorData, String> {
    use UnaryOp as U;
    let f: fn(T::Acc) -> T::Acc = match op {
        U::Exp => |v| v.exp(),
        U::Log => |v| v.ln(),
        U::Sqrt => |v| v.sqrt(),
        U::Recip => |v| T::Acc::ONE / v,
        U::Abs => |v| v.abs(),
        U::Neg => |v| -v,
        U::Sin => |v| v.sin(),
        U::Cos => |v| v.cos(),
        U::Tan => |v| v.tan(),
        U::Sinh => |v| v.sinh(),
        U::Cosh => |v| v.cosh(),
        U::Asin => |v| v.asin(),
        U::Acos => |v| v.acos(),
        U::Atan => |v| v.atan(),
        U::Asinh => |v| v.asinh(),
        U::Acosh => |v| v.acosh(),
        U::Atanh => |v| v.atanh(),
        U::Ceil => |v| v.ceil(),
        U::Floor => |v| v.floor(),
        U::Round => |v| v.round_ties_even(),
        U::Erf => |v| v.erf(),
        // NaN stays NaN and ±0 stays ±0 (numpy sign).
        U::Sign => |v| {
            if v > T::Acc::ZERO {
                T::Acc::ONE
            } else if v < T::Acc::ZERO {
                -T::Acc::ONE
            } else {
                v
            }
        },
        U::Not | U::IsNan | U::IsInf { .. } => return Err(format!("{op:?} is not defined on {}", T::DTYPE)),
    };
    Ok(map_float(x, f))
}

fn int_unary<T: IntElem>(op: UnaryOp, x: &[T]) -> Result<TensorData, String> {
    let f: fn(T) -> T = match op {
        UnaryOp::Abs => |v| v.wrapping_abs(),
        UnaryOp::Neg => |v| v.wrapping_neg(),
        UnaryOp::Not => |v| v.bit_not(),
        UnaryOp::Sign => |v| {
            if v.is_negative() {
                T::ONE.wrapping_neg()
            } else if v == T::zero() {
                v
            } else {
                T::ONE
            }
        },
        _ => return Err(format!("{op:?} is not defined on {}", T::DTYPE)),
    };
    Ok(pack(x.iter().map(|&v| f(v)).collect()))
}

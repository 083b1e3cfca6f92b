//! The elements of a small known tensor as host evaluation computes on them: integers (and
//! bools as 0/1) exactly in i64, floats widened to f64.
//!
//! Every float result is rounded once to the output type at the layer's boundary. For the
//! operations listed here (+, −, ×, ÷, √, comparisons, floor/ceil/round, casts) one
//! operation in f64 rounded to f32, f16 or bf16 is the correctly rounded result of that
//! operation in the narrow type (f64 has more than twice their significand bits plus two),
//! so the values equal what the cpu kernels compute. Operations where that does not hold
//! (pow, floor division, remainders of floats) are not evaluated here.

use super::{integer_tensor, MAX_ELEMENTS};
use crate::ir::dtype::DataType;
use crate::ir::layer::{ElementwiseOp, UnaryOp};
use crate::ir::narrow::{bf16_from_f64, f16_from_f64};
use crate::ir::shape::Shape;
use crate::ir::tensor::{HostTensor, TensorData};

/// Integers below this magnitude convert to f64 exactly (and so to any float once).
const EXACT_IN_F64: i64 = 1 << 53;

#[derive(Clone, Debug, PartialEq)]
pub(super) enum Numbers {
    Int(Vec<i64>),
    Float(Vec<f64>),
}

impl Numbers {
    /// The elements of `t` when it is small and of an integer, bool or float type.
    pub(super) fn of(t: &HostTensor) -> Option<Numbers> {
        if t.len() > MAX_ELEMENTS {
            return None;
        }
        if t.dtype().is_float() {
            return Some(Numbers::Float(t.to_f64_vec()));
        }
        super::small_integers(t).map(Numbers::Int)
    }

    pub(super) fn len(&self) -> usize {
        match self {
            Numbers::Int(v) => v.len(),
            Numbers::Float(v) => v.len(),
        }
    }

    /// The elements at `positions` (each in range).
    pub(super) fn pick(&self, positions: &[usize]) -> Option<Numbers> {
        Some(match self {
            Numbers::Int(v) => Numbers::Int(positions.iter().map(|&p| v.get(p).copied()).collect::<Option<_>>()?),
            Numbers::Float(v) => Numbers::Float(positions.iter().map(|&p| v.get(p).copied()).collect::<Option<_>>()?),
        })
    }

    /// The parts one after another (all of one kind).
    pub(super) fn concat(parts: Vec<Numbers>) -> Option<Numbers> {
        let mut parts = parts.into_iter();
        let mut all = parts.next()?;
        for part in parts {
            match (&mut all, part) {
                (Numbers::Int(a), Numbers::Int(b)) => a.extend(b),
                (Numbers::Float(a), Numbers::Float(b)) => a.extend(b),
                _ => return None,
            }
        }
        Some(all)
    }

    /// Converted as Cast does; `None` where the cpu kernel's saturating or wrapping
    /// conversion would differ from an exact one (the backend computes those).
    pub(super) fn cast(self, to: DataType) -> Option<Numbers> {
        match (self, to.is_float()) {
            (Numbers::Int(v), true) => {
                Some(Numbers::Float(v.into_iter().map(|x| (x.abs() <= EXACT_IN_F64).then_some(x as f64)).collect::<Option<_>>()?))
            }
            (Numbers::Float(v), false) if to == DataType::Bool => Some(Numbers::Int(v.into_iter().map(|x| i64::from(x != 0.0)).collect())),
            (Numbers::Float(v), false) => Some(Numbers::Int(v.into_iter().map(truncate).collect::<Option<_>>()?)),
            (same, _) => Some(same),
        }
    }

    /// The tensor of `dtype` and `shape` holding these elements (`None` when they do not
    /// fit the type exactly).
    pub(super) fn into_tensor(self, dtype: DataType, shape: &Shape) -> Option<HostTensor> {
        match self {
            Numbers::Int(v) => integer_tensor(dtype, shape, v),
            Numbers::Float(v) => float_tensor(dtype, shape, v),
        }
    }
}

/// A float truncated toward zero as an i64 (Cast's float→int), when it is finite and in range.
fn truncate(x: f64) -> Option<i64> {
    let t = x.trunc();
    (t.is_finite() && t >= i64::MIN as f64 && t < i64::MAX as f64).then_some(t as i64)
}

/// A float tensor of a fixed shape: each element rounded once to `dtype` (nearest even).
pub(crate) fn float_tensor(dtype: DataType, shape: &Shape, values: Vec<f64>) -> Option<HostTensor> {
    let dims = shape.as_fixed()?;
    let data = match dtype {
        DataType::F64 => TensorData::F64(values),
        DataType::F32 => TensorData::F32(values.into_iter().map(|x| x as f32).collect()),
        DataType::F16 => TensorData::F16(values.into_iter().map(f16_from_f64).collect()),
        DataType::BF16 => TensorData::BF16(values.into_iter().map(bf16_from_f64).collect()),
        _ => return None,
    };
    HostTensor::new(dims, data).ok()
}

/// `a op b` on floats, for the arithmetic ops evaluated exactly (see the module doc).
pub(super) fn float_arithmetic(op: ElementwiseOp, a: f64, b: f64) -> Option<f64> {
    use ElementwiseOp as E;
    Some(match op {
        E::Sum => a + b,
        E::Sub => a - b,
        E::Prod => a * b,
        E::Div => a / b,
        // numpy's maximum / minimum: NaN wins.
        E::Max | E::Min if a.is_nan() || b.is_nan() => f64::NAN,
        E::Max => a.max(b),
        E::Min => a.min(b),
        _ => return None,
    })
}

/// `a op b` for the comparisons (NaN compares unequal and unordered, as IEEE says).
pub(super) fn float_comparison(op: ElementwiseOp, a: f64, b: f64) -> Option<bool> {
    use ElementwiseOp as E;
    Some(match op {
        E::Equal => a == b,
        E::Greater => a > b,
        E::Less => a < b,
        E::GreaterOrEqual => a >= b,
        E::LessOrEqual => a <= b,
        _ => return None,
    })
}

/// The float unary ops evaluated exactly.
pub(super) fn float_unary(op: UnaryOp, x: f64) -> Option<f64> {
    Some(match op {
        UnaryOp::Neg => -x,
        UnaryOp::Abs => x.abs(),
        UnaryOp::Floor => x.floor(),
        UnaryOp::Ceil => x.ceil(),
        UnaryOp::Round => x.round_ties_even(),
        UnaryOp::Sqrt => x.sqrt(),
        _ => return None,
    })
}

/// The integer unary ops (checked: an overflow is left to the backend).
pub(super) fn int_unary(op: UnaryOp, x: i64) -> Option<i64> {
    match op {
        UnaryOp::Neg => x.checked_neg(),
        UnaryOp::Abs => x.checked_abs(),
        UnaryOp::Sign => Some(x.signum()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_results_round_once_to_the_output_type() {
        // 0.1f32 + 0.2f32 in f32 is 0.3f32 rounded from the exact sum: the f64 path agrees.
        let (a, b) = (0.1f32, 0.2f32);
        let sum = float_arithmetic(ElementwiseOp::Sum, a as f64, b as f64).unwrap();
        assert_eq!(sum as f32, a + b);
        let q = float_arithmetic(ElementwiseOp::Div, 1.0, 3.0).unwrap();
        assert_eq!(q as f32, 1.0f32 / 3.0);
        assert_eq!(float_unary(UnaryOp::Round, 2.5), Some(2.0));
        assert!(float_arithmetic(ElementwiseOp::Max, f64::NAN, 1.0).unwrap().is_nan());
        assert_eq!(float_arithmetic(ElementwiseOp::Pow, 2.0, 3.0), None);
    }

    #[test]
    fn casts_that_would_saturate_or_lose_bits_are_not_evaluated() {
        assert_eq!(Numbers::Float(vec![2.9, -2.9]).cast(DataType::I64), Some(Numbers::Int(vec![2, -2])));
        assert_eq!(Numbers::Float(vec![f64::NAN]).cast(DataType::I64), None);
        assert_eq!(Numbers::Float(vec![1e300]).cast(DataType::I32), None);
        assert_eq!(Numbers::Int(vec![(1 << 53) + 1]).cast(DataType::F32), None);
        assert_eq!(Numbers::Float(vec![0.0, f64::NAN]).cast(DataType::Bool), Some(Numbers::Int(vec![0, 1])));
        // An i64 that does not fit i32 makes no i32 tensor.
        assert_eq!(Numbers::Int(vec![1 << 40]).into_tensor(DataType::I32, &Shape::fixed(&[1])), None);
    }
}

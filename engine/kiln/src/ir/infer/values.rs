//! Host evaluation of small integer shape computations (TensorRT's shape tensors).
//!
//! Exporters compute shapes in the graph — `Shape → Gather → Unsqueeze → Concat → Reshape`,
//! `Shape → Slice → Mul`. Inference evaluates these small integer tensors whenever their
//! inputs are known (at import, in the builder's folding and at run time), so reshape dims
//! and the like become static as soon as the shapes they derive from are. Anything else
//! (floats, large tensors, transposes, layers not listed) is left to the backend.

use super::{resolve_slice, Fact};
use crate::ir::dtype::DataType;
use crate::ir::layer::{ElementwiseOp, GatherMode, LayerKind, UnaryOp};
use crate::ir::shape::{Shape, SymInt};
use crate::ir::tensor::{HostTensor, TensorData};

/// Larger tensors are not shapes: leave them to the backend.
pub(crate) const MAX_ELEMENTS: usize = 1024;

/// The value of a single-output layer whose inputs are known small integer tensors, when
/// it is one of the shape-arithmetic kinds; `None` otherwise.
pub(crate) fn fold(
    kind: &LayerKind,
    inputs: &[Option<&HostTensor>],
    out_dtype: DataType,
    out_shape: &Shape,
) -> Option<HostTensor> {
    let out_dims = out_shape.as_fixed()?;
    let out_len = out_shape.volume().filter(|&n| n <= MAX_ELEMENTS)?;
    let ints = |slot: usize| small_integers(inputs.get(slot).copied().flatten()?);
    let small_vectors = || inputs.iter().flatten().all(|t| t.shape().len() <= 1);
    let pick = broadcast_at::<i64>;
    let values: Vec<i64> = match kind {
        LayerKind::Shuffle(p) if is_identity(&p.first_transpose) && is_identity(&p.second_transpose) => ints(0)?,
        LayerKind::Cast { .. } => ints(0)?,
        LayerKind::Concatenation { .. } => {
            let mut all = Vec::new();
            for (slot, t) in inputs.iter().enumerate() {
                if t.is_some_and(|t| t.shape().len() > 1) {
                    return None;
                }
                all.extend(ints(slot)?);
            }
            all
        }
        LayerKind::Gather { mode: GatherMode::Default { axis: 0 } } => {
            if inputs.first().copied().flatten()?.shape().len() != 1 {
                return None;
            }
            gather_1d(&ints(0)?, &ints(1)?)?
        }
        LayerKind::Slice => {
            if inputs.first().copied().flatten()?.shape().len() != 1 {
                return None;
            }
            let optional = |slot: usize| match inputs.get(slot).copied().flatten() {
                None => Some(None),
                Some(_) => ints(slot).map(Some),
            };
            let (axes, steps) = (optional(3)?, optional(4)?);
            slice_1d(&ints(0)?, &ints(1)?, &ints(2)?, axes.as_deref(), steps.as_deref())?
        }
        LayerKind::Unary { op: UnaryOp::Not } if out_dtype == DataType::Bool => {
            ints(0)?.into_iter().map(|v| i64::from(v == 0)).collect()
        }
        LayerKind::Unary { op } => {
            let x = ints(0)?;
            match op {
                UnaryOp::Neg => x.into_iter().map(i64::checked_neg).collect::<Option<Vec<i64>>>()?,
                UnaryOp::Abs => x.into_iter().map(i64::checked_abs).collect::<Option<Vec<i64>>>()?,
                UnaryOp::Sign => x.into_iter().map(i64::signum).collect(),
                _ => return None,
            }
        }
        // ConstantOfShape of a known (small) shape: `Shape → … → ConstantOfShape → Concat`
        // builds reshape dims, e.g. the LayerNormalization function body's reduced shape.
        LayerKind::Fill { value } if value.dtype().is_integer() => vec![value.to_i64_vec()?.first().copied()?; out_len],
        LayerKind::Elementwise { op } => {
            let (a, b) = (ints(0)?, ints(1)?);
            if !small_vectors() || a.is_empty() || b.is_empty() {
                return None;
            }
            (0..out_len).map(|i| elementwise(*op, pick(&a, i)?, pick(&b, i)?)).collect::<Option<Vec<i64>>>()?
        }
        // `Where(Equal(shape, -1), ones, shape)`: how exporters spell `expand(-1, …)`.
        LayerKind::Select => {
            let (c, a, b) = (ints(0)?, ints(1)?, ints(2)?);
            if !small_vectors() || c.is_empty() || a.is_empty() || b.is_empty() {
                return None;
            }
            (0..out_len)
                .map(|i| if pick(&c, i)? != 0 { pick(&a, i) } else { pick(&b, i) })
                .collect::<Option<Vec<i64>>>()?
        }
        _ => return None,
    };
    if values.len() != out_len {
        return None;
    }
    integer_tensor(out_dtype, &Shape::fixed(&out_dims), values)
}

/// The elements of a small integer tensor, and of a bool one as 0/1 (the masks exporters
/// compute beside shapes).
pub(crate) fn small_integers(t: &HostTensor) -> Option<Vec<i64>> {
    if t.len() > MAX_ELEMENTS {
        return None;
    }
    match t.data() {
        TensorData::Bool(v) => Some(v.iter().map(|&b| i64::from(b)).collect()),
        _ if t.dtype().is_integer() => t.to_i64_vec(),
        _ => None,
    }
}

/// An i64, i32 or bool tensor of a fixed shape holding `values` (`None` for other types,
/// values that do not fit, or a count that does not match).
pub(crate) fn integer_tensor(dtype: DataType, shape: &Shape, values: Vec<i64>) -> Option<HostTensor> {
    let dims = shape.as_fixed()?;
    let data = match dtype {
        DataType::I64 => TensorData::I64(values),
        DataType::Bool => TensorData::Bool(values.into_iter().map(|v| v != 0).collect()),
        DataType::I32 => {
            TensorData::I32(values.into_iter().map(|v| i32::try_from(v).ok()).collect::<Option<Vec<i32>>>()?)
        }
        _ => return None,
    };
    HostTensor::new(dims, data).ok()
}

/// The elements of a small integer output whose inputs are partly known shape values
/// ([`SymInt`]): the same kinds as [`fold`], element by element, so that
/// `Shape(x[N,197,768]) → Slice[1:] → Concat([-1], …)` is `[-1, 197, 768]` and a Reshape
/// by it has a known rank and the known dims. `None` when the output is not such a tensor.
pub(crate) fn fold_symbolic(
    kind: &LayerKind,
    inputs: &[Option<Fact>],
    out_dtype: DataType,
    out_shape: &Shape,
) -> Option<Vec<SymInt>> {
    if !(out_dtype.is_integer() || out_dtype == DataType::Bool) || out_shape.rank() > 1 {
        return None;
    }
    let out_len = out_shape.volume().filter(|&n| n <= MAX_ELEMENTS)?;
    let elements = |slot: usize| inputs.get(slot).copied().flatten().and_then(|f| f.elements());
    let numbers = |slot: usize| elements(slot)?.iter().map(SymInt::known).collect::<Option<Vec<i64>>>();
    let values: Vec<SymInt> = match kind {
        LayerKind::Identity => elements(0)?,
        LayerKind::Shuffle(p) if is_identity(&p.first_transpose) && is_identity(&p.second_transpose) => elements(0)?,
        LayerKind::Cast { to } if to.is_integer() => elements(0)?,
        LayerKind::Concatenation { .. } => {
            let mut all = Vec::new();
            for slot in 0..inputs.len() {
                all.extend(elements(slot)?);
            }
            all
        }
        LayerKind::Gather { mode: GatherMode::Default { axis: 0 } } => {
            if inputs.first().copied().flatten()?.shape.rank() != 1 {
                return None;
            }
            gather_1d(&elements(0)?, &numbers(1)?)?
        }
        LayerKind::Slice => {
            if inputs.first().copied().flatten()?.shape.rank() != 1 {
                return None;
            }
            let optional = |slot: usize| match inputs.get(slot).copied().flatten() {
                None => Some(None),
                Some(_) => numbers(slot).map(Some),
            };
            let (axes, steps) = (optional(3)?, optional(4)?);
            slice_1d(&elements(0)?, &numbers(1)?, &numbers(2)?, axes.as_deref(), steps.as_deref())?
        }
        LayerKind::Elementwise { op } => {
            let (a, b) = (elements(0)?, elements(1)?);
            if a.is_empty() || b.is_empty() {
                return None;
            }
            let pick = broadcast_at::<SymInt>;
            (0..out_len).map(|i| Some(symbolic_elementwise(*op, pick(&a, i)?, pick(&b, i)?))).collect::<Option<Vec<SymInt>>>()?
        }
        LayerKind::Select => {
            let (c, a, b) = (elements(0)?, elements(1)?, elements(2)?);
            if c.is_empty() || a.is_empty() || b.is_empty() {
                return None;
            }
            let pick = broadcast_at::<SymInt>;
            (0..out_len)
                .map(|i| match pick(&c, i)? {
                    SymInt::Known(0) => pick(&b, i),
                    SymInt::Known(_) => pick(&a, i),
                    _ => Some(SymInt::Unknown),
                })
                .collect::<Option<Vec<SymInt>>>()?
        }
        _ => return None,
    };
    (values.len() == out_len).then_some(values)
}

/// `a op b` on shape elements: numbers fold; a named dim survives the identities (`N * 1`,
/// `N + 0`, `max(N, N)`); anything else is known only at run time.
fn symbolic_elementwise(op: ElementwiseOp, a: SymInt, b: SymInt) -> SymInt {
    use ElementwiseOp as E;
    use SymInt::{Known, Named};
    match (op, a, b) {
        (op, Known(x), Known(y)) => elementwise(op, x, y).map_or(SymInt::Unknown, Known),
        // A dim is never negative: comparing one with a negative number (`-1` marks a free
        // dim in `expand` and `reshape` arguments) is known.
        (E::Equal, Named(_), Known(k)) | (E::Equal, Known(k), Named(_)) if k < 0 => Known(0),
        (E::Prod | E::Div | E::FloorDiv, n @ Named(_), Known(1)) | (E::Prod, Known(1), n @ Named(_)) => n,
        (E::Sum | E::Sub, n @ Named(_), Known(0)) | (E::Sum, Known(0), n @ Named(_)) => n,
        (E::Max | E::Min, Named(x), Named(y)) if x == y => Named(x),
        _ => SymInt::Unknown,
    }
}

/// Element `i` of an operand of a 1-D elementwise op: a single element stands for all.
fn broadcast_at<T: Clone>(v: &[T], i: usize) -> Option<T> {
    if v.len() == 1 { v.first().cloned() } else { v.get(i).cloned() }
}

/// `data[indices]` of a 1-D list (negative indices count from the end), as ONNX Gather on axis 0.
fn gather_1d<T: Clone>(data: &[T], indices: &[i64]) -> Option<Vec<T>> {
    let n = data.len() as i64;
    indices
        .iter()
        .map(|&i| usize::try_from(if i < 0 { i + n } else { i }).ok().and_then(|i| data.get(i).cloned()))
        .collect()
}

/// A 1-D list sliced as ONNX Slice does.
fn slice_1d<T: Clone>(data: &[T], starts: &[i64], ends: &[i64], axes: Option<&[i64]>, steps: Option<&[i64]>) -> Option<Vec<T>> {
    let plan = resolve_slice(&[data.len()], starts, ends, axes, steps).ok()?;
    let axis = plan.first()?;
    (0..axis.len).map(|k| data.get(usize::try_from(axis.start + k as i64 * axis.step).ok()?).cloned()).collect()
}

fn is_identity(perm: &[usize]) -> bool {
    perm.iter().enumerate().all(|(i, &p)| i == p)
}

fn elementwise(op: ElementwiseOp, a: i64, b: i64) -> Option<i64> {
    use ElementwiseOp as E;
    match op {
        E::Sum => a.checked_add(b),
        E::Sub => a.checked_sub(b),
        E::Prod => a.checked_mul(b),
        // Integer Div truncates toward zero (ONNX, C).
        E::Div => a.checked_div(b),
        E::FloorDiv => {
            let q = a.checked_div(b)?;
            Some(if (a % b != 0) && ((a < 0) != (b < 0)) { q - 1 } else { q })
        }
        E::Max => Some(a.max(b)),
        E::Min => Some(a.min(b)),
        E::Equal => Some(i64::from(a == b)),
        E::Greater => Some(i64::from(a > b)),
        E::Less => Some(i64::from(a < b)),
        E::GreaterOrEqual => Some(i64::from(a >= b)),
        E::LessOrEqual => Some(i64::from(a <= b)),
        E::And => Some(i64::from(a != 0 && b != 0)),
        E::Or => Some(i64::from(a != 0 || b != 0)),
        E::Xor => Some(i64::from((a != 0) != (b != 0))),
        // The sign of the divisor (Python's %, ONNX Mod fmod=0).
        E::Mod => a.checked_rem_euclid(b).map(|r| if r != 0 && b < 0 { r + b } else { r }),
        E::Fmod => a.checked_rem(b),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn i64s(dims: &[usize], v: &[i64]) -> HostTensor {
        HostTensor::from_i64(dims.to_vec(), v.to_vec()).unwrap()
    }

    #[test]
    fn shape_arithmetic_folds() {
        let shape = i64s(&[3], &[2, 16, 64]);
        let idx = i64s(&[], &[-2]);
        let g = fold(
            &LayerKind::Gather { mode: GatherMode::Default { axis: 0 } },
            &[Some(&shape), Some(&idx)],
            DataType::I64,
            &Shape::fixed(&[]),
        );
        assert_eq!(g, Some(i64s(&[], &[16])));
        let four = i64s(&[1], &[4]);
        let q = fold(
            &LayerKind::Elementwise { op: ElementwiseOp::Div },
            &[Some(&shape), Some(&four)],
            DataType::I64,
            &Shape::fixed(&[3]),
        );
        assert_eq!(q, Some(i64s(&[3], &[0, 4, 16])));
        let c = fold(
            &LayerKind::Concatenation { axis: 0 },
            &[Some(&four), Some(&shape)],
            DataType::I64,
            &Shape::fixed(&[4]),
        );
        assert_eq!(c, Some(i64s(&[4], &[4, 2, 16, 64])));
        let (start, end) = (i64s(&[1], &[1]), i64s(&[1], &[i64::MAX]));
        let s = fold(
            &LayerKind::Slice,
            &[Some(&shape), Some(&start), Some(&end), None, None],
            DataType::I64,
            &Shape::fixed(&[2]),
        );
        assert_eq!(s, Some(i64s(&[2], &[16, 64])));
        let zero = i64s(&[1], &[0]);
        let d = fold(
            &LayerKind::Elementwise { op: ElementwiseOp::Div },
            &[Some(&shape), Some(&zero)],
            DataType::I64,
            &Shape::fixed(&[3]),
        );
        assert_eq!(d, None, "division by zero is left to the backend");
        let floats = HostTensor::from_f32(vec![1], vec![1.0]).unwrap();
        assert_eq!(
            fold(&LayerKind::Cast { to: DataType::I64 }, &[Some(&floats)], DataType::I64, &Shape::fixed(&[1])),
            None
        );
    }
}

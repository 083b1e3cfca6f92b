//! Host evaluation of small integer shape computations (TensorRT's shape tensors).
//!
//! Exporters compute shapes in the graph — `Shape → Gather → Unsqueeze → Concat → Reshape`,
//! `Shape → Slice → Mul`. Inference evaluates these small integer tensors whenever their
//! inputs are known (at import, in the builder's folding and at run time), so reshape dims
//! and the like become static as soon as the shapes they derive from are. Anything else
//! (floats, large tensors, transposes, layers not listed) is left to the backend.

use crate::ir::dtype::DataType;
use super::resolve_slice;
use crate::ir::layer::{ElementwiseOp, GatherMode, LayerKind, UnaryOp};
use crate::ir::shape::Shape;
use crate::ir::tensor::{HostTensor, TensorData};

/// Larger tensors are not shapes: leave them to the backend.
const MAX_ELEMENTS: usize = 1024;

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
    let ints = |slot: usize| -> Option<Vec<i64>> {
        let t = inputs.get(slot).copied().flatten()?;
        (t.dtype().is_integer() && t.len() <= MAX_ELEMENTS).then(|| t.to_i64_vec()).flatten()
    };
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
            let data = ints(0)?;
            if inputs.first().copied().flatten()?.shape().len() != 1 {
                return None;
            }
            let n = data.len() as i64;
            ints(1)?
                .into_iter()
                .map(|i| {
                    let i = if i < 0 { i + n } else { i };
                    usize::try_from(i).ok().and_then(|i| data.get(i).copied())
                })
                .collect::<Option<Vec<i64>>>()?
        }
        LayerKind::Slice => {
            let x = inputs.first().copied().flatten()?;
            if x.shape().len() != 1 {
                return None;
            }
            let data = ints(0)?;
            let (axes, steps) =
                (inputs.get(3).copied().flatten().map(|_| ints(3)), inputs.get(4).copied().flatten().map(|_| ints(4)));
            let axes = axes.map_or(Some(None), |a| a.map(Some))?;
            let steps = steps.map_or(Some(None), |s| s.map(Some))?;
            let plan = resolve_slice(x.shape(), &ints(1)?, &ints(2)?, axes.as_deref(), steps.as_deref()).ok()?;
            let axis = plan.first()?;
            (0..axis.len)
                .map(|k| data.get(usize::try_from(axis.start + k as i64 * axis.step).ok()?).copied())
                .collect::<Option<Vec<i64>>>()?
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
            let shapes_ok = inputs.iter().flatten().all(|t| t.shape().len() <= 1);
            if !shapes_ok || a.is_empty() || b.is_empty() {
                return None;
            }
            let pick = |v: &[i64], i: usize| if v.len() == 1 { Some(v[0]) } else { v.get(i).copied() };
            (0..out_len).map(|i| elementwise(*op, pick(&a, i)?, pick(&b, i)?)).collect::<Option<Vec<i64>>>()?
        }
        _ => return None,
    };
    if values.len() != out_len {
        return None;
    }
    let data = match out_dtype {
        DataType::I64 => TensorData::I64(values),
        DataType::I32 => {
            TensorData::I32(values.into_iter().map(|v| i32::try_from(v).ok()).collect::<Option<Vec<i32>>>()?)
        }
        _ => return None,
    };
    HostTensor::new(out_dims, data).ok()
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

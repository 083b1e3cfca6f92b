//! The small integer arithmetic of shape computations, evaluated by kiln itself so that
//! `Shape → Gather → Unsqueeze → Concat → Reshape` chains (PyTorch exports) become static
//! without a backend. Only i32/i64 tensors of rank ≤ 1 (reshapes: any rank) are handled;
//! everything else is left to the folding backend.

use crate::ir::dtype::DataType;
use crate::ir::infer::OutFact;
use crate::ir::layer::{ElementwiseOp, GatherMode, LayerKind};
use crate::ir::shape::normalize_axis;
use crate::ir::tensor::{HostTensor, TensorData};

/// Largest tensor evaluated here: shape tensors are tiny.
const MAX_ELEMENTS: usize = 64;

/// The outputs of `kind` on known `inputs`, when kiln can compute them itself.
pub(crate) fn evaluate(
    kind: &LayerKind,
    inputs: &[&HostTensor],
    outs: &[OutFact],
) -> Option<HostTensor> {
    let [out] = outs else { return None };
    let out_shape = out.shape.as_fixed()?;
    if !matches!(out.dtype, DataType::I32 | DataType::I64)
        || out_shape.iter().product::<usize>() > MAX_ELEMENTS
    {
        return None;
    }
    let ints: Vec<Vec<i64>> = inputs
        .iter()
        .map(|t| {
            (t.len() <= MAX_ELEMENTS && t.dtype().is_integer())
                .then(|| t.to_i64_vec())
                .flatten()
        })
        .collect::<Option<_>>()?;
    let values = match kind {
        LayerKind::Cast { .. } | LayerKind::Identity => ints.first()?.clone(),
        LayerKind::Shuffle(p) if p.first_transpose.is_empty() && p.second_transpose.is_empty() => {
            ints.first()?.clone()
        }
        LayerKind::Concatenation { axis: 0 } if inputs.iter().all(|t| t.shape().len() == 1) => {
            ints.concat()
        }
        LayerKind::Gather {
            mode: GatherMode::Default { axis: 0 },
        } if inputs.first()?.shape().len() == 1 => {
            let data = &ints[0];
            ints.get(1)?
                .iter()
                .map(|&i| normalize_axis(i, data.len()).map(|i| data[i]))
                .collect::<Option<Vec<i64>>>()?
        }
        LayerKind::Elementwise { op } if inputs.iter().all(|t| t.shape().len() <= 1) => {
            let (a, b) = (ints.first()?, ints.get(1)?);
            let n = a.len().max(b.len());
            if a.len() != n && a.len() != 1 || b.len() != n && b.len() != 1 {
                return None;
            }
            let at = |v: &Vec<i64>, i: usize| if v.len() == 1 { v[0] } else { v[i] };
            (0..n)
                .map(|i| int_binary(*op, at(a, i), at(b, i)))
                .collect::<Option<Vec<i64>>>()?
        }
        _ => return None,
    };
    if values.len() != out_shape.iter().product::<usize>() {
        return None;
    }
    let data = match out.dtype {
        DataType::I32 => TensorData::I32(
            values
                .into_iter()
                .map(i32::try_from)
                .collect::<Result<_, _>>()
                .ok()?,
        ),
        _ => TensorData::I64(values),
    };
    HostTensor::new(out_shape, data).ok()
}

/// Integer arithmetic as the cpu backend defines it; `None` (no folding) where it would
/// fail at run time, so the run-time error is kept.
fn int_binary(op: ElementwiseOp, a: i64, b: i64) -> Option<i64> {
    use ElementwiseOp as E;
    match op {
        E::Sum => Some(a.wrapping_add(b)),
        E::Sub => Some(a.wrapping_sub(b)),
        E::Prod => Some(a.wrapping_mul(b)),
        E::Div if b != 0 => a.checked_div(b),
        E::FloorDiv if b != 0 => {
            Some(a.checked_div(b)? - i64::from((a % b != 0) && ((a < 0) != (b < 0))))
        }
        E::Max => Some(a.max(b)),
        E::Min => Some(a.min(b)),
        _ => None,
    }
}

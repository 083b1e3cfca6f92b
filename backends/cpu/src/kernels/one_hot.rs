//! OneHot: a gather of `[off, on]`, so every value type is copied exactly.

use super::{indexing, int_scalar, int_values, tensor};
use kiln::{GatherMode, HostTensor, TensorData};

/// `[indices, values, depth] -> [y]`: `on` where the (wrapped) index equals the position
/// along `axis`, `off` elsewhere and for indices outside `[-depth, depth)`.
pub fn one_hot(
    indices: &HostTensor,
    values: &HostTensor,
    depth: &HostTensor,
    axis: i64,
    out_shape: &[usize],
) -> Result<TensorData, String> {
    let idx = int_values(indices, "OneHot indices")?;
    let depth = int_scalar(depth, "OneHot depth")?;
    if values.len() != 2 {
        return Err(format!("OneHot values must hold [off, on], got {} elements", values.len()));
    }
    let rank = out_shape.len();
    let axis = kiln::ir::shape::normalize_axis(axis, rank)
        .ok_or_else(|| format!("OneHot axis {axis} is out of range for an output of rank {rank}"))?;
    if out_shape[..axis].iter().chain(&out_shape[axis + 1..]).ne(indices.shape().iter()) {
        return Err(format!("OneHot output shape {out_shape:?} does not fit indices {:?}", indices.shape()));
    }
    let outer: usize = out_shape[..axis].iter().product();
    let inner: usize = out_shape[axis + 1..].iter().product();
    let depth_len = out_shape[axis];
    let mut pick = Vec::with_capacity(outer * depth_len * inner);
    for o in 0..outer {
        for d in 0..depth_len as i64 {
            for i in 0..inner {
                let raw = idx[o * inner + i];
                let wrapped = if raw < 0 { raw + depth } else { raw };
                pick.push(i64::from(wrapped == d));
            }
        }
    }
    let pick = tensor(out_shape.to_vec(), TensorData::I64(pick))?;
    let flat_values = values.clone().reshaped(vec![2]).map_err(|e| e.to_string())?;
    indexing::gather(GatherMode::Default { axis: 0 }, &flat_values, &pick, out_shape)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(shape: Vec<usize>, v: Vec<f32>) -> HostTensor {
        HostTensor::new(shape, TensorData::F32(v)).unwrap()
    }

    #[test]
    fn one_hot_wraps_negative_and_drops_out_of_range() {
        let idx = HostTensor::new(vec![3], TensorData::I64(vec![0, -1, 5])).unwrap();
        let values = f32s(vec![2], vec![0.0, 9.0]);
        let depth = HostTensor::new(vec![], TensorData::I64(vec![3])).unwrap();
        let y = one_hot(&idx, &values, &depth, -1, &[3, 3]).unwrap();
        assert_eq!(y, TensorData::F32(vec![9.0, 0.0, 0.0, 0.0, 0.0, 9.0, 0.0, 0.0, 0.0]));
        let y = one_hot(&idx, &values, &depth, 0, &[3, 3]).unwrap();
        assert_eq!(y, TensorData::F32(vec![9.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 9.0, 0.0]));
        assert!(one_hot(&idx, &values, &depth, 2, &[3, 3]).is_err());
    }
}

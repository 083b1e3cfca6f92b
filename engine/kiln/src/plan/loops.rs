//! Loop values on the host, for any element type: an Iterator's slice of a tensor and the
//! stacked CONCATENATE / REVERSE output of a loop (the cpu backend's, and a device
//! backend's for values it keeps on the host).

use crate::ir::dtype::DataType;
use crate::ir::tensor::{HostTensor, TensorData};
use std::sync::Arc;

/// The sub-tensor at `index` along `axis`, the axis removed.
pub fn slice_along(x: &HostTensor, axis: usize, index: usize) -> Result<HostTensor, String> {
    let shape = x.shape();
    let len = *shape.get(axis).ok_or_else(|| format!("axis {axis} is out of range for rank {}", shape.len()))?;
    if index >= len {
        return Err(format!("slice {index} is beyond the {len} slices along axis {axis}"));
    }
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let picks: Vec<usize> = (0..outer).flat_map(|o| (0..inner).map(move |j| (o * len + index) * inner + j)).collect();
    let mut out_shape = shape.to_vec();
    out_shape.remove(axis);
    HostTensor::new(out_shape, x.data().gather(&picks)).map_err(|e| e.to_string())
}

/// `parts` stacked along a new axis `axis` of `length` (at least `parts.len()`), the last
/// part first when `reverse`; the positions past the parts hold zeros. Every part is `dtype`
/// with dims `slice_shape`.
pub fn stack_along(
    parts: &[Arc<HostTensor>],
    axis: usize,
    length: usize,
    reverse: bool,
    dtype: DataType,
    slice_shape: &[usize],
) -> Result<HostTensor, String> {
    if axis > slice_shape.len() {
        return Err(format!("axis {axis} is out of range for stacking rank-{} values", slice_shape.len()));
    }
    if parts.len() > length {
        return Err(format!("{} parts do not fit a stack of length {length}", parts.len()));
    }
    if let Some(odd) = parts.iter().find(|p| p.shape() != slice_shape || p.dtype() != dtype) {
        return Err(format!(
            "the stacked value changes between iterations: {dtype}{slice_shape:?} then {}{:?}",
            odd.dtype(),
            odd.shape()
        ));
    }
    let (outer, inner) = (slice_shape[..axis].iter().product::<usize>(), slice_shape[axis..].iter().product::<usize>());
    let zero = TensorData::zeros(dtype, 1);
    let mut pool: Vec<&TensorData> = vec![&zero];
    pool.extend(parts.iter().map(|p| p.data()));
    let pool = TensorData::concat(&pool).ok_or("the stacked parts differ in type")?;
    let n = parts.len();
    // Element 0 of the pool is the zero; part k starts at 1 + k·(outer·inner).
    let picks: Vec<usize> = (0..outer)
        .flat_map(|o| {
            (0..length).flat_map(move |t| {
                let part = (t < n).then(|| if reverse { n - 1 - t } else { t });
                (0..inner).map(move |j| part.map_or(0, |k| 1 + k * outer * inner + o * inner + j))
            })
        })
        .collect();
    let mut shape = slice_shape.to_vec();
    shape.insert(axis, length);
    HostTensor::new(shape, pool.gather(&picks)).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(shape: &[usize], v: Vec<i32>) -> HostTensor {
        HostTensor::new(shape.to_vec(), TensorData::I32(v)).unwrap()
    }

    #[test]
    fn slices_take_one_index_along_the_axis() {
        let x = t(&[2, 3], vec![0, 1, 2, 3, 4, 5]);
        assert_eq!(slice_along(&x, 1, 2).unwrap(), t(&[2], vec![2, 5]));
        assert_eq!(slice_along(&x, 0, 1).unwrap(), t(&[3], vec![3, 4, 5]));
        assert!(slice_along(&x, 1, 3).unwrap_err().contains("beyond"));
    }

    #[test]
    fn stacks_place_parts_reversed_and_pad_with_zeros() {
        let parts = [Arc::new(t(&[2], vec![1, 2])), Arc::new(t(&[2], vec![3, 4]))];
        assert_eq!(stack_along(&parts, 0, 3, false, DataType::I32, &[2]).unwrap(), t(&[3, 2], vec![1, 2, 3, 4, 0, 0]));
        assert_eq!(stack_along(&parts, 1, 2, true, DataType::I32, &[2]).unwrap(), t(&[2, 2], vec![3, 1, 4, 2]));
        assert!(stack_along(&parts, 0, 2, false, DataType::F32, &[2]).is_err());
    }
}

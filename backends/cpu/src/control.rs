//! Loop values on the cpu: an Iterator's slice and a loop output's stack, typed per
//! element (the plan itself is walked by `kiln::runtime::interp`).

use crate::element::{pack, Elem};
use kiln::{dispatch_data, DataType, HostTensor};
use std::sync::Arc;

/// The sub-tensor at `index` along `axis` (the axis removed).
pub(crate) fn slice_along(x: &HostTensor, axis: usize, index: usize) -> Result<HostTensor, String> {
    let shape = x.shape();
    let outer: usize = shape[..axis].iter().product();
    let len = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let mut out_shape = shape.to_vec();
    out_shape.remove(axis);
    let data = dispatch_data!(x.data(), v => {
        let mut out = Vec::with_capacity(outer * inner);
        for o in 0..outer {
            let start = (o * len + index) * inner;
            out.extend_from_slice(&v[start..start + inner]);
        }
        pack(out)
    }, string _s => return Err(format!("the cpu `{}` kernels do not take string tensors", module_path!().rsplit("::").next().unwrap_or(""))));
    HostTensor::new(out_shape, data).map_err(|e| e.to_string())
}

/// Stacks `parts` along a new axis `axis` of length `length` (at least `parts.len()`),
/// last part first when `reverse`; the positions past the parts hold zeros.
pub(crate) fn stack_along(
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
    if let Some(odd) = parts.iter().find(|p| p.shape() != slice_shape || p.dtype() != dtype) {
        return Err(format!(
            "the stacked value changes between iterations: {}{:?} then {}{:?}",
            dtype,
            slice_shape,
            odd.dtype(),
            odd.shape()
        ));
    }
    let outer: usize = slice_shape[..axis].iter().product();
    let inner: usize = slice_shape[axis..].iter().product();
    let mut shape = slice_shape.to_vec();
    shape.insert(axis, length);
    let mut out = HostTensor::zeros(dtype, shape.clone()).into_data();
    let n = parts.len();
    dispatch_data!(&mut out, v => place_parts(v, parts, outer, inner, length, reverse, n), string _s => return Err(format!("the cpu `{}` kernels do not take string tensors", module_path!().rsplit("::").next().unwrap_or(""))))?;
    HostTensor::new(shape, out).map_err(|e| e.to_string())
}

fn place_parts<T: Elem>(
    dst: &mut [T],
    parts: &[Arc<HostTensor>],
    outer: usize,
    inner: usize,
    length: usize,
    reverse: bool,
    n: usize,
) -> Result<(), String> {
    for (j, part) in parts.iter().enumerate() {
        let src = T::view(part.data()).ok_or_else(|| format!("a stacked value is {}, not {}", part.dtype(), T::DTYPE))?;
        let at = if reverse { n - 1 - j } else { j };
        for o in 0..outer {
            let start = (o * length + at) * inner;
            dst[start..start + inner].copy_from_slice(&src[o * inner..(o + 1) * inner]);
        }
    }
    Ok(())
}

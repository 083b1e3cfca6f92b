//! TopK and running sums / products along one axis (`kernels/scan.cu`).

use kiln::{invalid, DataType, KernelError};
use crate::ops::KResult;
use super::indexing::typed_suffix;
use super::Ctx;
use crate::buffer::{Arg, DeviceTensor};
use crate::sources::Source;

/// `(outer, len, inner)`: `shape` viewed around `axis`.
fn lanes(shape: &[usize], axis: usize) -> KResult<(usize, usize, usize)> {
    let len = *shape.get(axis).ok_or_else(|| invalid!("axis {axis} is out of range for rank {}", shape.len()))?;
    Ok((shape[..axis].iter().product(), len, shape[axis + 1..].iter().product()))
}

/// The `k` largest (or smallest) elements along `axis` and their indices (i64), sorted, ties
/// to the lower index; `k` is the output's length on `axis`.
pub fn top_k(
    cx: &Ctx,
    x: &DeviceTensor,
    axis: usize,
    largest: bool,
    out_shape: &[usize],
) -> KResult<(DeviceTensor, DeviceTensor)> {
    if typed_suffix(x.dtype)? == "bool" {
        return Err("TopK on bool has no CUDA kernel".into());
    }
    let (outer, len, inner) = lanes(&x.shape, axis)?;
    let k = *out_shape.get(axis).ok_or("TopK's output has no such axis")?;
    if k > len {
        return Err(invalid!("k = {k} exceeds the axis length {len}"));
    }
    let values = cx.gpu.empty(x.dtype, out_shape.to_vec()).map_err(KernelError::from)?;
    let indices = cx.gpu.empty(DataType::I64, out_shape.to_vec()).map_err(KernelError::from)?;
    let args = [
        Arg::I64(outer as i64),
        Arg::I64(len as i64),
        Arg::I64(inner as i64),
        Arg::I64(k as i64),
        Arg::I32(largest as i32),
        cx.arg(x),
        cx.arg(&values),
        cx.arg(&indices),
    ];
    cx.launch_elements(Source::Scan.kernel(format!("topk_{}", typed_suffix(x.dtype)?)), x.len(), &args)?;
    Ok((values, indices))
}

/// Running sums (or products) along `axis` (negative counts from the end).
pub fn cumulative(
    cx: &Ctx,
    x: &DeviceTensor,
    axis: i64,
    exclusive: bool,
    reverse: bool,
    product: bool,
) -> KResult<DeviceTensor> {
    let rank = x.shape.len() as i64;
    let wrapped = if axis < 0 { axis + rank } else { axis };
    let axis = usize::try_from(wrapped)
        .ok()
        .filter(|&a| (a as i64) < rank)
        .ok_or_else(|| invalid!("axis {axis} is out of range for rank {rank}"))?;
    let suffix = typed_suffix(x.dtype)?;
    if suffix == "bool" {
        return Err("running sums of bool have no CUDA kernel".into());
    }
    let (outer, len, inner) = lanes(&x.shape, axis)?;
    let out = cx.gpu.empty(x.dtype, x.shape.clone()).map_err(KernelError::from)?;
    let args = [
        Arg::I64(outer as i64),
        Arg::I64(len as i64),
        Arg::I64(inner as i64),
        Arg::I32(exclusive as i32),
        Arg::I32(reverse as i32),
        Arg::I32(product as i32),
        cx.arg(x),
        cx.arg(&out),
    ];
    cx.launch_elements(Source::Scan.kernel(format!("cumulative_{suffix}")), outer * inner, &args)?;
    Ok(out)
}

//! LRN on the device (`kernels/lrn.cu`), as kiln-cpu's `norm::lrn`.

use super::{Ctx, KResult};
use crate::buffer::{Arg, DeviceTensor};
use kiln::KernelError;
use crate::sources::Source;

/// LRN across the channels (axis 1) with a window of `size`.
pub fn lrn(cx: &Ctx, x: &DeviceTensor, size: usize, alpha: f32, beta: f32, k: f32) -> KResult<DeviceTensor> {
    let suffix = super::float64_suffix(x.dtype, "LRN")?;
    if x.shape.len() < 2 || size == 0 {
        return Err("LRN needs a channel axis 1 and a window of at least 1".into());
    }
    let out = cx.gpu.empty(x.dtype, x.shape.clone()).map_err(KernelError::from)?;
    let n = out.len();
    if n == 0 {
        return Ok(out);
    }
    let (before, after) = ((size - 1) / 2, (size - 1).div_ceil(2));
    let inner: usize = x.shape[2..].iter().product();
    let bits = |v: f32| Arg::I64((v as f64).to_bits() as i64);
    let args = [
        Arg::I64(n as i64),
        Arg::I64(x.shape[1] as i64),
        Arg::I64(inner as i64),
        Arg::I64(before as i64),
        Arg::I64(after as i64),
        Arg::I64(size as i64),
        bits(alpha),
        bits(beta),
        bits(k),
        cx.arg(x),
        cx.arg(&out),
    ];
    cx.launch_elements(Source::Lrn.kernel(format!("lrn_{suffix}")), n, &args)?;
    Ok(out)
}

//! Channels-last (NHWC) values: cuDNN's tensor-core convolutions and pooling read and write
//! them, so a chain convolution → convolution → pooling stays NHWC; any other reader gets the
//! value converted back by [`super::Ctx::dev`] (TensorRT's reformat layers, placed lazily).

use kiln::{invalid, DataType};
use crate::ops::KResult;
use super::{movement, Ctx};
use crate::buffer::DeviceTensor;
use std::sync::OnceLock;

/// Set to `1` to keep every convolution channels-first (NCHW), for A/B timing.
pub const NCHW_ENV: &str = "KILN_CUDA_NCHW";

/// Whether a cuDNN convolution of `dtype` on rank-`rank` tensors runs channels-last: the 16-bit
/// types on 2-D images, where cuDNN's tensor-core kernels want NHWC.
pub fn prefers_channels_last(dtype: DataType, rank: usize) -> bool {
    static NCHW: OnceLock<bool> = OnceLock::new();
    let forced_nchw = *NCHW.get_or_init(|| std::env::var(NCHW_ENV).as_deref() == Ok("1"));
    !forced_nchw && rank == 4 && matches!(dtype, DataType::F16 | DataType::BF16)
}

/// The same values stored NHWC (a no-op for a tensor already so).
pub fn to_channels_last(cx: &Ctx, t: &DeviceTensor) -> KResult<DeviceTensor> {
    if t.channels_last() {
        return Ok(t.clone());
    }
    let r = t.shape.len();
    if r < 3 {
        return Err(invalid!("a rank-{r} tensor has no channels to move last"));
    }
    let moved = movement::transpose(cx, t, &DeviceTensor::channels_last_order(r))?;
    Ok(DeviceTensor { strides: Some(DeviceTensor::channels_last_strides(&t.shape)), ..moved.reshaped(t.shape.clone()) })
}

/// The same values packed row-major (a no-op for a tensor already so): one strided copy.
pub fn to_row_major(cx: &Ctx, t: &DeviceTensor) -> KResult<DeviceTensor> {
    match &t.strides {
        None => Ok(t.clone()),
        // A view whose strides are the packed row-major ones (attention's keys read as the rows
        // they are stored as) is already row-major: no copy.
        Some(strides) if row_major_strides(&t.shape, strides) => Ok(DeviceTensor { strides: None, ..t.clone() }),
        Some(strides) => movement::gather_strided(cx, t, &t.shape, strides, 0),
    }
}

/// Whether `strides` are `shape`'s packed row-major strides (a size-1 axis's never matters).
pub fn row_major_strides(shape: &[usize], strides: &[i64]) -> bool {
    let packed = super::contiguous_strides(shape);
    shape.iter().zip(strides.iter().zip(&packed)).all(|(&n, (s, p))| n == 1 || s == p)
}

/// `t` in the layout asked for: channels-last or row-major.
pub fn in_layout(cx: &Ctx, t: &DeviceTensor, channels_last: bool) -> KResult<DeviceTensor> {
    if channels_last {
        to_channels_last(cx, t)
    } else {
        to_row_major(cx, t)
    }
}

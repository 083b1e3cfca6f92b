//! LRN: a window over the channel axis (floats).

use super::{count_word, output, KResult};
use crate::shaders::Instance;
use crate::value::{DeviceTensor, Recorder};
use crate::wgsl::Storage;

/// ONNX LRN over the channel axis 1 (floats).
pub fn lrn(rec: &Recorder, x: &DeviceTensor, window: usize, alpha: f32, beta: f32, k: f32) -> KResult<DeviceTensor> {
    if Storage::of(x.dtype) != Some(Storage::F32) {
        return Err(kiln::invalid!("the WGSL LRN kernel computes floats only, not {}", x.dtype));
    }
    if x.shape.len() < 2 || window == 0 {
        return Err("LRN needs a channel axis 1 and a window of at least 1".into());
    }
    let out = output(rec, x.dtype, &x.shape)?;
    let inner: usize = x.shape[2..].iter().product();
    let (before, after) = ((window - 1) / 2, (window - 1).div_ceil(2));
    let params = [
        count_word(x.len())?,
        count_word(x.shape[1])?,
        count_word(inner.max(1))?,
        count_word(before)?,
        count_word(after)?,
        count_word(window)?,
        alpha.to_bits(),
        beta.to_bits(),
        k.to_bits(),
    ];
    rec.dispatch_1d(&Instance::plain("lrn"), &params, &[&x.buffer, &out.buffer], x.len()).map_err(kiln::KernelError::from)?;
    super::pointwise::narrow(rec, out)
}

/// Every instantiation of this module's kernels, for naga validation.
pub fn instantiations() -> Vec<Instance> {
    vec![Instance::plain("lrn")]
}

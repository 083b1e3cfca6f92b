//! Kernels that walk one axis per lane: CumulativeSum / CumulativeProduct (a sequential
//! scan per lane, exclusive / reverse) and LRN (a window over the channel axis).

use super::sort::typed_instance;
use super::{count_word, output, KResult};
use crate::ops::Storage;
use crate::shaders::Instance;
use crate::value::{DeviceTensor, Recorder};
use kiln::DataType;

/// The running-sum (`product: false`) or running-product kernel on `s` (integers wrap,
/// as on the cpu backend).
pub fn cumulative_instance(s: Storage, product: bool) -> Instance {
    let (identity, op, name) = if product { ("A(1)", "a * b", "prod") } else { ("A(0)", "a + b", "sum") };
    let prelude = format!(
        "alias A = {};\nfn identity() -> A {{ return {identity}; }}\nfn combine(a: A, b: A) -> A {{ return {op}; }}\n",
        s.wgsl()
    );
    typed_instance("cumulative", format!("cumulative/{name}/{}", s.wgsl()), prelude)
}

pub fn cumulative(
    rec: &Recorder,
    x: &DeviceTensor,
    axis: usize,
    product: bool,
    exclusive: bool,
    reverse: bool,
) -> KResult<DeviceTensor> {
    let storage = Storage::of(x.dtype).ok_or_else(|| kiln::invalid!("unsupported dtype {} for a running sum", x.dtype))?;
    if x.dtype == DataType::Bool {
        return Err("running sums and products are not defined on bool".into());
    }
    let len = *x.shape.get(axis).ok_or_else(|| kiln::invalid!("axis {axis} is out of range for {:?}", x.shape))?;
    let inner: usize = x.shape[axis + 1..].iter().product();
    let lanes = x.len().checked_div(len).unwrap_or(0);
    let out = output(rec, x.dtype, &x.shape)?;
    let params =
        [count_word(lanes)?, count_word(len)?, count_word(inner.max(1))?, u32::from(exclusive), u32::from(reverse)];
    rec.dispatch_1d(&cumulative_instance(storage, product), &params, &[&x.buffer, &out.buffer], lanes)
        .map_err(kiln::KernelError::from)?;
    super::pointwise::narrow(rec, out)
}

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
    let mut all: Vec<Instance> =
        Storage::ALL.into_iter().flat_map(|s| [cumulative_instance(s, false), cumulative_instance(s, true)]).collect();
    all.push(Instance::plain("lrn"));
    all
}

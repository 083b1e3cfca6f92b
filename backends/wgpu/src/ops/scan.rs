//! Kernels that walk one axis per lane: CumulativeSum / CumulativeProduct (a sequential
//! scan per lane, exclusive / reverse).

use super::sort::typed_instance;
use super::{count_word, output, KResult};
use crate::wgsl::Storage;
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

/// Every instantiation of this module's kernels, for naga validation.
pub fn instantiations() -> Vec<Instance> {
    Storage::ALL.into_iter().flat_map(|s| [cumulative_instance(s, false), cumulative_instance(s, true)]).collect()
}

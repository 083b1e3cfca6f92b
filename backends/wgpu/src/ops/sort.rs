//! TopK (ArgMax / ArgMin and Hardmax lower to it): selection by rank on the device, ties
//! broken by the lower index exactly as the cpu backend's stable sort.

use super::{count_word, output, KResult};
use crate::wgsl::Storage;
use crate::shaders::{Instance, BODIES};
use crate::value::{DeviceTensor, Recorder};
use kiln::DataType;

/// A kernel of `body` instantiated with `prelude` (aliases and op functions), cached by `key`.
pub(crate) fn typed_instance(body: &'static str, key: String, prelude: String) -> Instance {
    let body = BODIES.iter().find(|(n, _)| *n == body).map(|(_, b)| *b).unwrap_or("");
    Instance { key, body, prelude }
}

/// The TopK kernel ranking by largest (or smallest) value on `s`. NaN ranks above every
/// number (numpy's order, as the cpu backend).
pub fn top_k_instance(s: Storage, largest: bool) -> Instance {
    let before = match (s, largest) {
        (Storage::F32, true) => "(k_nan(a) && !k_nan(b)) || a > b",
        (Storage::F32, false) => "(!k_nan(a) && k_nan(b)) || a < b",
        (_, true) => "a > b",
        (_, false) => "a < b",
    };
    let prelude = format!(
        "alias A = {};\nfn k_nan(x: f32) -> bool {{ return (bitcast<u32>(x) & 0x7fffffffu) > F32_INF; }}\n\
         fn before(a: A, b: A) -> bool {{ return {before}; }}\n",
        s.wgsl()
    );
    let order = if largest { "largest" } else { "smallest" };
    typed_instance("topk", format!("topk/{order}/{}", s.wgsl()), prelude)
}

/// The `k` largest (or smallest) elements of `x` along `axis`, sorted, and their indices
/// (i64, stored as i32 words); `k` is the output's length along `axis`.
pub fn top_k(
    rec: &Recorder,
    x: &DeviceTensor,
    axis: usize,
    largest: bool,
    out_shape: &[usize],
) -> KResult<Vec<DeviceTensor>> {
    let storage = Storage::of(x.dtype).ok_or_else(|| kiln::invalid!("unsupported dtype {} for TopK", x.dtype))?;
    let len = *x.shape.get(axis).ok_or_else(|| kiln::invalid!("TopK axis {axis} is out of range for {:?}", x.shape))?;
    let k = *out_shape.get(axis).ok_or("TopK output rank differs from the input's")?;
    if k > len {
        return Err(kiln::invalid!("k = {k} exceeds the axis length {len}"));
    }
    let values = output(rec, x.dtype, out_shape)?;
    let indices = output(rec, DataType::I64, out_shape)?;
    let inner: usize = x.shape[axis + 1..].iter().product();
    let params = [count_word(x.len())?, count_word(len)?, count_word(inner.max(1))?, count_word(k)?];
    rec.dispatch_1d(&top_k_instance(storage, largest), &params, &[&x.buffer, &values.buffer, &indices.buffer], x.len())
        .map_err(kiln::KernelError::from)?;
    Ok(vec![values, indices])
}

/// Every TopK instantiation, for naga validation.
pub fn instantiations() -> Vec<Instance> {
    Storage::ALL.into_iter().flat_map(|s| [top_k_instance(s, true), top_k_instance(s, false)]).collect()
}

//! Kernel launchers: each turns a layer's device inputs and inferred output shape into
//! parameter words and dispatches of the WGSL kernels in `/shaders`.

pub mod half;
pub mod layout;
pub mod linalg;
pub mod lrn;
pub mod pointwise;
pub mod quant;
pub mod reduce;
pub mod einsum;
pub mod indexing;
pub mod scan;
pub mod scatter;
pub mod sort;
pub mod resize;
pub mod roi;
pub mod sampling;
pub mod signal;

use crate::value::{DeviceTensor, Recorder};

/// The largest rank the strided kernels index (their params hold 8 dims).
pub const MAX_RANK: usize = 8;

pub use crate::device::KResult;

/// Row-major strides of `shape`, in elements.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Strides reading `from` (numpy-broadcast, right-aligned) at the coordinates of `to`:
/// 0 along broadcast dims ([`kiln::ir::broadcast::strides`]).
pub fn broadcast_strides(from: &[usize], to: &[usize]) -> KResult<Vec<usize>> {
    Ok(kiln::ir::broadcast::strides(from, to)?)
}

/// `v` as 8 words (zero-padded); fails beyond [`MAX_RANK`].
pub fn words8(v: &[usize]) -> KResult<[u32; 8]> {
    if v.len() > MAX_RANK {
        return Err(kiln::invalid!("rank {} exceeds the {MAX_RANK} dims the wgpu kernels index", v.len()));
    }
    let mut out = [0u32; 8];
    for (o, &x) in out.iter_mut().zip(v) {
        *o = u32::try_from(x).map_err(|_| kiln::invalid!("dimension or stride {x} exceeds 32 bits"))?;
    }
    Ok(out)
}

/// `v` (signed) as 8 words of i32 bits.
pub fn iwords8(v: &[i64]) -> KResult<[u32; 8]> {
    if v.len() > MAX_RANK {
        return Err(kiln::invalid!("rank {} exceeds the {MAX_RANK} dims the wgpu kernels index", v.len()));
    }
    let mut out = [0u32; 8];
    for (o, &x) in out.iter_mut().zip(v) {
        *o = i32::try_from(x).map_err(|_| kiln::invalid!("stride {x} exceeds 32 bits"))? as u32;
    }
    Ok(out)
}

pub fn count_word(n: usize) -> KResult<u32> {
    u32::try_from(n).map_err(|_| kiln::invalid!("{n} elements exceed the 2^32 a kernel indexes"))
}

/// The output tensor of a kernel, with a readable error.
pub fn output(rec: &Recorder, dtype: kiln::DataType, shape: &[usize]) -> KResult<DeviceTensor> {
    rec.alloc(dtype, shape).map_err(kiln::KernelError::from)
}

/// Every kernel the backend can compile (the generic instantiations and each launcher's
/// own), for validation.
pub fn all_instantiations() -> Vec<crate::shaders::Instance> {
    let mut all = crate::shaders::generic_instantiations();
    all.extend(sort::instantiations());
    all.extend(scan::instantiations());
    all.extend(lrn::instantiations());
    all.extend(scatter::instantiations());
    all.extend(indexing::instantiations());
    all.extend(einsum::instantiations());
    all
}

//! Reductions over any axes, softmax, and (RMS) normalization: one invocation per output
//! element / statistics group walks the reduced elements.

use super::half::widen;
use super::{broadcast_strides, count_word, output, strides, words8, KResult};
use crate::wgsl::Storage;
use crate::shaders::Instance;
use crate::value::{DeviceTensor, Recorder};
use kiln::plan::norm::NormView;
use kiln::{DataType, ReduceOp};

/// The kept and reduced views of `shape` over `reduced` axes: the kept shape has 1 at
/// reduced axes, the reduced shape has 1 at kept ones.
fn split(shape: &[usize], reduced: &[bool]) -> (Vec<usize>, Vec<usize>) {
    let kept = shape.iter().zip(reduced).map(|(&d, &r)| if r { 1 } else { d }).collect();
    let red = shape.iter().zip(reduced).map(|(&d, &r)| if r { d } else { 1 }).collect();
    (kept, red)
}

pub fn reduce(
    rec: &Recorder,
    op: ReduceOp,
    x: &DeviceTensor,
    axes: &[usize],
    shape: &[usize],
    dtype: DataType,
) -> KResult<DeviceTensor> {
    let storage = Storage::of(x.dtype).ok_or_else(|| kiln::invalid!("unsupported dtype {}", x.dtype))?;
    let kernel =
        Instance::reduce(op, storage).ok_or_else(|| kiln::invalid!("no WGSL kernel for Reduce {op:?} on {}", x.dtype))?;
    let rank = x.shape.len();
    let mut reduced = vec![false; rank];
    for &a in axes {
        *reduced.get_mut(a).ok_or_else(|| kiln::invalid!("reduce axis {a} is out of range for rank {rank}"))? = true;
    }
    let (kept, red) = split(&x.shape, &reduced);
    let out = output(rec, dtype, shape)?;
    let count: usize = kept.iter().product();
    if count != out.len() {
        return Err(kiln::invalid!(
            "reducing {:?} over {axes:?} gives {count} elements, the inferred output {shape:?}",
            x.shape
        ));
    }
    let mut params = vec![count_word(count)?, rank as u32, count_word(red.iter().product())?];
    params.extend(words8(&kept)?);
    params.extend(words8(&red)?);
    params.extend(words8(&strides(&x.shape))?);
    rec.dispatch_1d(&kernel, &params, &[&x.buffer, &out.buffer], count).map_err(kiln::KernelError::from)?;
    super::pointwise::narrow(rec, out)
}

pub fn softmax(rec: &Recorder, x: &DeviceTensor, axis: usize) -> KResult<DeviceTensor> {
    if axis >= x.shape.len() {
        return Err(kiln::invalid!("softmax axis {axis} is out of range for {:?}", x.shape));
    }
    let halves = x.packing == crate::value::Packing::Half;
    let out = match halves {
        true => rec.alloc_halves(&x.shape).map_err(kiln::KernelError::from)?,
        false => output(rec, x.dtype, &x.shape)?,
    };
    let len = x.shape[axis];
    let inner: usize = x.shape[axis + 1..].iter().product();
    let rows = x.len().checked_div(len).unwrap_or(0);
    let params = [count_word(rows)?, count_word(len)?, count_word(inner.max(1))?];
    rec.dispatch_1d(&Instance::softmax(halves), &params, &[&x.buffer, &out.buffer], rows)
        .map_err(kiln::KernelError::from)?;
    super::pointwise::narrow(rec, out)
}

/// Normalization (`bias: Some`) or RMS normalization (`bias: None`) over `axes`, with
/// `num_groups > 1` splitting the channel axis 1 into groups.
pub fn normalization(
    rec: &Recorder,
    x: &DeviceTensor,
    scale: &DeviceTensor,
    bias: Option<&DeviceTensor>,
    axes: &[usize],
    epsilon: f32,
    num_groups: usize,
) -> KResult<DeviceTensor> {
    let shape = &x.shape;
    let rank = shape.len();
    let (sc, bs) = (
        broadcast_strides(&scale.shape, shape)?,
        match bias {
            Some(b) => broadcast_strides(&b.shape, shape)?,
            None => vec![0; rank],
        },
    );
    // The grouped view is a pure reshape, so its strides follow from the original ones.
    let norm = NormView::new(shape, axes, num_groups)?;
    let (xs, sc, bs) = (norm.strides(&strides(shape)), norm.strides(&sc), norm.strides(&bs));
    let (kept, red) = split(&norm.view, &norm.reduced);
    let groups: usize = kept.iter().product();
    let half = |t: &DeviceTensor| t.packing == crate::value::Packing::Half;
    let halves = half(x) && half(scale) && bias.is_none_or(half);
    let (x, scale, bias) = match halves {
        true => (x.clone(), scale.clone(), bias.cloned()),
        // Words (f16 storage off, or f32): widening is a no-op for them.
        false => (widen(rec, x)?, widen(rec, scale)?, bias.map(|b| widen(rec, b)).transpose()?),
    };
    let out = match halves {
        true => rec.alloc_halves(shape).map_err(kiln::KernelError::from)?,
        false => output(rec, x.dtype, shape)?,
    };
    let mut params = vec![count_word(groups)?, norm.view.len() as u32, count_word(red.iter().product())?];
    for v in [&kept, &red, &xs, &sc, &bs] {
        params.extend(words8(v)?);
    }
    params.push(epsilon.to_bits());
    params.push(u32::from(bias.is_none()));
    let bias_buffer = bias.as_ref().map_or(&scale.buffer, |b| &b.buffer);
    rec.dispatch_1d(&Instance::norm(halves), &params, &[&x.buffer, &scale.buffer, bias_buffer, &out.buffer], groups)
        .map_err(kiln::KernelError::from)?;
    super::pointwise::narrow(rec, out)
}

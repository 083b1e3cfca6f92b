//! Data-movement kernels, all through one strided copy of 32-bit words: transpose
//! (Shuffle), Slice, Expand, Concatenation, constant Padding; and Gather.

use super::{broadcast_strides, count_word, iwords8, output, strides, words8, KResult};
use crate::shaders::Instance;
use crate::value::{DeviceTensor, Recorder};
use kiln::ir::infer::SliceAxis;
use kiln::DataType;

/// One strided copy: for each coordinate `c` of `shape`,
/// `dst[dst_off + c·dst_strides] = src[src_off + c·src_strides]`.
#[derive(Debug)]
pub struct Copy<'a> {
    pub shape: &'a [usize],
    pub src_off: i64,
    pub src_strides: &'a [i64],
    pub dst_off: i64,
    pub dst_strides: &'a [i64],
}

pub fn copy(rec: &Recorder, src: &DeviceTensor, dst: &DeviceTensor, c: &Copy<'_>) -> KResult<()> {
    let n: usize = c.shape.iter().product();
    let off = |v: i64| i32::try_from(v).map(|v| v as u32).map_err(|_| kiln::invalid!("offset {v} exceeds 32 bits"));
    let mut params = vec![count_word(n)?, c.shape.len() as u32, off(c.src_off)?, off(c.dst_off)?];
    params.extend(words8(c.shape)?);
    params.extend(iwords8(c.src_strides)?);
    params.extend(iwords8(c.dst_strides)?);
    rec.dispatch_1d(&Instance::plain("copy"), &params, &[&src.buffer, &dst.buffer], n).map_err(kiln::KernelError::from)
}

fn signed(v: &[usize]) -> Vec<i64> {
    v.iter().map(|&x| x as i64).collect()
}

/// `x` read through `src_strides` (from `src_off`) into a new contiguous tensor of `shape`.
pub fn gather_view(
    rec: &Recorder,
    x: &DeviceTensor,
    shape: &[usize],
    src_off: i64,
    src_strides: &[i64],
) -> KResult<DeviceTensor> {
    let out = output(rec, x.dtype, shape)?;
    let dst_strides = signed(&strides(shape));
    copy(rec, x, &out, &Copy { shape, src_off, src_strides, dst_off: 0, dst_strides: &dst_strides })?;
    Ok(out)
}

/// `out[c] = x[c permuted]`: out dim i is x dim `perm[i]`.
pub fn transpose(rec: &Recorder, x: &DeviceTensor, perm: &[usize]) -> KResult<DeviceTensor> {
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        return Ok(x.clone());
    }
    let st = strides(&x.shape);
    let shape: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
    let src: Vec<i64> = perm.iter().map(|&p| st[p] as i64).collect();
    gather_view(rec, x, &shape, 0, &src)
}

pub fn slice(rec: &Recorder, x: &DeviceTensor, plan: &[SliceAxis]) -> KResult<DeviceTensor> {
    let st = strides(&x.shape);
    let shape: Vec<usize> = plan.iter().map(|a| a.len).collect();
    let src_off: i64 = plan.iter().zip(&st).map(|(a, &s)| a.start * s as i64).sum();
    let src: Vec<i64> = plan.iter().zip(&st).map(|(a, &s)| a.step * s as i64).collect();
    gather_view(rec, x, &shape, src_off, &src)
}

/// Numpy broadcast of `x` to `shape`.
pub fn expand(rec: &Recorder, x: &DeviceTensor, shape: &[usize]) -> KResult<DeviceTensor> {
    if x.shape == shape {
        return Ok(x.clone());
    }
    let src = signed(&broadcast_strides(&x.shape, shape)?);
    gather_view(rec, x, shape, 0, &src)
}

pub fn concatenation(
    rec: &Recorder,
    parts: &[DeviceTensor],
    axis: usize,
    shape: &[usize],
    dtype: DataType,
) -> KResult<DeviceTensor> {
    let out = output(rec, dtype, shape)?;
    let dst_strides = signed(&strides(shape));
    let mut at = 0usize;
    for p in parts {
        let src_strides = signed(&strides(&p.shape));
        let dst_off = at as i64 * dst_strides.get(axis).copied().unwrap_or(0);
        copy(
            rec,
            p,
            &out,
            &Copy { shape: &p.shape, src_off: 0, src_strides: &src_strides, dst_off, dst_strides: &dst_strides },
        )?;
        at += p.shape.get(axis).copied().unwrap_or(0);
    }
    Ok(out)
}

/// Constant padding: `pads` holds the begins then the ends (negative values crop).
pub fn pad_constant(
    rec: &Recorder,
    x: &DeviceTensor,
    pads: &[i64],
    word: u32,
    shape: &[usize],
) -> KResult<DeviceTensor> {
    let rank = x.shape.len();
    if pads.len() != 2 * rank {
        return Err(kiln::invalid!("{} pads for rank {rank}", pads.len()));
    }
    let out = super::pointwise::fill(rec, x.dtype, shape, word)?;
    let (src_st, dst_st) = (strides(&x.shape), strides(shape));
    let mut copy_shape = Vec::with_capacity(rank);
    let (mut src_off, mut dst_off) = (0i64, 0i64);
    for d in 0..rank {
        let begin = pads[d];
        // The input cells that land inside the output along this axis.
        let first = (-begin).max(0);
        let last = (x.shape[d] as i64).min(shape[d] as i64 - begin);
        copy_shape.push((last - first).max(0) as usize);
        src_off += first * src_st[d] as i64;
        dst_off += (first + begin) * dst_st[d] as i64;
    }
    let (src, dst) = (signed(&src_st), signed(&dst_st));
    copy(rec, x, &out, &Copy { shape: &copy_shape, src_off, src_strides: &src, dst_off, dst_strides: &dst })?;
    Ok(out)
}

/// ONNX Gather along `axis`; `indices` are i32 words.
pub fn gather(
    rec: &Recorder,
    data: &DeviceTensor,
    indices: &DeviceTensor,
    axis: usize,
    shape: &[usize],
) -> KResult<DeviceTensor> {
    let out = output(rec, data.dtype, shape)?;
    let inner: usize = data.shape[axis + 1..].iter().product();
    let params = [
        count_word(out.len())?,
        count_word(inner.max(1))?,
        count_word(data.shape[axis])?,
        count_word(indices.len().max(1))?,
    ];
    rec.dispatch_1d(&Instance::plain("gather"), &params, &[&data.buffer, &indices.buffer, &out.buffer], out.len())
        .map_err(kiln::KernelError::from)?;
    Ok(out)
}

/// ONNX GatherElements along `axis`.
pub fn gather_elements(
    rec: &Recorder,
    data: &DeviceTensor,
    indices: &DeviceTensor,
    axis: usize,
) -> KResult<DeviceTensor> {
    let out = output(rec, data.dtype, &indices.shape)?;
    let mut params =
        vec![count_word(out.len())?, indices.shape.len() as u32, axis as u32, count_word(data.shape[axis])?];
    params.extend(words8(&indices.shape)?);
    params.extend(words8(&strides(&data.shape))?);
    rec.dispatch_1d(
        &Instance::plain("gather_elements"),
        &params,
        &[&data.buffer, &indices.buffer, &out.buffer],
        out.len(),
    )
    .map_err(kiln::KernelError::from)?;
    Ok(out)
}

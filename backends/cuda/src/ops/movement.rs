//! Data movement: transposes and reshapes (Shuffle), Slice, Expand, Concatenation, Gather and
//! nearest Resize, all through the strided-copy, gather and resize kernels.

use kiln::{invalid, HostTensor, KernelError, ShuffleParams};
use crate::ops::KResult;
use super::{contiguous_strides, Ctx};
use kiln::plan::strides::reshaped as reshaped_strides;
use crate::buffer::{width_suffix, Arg, DeviceTensor, Layout};
use kiln::ir::infer::resolve_slice;
use std::sync::Arc;
use crate::sources::Source;

/// Copies `x` read through `(strides, offset)` (elements) over `shape` into a new contiguous tensor.
pub fn gather_strided(cx: &Ctx, x: &DeviceTensor, shape: &[usize], strides: &[i64], offset: i64) -> KResult<DeviceTensor> {
    let out = cx.gpu.empty(x.dtype, shape.to_vec()).map_err(KernelError::from)?;
    copy_into(cx, x, shape, strides, offset, &out, &contiguous_strides(shape), 0)?;
    Ok(out)
}

/// `out[out_offset + Σ i·out_strides] = x[in_offset + Σ i·in_strides]` over `shape`.
#[allow(clippy::too_many_arguments)]
pub fn copy_into(
    cx: &Ctx,
    x: &DeviceTensor,
    shape: &[usize],
    in_strides: &[i64],
    in_offset: i64,
    out: &DeviceTensor,
    out_strides: &[i64],
    out_offset: i64,
) -> KResult<()> {
    if shape.len() > 8 {
        return Err(invalid!("rank {} is over the CUDA kernels' limit of 8", shape.len()));
    }
    let mut l = Layout { rank: shape.len() as i32, ..Layout::default() };
    for (d, &n) in shape.iter().enumerate() {
        l.shape[d] = n as i64;
        l.stride[0][d] = in_strides[d];
        l.stride[1][d] = out_strides[d];
    }
    l.offset = [in_offset, out_offset, 0];
    let l = super::coalesce(l, 2);
    let (src, dst) = (cx.arg(x), cx.arg(out));
    if let Some((batch, tiles, args)) = tiled_transpose(&l) {
        let name = format!("transpose_tiled_{}", width_suffix(x.dtype).map_err(KernelError::from)?);
        let blocks = (batch * tiles).clamp(1, 65_535 * 8) as u32;
        let mut args = args.to_vec();
        args.extend([src, dst]);
        return cx.gpu.launch(&Source::Copy.kernel(name), blocks, 256, &args).map_err(KernelError::from);
    }
    let element = crate::buffer::storage_size(x.dtype).map_err(KernelError::from)?;
    let addresses = [cx.gpu.ptr(&x.buf), cx.gpu.ptr(&out.buf)];
    // Copy in the widest unit (up to 16 bytes) the layout and both addresses allow: one thread's
    // index arithmetic then moves up to 8 halves instead of one.
    let (l, width) = [16usize, 8, 4]
        .into_iter()
        .filter(|&w| w > element && addresses.iter().all(|a| a % w as u64 == 0))
        .find_map(|w| widened(&l, (w / element) as i64).map(|wide| (wide, w)))
        .unwrap_or((l, element));
    let n: usize = (0..l.rank as usize).map(|d| l.shape[d] as usize).product();
    let name = format!("strided_copy_{}", crate::buffer::unit_suffix(width));
    cx.launch_elements(Source::Copy.kernel(name), n, &[Arg::I64(n as i64), Arg::Layout(l), src, dst])
}

/// A true transpose (the input's contiguous dim is not the output's, both at least 16 long):
/// `(batch, tiles per batch item, kernel arguments before the two pointers)` of
/// `transpose_tiled_*`, or `None` for copies the strided kernel moves well.
fn tiled_transpose(l: &Layout) -> Option<(usize, usize, [Arg; 6])> {
    let rank = l.rank as usize;
    let a = (0..rank).find(|&d| l.stride[1][d] == 1)?;
    let b = (0..rank).find(|&d| l.stride[0][d] == 1)?;
    let (len_a, len_b) = (l.shape[a], l.shape[b]);
    if a == b || len_a < 16 || len_b < 16 || len_a > i32::MAX as i64 || len_b > i32::MAX as i64 {
        return None;
    }
    let mut batch = Layout { offset: l.offset, ..Layout::default() };
    for d in (0..rank).filter(|&d| d != a && d != b) {
        let at = batch.rank as usize;
        batch.shape[at] = l.shape[d];
        batch.stride[0][at] = l.stride[0][d];
        batch.stride[1][at] = l.stride[1][d];
        batch.rank += 1;
    }
    let items: i64 = (0..batch.rank as usize).map(|d| batch.shape[d]).product();
    let tiles = (len_a as usize).div_ceil(32) * (len_b as usize).div_ceil(32);
    let args = [Arg::I64(items), Arg::Layout(batch), Arg::I32(len_a as i32), Arg::I32(len_b as i32), Arg::I64(l.stride[0][a]), Arg::I64(l.stride[1][b])];
    Some((items as usize, tiles, args))
}

/// `l` (two operands) in units of `k` elements, where the innermost dim is contiguous in both
/// operands and every other stride, both offsets and the innermost length are multiples of `k`.
fn widened(l: &Layout, k: i64) -> Option<Layout> {
    let inner = (l.rank as usize).checked_sub(1)?;
    let contiguous = l.stride[0][inner] == 1 && l.stride[1][inner] == 1 && l.shape[inner] % k == 0;
    let multiples = (0..inner).all(|d| l.stride[0][d] % k == 0 && l.stride[1][d] % k == 0) && l.offset[..2].iter().all(|o| o % k == 0);
    if !contiguous || !multiples {
        return None;
    }
    let mut wide = *l;
    wide.shape[inner] /= k;
    for d in 0..inner {
        wide.stride[0][d] /= k;
        wide.stride[1][d] /= k;
    }
    wide.offset[0] /= k;
    wide.offset[1] /= k;
    Some(wide)
}

/// Permutes `x`'s axes (`out dim i` = `in dim perm[i]`) into packed row-major bytes: one copy
/// from wherever `x` (maybe a view) keeps them, none when only size-1 axes move.
pub fn transpose(cx: &Ctx, x: &DeviceTensor, perm: &[usize]) -> KResult<DeviceTensor> {
    super::layout::to_row_major(cx, &permuted(x, perm)?)
}

/// `x` with its axes permuted (`out dim i` = `in dim perm[i]`) and no bytes moved: a view
/// (none left when the strides come out packed row-major).
pub fn permuted(x: &DeviceTensor, perm: &[usize]) -> KResult<DeviceTensor> {
    let (shape, strides) = permuted_strides(&x.shape, &x.element_strides(), perm)?;
    Ok(DeviceTensor { buf: x.buf.clone(), dtype: x.dtype, strides: view_strides(&shape, strides), shape })
}

/// The shape and strides after permuting the axes by `perm` ([`kiln::plan::strides::permuted`]).
fn permuted_strides(shape: &[usize], strides: &[i64], perm: &[usize]) -> KResult<(Vec<usize>, Vec<i64>)> {
    kiln::plan::strides::permuted(shape, strides, perm).map_err(|e| invalid!("{e}"))
}

/// `strides` as a view's: `None` where they are `shape`'s packed row-major strides (size-1 axes'
/// strides never matter).
fn view_strides(shape: &[usize], strides: Vec<i64>) -> Option<Vec<i64>> {
    (!super::layout::row_major_strides(shape, &strides)).then_some(strides)
}

/// `x` (packed or a view) read under `shape`: a view where the strides allow, otherwise packed
/// row-major first.
fn reshape(cx: &Ctx, x: DeviceTensor, shape: &[usize]) -> KResult<DeviceTensor> {
    let Some(strides) = &x.strides else { return Ok(x.reshaped(shape.to_vec())) };
    if x.shape == shape {
        return Ok(x);
    }
    if let Some(st) = reshaped_strides(&x.shape, strides, shape) {
        return Ok(DeviceTensor { strides: view_strides(shape, st), shape: shape.to_vec(), ..x });
    }
    Ok(super::layout::to_row_major(cx, &x)?.reshaped(shape.to_vec()))
}

/// Shuffle: first transpose, reshape, second transpose, ending at `out_shape` (what shape
/// inference resolved). The result stays a view where the executor allows
/// ([`Ctx::view_output`]); otherwise it is packed row-major in one copy. `x` may itself
/// be a view.
pub fn shuffle(cx: &Ctx, p: &ShuffleParams, x: &DeviceTensor, out_shape: &[usize]) -> KResult<DeviceTensor> {
    let identity = |perm: &[usize]| perm.iter().enumerate().all(|(i, &q)| i == q);
    let first = if identity(&p.first_transpose) { x.clone() } else { permuted(x, &p.first_transpose)? };
    let out = if p.second_transpose.is_empty() {
        reshape(cx, first, out_shape)?
    } else {
        // The shape between reshape and second transpose: out[i] = mid[perm[i]].
        let perm = &p.second_transpose;
        if perm.len() != out_shape.len() || perm.iter().any(|&q| q >= out_shape.len()) {
            return Err(invalid!("second transpose {perm:?} does not match rank {}", out_shape.len()));
        }
        let mut mid = vec![0usize; out_shape.len()];
        for (i, &q) in perm.iter().enumerate() {
            mid[q] = out_shape[i];
        }
        permuted(&reshape(cx, first, &mid)?, perm)?
    };
    if cx.view_output.get() {
        Ok(out)
    } else {
        super::layout::to_row_major(cx, &out)
    }
}

/// ONNX Slice with host-side bounds.
pub fn slice(cx: &Ctx, x: &DeviceTensor, bounds: [Option<&HostTensor>; 4]) -> KResult<DeviceTensor> {
    let ints = |t: Option<&HostTensor>, what: &str| -> KResult<Option<Vec<i64>>> {
        t.map(|t| t.to_i64_vec().ok_or_else(|| invalid!("slice {what} must be integers"))).transpose()
    };
    let starts = ints(bounds[0], "starts")?.ok_or("slice starts are missing")?;
    let ends = ints(bounds[1], "ends")?.ok_or("slice ends are missing")?;
    let axes = ints(bounds[2], "axes")?;
    let steps = ints(bounds[3], "steps")?;
    let plan = resolve_slice(&x.shape, &starts, &ends, axes.as_deref(), steps.as_deref())?;
    let st = x.element_strides();
    let shape: Vec<usize> = plan.iter().map(|a| a.len).collect();
    let strides: Vec<i64> = plan.iter().zip(&st).map(|(a, &s)| a.step * s).collect();
    let offset = if shape.contains(&0) { 0 } else { plan.iter().zip(&st).map(|(a, &s)| a.start * s).sum() };
    // Read in place where the executor allows: a range of the buffer with the slice's strides.
    if cx.view_output.get() && offset >= 0 && strides.iter().all(|&s| s >= 0) {
        let size = crate::buffer::storage_size(x.dtype).map_err(KernelError::from)?;
        if let Some(buf) = crate::buffer::DeviceBuffer::range(&x.buf, offset as usize * size) {
            return Ok(DeviceTensor { buf: Arc::new(buf), dtype: x.dtype, strides: view_strides(&shape, strides), shape });
        }
    }
    gather_strided(cx, x, &shape, &strides, offset)
}

/// Numpy broadcast of `x` onto `out_shape`.
pub fn expand(cx: &Ctx, x: &DeviceTensor, out_shape: &[usize]) -> KResult<DeviceTensor> {
    let l = super::broadcast_strides(out_shape, &[&x.shape])?;
    gather_strided(cx, x, out_shape, &l.stride[0][..out_shape.len()], 0)
}

/// Each part is read through its own strides (a view, channels-last). When every part is
/// channels-last (what 16-bit convolutions leave) so is the output, so that an Inception or
/// DenseNet concatenation and the convolutions and pooling after it convert nothing.
pub fn concatenation(cx: &Ctx, parts: &[&DeviceTensor], axis: usize, out_shape: &[usize]) -> KResult<DeviceTensor> {
    let first = parts.first().ok_or("concatenation of nothing")?;
    let mut out = cx.gpu.empty(first.dtype, out_shape.to_vec()).map_err(KernelError::from)?;
    // The copies walk the dims in memory order (channels innermost for channels-last), so each
    // pixel's channels move as one contiguous run.
    let order: Vec<usize> = if parts.iter().all(|p| p.channels_last()) {
        out.strides = Some(DeviceTensor::channels_last_strides(out_shape));
        DeviceTensor::channels_last_order(out_shape.len())
    } else {
        (0..out_shape.len()).collect()
    };
    let in_order = |v: &[i64]| order.iter().map(|&d| v[d]).collect::<Vec<i64>>();
    let logical_out_strides = out.element_strides();
    let out_strides = in_order(&logical_out_strides);
    let mut at = 0i64;
    for p in parts {
        if p.shape.len() != out_shape.len() || axis >= out_shape.len() {
            return Err(invalid!("part {:?} does not fit output {out_shape:?} on axis {axis}", p.shape));
        }
        let shape: Vec<usize> = order.iter().map(|&d| p.shape[d]).collect();
        copy_into(cx, p, &shape, &in_order(&p.element_strides()), 0, &out, &out_strides, at * logical_out_strides[axis])?;
        at += p.shape[axis] as i64;
    }
    Ok(out)
}

/// Warps a block of `gather_rows_v16`.
const GATHER_ROWS_WARPS: usize = 8;

/// ONNX Gather on `axis`; `indices` are uploaded (as i64) when they live on the host. Rows of
/// whole 16-byte words (an embedding table's) are copied a warp a row.
pub fn gather(cx: &Ctx, data: &DeviceTensor, indices: &DeviceTensor, axis: usize, out_shape: &[usize]) -> KResult<DeviceTensor> {
    let idx = super::pointwise::cast(cx, indices, kiln::DataType::I64)?;
    let outer: usize = data.shape[..axis].iter().product();
    let inner: usize = data.shape[axis + 1..].iter().product();
    let out = cx.gpu.empty(data.dtype, out_shape.to_vec()).map_err(KernelError::from)?;
    let flag = cx.gpu.upload(&HostTensor::new(vec![1], kiln::TensorData::I32(vec![0])).map_err(KernelError::from)?).map_err(KernelError::from)?;
    let row_bytes = crate::buffer::storage_size(data.dtype).map_or(0, |size| size * inner);
    let (data_arg, out_arg) = (cx.arg(data), cx.arg(&out));
    let aligned = [&data_arg, &out_arg].iter().all(|a| matches!(a, Arg::Ptr(p) if p.address() % 16 == 0));
    if row_bytes.is_multiple_of(16) && row_bytes > 0 && aligned {
        // Whole rows of 16-byte words, a warp a row.
        let rows = outer * idx.len();
        let args = [Arg::I64(rows as i64), Arg::I64(idx.len() as i64), Arg::I64(data.shape[axis] as i64), Arg::I64((row_bytes / 16) as i64), data_arg, cx.arg(&idx), out_arg, cx.arg(&flag)];
        let blocks = rows.div_ceil(GATHER_ROWS_WARPS).clamp(1, 65_535 * 8) as u32;
        cx.gpu.launch(&Source::Copy.kernel("gather_rows_v16"), blocks, 32 * GATHER_ROWS_WARPS as u32, &args).map_err(KernelError::from)?;
    } else {
        let name = format!("gather_{}", width_suffix(data.dtype).map_err(KernelError::from)?);
        let args = [Arg::I64(outer as i64), Arg::I64(data.shape[axis] as i64), Arg::I64(idx.len() as i64), Arg::I64(inner as i64), data_arg, cx.arg(&idx), out_arg, cx.arg(&flag)];
        cx.launch_elements(Source::Copy.kernel(name), out.len(), &args)?;
    }
    cx.defer_check(flag, format!("a Gather index is out of range for axis {axis} of length {}", data.shape[axis]));
    Ok(out)
}

/// Nearest resize (asymmetric coordinates, floor rounding) onto `out_shape`.
pub fn resize_nearest(cx: &Ctx, x: &DeviceTensor, out_shape: &[usize]) -> KResult<DeviceTensor> {
    if x.shape.len() != out_shape.len() || x.shape.len() > 8 {
        return Err(invalid!("resize from {:?} to {out_shape:?}", x.shape));
    }
    let st = contiguous_strides(&x.shape);
    let mut l = Layout { rank: out_shape.len() as i32, ..Layout::default() };
    let mut scales = Vec::new();
    for d in 0..out_shape.len() {
        l.shape[d] = out_shape[d] as i64;
        l.stride[0][d] = st[d];
        l.stride[1][d] = x.shape[d] as i64;
        scales.push(if x.shape[d] == 0 { 1.0 } else { out_shape[d] as f32 / x.shape[d] as f32 });
    }
    let scales = cx.gpu.upload(&HostTensor::from_f32(vec![scales.len()], scales).map_err(KernelError::from)?).map_err(KernelError::from)?;
    let out = cx.gpu.empty(x.dtype, out_shape.to_vec()).map_err(KernelError::from)?;
    let n = out.len();
    let name = format!("resize_nearest_{}", width_suffix(x.dtype).map_err(KernelError::from)?);
    cx.launch_elements(Source::Copy.kernel(name), n, &[Arg::I64(n as i64), Arg::Layout(l), cx.arg(&scales), cx.arg(x), cx.arg(&out)])?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::{permuted_strides, view_strides};
    use crate::ops::contiguous_strides;

    #[test]
    fn views_compose_and_cancel() {
        let packed = |s: &[usize]| contiguous_strides(s);
        // The head merge transposes BERT's head split back: packed again, no copy.
        let (shape, st) = permuted_strides(&[2, 128, 12, 64], &packed(&[2, 128, 12, 64]), &[0, 2, 1, 3]).unwrap();
        let (back, back_st) = permuted_strides(&shape, &st, &[0, 2, 1, 3]).unwrap();
        assert_eq!(view_strides(&back, back_st), None);
        // Moving only size-1 axes leaves the bytes packed.
        let (shape, st) = permuted_strides(&[4, 1, 1, 8], &packed(&[4, 1, 1, 8]), &[0, 3, 1, 2]).unwrap();
        assert_eq!(view_strides(&shape, st), None);
        assert!(permuted_strides(&[2, 3], &[3, 1], &[0, 0]).is_err());
    }
}

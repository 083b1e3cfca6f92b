//! Data movement: transposes and reshapes (Shuffle), Slice, Expand, Concatenation, Gather and
//! nearest Resize, all through the strided-copy, gather and resize kernels.

use super::{contiguous_strides, Ctx};
use crate::device::{width_suffix, Arg, DeviceTensor, Layout};
use kiln::ir::infer::resolve_slice;
use kiln::{HostTensor, ShuffleParams};

/// Copies `x` read through `(strides, offset)` (elements) over `shape` into a new contiguous tensor.
pub fn gather_strided(cx: &Ctx, x: &DeviceTensor, shape: &[usize], strides: &[i64], offset: i64) -> Result<DeviceTensor, String> {
    let out = cx.gpu.empty(x.dtype, shape.to_vec()).map_err(|e| e.to_string())?;
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
) -> Result<(), String> {
    if shape.len() > 8 {
        return Err(format!("rank {} is over the CUDA kernels' limit of 8", shape.len()));
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
        let name = format!("transpose_tiled_{}", width_suffix(x.dtype).map_err(|e| e.to_string())?);
        let blocks = (batch * tiles).clamp(1, 65_535 * 8) as u32;
        let mut args = args.to_vec();
        args.extend([src, dst]);
        return cx.gpu.launch(&name, blocks, 256, &args).map_err(|e| e.to_string());
    }
    let element = crate::device::storage_size(x.dtype).map_err(|e| e.to_string())?;
    let addresses = [cx.gpu.ptr(&x.buf), cx.gpu.ptr(&out.buf)];
    // Copy in the widest unit (up to 16 bytes) the layout and both addresses allow: one thread's
    // index arithmetic then moves up to 8 halves instead of one.
    let (l, width) = [16usize, 8, 4]
        .into_iter()
        .filter(|&w| w > element && addresses.iter().all(|a| a % w as u64 == 0))
        .find_map(|w| widened(&l, (w / element) as i64).map(|wide| (wide, w)))
        .unwrap_or((l, element));
    let n: usize = (0..l.rank as usize).map(|d| l.shape[d] as usize).product();
    let name = format!("strided_copy_{}", crate::device::unit_suffix(width));
    cx.launch_elements(&name, n, &[Arg::I64(n as i64), Arg::Layout(l), src, dst])
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

/// Permutes `x`'s axes (`out dim i` = `in dim perm[i]`).
pub fn transpose(cx: &Ctx, x: &DeviceTensor, perm: &[usize]) -> Result<DeviceTensor, String> {
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        return Ok(x.clone());
    }
    if perm.len() != x.shape.len() || perm.iter().any(|&p| p >= x.shape.len()) {
        return Err(format!("permutation {perm:?} does not fit rank {}", x.shape.len()));
    }
    let shape: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
    // Moving only size-1 axes keeps the bytes in place (an NHWC [n, 1, 1, c] is its NCHW self).
    let moved: Vec<usize> = perm.iter().copied().filter(|&p| x.shape[p] != 1).collect();
    if moved.windows(2).all(|w| w[0] < w[1]) {
        return Ok(x.reshaped(shape));
    }
    let st = contiguous_strides(&x.shape);
    let strides: Vec<i64> = perm.iter().map(|&p| st[p]).collect();
    gather_strided(cx, x, &shape, &strides, 0)
}

/// `x` with its axes permuted (`out dim i` = `in dim perm[i]`) and no bytes moved: the transpose
/// joins the pending one in `stored_order` (none left when they cancel or move only size-1
/// axes).
pub fn permuted(x: &DeviceTensor, perm: &[usize]) -> Result<DeviceTensor, String> {
    let (shape, stored_order) = permuted_order(&x.shape, x.stored_order.as_deref(), perm)?;
    Ok(DeviceTensor { buf: x.buf.clone(), dtype: x.dtype, shape, stored_order })
}

/// The shape and stored order of a tensor of `shape` stored in `order` (None: row-major) after
/// permuting its axes by `perm`.
fn permuted_order(shape: &[usize], order: Option<&[usize]>, perm: &[usize]) -> Result<(Vec<usize>, Option<Vec<usize>>), String> {
    let r = shape.len();
    let mut seen = vec![false; r];
    if perm.len() != r || perm.iter().any(|&p| p >= r || std::mem::replace(&mut seen[p], true)) {
        return Err(format!("{perm:?} is not a permutation of rank {r}"));
    }
    let mut back = vec![0usize; r];
    for (i, &p) in perm.iter().enumerate() {
        back[p] = i;
    }
    let out: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    // Stored axis `s` holds input axis `order[s]`, which is output axis `back[order[s]]`.
    let stored: Vec<usize> = (0..r).map(|s| back[order.map_or(s, |o| o[s])]).collect();
    let in_place = stored.iter().filter(|&&a| out[a] != 1).collect::<Vec<_>>().windows(2).all(|w| w[0] < w[1]);
    Ok((out, (!in_place).then_some(stored)))
}

/// `x` (row-major or with a transpose pending) read under `shape`: free when the bytes are
/// row-major or the shape stays; otherwise the pending transpose is carried out first.
fn reshape(cx: &Ctx, x: DeviceTensor, shape: &[usize]) -> Result<DeviceTensor, String> {
    if x.shape == shape {
        return Ok(x);
    }
    Ok(super::layout::to_row_major(cx, &x)?.reshaped(shape.to_vec()))
}

/// Shuffle: first transpose, reshape, second transpose, ending at `out_shape` (what shape
/// inference resolved). The transposes stay pending where the executor allows
/// ([`Ctx::pending_transpose`]); otherwise the result is made row-major in one copy from the
/// stored bytes. `x` may itself have a transpose pending.
pub fn shuffle(cx: &Ctx, p: &ShuffleParams, x: &DeviceTensor, out_shape: &[usize]) -> Result<DeviceTensor, String> {
    let identity = |perm: &[usize]| perm.iter().enumerate().all(|(i, &q)| i == q);
    let first = if identity(&p.first_transpose) { x.clone() } else { permuted(x, &p.first_transpose)? };
    let out = if p.second_transpose.is_empty() {
        reshape(cx, first, out_shape)?
    } else {
        // The shape between reshape and second transpose: out[i] = mid[perm[i]].
        let perm = &p.second_transpose;
        if perm.len() != out_shape.len() || perm.iter().any(|&q| q >= out_shape.len()) {
            return Err(format!("second transpose {perm:?} does not match rank {}", out_shape.len()));
        }
        let mut mid = vec![0usize; out_shape.len()];
        for (i, &q) in perm.iter().enumerate() {
            mid[q] = out_shape[i];
        }
        permuted(&reshape(cx, first, &mid)?, perm)?
    };
    if cx.pending_transpose.get() {
        Ok(out)
    } else {
        super::layout::to_row_major(cx, &out)
    }
}

/// ONNX Slice with host-side bounds.
pub fn slice(cx: &Ctx, x: &DeviceTensor, bounds: [Option<&HostTensor>; 4]) -> Result<DeviceTensor, String> {
    let ints = |t: Option<&HostTensor>, what: &str| -> Result<Option<Vec<i64>>, String> {
        t.map(|t| t.to_i64_vec().ok_or_else(|| format!("slice {what} must be integers"))).transpose()
    };
    let starts = ints(bounds[0], "starts")?.ok_or("slice starts are missing")?;
    let ends = ints(bounds[1], "ends")?.ok_or("slice ends are missing")?;
    let axes = ints(bounds[2], "axes")?;
    let steps = ints(bounds[3], "steps")?;
    let plan = resolve_slice(&x.shape, &starts, &ends, axes.as_deref(), steps.as_deref())?;
    let st = contiguous_strides(&x.shape);
    let shape: Vec<usize> = plan.iter().map(|a| a.len).collect();
    let strides: Vec<i64> = plan.iter().zip(&st).map(|(a, &s)| a.step * s).collect();
    let offset = if shape.contains(&0) { 0 } else { plan.iter().zip(&st).map(|(a, &s)| a.start * s).sum() };
    gather_strided(cx, x, &shape, &strides, offset)
}

/// Numpy broadcast of `x` onto `out_shape`.
pub fn expand(cx: &Ctx, x: &DeviceTensor, out_shape: &[usize]) -> Result<DeviceTensor, String> {
    let l = super::broadcast_strides(out_shape, &[&x.shape])?;
    gather_strided(cx, x, out_shape, &l.stride[0][..out_shape.len()], 0)
}

pub fn concatenation(cx: &Ctx, parts: &[&DeviceTensor], axis: usize, out_shape: &[usize]) -> Result<DeviceTensor, String> {
    let first = parts.first().ok_or("concatenation of nothing")?;
    let out = cx.gpu.empty(first.dtype, out_shape.to_vec()).map_err(|e| e.to_string())?;
    let out_strides = contiguous_strides(out_shape);
    let mut at = 0i64;
    for p in parts {
        if p.shape.len() != out_shape.len() || axis >= out_shape.len() {
            return Err(format!("part {:?} does not fit output {out_shape:?} on axis {axis}", p.shape));
        }
        copy_into(cx, p, &p.shape, &contiguous_strides(&p.shape), 0, &out, &out_strides, at * out_strides[axis])?;
        at += p.shape[axis] as i64;
    }
    Ok(out)
}

/// ONNX Gather on `axis`; `indices` are uploaded (as i64) when they live on the host.
pub fn gather(cx: &Ctx, data: &DeviceTensor, indices: &DeviceTensor, axis: usize, out_shape: &[usize]) -> Result<DeviceTensor, String> {
    let idx = super::pointwise::cast(cx, indices, kiln::DataType::I64)?;
    let outer: usize = data.shape[..axis].iter().product();
    let inner: usize = data.shape[axis + 1..].iter().product();
    let out = cx.gpu.empty(data.dtype, out_shape.to_vec()).map_err(|e| e.to_string())?;
    let flag = cx.gpu.upload(&HostTensor::new(vec![1], kiln::TensorData::I32(vec![0])).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    let name = format!("gather_{}", width_suffix(data.dtype).map_err(|e| e.to_string())?);
    let n = out.len();
    cx.launch_elements(
        &name,
        n,
        &[
            Arg::I64(outer as i64),
            Arg::I64(data.shape[axis] as i64),
            Arg::I64(idx.len() as i64),
            Arg::I64(inner as i64),
            cx.arg(data),
            cx.arg(&idx),
            cx.arg(&out),
            cx.arg(&flag),
        ],
    )?;
    cx.defer_check(flag, format!("a Gather index is out of range for axis {axis} of length {}", data.shape[axis]));
    Ok(out)
}

/// Nearest resize (asymmetric coordinates, floor rounding) onto `out_shape`.
pub fn resize_nearest(cx: &Ctx, x: &DeviceTensor, out_shape: &[usize]) -> Result<DeviceTensor, String> {
    if x.shape.len() != out_shape.len() || x.shape.len() > 8 {
        return Err(format!("resize from {:?} to {out_shape:?}", x.shape));
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
    let scales = cx.gpu.upload(&HostTensor::from_f32(vec![scales.len()], scales).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    let out = cx.gpu.empty(x.dtype, out_shape.to_vec()).map_err(|e| e.to_string())?;
    let n = out.len();
    let name = format!("resize_nearest_{}", width_suffix(x.dtype).map_err(|e| e.to_string())?);
    cx.launch_elements(&name, n, &[Arg::I64(n as i64), Arg::Layout(l), cx.arg(&scales), cx.arg(x), cx.arg(&out)])?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::permuted_order;
    use crate::device::element_strides;

    #[test]
    fn pending_transposes_compose_and_cancel() {
        // BERT's head split: [b, s, h, d] → [b, h, s, d], heads `d` apart, rows `h·d` apart.
        let (shape, order) = permuted_order(&[2, 128, 12, 64], None, &[0, 2, 1, 3]).unwrap();
        assert_eq!((shape.clone(), order.clone()), (vec![2, 12, 128, 64], Some(vec![0, 2, 1, 3])));
        assert_eq!(element_strides(&shape, order.as_deref()), vec![128 * 768, 64, 768, 1]);
        // The head merge transposes it back: row-major again, no copy.
        assert_eq!(permuted_order(&shape, order.as_deref(), &[0, 2, 1, 3]).unwrap(), (vec![2, 128, 12, 64], None));
        // K given as Kᵀ: [b, h, d, s] with the head dim contiguous.
        let (shape, order) = permuted_order(&[2, 128, 12, 64], None, &[0, 2, 3, 1]).unwrap();
        assert_eq!(shape, vec![2, 12, 64, 128]);
        assert_eq!(element_strides(&shape, order.as_deref()), vec![128 * 768, 64, 1, 768]);
        // Moving only size-1 axes leaves the bytes row-major.
        assert_eq!(permuted_order(&[4, 1, 1, 8], None, &[0, 3, 1, 2]).unwrap(), (vec![4, 8, 1, 1], None));
        assert!(permuted_order(&[2, 3], None, &[0, 0]).is_err());
        assert!(permuted_order(&[2, 3], None, &[1]).is_err());
    }
}

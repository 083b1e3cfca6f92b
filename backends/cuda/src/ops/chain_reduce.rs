//! A pointwise island that ends in a reduction (`PostOp::Reduce`) as one generated kernel: the
//! island's values are reduced as they are computed and never written. A Q/DQ CNN's head,
//! `DQ + DQ → Add → Relu → GlobalAveragePool`, wrote and reread 103 MB of f32 (ResNet-50 at
//! batch 256) where this reads its two 8-bit inputs, 51 MB.
//!
//! The island's index space is viewed as [outer, len, inner], `len` the reduced axes, in the
//! running input's memory order (an NHWC pooling over H and W: [n, h·w, c]), and runs the
//! arithmetic of kernels/reduce.cuh that `compute::reduce` runs on a stored tensor: a warp per
//! row for narrow `inner`, blocks of columns (split into f32 partials where the blocks are too
//! few) for wide ones.

use super::chain_source::chain_kernel;
use super::compute::{column_splits, finish_column_partials, reduce_code, COLUMNS_FROM, MAX_GRID_Y};
use super::pointwise::{build, Built, ChainStep};
use super::{lane_aligned, strided_walk, Ctx, KResult};
use crate::buffer::{Arg, ChainLayout, DeviceTensor};
use kiln::{DataType, KernelError, ReduceOp};

/// The reduction a chain ends in: the op, the axes of the island's shape it reduces, and the
/// output's shape (as inference gives it; checked against the view).
#[derive(Debug)]
pub struct Reduction<'a> {
    pub op: ReduceOp,
    pub axes: &'a [usize],
    pub shape: &'a [usize],
}

/// `steps` on `x` (read dequantized where `x_dequantize` says), then `r`, as one pass into a
/// new row-major tensor of `r.shape`; `None` where it does not apply (a chain kernel would not,
/// a row normalization, an 8-bit result, a view whose parts do not coalesce): the island then
/// runs, and the reduction after it.
pub fn chain_reduce(cx: &Ctx, x: &DeviceTensor, x_dequantize: Option<(f32, f32)>, steps: &[ChainStep], r: &Reduction<'_>) -> KResult<Option<DeviceTensor>> {
    let Some(Built { mut program, slots, shape, params }) = build(x, x_dequantize, steps)? else { return Ok(None) };
    if program.normalizes() || !matches!(program.out, DataType::F32 | DataType::F16 | DataType::BF16) {
        return Ok(None);
    }
    // The running input's memory order: row-major or channels-last, and of the island's shape.
    let x = slots[0];
    let order: Vec<usize> = match (x.strides.is_none(), x.channels_last()) {
        _ if x.shape != shape => return Ok(None),
        (true, _) => (0..shape.len()).collect(),
        (false, true) => DeviceTensor::channels_last_order(shape.len()),
        (false, false) => return Ok(None),
    };
    let strides: Vec<Vec<i64>> = slots.iter().map(|t| t.element_strides()).collect();
    let stored: Vec<(&[usize], &[i64])> = slots.iter().zip(&strides).map(|(t, s)| (&t.shape[..], &s[..])).collect();
    let Some(view) = reduction_view(&shape, &stored, r.axes, &order)? else { return Ok(None) };
    let code = reduce_code(r.op);
    program.reduce = Some(code);
    let (Some(source), Some(lanes)) = (chain_kernel(&program), program.lanes()) else { return Ok(None) };
    let [outer, len, inner] = [0, 1, 2].map(|d| view.shape[d] as usize);
    if outer * inner != r.shape.iter().product::<usize>() {
        return Err(kiln::invalid!("reducing {shape:?} over axes {:?} gives {} values, not the {:?} inference expects", r.axes, outer * inner, r.shape));
    }
    let out = cx.gpu.empty(program.out, r.shape.to_vec()).map_err(KernelError::from)?;
    if out.is_empty() {
        return Ok(Some(out));
    }
    let pointers: Vec<Arg> = slots.iter().map(|t| cx.arg(t)).collect();
    let q: Vec<Arg> = params.iter().map(|&v| Arg::F32(v)).collect();
    let args = |chunk: Option<usize>, result: &DeviceTensor| {
        let head = [Arg::I32(code)].into_iter().chain(chunk.map(|c| Arg::I64(c as i64))).chain([Arg::ChainLayout(view)]);
        head.chain(pointers.iter().cloned()).chain([cx.arg(result)]).chain(q.iter().cloned()).collect::<Vec<_>>()
    };
    // The column form takes the sum family, max and min (kernels/reduce.cuh), as compute::reduce.
    let columns = inner >= COLUMNS_FROM && outer <= MAX_GRID_Y && !matches!(r.op, ReduceOp::Prod | ReduceOp::LogSumExp);
    if !columns {
        let blocks = u32::try_from((outer * inner).div_ceil(8)).map_err(|_| kiln::invalid!("{} rows are too many for one launch", outer * inner))?;
        cx.gpu.launch(&source.kernel("chain_reduce_rows"), blocks, 256, &args(None, &out)).map_err(KernelError::from)?;
        return Ok(Some(out));
    }
    let runs = lanes > 1 && runs_apply(cx, &view, lanes, &slots, &out);
    let (per_block, rows) = if runs { (32 * lanes, 8) } else { (32, 32) };
    let blocks = inner.div_ceil(per_block) * outer;
    let splits = column_splits(blocks, len, rows, cx.gpu.multiprocessors() as usize);
    let chunk = len.div_ceil(splits);
    let grid = (inner.div_ceil(per_block) as u32, outer as u32, splits as u32);
    let block = (32, rows as u32, 1);
    let name = |partial: bool| match (runs, partial) {
        (true, false) => "chain_reduce_column_runs",
        (false, false) => "chain_reduce_columns",
        (true, true) => "chain_reduce_column_run_partials",
        (false, true) => "chain_reduce_column_partials",
    };
    if splits == 1 {
        cx.gpu.launch_grid(&source.kernel(name(false)), grid, block, &args(Some(chunk), &out)).map_err(KernelError::from)?;
        return Ok(Some(out));
    }
    let partials = cx.gpu.empty(DataType::F32, vec![outer, splits, inner]).map_err(KernelError::from)?;
    cx.gpu.launch_grid(&source.kernel(name(true)), grid, block, &args(Some(chunk), &partials)).map_err(KernelError::from)?;
    finish_column_partials(cx, code, (outer, splits, inner, len), &partials, &out)?;
    Ok(Some(out))
}

/// The slots' strides over `shape` as [outer, len, inner] (rank 3), `len` the product of the
/// reduced `axes`: the axes taken in `order` (the running input's memory order), where the
/// reduced ones are one run there, every part's axes coalesce in every slot (a slot may
/// broadcast a whole part), and the kept axes stay in their logical order (the result is
/// written row-major). `None` elsewhere; axes of one element are left out. `slots`: each
/// slot's (shape, element strides).
fn reduction_view(shape: &[usize], slots: &[(&[usize], &[i64])], axes: &[usize], order: &[usize]) -> KResult<Option<ChainLayout>> {
    if slots.len() > crate::buffer::CHAIN_OPERANDS + 1 {
        return Ok(None);
    }
    // Axes of more than one element in memory order (with their place in it).
    let visited: Vec<(usize, usize)> = order.iter().enumerate().filter(|&(_, &a)| shape[a] != 1).map(|(at, &a)| (at, a)).collect();
    let reduced = |a: usize| axes.contains(&a);
    let first = visited.iter().position(|&(_, a)| reduced(a)).unwrap_or(visited.len());
    let end = visited.iter().rposition(|&(_, a)| reduced(a)).map_or(first, |p| p + 1);
    let kept: Vec<usize> = visited.iter().filter(|&&(_, a)| !reduced(a)).map(|&(_, a)| a).collect();
    if visited[first..end].iter().any(|&(_, a)| !reduced(a)) || kept.windows(2).any(|w| w[0] > w[1]) {
        return Ok(None);
    }
    let parts = [&visited[..first], &visited[first..end], &visited[end..]];
    let mut view = ChainLayout { rank: 3, ..ChainLayout::default() };
    for (d, part) in parts.iter().enumerate() {
        let Ok(n) = i32::try_from(part.iter().map(|&(_, a)| shape[a]).product::<usize>()) else { return Ok(None) };
        view.shape[d] = n;
    }
    for (s, slot) in slots.iter().enumerate() {
        let l = strided_walk(shape, &[*slot], Some(order))?;
        for (d, part) in parts.iter().enumerate() {
            // Each axis's stride is its inner neighbour's times that neighbour's extent.
            let coalesces = part.windows(2).all(|w| l.stride[0][w[0].0] == l.stride[0][w[1].0] * shape[w[1].1] as i64);
            let Ok(stride) = i32::try_from(part.last().map_or(0, |&(at, _)| l.stride[0][at])) else { return Ok(None) };
            if !coalesces {
                return Ok(None);
            }
            view.stride[s][d] = stride;
        }
    }
    Ok(Some(view))
}

/// Whether the column kernels may read runs of `lanes` values: the inner extent a multiple of
/// them, each slot's inner stride 1 (runs aligned: its other strides multiples of `lanes`, its
/// address of a run's bytes) or 0 (one value broadcast), the output's runs aligned too.
fn runs_apply(cx: &Ctx, view: &ChainLayout, lanes: usize, slots: &[&DeviceTensor], out: &DeviceTensor) -> bool {
    let k = lanes as i32;
    let fits = slots.iter().enumerate().all(|(s, t)| match view.stride[s][2] {
        0 => true,
        1 => view.stride[s][0] % k == 0 && view.stride[s][1] % k == 0 && lane_aligned(cx, t, lanes),
        _ => false,
    });
    view.shape[2] % k == 0 && fits && lane_aligned(cx, out, lanes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(shape: &[usize], slots: &[(&[usize], Vec<i64>)], axes: &[usize], order: &[usize]) -> Option<([i32; 3], Vec<[i32; 3]>)> {
        let stored: Vec<(&[usize], &[i64])> = slots.iter().map(|(s, t)| (*s, &t[..])).collect();
        let v = reduction_view(shape, &stored, axes, order).expect("broadcasts")?;
        assert_eq!(v.rank, 3);
        Some(([v.shape[0], v.shape[1], v.shape[2]], (0..slots.len()).map(|s| [v.stride[s][0], v.stride[s][1], v.stride[s][2]]).collect()))
    }

    #[test]
    fn a_pooling_over_channels_last_levels_is_batch_by_pixels_by_channels() {
        // ResNet-50's head at batch 256: [256, 2048, 7, 7] stored NHWC, pooled over H and W.
        let shape = [256, 2048, 7, 7];
        let nhwc = DeviceTensor::channels_last_strides(&shape);
        let order = DeviceTensor::channels_last_order(4);
        let got = view(&shape, &[(&shape, nhwc.clone()), (&shape, nhwc)], &[2, 3], &order);
        assert_eq!(got, Some(([256, 49, 2048], vec![[49 * 2048, 2048, 1]; 2])));
    }

    #[test]
    fn row_major_views_coalesce_their_parts_and_broadcast_operands() {
        let shape = [2, 16, 7, 7];
        let rows = vec![784, 49, 7, 1];
        assert_eq!(view(&shape, &[(&shape, rows)], &[2, 3], &[0, 1, 2, 3]), Some(([32, 49, 1], vec![[49, 1, 0]])));
        // A middle axis under wide rows, with an operand along the rows alone: the column form.
        let shape = [2, 64, 40];
        let got = view(&shape, &[(&shape, vec![2560, 40, 1]), (&[40], vec![1])], &[1], &[0, 1, 2]);
        assert_eq!(got, Some(([2, 64, 40], vec![[2560, 40, 1], [0, 0, 1]])));
        // Axes of one element anywhere, and reduced ones among them.
        let shape = [1, 8, 1, 5];
        assert_eq!(view(&shape, &[(&shape, vec![40, 5, 5, 1])], &[2, 3], &[0, 1, 2, 3]), Some(([8, 5, 1], vec![[5, 1, 0]])));
    }

    #[test]
    fn views_that_are_not_outer_by_reduced_by_inner_are_left_to_the_unfused_path() {
        let shape = [2, 3, 4, 5];
        let rows = vec![60, 20, 5, 1];
        assert_eq!(view(&shape, &[(&shape, rows.clone())], &[1, 3], &[0, 1, 2, 3]), None, "reduced axes apart");
        // Channels-last over H alone: the kept N, W, C would be written out of logical order.
        let nhwc = DeviceTensor::channels_last_strides(&shape);
        assert_eq!(view(&shape, &[(&shape, nhwc)], &[2], &DeviceTensor::channels_last_order(4)), None, "kept axes out of order");
        // An operand broadcast along part of the reduced run does not coalesce.
        assert_eq!(view(&shape, &[(&shape, rows), (&[4, 1], vec![1, 0])], &[2, 3], &[0, 1, 2, 3]), None, "a partly broadcast part");
    }
}

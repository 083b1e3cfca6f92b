//! Matrix products (cuBLASLt), pooling, softmax, reductions, normalization and attention
//! (convolutions are `conv`'s).

use kiln::{invalid, AttentionParams, DataType, ElementwiseOp, KernelError, MatrixOp, PoolingParams, ReduceOp};
use crate::ops::KResult;
use super::{broadcast_shape, layout, movement, pointwise, Ctx};
use crate::blas::{Epilogue, Gemm};
use crate::buffer::{float_suffix, Arg, DeviceTensor, Layout};
use crate::sources::{Kernel, Source};

/// `op_a(a) · op_b(b)` with batch broadcasting, scaled by `alpha`, reshaped to `out_shape`.
pub fn matmul(cx: &Ctx, a: &DeviceTensor, op_a: MatrixOp, b: &DeviceTensor, op_b: MatrixOp, alpha: f32, out_shape: &[usize]) -> KResult<DeviceTensor> {
    matmul_epilogue(cx, cx.gemm_rank.get(), a, op_a, b, op_b, alpha, out_shape, None, None).map(|(out, _)| out)
}

/// Whether `t` is one row of `n` values (every axis but the last of length 1): a bias
/// cuBLASLt's epilogue adds along the product's columns.
pub fn is_one_row(t: &DeviceTensor, n: usize) -> bool {
    t.len() == n && t.shape.iter().rev().skip(1).all(|&d| d == 1)
}

/// The product tactic that runs 2:4 sparse weights on cuSPARSELt (see [`sparse_product`]);
/// the cuBLASLt ones are heuristic ranks below it.
pub const SPARSE_GEMM: usize = 100;

/// [`matmul`] with cuBLASLt's heuristic algorithm number `rank` (or [`SPARSE_GEMM`]), that
/// also adds `bias` (`n` values) and applies ReLU when asked, in the library's epilogue where
/// the product's shape allows it; the flag says whether it did.
#[allow(clippy::too_many_arguments)]
pub fn matmul_epilogue(
    cx: &Ctx,
    rank: usize,
    a: &DeviceTensor,
    op_a: MatrixOp,
    b: &DeviceTensor,
    op_b: MatrixOp,
    alpha: f32,
    out_shape: &[usize],
    bias: Option<(&DeviceTensor, bool)>,
    residual: Option<&DeviceTensor>,
) -> KResult<(DeviceTensor, bool)> {
    if a.dtype != b.dtype {
        return Err(invalid!("operands are {} and {}", a.dtype, b.dtype));
    }
    // A vector operand is a one-row (a) or one-column (b) matrix.
    let mut a_shape = a.shape.clone();
    let mut b_shape = b.shape.clone();
    if op_a == MatrixOp::Vector {
        a_shape.insert(a_shape.len().saturating_sub(1), 1);
    }
    if op_b == MatrixOp::Vector {
        b_shape.push(1);
    }
    if a_shape.len() < 2 || b_shape.len() < 2 {
        return Err(invalid!("operands {:?} and {:?} are not matrices", a.shape, b.shape));
    }
    let (trans_a, trans_b) = (op_a == MatrixOp::Transpose, op_b == MatrixOp::Transpose);
    let (ra, ca) = (a_shape[a_shape.len() - 2], a_shape[a_shape.len() - 1]);
    let (rb, cb) = (b_shape[b_shape.len() - 2], b_shape[b_shape.len() - 1]);
    let (m, k) = if trans_a { (ca, ra) } else { (ra, ca) };
    let (k2, n) = if trans_b { (cb, rb) } else { (rb, cb) };
    if k != k2 {
        return Err(invalid!("inner dims differ: {:?} · {:?}", a.shape, b.shape));
    }
    let batch_a = &a_shape[..a_shape.len() - 2];
    let batch_b = &b_shape[..b_shape.len() - 2];
    let batch_shape = broadcast_shape(batch_a, batch_b)?;
    let batch: usize = batch_shape.iter().product();
    let out = cx.gpu.empty(a.dtype, out_shape.to_vec()).map_err(KernelError::from)?;
    if out.is_empty() {
        return Ok((out, false));
    }
    if k == 0 {
        return Ok((super::zeros(cx, out)?, false));
    }
    if rank == SPARSE_GEMM && alpha == 1.0 {
        if let Some(done) = sparse_product(cx, a, op_a, b, op_b, out.clone(), bias, residual)? {
            return Ok(done);
        }
    }
    // Each operand: broadcast over the batch (stride 0), already full (dense stride), or
    // expanded to the full batch first.
    let operand = |x: &DeviceTensor, batch_x: &[usize], rows: usize, cols: usize| -> KResult<(DeviceTensor, i64)> {
        let own: usize = batch_x.iter().product();
        if own == 1 {
            return Ok((x.clone(), 0));
        }
        let padded = std::iter::repeat_n(1, batch_shape.len() - batch_x.len()).chain(batch_x.iter().copied()).collect::<Vec<_>>();
        if padded == batch_shape {
            return Ok((x.clone(), (rows * cols) as i64));
        }
        let mut full = batch_shape.clone();
        full.extend([rows, cols]);
        let mut view = batch_x.to_vec();
        view.extend([rows, cols]);
        Ok((movement::expand(cx, &x.reshaped(view), &full)?, (rows * cols) as i64))
    };
    let (a_dev, mut stride_a) = operand(a, batch_a, ra, ca)?;
    let (b_dev, stride_b) = operand(b, batch_b, rb, cb)?;
    let mut g = Gemm {
        dtype: a.dtype,
        scaled: None,
        tf32: cx.tf32,
        m: m as u64,
        n: n as u64,
        k: k as u64,
        batch: batch as u64,
        trans_a,
        trans_b,
        stride_a,
        stride_b,
        stride_c: (m * n) as i64,
        alpha,
        epilogue: Epilogue::None,
    };
    // A shared right operand (weights): one tall product instead of a batch.
    if stride_b == 0 && stride_a != 0 && !trans_a && batch > 1 {
        g.m *= batch as u64;
        g.batch = 1;
        stride_a = 0;
        g.stride_a = stride_a;
        g.stride_c = 0;
    }
    // The epilogue's bias runs along the output's last axis, once per row: one product only.
    let bias = bias.filter(|(t, _)| g.batch == 1 && t.shape.len() <= out_shape.len() && t.dtype == a.dtype && is_one_row(t, n));
    if let Some((_, relu)) = bias {
        g.epilogue = if relu { Epilogue::ReluBias } else { Epilogue::Bias };
    }
    // A residual of the output's own shape and type joins the bias epilogue as cuBLASLt's C
    // (applied exactly when the bias is: the flag returned covers both).
    if residual.is_some_and(|z| z.shape != out_shape || z.dtype != a.dtype || z.strides.is_some()) {
        return Err(invalid!("a residual must be a row-major {}{out_shape:?}", a.dtype));
    }
    let residual = residual.filter(|_| bias.is_some());
    cx.gpu
        .blas
        .matmul_bias(&g, rank, &a_dev.buf, &b_dev.buf, bias.map(|(t, _)| &*t.buf), residual.map(|z| &*z.buf), &out.buf)
        .map_err(KernelError::from)?;
    Ok((out, bias.is_some()))
}

/// `a · op_b(b)` on cuSPARSELt with `b` the constant 2:4 weights (`[k, n]`, or `[n, k]`
/// transposed), compressed once, with the bias, ReLU and residual in its epilogue; None where
/// the product is not of that form or cuSPARSELt cannot take its shape (the caller runs it
/// dense), an error where cuSPARSELt fails.
#[allow(clippy::too_many_arguments)]
fn sparse_product(
    cx: &Ctx,
    a: &DeviceTensor,
    op_a: MatrixOp,
    b: &DeviceTensor,
    op_b: MatrixOp,
    out: DeviceTensor,
    bias: Option<(&DeviceTensor, bool)>,
    residual: Option<&DeviceTensor>,
) -> KResult<Option<(DeviceTensor, bool)>> {
    let [rb, cb] = b.shape[..] else { return Ok(None) };
    let w_transposed = match op_b {
        MatrixOp::None => false,
        MatrixOp::Transpose => true,
        _ => return Ok(None),
    };
    let (k, n) = if w_transposed { (cb, rb) } else { (rb, cb) };
    let row_major = a.strides.is_none() && b.strides.is_none();
    if op_a != MatrixOp::None || !row_major || a.shape.last() != Some(&k) || out.len() != a.len() / k.max(1) * n {
        return Ok(None);
    }
    let bias_ok = |t: &DeviceTensor| t.dtype == a.dtype && t.len() == n && t.strides.is_none();
    if bias.is_some_and(|(t, _)| !bias_ok(t)) || residual.is_some_and(|z| z.dtype != a.dtype || z.len() != out.len() || z.strides.is_some()) {
        return Ok(None);
    }
    let g = crate::sparse::SparseGemm { dtype: a.dtype, m: (a.len() / k) as u64, n: n as u64, k: k as u64, w_transposed, relu: bias.is_some_and(|(_, r)| r) };
    let Ok(sparse) = cx.gpu.sparse() else { return Ok(None) };
    if !g.supported() {
        return Ok(None);
    }
    let conversion = format!("cusparselt_2_4_{}", if w_transposed { "nk" } else { "kn" });
    let compressed = cx.gpu.converted_weights(b, &conversion, |w| sparse.compress(&g, &w.buf, |bytes| cx.gpu.empty(DataType::U8, vec![bytes])))?;
    let residual = residual.filter(|_| bias.is_some());
    sparse
        .matmul(&g, &a.buf, &compressed.buf, bias.map(|(t, _)| &*t.buf), residual.map(|z| &*z.buf), &out.buf, !cx.gpu.capturing())
        .map_err(KernelError::from)?;
    Ok(Some((out, bias.is_some())))
}

pub fn pooling(cx: &Ctx, p: &PoolingParams, x: &DeviceTensor, out_shape: &[usize]) -> KResult<DeviceTensor> {
    // Pooling keeps the layout it is given: a channels-last 2-D float input (after a 16-bit
    // convolution) runs kiln's NHWC kernel, which also takes ceil mode, asymmetric padding and
    // dilation; on the H100 cuDNN's NHWC pooling was the slower one (Inception-v3's 3×3
    // average pools 0.48 ms each against 0.22 in N×C×H×W).
    if let Some(out) = super::pool::pooling_channels_last(cx, p, x, out_shape)? {
        return Ok(out);
    }
    if let (Ok(dnn), Ok(spec)) = (cx.gpu.dnn(), crate::dnn::PoolSpec::new(p, x.dtype, &x.shape, out_shape)) {
        let x = &layout::to_row_major(cx, x)?;
        let out = cx.gpu.empty(x.dtype, out_shape.to_vec()).map_err(KernelError::from)?;
        if !out.is_empty() {
            dnn.pooling(cx.gpu, &spec, x, &out)?;
        }
        return Ok(out);
    }
    // Every other case (1-D, 3-D, integers): kiln's N-D kernel.
    super::pool::pooling(cx, p, &layout::to_row_major(cx, x)?, out_shape)
}

/// One warp per row: `rows` warps in blocks of four.
fn launch_rows(cx: &Ctx, kernel: Kernel, rows: usize, args: &[Arg]) -> KResult<()> {
    let grid = rows.div_ceil(4);
    if grid > i32::MAX as usize {
        return Err(invalid!("{rows} rows is too many for one launch"));
    }
    cx.gpu.launch(&kernel, grid as u32, 128, args).map_err(KernelError::from)
}

/// Softmax over the last axis of `scores + mask` (the mask broadcast onto the scores), NaN
/// probabilities zeroed when `zero_nan`.
fn masked_softmax(cx: &Ctx, scores: &DeviceTensor, mask: &DeviceTensor, zero_nan: bool) -> KResult<DeviceTensor> {
    let suffix = float_suffix(scores.dtype).map_err(KernelError::from)?;
    let (rank, len) = (scores.shape.len(), *scores.shape.last().ok_or("scores of rank 0")?);
    let (rows_layout, mask_stride) = mask_rows(&scores.shape, mask)?;
    let rows: usize = scores.shape[..rank - 1].iter().product();
    let out = cx.gpu.empty(scores.dtype, scores.shape.clone()).map_err(KernelError::from)?;
    let args = [
        Arg::I64(rows as i64),
        Arg::I64(len as i64),
        Arg::Layout(rows_layout),
        Arg::I64(mask_stride),
        Arg::I32(i32::from(zero_nan)),
        cx.arg(scores),
        cx.arg(mask),
        cx.arg(&out),
    ];
    launch_softmax_rows(cx, Source::Reduce.kernel(format!("softmax_masked_{suffix}")), rows, &args)?;
    Ok(out)
}

/// The masked softmax kernels (with and without levels): blocks of 256 threads, as many as stay
/// resident (4 a multiprocessor: the levels kernel's launch bounds), whose warps stride over the
/// rows, one row or more a warp. The levels kernel builds its grids' tables once a block.
fn launch_softmax_rows(cx: &Ctx, kernel: Kernel, rows: usize, args: &[Arg]) -> KResult<()> {
    let blocks = rows.div_ceil(8).min(4 * cx.gpu.multiprocessors() as usize).max(1);
    cx.gpu.launch(&kernel, blocks as u32, 256, args).map_err(KernelError::from)
}

/// How the masked softmax kernels find a row's mask: the row dims (all but the last), each with
/// the mask's stride, and the mask's stride along the row (0 where it broadcasts one value).
fn mask_rows(scores: &[usize], mask: &DeviceTensor) -> KResult<(Layout, i64)> {
    let rank = scores.len();
    let strides = super::broadcast_strides(scores, &[&mask.shape])?;
    let mut rows_layout = Layout { rank: rank as i32 - 1, ..Layout::default() };
    for d in 0..rank - 1 {
        rows_layout.shape[d] = strides.shape[d];
        rows_layout.stride[0][d] = strides.stride[0][d];
    }
    Ok((super::coalesce(rows_layout, 1), strides.stride[0][rank - 1]))
}

/// `(outer, len, inner)` around `axis`.
fn around(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (shape[..axis].iter().product(), shape[axis], shape[axis + 1..].iter().product())
}

pub fn softmax(cx: &Ctx, x: &DeviceTensor, axis: usize, scale: f32) -> KResult<DeviceTensor> {
    let suffix = float_suffix(x.dtype).map_err(KernelError::from)?;
    if axis >= x.shape.len() {
        return Err(invalid!("softmax axis {axis} of rank {}", x.shape.len()));
    }
    let (outer, len, inner) = around(&x.shape, axis);
    let out = cx.gpu.empty(x.dtype, x.shape.clone()).map_err(KernelError::from)?;
    let args = [Arg::I64(outer as i64), Arg::I64(len as i64), Arg::I64(inner as i64), Arg::F32(scale), cx.arg(x), cx.arg(&out)];
    launch_rows(cx, Source::Reduce.kernel(format!("softmax_{suffix}")), outer * inner, &args)?;
    Ok(out)
}

pub(super) fn reduce_code(op: ReduceOp) -> i32 {
    match op {
        ReduceOp::Sum => 0,
        ReduceOp::Prod => 1,
        ReduceOp::Max => 2,
        ReduceOp::Min => 3,
        ReduceOp::Mean => 4,
        ReduceOp::L1 => 5,
        ReduceOp::L2 => 6,
        ReduceOp::LogSum => 7,
        ReduceOp::LogSumExp => 8,
        ReduceOp::SumSquare => 9,
    }
}

/// The inner extent from which a reduction runs column-wise (`reduce_columns_*`).
pub(super) const COLUMNS_FROM: usize = 32;
/// The most blocks a grid's second dimension takes.
pub(super) const MAX_GRID_Y: usize = 65_535;

/// How many slices a column reduction's rows split into (`reduce_column_partials_*`): 1 where its
/// `blocks` already make 8 a multiprocessor (the loads in flight a memory-bound pass wants), else
/// enough for that, each slice at least 16 rows a thread of the block's `rows_per_block` (a 7×7
/// pooling's 49 rows never splits).
pub(super) fn column_splits(blocks: usize, len: usize, rows_per_block: usize, multiprocessors: usize) -> usize {
    let wanted = (8 * multiprocessors).div_ceil(blocks.max(1));
    let most = len / (16 * rows_per_block).max(1);
    wanted.min(most).clamp(1, MAX_GRID_Z)
}

/// The most blocks a grid's third dimension takes.
const MAX_GRID_Z: usize = 65_535;

/// The results of a column reduction from its f32 partials [outer, splits, inner] (the rows of
/// `len` split into `splits` slices), into `out` ([outer, inner], a float type).
pub(super) fn finish_column_partials(cx: &Ctx, code: i32, (outer, splits, inner, len): (usize, usize, usize, usize), partials: &DeviceTensor, out: &DeviceTensor) -> KResult<()> {
    let suffix = float_suffix(out.dtype).map_err(KernelError::from)?;
    let finish = [Arg::I32(code), Arg::I64(outer as i64), Arg::I64(splits as i64), Arg::I64(inner as i64), Arg::I64(len as i64), cx.arg(partials), cx.arg(out)];
    let kernel = Source::Reduce.kernel(format!("reduce_column_partials_finish_{suffix}"));
    cx.gpu.launch_grid(&kernel, (inner.div_ceil(32) as u32, outer as u32, 1), (32, 32, 1), &finish).map_err(KernelError::from)?;
    Ok(())
}

/// ONNX Reduce over `axes` of `x`, which may be stored in another order.
pub fn reduce(cx: &Ctx, op: ReduceOp, x: &DeviceTensor, axes: &[usize], out_shape: &[usize]) -> KResult<DeviceTensor> {
    if x.strides.is_some() {
        // Channels-last over every spatial axis (global pooling): the stored [n, spatial…, c]
        // bytes reduced over their middle axes give the same row-major [n, c] without moving
        // channels first.
        let r = x.shape.len();
        let mut sorted = axes.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        if x.channels_last() && sorted == (2..r).collect::<Vec<_>>() {
            let stored: Vec<usize> = std::iter::once(x.shape[0]).chain(x.shape[2..].iter().copied()).chain(std::iter::once(x.shape[1])).collect();
            return reduce(cx, op, &x.reshaped(stored), &(1..r - 1).collect::<Vec<_>>(), out_shape);
        }
        return reduce(cx, op, &super::layout::to_row_major(cx, x)?, axes, out_shape);
    }
    let typed = super::typed::reduce_supported(x.dtype);
    let suffix = if typed { "" } else { float_suffix(x.dtype).map_err(KernelError::from)? };
    let r = x.shape.len();
    let mut axes: Vec<usize> = axes.to_vec();
    axes.sort_unstable();
    axes.dedup();
    if axes.iter().any(|&a| a >= r) {
        return Err(invalid!("reduce axes {axes:?} of rank {r}"));
    }
    // Reduced axes as one contiguous run [lo, hi); otherwise move them last.
    let contiguous = axes.windows(2).all(|w| w[1] == w[0] + 1);
    let (src, lo, hi) = if axes.is_empty() {
        (x.clone(), r, r)
    } else if contiguous {
        (x.clone(), axes[0], axes[axes.len() - 1] + 1)
    } else {
        let perm: Vec<usize> = (0..r).filter(|a| !axes.contains(a)).chain(axes.iter().copied()).collect();
        (movement::transpose(cx, x, &perm)?, r - axes.len(), r)
    };
    let outer: usize = src.shape[..lo].iter().product();
    let len: usize = src.shape[lo..hi].iter().product();
    let inner: usize = src.shape[hi..].iter().product();
    // The kernel writes `outer · inner` results: the output must hold exactly that many.
    if outer * inner != out_shape.iter().product::<usize>() {
        return Err(invalid!("reducing {:?} over axes {axes:?} gives {} values, not the {out_shape:?} inference expects", x.shape, outer * inner));
    }
    if typed {
        return super::typed::reduce_rows(cx, reduce_code(op), op, &src, (outer, len, inner), out_shape);
    }
    let out = cx.gpu.empty(x.dtype, out_shape.to_vec()).map_err(KernelError::from)?;
    let code = Arg::I32(reduce_code(op));
    // A wide inner extent reads along rows in columns (`reduce_columns_*`): a warp per output
    // would read one element per memory sector.
    let columns = inner >= COLUMNS_FROM && outer <= MAX_GRID_Y && !matches!(op, ReduceOp::Prod | ReduceOp::LogSumExp);
    if columns {
        // Runs of 16 bytes a thread (`reduce_column_runs_*`: 32 runs × 8 partial rows a block)
        // where every row starts aligned; else one element a thread (32 × 32).
        let run = 16 / crate::buffer::storage_size(x.dtype).map_err(KernelError::from)?;
        let runs = inner.is_multiple_of(run) && super::lane_aligned(cx, &src, run) && super::lane_aligned(cx, &out, run);
        let (per_block, block) = if runs { (32 * run, (32, 8, 1)) } else { (32, (32, 32, 1)) };
        let blocks = inner.div_ceil(per_block) * outer;
        let splits = column_splits(blocks, len, block.1 as usize, cx.gpu.multiprocessors() as usize);
        let chunk = len.div_ceil(splits);
        let dims = [outer, len, inner, chunk].map(|d| Arg::I64(d as i64));
        let grid = |splits: usize| (inner.div_ceil(per_block) as u32, outer as u32, splits as u32);
        if splits == 1 {
            let name = if runs { "reduce_column_runs" } else { "reduce_columns" };
            let args = [&[code], &dims[..], &[cx.arg(&src), cx.arg(&out)]].concat();
            cx.gpu.launch_grid(&Source::Reduce.kernel(format!("{name}_{suffix}")), grid(1), block, &args).map_err(KernelError::from)?;
            return Ok(out);
        }
        // Each split's f32 partials, then their result.
        let partials = cx.gpu.empty(DataType::F32, vec![outer, splits, inner]).map_err(KernelError::from)?;
        let name = if runs { "reduce_column_run_partials" } else { "reduce_column_partials" };
        let args = [&[code], &dims[..], &[cx.arg(&src), cx.arg(&partials)]].concat();
        cx.gpu.launch_grid(&Source::Reduce.kernel(format!("{name}_{suffix}")), grid(splits), block, &args).map_err(KernelError::from)?;
        finish_column_partials(cx, reduce_code(op), (outer, splits, inner, len), &partials, &out)?;
        return Ok(out);
    }
    let args = [code, Arg::I64(outer as i64), Arg::I64(len as i64), Arg::I64(inner as i64), cx.arg(&src), cx.arg(&out)];
    launch_rows(cx, Source::Reduce.kernel(format!("reduce_{suffix}")), outer * inner, &args)?;
    Ok(out)
}

/// Normalization: statistics per row of the trailing reduced axes (grouped view when
/// `num_groups > 1`), then `· scale + bias` broadcast.
#[allow(clippy::too_many_arguments)]
pub fn normalization(
    cx: &Ctx,
    x: &DeviceTensor,
    scale: Option<&DeviceTensor>,
    bias: Option<&DeviceTensor>,
    axes: &[usize],
    epsilon: f32,
    num_groups: usize,
    rms: bool,
) -> KResult<DeviceTensor> {
    let suffix = float_suffix(x.dtype).map_err(KernelError::from)?;
    let r = x.shape.len();
    let mut reduced = vec![false; r];
    for &a in axes {
        *reduced.get_mut(a).ok_or_else(|| invalid!("normalization axis {a} of rank {r}"))? = true;
    }
    let first = if num_groups > 1 {
        if r < 2 || x.shape[1] % num_groups != 0 || reduced[0] {
            return Err(invalid!("shape {:?} does not split into {num_groups} groups", x.shape));
        }
        // Grouped: statistics over (channels in group, reduced spatial axes).
        reduced[1] = true;
        1
    } else {
        reduced.iter().position(|&b| b).unwrap_or(r)
    };
    if reduced[first..].iter().any(|&b| !b) {
        return Err(invalid!("normalization axes {axes:?} of rank {r} are not the trailing axes"));
    }
    let len: usize = if num_groups > 1 { x.shape[1..].iter().product::<usize>() / num_groups } else { x.shape[first..].iter().product() };
    let rows = x.len().checked_div(len).unwrap_or(0);
    let out = cx.gpu.empty(x.dtype, x.shape.clone()).map_err(KernelError::from)?;
    let split = split_rows(rows, len);
    // Scale and bias along the row (LayerNormalization's, RMSNorm's): one pass.
    let along_row = |t: &DeviceTensor| num_groups == 1 && t.dtype == x.dtype && t.len() == len && trailing(&t.shape) == trailing(&x.shape[first..]);
    if let Some(s) = scale.filter(|s| split.is_none() && along_row(s) && bias.is_none_or(along_row)) {
        let b = bias.map_or(Arg::NULL, |b| cx.arg(b));
        // Short rows go several to a warp (the kernel's register budget: 1024 values per lane set).
        let rows_per_warp = match len {
            0..=128 => 8,
            129..=256 => 4,
            257..=512 => 2,
            _ => 1,
        };
        if rows_per_warp > 1 && len % 4 == 0 {
            let args = [Arg::I64(rows as i64), Arg::I64(len as i64), Arg::F32(epsilon), Arg::I32(rms as i32), Arg::I32(rows_per_warp), cx.arg(x), cx.arg(s), b, cx.arg(&out)];
            launch_rows(cx, Source::Reduce.kernel(format!("normalize_affine_short_{suffix}")), rows.div_ceil(rows_per_warp as usize), &args)?;
            return Ok(out);
        }
        let args = [Arg::I64(rows as i64), Arg::I64(len as i64), Arg::F32(epsilon), Arg::I32(rms as i32), cx.arg(x), cx.arg(s), b, cx.arg(&out)];
        launch_rows(cx, Source::Reduce.kernel(format!("normalize_affine_{suffix}")), rows, &args)?;
        return Ok(out);
    }
    if let Some((chunks, chunk)) = split {
        let partial = cx.gpu.empty(DataType::F32, vec![rows, chunks, 2]).map_err(KernelError::from)?;
        let grid = (chunks as u32, rows as u32, 1);
        let stats = [Arg::I64(len as i64), Arg::I64(chunk as i64), Arg::I32(rms as i32), cx.arg(x), cx.arg(&partial)];
        cx.gpu.launch_grid(&Source::Reduce.kernel(format!("row_chunk_stats_{suffix}")), grid, (256, 1, 1), &stats).map_err(KernelError::from)?;
        let args = [Arg::I64(len as i64), Arg::I64(chunk as i64), Arg::F32(epsilon), Arg::I32(rms as i32), cx.arg(x), cx.arg(&partial), cx.arg(&out)];
        cx.gpu.launch_grid(&Source::Reduce.kernel(format!("normalize_chunks_{suffix}")), grid, (256, 1, 1), &args).map_err(KernelError::from)?;
    } else {
        let name = if rms { format!("rms_normalize_{suffix}") } else { format!("normalize_{suffix}") };
        launch_rows(cx, Source::Reduce.kernel(name), rows, &[Arg::I64(rows as i64), Arg::I64(len as i64), Arg::F32(epsilon), cx.arg(x), cx.arg(&out)])?;
    }
    let mut y = out;
    if let Some(s) = scale {
        y = pointwise::binary(cx, ElementwiseOp::Prod, &y, s, x.dtype, &x.shape)?;
    }
    if let Some(b) = bias {
        y = pointwise::binary(cx, ElementwiseOp::Sum, &y, b, x.dtype, &x.shape)?;
    }
    Ok(y)
}

/// How to split normalization rows over blocks, as (chunks per row, chunk length): for few
/// long rows (one warp per row would leave the device nearly idle: a GroupNorm of one group at
/// batch 1 is a single row), enough chunks of at least 2048 elements to give every SM two
/// blocks. None: one warp per row.
fn split_rows(rows: usize, len: usize) -> Option<(usize, usize)> {
    const MIN_LEN: usize = 4096;
    const MAX_ROWS: usize = 512;
    const BLOCKS: usize = 264;
    if rows == 0 || rows > MAX_ROWS || len < MIN_LEN {
        return None;
    }
    let chunks = BLOCKS.div_ceil(rows).min(len.div_ceil(2048)).max(1);
    let chunk = len.div_ceil(chunks);
    Some((len.div_ceil(chunk), chunk))
}

/// `shape` without its leading 1s.
fn trailing(shape: &[usize]) -> &[usize] {
    &shape[shape.iter().position(|&n| n != 1).unwrap_or(shape.len())..]
}

/// `softmax(scale · Q·Kᵀ + mask) · V`: the fused kernel, or two cuBLASLt products around a
/// softmax. Q, K and V may have transposes pending. With output levels, the values' levels: the
/// integer kernel writes them, the other paths quantize their float output.
pub fn attention(cx: &Ctx, p: &AttentionParams, q: &DeviceTensor, k: &DeviceTensor, v: &DeviceTensor, mask: Option<&DeviceTensor>, out_shape: &[usize]) -> KResult<DeviceTensor> {
    let out = attention_values(cx, p, q, k, v, mask, out_shape)?;
    match &p.output_levels {
        Some(grid) if out.dtype.is_float() => levels_in_place_order(cx, &out, grid),
        _ => Ok(out),
    }
}

/// `x`'s levels on `grid`, laid out as the QuantizeLinear layer lays them out
/// (`quantize_laid_out`): the fused kernel's output in its head merge's order keeps it, so the
/// Shuffle that merges the heads stays a view of the levels, as it was of the floats.
fn levels_in_place_order(cx: &Ctx, x: &DeviceTensor, grid: &kiln::LevelGrid) -> KResult<DeviceTensor> {
    let (scale, zero) = grid_operands(cx, grid)?;
    super::quantize_laid_out(cx, x, &scale, Some(&zero), None, grid.levels)
}

/// `grid`'s scale and zero point as the device operands of a QuantizeLinear / DequantizeLinear.
fn grid_operands(cx: &Ctx, grid: &kiln::LevelGrid) -> KResult<(DeviceTensor, DeviceTensor)> {
    let (scale, zero) = grid.operands()?;
    let table = |t: &kiln::HostTensor| cx.gpu.constant_table(t).map_err(KernelError::from);
    Ok((table(&scale)?, table(&zero)?))
}

/// [`attention`] before its output levels (unless the integer kernel wrote them).
fn attention_values(cx: &Ctx, p: &AttentionParams, q: &DeviceTensor, k: &DeviceTensor, v: &DeviceTensor, mask: Option<&DeviceTensor>, out_shape: &[usize]) -> KResult<DeviceTensor> {
    if let Some(out) = super::flash::attention(cx, p, q, k, v, mask, out_shape)? {
        return Ok(out);
    }
    let [q, k, v] = [(0, q), (1, k), (2, v)].map(|(slot, x)| dequantized_input(cx, p, slot, x));
    let (q, k, v) = (&q?, &k?, &v?);
    let (k, key_transposed) = keys_by_rows(k, p.key_transposed);
    let (q, k, v) = (&layout::to_row_major(cx, q)?, &layout::to_row_major(cx, &k)?, &layout::to_row_major(cx, v)?);
    let scale = p.multiplier();
    let op_k = if key_transposed { MatrixOp::None } else { MatrixOp::Transpose };
    let qs = &q.shape;
    let ks = &k.shape;
    if qs.len() < 2 || ks.len() < 2 {
        return Err(invalid!("attention on {qs:?} and {ks:?}"));
    }
    let sk = if key_transposed { ks[ks.len() - 1] } else { ks[ks.len() - 2] };
    let mut score_shape = broadcast_shape(&qs[..qs.len() - 2], &ks[..ks.len() - 2])?;
    score_shape.extend([qs[qs.len() - 2], sk]);
    let mut scores = matmul(cx, q, MatrixOp::None, k, op_k, p.stored_product_factor(), &score_shape)?;
    if p.has_levels() {
        if let Some(probs) = softmax_on_levels(cx, p, &scores, mask, scale)? {
            return matmul(cx, &probs, MatrixOp::None, v, MatrixOp::None, 1.0, out_shape);
        }
    }
    if let Some(grid) = &p.product_levels {
        // Dequantized straight to the scaled scores (one rounding where the graph had two).
        scores = through_levels(cx, &scores, grid, scale)?;
    }
    if let Some(grid) = &p.scores_levels {
        scores = through_levels(cx, &scores, grid, 1.0)?;
    }
    let probs = match mask {
        Some(m) if m.dtype == DataType::Bool => return Err("boolean attention masks are not supported on CUDA yet".into()),
        // A mask that broadcasts onto the scores: one masked softmax pass.
        Some(m) if m.dtype == scores.dtype && broadcast_shape(&score_shape, &m.shape)? == score_shape => {
            masked_softmax(cx, &scores, m, p.zero_nan_rows)?
        }
        _ => {
            let scores = match mask {
                Some(m) => pointwise::binary(cx, ElementwiseOp::Sum, &scores, m, scores.dtype, &broadcast_shape(&score_shape, &m.shape)?)?,
                None => scores,
            };
            let last = scores.shape.len() - 1;
            let probs = softmax(cx, &scores, last, 1.0)?;
            match p.zero_nan_rows {
                true => pointwise::unary(cx, pointwise::NAN_TO_ZERO, &probs, Some(&probs))?,
                false => probs,
            }
        }
    };
    let probs = match &p.probs_levels {
        Some(grid) => through_levels(cx, &probs, grid, 1.0)?,
        None => probs,
    };
    matmul(cx, &probs, MatrixOp::None, v, MatrixOp::None, 1.0, out_shape)
}

/// Input `slot` of an attention, dequantized where it is given as levels (as the
/// DequantizeLinear it stands for).
fn dequantized_input(cx: &Ctx, p: &AttentionParams, slot: usize, x: &DeviceTensor) -> KResult<DeviceTensor> {
    let (Some(grid), Some(levels)) = (p.input_grid(slot), p.input_levels) else { return Ok(x.clone()) };
    let (scale, zero) = grid_operands(cx, &grid)?;
    super::dequantize(cx, x, &scale, Some(&zero), None, Some(levels.to))
}

/// Transposed keys `(…, D, Sk)` that are a view of keys stored by rows (D innermost, as a
/// transpose of the projection's heads leaves them): the view of those rows `(…, Sk, D)`, which
/// the product reads transposed, so making it row-major copies runs of D elements instead of
/// transposing. Other keys as they are. Also whether the keys returned are transposed.
fn keys_by_rows(k: &DeviceTensor, key_transposed: bool) -> (DeviceTensor, bool) {
    let r = k.shape.len();
    match &k.strides {
        Some(st) if key_transposed && r >= 2 && st[r - 2] == 1 && st[r - 1] != 1 && k.shape[r - 2] > 1 => {
            let (mut shape, mut strides) = (k.shape.clone(), st.clone());
            shape.swap(r - 2, r - 1);
            strides.swap(r - 2, r - 1);
            (DeviceTensor { shape, strides: Some(strides), ..k.clone() }, false)
        }
        _ => (k.clone(), key_transposed),
    }
}

/// The entries of each level grid's table in `softmax_masked_levels` (8-bit levels).
const LEVEL_TABLE_ENTRIES: i32 = 256;

/// The probabilities of attention on levels in one pass over the scores (the product, unscaled
/// where the product has levels): its grids, the mask and the softmax (`softmax_masked_levels`,
/// the values the step-by-step passes below give). `None` where the mask is not one the masked
/// softmax takes (then those passes run).
fn softmax_on_levels(cx: &Ctx, p: &AttentionParams, scores: &DeviceTensor, mask: Option<&DeviceTensor>, scale: f32) -> KResult<Option<DeviceTensor>> {
    let suffix = float_suffix(scores.dtype).map_err(KernelError::from)?;
    let (rank, len) = (scores.shape.len(), *scores.shape.last().ok_or("scores of rank 0")?);
    let (rows_layout, mask_stride) = match mask {
        Some(m) if m.dtype != scores.dtype || broadcast_shape(&scores.shape, &m.shape)? != scores.shape => return Ok(None),
        Some(m) => mask_rows(&scores.shape, m)?,
        None => (Layout::default(), 0),
    };
    let Some(grids) = softmax_level_args(p, scale) else { return Ok(None) };
    let rows: usize = scores.shape[..rank - 1].iter().product();
    let mut args = vec![Arg::I64(rows as i64), Arg::I64(len as i64), Arg::Layout(rows_layout), Arg::I64(mask_stride), Arg::I32(i32::from(p.zero_nan_rows))];
    args.extend(grids);
    let out = cx.gpu.empty(scores.dtype, scores.shape.clone()).map_err(KernelError::from)?;
    args.extend([cx.arg(scores), mask.map_or(Arg::NULL, |m| cx.arg(m)), cx.arg(&out)]);
    launch_softmax_rows(cx, Source::Reduce.kernel(format!("softmax_masked_levels_{suffix}")), rows, &args)?;
    Ok(Some(out))
}

/// The `SoftmaxLevels` of attention's grids as kernel arguments (kernels/levels.cuh): the bits
/// of the grids that apply, then grid g's scale, scale times the factor after it (`scale` for
/// the product's), zero point, lowest and highest level. `None` where a grid has more levels
/// than a table holds.
pub(super) fn softmax_level_args(p: &AttentionParams, scale: f32) -> Option<Vec<Arg>> {
    let grids = [(&p.product_levels, scale), (&p.scores_levels, 1.0), (&p.probs_levels, 1.0)];
    let mut on = 0;
    let mut args = vec![Arg::I32(0)];
    for (g, (grid, factor)) in grids.into_iter().enumerate() {
        let Some(grid) = grid else {
            args.extend([Arg::F32(1.0), Arg::F32(1.0), Arg::I32(0), Arg::I32(0), Arg::I32(0)]);
            continue;
        };
        let (lo, hi) = grid.range();
        if hi - lo >= LEVEL_TABLE_ENTRIES {
            return None;
        }
        on |= 1 << g;
        args.extend([Arg::F32(grid.scale), Arg::F32(grid.scale * factor), Arg::I32(grid.zero), Arg::I32(lo), Arg::I32(hi)]);
    }
    args[0] = Arg::I32(on);
    Some(args)
}

/// `DequantizeLinear(QuantizeLinear(x))` on `grid`, times `factor`, back in x's type.
fn through_levels(cx: &Ctx, x: &DeviceTensor, grid: &kiln::LevelGrid, factor: f32) -> KResult<DeviceTensor> {
    let (scale, zero) = grid_operands(cx, grid)?;
    let scaled = grid_operands(cx, &kiln::LevelGrid { scale: grid.scale * factor, ..*grid })?.0;
    let levels = super::typed::quantize(cx, x, &scale, Some(&zero), None, grid.levels)?;
    super::typed::dequantize(cx, &levels, &scaled, Some(&zero), None, Some(x.dtype))
}

#[cfg(test)]
mod tests {
    use super::column_splits;

    #[test]
    fn long_column_reductions_over_few_blocks_split_their_rows() {
        // EfficientNet-B0's first squeeze-excitation pooling at batch 32 on 132 multiprocessors:
        // one block of runs per image over 112·112 rows splits 33 ways.
        assert_eq!(column_splits(32, 112 * 112, 8, 132), 33);
        // A 7×7 pooling's 49 rows, and a grid that already fills the device, stay whole.
        assert_eq!(column_splits(32, 49, 8, 132), 1);
        assert_eq!(column_splits(4096, 112 * 112, 8, 132), 1);
        // No slice shorter than 16 rows a thread.
        assert_eq!(column_splits(1, 1024, 32, 132), 2);
    }
}

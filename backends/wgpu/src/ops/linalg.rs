//! Matrix products, convolutions, pooling and attention (as its matmul / softmax parts).

use super::{count_word, output, KResult};
use crate::gemm::{Accumulate, GemmKernel, GemmShape};
use crate::ops::pointwise::{self, kiln_broadcast};
use crate::ops::reduce::softmax;
use crate::wgsl::Storage;
use crate::shaders::Instance;
use crate::value::{DeviceTensor, Packing, Recorder};
use kiln::plan::matmul::{operands, MatrixOperand};
use kiln::{
    AttentionParams, ConvolutionParams, DataType, DeconvolutionParams, ElementwiseOp, MatrixOp, PoolingKind,
    PoolingParams,
};

/// Both M and N at least this: the f32 product runs on the 128×128-tile kernel.
pub const WIDE_MIN: usize = 128;

/// The batched product of `a` and `b` (batch dims broadcast), written contiguous as
/// (batch…, M, N) into a tensor of the inferred `shape`.
pub fn matmul(
    rec: &Recorder,
    a: &DeviceTensor,
    op_a: MatrixOp,
    b: &DeviceTensor,
    op_b: MatrixOp,
    shape: &[usize],
    dtype: DataType,
) -> KResult<DeviceTensor> {
    let halves = a.packing == Packing::Half && b.packing == Packing::Half && dtype == DataType::F16;
    let (a, b) = match halves {
        true => (a.clone(), b.clone()),
        // The generic path for operands the f16 GEMM cannot take (see below).
        false => (super::half::widen(rec, a)?, super::half::widen(rec, b)?),
    };
    let (a, b) = (&a, &b);
    let (pa, pb) = operands(&a.shape, op_a, &b.shape, op_b)?;
    let batch_shape = kiln_broadcast(&pa.batch, &pb.batch)?;
    let batches: usize = batch_shape.iter().product();
    let max_z = rec.gpu.limits.max_compute_workgroups_per_dimension as usize;
    if batches > max_z {
        return Err(kiln::invalid!("{batches} matrix batches exceed the {max_z} workgroups of one dispatch dimension"));
    }
    let (m, k, n) = (pa.rows, pa.cols, pb.cols);
    let shape_facts = GemmShape {
        m,
        n,
        k,
        a_row_stride: pa.row_stride,
        a_col_stride: pa.col_stride,
        b_row_stride: pb.row_stride,
        b_col_stride: pb.col_stride,
    };
    // f16 halves the register-tiled GEMM cannot take (transposed, K or N not a multiple
    // of 4, empty) are widened: the executor stores the f32-word product as halves again.
    if halves && !(shape_facts.fits() && k > 0 && batches * m * n > 0) {
        return matmul(rec, &super::half::widen(rec, a)?, op_a, &super::half::widen(rec, b)?, op_b, shape, dtype);
    }
    let out = match halves {
        true => rec.alloc_halves(shape).map_err(kiln::KernelError::from)?,
        false => output(rec, dtype, shape)?,
    };
    if out.len() != batches * m * n {
        return Err(kiln::invalid!(
            "the product has {} elements, the inferred output {shape:?} {}",
            batches * m * n,
            out.len()
        ));
    }
    if out.is_empty() {
        return Ok(out);
    }
    let storage = Storage::of(a.dtype).ok_or_else(|| kiln::invalid!("unsupported dtype {}", a.dtype))?;
    if k == 0 {
        return pointwise::fill(rec, dtype, shape, 0);
    }
    // Per-batch element offsets of each operand (its batch dims broadcast).
    let (a_offsets, b_offsets) = (pa.batch_offsets(&batch_shape)?, pb.batch_offsets(&batch_shape)?);
    let mut params = vec![m as u32, n as u32, k as u32, batches as u32];
    params.extend([pa.row_stride, pa.col_stride, pb.row_stride, pb.col_stride].map(|x| x as u32));
    for (ao, bo) in a_offsets.into_iter().zip(b_offsets) {
        params.push(count_word(ao)?);
        params.push(count_word(bo)?);
    }
    // Row-major f32 products with K and N multiples of 4 take the register-tiled vec4
    // kernel (crate::gemm); the others the scalar tiled kernels. f16 halves take its f16
    // instantiation: halves in and out, summed in f32 (the chosen f32 tile shape).
    if storage == Storage::F32 && shape_facts.fits() {
        let tile = crate::tactics::kernel_for(rec.gemm_choices(), m, n, k);
        let gemm = match halves {
            true => GemmKernel::f16(tile.thread_m, tile.thread_n, tile.depth, Accumulate::F32),
            false => tile,
        };
        let key = gemm.name();
        rec.gpu.pipeline_trusted(&key, || gemm.source()).map_err(kiln::KernelError::from)?;
        // `dispatch` finds the trusted pipeline cached under the same key.
        let kernel = Instance { key, body: "", prelude: String::new() };
        let groups = gemm.groups(m as u32, n as u32, batches as u32);
        rec.dispatch(&kernel, &params, &[&a.buffer, &b.buffer, &out.buffer], groups).map_err(kiln::KernelError::from)?;
        return pointwise::narrow(rec, out);
    }
    // Large f32 products take the 128×128-tile kernel (8×8 outputs per invocation).
    let (kernel, tile) = if storage == Storage::F32 && m >= WIDE_MIN && n >= WIDE_MIN {
        (Instance::plain("matmul_wide"), 128)
    } else {
        (Instance::matmul(storage), 64)
    };
    let groups = [n.div_ceil(tile) as u32, m.div_ceil(tile) as u32, batches as u32];
    rec.dispatch(&kernel, &params, &[&a.buffer, &b.buffer, &out.buffer], groups).map_err(kiln::KernelError::from)?;
    pointwise::narrow(rec, out)
}

/// Spatial parameters padded to three dims (missing leading dims have size 1).
fn three(v: &[usize], fill: usize) -> KResult<[u32; 3]> {
    if v.len() > 3 {
        return Err(kiln::invalid!("{} spatial dims; the wgpu kernels take at most 3", v.len()));
    }
    let mut out = [fill as u32; 3];
    for (o, &x) in out[3 - v.len()..].iter_mut().zip(v) {
        *o = count_word(x)?;
    }
    Ok(out)
}

struct Window<'a> {
    kernel: &'a [usize],
    strides: &'a [usize],
    dilations: &'a [usize],
    pre: &'a [usize],
}

fn conv_params(
    x: &[usize],
    k_all: usize,
    groups: usize,
    out: &[usize],
    w: &Window<'_>,
    has_bias: bool,
) -> KResult<Vec<u32>> {
    let spatial = x.len().saturating_sub(2);
    if x.len() < 3 || out.len() != x.len() || w.kernel.len() != spatial {
        return Err(kiln::invalid!("convolution of {x:?} into {out:?} with a {:?} kernel", w.kernel));
    }
    let mut p = vec![count_word(out.iter().product())?, x[0] as u32, x[1] as u32, k_all as u32, groups.max(1) as u32];
    p.extend(three(&x[2..], 1)?);
    p.extend(three(&out[2..], 1)?);
    p.extend(three(w.kernel, 1)?);
    p.extend(three(w.strides, 1)?);
    p.extend(three(w.dilations, 1)?);
    p.extend(three(w.pre, 0)?);
    p.push(u32::from(has_bias));
    Ok(p)
}

pub fn convolution(
    rec: &Recorder,
    p: &ConvolutionParams,
    x: &DeviceTensor,
    w: &DeviceTensor,
    bias: Option<&DeviceTensor>,
    shape: &[usize],
) -> KResult<DeviceTensor> {
    let window = Window {
        kernel: &w.shape[2.min(w.shape.len())..],
        strides: &p.strides,
        dilations: &p.dilations,
        pre: &p.pre_padding,
    };
    let params = conv_params(&x.shape, w.shape[0], p.groups, shape, &window, bias.is_some())?;
    let out = output(rec, x.dtype, shape)?;
    let bias_buffer = bias.map_or(&w.buffer, |b| &b.buffer);
    let storage = match x.dtype {
        DataType::I32 => Storage::I32,
        _ => Storage::F32,
    };
    rec.dispatch_1d(&Instance::conv(storage), &params, &[&x.buffer, &w.buffer, bias_buffer, &out.buffer], out.len())
        .map_err(kiln::KernelError::from)?;
    pointwise::narrow(rec, out)
}

pub fn deconvolution(
    rec: &Recorder,
    p: &DeconvolutionParams,
    x: &DeviceTensor,
    w: &DeviceTensor,
    bias: Option<&DeviceTensor>,
    shape: &[usize],
) -> KResult<DeviceTensor> {
    let window = Window {
        kernel: &w.shape[2.min(w.shape.len())..],
        strides: &p.strides,
        dilations: &p.dilations,
        pre: &p.pre_padding,
    };
    let k_all = w.shape.get(1).copied().unwrap_or(0) * p.groups.max(1);
    let params = conv_params(&x.shape, k_all, p.groups, shape, &window, bias.is_some())?;
    let out = output(rec, x.dtype, shape)?;
    let bias_buffer = bias.map_or(&w.buffer, |b| &b.buffer);
    rec.dispatch_1d(&Instance::plain("deconv"), &params, &[&x.buffer, &w.buffer, bias_buffer, &out.buffer], out.len())
        .map_err(kiln::KernelError::from)?;
    pointwise::narrow(rec, out)
}

pub fn pooling(rec: &Recorder, p: &PoolingParams, x: &DeviceTensor, shape: &[usize]) -> KResult<DeviceTensor> {
    if x.shape.len() < 3 || shape.len() != x.shape.len() {
        return Err(kiln::invalid!("pooling needs N×C×spatial input, got {:?}", x.shape));
    }
    // The shader computes window positions in i32 without overflow checks.
    kiln::plan::pool::check_extent(p, &x.shape[2..], (i32::MAX / 4) as i128).map_err(|e| kiln::invalid!("{e}"))?;
    let out = output(rec, x.dtype, shape)?;
    let mut params = vec![count_word(out.len())?, count_word(x.shape[0] * x.shape[1])?];
    params.extend(three(&x.shape[2..], 1)?);
    params.extend(three(&shape[2..], 1)?);
    params.extend(three(&p.window, 1)?);
    params.extend(three(&p.strides, 1)?);
    params.extend(three(&p.dilations, 1)?);
    params.extend(three(&p.pre_padding, 0)?);
    params.extend(three(&p.post_padding, 0)?);
    params.push(u32::from(p.kind == PoolingKind::Average));
    params.push(u32::from(p.average_count_excludes_padding));
    rec.dispatch_1d(&Instance::plain("pool"), &params, &[&x.buffer, &out.buffer], out.len())
        .map_err(kiln::KernelError::from)?;
    pointwise::narrow(rec, out)
}

/// `softmax(scale · Q·Kᵀ + mask) · V`, as its parts.
pub fn attention(
    rec: &Recorder,
    p: &AttentionParams,
    [q, k, v]: [&DeviceTensor; 3],
    mask: Option<&DeviceTensor>,
    shape: &[usize],
    dtype: DataType,
) -> KResult<DeviceTensor> {
    // Inputs given as levels, dequantized as the DequantizeLinear they stand for did.
    let dequantized = |slot: usize, x: &DeviceTensor| -> KResult<Option<DeviceTensor>> {
        let (Some(grid), Some(levels)) = (p.input_grid(slot), p.input_levels) else { return Ok(None) };
        let (scale, zero) = grid_operands(rec, &grid)?;
        Ok(Some(super::quant::dequantize(rec, x, &scale, Some(&zero), None, levels.to)?))
    };
    let (dq, dk, dv) = (dequantized(0, q)?, dequantized(1, k)?, dequantized(2, v)?);
    let (q, k, v) = (dq.as_ref().unwrap_or(q), dk.as_ref().unwrap_or(k), dv.as_ref().unwrap_or(v));
    let op_k = if p.key_transposed { MatrixOp::None } else { MatrixOp::Transpose };
    let (pq, pk) = (MatrixOperand::new(&q.shape, MatrixOp::None, true)?, MatrixOperand::new(&k.shape, op_k, false)?);
    let mut scores_shape = kiln_broadcast(&pq.batch, &pk.batch)?;
    scores_shape.extend([pq.rows, pk.cols]);
    let mut scores = matmul(rec, q, MatrixOp::None, k, op_k, &scores_shape, q.dtype)?;
    if let Some(grid) = &p.product_levels {
        scores = through_levels(rec, &scores, grid)?;
    }
    let scale = pointwise::fill(rec, q.dtype, &[], p.scale.to_bits())?;
    let op = if p.scale_multiplies { ElementwiseOp::Prod } else { ElementwiseOp::Div };
    let mut scores = pointwise::binary(rec, op, &scores, &scale, &scores_shape, q.dtype)?;
    if let Some(grid) = &p.scores_levels {
        scores = through_levels(rec, &scores, grid)?;
    }
    if let Some(mask) = mask {
        let masked_shape = kiln_broadcast(&scores_shape, &mask.shape)?;
        scores = pointwise::binary(rec, ElementwiseOp::Sum, &scores, mask, &masked_shape, q.dtype)?;
    }
    let last = scores.shape.len() - 1;
    let mut probs = softmax(rec, &scores, last)?;
    if p.zero_nan_rows {
        // Where(IsNaN(p), 0, p), as the recognized graph computed it.
        let is_nan = pointwise::unary(rec, kiln::UnaryOp::IsNan, &probs, DataType::Bool)?;
        let zero = pointwise::fill(rec, probs.dtype, &[], 0f32.to_bits())?;
        probs = pointwise::select(rec, &is_nan, &zero, &probs, &probs.shape)?;
    }
    if let Some(grid) = &p.probs_levels {
        probs = through_levels(rec, &probs, grid)?;
    }
    // With output levels, the float the unfused graph stored (q's type), then its levels.
    let out = matmul(rec, &probs, MatrixOp::None, v, MatrixOp::None, shape, if p.output_levels.is_some() { q.dtype } else { dtype })?;
    match &p.output_levels {
        Some(grid) => {
            let (scale, zero) = grid_operands(rec, grid)?;
            super::quant::quantize(rec, &out, &scale, Some(&zero), None, grid.levels)
        }
        None => Ok(out),
    }
}

/// `grid`'s scale and zero point, uploaded as the operands of a QuantizeLinear / DequantizeLinear.
fn grid_operands(rec: &Recorder, grid: &kiln::LevelGrid) -> KResult<(DeviceTensor, DeviceTensor)> {
    let (scale, zero) = grid.operands().map_err(|e| kiln::invalid!("attention's levels: {e}"))?;
    Ok((rec.upload(&scale)?, rec.upload(&zero)?))
}

/// `DequantizeLinear(QuantizeLinear(x))` on `grid`, back in x's type.
fn through_levels(rec: &Recorder, x: &DeviceTensor, grid: &kiln::LevelGrid) -> KResult<DeviceTensor> {
    let (scale, zero) = grid_operands(rec, grid)?;
    let levels = super::quant::quantize(rec, x, &scale, Some(&zero), None, grid.levels)?;
    super::quant::dequantize(rec, &levels, &scale, Some(&zero), None, x.dtype)
}

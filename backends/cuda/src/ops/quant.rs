//! The integer layer of explicit quantization ([`kiln::QuantizedParams`]) on CUDA: the exact
//! sum of 8-bit products on INT8 tensor cores where the layer is in their form, and the
//! requantizing epilogue per output channel in the f32 operations of kiln-cpu's oracle.
//!
//! - **Convolutions** (2-D, one group): kiln's implicit-GEMM kernel (`ops::int8_conv`) with
//!   the epilogue fused, int8 NHWC in and out, channels zero-padded to a multiple of 16. The
//!   other tactic, timed against it by the builder (`INT8_CONV_LIBRARY`), is the libraries' sums
//!   followed by the epilogue kernel (`quant_requantize` in kernels/typed.cu): cuBLASLt IMMA for
//!   a 1×1 filter, cuDNN's INT8 NHWC convolution (INT8_EXT_CONFIG, f32 sums) for channels in
//!   multiples of 4, the f32 fallback below otherwise.
//! - **Depthwise convolutions** (K×K filters of 3, 5 or 7, stride 1 or 2, channels in 8s):
//!   kiln's depthwise kernel (`ops::int8_depthwise`), the levels-only epilogue fused, or its
//!   int32 sums and the epilogue kernel.
//! - **Products** (`A[…, k]` by constant `B`): cuBLASLt IMMA, int8 × int8 → int32. Its "TN"
//!   form wants `B` stored `[n, k]`: constant weights stored `[k, n]` are transposed once.
//! - The output stays NHWC, so a chain of INT8 convolutions never changes layout.
//! - **FP8** (float8 e4m3fn operands): products on cuBLASLt's FP8 tensor cores, x's and w's
//!   scales applied by cuBLASLt and the float output stored directly where the layer has no bias
//!   or ReLU; else f32 sums and the epilogue kernel. FP8 convolutions take the f32 fallback.
//! - All want int8 operands with zero points 0 (symmetric quantization, the form TensorRT and
//!   PyTorch export). Anything else (uint8 activations, weight zero points, grouped, 1-D or
//!   other depthwise convolutions) subtracts its zero points in f32 and runs the float
//!   layer without TF32: exact while partial sums stay below 2^24, as f32 holds integers.

use super::int8_conv::MainLoop;
use super::{compute, conv, int8_conv, int8_depthwise, int8_few_channels, layout, movement, pointwise, typed, Ctx, Value};
use crate::buffer::{Arg, DeviceTensor};
use crate::ops::KResult;
use crate::sources::Source;
use kiln::{invalid, DataType, ElementwiseOp, KernelError, MatrixOp, QuantizedAnchor, QuantizedParams as Q};

/// The tactics of an integer convolution (`Ctx::gemm_rank`): kiln's implicit-GEMM kernel with
/// the epilogue fused (the default), or the libraries' sums (cuBLASLt for 1×1 filters, cuDNN
/// otherwise) followed by the epilogue kernel.
pub const INT8_CONV_KILN: usize = 0;
pub const INT8_CONV_LIBRARY: usize = 1;
/// kiln's kernel on Hopper's wgmma main loop (sm_90 only).
pub const INT8_CONV_KILN_WGMMA: usize = 2;
/// kiln's kernel for inputs of at most 4 channels (`ops::int8_few_channels`: stems), offered
/// where its levels-only epilogue may run; elsewhere it runs the implicit GEMM's best main loop.
pub const INT8_CONV_KILN_FEW_CHANNELS: usize = 3;
/// A convolution on Hopper's warp-specialized kernel (`ops::int8_gemm`; sm_90 only): a pointwise
/// one (1×1 filters of unit stride without padding) as a product, any other without a lookup or
/// join with its activations gathered by the producer, in tiles of 64 × 128; likewise in tiles
/// of 128 × 128, (pointwise only) of 64 × 192, of 128 × 64 and of 256 × 128. Offered where int8_gemm.cu has
/// the kernel; a layer whose epilogue it cannot run falls back to the convolution kernel's wgmma
/// loop.
pub const INT8_CONV_KILN_WARP_SPECIALIZED: usize = 4;
pub const INT8_CONV_KILN_WARP_SPECIALIZED_M128: usize = 5;
pub const INT8_CONV_KILN_WARP_SPECIALIZED_N192: usize = 6;
pub const INT8_CONV_KILN_WARP_SPECIALIZED_N64: usize = 7;
pub const INT8_CONV_KILN_WARP_SPECIALIZED_M256: usize = 8;
/// kiln's depthwise kernel (`ops::int8_depthwise`), a depthwise layer's one tactic: the levels-only
/// epilogue fused where it runs, its int32 sums and the epilogue kernel elsewhere. Depthwise
/// layers run it whatever the rank (nothing else takes them but the f32 fallback).
pub const INT8_CONV_KILN_DEPTHWISE: usize = 9;
/// The tactics of an integer product by constant weights: cuBLASLt IMMA's int32 sums then the
/// epilogue kernel (the default), or kiln's convolution kernel with the epilogue fused, the
/// rows of x as the pixels of a 1×1 convolution (no int32 sums in memory).
pub const INT8_PRODUCT_LIBRARY: usize = 0;
pub const INT8_PRODUCT_KILN: usize = 1;
/// kiln's kernel on Hopper's wgmma main loop (sm_90 only).
pub const INT8_PRODUCT_KILN_WGMMA: usize = 2;
/// The product on Hopper's warp-specialized kernel (`ops::int8_gemm`; sm_90 only), in tiles of
/// 64 × 128; likewise in tiles of 128 × 128, 64 × 192, 128 × 64 and 256 × 128.
pub const INT8_PRODUCT_KILN_WARP_SPECIALIZED: usize = 3;
pub const INT8_PRODUCT_KILN_WARP_SPECIALIZED_M128: usize = 4;
pub const INT8_PRODUCT_KILN_WARP_SPECIALIZED_N192: usize = 5;
pub const INT8_PRODUCT_KILN_WARP_SPECIALIZED_N64: usize = 6;
pub const INT8_PRODUCT_KILN_WARP_SPECIALIZED_M256: usize = 7;
/// The ranks of kiln's main loops ([`kiln_main_loop`]'s order) among each kind's tactics.
pub const INT8_CONV_MAIN_LOOPS: [usize; 7] = [
    INT8_CONV_KILN,
    INT8_CONV_KILN_WGMMA,
    INT8_CONV_KILN_WARP_SPECIALIZED,
    INT8_CONV_KILN_WARP_SPECIALIZED_M128,
    INT8_CONV_KILN_WARP_SPECIALIZED_N192,
    INT8_CONV_KILN_WARP_SPECIALIZED_N64,
    INT8_CONV_KILN_WARP_SPECIALIZED_M256,
];
pub const INT8_PRODUCT_MAIN_LOOPS: [usize; 7] = [
    INT8_PRODUCT_KILN,
    INT8_PRODUCT_KILN_WGMMA,
    INT8_PRODUCT_KILN_WARP_SPECIALIZED,
    INT8_PRODUCT_KILN_WARP_SPECIALIZED_M128,
    INT8_PRODUCT_KILN_WARP_SPECIALIZED_N192,
    INT8_PRODUCT_KILN_WARP_SPECIALIZED_N64,
    INT8_PRODUCT_KILN_WARP_SPECIALIZED_M256,
];

static FUSED_PRODUCTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many integer products this process has run on kiln's kernel (`INT8_PRODUCT_KILN`).
pub fn fused_products_enqueued() -> u64 {
    FUSED_PRODUCTS.load(std::sync::atomic::Ordering::Relaxed)
}

/// The layer's constants, read on the host (scales and zero points are initializers).
struct Constants {
    x_scale: f32,
    x_zero: f64,
    w_scale: Vec<f32>,
    w_zero: Option<Vec<f64>>,
    /// One output scale, or one per channel (sibling products side by side); empty: none.
    y_scale: Vec<f32>,
    y_zero: f64,
    /// The largest |int32 bias| where its values are on the host (0 without a bias), which the
    /// levels-only convolution epilogue starts its sums at; None where they are not.
    int_bias_bound: Option<u64>,
}

impl Constants {
    /// The output scale where the arithmetic divides by it: one value (None: no scale).
    fn one_y_scale(&self) -> KResult<Option<f32>> {
        match self.y_scale[..] {
            [] => Ok(None),
            [s] => Ok(Some(s)),
            _ => Err(invalid!("{} output scales where the levels are dequantized with one", self.y_scale.len())),
        }
    }

    /// int8 operands with zero points all 0: the sums of the stored integers are the layer's,
    /// the form INT8 tensor cores take.
    fn tensor_core_form(&self, x: &DeviceTensor, w: &DeviceTensor) -> bool {
        x.dtype == DataType::I8 && w.dtype == DataType::I8 && self.x_zero == 0.0 && self.w_zero.as_ref().is_none_or(|z| z.iter().all(|&v| v == 0.0))
    }
}

pub fn quantized(cx: &Ctx, p: &Q, inputs: &[Option<Value>], out_shape: &[usize], out_dtype: DataType) -> KResult<DeviceTensor> {
    let value = |slot: usize| inputs.get(slot).and_then(Option::as_ref);
    let host = |slot: usize| -> KResult<Option<Vec<f64>>> { value(slot).map(|v| cx.host(v).map(|t| t.to_f64_vec())).transpose() };
    let first = |slot: usize| -> KResult<Option<f64>> { Ok(host(slot)?.and_then(|v| v.first().copied())) };
    // The int32 sums (ConvInteger, MatMulInteger) have no scales: 1 stands in, unused.
    let unscaled = p.sums_output().then_some(1.0);
    let constants = Constants {
        x_scale: first(Q::X_SCALE)?.or(unscaled).ok_or_else(|| invalid!("the integer layer has no x scale"))? as f32,
        x_zero: first(Q::X_ZERO)?.unwrap_or(0.0),
        w_scale: host(Q::W_SCALE)?.or(unscaled.map(|s| vec![s])).ok_or_else(|| invalid!("the integer layer has no weight scale"))?.iter().map(|&s| s as f32).collect(),
        w_zero: host(Q::W_ZERO)?,
        y_scale: host(Q::Y_SCALE)?.unwrap_or_default().iter().map(|&s| s as f32).collect(),
        y_zero: first(Q::Y_ZERO)?.unwrap_or(0.0),
        // Read from the constant's host copy only: a download here would sit on every run.
        int_bias_bound: match value(Q::BIAS) {
            None => Some(0),
            Some(v) => v.host.as_ref().map(|b| b.to_f64_vec().iter().fold(0u64, |m, &x| m.max(x.abs() as u64))),
        },
    };
    let x = cx.dev_any_layout(value(Q::X).ok_or_else(|| invalid!("input x is missing"))?)?;
    let w = cx.dev(value(Q::W).ok_or_else(|| invalid!("input w is missing"))?)?;
    for t in [&x, &w] {
        if !Q::operand_type(t.dtype) {
            return Err(invalid!("an integer layer takes int8, uint8 or float8 e4m3fn operands, not {}", t.dtype));
        }
    }
    let bias = value(Q::BIAS).map(|v| cx.dev(v)).transpose()?;
    let read = |slot: usize, scale: usize, zero: usize| -> KResult<Option<Residual>> {
        let Some(v) = value(slot) else { return Ok(None) };
        Ok(Some(Residual { tensor: cx.dev_any_layout(v)?, scale: first(scale)?.unwrap_or(1.0) as f32, zero: first(zero)?.unwrap_or(0.0) as f32 }))
    };
    let residual = read(Q::RESIDUAL, Q::RESIDUAL_SCALE, Q::RESIDUAL_ZERO)?;
    let then = match p.then {
        Some(then) => Some(SecondQuantization {
            then,
            scale: first(Q::THEN_SCALE)?.ok_or_else(|| invalid!("the second quantization has no scale"))? as f32,
            zero: first(Q::THEN_ZERO)?.unwrap_or(0.0) as f32,
            join: read(Q::JOIN, Q::JOIN_SCALE, Q::JOIN_ZERO)?,
        }),
        None => None,
    };
    // Epilogue::new checks the table against the output: its type, [channels, 256], no `then`.
    let lookup = p.lookup.map(|_| cx.dev(value(Q::LOOKUP).ok_or_else(|| invalid!("the layer's lookup has no table"))?)).transpose()?;
    let terms = Terms { bias: bias.as_ref(), residual: residual.as_ref(), then: then.as_ref(), lookup: lookup.as_ref() };
    if p.sums_output() {
        let acc = sums(cx, p, &x, &w, &constants, out_shape)?;
        return match acc.dtype {
            DataType::I32 => Ok(acc),
            // f32 sums of integers below 2^24: exact, and so is their conversion.
            _ => Ok(pointwise::cast(cx, &acc, DataType::I32)?.with_strides_of(&acc)),
        };
    }
    let product_loop = kiln_main_loop(cx.gemm_rank.get(), INT8_PRODUCT_MAIN_LOOPS).filter(|_| constants.tensor_core_form(&x, &w));
    match (&p.anchor, product_loop) {
        (QuantizedAnchor::Convolution(c), _) => {
            // The kernel writes f32 or levels: an f16 / bf16 output is its f32 rounded after.
            let wide = if Q::float_output_type(out_dtype) { DataType::F32 } else { out_dtype };
            // A depthwise layer's levels from kiln's depthwise kernel where its epilogue is the
            // levels-only one (else its sums below, then the epilogue kernel, which builds its
            // own epilogue: a float output never takes the levels, so builds none here).
            if wide.is_8bit_integer() && constants.tensor_core_form(&x, &w) && int8_depthwise::applies(c, &x.shape, &w.shape).is_some() {
                let epilogue = Epilogue::new(cx, p, &terms, true, &constants, wide, out_shape.get(1).copied().unwrap_or(1))?;
                if let Some(out) = int8_depthwise::levels(cx, c, &x, &w, &epilogue, out_shape, wide)? {
                    return Ok(out);
                }
            }
            let few_channels = cx.gemm_rank.get() == INT8_CONV_KILN_FEW_CHANNELS;
            // The few-channel kernel's fallback, for an epilogue it does not run: the implicit
            // GEMM on the device's best main loop.
            let rank = match few_channels {
                true if MainLoop::Wgmma.available(cx.gpu) => INT8_CONV_KILN_WGMMA,
                true => INT8_CONV_KILN,
                false => cx.gemm_rank.get(),
            };
            // A grouped layer on kiln's kernel: its groups merged into one, the filter
            // block-diagonal (converted once).
            let merged = int8_conv::merged(c, &x.shape, &w.shape).filter(|_| kiln_main_loop(rank, INT8_CONV_MAIN_LOOPS).is_some());
            let merged_w = merged.as_ref().map(|_| cx.gpu.converted_weights(&w, "merged_groups_1", |t| conv::merge_groups(cx, t, c.groups, 1))).transpose()?;
            let (c, w) = match (&merged, merged_w) {
                (Some((one_group, _)), Some(block_diagonal)) => (one_group, block_diagonal),
                _ => (c, w.clone()),
            };
            let kiln_kernel = kiln_main_loop(rank, INT8_CONV_MAIN_LOOPS).filter(|_| constants.tensor_core_form(&x, &w) && int8_conv::applies(c, &x.shape, &w.shape, wide));
            if let Some(main_loop) = kiln_kernel {
                let channels = out_shape.get(1).copied().unwrap_or(1);
                let epilogue = Epilogue::new(cx, p, &terms, true, &constants, wide, channels)?;
                if few_channels {
                    if let Some(out) = int8_few_channels::convolution(cx, c, &x, &w, &epilogue, out_shape, wide)? {
                        return Ok(out);
                    }
                }
                if let Some(out) = int8_conv::convolution(cx, main_loop, c, &x, &w, &epilogue, out_shape, wide)? {
                    // An elementwise copy of the channels-last sums: the layout stays.
                    return Ok(pointwise::cast(cx, &out, out_dtype)?.with_strides_of(&out));
                }
            }
        }
        (QuantizedAnchor::MatrixMultiply { op_a: MatrixOp::None, op_b }, Some(main_loop)) => {
            if let Some(out) = product_as_pointwise_convolution(cx, p, main_loop, *op_b, &x, &w, &terms, &constants, out_shape, out_dtype)? {
                return Ok(out);
            }
        }
        (QuantizedAnchor::MatrixMultiply { op_a, op_b }, _) if Q::is_fp8(x.dtype) && bias.is_none() && residual.is_none() && then.is_none() && !p.relu && *op_a == MatrixOp::None => {
            if let Some(out) = fp8_product(cx, *op_b, &x, &w, &constants, out_shape, out_dtype)? {
                return Ok(out);
            }
        }
        (QuantizedAnchor::MatrixMultiply { .. }, _) => {}
    }
    let acc = sums(cx, p, &x, &w, &constants, out_shape)?;
    requantize(cx, p, &acc, &terms, &constants, out_dtype)
}

/// The main loop of kiln's kernel that tactic `rank` names, given the ranks of its mma.sync,
/// wgmma and warp-specialized (one a tile) tactics; `None` for the libraries' tactics.
pub fn kiln_main_loop(rank: usize, [mma_sync, wgmma, m64n128, m128n128, m64n192, m128n64, m256n128]: [usize; 7]) -> Option<MainLoop> {
    use super::int8_gemm::Tile;
    match rank {
        r if r == mma_sync => Some(MainLoop::MmaSync),
        r if r == wgmma => Some(MainLoop::Wgmma),
        r if r == m64n128 => Some(MainLoop::WarpSpecialized(Tile::M64N128)),
        r if r == m128n128 => Some(MainLoop::WarpSpecialized(Tile::M128N128)),
        r if r == m64n192 => Some(MainLoop::WarpSpecialized(Tile::M64N192)),
        r if r == m128n64 => Some(MainLoop::WarpSpecialized(Tile::M128N64)),
        r if r == m256n128 => Some(MainLoop::WarpSpecialized(Tile::M256N128)),
        _ => None,
    }
}

/// The layer's sums (int32 on the tensor-core paths, f32 on the others) in memory.
fn sums(cx: &Ctx, p: &Q, x: &DeviceTensor, w: &DeviceTensor, k: &Constants, out_shape: &[usize]) -> KResult<DeviceTensor> {
    match &p.anchor {
        QuantizedAnchor::Convolution(c) => convolution_sums(cx, c, x, w, k, out_shape),
        QuantizedAnchor::MatrixMultiply { op_a, op_b } => product_sums(cx, *op_a, *op_b, x, w, k, out_shape),
    }
}

/// The sums of a convolution: cuBLASLt's IMMA for a 1×1 filter, kiln's depthwise kernel, cuDNN's
/// INT8 convolution (NHWC, f32 out) where each applies, else the float fallback.
fn convolution_sums(cx: &Ctx, c: &kiln::ConvolutionParams, x: &DeviceTensor, w: &DeviceTensor, k: &Constants, out_shape: &[usize]) -> KResult<DeviceTensor> {
    let integer = k.tensor_core_form(x, w);
    if integer && pointwise_filter(c, &x.shape, &w.shape) {
        // A 1×1 filter over NHWC pixels is one product: [n·h·w, c] by the filter [k, c].
        let (rows, channels, filters) = (x.len() / x.shape[1], x.shape[1], w.shape[0]);
        let g = crate::blas::Gemm { m: rows as u64, n: filters as u64, k: channels as u64, ..integer_gemm() };
        if let Some(g) = fast_path(cx.gpu.blas.ready(&g).map(|()| g), "1x1 convolution", &x.shape) {
            let x = layout::to_channels_last(cx, x)?;
            let out = super::empty_in_layout(cx, DataType::I32, out_shape, true)?;
            if out.len() != rows * filters {
                return Err(invalid!("a 1x1 convolution of {:?} by {:?} into {out_shape:?}", x.shape, w.shape));
            }
            if !out.is_empty() {
                cx.gpu.blas.matmul(&g, 0, &x.buf, &w.buf, &out.buf).map_err(KernelError::from)?;
            }
            return Ok(out);
        }
    }
    if integer {
        if let Some(out) = int8_depthwise::sums(cx, c, x, w, out_shape)? {
            return Ok(out);
        }
    }
    if let (true, Ok(dnn)) = (integer, cx.gpu.dnn()) {
        let spec = crate::dnn::ConvSpec::integer(c, &x.shape, &w.shape, out_shape).and_then(|spec| dnn.algorithms(&spec).map(|_| spec));
        if let Some(spec) = fast_path(spec, "convolution", &x.shape) {
            let x = layout::to_channels_last(cx, x)?;
            let w = cx.gpu.converted_weights(w, "krsc", |t| layout::to_channels_last(cx, t))?;
            let out = super::empty_in_layout(cx, DataType::F32, out_shape, true)?;
            if !out.is_empty() {
                dnn.convolution(cx.gpu, &spec, None, &x, &w, crate::dnn::ConvEpilogue::default(), &out)?;
            }
            return Ok(out);
        }
    }
    let exact = Ctx::new(cx.gpu, false);
    let (xf, wf) = float_operands(&exact, x, w, k, 0)?;
    Ok(conv::convolution(&exact, c, &xf, &wf, None, conv::ConvTail::default(), out_shape)?.0)
}

/// The sums of a product: cuBLASLt IMMA (int32 out) where it applies, else the float fallback.
/// `B` is constant weights `[k, n]` (or `[n, k]` transposed), or, batched, an activation of
/// A's batch dims (attention's Q·Kᵀ and P·V): one strided-batch IMMA product.
fn product_sums(cx: &Ctx, op_a: MatrixOp, op_b: MatrixOp, x: &DeviceTensor, w: &DeviceTensor, k: &Constants, out_shape: &[usize]) -> KResult<DeviceTensor> {
    let x = layout::to_row_major(cx, x)?;
    let rank = w.shape.len();
    let batch_dims = &w.shape[..rank.saturating_sub(2)];
    let (kk, n) = depth_and_columns(op_b, &w.shape[rank.saturating_sub(2)..]).unwrap_or((0, 0));
    // A batched B goes with A's own batch dims (no broadcasting): x is [batch.., m, k].
    let batched = rank > 2 && x.shape.len() == rank && x.shape[..rank - 2] == *batch_dims;
    // INT8 (IMMA, exact int32 sums) or FP8 (f32 sums) tensor cores.
    let fp8 = Q::is_fp8(x.dtype) && Q::is_fp8(w.dtype);
    let integer = (k.tensor_core_form(&x, w) || fp8) && op_a == MatrixOp::None && (rank == 2 || batched);
    if integer && x.shape.len() >= 2 && x.shape.last() == Some(&kk) && kk > 0 {
        let batch: usize = batch_dims.iter().product();
        let m = x.len() / (batch.max(1) * kk);
        let g = crate::blas::Gemm {
            m: m as u64,
            n: n as u64,
            k: kk as u64,
            batch: batch.max(1) as u64,
            stride_a: (m * kk) as i64,
            stride_b: (n * kk) as i64,
            stride_c: (m * n) as i64,
            dtype: x.dtype,
            ..integer_gemm()
        };
        if let Some(g) = fast_path(cx.gpu.blas.ready(&g).map(|()| g), "product", &x.shape) {
            return int8_product(cx, &g, &x, w, op_b, out_shape);
        }
    }
    let exact = Ctx::new(cx.gpu, false);
    let axis = match op_b {
        MatrixOp::Transpose => w.shape.len().saturating_sub(2),
        _ => w.shape.len().saturating_sub(1),
    };
    let (xf, wf) = float_operands(&exact, &x, w, k, axis)?;
    Ok(compute::matmul_epilogue(&exact, 0, &xf, op_a, &wf, op_b, 1.0, out_shape, None, None)?.0)
}

/// The depth `k` and columns `n` of a product's B: `[k, n]`, or `[n, k]` transposed.
fn depth_and_columns(op_b: MatrixOp, b_shape: &[usize]) -> Option<(usize, usize)> {
    match (op_b, b_shape) {
        (MatrixOp::None, &[k, n]) | (MatrixOp::Transpose, &[n, k]) => Some((k, n)),
        _ => None,
    }
}

/// An int8 product `x[.., m, k] · w` (w constant `[k, n]`, or `[n, k]` transposed) on kiln's
/// convolution kernel, the epilogue fused: row-major `[m, k]` is the NHWC image `[1, 1, m, k]`
/// of a 1×1 convolution by `[n, k, 1, 1]`, whose NHWC output is row-major `[m, n]`. None where
/// the kernel does not take it (the caller runs the library's sums).
#[allow(clippy::too_many_arguments)]
fn product_as_pointwise_convolution(
    cx: &Ctx,
    p: &Q,
    main_loop: MainLoop,
    op_b: MatrixOp,
    x: &DeviceTensor,
    w: &DeviceTensor,
    terms: &Terms,
    k: &Constants,
    out_shape: &[usize],
    out_dtype: DataType,
) -> KResult<Option<DeviceTensor>> {
    let Some((depth, n)) = depth_and_columns(op_b, &w.shape) else { return Ok(None) };
    if x.shape.last() != Some(&depth) || depth == 0 || out_shape.iter().product::<usize>() != x.len() / depth * n {
        return Ok(None);
    }
    let rows = x.len() / depth;
    let wide = if Q::float_output_type(out_dtype) { DataType::F32 } else { out_dtype };
    let conv = kiln::ConvolutionParams { groups: 1, strides: vec![1, 1], dilations: vec![1, 1], pre_padding: vec![0, 0], post_padding: vec![0, 0] };
    let image = [1, depth, 1, rows];
    let pixels = DeviceTensor { strides: Some(DeviceTensor::channels_last_strides(&image)), ..layout::to_row_major(cx, x)?.reshaped(image.to_vec()) };
    let filters = b_as_nk(cx, w, op_b)?.reshaped(vec![n, depth, 1, 1]);
    if !int8_conv::applies(&conv, &pixels.shape, &filters.shape, wide) {
        return Ok(None);
    }
    // The output is row-major [rows, n]: so is the residual read beside it.
    let epilogue = Epilogue::new(cx, p, terms, false, k, wide, n)?;
    let Some(out) = int8_conv::convolution(cx, main_loop, &conv, &pixels, &filters, &epilogue, &[1, n, 1, rows], wide)? else { return Ok(None) };
    FUSED_PRODUCTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(Some(pointwise::cast(cx, &out.reshaped(out_shape.to_vec()), out_dtype)?))
}

/// An INT8 product `A[m, k] · B[n, k]ᵀ` (cuBLASLt's IMMA form) with its sizes still to set.
fn integer_gemm() -> crate::blas::Gemm {
    crate::blas::Gemm {
        dtype: DataType::I8,
        scaled: None,
        tf32: false,
        m: 0,
        n: 0,
        k: 0,
        batch: 1,
        trans_a: false,
        trans_b: true,
        stride_a: 0,
        stride_b: 0,
        stride_c: 0,
        alpha: 1.0,
        epilogue: crate::blas::Epilogue::None,
    }
}

/// A 2-D convolution that reads each pixel alone: a 1×1 filter, stride 1, no padding, one group.
pub(crate) fn pointwise_filter(c: &kiln::ConvolutionParams, x: &[usize], w: &[usize]) -> bool {
    x.len() == 4
        && w.len() == 4
        && w[2] == 1
        && w[3] == 1
        && c.groups <= 1
        && c.strides.iter().all(|&s| s == 1)
        && c.pre_padding.iter().chain(&c.post_padding).all(|&p| p == 0)
        && x[1] == w[1]
}

/// A symmetric int8 layer's tensor-core plan, or None (said once per reason) when the library
/// refuses it: the layer then runs on the exact f32 fallback.
fn fast_path<T>(plan: Result<T, crate::error::GpuError>, what: &str, x_shape: &[usize]) -> Option<T> {
    match plan {
        Ok(plan) => Some(plan),
        Err(e) => {
            say_once(format!("an 8-bit {what} on {x_shape:?} runs in f32 (exact, slower): no tensor-core path: {e}"));
            None
        }
    }
}

/// Logs why a layer left the fast path, once per distinct reason.
pub(super) fn say_once(message: String) {
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|p| p.into_inner());
    if !said.contains(&message) {
        tracing::info!(target: "kiln::int8", "{message}");
        said.push(message);
    }
}

/// B of an 8-bit tensor-core product as `[.., n, k]`, the form cuBLASLt's INT8 and FP8 kernels
/// take: constant weights stored `[k, n]` are converted once, a batched activation per run.
fn b_as_nk(cx: &Ctx, w: &DeviceTensor, op_b: MatrixOp) -> KResult<DeviceTensor> {
    let rank = w.shape.len();
    let last_two_swapped: Vec<usize> = (0..rank).map(|d| if d + 2 == rank { rank - 1 } else if d + 1 == rank { rank - 2 } else { d }).collect();
    match op_b {
        MatrixOp::Transpose => layout::to_row_major(cx, w),
        _ => cx.gpu.converted_weights(w, "int8_nk", |t| movement::transpose(cx, t, &last_two_swapped)),
    }
}

/// `x[.., m, k] · B` on cuBLASLt's 8-bit tensor cores into the sums: int32 (IMMA) or, for
/// float8, f32.
fn int8_product(cx: &Ctx, g: &crate::blas::Gemm, x: &DeviceTensor, w: &DeviceTensor, op_b: MatrixOp, out_shape: &[usize]) -> KResult<DeviceTensor> {
    let b = b_as_nk(cx, w, op_b)?;
    let sums = if g.dtype == DataType::I8 { DataType::I32 } else { DataType::F32 };
    let out = cx.gpu.empty(sums, out_shape.to_vec()).map_err(KernelError::from)?;
    if out.len() as u64 != g.m * g.n * g.batch || b.len() as u64 != g.n * g.k * g.batch {
        return Err(invalid!("an INT8 product of {:?} by {:?} into {out_shape:?}", x.shape, w.shape));
    }
    if !out.is_empty() {
        cx.gpu.blas.matmul(g, 0, &x.buf, &b.buf, &out.buf).map_err(KernelError::from)?;
    }
    Ok(out)
}

/// An FP8 product `x[m, k] · w` (w constant `[k, n]`, or `[n, k]` transposed) whose whole layer
/// cuBLASLt runs: x's scale and w's (one, or one per output column) scale the sums on Hopper's
/// FP8 tensor cores and the output is stored in its own type, with no sums in memory. None
/// where cuBLASLt takes neither scale form (the sums and the epilogue kernel run it then).
fn fp8_product(cx: &Ctx, op_b: MatrixOp, x: &DeviceTensor, w: &DeviceTensor, k: &Constants, out_shape: &[usize], out_dtype: DataType) -> KResult<Option<DeviceTensor>> {
    let Some((kk, n)) = depth_and_columns(op_b, &w.shape) else { return Ok(None) };
    if !Q::is_fp8(w.dtype) || x.shape.last() != Some(&kk) || kk == 0 || !Q::float_output_type(out_dtype) || !k.x_scale.is_finite() {
        return Ok(None);
    }
    let m = x.len() / kk;
    let per_column = k.w_scale.len() > 1;
    if per_column && k.w_scale.len() != n {
        return Err(invalid!("{} weight scales for {n} output columns", k.w_scale.len()));
    }
    // A scalar x scale beside per-column w scales, else x's scale repeated per row.
    let forms = [false, true].into_iter().filter(|&a_per_row| !a_per_row || per_column);
    let mut refusal = None;
    for a_per_row in forms {
        let scaled = crate::blas::Scaled { out: out_dtype, b_per_column: per_column, a_per_row };
        let g = crate::blas::Gemm { dtype: DataType::F8E4M3FN, scaled: Some(scaled), m: m as u64, n: n as u64, k: kk as u64, ..integer_gemm() };
        if let Err(e) = cx.gpu.blas.ready(&g) {
            refusal = Some(e);
            continue;
        }
        say_once(format!("an FP8 product of {m}x{kk} by {kk}x{n} runs whole on cuBLASLt: {} scale for x, {} for w, {out_dtype} out", if a_per_row { "a row vector" } else { "one" }, if per_column { "one per column" } else { "one" }));
        let x = layout::to_row_major(cx, x)?;
        let b = b_as_nk(cx, w, op_b)?;
        let x_scale = f32_table(cx, vec![k.x_scale; if a_per_row { m } else { 1 }])?;
        let w_scale = f32_table(cx, k.w_scale.clone())?;
        let out = cx.gpu.empty(out_dtype, out_shape.to_vec()).map_err(KernelError::from)?;
        if out.len() != m * n {
            return Err(invalid!("an FP8 product of {:?} by {:?} into {out_shape:?}", x.shape, w.shape));
        }
        if !out.is_empty() {
            cx.gpu.blas.matmul_scaled(&g, 0, &x.buf, &b.buf, &x_scale.buf, &w_scale.buf, &out.buf).map_err(KernelError::from)?;
        }
        return Ok(Some(out));
    }
    if let Some(e) = refusal {
        say_once(format!("an FP8 product on {:?} sums into f32 before its epilogue kernel: cuBLASLt takes neither scale form: {e}", x.shape));
    }
    Ok(None)
}

/// The saturation bounds of 8-bit levels: uint8's, else int8's.
fn level_bounds(t: DataType) -> (f32, f32) {
    if t == DataType::U8 { (0.0, 255.0) } else { (-128.0, 127.0) }
}

/// `values` on the device, one copy per content (the context's constant tables).
fn f32_table(cx: &Ctx, values: Vec<f32>) -> KResult<DeviceTensor> {
    let len = values.len();
    cx.gpu.constant_table(&kiln::HostTensor::from_f32(vec![len], values).map_err(KernelError::from)?).map_err(KernelError::from)
}

/// `x − x_zero` and `w − w_zero` (per channel along `w_axis`) as f32: integers f32 holds exactly.
fn float_operands(cx: &Ctx, x: &DeviceTensor, w: &DeviceTensor, k: &Constants, w_axis: usize) -> KResult<(DeviceTensor, DeviceTensor)> {
    let shifted = |t: &DeviceTensor, zero: &[f64], axis: usize| -> KResult<DeviceTensor> {
        let t = pointwise::cast(cx, &layout::to_row_major(cx, t)?, DataType::F32)?;
        if zero.iter().all(|&z| z == 0.0) {
            return Ok(t);
        }
        let shape: Vec<usize> = match zero.len() {
            1 => vec![1],
            len => (0..t.shape.len()).map(|d| if d == axis { len } else { 1 }).collect(),
        };
        let zero = kiln::HostTensor::from_f32(shape, zero.iter().map(|&z| z as f32).collect()).map_err(KernelError::from)?;
        let zero = cx.gpu.upload(&zero).map_err(KernelError::from)?;
        pointwise::binary(cx, ElementwiseOp::Sub, &t, &zero, DataType::F32, &t.shape.clone())
    };
    Ok((shifted(x, &[k.x_zero], 0)?, shifted(w, k.w_zero.as_deref().unwrap_or(&[0.0]), w_axis)?))
}

/// A skip connection's operand added in the epilogue: f32, f16 or bf16, or 8-bit with its
/// dequantization.
#[derive(Debug)]
pub struct Residual {
    tensor: DeviceTensor,
    scale: f32,
    zero: f32,
}

/// The layer's second quantization ([`kiln::Requantization`]): its scale and zero point, and
/// the skip connection it joins.
#[derive(Debug)]
pub struct SecondQuantization {
    then: kiln::Requantization,
    scale: f32,
    zero: f32,
    join: Option<Residual>,
}

impl SecondQuantization {
    /// What the kernels read of a join (common.cuh's `Join`): its type code, scale and zero
    /// point, then the second quantization's scale, zero point, bounds and ReLU.
    fn join_params(&self, join: &Residual) -> Vec<f32> {
        let (lo, hi) = level_bounds(self.then.to);
        let code = typed::type_code(join.tensor.dtype) as f32;
        vec![code, join.scale, join.zero, self.scale, self.zero, lo, hi, f32::from(u8::from(self.then.relu))]
    }

    /// The second level of each first level's byte on the device (one copy per content), after
    /// the levels of `p` (`k`'s scale and zero point): the kernels look it up.
    fn levels(&self, cx: &Ctx, p: &Q, k: &Constants) -> KResult<DeviceTensor> {
        use kiln::plan::requantization::{second_levels, Dequantization};
        let first = Dequantization { dtype: p.output, scale: k.one_y_scale()?.ok_or_else(|| invalid!("the levels have no scale"))?, zero: k.y_zero as f32 };
        let levels = second_levels(self.then, first, self.scale, self.zero).map_err(|e| invalid!("{e}"))?;
        let table = kiln::HostTensor::new(vec![levels.len()], kiln::TensorData::U8(levels)).map_err(KernelError::from)?;
        cx.gpu.constant_table(&table).map_err(KernelError::from)
    }

    /// The second level of every pair of a join byte and a first level's byte (65,536 entries,
    /// `[join][level]`) on the device, one copy per set of parameters: the warp-specialized
    /// product looks a join up in it. None where the levels have no one scale or the join is
    /// not 8-bit.
    fn joined_levels(&self, cx: &Ctx, p: &Q, k: &Constants, join: &Residual) -> KResult<Option<DeviceTensor>> {
        use kiln::plan::requantization::joined_levels;
        let Some((first, second)) = join_dequantizations(p, k, join) else { return Ok(None) };
        let then = self.then;
        let name = format!("joined levels {first:?} {second:?} into {then:?} {:08x}/{:08x}", self.scale.to_bits(), self.zero.to_bits());
        let table = cx.gpu.named_table(name.into_bytes(), || {
            let levels = joined_levels(then, first, second, self.scale, self.zero)?;
            kiln::HostTensor::new(vec![levels.len()], kiln::TensorData::U8(levels)).map_err(|e| e.to_string())
        });
        Ok(Some(table.map_err(KernelError::from)?))
    }

    /// A join's line ([`kiln::plan::join_line`]) over the first levels the kernel makes (`p`'s
    /// clamp, its ReLU's floor included), where one gives the table's level for every pair:
    /// its words on the device, one copy per set of parameters. The search runs once a process
    /// for each (lines found or not are kept by name).
    fn joined_line(&self, cx: &Ctx, p: &Q, k: &Constants, join: &Residual) -> KResult<Option<DeviceTensor>> {
        use kiln::plan::join_line::joined_line;
        use kiln::plan::requantization::joined_levels;
        use std::collections::HashMap;
        use std::sync::{Mutex, OnceLock};
        static LINES: OnceLock<Mutex<HashMap<String, Option<[i32; 8]>>>> = OnceLock::new();
        let Some((first, second)) = join_dequantizations(p, k, join) else { return Ok(None) };
        let (lo, hi) = level_bounds(p.output);
        let first_levels = ((if p.relu { lo.max(k.y_zero as f32) } else { lo }) as i32, hi as i32);
        let then = self.then;
        let name = format!("joined line {first:?} {second:?} into {then:?} {:08x}/{:08x} over {first_levels:?}", self.scale.to_bits(), self.zero.to_bits());
        let words = *LINES.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner()).entry(name.clone()).or_insert_with(|| {
            let table = joined_levels(then, first, second, self.scale, self.zero).ok()?;
            let line = joined_line(&table, then, first, first_levels, second, self.scale);
            let form = line.map_or("keeps its table: no line gives every pair's level".to_string(), |l| format!("on its line {l:?}"));
            say_once(format!("a join of {first:?} and {second:?} into scale {} zero {}: {form}", self.scale, self.zero));
            line.map(|line| line.words())
        });
        let Some(words) = words else { return Ok(None) };
        let table = cx.gpu.named_table(name.into_bytes(), || kiln::HostTensor::new(vec![words.len()], kiln::TensorData::I32(words.to_vec())).map_err(|e| e.to_string()));
        Ok(Some(table.map_err(KernelError::from)?))
    }
}

/// A join's two dequantizations: the layer's levels (`p`'s output, `k`'s one scale and zero
/// point) and the join's bytes. None where the levels have no one scale or either is not 8-bit:
/// no table or line then.
fn join_dequantizations(p: &Q, k: &Constants, join: &Residual) -> Option<(kiln::plan::requantization::Dequantization, kiln::plan::requantization::Dequantization)> {
    use kiln::plan::requantization::Dequantization;
    let Ok(Some(y_scale)) = k.one_y_scale() else { return None };
    if !join.tensor.dtype.is_8bit_integer() || !p.output.is_8bit_integer() {
        return None;
    }
    Some((Dequantization { dtype: p.output, scale: y_scale, zero: k.y_zero as f32 }, Dequantization { dtype: join.tensor.dtype, scale: join.scale, zero: join.zero }))
}

/// What the epilogue adds to the scaled sums and does after them, besides the scales.
#[derive(Debug)]
pub struct Terms<'a> {
    bias: Option<&'a DeviceTensor>,
    residual: Option<&'a Residual>,
    then: Option<&'a SecondQuantization>,
    /// The levels' per-channel table ([`kiln::QuantizedParams::lookup`]), `[channels, 256]`.
    lookup: Option<&'a DeviceTensor>,
}

/// The requantizing epilogue's operands on the device, from the int32 bias to the residual's
/// zero point: the arguments `quant_requantize` and the INT8 convolution kernels share, in
/// their order.
#[derive(Debug)]
pub struct Epilogue {
    pub args: Vec<Arg>,
    /// The type the epilogue computes: the output's, or the levels' before a second quantization.
    pub computed: DataType,
    /// Where the levels-only epilogue of the convolution kernel (`_levels`) may run (levels
    /// out, no float term, finite scales), the largest |int32 bias| it starts the sums at;
    /// elsewhere why the general epilogue runs (the builder's log says so once).
    levels: Result<u64, &'static str>,
    /// Whether a join is added at the second quantization (the convolution kernel stages its
    /// bytes beside the output tile).
    pub joins: bool,
    /// Whether the levels are looked up in a per-channel table (the convolution kernel stages
    /// its block's rows beside the output tile).
    pub looks_up: bool,
    /// A join's second levels for every pair of bytes (`SecondQuantization::joined_levels`),
    /// where its bytes are 16-byte aligned: the warp-specialized product's join.
    pub join_table: Option<DeviceTensor>,
    /// The join's line where one holds every pair (`SecondQuantization::joined_line`): the
    /// warp-specialized product's join computes its levels on it instead of the table.
    pub join_line: Option<DeviceTensor>,
    /// The uploads `args` point to, alive until the launch is queued.
    _operands: Vec<DeviceTensor>,
}

impl Epilogue {
    /// An int32 bias added to the sums, the channel's scale, a float bias, a residual (read in
    /// the output's layout, channels-last or row-major), then the float output or the
    /// requantized level, for `channels` output channels.
    #[allow(clippy::too_many_arguments)]
    fn new(cx: &Ctx, p: &Q, terms: &Terms, channels_last: bool, k: &Constants, out_dtype: DataType, channels: usize) -> KResult<Epilogue> {
        let (bias, residual) = (terms.bias, terms.residual);
        let int_bias = bias.filter(|b| b.dtype == DataType::I32);
        let float_bias = bias.filter(|b| b.dtype != DataType::I32).map(|b| pointwise::cast(cx, b, DataType::F32)).transpose()?;
        // The kernels read these types in place (residual_at); an FP16 build's f16 skip
        // connection then costs no cast per run.
        let in_place = |r: &Residual| -> KResult<DeviceTensor> {
            let t = match r.tensor.dtype {
                DataType::F32 | DataType::F16 | DataType::BF16 | DataType::I8 | DataType::U8 => r.tensor.clone(),
                _ => pointwise::cast(cx, &r.tensor, DataType::F32)?.with_strides_of(&r.tensor),
            };
            layout::in_layout(cx, &t, channels_last)
        };
        let residual_values = residual.map(in_place).transpose()?;
        let join = terms.then.and_then(|t| t.join.as_ref().map(|j| (t, j)));
        let join_values = join.map(|(_, j)| in_place(j)).transpose()?;
        let join_params = join.map(|(t, j)| f32_table(cx, t.join_params(j))).transpose()?;
        // A join's second level depends on both bytes: no table of levels.
        let second_levels = terms.then.filter(|_| join.is_none()).map(|t| t.levels(cx, p, k)).transpose()?;
        let computed = if terms.then.is_some() || terms.lookup.is_some() { p.output } else { out_dtype };
        if p.quantized_output() && !matches!(computed, DataType::I8 | DataType::U8) {
            return Err(invalid!("a quantized output must be int8 or uint8, not {computed}"));
        }
        if let Some(t) = terms.then.filter(|t| !matches!(t.then.to, DataType::I8 | DataType::U8) || out_dtype != t.then.to || !p.quantized_output()) {
            return Err(invalid!("a second quantization takes {} levels to int8 or uint8, not {} into {out_dtype}", p.output, t.then.to));
        }
        if let Some(t) = terms.lookup.filter(|t| t.dtype != out_dtype || t.len() != channels * Q::LOOKUP_ROW || terms.then.is_some()) {
            return Err(invalid!("a lookup of {channels} channels wants a [{channels}, 256] {out_dtype} table after the levels, not {} of {:?}", t.dtype, t.shape));
        }
        // After the checks above: the table of a join whose second quantization they accept.
        let aligned = join_values.as_ref().is_some_and(|j| super::lane_aligned(cx, j, 16));
        let join_table = match join.filter(|_| aligned) {
            Some((t, j)) => t.joined_levels(cx, p, k, j)?,
            None => None,
        };
        let join_line = match join.filter(|_| join_table.is_some()) {
            Some((t, j)) => t.joined_line(cx, p, k, j)?,
            None => None,
        };
        let scale = p.channel_scales(k.x_scale, &k.w_scale, &k.y_scale, float_bias.is_some() || residual.is_some()).map_err(|e| invalid!("{e}"))?;
        for (what, len) in [("scales", scale.len()), ("float bias values", float_bias.as_ref().map_or(1, |b| b.len())), ("int32 bias values", int_bias.map_or(1, |b| b.len()))] {
            if len != 1 && len != channels {
                return Err(invalid!("{len} {what} for {channels} output channels"));
            }
        }
        let finite = scale.iter().all(|s| s.is_finite());
        let levels = match k.int_bias_bound {
            _ if !p.quantized_output() => Err("a float output"),
            _ if float_bias.is_some() => Err("a float bias"),
            _ if residual.is_some() => Err("a residual"),
            _ if !finite => Err("a scale that is not finite"),
            None => Err("an int32 bias with no host copy to bound"),
            Some(bound) => Ok(bound),
        };
        let scale_len = scale.len();
        let scale = f32_table(cx, scale)?;
        let (lo, hi) = level_bounds(computed);
        let args = vec![
            int_bias.map_or(Arg::NULL, |b| cx.arg(b)),
            cx.arg(&scale),
            Arg::I64(scale_len as i64),
            float_bias.as_ref().map_or(Arg::NULL, |b| cx.arg(b)),
            Arg::I64(float_bias.as_ref().map_or(1, |b| b.len()) as i64),
            Arg::F32(Q::divided_output_scale(&k.y_scale)),
            Arg::F32(k.y_zero as f32),
            Arg::F32(lo),
            Arg::F32(hi),
            Arg::I32(i32::from(p.relu)),
            residual_values.as_ref().map_or(Arg::NULL, |r| cx.arg(r)),
            Arg::I32(residual_values.as_ref().map_or(0, |r| typed::type_code(r.dtype))),
            Arg::F32(residual.map_or(1.0, |r| r.scale)),
            Arg::F32(residual.map_or(0.0, |r| r.zero)),
            // The second quantization's table of levels (NULL: none, or a join), at
            // SECOND_LEVELS_ARG.
            second_levels.as_ref().map_or(Arg::NULL, |l| cx.arg(l)),
            // The levels' per-channel table (NULL: none).
            terms.lookup.map_or(Arg::NULL, |t| cx.arg(t)),
            join_values.as_ref().map_or(Arg::NULL, |j| cx.arg(j)),
            join_params.as_ref().map_or(Arg::NULL, |j| cx.arg(j)),
        ];
        let joins = join_values.is_some();
        let looks_up = terms.lookup.is_some();
        // The convolution kernel copies a block's rows 16 bytes at a time.
        if terms.lookup.is_some_and(|t| !super::lane_aligned(cx, t, 16)) {
            return Err(invalid!("the lookup table is not 16-byte aligned"));
        }
        let operands = [Some(scale), float_bias, residual_values, second_levels, join_values, join_params].into_iter().flatten().collect();
        Ok(Epilogue { args, computed, levels, joins, looks_up, join_table, join_line, _operands: operands })
    }

    /// `args` with the join table in the second quantization's place (a join has no table of
    /// levels there): the warp-specialized product's join kernel reads it so.
    pub fn args_with_join_table(&self, cx: &Ctx) -> Option<Vec<Arg>> {
        Some(self.args_with_second(cx, self.join_table.as_ref()?))
    }

    /// `args` with `table` in the second quantization's place: a join's table or its line.
    pub fn args_with_second(&self, cx: &Ctx, table: &DeviceTensor) -> Vec<Arg> {
        let mut args = self.args.clone();
        args[Self::SECOND_LEVELS_ARG] = cx.arg(table);
        args
    }

    /// Where `args` holds the second quantization's table of levels.
    const SECOND_LEVELS_ARG: usize = 14;

    /// Whether the `_levels` kernels run this epilogue exactly over a sum of `depth` 8-bit
    /// products: the bias plus the largest such sum (128·128 per product) stays in int32.
    pub fn levels_exact(&self, depth: usize) -> bool {
        self.levels.is_ok_and(|bound| bound.saturating_add(16_384u64.saturating_mul(depth as u64)) <= i32::MAX as u64)
    }

    /// Why the `_levels` kernels do not run this epilogue over sums of `depth` products (for
    /// the log: it formats).
    pub fn general_reason(&self, depth: usize) -> Option<String> {
        match self.levels {
            Err(why) => Some(why.to_string()),
            Ok(_) if self.levels_exact(depth) => None,
            Ok(bound) => Some(format!("an int32 bias up to {bound} over a depth of {depth} may leave int32")),
        }
    }
}

/// The epilogue over sums in memory (`acc`, int32 or f32). The output keeps the sums' layout.
fn requantize(cx: &Ctx, p: &Q, acc: &DeviceTensor, terms: &Terms, k: &Constants, out_dtype: DataType) -> KResult<DeviceTensor> {
    // The residual and the join are read at the sums' own indices: channels-last or row-major sums.
    let per_element = terms.residual.is_some() || terms.then.is_some_and(|t| t.join.is_some());
    let acc = &match per_element {
        true if acc.strides.is_some() && !acc.channels_last() => layout::to_row_major(cx, acc)?,
        _ => acc.clone(),
    };
    let rank = acc.shape.len();
    let axis = p.anchor.output_channel_axis(rank);
    let channels = acc.shape.get(axis).copied().unwrap_or(1).max(1);
    // Elements between two channels in memory: 1 channels-last, the trailing dims row-major.
    let inner = if acc.channels_last() || axis + 1 >= rank { 1 } else { acc.shape[axis + 1..].iter().product::<usize>().max(1) };
    let epilogue = Epilogue::new(cx, p, terms, acc.channels_last(), k, out_dtype, channels)?;
    let mut out = cx.gpu.empty(out_dtype, acc.shape.clone()).map_err(KernelError::from)?;
    out.strides = acc.strides.clone();
    let n = out.len();
    if n == 0 {
        return Ok(out);
    }
    // Four channels a thread where they are innermost and come in fours (products, NHWC sums).
    let rows_x4 = inner == 1
        && channels % 4 == 0
        && n < 1 << 31
        && matches!(acc.dtype, DataType::I32 | DataType::F32)
        && matches!(out_dtype, DataType::I8 | DataType::U8 | DataType::F32 | DataType::F16 | DataType::BF16);
    let codes = [acc.dtype, epilogue.computed].map(|t| Arg::I32(typed::type_code(t)));
    let (kernel, threads, sizes) = match rows_x4 {
        true => ("quant_requantize_rows_x4", n / 4, vec![Arg::I32(channels as i32), Arg::I32((n / 4) as i32)]),
        false => ("quant_requantize", n, [inner, channels, n].map(|d| Arg::I64(d as i64)).to_vec()),
    };
    let mut args = [&codes[..], &sizes, &[cx.arg(acc)], &epilogue.args].concat();
    args.push(cx.arg(&out));
    cx.launch_elements(Source::Typed.kernel(kernel), threads, &args)?;
    Ok(out)
}

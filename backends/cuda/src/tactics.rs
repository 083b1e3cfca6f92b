//! Tactics: the first few algorithms cuBLASLt's heuristic ranks for a matrix product (plain or
//! heading a fused layer), the algorithms cuDNN's heuristic offers for a convolution (plain or
//! fused) plus kiln's direct kernel, all timed by the builder on the device; one default
//! tactic elsewhere.

use crate::blas::RANKED_ALGORITHMS;
use crate::exec::CudaExecutable;
use crate::ops::compute::SPARSE_GEMM;
use crate::ops::conv::{depthwise_rows, group_merges, is_depthwise, is_patchify, merged_group_counts, CONV_DEPTHWISE, CONV_DEPTHWISE_ROWS, CONV_DIRECT, CONV_MERGED_GROUPS, CONV_PATCH_GEMM, CONV_SPARSE_PATCH_GEMM};
use kiln::tactics::{TacticDesc, TacticId};
use crate::ops::int8_conv::MainLoop;
use crate::ops::quant::{
    kiln_main_loop, INT8_CONV_KILN, INT8_CONV_KILN_DEPTHWISE, INT8_CONV_KILN_FEW_CHANNELS, INT8_CONV_KILN_WARP_SPECIALIZED, INT8_CONV_KILN_WARP_SPECIALIZED_M128, INT8_CONV_KILN_WARP_SPECIALIZED_M256, INT8_CONV_KILN_WARP_SPECIALIZED_N192, INT8_CONV_KILN_WARP_SPECIALIZED_N64, INT8_CONV_KILN_WGMMA, INT8_CONV_LIBRARY,
    INT8_CONV_MAIN_LOOPS, INT8_PRODUCT_KILN, INT8_PRODUCT_KILN_WARP_SPECIALIZED, INT8_PRODUCT_KILN_WARP_SPECIALIZED_M128, INT8_PRODUCT_KILN_WARP_SPECIALIZED_M256, INT8_PRODUCT_KILN_WARP_SPECIALIZED_N192, INT8_PRODUCT_KILN_WARP_SPECIALIZED_N64, INT8_PRODUCT_KILN_WGMMA, INT8_PRODUCT_LIBRARY,
    INT8_PRODUCT_MAIN_LOOPS,
};
use kiln::{BackendError, ConvolutionParams, DataType, FusedAnchor, LayerId, LayerKind, MathMode, Network, QuantizedAnchor, QuantizedParams, Shape, TensorFormat};
use std::time::Duration;

/// What the tactic ids hash besides their names: the product path's source, so an edited
/// path never reuses a stale timing.
const GEMM_SOURCE: &str = concat!(include_str!("blas.rs"), include_str!("ops/compute.rs"), include_str!("sparse.rs"));
/// Likewise for convolutions: cuDNN's path and the direct kernel.
const CONV_SOURCE: &str = concat!(include_str!("dnn.rs"), include_str!("ops/conv.rs"), include_str!("blas.rs"), include_str!("sparse.rs"), include_str!("../../../kernels/spatial.cu"));

/// Likewise for integer convolutions: kiln's kernel and the libraries' sums with the epilogue.
const INT8_CONV_SOURCE: &str = concat!(
    include_str!("ops/quant.rs"),
    include_str!("ops/int8_conv.rs"),
    include_str!("../../../kernels/int8_conv.cuh"),
    include_str!("../../../kernels/int8_conv.cu"),
    include_str!("../../../kernels/int8_conv_general.cu"),
    include_str!("../../../kernels/int8_conv_wg_general.cu"),
    include_str!("ops/int8_few_channels.rs"),
    include_str!("../../../kernels/int8_few_channels.cu"),
    include_str!("ops/int8_depthwise.rs"),
    include_str!("../../../kernels/int8_depthwise.cu"),
    include_str!("../../../kernels/depthwise.cuh"),
    include_str!("ops/int8_gemm.rs"),
    include_str!("../../../kernels/int8_gemm.cu"),
    include_str!("../../../kernels/tma.cuh"),
    include_str!("dnn.rs"),
    include_str!("blas.rs")
);

/// An integer layer's tactic `name` (its id hashes the integer paths' source).
fn int8_tactic(name: &str) -> TacticDesc {
    TacticDesc {
        id: TacticId::new("cuda", name, INT8_CONV_SOURCE.as_bytes()),
        workspace_bytes: 0,
        formats: vec![TensorFormat::Linear],
        dtypes: vec![DataType::I8],
    }
}

fn int8_conv_tactic(choice: usize) -> TacticDesc {
    int8_tactic(match choice {
        INT8_CONV_KILN => "int8_conv_implicit_gemm",
        INT8_CONV_KILN_WGMMA => "int8_conv_implicit_gemm_wgmma",
        INT8_CONV_KILN_FEW_CHANNELS => "int8_conv_few_channels",
        INT8_CONV_KILN_DEPTHWISE => "int8_conv_depthwise",
        INT8_CONV_KILN_WARP_SPECIALIZED => "int8_conv_implicit_gemm_tma",
        INT8_CONV_KILN_WARP_SPECIALIZED_M128 => "int8_conv_implicit_gemm_tma_m128",
        INT8_CONV_KILN_WARP_SPECIALIZED_N192 => "int8_conv_implicit_gemm_tma_n192",
        INT8_CONV_KILN_WARP_SPECIALIZED_N64 => "int8_conv_implicit_gemm_tma_n64",
        INT8_CONV_KILN_WARP_SPECIALIZED_M256 => "int8_conv_implicit_gemm_tma_m256",
        _ => "int8_conv_library_sums",
    })
}

fn int8_product_tactic(choice: usize) -> TacticDesc {
    int8_tactic(match choice {
        INT8_PRODUCT_KILN => "int8_product_as_1x1_implicit_gemm",
        INT8_PRODUCT_KILN_WGMMA => "int8_product_as_1x1_implicit_gemm_wgmma",
        INT8_PRODUCT_KILN_WARP_SPECIALIZED => "int8_product_as_1x1_implicit_gemm_tma",
        INT8_PRODUCT_KILN_WARP_SPECIALIZED_M128 => "int8_product_as_1x1_implicit_gemm_tma_m128",
        INT8_PRODUCT_KILN_WARP_SPECIALIZED_N192 => "int8_product_as_1x1_implicit_gemm_tma_n192",
        INT8_PRODUCT_KILN_WARP_SPECIALIZED_N64 => "int8_product_as_1x1_implicit_gemm_tma_n64",
        INT8_PRODUCT_KILN_WARP_SPECIALIZED_M256 => "int8_product_as_1x1_implicit_gemm_tma_m256",
        _ => "int8_product_cublaslt_sums",
    })
}

/// Whether an integer layer may run tactic `choice`, a rank among `main_loops` (kiln's kernel:
/// [`kiln_main_loop`]) or not (the libraries' and the few-channel kernel's): kiln's where the
/// device runs its main loop (wgmma and the warp-specialized product on sm_90 only), the
/// warp-specialized product's tiles where int8_gemm.cu has a kernel for the tile, the layer
/// (pointwise, or another convolution) and the epilogue's lookup and join (elsewhere the tactic
/// would time the kernel it falls back to under another name).
fn runs_main_loop(gpu: Option<&crate::device::Gpu>, choice: usize, main_loops: [usize; 7], pointwise: bool, (looks_up, joins): (bool, bool)) -> bool {
    match kiln_main_loop(choice, main_loops) {
        Some(MainLoop::WarpSpecialized(tile)) if !crate::ops::int8_gemm::has_kernel(tile, looks_up, joins, !pointwise) => false,
        Some(main_loop) => gpu.map_or(main_loop == MainLoop::MmaSync, |g| main_loop.available(g)),
        None => true,
    }
}

/// An integer convolution's tactics, the default first: kiln's mma.sync kernel, the libraries',
/// kiln's other main loops ([`INT8_CONV_MAIN_LOOPS`]' order), the few-channel kernel, the
/// depthwise kernel (a depthwise layer's only tactic).
fn int8_conv_choices() -> impl Iterator<Item = usize> {
    let [first, others @ ..] = INT8_CONV_MAIN_LOOPS;
    std::iter::once(first).chain([INT8_CONV_LIBRARY]).chain(others).chain([INT8_CONV_KILN_FEW_CHANNELS, INT8_CONV_KILN_DEPTHWISE])
}

/// An integer product's tactics, the default first: the libraries', then kiln's main loops.
fn int8_product_choices() -> impl Iterator<Item = usize> {
    std::iter::once(INT8_PRODUCT_LIBRARY).chain(INT8_PRODUCT_MAIN_LOOPS)
}


/// Whether an integer layer is a product of int8 x by constant 2-D int8 weights whose depth
/// kiln's convolution kernel takes whole (a multiple of 16): it then has both product tactics.
fn int8_product(network: &Network, layer: LayerId) -> bool {
    let l = network.layer(layer);
    let LayerKind::Quantized(q) = &l.kind else { return false };
    let QuantizedAnchor::MatrixMultiply { op_a: kiln::MatrixOp::None, op_b } = q.anchor else { return false };
    let desc = |slot: usize| l.inputs.get(slot).copied().flatten().map(|t| network.tensor(t));
    let (Some(x), Some(w)) = (desc(QuantizedParams::X), desc(QuantizedParams::W)) else { return false };
    let dims: Vec<Option<usize>> = w.shape.dims().iter().map(|d| d.fixed()).collect();
    let depth = match (op_b, dims.as_slice()) {
        (kiln::MatrixOp::None, &[Some(k), _]) | (kiln::MatrixOp::Transpose, &[_, Some(k)]) => k,
        _ => return false,
    };
    let out = l.outputs.first().map(|&t| network.tensor(t).dtype);
    x.dtype == DataType::I8
        && w.dtype == DataType::I8
        && w.value.is_some()
        && depth % 16 == 0
        && out.is_some_and(|t| matches!(t, DataType::I8 | DataType::U8 | DataType::F32 | DataType::F16 | DataType::BF16))
}

/// An integer convolution of int8 operands with fixed shapes (its zero points are constants,
/// checked when it runs): its parameters, x's and w's dims and its output type.
fn int8_conv_layer(network: &Network, layer: LayerId) -> Option<(&ConvolutionParams, Vec<usize>, Vec<usize>, DataType)> {
    let l = network.layer(layer);
    let LayerKind::Quantized(q) = &l.kind else { return None };
    let QuantizedAnchor::Convolution(p) = &q.anchor else { return None };
    let (x, w) = (input(network, layer, QuantizedParams::X)?, input(network, layer, QuantizedParams::W)?);
    let out = network.tensor(*l.outputs.first()?).dtype;
    (x.dtype == DataType::I8 && w.dtype == DataType::I8).then_some(())?;
    Some((p, fixed_dims(x)?, fixed_dims(w)?, out))
}

/// An integer convolution kiln's kernel may take: its parameters and filter shape as the kernel
/// runs it, a grouped layer's groups merged into one (`int8_conv::merged`).
fn int8_conv(network: &Network, layer: LayerId) -> Option<(ConvolutionParams, Vec<usize>)> {
    let (p, x, w, out) = int8_conv_layer(network, layer)?;
    let (p, w) = crate::ops::int8_conv::merged(p, &x, &w).unwrap_or_else(|| (p.clone(), w));
    crate::ops::int8_conv::applies(&p, &x, &w, out).then_some((p, w))
}

/// Whether an integer convolution is one kiln's depthwise kernel takes.
fn int8_depthwise(network: &Network, layer: LayerId) -> bool {
    int8_conv_layer(network, layer).is_some_and(|(p, x, w, _)| crate::ops::int8_depthwise::applies(p, &x, &w).is_some())
}

/// Whether an integer layer's levels are looked up in a per-column table, and whether it joins
/// a skip connection at its second quantization.
fn epilogue_tables(network: &Network, layer: LayerId) -> (bool, bool) {
    let looks_up = matches!(&network.layer(layer).kind, LayerKind::Quantized(q) if q.lookup.is_some());
    (looks_up, input(network, layer, QuantizedParams::JOIN).is_some())
}

/// The tensor in input `slot` of `layer`, where it has one.
fn input(network: &Network, layer: LayerId, slot: usize) -> Option<&kiln::TensorDesc> {
    network.layer(layer).inputs.get(slot).copied().flatten().map(|t| network.tensor(t))
}

/// A tensor's dims where all are fixed.
fn fixed_dims(t: &kiln::TensorDesc) -> Option<Vec<usize>> {
    t.shape.dims().iter().map(|d| d.fixed()).collect()
}

/// Whether an integer convolution of parameters `p` (`int8_conv`'s) is one the few-channel
/// kernel takes: 1 to 4 input channels, and the levels-only epilogue as far as the network
/// shows (levels out, no float bias, residual or join; the bias's bound and the scales are
/// checked when it runs).
fn few_channels(network: &Network, layer: LayerId, p: &ConvolutionParams) -> bool {
    let LayerKind::Quantized(q) = &network.layer(layer).kind else { return false };
    let slot = |i: usize| input(network, layer, i);
    let (Some(x), Some(w)) = (slot(QuantizedParams::X).and_then(fixed_dims), slot(QuantizedParams::W).and_then(fixed_dims)) else { return false };
    q.quantized_output()
        && slot(QuantizedParams::BIAS).is_none_or(|b| b.dtype == DataType::I32)
        && slot(QuantizedParams::RESIDUAL).is_none()
        && slot(QuantizedParams::JOIN).is_none()
        && crate::ops::int8_few_channels::applies(p, &x, &w)
}

fn conv_tactic_name(choice: usize) -> String {
    match choice {
        CONV_DIRECT => "conv_direct_kernel".into(),
        CONV_DEPTHWISE => "conv_depthwise_nhwc".into(),
        CONV_DEPTHWISE_ROWS => "conv_depthwise_nhwc_rows".into(),
        CONV_PATCH_GEMM => "conv_patches_gemm".into(),
        CONV_SPARSE_PATCH_GEMM => format!("{}conv_patches_gemm_cusparselt", kiln::sparsity::TACTIC_PREFIX),
        c if c > CONV_MERGED_GROUPS => format!("conv_cudnn_merged_to_{}_groups", c - CONV_MERGED_GROUPS),
        c => format!("conv_cudnn_{}", crate::dnn::algorithm_name(c.saturating_sub(1) as u32)),
    }
}

fn conv_tactic(choice: usize) -> TacticDesc {
    TacticDesc {
        id: TacticId::new("cuda", &conv_tactic_name(choice), CONV_SOURCE.as_bytes()),
        workspace_bytes: 0,
        formats: vec![TensorFormat::Linear],
        dtypes: vec![DataType::F32, DataType::F16, DataType::BF16],
    }
}

/// The parameters and compute type of a float convolution layer (plain or heading a fused
/// layer), whatever its shapes.
fn float_conv(network: &Network, layer: LayerId) -> Option<(ConvolutionParams, DataType)> {
    let l = network.layer(layer);
    let p = match &l.kind {
        LayerKind::Convolution(p) => p.clone(),
        LayerKind::Fused(f) => match &f.anchor {
            FusedAnchor::Convolution(p) => p.clone(),
            _ => return None,
        },
        _ => return None,
    };
    let dtype = network.tensor(l.inputs.first().copied().flatten()?).dtype;
    dtype.is_float().then_some((p, dtype))
}

/// The convolution parameters and input / weight / output shapes of a float convolution
/// layer (plain or heading a fused layer) with fixed shapes.
fn conv_shapes(network: &Network, layer: LayerId) -> Option<(ConvolutionParams, DataType, [Vec<usize>; 3])> {
    let (p, dtype) = float_conv(network, layer)?;
    let l = network.layer(layer);
    let fixed = |t: kiln::TensorId| network.tensor(t).shape.dims().iter().map(|d| d.fixed()).collect::<Option<Vec<usize>>>();
    let x = l.inputs.first().copied().flatten()?;
    let w = l.inputs.get(1).copied().flatten()?;
    // The anchor's output shape: the fused layer's output has it too (the epilogue is pointwise
    // with operands broadcast onto it).
    let y = fixed(*l.outputs.first()?)?;
    Some((p, dtype, [fixed(x)?, fixed(w)?, y]))
}

/// A convolution's candidates: cuDNN's algorithms for its shape (when cuDNN and the device
/// are there), kiln's NHWC depthwise kernels for a depthwise one (the row kernel where its
/// compiled sizes cover the layer), the patch product for a patch convolution, and the direct
/// kernel where
/// it applies (1-D and 2-D).
fn conv_tactics(backend: &crate::CudaBackend, network: &Network, layer: LayerId, math: MathMode) -> Option<Vec<TacticDesc>> {
    let (p, dtype, [x, w, y]) = conv_shapes(network, layer)?;
    let mut out = Vec::new();
    if let Ok(gpu) = backend.gpu() {
        if let (Ok(dnn), Ok(spec)) = (gpu.dnn(), crate::dnn::ConvSpec::new(&p, dtype, math.tf32, &x, &w, &y)) {
            // In the layout the convolution will run in (the offered algorithms differ).
            let spec = spec.with_nhwc(crate::ops::layout::prefers_channels_last(dtype, x.len()));
            let bind = gpu.ctx.bind_to_thread();
            if bind.is_ok() {
                for algo in dnn.algorithms(&spec).unwrap_or_default() {
                    out.push(conv_tactic(algo as usize + 1));
                }
            }
        }
    }
    if is_depthwise(&p, &x, &w) {
        out.push(conv_tactic(CONV_DEPTHWISE));
        if dtype.size_bytes().is_some_and(|b| b > 0 && depthwise_rows(&p, &x, &w, 16 / b).is_some()) {
            out.push(conv_tactic(CONV_DEPTHWISE_ROWS));
        }
    }
    if is_patchify(&p, &x, &w) {
        out.push(conv_tactic(CONV_PATCH_GEMM));
        // Sparse where the patch keeps a tap's channels together (see `patch_convolution`).
        let grouped_channels = crate::ops::layout::prefers_channels_last(dtype, x.len()) || w[2..].iter().all(|&d| d == 1);
        if grouped_channels && sparse_offered(backend, network, layer, math, dtype) {
            out.push(conv_tactic(CONV_SPARSE_PATCH_GEMM));
        }
    }
    if backend.gpu().is_ok_and(|gpu| gpu.dnn().is_ok()) {
        out.extend(merged_group_counts(&p, &x, &w).into_iter().map(|g| conv_tactic(CONV_MERGED_GROUPS + g)));
    }
    if p.strides.len() <= 2 {
        out.push(conv_tactic(CONV_DIRECT));
    }
    Some(out).filter(|v| !v.is_empty())
}

fn tactic_name(rank: usize) -> String {
    match rank {
        SPARSE_GEMM => format!("{}gemm_cusparselt", kiln::sparsity::TACTIC_PREFIX),
        rank => format!("gemm_cublaslt_heuristic{rank}"),
    }
}

/// Whether a SPARSE_WEIGHTS build offers `layer` a cuSPARSELt tactic: its weights are 2:4
/// ([`kiln::sparsity::is_eligible`]), it computes in f16 or bf16, and cuSPARSELt opens
/// (when it does not, the build log says why once and the layers run dense).
fn sparse_offered(backend: &crate::CudaBackend, network: &Network, layer: LayerId, math: MathMode, dtype: DataType) -> bool {
    if !math.sparse_weights || !matches!(dtype, DataType::F16 | DataType::BF16) || !kiln::sparsity::is_eligible(network, layer) {
        return false;
    }
    match backend.gpu().map_err(|e| e.to_string()).and_then(|gpu| gpu.sparse().map(drop).map_err(|e| e.to_string())) {
        Ok(()) => true,
        Err(e) => {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| tracing::warn!("SPARSE_WEIGHTS: no cuSPARSELt ({e}); 2:4 layers run dense"));
            false
        }
    }
}

/// Whether `layer` is a float matrix product (plain or heading a fused layer).
fn is_float_gemm(network: &Network, layer: LayerId) -> bool {
    let l = network.layer(layer);
    let gemm = matches!(&l.kind, LayerKind::MatrixMultiply { .. })
        || matches!(&l.kind, LayerKind::Fused(p) if matches!(p.anchor, FusedAnchor::MatrixMultiply { .. }));
    gemm && l.inputs.first().copied().flatten().is_some_and(|t| network.tensor(t).dtype.is_float())
}

/// Whether `layer` is a float matrix product with fixed shapes (what can be timed).
fn is_gemm(network: &Network, layer: LayerId) -> bool {
    let fixed = network.layer(layer).inputs.iter().flatten().all(|&t| network.tensor(t).shape.dims().iter().all(|d| d.fixed().is_some()));
    is_float_gemm(network, layer) && fixed
}

pub fn tactics(backend: &crate::CudaBackend, network: &Network, layer: LayerId, math: MathMode) -> Vec<TacticDesc> {
    if let Some(conv) = conv_tactics(backend, network, layer, math) {
        return conv;
    }
    if let Some((p, w)) = int8_conv(network, layer) {
        let few = few_channels(network, layer, &p);
        // The warp-specialized product's layers: one product over the pixels.
        let x = input(network, layer, QuantizedParams::X).and_then(fixed_dims);
        let pointwise = x.is_some_and(|x| crate::ops::quant::pointwise_filter(&p, &x, &w));
        let (gpu, tables) = (backend.gpu().ok(), epilogue_tables(network, layer));
        let offered = |&c: &usize| (few || c != INT8_CONV_KILN_FEW_CHANNELS) && c != INT8_CONV_KILN_DEPTHWISE && runs_main_loop(gpu.as_deref(), c, INT8_CONV_MAIN_LOOPS, pointwise, tables);
        return int8_conv_choices().filter(offered).map(int8_conv_tactic).collect();
    }
    if int8_depthwise(network, layer) {
        return vec![int8_conv_tactic(INT8_CONV_KILN_DEPTHWISE)];
    }
    if int8_product(network, layer) {
        let (gpu, tables) = (backend.gpu().ok(), epilogue_tables(network, layer));
        let offered = |&c: &usize| runs_main_loop(gpu.as_deref(), c, INT8_PRODUCT_MAIN_LOOPS, true, tables);
        return int8_product_choices().filter(offered).map(int8_product_tactic).collect();
    }
    if !is_gemm(network, layer) {
        return vec![TacticDesc::default_for("cuda")];
    }
    // `is_gemm` found a float input 0.
    let dtype = network.layer(layer).inputs.first().copied().flatten().map_or(DataType::F32, |t| network.tensor(t).dtype);
    let sparse = sparse_offered(backend, network, layer, math, dtype).then_some(SPARSE_GEMM);
    (0..RANKED_ALGORITHMS)
        .chain(sparse)
        .map(|rank| TacticDesc {
            id: TacticId::new("cuda", &tactic_name(rank), GEMM_SOURCE.as_bytes()),
            workspace_bytes: 32 << 20,
            formats: vec![TensorFormat::Linear],
            dtypes: vec![DataType::F32, DataType::F16, DataType::BF16],
        })
        .collect()
}

/// What a recorded tactic selects for the layer (carried as `Ctx::gemm_rank`): a cuBLASLt
/// heuristic rank for products, a convolution choice (`ops::compute::CONV_DIRECT`, `1 + cuDNN
/// algorithm`) for convolutions, `quant::INT8_CONV_*` for integer convolutions and
/// `quant::INT8_PRODUCT_*` for integer products by constant weights; unknown or
/// absent ids run 0 (the heuristic's best, kiln's INT8 kernel). Layers with dynamic dims run
/// the tactic timed at the profile's opt shapes, as TensorRT's do.
pub fn rank_of(network: &Network, layer: LayerId, tactic: Option<&TacticId>) -> usize {
    if let (Some(t), LayerKind::Quantized(_)) = (tactic, &network.layer(layer).kind) {
        if int8_product(network, layer) {
            return int8_product_choices().find(|&c| int8_product_tactic(c).id == *t).unwrap_or(INT8_PRODUCT_LIBRARY);
        }
        return int8_conv_choices().find(|&c| int8_conv_tactic(c).id == *t).unwrap_or(INT8_CONV_KILN);
    }
    if let (Some(t), Some((p, _))) = (tactic, float_conv(network, layer)) {
        let choices = crate::dnn::ALGORITHMS.iter().map(|&(a, _)| a as usize + 1).chain([CONV_DIRECT, CONV_DEPTHWISE, CONV_DEPTHWISE_ROWS, CONV_PATCH_GEMM, CONV_SPARSE_PATCH_GEMM]);
        // The merges of its groups: the shapes may be dynamic here, the group count is not.
        let merges = group_merges(p.groups.max(1)).map(|g| CONV_MERGED_GROUPS + g);
        return choices.chain(merges).find(|&c| conv_tactic(c).id == *t).unwrap_or(0);
    }
    match tactic {
        Some(t) if is_float_gemm(network, layer) => {
            (0..RANKED_ALGORITHMS).chain([SPARSE_GEMM]).find(|&r| TacticId::new("cuda", &tactic_name(r), GEMM_SOURCE.as_bytes()) == *t).unwrap_or(0)
        }
        _ => 0,
    }
}


/// The median device time (CUDA events) of `repetitions` runs of `layer` alone with `tactic`,
/// on random inputs of its shapes, after a warm-up; the runs queued behind a device-side wait
/// so that launch overhead, which a replayed graph does not pay, decides nothing.
pub fn time_tactic(
    backend: &crate::CudaBackend,
    network: &Network,
    layer: LayerId,
    tactic: &TacticDesc,
    math: MathMode,
    repetitions: usize,
) -> Result<Duration, BackendError> {
    let l = network.layer(layer);
    let fail = |reason: String| BackendError::Execution { layer: l.name.clone(), reason };
    // The layer alone, every input a network input.
    let mut alone = Network::new("tactic");
    let mut slots = Vec::new();
    let mut feeds = Vec::new();
    // The feed each input slot receives (None: absent, or a constant).
    let mut feed_of_slot = Vec::new();
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    for (i, slot) in l.inputs.iter().enumerate() {
        // Constants (weights, an integer layer's scales and zero points) keep their values:
        // they decide the path a layer takes.
        let constant = slot.and_then(|t| match network.tensor(t).producer.map(|(p, _)| &network.layer(p).kind) {
            Some(LayerKind::Constant { weights }) => network.weights_blob(*weights).cloned(),
            _ => None,
        });
        if let Some(value) = constant {
            let weights = alone.add_weights(value);
            let id = alone.add_layer(&format!("const{i}"), LayerKind::Constant { weights }, vec![]).map_err(|e| fail(e.to_string()))?;
            slots.push(Some(alone.output(id, 0)));
            feed_of_slot.push(None);
            continue;
        }
        feed_of_slot.push(slot.map(|_| feeds.len()));
        slots.push(match slot {
            None => None,
            Some(t) => {
                let desc = network.tensor(*t);
                let dims: Vec<usize> = desc.shape.dims().iter().map(|d| d.fixed().ok_or("a dynamic dim cannot be timed")).collect::<Result<_, _>>().map_err(|e| fail(e.into()))?;
                feeds.push(kiln::plan::timing::random_tensor(desc.dtype, &dims, &mut seed).map_err(&fail)?);
                Some(alone.add_input(&format!("in{i}"), desc.dtype, Shape::fixed(&dims)).map_err(|e| fail(e.to_string()))?)
            }
        });
    }
    let id = alone.add_layer(&l.name, l.kind.clone(), slots).map_err(|e| fail(e.to_string()))?;
    for t in alone.layer(id).outputs.clone() {
        alone.mark_output(t).map_err(|e| fail(e.to_string()))?;
    }
    let rank = rank_of(network, layer, Some(&tactic.id));
    let control = kiln::ir::control::lower(&alone, kiln::ir::control::DEFAULT_MAX_TRIP_COUNT).map_err(|e| fail(e.to_string()))?;
    // Ranks are per layer: the constants come first.
    let mut ranks = vec![0; id.0 + 1];
    ranks[id.0] = rank;
    let exe = CudaExecutable::new(alone, control, backend.gpu()?, math.tf32)?.with_gemm_ranks(ranks);
    let gpu = exe.gpu().clone();
    let mut inputs = feeds.iter().map(|t| gpu.upload(t)).collect::<Result<Vec<_>, _>>().map_err(|e| fail(e.to_string()))?;
    // A convolution that runs channels-last receives its input and residual channels-last from
    // the convolution before it: time it so, not with a conversion per run.
    if let Some((_, dtype, [x, ..])) = conv_shapes(network, layer) {
        if crate::ops::layout::prefers_channels_last(dtype, x.len()) {
            // A residual right after the convolution, or after its first activation.
            let residual = match &l.kind {
                LayerKind::Fused(f) => f.epilogue.iter().take(2).find_map(|step| match step {
                    kiln::PostOp::Elementwise { op: kiln::ElementwiseOp::Sum, operand, .. } => Some(*operand),
                    _ => None,
                }),
                _ => None,
            };
            let feed_of = |slot: usize| feed_of_slot.get(slot).copied().flatten();
            let cx = crate::ops::Ctx::new(&gpu, math.tf32);
            for feed in [feed_of(0), residual.and_then(feed_of)].into_iter().flatten() {
                if inputs[feed].shape.len() == 4 {
                    inputs[feed] = crate::ops::layout::to_channels_last(&cx, &inputs[feed]).map_err(|e| fail(e.to_string()))?;
                }
            }
        }
    }
    // Likewise an integer convolution's int8 input, from the INT8 layer before it.
    if let (Some(_), Some(feed)) = (int8_conv(network, layer), feed_of_slot.first().copied().flatten()) {
        let cx = crate::ops::Ctx::new(&gpu, math.tf32);
        inputs[feed] = crate::ops::layout::to_channels_last(&cx, &inputs[feed]).map_err(|e| fail(e.to_string()))?;
    }
    let times = gpu
        .device_time_ms(repetitions.max(1), || exe.execute_device(&inputs).map(drop).map_err(|e| e.to_string()))
        .map_err(&fail)?;
    Ok(Duration::from_secs_f64(f64::from(times[times.len() / 2]) * 1e-3))
}

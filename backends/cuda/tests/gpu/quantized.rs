//! Integer layers (Q/DQ fusion, kiln::QuantizedParams) on cuda against the cpu oracle, value for
//! value: symmetric int8 layers on the INT8 tensor-core paths (kiln's implicit-GEMM convolution,
//! cuBLASLt IMMA for products and 1x1 convolutions, cuDNN's INT8 convolution), the others
//! (uint8 with zero points, grouped or 1-D convolutions) on the exact f32 fallback; multipliers
//! near 1/2^k put many results at a rounding tie.

use crate::common::{backend, check_network, last_layer, run_with_tactic};
use crate::integer_layers::{conv, layer, Operands};
use kiln::{Backend, ConvolutionParams, DataType, HostTensor, MathMode, MatrixOp, QuantizedAnchor, TensorData};
use std::sync::Arc;

/// A convolution anchor with its own padding at each end and dilation.
fn conv_padded(strides: &[usize], pre: &[usize], post: &[usize], dilations: &[usize]) -> QuantizedAnchor {
    QuantizedAnchor::Convolution(ConvolutionParams { groups: 1, strides: strides.to_vec(), dilations: dilations.to_vec(), pre_padding: pre.to_vec(), post_padding: post.to_vec() })
}

/// Both tactics of symmetric int8 convolutions (kiln's kernel with the epilogue fused, and the
/// libraries' sums with the epilogue kernel) give the cpu oracle's values, over the sizes the
/// kernel's tiles meet: pixels and filters that do not fill a block, channel counts that are
/// not a multiple of its 64-channel step (copies across filter taps) or of 16 (padded),
/// strides, dilations and uneven padding; each tactic can be timed with the layer's constants.
#[test]
fn both_int8_convolution_tactics_match_the_cpu_oracle_exactly() {
    let Some(cuda) = backend() else { return };
    use Operands::Symmetric as S;
    let cases = [
        ("3x3, 16 channels, 8 filters, int32 bias, ReLU, int8", layer(conv(1, &[1, 1], &[1, 1]), S, &[2, 16, 9, 7], &[8, 16, 3, 3], 8, Some(DataType::I32), true, DataType::I8)),
        ("3x3 stride 2, 48 channels, 100 filters, float bias, uint8", layer(conv(1, &[2, 2], &[1, 1]), S, &[3, 48, 21, 19], &[100, 48, 3, 3], 100, Some(DataType::F32), false, DataType::U8)),
        ("3x3 dilation 2, uneven padding, 32 channels, 64 filters, f32", layer(conv_padded(&[1, 1], &[0, 2], &[2, 1], &[2, 2]), S, &[2, 32, 12, 15], &[64, 32, 3, 3], 64, None, true, DataType::F32)),
        ("1x1, 64 channels, 256 filters, int32 bias, int8", layer(conv(1, &[1, 1], &[0, 0]), S, &[2, 64, 7, 7], &[256, 64, 1, 1], 256, Some(DataType::I32), false, DataType::I8)),
        // The pointwise main loop (one offset for every copy): 208 channels end in a step of one
        // 16-channel piece, 330 pixels and 72 filters fill no block.
        ("1x1, 208 channels, 72 filters, 330 pixels, no bias, ReLU, uint8", layer(conv(1, &[1, 1], &[0, 0]), S, &[3, 208, 10, 11], &[72, 208, 1, 1], 72, None, true, DataType::U8)),
        ("5x2, 16 channels, 136 filters, 300 pixels, int32 bias, ReLU, int8", layer(conv(1, &[1, 1], &[2, 0]), S, &[3, 16, 10, 11], &[136, 16, 5, 2], 136, Some(DataType::I32), true, DataType::I8)),
        // An RGB stem into floats (width taps folded into channels; no few-channel tactic: a
        // float output), and 24 channels zero-padded to 32.
        ("7x7 stride 2 stem, 3 channels, 64 filters, int32 bias, ReLU, f32", layer(conv(1, &[2, 2], &[3, 3]), S, &[2, 3, 23, 20], &[64, 3, 7, 7], 64, Some(DataType::I32), true, DataType::F32)),
        ("3x3, 24 channels, 40 filters, f32", layer(conv(1, &[1, 1], &[1, 1]), S, &[2, 24, 9, 9], &[40, 24, 3, 3], 40, None, false, DataType::F32)),
        // The levels-only epilogue without a bias, into uint8 (ReLU's floor above the saturation's),
        // and over 36 pipeline steps (the stage ring wraps nine times).
        ("3x3 stride 2, 48 channels, 100 filters, no bias, ReLU, uint8", layer(conv(1, &[2, 2], &[1, 1]), S, &[3, 48, 21, 19], &[100, 48, 3, 3], 100, None, true, DataType::U8)),
        ("3x3, 256 channels, 136 filters, int32 bias, int8", layer(conv(1, &[1, 1], &[1, 1]), S, &[1, 256, 6, 5], &[136, 256, 3, 3], 136, Some(DataType::I32), false, DataType::I8)),
        // 80 channels: a step's 64 channels cross into the next tap from some columns only.
        ("3x3 dilation (1, 2), 80 channels, 72 filters, int32 bias, ReLU, int8", layer(conv_padded(&[1, 1], &[1, 2], &[1, 2], &[1, 2]), S, &[2, 80, 9, 10], &[72, 80, 3, 3], 72, Some(DataType::I32), true, DataType::I8)),
        // Width taps folded into 16 channels: two columns of 8 channels, and of 5 channels padded
        // to 8 under a column stride of 2.
        ("3x3, 8 channels, 24 filters, int32 bias, ReLU, int8", layer(conv(1, &[1, 1], &[1, 1]), S, &[2, 8, 9, 10], &[24, 8, 3, 3], 24, Some(DataType::I32), true, DataType::I8)),
        ("5x2 stride (1, 2), 5 channels, 16 filters, f32", layer(conv(1, &[1, 2], &[2, 0]), S, &[2, 5, 8, 11], &[16, 5, 5, 2], 16, None, false, DataType::F32)),
        // Folded with the column stride (step 2): a 1×3 filter becomes a pointwise one over the
        // folded columns (a float bias: no few-channel tactic); and a 1×1 filter with trailing
        // padding alone, which is not pointwise.
        ("1x3 stride (1, 2), 3 channels, 16 filters, float bias, int8", layer(conv(1, &[1, 2], &[0, 1]), S, &[2, 3, 6, 11], &[16, 3, 1, 3], 16, Some(DataType::F32), false, DataType::I8)),
        ("1x1, trailing padding, 32 channels, 24 filters, int8", layer(conv_padded(&[1, 1], &[0, 0], &[1, 2], &[1, 1]), S, &[2, 32, 5, 6], &[24, 32, 1, 1], 24, None, false, DataType::I8)),
    ];
    for (what, (net, feeds)) in cases {
        check_every_tactic(cuda, what, &net, &feeds, &["int8_conv_implicit_gemm", "int8_conv_library_sums"]);
    }
}

/// Convolutions of 1 to 4 input channels with the levels-only epilogue (stems) have a third
/// tactic, kiln's few-channel kernel, which gives the cpu oracle's levels like the others: a
/// 7×7 stride-2 RGB stem over tiles that the output does not fill (input rows read by words and
/// by bytes), 1, 2 and 4 channels, dilation and uneven padding, filters in two blocks (the second
/// short), a 4×4 stride-4 patchify stem (a window loaded in passes), a second quantization's
/// table of levels, levels looked up in a per-channel table (16 at a time: common.cuh's
/// `looked_up16`). An int32 bias the levels-only epilogue cannot start
/// its sums at takes the implicit GEMM instead, with the same values.
#[test]
fn few_channel_int8_convolutions_match_the_cpu_oracle_exactly() {
    let Some(cuda) = backend() else { return };
    use crate::integer_layers::{layer_with as with, lookup, Extra};
    use DataType::{I32, I8, U8};
    use Operands::Symmetric as S;
    let then = |relu: bool, to: DataType| Extra { then: Some((relu, to)), ..Extra::default() };
    let cases = [
        // NCHW rows in fours (word loads, the next tile's window loaded during this one's), then
        // rows that are not (byte loads).
        ("7x7 stride 2 stem, 3 channels, 64 filters, int32 bias, ReLU, int8", with(conv(1, &[2, 2], &[3, 3]), S, &[3, 3, 36, 44], &[64, 3, 7, 7], 64, Some(I32), true, I8, Extra::default())),
        ("7x7 stride 2 stem, 3 channels, width 45, int32 bias, ReLU, int8", with(conv(1, &[2, 2], &[3, 3]), S, &[2, 3, 37, 45], &[64, 3, 7, 7], 64, Some(I32), true, I8, Extra::default())),
        ("3x3 stride 2, 1 channel, 32 filters, no bias, uint8", with(conv(1, &[2, 2], &[1, 1]), S, &[3, 1, 20, 33], &[32, 1, 3, 3], 32, None, false, U8, Extra::default())),
        ("5x3 dilation 2, uneven padding, 4 channels, 100 filters, int32 bias, int8", with(conv_padded(&[1, 1], &[2, 0], &[1, 3], &[2, 2]), S, &[2, 4, 13, 18], &[100, 4, 5, 3], 100, Some(I32), false, I8, Extra::default())),
        ("4x4 stride 4 patchify, 3 channels, 96 filters, int32 bias, int8", with(conv(1, &[4, 4], &[0, 0]), S, &[2, 3, 32, 36], &[96, 3, 4, 4], 96, Some(I32), false, I8, Extra::default())),
        ("1x3 stride (1, 2), 2 channels, 16 filters, second quantization, ReLU, uint8", with(conv(1, &[1, 2], &[0, 1]), S, &[2, 2, 6, 11], &[16, 2, 1, 3], 16, None, false, I8, then(true, U8))),
        ("4x4 stride 4 patchify, 3 channels, 96 filters, int32 bias, uint8 levels looked up in an int8 table", with(conv(1, &[4, 4], &[0, 0]), S, &[2, 3, 32, 36], &[96, 3, 4, 4], 96, Some(I32), false, U8, lookup(I8))),
    ];
    for (what, (net, feeds)) in cases {
        check_every_tactic(cuda, what, &net, &feeds, &["int8_conv_implicit_gemm", "int8_conv_library_sums", "int8_conv_few_channels"]);
    }
    let what = "7x7 stride 2, 3 channels, int32 biases near the limit";
    let (mut net, feeds) = with(conv(1, &[2, 2], &[3, 3]), S, &[1, 3, 20, 20], &[8, 3, 7, 7], 8, Some(I32), true, I8, Extra::default());
    let big: Vec<i32> = (0..8).map(|k| [i32::MAX - 1000, i32::MIN + 1000, 5, -7][k % 4]).collect();
    replace_bias(&mut net, &big);
    let want = kiln_cpu::CpuBackend::new().prepare(&net).unwrap().execute(&feeds).unwrap();
    let layer = last_layer(&net);
    let few = cuda.tactics(&net, layer, MathMode::EXACT).into_iter().find(|t| t.id.name == "int8_conv_few_channels").expect("the few-channel tactic is offered");
    let before = kiln_cuda::ops::int8_few_channels::few_channel_convolutions_enqueued();
    let got = run_with_tactic(cuda, &net, &feeds, layer, &few.id, what);
    assert_eq!(kiln_cuda::ops::int8_few_channels::few_channel_convolutions_enqueued(), before, "{what}: the few-channel kernel ran");
    assert_eq!((got[0].dtype(), got[0].data()), (want[0].dtype(), want[0].data()), "{what}");
}

/// Grouped int8 convolutions (not depthwise) run kiln's kernels with their groups merged into one
/// (the filter block-diagonal), beside the libraries' sums, and every tactic gives the cpu
/// oracle's values: RegNet's groups of 16 at each stride, a grouped 1×1 filter (pointwise once
/// merged), 49 groups (RegNetY-800MF's widest stage), the general epilogue of a float bias.
/// Past 64 groups a layer keeps the f32 fallback alone.
#[test]
fn grouped_int8_convolutions_match_the_cpu_oracle_exactly() {
    let Some(cuda) = backend() else { return };
    use DataType::{F32, I32, I8, U8};
    use Operands::Symmetric as S;
    let names: &[&str] = &["int8_conv_implicit_gemm", "int8_conv_library_sums"];
    let cases = [
        ("3x3, 4 groups of 16, int32 bias, ReLU, int8", layer(conv(4, &[1, 1], &[1, 1]), S, &[2, 64, 9, 10], &[64, 16, 3, 3], 64, Some(I32), true, I8)),
        ("3x3 stride 2, 9 groups of 16, no bias, uint8", layer(conv(9, &[2, 2], &[1, 1]), S, &[2, 144, 11, 12], &[144, 16, 3, 3], 144, None, false, U8)),
        ("1x1, 8 groups of 4 into 8 filters each, int32 bias, int8", layer(conv(8, &[1, 1], &[0, 0]), S, &[2, 32, 6, 7], &[64, 4, 1, 1], 64, Some(I32), false, I8)),
        ("3x3, 49 groups of 16, int32 bias, ReLU, int8", layer(conv(49, &[1, 1], &[1, 1]), S, &[2, 784, 7, 7], &[784, 16, 3, 3], 784, Some(I32), true, I8)),
        ("3x3, 3 groups of 16, float bias, f32", layer(conv(3, &[1, 1], &[1, 1]), S, &[2, 48, 8, 9], &[48, 16, 3, 3], 48, Some(F32), false, F32)),
    ];
    for (what, (net, feeds)) in cases {
        check_every_tactic(cuda, what, &net, &feeds, names);
    }
    let (net, feeds) = layer(conv(72, &[1, 1], &[1, 1]), S, &[1, 144, 5, 5], &[144, 2, 3, 3], 144, Some(I32), false, I8);
    let tactics = cuda.tactics(&net, last_layer(&net), MathMode::EXACT);
    assert!(tactics.iter().all(|t| !t.id.name.starts_with("int8_conv_implicit")), "72 groups: {:?}", tactics.iter().map(|t| &t.id.name).collect::<Vec<_>>());
    crate::common::check_network("3x3, 72 groups of 2 (the f32 fallback)", &net, &feeds, 0.0);
}

/// Depthwise int8 convolutions (groups = channels) have one tactic, kiln's depthwise kernel, which
/// gives the cpu oracle's values: each filter size and stride it takes, rows whose width is not
/// a multiple of its 4 pixels, channels in 8s that are not in 16s; the levels-only epilogue
/// fused (an int32 bias, none, a second quantization, a per-channel lookup), and its int32 sums
/// before the epilogue kernel for the others (a float bias, a float output, a residual, int32
/// biases the fused epilogue cannot start at). A layer it does not take (dilation 2) runs the
/// f32 fallback, with the same values.
#[test]
fn depthwise_int8_convolutions_match_the_cpu_oracle_exactly() {
    let Some(cuda) = backend() else { return };
    use crate::integer_layers::{layer_with as with, lookup, residual, Extra};
    use DataType::{F32, I32, I8, U8};
    use Operands::Symmetric as S;
    let then = |relu: bool, to: DataType| Extra { then: Some((relu, to)), ..Extra::default() };
    let none = Extra::default;
    let dw = |c: usize, k: usize, s: usize| conv(c, &[s, s], &[k / 2, k / 2]);
    let cases = [
        ("3x3, 32 channels, width 11, int32 bias, ReLU, int8", with(dw(32, 3, 1), S, &[2, 32, 9, 11], &[32, 1, 3, 3], 32, Some(I32), true, I8, none())),
        ("3x3 stride 2, 48 channels, no bias, uint8", with(dw(48, 3, 2), S, &[3, 48, 13, 14], &[48, 1, 3, 3], 48, None, false, U8, none())),
        ("5x5, 200 channels, int32 bias, second quantization, int8", with(dw(200, 5, 1), S, &[2, 200, 7, 9], &[200, 1, 5, 5], 200, Some(I32), false, I8, then(true, I8))),
        ("5x5 stride 2, 24 channels, uint8 levels looked up in an int8 table", with(dw(24, 5, 2), S, &[2, 24, 15, 10], &[24, 1, 5, 5], 24, Some(I32), false, U8, lookup(I8))),
        ("7x7, 96 channels, int32 bias, int8", with(dw(96, 7, 1), S, &[2, 96, 8, 13], &[96, 1, 7, 7], 96, Some(I32), false, I8, none())),
        ("7x7 stride 2, 16 channels, float bias, ReLU, int8", with(dw(16, 7, 2), S, &[2, 16, 17, 9], &[16, 1, 7, 7], 16, Some(F32), true, I8, none())),
        ("3x3, 64 channels, int32 bias, f32", with(dw(64, 3, 1), S, &[2, 64, 6, 7], &[64, 1, 3, 3], 64, Some(I32), false, F32, none())),
        ("3x3, 40 channels, int8 residual, int8", with(dw(40, 3, 1), S, &[2, 40, 5, 6], &[40, 1, 3, 3], 40, None, false, I8, residual(I8, &[2, 40, 5, 6]))),
    ];
    for (what, (net, feeds)) in cases {
        check_depthwise(cuda, what, &net, &feeds, true);
    }
    let what = "3x3, 32 channels, int32 biases near the limit";
    let (mut net, feeds) = with(dw(32, 3, 1), S, &[2, 32, 6, 6], &[32, 1, 3, 3], 32, Some(I32), true, I8, none());
    replace_bias(&mut net, &(0..32).map(|k| [i32::MAX - 1000, i32::MIN + 1000, 5, -7][k % 4]).collect::<Vec<_>>());
    check_depthwise(cuda, what, &net, &feeds, true);
    let dilated = QuantizedAnchor::Convolution(ConvolutionParams { groups: 32, strides: vec![1, 1], dilations: vec![2, 2], pre_padding: vec![2, 2], post_padding: vec![2, 2] });
    let (net, feeds) = with(dilated, S, &[2, 32, 9, 9], &[32, 1, 3, 3], 32, Some(I32), false, I8, none());
    check_depthwise(cuda, "3x3 dilation 2, 32 channels (the f32 fallback)", &net, &feeds, false);
}

/// The depthwise layer gives the cpu oracle's values; `taken`: its one tactic is kiln's depthwise
/// kernel, which ran and can be timed, else the kernel did not run.
fn check_depthwise(cuda: &kiln_cuda::CudaBackend, what: &str, net: &kiln::Network, feeds: &[kiln::HostTensor], taken: bool) {
    let want = kiln_cpu::CpuBackend::new().prepare(net).unwrap().execute(feeds).unwrap();
    let layer = last_layer(net);
    let tactics = cuda.tactics(net, layer, MathMode::EXACT);
    let names: Vec<&str> = tactics.iter().map(|t| t.id.name.as_str()).collect();
    assert_eq!(names == ["int8_conv_depthwise"], taken, "{what}: tactics {names:?}");
    let before = kiln_cuda::ops::int8_depthwise::depthwise_convolutions_enqueued();
    let got = run_with_tactic(cuda, net, feeds, layer, &tactics[0].id, what);
    assert_eq!(kiln_cuda::ops::int8_depthwise::depthwise_convolutions_enqueued() > before, taken, "{what}: whether the depthwise kernel ran");
    assert_eq!((got[0].dtype(), got[0].data()), (want[0].dtype(), want[0].data()), "{what}");
    if taken {
        let time = cuda.time_tactic(net, layer, &tactics[0], MathMode::EXACT, 3).unwrap_or_else(|e| panic!("{what}: timing: {e}"));
        assert!(time.as_nanos() > 0, "{what}: timed at 0");
    }
}

/// The test layer's int32 bias constant replaced by `values`.
fn replace_bias(net: &mut kiln::Network, values: &[i32]) {
    let bias_layer = net.layers().iter().find(|l| l.name == format!("const{}", kiln::QuantizedParams::BIAS)).expect("bias constant");
    let kiln::LayerKind::Constant { weights } = bias_layer.kind else { panic!("the bias is a constant") };
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let bias = kiln::HostTensor::from_le_bytes(DataType::I32, vec![values.len()], &bytes).expect("bias");
    net.replace_weights(&[(weights, std::sync::Arc::new(bias))]).expect("replace the bias");
}

/// int32 biases near ±2^31, as per-channel weights with near-zero scales give some channels
/// (a BatchNorm-folded channel of dead weights): every tactic adds them to the sums exactly (in
/// 64 bits), so a sum past int32 saturates the right way instead of wrapping.
#[test]
fn int8_convolutions_with_int32_biases_near_the_limit_match_the_cpu_oracle() {
    let Some(cuda) = backend() else { return };
    let cases = [
        ("1x1, 64 channels, 96 filters", &[2usize, 64, 9, 7], &[96usize, 64, 1, 1], &[0usize, 0]),
        ("3x3, 32 channels, 136 filters", &[2, 32, 8, 8], &[136, 32, 3, 3], &[1, 1]),
    ];
    for (what, x, w, pad) in cases {
        let (mut net, feeds) = layer(conv(1, &[1, 1], pad), Operands::Symmetric, x, w, w[0], Some(DataType::I32), false, DataType::I8);
        let big: Vec<i32> = (0..w[0]).map(|k| match k % 4 { 0 => i32::MAX - 1000, 1 => i32::MIN + 1000, 2 => i32::MAX, _ => (k as i32) * 37 - 900 }).collect();
        replace_bias(&mut net, &big);
        check_every_tactic(cuda, what, &net, &feeds, &["int8_conv_implicit_gemm", "int8_conv_library_sums"]);
    }
}

/// The layer's tactics are `names`, with the wgmma ones after them on Hopper; each gives the cpu
/// oracle's values exactly and can be timed; the one named `*implicit_gemm` of a product ran
/// kiln's kernel.
fn check_every_tactic(cuda: &kiln_cuda::CudaBackend, what: &str, net: &kiln::Network, feeds: &[kiln::HostTensor], names: &[&str]) {
    let want = kiln_cpu::CpuBackend::new().prepare(net).unwrap().execute(feeds).unwrap();
    let layer = last_layer(net);
    let tactics = cuda.tactics(net, layer, MathMode::EXACT);
    let got_names: Vec<String> = tactics.iter().map(|t| t.id.name.clone()).collect();
    let hopper = kiln_cuda::ops::int8_conv::MainLoop::Wgmma.available(&cuda.gpu().expect("a GPU"));
    // wgmma's main loop, then the warp-specialized product's tiles where int8_gemm.cu has the
    // tile's kernel for the layer and its epilogue (a pointwise layer: no 64 × 192 or 128 × 64
    // lookup, a join on 64 × 128 alone; another convolution: 64 × 128, 128 × 128, 128 × 64 and
    // 256 × 128, no lookup or join).
    use kiln_cuda::ops::int8_gemm::{has_kernel, Tile};
    let (looks_up, joins) = (looks_up(net, layer), joins(net, layer));
    let tiles = [("_tma", Tile::M64N128), ("_tma_m128", Tile::M128N128), ("_tma_n192", Tile::M64N192), ("_tma_n64", Tile::M128N64), ("_tma_m256", Tile::M256N128)];
    let conv = !pointwise_layer(net, layer);
    let warp_specialized = tiles.into_iter().filter(|&(_, tile)| has_kernel(tile, looks_up, joins, conv)).map(|(s, _)| s);
    let suffixes: Vec<&str> = std::iter::once("_wgmma").chain(warp_specialized).collect();
    let wgmma = names.iter().filter(|n| n.contains("implicit_gemm")).flat_map(|n| suffixes.iter().map(move |s| format!("{n}{s}")));
    // The few-channel tactic comes after the wgmma ones.
    let (few, others): (Vec<&str>, Vec<&str>) = names.iter().partition(|n| n.ends_with("_few_channels"));
    let want_names: Vec<String> = others.iter().map(|n| n.to_string()).chain(wgmma.filter(|_| hopper)).chain(few.iter().map(|n| n.to_string())).collect();
    assert_eq!(got_names, want_names, "{what}");
    for t in &tactics {
        let (before, before_wgmma) = (kiln_cuda::ops::quant::fused_products_enqueued(), wgmma_layers_enqueued());
        let before_few = kiln_cuda::ops::int8_few_channels::few_channel_convolutions_enqueued();
        let got = run_with_tactic(cuda, net, feeds, layer, &t.id, what);
        let fused = kiln_cuda::ops::quant::fused_products_enqueued() > before;
        assert!(fused || !t.id.name.starts_with("int8_product_as"), "{what}: {} did not run kiln's kernel", t.id.name);
        let on_wgmma = wgmma_layers_enqueued() > before_wgmma;
        assert!(on_wgmma || !(t.id.name.ends_with("_wgmma") || t.id.name.contains("_tma")), "{what}: {} did not run a wgmma kernel", t.id.name);
        let on_few = kiln_cuda::ops::int8_few_channels::few_channel_convolutions_enqueued() > before_few;
        assert!(on_few || !t.id.name.ends_with("_few_channels"), "{what}: {} did not run the few-channel kernel", t.id.name);
        assert_eq!((got[0].dtype(), got[0].data()), (want[0].dtype(), want[0].data()), "{what} with {}", t.id.name);
        let time = cuda.time_tactic(net, layer, t, MathMode::EXACT, 3).unwrap_or_else(|e| panic!("{what}: timing {}: {e}", t.id.name));
        assert!(time.as_nanos() > 0, "{what}: {} timed at 0", t.id.name);
    }
}

/// Whether the test layer is one product over its rows or pixels (a product, or a 1×1
/// convolution of unit strides without padding): the layers with a warp-specialized tactic.
/// Whether the integer layer's levels are looked up in a per-column table.
fn looks_up(net: &kiln::Network, layer: kiln::LayerId) -> bool {
    matches!(&net.layer(layer).kind, kiln::LayerKind::Quantized(q) if q.lookup.is_some())
}

/// Whether the integer layer joins a skip connection at its second quantization.
fn joins(net: &kiln::Network, layer: kiln::LayerId) -> bool {
    net.layer(layer).inputs.get(kiln::QuantizedParams::JOIN).copied().flatten().is_some()
}

fn pointwise_layer(net: &kiln::Network, layer: kiln::LayerId) -> bool {
    let l = net.layer(layer);
    let kiln::LayerKind::Quantized(q) = &l.kind else { return false };
    match &q.anchor {
        QuantizedAnchor::MatrixMultiply { .. } => true,
        QuantizedAnchor::Convolution(c) => {
            let w = l.inputs[kiln::QuantizedParams::W].map(|t| net.tensor(t).shape.dims().iter().filter_map(|d| d.fixed()).collect::<Vec<usize>>());
            w.is_some_and(|w| w.len() == 4 && w[2] == 1 && w[3] == 1) && c.strides.iter().all(|&s| s == 1) && c.pre_padding.iter().chain(&c.post_padding).all(|&p| p == 0)
        }
    }
}

/// Layers enqueued on a wgmma kernel: the convolution kernel's wgmma main loop, or the
/// warp-specialized product it hands pointwise layers to.
fn wgmma_layers_enqueued() -> u64 {
    kiln_cuda::ops::int8_conv::wgmma_convolutions_enqueued() + kiln_cuda::ops::int8_gemm::products_enqueued()
}

/// Layers enqueued as a persistent launch: the convolution kernel's, or the warp-specialized
/// product (persistent by construction).
fn persistent_layers_enqueued() -> u64 {
    kiln_cuda::ops::int8_conv::persistent_convolutions_enqueued() + kiln_cuda::ops::int8_gemm::products_enqueued()
}

/// Pointwise layers on Hopper's warp-specialized product (int8_gemm.cu: a TMA producer, two
/// consumer warpgroups on alternate tiles) give the cpu oracle's values: rows, columns and
/// depths that fill no tile or stage (zeros from the TMA past the edges), depths of more steps
/// than the ring has stages, more tiles than two a block (each consumer loops, the ring wraps
/// many times), a per-tensor scale, a second quantization, ReLU, both level types, levels looked
/// up in per-column tables (copied once, or again where a consumer's columns change), skip
/// connections joined at the second quantization (64 × 128 tiles alone: the join table's
/// second levels, every other result at a tie for the join of scale 8). Skips (and says so) off
/// Hopper.
#[test]
fn pointwise_int8_layers_on_the_warp_specialized_product_match_the_cpu_oracle() {
    let Some(cuda) = hopper_backend("the warp-specialized INT8 product") else { return };
    use crate::integer_layers::{join, layer_with as with, lookup, Extra};
    use DataType::{I32, I8, U8};
    use Operands::Symmetric as S;
    let matmul = QuantizedAnchor::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::None };
    let matmul_t = QuantizedAnchor::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::Transpose };
    let then = |relu: bool, to: DataType| Extra { then: Some((relu, to)), ..Extra::default() };
    let cases = [
        ("product, 300 rows, 144 columns, depth 208, int32 bias, ReLU, uint8", with(matmul.clone(), S, &[300, 208], &[208, 144], 144, Some(I32), true, U8, Extra::default())),
        ("product, 9,000 rows, 256 columns, depth 1,024 (8 steps, 7 stages; 282 tiles), int32 bias, int8", with(matmul.clone(), S, &[9_000, 1024], &[1024, 256], 256, Some(I32), false, I8, Extra::default())),
        ("product, 20,000 rows, 256 columns, depth 64 (626 one-step tiles), per-tensor scale, no bias, int8", with(matmul.clone(), S, &[20_000, 64], &[64, 256], 1, None, false, I8, Extra::default())),
        ("B transposed, batched rows [3, 50, 128], 16 columns, second quantization, ReLU, int8", with(matmul_t, S, &[3, 50, 128], &[16, 128], 16, Some(I32), false, I8, then(true, I8))),
        ("product, 520 rows, 256 columns, depth 768, second quantization, uint8 levels, int8", with(matmul.clone(), S, &[520, 768], &[768, 256], 256, Some(I32), false, U8, then(false, I8))),
        ("1x1 conv, 40,000 pixels, 64 channels, 256 filters, int32 bias, ReLU, uint8", with(conv(1, &[1, 1], &[0, 0]), S, &[4, 64, 100, 100], &[256, 64, 1, 1], 256, Some(I32), true, U8, Extra::default())),
        // Five column blocks, the last of 112 columns: a consumer's next tile is in other columns,
        // so its table is released and copied again (a partial copy for the last block).
        ("product, 9,000 rows, 624 columns, depth 768, levels looked up in an int8 table", with(matmul.clone(), S, &[9_000, 768], &[768, 624], 624, Some(I32), false, I8, lookup(I8))),
        // Three column blocks: every consumer keeps its columns (its table copied once).
        ("product, 9,000 rows, 384 columns, depth 256, ReLU, levels looked up in a uint8 table", with(matmul.clone(), S, &[9_000, 256], &[256, 384], 384, None, true, I8, lookup(U8))),
        ("product, 100 rows, 48 columns, depth 80, levels looked up in an int8 table", with(matmul.clone(), S, &[100, 80], &[80, 48], 48, Some(I32), false, U8, lookup(I8))),
        ("product, 9,000 rows, 256 columns, depth 768, int8 join at ties, ReLU, int8", with(matmul.clone(), S, &[9_000, 768], &[768, 256], 256, Some(I32), false, I8, join(true, I8, I8, &[9_000, 256], 8.0))),
        ("1x1 conv, 40,000 pixels, 64 channels, 256 filters, uint8 join, ReLU, uint8 levels, int8", with(conv(1, &[1, 1], &[0, 0]), S, &[4, 64, 100, 100], &[256, 64, 1, 1], 256, Some(I32), false, U8, join(true, I8, U8, &[4, 256, 100, 100], 5.3))),
        ("product, 100 rows, 48 columns, depth 80, int8 join of scale 480, uint8", with(matmul, S, &[100, 80], &[80, 48], 48, None, false, I8, join(false, U8, I8, &[100, 48], 480.0))),
    ];
    for (what, (net, feeds)) in cases {
        // Every tile: 64 × 128 (`…_tma`), 128 × 128 (`…_tma_m128`) and, but for a lookup,
        // 64 × 192 (`…_tma_n192`), 128 × 64 (`…_tma_n64`) and 256 × 128 (`…_tma_m256`); a join's
        // 64 × 128 alone.
        let layer = last_layer(&net);
        let tiles = match (looks_up(&net, layer), joins(&net, layer)) {
            (_, true) => 1,
            (true, false) => 2,
            (false, false) => 5,
        };
        check_warp_specialized_tactics(cuda, what, &net, &feeds, tiles);
    }
}

/// Skip connections joined on their lines (`int8_gemm_tma_join_line`: two integer
/// multiply-adds a level where the host found a line that gives every pair's level) give the
/// cpu oracle's levels: int8 and uint8 joins and levels, with and without ReLU, over more tiles
/// than a wave (each of the four has a line: the host's search finds one at once). A join at
/// ties to even (scale 8 beside levels of 16 at 32) has no line and keeps its table. Skips (and
/// says so) off Hopper.
#[test]
fn skip_connections_joined_on_their_lines_match_the_cpu_oracle_exactly() {
    let Some(cuda) = hopper_backend("the warp-specialized INT8 join on a line") else { return };
    use crate::integer_layers::{join, join_into, layer_with as with};
    use DataType::{I32, I8, U8};
    use Operands::Symmetric as S;
    let matmul = QuantizedAnchor::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::None };
    let one_by_one = || conv(1, &[1, 1], &[0, 0]);
    let cases = [
        ("1x1 conv, 40,000 pixels, 64 to 256, uint8 join of 5.3 into 29.7, ReLU, uint8 levels, int8", with(one_by_one(), S, &[4, 64, 100, 100], &[256, 64, 1, 1], 256, Some(I32), false, U8, join_into(true, I8, U8, &[4, 256, 100, 100], 5.3, 29.7)), true),
        ("1x1 conv, 40,000 pixels, 64 to 128, int8 join of 3.7 into 37.3, ReLU, int8", with(one_by_one(), S, &[4, 64, 100, 100], &[128, 64, 1, 1], 128, Some(I32), false, I8, join_into(true, I8, I8, &[4, 128, 100, 100], 3.7, 37.3)), true),
        ("product, 9,000 rows, 256 columns, depth 768, int8 join of 11.9 into 41.1, uint8", with(matmul.clone(), S, &[9_000, 768], &[768, 256], 256, Some(I32), false, I8, join_into(false, U8, I8, &[9_000, 256], 11.9, 41.1)), true),
        ("product, 300 rows, 144 columns, uint8 join of 23 into 23.9, ReLU, uint8", with(matmul.clone(), S, &[300, 128], &[128, 144], 144, None, false, U8, join_into(true, U8, U8, &[300, 144], 23.0, 23.9)), true),
        ("product, 9,000 rows, 256 columns, int8 join at ties, ReLU, int8", with(matmul, S, &[9_000, 256], &[256, 256], 256, Some(I32), false, I8, join(true, I8, I8, &[9_000, 256], 8.0)), false),
    ];
    let mut lines = 0;
    for (what, (net, feeds), may_line) in cases {
        let before = kiln_cuda::ops::int8_gemm::join_lines_enqueued();
        check_warp_specialized_tactics(cuda, what, &net, &feeds, 1);
        let on_line = kiln_cuda::ops::int8_gemm::join_lines_enqueued() > before;
        assert!(may_line || !on_line, "{what}: a join at ties ran on a line");
        lines += usize::from(on_line);
    }
    assert_eq!(lines, 4, "joins that ran on their lines");
}

/// The cuda backend where its GPU runs Hopper's wgmma and TMA; elsewhere None, saying that
/// `what` is skipped.
fn hopper_backend(what: &str) -> Option<&'static kiln_cuda::CudaBackend> {
    let cuda = backend()?;
    if !kiln_cuda::ops::int8_conv::MainLoop::Wgmma.available(&cuda.gpu().expect("a GPU")) {
        eprintln!("SKIPPED: {what} needs sm_90 (wgmma, TMA)");
        return None;
    }
    Some(cuda)
}

/// The layer's `tiles` warp-specialized tactics (`…implicit_gemm_tma…`) each run on int8_gemm.cu
/// and give the cpu oracle's values.
fn check_warp_specialized_tactics(cuda: &kiln_cuda::CudaBackend, what: &str, net: &kiln::Network, feeds: &[kiln::HostTensor], tiles: usize) {
    let want = kiln_cpu::CpuBackend::new().prepare(net).unwrap().execute(feeds).unwrap();
    let layer = last_layer(net);
    let tactics: Vec<_> = cuda.tactics(net, layer, MathMode::EXACT).into_iter().filter(|t| t.id.name.contains("implicit_gemm_tma")).collect();
    assert_eq!(tactics.len(), tiles, "{what}: the warp-specialized tactics");
    for tactic in &tactics {
        let what = format!("{what}, {}", tactic.id.name);
        let before = kiln_cuda::ops::int8_gemm::products_enqueued();
        let got = run_with_tactic(cuda, net, feeds, layer, &tactic.id, &what);
        assert!(kiln_cuda::ops::int8_gemm::products_enqueued() > before, "{what}: not on the warp-specialized kernel");
        assert_eq!((got[0].dtype(), got[0].data()), (want[0].dtype(), want[0].data()), "{what}");
    }
}

/// Convolutions that are not pointwise, with the levels-only epilogue, on the warp-specialized
/// kernel (`int8_gemm_tma_conv…`: the producer warpgroup gathers each stage's activation taps,
/// zeros for the padding) give the cpu oracle's levels in both tiles: 3×3 over more tiles than
/// a wave (the ring wraps, each consumer loops), strides, dilation with uneven padding (a stage's
/// 128 bytes of depth cross taps), a depth that ends inside a stage, a strided 1×1 downsample,
/// column blocks of which the last is short, a second quantization. Skips (and says so) off
/// Hopper.
#[test]
fn convolutions_on_the_warp_specialized_kernel_match_the_cpu_oracle() {
    let Some(cuda) = hopper_backend("the warp-specialized INT8 convolution") else { return };
    use crate::integer_layers::{layer_with as with, Extra};
    use DataType::{I32, I8, U8};
    use Operands::Symmetric as S;
    let then = |relu: bool, to: DataType| Extra { then: Some((relu, to)), ..Extra::default() };
    let cases = [
        ("3x3, 64 channels, 128 filters, 25,088 pixels, int32 bias, ReLU, uint8", with(conv(1, &[1, 1], &[1, 1]), S, &[8, 64, 56, 56], &[128, 64, 3, 3], 128, Some(I32), true, U8, Extra::default())),
        ("3x3 stride 2, 48 channels, 128 filters, no bias, int8", with(conv(1, &[2, 2], &[1, 1]), S, &[3, 48, 21, 19], &[128, 48, 3, 3], 128, None, false, I8, Extra::default())),
        ("3x3 dilation (1, 2), uneven padding, 80 channels, 144 filters, int32 bias, ReLU, int8", with(conv_padded(&[1, 1], &[1, 2], &[1, 2], &[1, 2]), S, &[2, 80, 9, 10], &[144, 80, 3, 3], 144, Some(I32), true, I8, Extra::default())),
        ("1x1 stride 2, 256 channels, 512 filters, int32 bias, int8", with(conv(1, &[2, 2], &[0, 0]), S, &[2, 256, 14, 14], &[512, 256, 1, 1], 512, Some(I32), false, I8, Extra::default())),
        ("5x2, 16 channels, 64 filters, 300 pixels, second quantization, ReLU, uint8", with(conv(1, &[1, 1], &[2, 0]), S, &[3, 16, 10, 11], &[64, 16, 5, 2], 64, Some(I32), false, I8, then(true, U8))),
    ];
    for (what, (net, feeds)) in cases {
        // 64 × 128 (`…_tma`), 128 × 128 (`…_tma_m128`), 128 × 64 (`…_tma_n64`) and 256 × 128
        // (`…_tma_m256`: both consumers on a tile).
        check_warp_specialized_tactics(cuda, what, &net, &feeds, 4);
    }
}

/// Both tactics of symmetric int8 products by constant weights (cuBLASLt IMMA's sums with the
/// epilogue kernel, and kiln's convolution kernel over the rows as a 1×1 convolution, the
/// epilogue fused) give the cpu oracle's values: batched rows, transposed weights, rows and
/// columns that do not fill a block, depths that are not a multiple of the kernel's 64-deep
/// step, every output type; each tactic can be timed with the layer's constants.
#[test]
fn both_int8_product_tactics_match_the_cpu_oracle_exactly() {
    let Some(cuda) = backend() else { return };
    use Operands::Symmetric as S;
    let matmul = QuantizedAnchor::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::None };
    let matmul_t = QuantizedAnchor::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::Transpose };
    let cases = [
        ("batched rows, int32 bias, int8", layer(matmul.clone(), S, &[3, 5, 64], &[64, 24], 24, Some(DataType::I32), false, DataType::I8)),
        ("B transposed, float bias, ReLU, f32", layer(matmul_t.clone(), S, &[7, 32], &[16, 32], 16, Some(DataType::F32), true, DataType::F32)),
        ("300 rows, 136 columns, depth 128, int32 bias, ReLU, uint8", layer(matmul.clone(), S, &[300, 128], &[128, 136], 136, Some(DataType::I32), true, DataType::U8)),
        ("depth 48, f16", layer(matmul.clone(), S, &[130, 48], &[48, 40], 40, None, false, DataType::F16)),
        ("B transposed, int32 bias, ReLU, bf16", layer(matmul_t, S, &[3, 4, 32], &[16, 32], 16, Some(DataType::I32), true, DataType::BF16)),
        ("no bias, int8", layer(matmul, S, &[2, 9, 96], &[96, 72], 72, None, false, DataType::I8)),
    ];
    for (what, (net, feeds)) in cases {
        check_every_tactic(cuda, what, &net, &feeds, &["int8_product_cublaslt_sums", "int8_product_as_1x1_implicit_gemm"]);
    }
}

/// A skip connection's Add folded into the integer layer (the residual slot): every convolution
/// and product tactic reads it in its output's layout (NHWC sums, a network input's NCHW
/// converted; rows) and gives the cpu oracle's values, for int8 / uint8 residuals (dequantized in
/// the epilogue) and f32 ones, into levels and floats.
#[test]
fn integer_layers_with_a_residual_match_the_cpu_oracle_exactly() {
    let Some(cuda) = backend() else { return };
    use crate::integer_layers::{layer_with as with, residual};
    use DataType::{F16, F32, I32, I8, U8};
    use Operands::Symmetric as S;
    let matmul = QuantizedAnchor::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::None };
    let matmul_t = QuantizedAnchor::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::Transpose };
    let convs: &[&str] = &["int8_conv_implicit_gemm", "int8_conv_library_sums"];
    let products: &[&str] = &["int8_product_cublaslt_sums", "int8_product_as_1x1_implicit_gemm"];
    let cases = [
        ("1x1, 64 channels, 256 filters, int32 bias, int8 residual, ReLU, int8", with(conv(1, &[1, 1], &[0, 0]), S, &[2, 64, 7, 7], &[256, 64, 1, 1], 256, Some(I32), true, I8, residual(I8, &[2, 256, 7, 7])), convs),
        ("3x3 stride 2, 48 channels, 100 filters, float bias, uint8 residual, uint8", with(conv(1, &[2, 2], &[1, 1]), S, &[3, 48, 21, 19], &[100, 48, 3, 3], 100, Some(F32), false, U8, residual(U8, &[3, 100, 11, 10])), convs),
        ("3x3, 32 channels, 64 filters, f32 residual, ReLU, f32", with(conv(1, &[1, 1], &[1, 1]), S, &[2, 32, 12, 15], &[64, 32, 3, 3], 64, None, true, F32, residual(F32, &[2, 64, 12, 15])), convs),
        // An FP16 build's skip connection: the f16 residual read in place.
        ("3x3, 32 channels, 64 filters, f16 residual, ReLU, int8", with(conv(1, &[1, 1], &[1, 1]), S, &[2, 32, 12, 15], &[64, 32, 3, 3], 64, Some(I32), true, I8, residual(F16, &[2, 64, 12, 15])), convs),
        ("product, f16 residual, f16", with(matmul.clone(), S, &[3, 5, 64], &[64, 24], 24, Some(I32), false, F16, residual(F16, &[3, 5, 24])), products),
        ("product, int32 bias, f32 residual, f32", with(matmul.clone(), S, &[3, 5, 64], &[64, 24], 24, Some(I32), false, F32, residual(F32, &[3, 5, 24])), products),
        ("product, B transposed, int8 residual, ReLU, int8", with(matmul_t, S, &[300, 128], &[136, 128], 136, None, true, I8, residual(I8, &[300, 136])), products),
    ];
    for (what, (net, feeds), names) in cases {
        check_every_tactic(cuda, what, &net, &feeds, names);
    }
}

/// onnxruntime's island after a layer's levels (`DequantizeLinear → [Relu →] QuantizeLinear`)
/// folded in as its second quantization: every convolution and product tactic, both epilogues
/// (levels, and the general one a float bias takes), int8 and uint8 levels and results, give
/// the cpu oracle's levels.
#[test]
fn integer_layers_with_a_second_quantization_match_the_cpu_oracle_exactly() {
    let Some(cuda) = backend() else { return };
    use crate::integer_layers::{layer_with as with, Extra};
    use DataType::{F32, I32, I8, U8};
    use Operands::Symmetric as S;
    let then = |relu: bool, to: DataType| Extra { then: Some((relu, to)), ..Extra::default() };
    let matmul = QuantizedAnchor::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::None };
    let convs: &[&str] = &["int8_conv_implicit_gemm", "int8_conv_library_sums"];
    let products: &[&str] = &["int8_product_cublaslt_sums", "int8_product_as_1x1_implicit_gemm"];
    let cases = [
        ("1x1, 64 channels, 256 filters, int32 bias, ReLU, int8", with(conv(1, &[1, 1], &[0, 0]), S, &[2, 64, 7, 7], &[256, 64, 1, 1], 256, Some(I32), false, I8, then(true, I8)), convs),
        ("3x3 stride 2, 48 channels, 100 filters, float bias, ReLU, uint8", with(conv(1, &[2, 2], &[1, 1]), S, &[3, 48, 21, 19], &[100, 48, 3, 3], 100, Some(F32), true, I8, then(true, U8)), convs),
        ("3x3, 20 filters, uint8 levels, int8", with(conv(1, &[1, 1], &[1, 1]), S, &[2, 32, 12, 15], &[20, 32, 3, 3], 20, Some(I32), false, U8, then(false, I8)), convs),
        ("product, int32 bias, ReLU, int8", with(matmul.clone(), S, &[300, 128], &[128, 136], 136, Some(I32), false, I8, then(true, I8)), products),
        ("product, ReLU, uint8", with(matmul, S, &[3, 5, 64], &[64, 24], 24, None, true, I8, then(true, U8)), products),
    ];
    for (what, (net, feeds), names) in cases {
        check_every_tactic(cuda, what, &net, &feeds, names);
    }
}

/// The levels looked up in a per-column table (`QuantizedParams::lookup`, the island after a
/// Q/DQ transformer's product folded in): both product tactics and both epilogues (levels, and
/// the general one a float bias takes), int8 and uint8 levels and tables, columns in sixteens
/// (16-byte stores) and not, give the cpu oracle's bytes.
#[test]
fn integer_products_looking_their_levels_up_match_the_cpu_oracle_exactly() {
    let Some(cuda) = backend() else { return };
    use crate::integer_layers::{layer_with as with, lookup};
    use DataType::{F32, I32, I8, U8};
    use Operands::Symmetric as S;
    let matmul = QuantizedAnchor::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::None };
    let matmul_t = QuantizedAnchor::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::Transpose };
    let products: &[&str] = &["int8_product_cublaslt_sums", "int8_product_as_1x1_implicit_gemm"];
    let cases = [
        ("product, 768 columns, int8 table", with(matmul.clone(), S, &[2, 300, 128], &[128, 768], 768, None, false, I8, lookup(I8))),
        ("product, int32 bias, 136 columns, uint8 levels, int8 table", with(matmul.clone(), S, &[300, 128], &[128, 136], 136, Some(I32), false, U8, lookup(I8))),
        ("product, float bias, ReLU, 24 columns, uint8 table", with(matmul, S, &[3, 5, 64], &[64, 24], 24, Some(F32), true, I8, lookup(U8))),
        ("product, B transposed, 200 columns, int8 table", with(matmul_t, S, &[130, 64], &[200, 64], 200, None, false, I8, lookup(I8))),
    ];
    for (what, (net, feeds)) in cases {
        check_every_tactic(cuda, what, &net, &feeds, products);
    }
}

/// A skip connection joined at the second quantization (`DQ(y) + DQ(join) → Add → [Relu] →
/// QuantizeLinear`): every convolution and product tactic, both epilogues, the 16-byte store
/// (filters in sixteens, the join staged beside the output tile) and the byte-wise one, int8
/// and uint8 levels, joins and results give the cpu oracle's levels. A join scale of 8 beside
/// levels of scale 16 at scale 32 puts every other result at a rounding tie (the exact path);
/// 5.3 puts few there (the fast one). The fast path's ratio form takes scale ratios summing to
/// at most 16: 480 (15.5) is near its limit, and 600 (19.25) takes the form that adds the
/// dequantized values first.
#[test]
fn integer_layers_joining_a_skip_connection_match_the_cpu_oracle_exactly() {
    let Some(cuda) = backend() else { return };
    use crate::integer_layers::{join, layer_with as with};
    use DataType::{F32, I32, I8, U8};
    use Operands::Symmetric as S;
    let matmul = QuantizedAnchor::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::None };
    let convs: &[&str] = &["int8_conv_implicit_gemm", "int8_conv_library_sums"];
    let products: &[&str] = &["int8_product_cublaslt_sums", "int8_product_as_1x1_implicit_gemm"];
    let cases = [
        ("1x1, 64 channels, 256 filters, int32 bias, int8 join at ties, ReLU, int8", with(conv(1, &[1, 1], &[0, 0]), S, &[2, 64, 7, 7], &[256, 64, 1, 1], 256, Some(I32), false, I8, join(true, I8, I8, &[2, 256, 7, 7], 8.0)), convs),
        ("1x1, 64 channels, 128 filters, 330 pixels, int8 join, uint8", with(conv(1, &[1, 1], &[0, 0]), S, &[3, 64, 10, 11], &[128, 64, 1, 1], 128, None, false, I8, join(false, U8, I8, &[3, 128, 10, 11], 5.3)), convs),
        ("1x1, 64 channels, 128 filters, 330 pixels, int8 join of scale 480, uint8", with(conv(1, &[1, 1], &[0, 0]), S, &[3, 64, 10, 11], &[128, 64, 1, 1], 128, None, false, I8, join(false, U8, I8, &[3, 128, 10, 11], 480.0)), convs),
        ("1x1, 64 channels, 128 filters, 330 pixels, uint8 join of scale 600, ReLU, int8", with(conv(1, &[1, 1], &[0, 0]), S, &[3, 64, 10, 11], &[128, 64, 1, 1], 128, None, false, I8, join(true, I8, U8, &[3, 128, 10, 11], 600.0)), convs),
        ("3x3, 32 channels, 64 filters, uint8 levels, uint8 join, ReLU, uint8", with(conv(1, &[1, 1], &[1, 1]), S, &[2, 32, 12, 15], &[64, 32, 3, 3], 64, Some(I32), false, U8, join(true, U8, U8, &[2, 64, 12, 15], 5.3)), convs),
        ("3x3 stride 2, 48 channels, 100 filters, float bias, uint8 join, ReLU, int8", with(conv(1, &[2, 2], &[1, 1]), S, &[3, 48, 21, 19], &[100, 48, 3, 3], 100, Some(F32), false, I8, join(true, I8, U8, &[3, 100, 11, 10], 8.0)), convs),
        ("product, 64 columns, int8 join, uint8", with(matmul.clone(), S, &[3, 5, 64], &[64, 64], 64, Some(I32), false, I8, join(false, U8, I8, &[3, 5, 64], 8.0)), products),
        ("product, 136 columns, uint8 join, ReLU, int8", with(matmul, S, &[300, 128], &[128, 136], 136, None, true, I8, join(true, I8, U8, &[300, 136], 5.3)), products),
    ];
    for (what, (net, feeds), names) in cases {
        check_every_tactic(cuda, what, &net, &feeds, names);
    }
}

/// Pointwise layers (the kernel's levels epilogue) with more pixel tiles than a wave of blocks
/// run persistent (each block strides over the pixel tiles of one filter block, the next
/// tile's steps loading while this one's levels are stored, its output tile after the
/// stages): every kernel tactic gives the cpu oracle's values through the plain and joined
/// stores, with a last tile that is not full, lanes that take unequal numbers of tiles, and
/// main loops of one step and of four (the last a 16-channel piece).
#[test]
fn pointwise_int8_layers_over_more_tiles_than_a_wave_run_persistent_and_match_the_cpu_oracle() {
    let Some(cuda) = backend() else { return };
    use crate::integer_layers::{join, layer_with as with, Extra};
    use DataType::{I32, I8, U8};
    use Operands::Symmetric as S;
    let matmul = QuantizedAnchor::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::None };
    // 40,000 and 60,000 pixels: 313 and 469 tiles of 128, over two or three blocks of 132 or
    // so multiprocessors.
    let cases = [
        ("1x1, 64 channels, 128 filters, 40,000 pixels, int8 join, ReLU, int8", with(conv(1, &[1, 1], &[0, 0]), S, &[4, 64, 100, 100], &[128, 64, 1, 1], 128, Some(I32), false, I8, join(true, I8, I8, &[4, 128, 100, 100], 5.3))),
        ("1x1, 64 channels, 256 filters, 40,000 pixels, int32 bias, ReLU, uint8", with(conv(1, &[1, 1], &[0, 0]), S, &[4, 64, 100, 100], &[256, 64, 1, 1], 256, Some(I32), true, U8, Extra::default())),
        ("1x1, 208 channels, 40 filters, 60,000 pixels, no bias, int8", with(conv(1, &[1, 1], &[0, 0]), S, &[6, 208, 100, 100], &[40, 208, 1, 1], 40, None, false, I8, Extra::default())),
        ("product, 60,000 rows, 136 columns, uint8 join, ReLU, int8", with(matmul, S, &[60_000, 128], &[128, 136], 136, None, true, I8, join(true, I8, U8, &[60_000, 136], 8.0))),
    ];
    for (what, (net, feeds)) in cases {
        let want = kiln_cpu::CpuBackend::new().prepare(&net).unwrap().execute(&feeds).unwrap();
        let layer = last_layer(&net);
        let kernels: Vec<_> = cuda.tactics(&net, layer, MathMode::EXACT).into_iter().filter(|t| t.id.name.contains("implicit_gemm")).collect();
        assert!(!kernels.is_empty(), "{what}: no kernel tactic");
        for t in &kernels {
            let before = persistent_layers_enqueued();
            let got = run_with_tactic(cuda, &net, &feeds, layer, &t.id, what);
            assert!(persistent_layers_enqueued() > before, "{what}: {} did not run persistent", t.id.name);
            assert_eq!((got[0].dtype(), got[0].data()), (want[0].dtype(), want[0].data()), "{what} with {}", t.id.name);
        }
    }
}

#[test]
fn integer_layers_match_the_cpu_oracle_exactly() {
    use Operands::{Asymmetric as A, Symmetric as S};
    let matmul = QuantizedAnchor::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::None };
    let matmul_t = QuantizedAnchor::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::Transpose };
    let cases = [
        // Convolutions: kiln's INT8 kernel, the tactic an untimed build runs (16+ channels).
        ("int8 3x3 conv, int32 bias, ReLU, int8", layer(conv(1, &[1, 1], &[1, 1]), S, &[2, 16, 9, 7], &[8, 16, 3, 3], 8, Some(DataType::I32), true, DataType::I8)),
        ("int8 strided 1x1 conv, float bias, uint8", layer(conv(1, &[2, 2], &[0, 0]), S, &[3, 8, 8, 8], &[12, 8, 1, 1], 12, Some(DataType::F32), false, DataType::U8)),
        ("int8 3x3 conv, float output", layer(conv(1, &[1, 1], &[1, 1]), S, &[1, 32, 6, 6], &[4, 32, 3, 3], 4, None, true, DataType::F32)),
        // A 1x1 convolution (kiln's kernel here; cuBLASLt IMMA over NHWC pixels as the other tactic).
        ("int8 1x1 conv, int32 bias, ReLU, int8", layer(conv(1, &[1, 1], &[0, 0]), S, &[2, 32, 5, 7], &[16, 32, 1, 1], 16, Some(DataType::I32), true, DataType::I8)),
        // cuBLASLt IMMA products.
        ("int8 product, int32 bias, int8", layer(matmul.clone(), S, &[3, 5, 64], &[64, 24], 24, Some(DataType::I32), false, DataType::I8)),
        ("int8 product, B transposed, float", layer(matmul_t.clone(), S, &[7, 32], &[16, 32], 16, Some(DataType::F32), true, DataType::F32)),
        // Batched B of A's batch dims (attention's Q·Kᵀ and P·V): one strided-batch IMMA product.
        ("int8 batched product, int8", layer(matmul.clone(), S, &[2, 3, 5, 32], &[2, 3, 32, 12], 12, None, false, DataType::I8)),
        ("int8 batched product, B transposed, float", layer(matmul_t, S, &[4, 6, 64], &[4, 8, 64], 8, None, true, DataType::F32)),
        // Width taps folded into channels (kiln's kernel).
        ("int8 conv, 3 input channels", layer(conv(1, &[2, 2], &[3, 3]), S, &[2, 3, 13, 13], &[8, 3, 7, 7], 8, Some(DataType::I32), true, DataType::I8)),
        // The exact f32 fallback.
        ("uint8 3x3 conv, int32 bias, ReLU, uint8", layer(conv(1, &[1, 1], &[1, 1]), A, &[2, 3, 7, 6], &[4, 3, 3, 3], 4, Some(DataType::I32), true, DataType::U8)),
        ("uint8 grouped strided conv, int8", layer(conv(2, &[2, 2], &[1, 1]), A, &[1, 4, 9, 9], &[6, 2, 3, 3], 6, None, false, DataType::I8)),
        ("uint8 1-D conv, float output, ReLU", layer(conv(1, &[1], &[1]), A, &[2, 3, 11], &[5, 3, 3], 5, Some(DataType::F32), true, DataType::F32)),
        ("uint8 product, int32 bias, uint8", layer(matmul.clone(), A, &[3, 40], &[40, 8], 8, Some(DataType::I32), false, DataType::U8)),
        ("int8 product, odd k", layer(matmul, S, &[4, 30], &[30, 8], 8, None, false, DataType::I8)),
    ];
    for (what, (net, feeds)) in cases {
        check_network(what, &net, &feeds, 0.0);
    }
}

/// Float outputs narrower than f32 (an FP16 build's integer layers round their f32 result
/// once): value for value the cpu oracle's, through kiln's convolution kernel and IMMA.
#[test]
fn integer_layers_with_f16_and_bf16_outputs_match_the_cpu_oracle_exactly() {
    use Operands::Symmetric as S;
    let matmul = QuantizedAnchor::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::None };
    let cases = [
        ("int8 3x3 conv, float bias, ReLU, f16", layer(conv(1, &[1, 1], &[1, 1]), S, &[2, 32, 6, 6], &[24, 32, 3, 3], 24, Some(DataType::F32), true, DataType::F16)),
        ("int8 product, f16", layer(matmul.clone(), S, &[5, 64], &[64, 24], 24, None, false, DataType::F16)),
        ("int8 product, int32 bias, bf16", layer(matmul, S, &[3, 4, 32], &[32, 16], 16, Some(DataType::I32), true, DataType::BF16)),
    ];
    for (what, (net, feeds)) in cases {
        check_network(what, &net, &feeds, 0.0);
    }
}

/// FP8 (float8 e4m3fn) layers against the cpu oracle's exact sums. Hopper's FP8 tensor cores
/// keep fewer bits than f32 while they sum (cuBLASLt promotes the partial sums to f32 only
/// between blocks of the depth), so an output that cancels to near 0 has a large error of its
/// own: every output is held to `tolerance` of the largest one, not of itself. Products without bias or ReLU run whole on cuBLASLt (scales and the output type
/// applied there, per-column scales as its outer vector); the others are its f32 sums and the
/// epilogue kernel; a depth that is not a multiple of 16, and convolutions, the f32 fallback.
#[test]
fn fp8_layers_match_the_cpu_oracle_to_f32_summation() {
    use Operands::Float8 as F;
    let matmul = QuantizedAnchor::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::None };
    let matmul_t = QuantizedAnchor::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::Transpose };
    let cases = [
        ("fp8 product, per-column scales, f16", layer(matmul.clone(), F, &[40, 64], &[64, 48], 48, None, false, DataType::F16), 2e-3),
        ("fp8 product, one scale, f32", layer(matmul.clone(), F, &[3, 5, 96], &[96, 32], 1, None, false, DataType::F32), 2e-3),
        ("fp8 product, B transposed, bf16", layer(matmul_t.clone(), F, &[17, 32], &[64, 32], 64, None, false, DataType::BF16), 8e-3),
        ("fp8 product, float bias, ReLU, f32", layer(matmul.clone(), F, &[9, 128], &[128, 16], 16, Some(DataType::F32), true, DataType::F32), 2e-3),
        ("fp8 batched product, f16", layer(matmul_t, F, &[2, 3, 16, 32], &[2, 3, 16, 32], 16, None, false, DataType::F16), 2e-3),
        // The f32 fallback sums in f32: closer.
        ("fp8 product, odd depth, f32", layer(matmul, F, &[4, 30], &[30, 16], 16, None, false, DataType::F32), 1e-5),
        ("fp8 3x3 conv, float bias, f32", layer(conv(1, &[1, 1], &[1, 1]), F, &[2, 16, 6, 5], &[8, 16, 3, 3], 8, Some(DataType::F32), false, DataType::F32), 1e-5),
    ];
    for (what, (net, feeds), tolerance) in cases {
        let Some(cuda) = backend() else { return };
        let want = kiln_cpu::CpuBackend::new().prepare(&net).unwrap().execute(&feeds).unwrap().remove(0);
        let got = cuda.prepare(&net).unwrap_or_else(|e| panic!("{what}: {e}")).execute(&feeds).unwrap_or_else(|e| panic!("{what}: {e}")).remove(0);
        assert_eq!((got.dtype(), got.shape()), (want.dtype(), want.shape()), "{what}");
        let (got, want) = (got.to_f64_vec(), want.to_f64_vec());
        let largest = want.iter().fold(0f64, |m, v| m.max(v.abs()));
        let worst = got.iter().zip(&want).fold(0f64, |m, (g, w)| m.max((g - w).abs()));
        assert!(worst <= tolerance * largest, "{what}: off by {worst}, {} of the largest output {largest} (tolerance {tolerance})", worst / largest);
    }
}

/// Integer layers ending in their int32 sums (ONNX ConvInteger and MatMulInteger): IMMA's int32
/// sums for symmetric int8, kiln's depthwise kernel's, the exact f32 fallback with zero points;
/// the cpu oracle's integers.
#[test]
fn int32_sums_layers_match_the_cpu_oracle_exactly() {
    use crate::integer_layers::ints;
    use kiln::{HostTensor, LayerKind, Network, QuantizedParams as Q, Shape};
    let matmul = QuantizedAnchor::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::None };
    // (what, anchor, x, w, zero points of x and w (per output channel) as (dtype, values))
    let cases: [(&str, QuantizedAnchor, HostTensor, HostTensor, Option<HostTensor>, Option<HostTensor>); 5] = [
        ("int8 1x1 conv", conv(1, &[1, 1], &[0, 0]), ints(&[2, 32, 5, 7], DataType::I8, -128, 128, 1), ints(&[16, 32, 1, 1], DataType::I8, -127, 128, 2), None, None),
        ("int8 3x3 depthwise conv", conv(24, &[1, 1], &[1, 1]), ints(&[2, 24, 6, 9], DataType::I8, -128, 128, 13), ints(&[24, 1, 3, 3], DataType::I8, -128, 128, 14), None, None),
        ("int8 product", matmul.clone(), ints(&[3, 5, 64], DataType::I8, -128, 128, 3), ints(&[64, 24], DataType::I8, -127, 128, 4), None, None),
        ("uint8 3x3 conv, zero points", conv(1, &[1, 1], &[1, 1]), ints(&[2, 3, 7, 6], DataType::U8, 0, 256, 5), ints(&[4, 3, 3, 3], DataType::U8, 0, 256, 6), Some(ints(&[], DataType::U8, 90, 91, 7)), Some(ints(&[4], DataType::U8, 0, 256, 8))),
        ("uint8 by int8 product, zero points", matmul, ints(&[4, 40], DataType::U8, 0, 256, 9), ints(&[40, 8], DataType::I8, -128, 128, 10), Some(ints(&[], DataType::U8, 128, 129, 11)), Some(ints(&[8], DataType::I8, -3, 4, 12))),
    ];
    for (what, anchor, x, w, x_zero, w_zero) in cases {
        let mut net = Network::new(what);
        let mut slots = vec![None; Q::SLOTS];
        slots[Q::X] = Some(net.add_input("x", x.dtype(), Shape::fixed(x.shape())).expect("x"));
        for (slot, t) in [(Q::W, Some(w)), (Q::X_ZERO, x_zero), (Q::W_ZERO, w_zero)] {
            if let Some(t) = t {
                let weights = net.add_weights(t);
                let layer = net.add_layer(&format!("const{slot}"), LayerKind::Constant { weights }, vec![]).expect("constant");
                slots[slot] = Some(net.output(layer, 0));
            }
        }
        let layer = net.add_layer("sums", LayerKind::Quantized(Q { anchor, relu: false, output: DataType::I32, then: None, lookup: None }), slots).expect(what);
        net.mark_output(net.output(layer, 0)).expect("output");
        check_network(what, &net, &[x], 0.0);
    }
}

/// onnxruntime's Q/DQ fixture (uint8 activations) builds into integer layers on cuda and gives
/// the cpu backend's integers.
#[test]
fn the_qdq_fixture_runs_as_integer_layers_and_matches_the_cpu_backend() {
    let Some(cuda) = backend() else { return };
    crate::integer_layers::check_qdq_fixture(cuda);
}

/// onnxruntime's Q/DQ attention fixture: Q, K and V as one integer product with per-column
/// output scales and level tables, its slices read by the attention, in f32 and in an FP16 build
/// (where the attention runs on the integer tensor cores), each against the cpu backend.
#[test]
fn the_qdq_attention_fixture_merges_its_projections_and_matches_the_cpu_backend() {
    let Some(cuda) = backend() else { return };
    crate::integer_layers::check_qdq_attention_fixture(cuda, &kiln::BuilderConfig::default(), 1e-3);
    let mut fp16 = kiln::BuilderConfig::default();
    fp16.set_flag(kiln::BuilderFlag::Fp16);
    let before = kiln_cuda::ops::flash::integer_attentions_enqueued();
    crate::integer_layers::check_qdq_attention_fixture(cuda, &fp16, 2e-2);
    assert!(kiln_cuda::ops::flash::integer_attentions_enqueued() > before, "the FP16 build's attention ran on attention_int8");
}

/// The float islands between 8-bit tensors: `DQ(a) + DQ(b) → ·scale → Relu → Q`, and the same
/// with the sum quantized and dequantized again before the ReLU. The passes make each one
/// fused layer reading the integers; cuda runs it as one chain kernel and gives the cpu
/// oracle's levels exactly: all-8-bit (16 lanes), with an f32 per-channel operand (4 lanes),
/// and at a shape no vector fits.
#[test]
fn quantized_pointwise_islands_match_the_cpu_oracle_exactly() {
    use kiln::passes::{PassContext, Pipeline};
    use kiln::{ElementwiseOp, HostTensor, LayerKind, Network, Shape, TensorData, TensorId};
    use rand::Rng;
    if backend().is_none() {
        return;
    }
    let mut rng = crate::common::rng(21);
    // Without the f32 operand the island is a function of two levels: cuda's table kernels.
    for (shape, per_channel, requantized, to) in [
        ([2usize, 16, 8, 32], false, false, DataType::I8),
        ([2, 16, 8, 32], true, true, DataType::U8),
        ([3, 5, 7, 9], true, false, DataType::I8),
        ([3, 5, 7, 9], false, true, DataType::U8),
        ([64, 64, 28, 28], false, true, DataType::I8),
    ] {
        let what = format!("{shape:?} per-channel {per_channel} requantized {requantized} {to}");
        let mut net = Network::new("island");
        let a = net.add_input("a", DataType::I8, Shape::fixed(&shape)).expect("a");
        let b = net.add_input("b", DataType::U8, Shape::fixed(&shape)).expect("b");
        let mut constant = |name: &str, t: HostTensor| {
            let w = net.add_weights(t);
            let l = net.add_layer(name, LayerKind::Constant { weights: w }, vec![]).expect(name);
            net.output(l, 0)
        };
        let scalar = |v: f32| HostTensor::from_f32(vec![], vec![v]).expect("scalar");
        let (sa, sb, sy) = (constant("sa", scalar(0.031)), constant("sb", scalar(0.017)), constant("sy", scalar(0.043)));
        let zb = constant("zb", HostTensor::new(vec![], TensorData::U8(vec![121])).expect("zb"));
        let zy = match to {
            DataType::U8 => constant("zy", HostTensor::new(vec![], TensorData::U8(vec![7])).expect("zy")),
            _ => constant("zy", HostTensor::new(vec![], TensorData::I8(vec![-5])).expect("zy")),
        };
        let gains = constant("gains", HostTensor::from_f32(vec![1, shape[1], 1, 1], (0..shape[1]).map(|c| 0.5 + c as f32 * 0.25).collect()).expect("gains"));
        let mut layer = |name: &str, kind: LayerKind, inputs: Vec<Option<TensorId>>| {
            let l = net.add_layer(name, kind, inputs).expect(name);
            net.output(l, 0)
        };
        let da = layer("dq_a", LayerKind::Dequantize { axis: None, to: None }, vec![Some(a), Some(sa), None]);
        let db = layer("dq_b", LayerKind::Dequantize { axis: None, to: None }, vec![Some(b), Some(sb), Some(zb)]);
        let mut running = layer("add", LayerKind::Elementwise { op: ElementwiseOp::Sum }, vec![Some(da), Some(db)]);
        if per_channel {
            running = layer("gain", LayerKind::Elementwise { op: ElementwiseOp::Prod }, vec![Some(running), Some(gains)]);
        }
        if requantized {
            let q = layer("q_add", LayerKind::Quantize { axis: None, to }, vec![Some(running), Some(sy), Some(zy)]);
            running = layer("dq_add", LayerKind::Dequantize { axis: None, to: None }, vec![Some(q), Some(sy), Some(zy)]);
        }
        let relu = layer("relu", LayerKind::Activation { kind: kiln::ActivationKind::Relu }, vec![Some(running)]);
        let y = layer("q_relu", LayerKind::Quantize { axis: None, to }, vec![Some(relu), Some(sy), Some(zy)]);
        net.mark_output(y).expect("output");

        let fused = Pipeline::standard().run(&net, &PassContext { folding_backend: None, quantized_layers: true }).expect("passes");
        let islands = fused.layers().iter().filter(|l| matches!(&l.kind, LayerKind::Fused(p) if p.dequantized.len() == 2)).count();
        assert_eq!(islands, 1, "{what}: one fused layer reads both integers\n{}", fused.dump());
        let n: usize = shape.iter().product();
        let feeds = [
            HostTensor::new(shape.to_vec(), TensorData::I8((0..n).map(|_| rng.gen()).collect())).expect("a"),
            HostTensor::new(shape.to_vec(), TensorData::U8((0..n).map(|_| rng.gen()).collect())).expect("b"),
        ];
        check_network(&what, &fused, &feeds, 0.0);
    }
    // One level in: `DQ → Relu → Q` to another scale (a ReLU between integer layers), a
    // 256-entry table.
    for shape in [[4usize, 32, 16, 16], [3, 5, 7, 9]] {
        let mut net = Network::new("unary island");
        let a = net.add_input("a", DataType::I8, Shape::fixed(&shape)).expect("a");
        let mut constant = |name: &str, t: HostTensor| {
            let w = net.add_weights(t);
            let l = net.add_layer(name, LayerKind::Constant { weights: w }, vec![]).expect(name);
            net.output(l, 0)
        };
        let (sa, sy) = (constant("sa", HostTensor::from_f32(vec![], vec![0.037]).expect("sa")), constant("sy", HostTensor::from_f32(vec![], vec![0.029]).expect("sy")));
        let zy = constant("zy", HostTensor::new(vec![], TensorData::U8(vec![3])).expect("zy"));
        let mut layer = |name: &str, kind: LayerKind, inputs: Vec<Option<TensorId>>| {
            let l = net.add_layer(name, kind, inputs).expect(name);
            net.output(l, 0)
        };
        let da = layer("dq_a", LayerKind::Dequantize { axis: None, to: None }, vec![Some(a), Some(sa), None]);
        let relu = layer("relu", LayerKind::Activation { kind: kiln::ActivationKind::Relu }, vec![Some(da)]);
        let y = layer("q", LayerKind::Quantize { axis: None, to: DataType::U8 }, vec![Some(relu), Some(sy), Some(zy)]);
        net.mark_output(y).expect("output");
        let fused = Pipeline::standard().run(&net, &PassContext { folding_backend: None, quantized_layers: true }).expect("passes");
        assert!(fused.layers().iter().any(|l| matches!(&l.kind, LayerKind::Fused(p) if p.dequantized.len() == 1)), "{}", fused.dump());
        let n: usize = shape.iter().product();
        let feeds = [HostTensor::new(shape.to_vec(), TensorData::I8((0..n).map(|_| rng.gen()).collect())).expect("a")];
        check_network(&format!("unary island {shape:?}"), &fused, &feeds, 0.0);
    }
}

/// A Q/DQ transformer's `DQ → + bias → activation → · gain → Q` after a product, whose bias and
/// gain vary along the columns: cuda fills a table of every (column, level) pair and looks the
/// levels up (`chain_columns`) where there are 512 rows or more and the columns are a multiple
/// of 16 (a partial tile of 32 here), with the level first or second, and runs the chain
/// kernel elsewhere: the cpu oracle's levels exactly either way.
#[test]
fn islands_with_per_column_operands_match_the_cpu_oracle_exactly() {
    use rand::Rng;
    if backend().is_none() {
        return;
    }
    let mut rng = crate::common::rng(22);
    for (shape, to) in [(vec![4usize, 256, 80], DataType::I8), (vec![2, 300, 160], DataType::U8), (vec![3, 20, 96], DataType::I8), (vec![600, 24], DataType::I8)] {
        let what = format!("{shape:?} to {to}");
        let (fused, _) = column_island(&mut rng, &shape, to, &what);
        let n: usize = shape.iter().product();
        let feeds = [HostTensor::new(shape.clone(), TensorData::I8((0..n).map(|_| rng.gen()).collect())).expect("a")];
        check_network(&what, &fused, &feeds, 0.0);
    }
}

/// `DQ(a) + bias → Sigmoid → · gain → Q` (the legacy export's `bias + DQ(a)` for a uint8
/// output), fused by the passes into one island reading the integers: a table per column
/// where there are rows enough. Also the gain's weights id.
fn column_island(rng: &mut rand_chacha::ChaCha8Rng, shape: &[usize], to: DataType, what: &str) -> (kiln::Network, kiln::WeightsId) {
    use kiln::passes::{PassContext, Pipeline};
    use kiln::{ActivationKind, ElementwiseOp, LayerKind, Network, Shape, TensorId};
    use rand::Rng;
    let columns = shape[shape.len() - 1];
    let mut net = Network::new("column island");
    let a = net.add_input("a", DataType::I8, Shape::fixed(shape)).expect("a");
    let mut gain_id = None;
    let mut constant = |name: &str, t: HostTensor| {
        let w = net.add_weights(t);
        if name == "gain" {
            gain_id = Some(w);
        }
        let l = net.add_layer(name, LayerKind::Constant { weights: w }, vec![]).expect(name);
        net.output(l, 0)
    };
    let (sa, sy) = (constant("sa", HostTensor::from_f32(vec![], vec![0.047]).expect("sa")), constant("sy", HostTensor::from_f32(vec![], vec![0.0213]).expect("sy")));
    let zy = match to {
        DataType::U8 => constant("zy", HostTensor::new(vec![], TensorData::U8(vec![9])).expect("zy")),
        _ => constant("zy", HostTensor::new(vec![], TensorData::I8(vec![-4])).expect("zy")),
    };
    let bias = constant("bias", HostTensor::from_f32(vec![columns], (0..columns).map(|_| rng.gen_range(-2.0f32..2.0)).collect()).expect("bias"));
    let gain = constant("gain", HostTensor::from_f32(vec![columns], (0..columns).map(|_| rng.gen_range(0.25f32..1.5)).collect()).expect("gain"));
    let mut layer = |name: &str, kind: LayerKind, inputs: Vec<Option<TensorId>>| {
        let l = net.add_layer(name, kind, inputs).expect(name);
        net.output(l, 0)
    };
    let da = layer("dq_a", LayerKind::Dequantize { axis: None, to: None }, vec![Some(a), Some(sa), None]);
    // A legacy export adds the product to the bias: the level is then the chain's operand.
    let bias_first = to == DataType::U8;
    let added = if bias_first { vec![Some(bias), Some(da)] } else { vec![Some(da), Some(bias)] };
    let biased = layer("bias_add", LayerKind::Elementwise { op: ElementwiseOp::Sum }, added);
    let active = layer("sigmoid", LayerKind::Activation { kind: ActivationKind::Sigmoid }, vec![Some(biased)]);
    let gained = layer("gain_mul", LayerKind::Elementwise { op: ElementwiseOp::Prod }, vec![Some(active), Some(gain)]);
    let y = layer("q", LayerKind::Quantize { axis: None, to }, vec![Some(gained), Some(sy), Some(zy)]);
    net.mark_output(y).expect("output");
    let fused = Pipeline::standard().run(&net, &PassContext { folding_backend: None, quantized_layers: true }).expect("passes");
    let islands = fused.layers().iter().filter(|l| matches!(&l.kind, LayerKind::Fused(p) if p.dequantized.len() == 1)).count();
    assert_eq!(islands, 1, "{what}: one fused layer reads the integers\n{}", fused.dump());
    (fused, gain_id.expect("the gain's weights"))
}

/// A column island's tables are filled once and kept across runs; refitting one of its
/// operands (the gain, not the first) fills them again. Each run against the cpu oracle.
#[test]
fn column_tables_are_kept_across_runs_and_filled_again_after_a_refit() {
    use rand::Rng;
    let Some(cuda) = backend() else { return };
    let mut rng = crate::common::rng(23);
    let shape = [4usize, 256, 80];
    let (mut net, gain) = column_island(&mut rng, &shape, DataType::I8, "refit island");
    let mut prepared = cuda.prepare(&net).expect("prepare");
    let n: usize = shape.iter().product();
    let mut feed = || [HostTensor::new(shape.to_vec(), TensorData::I8((0..n).map(|_| rng.gen()).collect())).expect("a")];
    let expect = |net: &kiln::Network, prepared: &dyn kiln::Executable, feeds: &[HostTensor], what: &str| {
        let want = kiln_cpu::CpuBackend::new().prepare(net).expect("cpu").execute(feeds).expect("cpu run");
        let got = prepared.execute(feeds).expect("cuda run");
        assert_eq!(crate::common::worst_error(&got[0], &want[0]), 0.0, "{what}: differs from the cpu oracle");
    };
    for run in 0..3 {
        expect(&net, prepared.as_ref(), &feed(), &format!("run {run}"));
    }
    let new_gain = Arc::new(HostTensor::from_f32(vec![shape[2]], (0..shape[2]).map(|i| if i % 2 == 0 { -0.75 } else { 1.25 }).collect()).expect("gain"));
    let changes = [(gain, new_gain)];
    prepared.refit(&changes).expect("refit");
    net.replace_weights(&changes).expect("replace");
    for run in 0..2 {
        expect(&net, prepared.as_ref(), &feed(), &format!("run {run} after the refit"));
    }
}

/// A Q/DQ transformer's `DQ → + bias → + DQ(residual) → LayerNorm → Q` fused by the passes:
/// `chain_rows` (a warp per row) where rows are runs of 4 up to 1024, the steps one by one
/// elsewhere (a row of 30, a row of 1100), against the cpu oracle; likewise a layer norm of
/// dequantized levels alone (ConvNeXt's). The row statistics sum in
/// another order and `rsqrtf` rounds its own way, which may move a value across a level's
/// edge: at most one level.
#[test]
fn layer_norm_islands_match_the_cpu_oracle_to_a_level() {
    use kiln::passes::{PassContext, Pipeline};
    use kiln::{ElementwiseOp, HostTensor, LayerKind, Network, PostOp, Shape, TensorData, TensorId};
    use rand::Rng;
    if backend().is_none() {
        return;
    }
    let mut rng = crate::common::rng(41);
    // The residual as broadcast over a middle or the first dim: chain_rows reads it through the
    // element's coordinates, where the other slots are dense or repeated rows.
    let cases = [([4usize, 6, 32], [4usize, 6, 32]), ([2, 128, 768], [2, 128, 768]), ([3, 5, 30], [3, 5, 30]), ([2, 3, 1100], [2, 3, 1100]), ([4, 6, 32], [4, 1, 32]), ([2, 8, 64], [1, 8, 64])];
    // Every other case stores uint8 levels about 128 (onnxruntime's activations), the others
    // int8 levels about -3: the zero point is in each stored byte.
    for (case, (shape, r_shape)) in cases.into_iter().enumerate() {
        let (to, zero) = if case % 2 == 1 { (DataType::U8, TensorData::U8(vec![128])) } else { (DataType::I8, TensorData::I8(vec![-3])) };
        let what = format!("layer norm island {shape:?}, residual {r_shape:?}, {to:?} levels");
        let len = shape[2];
        let mut net = Network::new("layer norm island");
        let a = net.add_input("a", DataType::I8, Shape::fixed(&shape)).expect("a");
        let r = net.add_input("r", DataType::I8, Shape::fixed(&r_shape)).expect("r");
        let mut constant = |name: &str, t: HostTensor| {
            let w = net.add_weights(t);
            let l = net.add_layer(name, LayerKind::Constant { weights: w }, vec![]).expect(name);
            net.output(l, 0)
        };
        let scalar = |v: f32| HostTensor::from_f32(vec![], vec![v]).expect("scalar");
        let row = |base: f32, spread: f32, rng: &mut rand_chacha::ChaCha8Rng| HostTensor::from_f32(vec![len], (0..len).map(|_| base + rng.gen_range(-spread..spread)).collect()).expect("row");
        let (sa, sr, sy) = (constant("sa", scalar(0.031)), constant("sr", scalar(0.047)), constant("sy", scalar(0.023)));
        let bias = constant("bias", row(0.0, 0.5, &mut rng));
        let gamma = constant("gamma", row(1.0, 0.3, &mut rng));
        let beta = constant("beta", row(0.0, 0.2, &mut rng));
        let zy = constant("zy", HostTensor::new(vec![], zero).expect("zero point"));
        let mut layer = |name: &str, kind: LayerKind, inputs: Vec<Option<TensorId>>| {
            let l = net.add_layer(name, kind, inputs).expect(name);
            net.output(l, 0)
        };
        let da = layer("dq_a", LayerKind::Dequantize { axis: None, to: None }, vec![Some(a), Some(sa), None]);
        let biased = layer("bias_add", LayerKind::Elementwise { op: ElementwiseOp::Sum }, vec![Some(da), Some(bias)]);
        let dr = layer("dq_r", LayerKind::Dequantize { axis: None, to: None }, vec![Some(r), Some(sr), None]);
        let joined = layer("residual", LayerKind::Elementwise { op: ElementwiseOp::Sum }, vec![Some(biased), Some(dr)]);
        let norm = layer("norm", LayerKind::Normalization { axes: vec![2], epsilon: 1e-12, num_groups: 1 }, vec![Some(joined), Some(gamma), Some(beta)]);
        let y = layer("q_norm", LayerKind::Quantize { axis: None, to }, vec![Some(norm), Some(sy), Some(zy)]);
        net.mark_output(y).expect("output");
        let fused = Pipeline::standard().run(&net, &PassContext { folding_backend: None, quantized_layers: true }).expect("passes");
        let normalizing = |p: &kiln::FusedParams| p.epilogue.iter().any(|s| matches!(s, PostOp::Normalization { .. }));
        assert!(fused.layers().iter().any(|l| matches!(&l.kind, LayerKind::Fused(p) if p.dequantized.len() == 2 && normalizing(p))), "{what}\n{}", fused.dump());
        let n: usize = shape.iter().product();
        let feeds = [
            HostTensor::new(shape.to_vec(), TensorData::I8((0..n).map(|_| rng.gen()).collect())).expect("a"),
            HostTensor::new(r_shape.to_vec(), TensorData::I8((0..r_shape.iter().product::<usize>()).map(|_| rng.gen()).collect())).expect("r"),
        ];
        check_network(&what, &fused, &feeds, 1.0);
    }
    // ConvNeXt's `DQ → LayerNorm → Q` (no bias or residual): the layer norm heads the island.
    for shape in [[2usize, 28, 28, 96], [3, 5, 1, 1100]] {
        let what = format!("layer norm island of dequantized levels {shape:?}");
        let len = shape[3];
        let mut net = Network::new("dq layer norm q");
        let a = net.add_input("a", DataType::I8, Shape::fixed(&shape)).expect("a");
        let mut constant = |name: &str, t: HostTensor| {
            let w = net.add_weights(t);
            let l = net.add_layer(name, LayerKind::Constant { weights: w }, vec![]).expect(name);
            net.output(l, 0)
        };
        let (sa, sy) = (constant("sa", HostTensor::from_f32(vec![], vec![0.031]).expect("sa")), constant("sy", HostTensor::from_f32(vec![], vec![0.023]).expect("sy")));
        let gamma = constant("gamma", HostTensor::from_f32(vec![len], (0..len).map(|_| 1.0 + rng.gen_range(-0.3..0.3)).collect()).expect("gamma"));
        let beta = constant("beta", HostTensor::from_f32(vec![len], (0..len).map(|_| rng.gen_range(-0.2..0.2)).collect()).expect("beta"));
        let mut layer = |name: &str, kind: LayerKind, inputs: Vec<Option<TensorId>>| {
            let l = net.add_layer(name, kind, inputs).expect(name);
            net.output(l, 0)
        };
        let da = layer("dq_a", LayerKind::Dequantize { axis: None, to: None }, vec![Some(a), Some(sa), None]);
        let norm = layer("norm", LayerKind::Normalization { axes: vec![3], epsilon: 1e-6, num_groups: 1 }, vec![Some(da), Some(gamma), Some(beta)]);
        let y = layer("q_norm", LayerKind::Quantize { axis: None, to: DataType::I8 }, vec![Some(norm), Some(sy), None]);
        net.mark_output(y).expect("output");
        let fused = Pipeline::standard().run(&net, &PassContext { folding_backend: None, quantized_layers: true }).expect("passes");
        assert!(fused.layers().iter().any(|l| matches!(&l.kind, LayerKind::Fused(p) if p.anchor == kiln::FusedAnchor::Identity && p.dequantized.len() == 1)), "{what}\n{}", fused.dump());
        let n: usize = shape.iter().product();
        let feeds = [HostTensor::new(shape.to_vec(), TensorData::I8((0..n).map(|_| rng.gen()).collect())).expect("a")];
        check_network(&what, &fused, &feeds, 1.0);
    }
}

/// Max pooling of an int8 convolution's channels-last levels (the `DQ → MaxPool → Q` island
/// after ResNet's stem, which the passes pool on the integers): kiln's NHWC kernel, 16
/// channels a thread and one, against the cpu oracle.
#[test]
fn max_pooling_of_channels_last_8_bit_levels_matches_the_cpu_oracle() {
    use kiln::{LayerKind, PoolingKind, PoolingParams};
    use Operands::Symmetric as S;
    // 16 channels a thread (the 64 int8 channels): windows of up to 3×3 take every cell's load
    // at once (padding and a window's overhang masked), larger ones the loop over the cells.
    let cases = [(64, DataType::I8, 3, 2, 1), (24, DataType::U8, 3, 2, 1), (64, DataType::I8, 2, 2, 0), (64, DataType::I8, 5, 1, 2), (64, DataType::U8, 3, 1, 1)];
    for (filters, to, window, stride, pad) in cases {
        let what = format!("{window}x{window} stride {stride} max pooling of {filters} {to} channels");
        let (mut net, feeds) = layer(conv(1, &[1, 1], &[1, 1]), S, &[2, 16, 13, 11], &[filters, 16, 3, 3], filters, Some(DataType::I32), true, to);
        let levels = net.outputs()[0];
        let p = PoolingParams {
            kind: PoolingKind::Max,
            window: vec![window; 2],
            strides: vec![stride; 2],
            dilations: vec![1, 1],
            pre_padding: vec![pad; 2],
            post_padding: vec![pad; 2],
            ceil_mode: window == 2,
            average_count_excludes_padding: false,
        };
        let pool = net.add_layer("pool", LayerKind::Pooling(p), vec![Some(levels)]).expect("pool");
        net.mark_output(net.output(pool, 0)).expect("output");
        check_network(&what, &net, &feeds, 0.0);
    }
}

/// A max pooling of a convolution's channels-last levels heading a fused layer that
/// dequantizes, applies ReLU and quantizes onto another grid ([`kiln::FusedAnchor::Pooling`]:
/// ResNet's `Conv → ReLU → MaxPool` between quantizations): the levels' map looked up in the
/// pooling kernel after each maximum (int8 in, uint8 and int8 out), against the cpu oracle.
#[test]
fn a_max_pooling_with_its_levels_mapped_after_it_matches_the_cpu_oracle() {
    use kiln::{ActivationKind, FusedAnchor, FusedParams, LayerKind, PoolingKind, PoolingParams, PostOp};
    use Operands::Symmetric as S;
    for (to, zero) in [(DataType::U8, 0i32), (DataType::I8, -3)] {
        let what = format!("a 3x3 stride 2 max pooling mapped onto {to} levels");
        let (mut net, feeds) = layer(conv(1, &[1, 1], &[1, 1]), S, &[2, 16, 13, 11], &[64, 16, 3, 3], 64, Some(DataType::I32), true, DataType::I8);
        let levels = net.outputs()[0];
        let mut constant = |name: &str, t: HostTensor| {
            let w = net.add_weights(t);
            let l = net.add_layer(name, LayerKind::Constant { weights: w }, vec![]).expect(name);
            net.output(l, 0)
        };
        let scale = constant("s", HostTensor::from_f32(vec![], vec![0.037]).expect("s"));
        let zero_in = constant("z", HostTensor::new(vec![], TensorData::I8(vec![5])).expect("z"));
        let out_scale = constant("s2", HostTensor::from_f32(vec![], vec![0.021]).expect("s2"));
        let out_zero = match to {
            DataType::U8 => constant("z2", HostTensor::new(vec![], TensorData::U8(vec![zero as u8])).expect("z2")),
            _ => constant("z2", HostTensor::new(vec![], TensorData::I8(vec![zero as i8])).expect("z2")),
        };
        let p = PoolingParams {
            kind: PoolingKind::Max,
            window: vec![3, 3],
            strides: vec![2, 2],
            dilations: vec![1, 1],
            pre_padding: vec![1, 1],
            post_padding: vec![1, 1],
            ceil_mode: false,
            average_count_excludes_padding: false,
        };
        let epilogue = vec![
            PostOp::Dequantize { scale: 1, zero: Some(2) },
            PostOp::Activation(ActivationKind::Relu),
            PostOp::Quantize { to, scale: 3, zero: Some(4) },
        ];
        let kind = LayerKind::Fused(FusedParams::new(FusedAnchor::Pooling(p), 1, epilogue));
        let inputs = vec![Some(levels), Some(scale), Some(zero_in), Some(out_scale), Some(out_zero)];
        let pool = net.add_layer("pool", kind, inputs).expect("pool");
        net.mark_output(net.output(pool, 0)).expect("output");
        check_network(&what, &net, &feeds, 0.0);
    }
}

/// Per-tensor Q/DQ of transposed views (the head splits of a Q/DQ BERT after Q/DQ propagation
/// moves them onto the integers) run in the view's memory order and keep its strides, and
/// attention reads the dequantized heads (its keys transposed, as BERT's export writes them)
/// through those strides: every output against the cpu oracle, the Q/DQ exactly.
#[test]
fn qdq_of_transposed_views_and_attention_on_them_match_the_cpu_oracle() {
    use kiln::{AttentionParams, HostTensor, LayerKind, Network, Shape, ShuffleParams, TensorData, TensorId};
    use rand::Rng;
    if backend().is_none() {
        return;
    }
    let mut rng = crate::common::rng(31);
    let (batch, seq, heads, dim) = (2usize, 40, 3, 16);
    let shape = [batch, seq, heads, dim];
    let n: usize = shape.iter().product();
    let mut net = Network::new("views");
    let mut feeds = Vec::new();
    let mut inputs = Vec::new();
    for name in ["q", "k", "v"] {
        inputs.push(net.add_input(name, DataType::I8, Shape::fixed(&shape)).expect(name));
        feeds.push(HostTensor::new(shape.to_vec(), TensorData::I8((0..n).map(|_| rng.gen()).collect())).expect(name));
    }
    let x = net.add_input("x", DataType::F32, Shape::fixed(&shape)).expect("x");
    feeds.push(HostTensor::from_f32(shape.to_vec(), (0..n).map(|_| rng.gen_range(-4.0f32..4.0)).collect()).expect("x"));
    let mut constant = |name: &str, t: HostTensor| {
        let w = net.add_weights(t);
        let l = net.add_layer(name, LayerKind::Constant { weights: w }, vec![]).expect(name);
        net.output(l, 0)
    };
    let scale = constant("scale", HostTensor::from_f32(vec![], vec![0.023]).expect("scale"));
    let zero = constant("zero", HostTensor::new(vec![], TensorData::I8(vec![3])).expect("zero"));
    let mut layer = |name: &str, kind: LayerKind, inputs: Vec<Option<TensorId>>| {
        let l = net.add_layer(name, kind, inputs).expect(name);
        net.output(l, 0)
    };
    let transpose = |perm: &[usize]| LayerKind::Shuffle(ShuffleParams { first_transpose: perm.to_vec(), ..Default::default() });
    // Queries and values [b, h, s, d], keys [b, h, d, s]: views of [b, s, h, d] on cuda.
    let perms: [&[usize]; 3] = [&[0, 2, 1, 3], &[0, 2, 3, 1], &[0, 2, 1, 3]];
    let mut heads_f16 = Vec::new();
    for (i, (&t, perm)) in inputs.iter().zip(perms).enumerate() {
        let view = layer(&format!("heads{i}"), transpose(perm), vec![Some(t)]);
        heads_f16.push(layer(&format!("dq{i}"), LayerKind::Dequantize { axis: None, to: Some(DataType::F16) }, vec![Some(view), Some(scale), Some(zero)]));
    }
    let attention = AttentionParams {
        scale: (dim as f32).sqrt(),
        key_transposed: true,
        scale_multiplies: false,
        zero_nan_rows: false,
        product_levels: Some(kiln::LevelGrid { scale: 0.05, zero: 0, levels: DataType::I8 }),
        scores_levels: None,
        probs_levels: Some(kiln::LevelGrid { scale: 1.0 / 127.0, zero: 0, levels: DataType::I8 }),
        input_levels: None,
        output_levels: None,
    };
    let context = layer("attention", LayerKind::Attention(attention), heads_f16.iter().map(|&t| Some(t)).collect());
    // A f32 Dequantize of the keys' view, and a Quantize of a transposed f32 view.
    let keys = layer("keys", transpose(&[0, 2, 3, 1]), vec![Some(inputs[1])]);
    let keys_f32 = layer("dq_keys", LayerKind::Dequantize { axis: None, to: None }, vec![Some(keys), Some(scale), Some(zero)]);
    let x_view = layer("x_heads", transpose(&[0, 2, 3, 1]), vec![Some(x)]);
    let levels = layer("q_x", LayerKind::Quantize { axis: None, to: DataType::I8 }, vec![Some(x_view), Some(scale), Some(zero)]);
    // A Quantize whose one reader transposes it (a head merge) writes its levels in that
    // order (exec::write_orders), read on through a reshape.
    let merge_levels = layer("q_merge", LayerKind::Quantize { axis: None, to: DataType::I8 }, vec![Some(x), Some(scale), Some(zero)]);
    let merged = layer("merge", transpose(&[0, 2, 1, 3]), vec![Some(merge_levels)]);
    let rows = LayerKind::Shuffle(ShuffleParams { reshape: Some(vec![batch as i64, heads as i64, (seq * dim) as i64]), ..Default::default() });
    let merged_rows = layer("merge_rows", rows, vec![Some(merged)]);
    let merged_f32 = layer("dq_merge", LayerKind::Dequantize { axis: None, to: None }, vec![Some(merged_rows), Some(scale), Some(zero)]);
    for t in [heads_f16[1], keys_f32, levels, merged_f32] {
        net.mark_output(t).expect("output");
    }
    check_network("Q/DQ of transposed views", &net, &feeds, 0.0);
    net.mark_output(context).expect("context");
    // The product's levels match exactly; a probability on the edge of two levels may round
    // to either (the exponentials differ in their last bits), which moves an output by a value
    // (at most 3 here) over 127: a couple of such steps at most.
    check_network("attention on dequantized views", &net, &feeds, 0.05);
}

//! cuDNN convolutions and pooling against the cpu oracle: each configuration, each dtype, each
//! algorithm cuDNN offers (tactics), the fused bias + residual + ReLU epilogue, and the
//! fallback to kiln's direct kernel without cuDNN.

use crate::common::{backend, check_network, last_layer, one_layer, random, run_with_tactic, rng, worst_error, In};
use kiln::{
    ActivationKind, Backend, ConvolutionParams, DataType, ElementwiseOp, FusedAnchor, FusedParams, HostTensor, LayerId,
    LayerKind, MathMode, Network, PoolingKind, PoolingParams, PostOp,
};
use kiln_cuda::CudaBackend;

/// Worst error allowed per precision tier (values in [-1, 1), sums of up to ~150 products).
fn tolerance(dtype: DataType) -> f64 {
    match dtype {
        DataType::F16 => 1e-2,
        DataType::BF16 => 5e-2,
        _ => 1e-5,
    }
}

fn conv(groups: usize, strides: &[usize], dilations: &[usize], pads: &[usize]) -> ConvolutionParams {
    ConvolutionParams {
        groups,
        strides: strides.to_vec(),
        dilations: dilations.to_vec(),
        pre_padding: pads.to_vec(),
        post_padding: pads.to_vec(),
    }
}

/// (name, params, input dims, weight dims).
fn configurations() -> Vec<(&'static str, ConvolutionParams, Vec<usize>, Vec<usize>)> {
    vec![
        ("3x3 pad 1", conv(1, &[1, 1], &[1, 1], &[1, 1]), vec![2, 16, 12, 12], vec![32, 16, 3, 3]),
        ("1x1", conv(1, &[1, 1], &[1, 1], &[0, 0]), vec![2, 32, 7, 7], vec![16, 32, 1, 1]),
        ("7x7 stride 2 pad 3", conv(1, &[2, 2], &[1, 1], &[3, 3]), vec![1, 3, 20, 18], vec![8, 3, 7, 7]),
        ("groups 4 stride 2", conv(4, &[2, 2], &[1, 1], &[1, 1]), vec![2, 16, 11, 9], vec![8, 4, 3, 3]),
        ("depthwise", conv(16, &[1, 1], &[1, 1], &[1, 1]), vec![1, 16, 10, 10], vec![16, 1, 3, 3]),
        ("dilation 2", conv(1, &[1, 1], &[2, 2], &[2, 2]), vec![1, 8, 13, 13], vec![8, 8, 3, 3]),
        ("1-D", conv(1, &[2], &[1], &[1]), vec![2, 8, 31], vec![12, 8, 3]),
        ("3-D", conv(1, &[1, 2, 1], &[1, 1, 1], &[1, 1, 1]), vec![1, 4, 6, 8, 7], vec![8, 4, 3, 3, 3]),
    ]
}

fn conv_inputs(r: &mut rand_chacha::ChaCha8Rng, dtype: DataType, x: &[usize], w: &[usize], bias: bool) -> Vec<In> {
    vec![
        In::Run(random(r, dtype, x)),
        In::Const(random(r, dtype, w)),
        if bias { In::Const(random(r, dtype, &[w[0]])) } else { In::Absent },
    ]
}

#[test]
fn cudnn_convolutions_match_in_each_precision() {
    if backend().is_none() {
        return;
    }
    let mut r = rng(70);
    for dtype in [DataType::F32, DataType::F16, DataType::BF16] {
        for (name, p, x, w) in configurations() {
            let (net, feeds) = one_layer(LayerKind::Convolution(p), conv_inputs(&mut r, dtype, &x, &w, true));
            check_network(&format!("conv {name} {dtype}"), &net, &feeds, tolerance(dtype));
        }
    }
}

/// conv (+ bias), then `+ residual`, then ReLU, as the builder's fusion pass leaves them.
fn fused_conv(
    r: &mut rand_chacha::ChaCha8Rng,
    dtype: DataType,
    bias: bool,
    residual: bool,
    relu: bool,
) -> (Network, Vec<HostTensor>) {
    let (x, w) = ([2, 16, 10, 10], [16, 16, 3, 3]);
    let mut epilogue = Vec::new();
    let mut inputs = conv_inputs(r, dtype, &x, &w, bias);
    if residual {
        epilogue.push(PostOp::Elementwise { op: ElementwiseOp::Sum, operand: 3, running_first: false });
        inputs.push(In::Run(random(r, dtype, &[2, 16, 10, 10])));
    }
    if relu {
        epilogue.push(PostOp::Activation(ActivationKind::Relu));
    }
    let fused = FusedParams {
        anchor: FusedAnchor::Convolution(conv(1, &[1, 1], &[1, 1], &[1, 1])),
        anchor_inputs: 3,
        epilogue,
        dequantized: Vec::new(),
    };
    one_layer(LayerKind::Fused(fused), inputs)
}

/// Runs `tactic` for `layer` and checks the first output against the cpu oracle's `want`: the
/// dtype's tier, or 1e-2 for cuDNN's Winograd and FFT, which transform the operands (the rest,
/// kiln's kernels and cuBLASLt included, are exact f32: TF32 is off by default).
#[allow(clippy::too_many_arguments)]
fn assert_tactic_matches(cuda: &CudaBackend, net: &Network, feeds: &[HostTensor], layer: LayerId, tactic: &kiln::TacticId, dtype: DataType, want: &HostTensor, what: &str) {
    let got = run_with_tactic(cuda, net, feeds, layer, tactic, what);
    let err = worst_error(&got[0], want);
    let transformed = tactic.name.contains("fft") || tactic.name.contains("winograd");
    let allowed = if transformed { (tolerance(dtype) * 10.0).max(1e-2) } else { tolerance(dtype) };
    assert!(err <= allowed, "{what} with {tactic}: differs from the cpu oracle by {err} (tolerance {allowed})");
}

/// The tactics offered for `net`'s last layer, each run and checked against the cpu oracle
/// (see [`assert_tactic_matches`]).
fn every_tactic_matches(cuda: &CudaBackend, net: &Network, feeds: &[HostTensor], dtype: DataType, what: &str) -> Vec<kiln::TacticDesc> {
    let want = kiln_cpu::CpuBackend::new().prepare(net).unwrap().execute(feeds).unwrap();
    let layer = last_layer(net);
    let tactics = cuda.tactics(net, layer, MathMode::EXACT);
    for t in &tactics {
        assert_tactic_matches(cuda, net, feeds, layer, &t.id, dtype, &want[0], what);
    }
    tactics
}

/// The network's outputs with `tactic` chosen for `layer` (the other layers on their defaults).

#[test]
fn every_tactic_of_a_fused_convolution_matches() {
    let Some(cuda) = backend() else { return };
    let mut r = rng(71);
    for dtype in [DataType::F32, DataType::F16, DataType::BF16] {
        // Without a bias, cuDNN's fused call runs on a table of zeros.
        for (bias, residual, relu) in [(true, false, false), (true, false, true), (true, true, false), (true, true, true), (false, false, true), (false, true, false), (false, true, true)] {
            let (net, feeds) = fused_conv(&mut r, dtype, bias, residual, relu);
            let what = format!("fused conv {dtype} bias={bias} residual={residual} relu={relu}");
            let want = kiln_cpu::CpuBackend::new().prepare(&net).unwrap().execute(&feeds).unwrap();
            let layer = last_layer(&net);
            let tactics = cuda.tactics(&net, layer, MathMode::EXACT);
            let names: Vec<String> = tactics.iter().map(|t| t.id.to_string()).collect();
            assert!(names.iter().any(|n| n.contains("conv_cudnn_")), "{what}: no cuDNN tactic among {names:?}");
            assert!(
                names.iter().any(|n| n.contains("conv_direct_kernel")),
                "{what}: no direct-kernel tactic among {names:?}"
            );
            for t in &tactics {
                let got = run_with_tactic(cuda, &net, &feeds, layer, &t.id, &what);
                let err = worst_error(&got[0], &want[0]);
                // Winograd and FFT transform the operands: exact in algebra, ~1e-5 off in f32.
                let name = t.id.to_string();
                let transformed = name.contains("winograd") || name.contains("fft");
                let allowed = if transformed { tolerance(dtype) * 10.0 } else { tolerance(dtype) };
                assert!(
                    err <= allowed,
                    "{what} with {name}: differs from the cpu oracle by {err} (tolerance {allowed})"
                );
            }
        }
    }
}

/// A depthwise convolution (`c` channels, `k`×`k`, stride `s`, padding k/2) with `epilogue`
/// (operand 3 is a residual of the output's shape).
fn depthwise(r: &mut rand_chacha::ChaCha8Rng, dtype: DataType, c: usize, k: usize, s: usize, epilogue: Vec<PostOp>) -> (Network, Vec<HostTensor>) {
    let (h, w) = (13, 11);
    let (oh, ow) = ((h + 2 * (k / 2) - k) / s + 1, (w + 2 * (k / 2) - k) / s + 1);
    let mut inputs = conv_inputs(r, dtype, &[2, c, h, w], &[c, 1, k, k], true);
    if epilogue.iter().any(|p| matches!(p, PostOp::Elementwise { .. })) {
        inputs.push(In::Run(random(r, dtype, &[2, c, oh, ow])));
    }
    let anchor = FusedAnchor::Convolution(conv(c, &[s, s], &[1, 1], &[k / 2, k / 2]));
    if epilogue.is_empty() {
        return one_layer(LayerKind::Convolution(conv(c, &[s, s], &[1, 1], &[k / 2, k / 2])), inputs);
    }
    one_layer(LayerKind::Fused(FusedParams::new(anchor, 3, epilogue)), inputs)
}

#[test]
fn every_tactic_of_a_depthwise_convolution_matches() {
    let Some(cuda) = backend() else { return };
    let mut r = rng(73);
    let residual = PostOp::Elementwise { op: ElementwiseOp::Sum, operand: 3, running_first: false };
    let epilogues = [
        vec![],
        vec![PostOp::Activation(ActivationKind::Clip { min: 0.0, max: 6.0 })],
        vec![PostOp::Activation(ActivationKind::Swish), residual],
        vec![residual, PostOp::Activation(ActivationKind::HardSwish)],
        vec![PostOp::Activation(ActivationKind::GeluErf), residual, PostOp::Activation(ActivationKind::Relu)],
    ];
    for dtype in [DataType::F32, DataType::F16, DataType::BF16] {
        // 32 channels run 16-byte vectors; 12 run one channel per thread in f16 and bf16.
        for (c, k, s, e) in [(32, 3, 1, 0), (32, 3, 2, 1), (12, 5, 1, 2), (32, 7, 1, 3), (12, 7, 2, 4), (32, 5, 2, 2)] {
            let (net, feeds) = depthwise(&mut r, dtype, c, k, s, epilogues[e].clone());
            let what = format!("depthwise {dtype} c{c} {k}x{k} stride {s} epilogue {:?}", epilogues[e]);
            let tactics = every_tactic_matches(cuda, &net, &feeds, dtype, &what);
            assert!(tactics.iter().any(|t| t.id.name == "conv_depthwise_nhwc"), "{what}: no depthwise tactic among {tactics:?}");
            // The row kernel covers whole 16-byte runs of channels: 32 in every type, 12 in f32.
            let rows = c == 32 || dtype == DataType::F32;
            assert_eq!(tactics.iter().any(|t| t.id.name == "conv_depthwise_nhwc_rows"), rows, "{what}: the row kernel among {tactics:?}");
        }
    }
}

#[test]
fn every_merge_of_a_grouped_convolutions_groups_matches() {
    // 6 groups of 8 channels (RegNet-like): merged to 3, 2 and 1 (dense) groups, each with a
    // block-diagonal filter, with bias, ReLU and a residual in cuDNN's epilogue.
    let Some(cuda) = backend() else { return };
    let mut r = rng(74);
    for dtype in [DataType::F32, DataType::F16] {
        let (x, w) = ([2, 48, 9, 9], [48, 8, 3, 3]);
        let mut inputs = conv_inputs(&mut r, dtype, &x, &w, true);
        inputs.push(In::Run(random(&mut r, dtype, &x)));
        let epilogue = vec![PostOp::Elementwise { op: ElementwiseOp::Sum, operand: 3, running_first: false }, PostOp::Activation(ActivationKind::Relu)];
        let anchor = FusedAnchor::Convolution(conv(6, &[1, 1], &[1, 1], &[1, 1]));
        let (net, feeds) = one_layer(LayerKind::Fused(FusedParams::new(anchor, 3, epilogue)), inputs);
        let want = kiln_cpu::CpuBackend::new().prepare(&net).unwrap().execute(&feeds).unwrap();
        let layer = last_layer(&net);
        let tactics = cuda.tactics(&net, layer, MathMode::EXACT);
        let merged: Vec<&str> = tactics.iter().map(|t| t.id.name.as_str()).filter(|n| n.contains("merged")).collect();
        assert_eq!(merged, ["conv_cudnn_merged_to_1_groups", "conv_cudnn_merged_to_2_groups", "conv_cudnn_merged_to_3_groups"], "grouped {dtype}");
        for t in &tactics {
            assert_tactic_matches(cuda, &net, &feeds, layer, &t.id, dtype, &want[0], &format!("grouped {dtype}"));
        }
    }
}

/// Exact f32 (TF32 off) is f32's accuracy: cuDNN's FFT and Winograd algorithms, several times
/// less accurate, are not candidates (the zoo's wide ResNets and RegNets left the fp32 rule with
/// them on the H200); with TF32 on, or in f16, they stay candidates.
#[test]
fn exact_f32_convolutions_offer_no_transform_algorithms() {
    let Some(cuda) = backend() else { return };
    let mut r = rng(74);
    let transformed = |t: &kiln::TacticDesc| t.id.name.contains("fft") || t.id.name.contains("winograd");
    let (net, _) = fused_conv(&mut r, DataType::F32, true, false, true);
    let exact = cuda.tactics(&net, last_layer(&net), MathMode::EXACT);
    assert!(!exact.is_empty());
    assert!(!exact.iter().any(transformed), "exact f32 offers a transform algorithm: {exact:?}");
    let tf32 = cuda.tactics(&net, last_layer(&net), MathMode { tf32: true, ..MathMode::EXACT });
    let (half, _) = fused_conv(&mut r, DataType::F16, true, false, true);
    let f16 = cuda.tactics(&half, last_layer(&half), MathMode::EXACT);
    eprintln!(
        "transform algorithms offered: exact f32 0 of {}, tf32 {} of {}, f16 {} of {}",
        exact.len(),
        tf32.iter().filter(|t| transformed(t)).count(),
        tf32.len(),
        f16.iter().filter(|t| transformed(t)).count(),
        f16.len()
    );
}

#[test]
fn convolution_tactics_are_timed() {
    let Some(cuda) = backend() else { return };
    let mut r = rng(72);
    let (net, _) = fused_conv(&mut r, DataType::F16, true, true, true);
    let layer = last_layer(&net);
    let tactics = cuda.tactics(&net, layer, MathMode::EXACT);
    assert!(tactics.len() >= 2, "expected cuDNN algorithms and the direct kernel, got {tactics:?}");
    for t in &tactics {
        let time = cuda.time_tactic(&net, layer, t, MathMode::EXACT, 5).unwrap_or_else(|e| panic!("timing {}: {e}", t.id));
        assert!(time.as_nanos() > 0, "{}: zero time", t.id);
        eprintln!("tactic {}: {:?}", t.id, time);
    }
    // The builder times them and records every candidate and its choice in the timing cache.
    let mut config = crate::common::exact_f32_config();
    let cache = config.set_timing_cache(kiln::TimingCache::new(), false);
    kiln::Builder::new(cuda).build(&net, &config).expect("build with timed tactics");
    let cache = cache.lock().unwrap().clone();
    let entry = cache
        .entries()
        .map(|(_, e)| e.clone())
        .find(|e| e.layer_kind.contains("Fused"))
        .expect("the fused convolution was timed");
    eprintln!(
        "conv tactics timed: {:?} chosen {}",
        entry.candidates.iter().map(|(id, ns)| format!("{id}: {ns} ns")).collect::<Vec<_>>(),
        entry.chosen
    );
    assert_eq!(entry.candidates.len(), tactics.len(), "every listed tactic was timed");
    assert!(entry.candidates.iter().all(|(_, ns)| *ns > 0), "every candidate has a device time");
}

#[test]
fn without_cudnn_convolutions_fall_back_to_the_direct_kernel() {
    if backend().is_none() {
        return;
    }
    let plain = CudaBackend::new().without_cudnn();
    let mut r = rng(73);
    let (net, feeds) = fused_conv(&mut r, DataType::F32, true, true, true);
    let tactics = plain.tactics(&net, last_layer(&net), MathMode::EXACT);
    let names: Vec<String> = tactics.iter().map(|t| t.id.to_string()).collect();
    assert!(
        names.len() == 1 && names[0].contains("conv_direct_kernel"),
        "without cuDNN only the direct kernel is a tactic: {names:?}"
    );
    let want = kiln_cpu::CpuBackend::new().prepare(&net).unwrap().execute(&feeds).unwrap();
    let got = plain.prepare(&net).unwrap().execute(&feeds).unwrap();
    assert!(worst_error(&got[0], &want[0]) <= 1e-5);
    // 3-D needs cuDNN: a clean error naming why, not a panic.
    let (name, p, x, w) = configurations().pop().unwrap();
    let (net3, _) = one_layer(LayerKind::Convolution(p), conv_inputs(&mut r, DataType::F32, &x, &w, false));
    let err = plain.check_support(&net3).expect_err(name).to_string();
    assert!(err.contains("cuDNN"), "unexpected error: {err}");
}

#[test]
fn cudnn_pooling_matches() {
    if backend().is_none() {
        return;
    }
    let mut r = rng(74);
    for dtype in [DataType::F32, DataType::F16, DataType::BF16] {
        for (kind, excl, window, stride, pad) in [
            (PoolingKind::Max, false, 3, 2, 1),
            (PoolingKind::Average, false, 3, 2, 1),
            (PoolingKind::Average, true, 3, 2, 1),
            (PoolingKind::Average, false, 7, 1, 0),
        ] {
            let p = PoolingParams {
                kind,
                window: vec![window, window],
                strides: vec![stride, stride],
                dilations: vec![1, 1],
                pre_padding: vec![pad, pad],
                post_padding: vec![pad, pad],
                ceil_mode: false,
                average_count_excludes_padding: excl,
            };
            let (net, feeds) = one_layer(LayerKind::Pooling(p), vec![In::Run(random(&mut r, dtype, &[2, 8, 14, 14]))]);
            check_network(
                &format!("pool {kind:?} {window}x{window}/{stride} excl={excl} {dtype}"),
                &net,
                &feeds,
                tolerance(dtype),
            );
        }
    }
}

#[test]
fn without_a_device_a_convolution_offers_the_direct_kernel_alone() {
    if backend().is_some() {
        eprintln!("SKIPPED: a CUDA device is present (this checks the no-device listing, as in CI)");
        return;
    }
    let mut r = rng(75);
    let (net, _) = fused_conv(&mut r, DataType::F32, true, true, true);
    let names: Vec<String> =
        CudaBackend::new().tactics(&net, last_layer(&net), MathMode::EXACT).iter().map(|t| t.id.to_string()).collect();
    assert!(names.len() == 1 && names[0].contains("conv_direct_kernel"), "{names:?}");
}

/// A 16-bit convolution's channels-last output reduced over every spatial axis (global
/// average pooling) is read in place; other axes convert to channels-first first.
#[test]
fn a_channels_last_value_reduced_over_space_matches() {
    if backend().is_none() {
        return;
    }
    let mut r = rng(75);
    for (axes, keep_dims) in [(vec![2, 3], true), (vec![3, 2], false), (vec![1], true), (vec![2], false)] {
        let what = format!("conv then mean over {axes:?} keep_dims={keep_dims}");
        let mut net = Network::new("conv-reduce");
        let x = net.add_input("x", DataType::F16, kiln::Shape::fixed(&[2, 3, 9, 9])).unwrap();
        let weights = net.add_weights(random(&mut r, DataType::F16, &[16, 3, 3, 3]));
        let constant = net.add_layer("w", LayerKind::Constant { weights }, vec![]).unwrap();
        let w = net.output(constant, 0);
        let convolution = LayerKind::Convolution(conv(1, &[1, 1], &[1, 1], &[1, 1]));
        let c = net.add_layer("conv", convolution, vec![Some(x), Some(w)]).unwrap();
        let y = net.output(c, 0);
        let mean = LayerKind::Reduce { op: kiln::ReduceOp::Mean, axes, keep_dims };
        let m = net.add_layer("mean", mean, vec![Some(y)]).unwrap();
        net.mark_output(net.output(m, 0)).unwrap();
        check_network(&what, &net, &[random(&mut r, DataType::F16, &[2, 3, 9, 9])], tolerance(DataType::F16));
    }
}

/// A patch convolution (`w`: `[oc, c, k, k]`, stride k, no padding) of `x`, with `epilogue`
/// (operand 3 is a residual of the output's shape). With `lead_in`, a 1×1 convolution makes
/// `x` first, so in 16-bit types the patch convolution reads a channels-last value.
fn patches(r: &mut rand_chacha::ChaCha8Rng, dtype: DataType, x: &[usize], w: &[usize], lead_in: bool, bias: bool, epilogue: Vec<PostOp>) -> (Network, Vec<HostTensor>) {
    let k = w[2];
    let out = [x[0], w[0], x[2] / k, x[3] / k];
    let mut net = Network::new("patches");
    let mut feeds = vec![random(r, dtype, x)];
    let mut value = net.add_input("x", dtype, kiln::Shape::fixed(x)).unwrap();
    let constant = |net: &mut Network, t: HostTensor| {
        let id = net.add_weights(t);
        let layer = net.add_layer(&format!("const{}", net.layers().len()), LayerKind::Constant { weights: id }, vec![]).unwrap();
        net.output(layer, 0)
    };
    if lead_in {
        let lead_w = constant(&mut net, random(r, dtype, &[x[1], x[1], 1, 1]));
        let lead = net.add_layer("lead_in", LayerKind::Convolution(conv(1, &[1, 1], &[1, 1], &[0, 0])), vec![Some(value), Some(lead_w), None]).unwrap();
        value = net.output(lead, 0);
    }
    let weights = constant(&mut net, random(r, dtype, w));
    let bias = bias.then(|| constant(&mut net, random(r, dtype, &[w[0]])));
    let mut slots = vec![Some(value), Some(weights), bias];
    if epilogue.iter().any(|p| matches!(p, PostOp::Elementwise { .. })) {
        feeds.push(random(r, dtype, &out));
        slots.push(Some(net.add_input("residual", dtype, kiln::Shape::fixed(&out)).unwrap()));
    }
    let p = conv(1, &[k, k], &[1, 1], &[0, 0]);
    let kind = if epilogue.is_empty() { LayerKind::Convolution(p) } else { LayerKind::Fused(FusedParams::new(FusedAnchor::Convolution(p), 3, epilogue)) };
    let layer = net.add_layer("patches", kind, slots).unwrap();
    let y = net.output(layer, 0);
    net.mark_output(y).unwrap();
    (net, feeds)
}

#[test]
fn every_tactic_of_a_patch_convolution_matches() {
    let Some(cuda) = backend() else { return };
    let mut r = rng(74);
    let residual = PostOp::Elementwise { op: ElementwiseOp::Sum, operand: 3, running_first: false };
    let relu = PostOp::Activation(ActivationKind::Relu);
    // (name, input, filter, a convolution before it, a bias, epilogue); without a bias,
    // cuBLASLt's epilogue runs on a table of zeros.
    type Case = (&'static str, &'static [usize], &'static [usize], bool, bool, Vec<PostOp>);
    let cases: [Case; 8] = [
        ("ViT's 4x4 patches", &[2, 3, 16, 16], &[32, 3, 4, 4], false, true, vec![]),
        ("edges no patch covers, + ReLU", &[2, 4, 18, 17], &[16, 4, 4, 4], false, true, vec![relu]),
        ("2x2 downsampling after a convolution, + residual + ReLU", &[2, 16, 8, 6], &[24, 16, 2, 2], true, true, vec![residual, relu]),
        ("1x1 after a convolution, + GELU", &[2, 16, 5, 5], &[8, 16, 1, 1], true, true, vec![PostOp::Activation(ActivationKind::GeluErf)]),
        ("1x1 on the input", &[1, 8, 3, 7], &[16, 8, 1, 1], false, true, vec![residual]),
        ("no bias, + ReLU", &[2, 4, 18, 17], &[16, 4, 4, 4], false, false, vec![relu]),
        ("no bias, 1x1 after a convolution, + residual + ReLU", &[2, 16, 8, 6], &[24, 16, 1, 1], true, false, vec![residual, relu]),
        ("no bias, 2x2, + residual", &[2, 16, 8, 6], &[24, 16, 2, 2], false, false, vec![residual]),
    ];
    for dtype in [DataType::F32, DataType::F16, DataType::BF16] {
        for (name, x, w, lead_in, bias, epilogue) in &cases {
            let (net, feeds) = patches(&mut r, dtype, x, w, *lead_in, *bias, epilogue.clone());
            let what = format!("{name} in {dtype}");
            let tactics = every_tactic_matches(cuda, &net, &feeds, dtype, &what);
            assert!(tactics.iter().any(|t| t.id.name == "conv_patches_gemm"), "{what}: no patch product among {tactics:?}");
        }
    }
}

#[test]
fn every_tactic_of_a_stride_2_stem_matches() {
    // Stems over 1 to 4 channels, with and without a bias, and asymmetric padding (which cuDNN
    // cannot take: the direct kernel runs it).
    let Some(cuda) = backend() else { return };
    let mut r = rng(75);
    let residual = PostOp::Elementwise { op: ElementwiseOp::Sum, operand: 3, running_first: false };
    let relu = PostOp::Activation(ActivationKind::Relu);
    let padded = |pre: usize, post: usize| ConvolutionParams { pre_padding: vec![pre, pre], post_padding: vec![post, post], ..conv(1, &[2, 2], &[1, 1], &[0, 0]) };
    // (name, params, input, filter, bias, epilogue)
    type Case = (&'static str, ConvolutionParams, [usize; 4], [usize; 4], bool, Vec<PostOp>);
    let cases: [Case; 5] = [
        ("ResNet's 7x7 over RGB, + ReLU", padded(3, 3), [2, 3, 21, 22], [16, 3, 7, 7], true, vec![relu]),
        ("3x3 over RGB without a bias, + residual + ReLU", padded(1, 1), [2, 3, 16, 17], [8, 3, 3, 3], false, vec![residual, relu]),
        ("5x5 over one channel", padded(2, 2), [1, 1, 15, 15], [4, 1, 5, 5], true, vec![]),
        ("4x4 over 4 channels", padded(1, 1), [2, 4, 10, 10], [8, 4, 4, 4], true, vec![relu]),
        ("3x3 padded after only", padded(0, 1), [2, 3, 16, 16], [8, 3, 3, 3], true, vec![]),
    ];
    for dtype in [DataType::F32, DataType::F16, DataType::BF16] {
        for (name, p, x, w, bias, epilogue) in &cases {
            let out = |i: usize| (x[i] + p.pre_padding[i - 2] + p.post_padding[i - 2] - w[i]) / 2 + 1;
            let mut inputs = conv_inputs(&mut r, dtype, x, w, *bias);
            if epilogue.contains(&residual) {
                inputs.push(In::Run(random(&mut r, dtype, &[x[0], w[0], out(2), out(3)])));
            }
            let kind = match epilogue.is_empty() {
                true => LayerKind::Convolution(p.clone()),
                false => LayerKind::Fused(FusedParams::new(FusedAnchor::Convolution(p.clone()), 3, epilogue.clone())),
            };
            let (net, feeds) = one_layer(kind, inputs);
            let what = format!("{name} in {dtype}");
            let tactics = every_tactic_matches(cuda, &net, &feeds, dtype, &what);
            let symmetric = p.pre_padding == p.post_padding;
            assert_eq!(tactics.iter().any(|t| t.id.name.starts_with("conv_cudnn_")), symmetric, "{what}: cuDNN among {tactics:?}");
        }
    }
}

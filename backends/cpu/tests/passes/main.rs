//! The optimizer's passes: a golden before/after IR dump per pass (in
//! `tests/golden/passes/`; `UPDATE_GOLDEN=1` rewrites them after a deliberate change),
//! and numerical equivalence of optimized and unoptimized engines on the cpu backend.

mod networks;

use kiln::passes::{
    AttentionFusion, CommonSubexpressionElimination, ConstantFolding, DeadLayerElimination, EinsumLowering,
    EpilogueFusion, GeluFusion, HorizontalMatMulFusion, NoOpRemoval, NormalizationFusion, Pass,
    PassContext, Pipeline, PointwiseChainFusion, RmsNormalizationFusion, ShapeTensorResolution,
    ShapeValueFolding, SoftMaxFusion, SwishFusion,
};
use kiln::{
    ActivationKind, Builder, BuilderConfig, Dim, ExecutionContext, LayerKind, Network,
    Optimization, PostOp,
};
use kiln_cpu::CpuBackend;
use std::path::PathBuf;

fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/passes")
        .join(format!("{name}.txt"))
}

/// Runs `pass` then dead-layer elimination and compares the dumps with the golden file.
fn check_golden(
    name: &str,
    net: &Network,
    pass: Box<dyn Pass>,
    backend: Option<&CpuBackend>,
) -> Network {
    let pass_name = pass.name();
    let context = PassContext {
        folding_backend: backend.map(|b| b as &dyn kiln::Backend),
        quantized_layers: true,
    };
    let (out, traces) = Pipeline::new(vec![pass, Box::new(DeadLayerElimination)])
        .run_traced(net, &context)
        .expect("passes");
    assert!(traces[0].changed(), "{name}: {pass_name} changed nothing");
    let text = format!(
        "pass: {pass_name}\n--- before\n{}--- after\n{}",
        traces[0].before,
        out.dump()
    );
    let path = golden_path(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &text).expect("write golden");
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 creates it)", path.display()));
    assert_eq!(
        text,
        want,
        "{name}: the IR after {pass_name} differs from {}",
        path.display()
    );
    out
}

/// Optimized and unoptimized engines give the same outputs; returns the optimized network.
fn check_equivalent(net: &Network, tolerance: f64) -> Network {
    let backend = CpuBackend::new();
    let inputs = networks::inputs(net);
    let run = |optimization| {
        let config = BuilderConfig {
            optimization,
            ..BuilderConfig::default()
        };
        let engine = Builder::new(&backend).build(net, &config).expect("build");
        let built = engine.network().clone();
        (
            built,
            ExecutionContext::new(engine, &backend)
                .expect("prepare")
                .run(&inputs)
                .expect("run"),
        )
    };
    let (_, want) = run(Optimization::None);
    let (optimized, got) = run(Optimization::Full);
    for (name, w) in &want {
        let g = &got[name];
        assert_eq!(g.shape(), w.shape(), "{name}");
        let worst = g
            .to_f64_vec()
            .iter()
            .zip(w.to_f64_vec())
            .map(|(a, e)| (a - e).abs() / (1.0 + e.abs()))
            .fold(0.0, f64::max);
        assert!(
            worst <= tolerance,
            "{}/{name}: optimized differs by {worst}",
            net.name
        );
    }
    optimized
}

fn kinds(net: &Network) -> Vec<&'static str> {
    net.layers()
        .iter()
        .filter(|l| !matches!(l.kind, LayerKind::Constant { .. }))
        .map(|l| l.kind.type_name())
        .collect()
}

#[test]
fn shape_folding_makes_reshapes_static_without_a_backend() {
    let net = networks::shape_chain();
    let out = check_golden("shape_folding", &net, Box::new(ConstantFolding), None);
    assert!(!out.layers().iter().any(|l| matches!(
        l.kind,
        LayerKind::Shape | LayerKind::Gather { .. } | LayerKind::Concatenation { .. }
    )));
    check_equivalent(&net, 0.0);
}

/// The builder's fold before Q/DQ propagation takes the values computed from shapes (a scale
/// from a dynamic-batch input's fixed last dim) and leaves the rest to full folding: the Neg of
/// a constant stays, as would the casts of an integer layer's expansion.
#[test]
fn shape_value_folding_folds_values_from_shapes_alone() {
    let net = networks::shape_scale();
    let out = check_golden("shape_value_folding", &net, Box::new(ShapeValueFolding), None);
    assert_eq!(kinds(&out), ["ElementWise", "Unary", "ElementWise"]);
    check_equivalent(&net, 0.0);
}

#[test]
fn shape_tensor_resolution_makes_dynamic_batch_reshapes_static() {
    let net = networks::dynamic_batch_views();
    let out = check_golden("shape_tensor_resolution", &net, Box::new(ShapeTensorResolution), None);
    // Both reshapes are static ([0, 3, -1] and [-1, 12]); the shape arithmetic is gone.
    assert_eq!(kinds(&out), ["Shuffle", "Shuffle"]);
    let flat = out.tensor(out.outputs()[0]);
    assert_eq!(flat.shape.dims(), [Dim::Named("batch".into()), Dim::Fixed(12)]);
    check_equivalent(&net, 0.0);
}

#[test]
fn constant_folding_runs_constant_layers_on_the_backend() {
    let net = networks::constant_transpose();
    let backend = CpuBackend::new();
    let out = check_golden(
        "constant_folding",
        &net,
        Box::new(ConstantFolding),
        Some(&backend),
    );
    assert_eq!(kinds(&out), ["MatrixMultiply"]);
    // Without a backend the float transpose stays.
    let (unfolded, _) = Pipeline::new(vec![Box::new(ConstantFolding)])
        .run_traced(&net, &PassContext::default())
        .expect("passes");
    assert_eq!(kinds(&unfolded), ["Shuffle", "MatrixMultiply"]);
    // Each build times two float product tactics (sgemm, which fuses multiply-adds where
    // the CPU has FMA, and blocked loops), so the two engines may round differently.
    check_equivalent(&net, 1e-6);
}

#[test]
fn common_subexpression_elimination() {
    let net = networks::repeated_mask();
    let out = check_golden(
        "common_subexpression_elimination",
        &net,
        Box::new(CommonSubexpressionElimination),
        None,
    );
    // Layer 1's constant and mask are layer 0's; layer 2's differ.
    assert_eq!(kinds(&out), ["ElementWise"; 5]);
    let constants = out.layers().iter().filter(|l| matches!(l.kind, LayerKind::Constant { .. }));
    assert_eq!(constants.count(), 2);
    check_equivalent(&net, 0.0);
}

#[test]
fn no_op_removal() {
    let net = networks::no_ops();
    let out = check_golden("no_op_removal", &net, Box::new(NoOpRemoval), None);
    assert_eq!(kinds(&out), ["Shuffle", "Activation", "Shuffle"]);
    check_equivalent(&net, 0.0);
}

#[test]
fn a_gather_of_one_index_becomes_a_slice() {
    let net = networks::one_index_gathers();
    let out = check_golden("gather_as_slice", &net, Box::new(NoOpRemoval), None);
    let kinds: Vec<&str> = kinds(&out).into_iter().filter(|k| *k != "Constant").collect();
    assert_eq!(kinds, ["Slice", "Shuffle", "Slice", "Shuffle", "Slice", "Shuffle", "ElementWise", "ElementWise"]);
    check_equivalent(&net, 0.0);
}

#[test]
fn a_padding_by_nothing_is_removed() {
    let net = networks::zero_padding();
    let out = NoOpRemoval.run(&net, &PassContext::default()).expect("pass").expect("changed");
    let names: Vec<&str> = out.layers().iter().filter(|l| !matches!(l.kind, LayerKind::Constant { .. })).map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["pad"]);
    check_equivalent(&net, 0.0);
}

#[test]
fn einsums_that_are_one_product_become_matrix_multiplies() {
    let net = networks::einsums();
    let out = check_golden("einsum_lowering", &net, Box::new(EinsumLowering), None);
    let kinds: Vec<&str> = kinds(&out);
    // scores and mixed: products as they are; side: its a transposed in, its output
    // transposed out; project and summed stay Einsums.
    assert_eq!(kinds, ["MatrixMultiply", "MatrixMultiply", "Einsum", "Shuffle", "MatrixMultiply", "Shuffle", "Einsum"]);
    check_equivalent(&net, 1e-6);
}

#[test]
fn dead_layer_elimination() {
    let net = networks::dead_branch();
    let out = check_golden(
        "dead_layer_elimination",
        &net,
        Box::new(DeadLayerElimination),
        None,
    );
    assert_eq!(kinds(&out), ["Activation"]);
}

#[test]
fn epilogue_fusion_folds_batch_norm_and_absorbs_bias_activation_and_residual() {
    let net = networks::conv_block();
    let out = check_golden("epilogue_fusion", &net, Box::new(EpilogueFusion), None);
    let names: Vec<&str> = out
        .layers()
        .iter()
        .filter(|l| !matches!(l.kind, LayerKind::Constant { .. }))
        .map(|l| l.name.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "conv1 + bn mul + bn add + relu1",
            "conv2 + residual + relu2",
            "flatten",
            "fc + fc bias add + fc relu"
        ]
    );
    check_equivalent(&net, 1e-6);
}

#[test]
fn horizontal_matmul_fusion_runs_sibling_projections_as_one_product() {
    let net = networks::sibling_projections();
    let fused = Pipeline::new(vec![Box::new(EpilogueFusion)])
        .run(&net, &PassContext::default())
        .expect("epilogue fusion");
    let out = check_golden(
        "horizontal_matmul_fusion",
        &fused,
        Box::new(HorizontalMatMulFusion),
        None,
    );
    // q, k and v read `x`: one product and three slices; o reads `other` and stays.
    assert_eq!(
        kinds(&out),
        ["Fused", "Slice", "Slice", "Slice", "Shuffle", "Shuffle", "Shuffle", "Fused", "Shuffle"]
    );
    check_equivalent(&net, 1e-6);
}

#[test]
fn pointwise_chain_fusion() {
    let net = networks::pointwise_chain();
    let out = check_golden(
        "pointwise_chain_fusion",
        &net,
        Box::new(PointwiseChainFusion),
        None,
    );
    assert_eq!(kinds(&out), ["Fused"]);
    check_equivalent(&net, 0.0);
}

#[test]
fn softmax_recognition() {
    let net = networks::softmax();
    let out = check_golden("softmax_fusion", &net, Box::new(SoftMaxFusion), None);
    assert_eq!(kinds(&out), ["SoftMax"]);
    check_equivalent(&net, 1e-6);
}

#[test]
fn layer_normalization_recognition() {
    let net = networks::layer_norm();
    let out = check_golden(
        "normalization_fusion",
        &net,
        Box::new(NormalizationFusion),
        None,
    );
    assert_eq!(kinds(&out), ["Normalization"]);
    check_equivalent(&net, 1e-5);
}

#[test]
fn rms_normalization_recognition() {
    let net = networks::rms_norm();
    let out = check_golden(
        "rms_normalization_fusion",
        &net,
        Box::new(RmsNormalizationFusion),
        None,
    );
    assert_eq!(kinds(&out), ["RMSNormalization"]);
    let optimized = check_equivalent(&net, 1e-6);
    assert_eq!(kinds(&optimized), ["RMSNormalization"]);
}

#[test]
fn gelu_recognition_erf_and_tanh_forms() {
    let net = networks::gelu();
    let out = check_golden("gelu_fusion", &net, Box::new(GeluFusion), None);
    let acts: Vec<LayerKind> = out
        .layers()
        .iter()
        .map(|l| l.kind.clone())
        .filter(|k| !matches!(k, LayerKind::Constant { .. }))
        .collect();
    assert_eq!(
        acts,
        [
            LayerKind::Activation {
                kind: ActivationKind::GeluErf
            },
            LayerKind::Activation {
                kind: ActivationKind::GeluTanh
            }
        ]
    );
    check_equivalent(&net, 1e-5);
}

/// `conv → x · sigmoid(x)` (and `sigmoid(x) · x`) becomes Swish, which the convolution then
/// takes into its epilogue; `x · sigmoid(y)` is not SiLU and stays.
#[test]
fn silu_becomes_swish_and_joins_the_convolutions_epilogue() {
    use kiln::{DataType, ElementwiseOp, Shape, TensorData};
    let mut net = Network::new("silu");
    let x = net.add_input("x", DataType::F32, Shape::fixed(&[1, 2, 5, 5])).unwrap();
    let conv = net.add_convolution(x, 3, &[3, 3], TensorData::F32((0..54).map(|i| (i as f32 * 0.37).sin()).collect()), None).unwrap();
    let y = net.output(conv, 0);
    let gate = net.add_activation(y, ActivationKind::Sigmoid).unwrap();
    let silu = net.add_elementwise(net.output(gate, 0), y, ElementwiseOp::Prod).unwrap();
    let z = net.output(silu, 0);
    let gate2 = net.add_activation(z, ActivationKind::Sigmoid).unwrap();
    let silu2 = net.add_elementwise(z, net.output(gate2, 0), ElementwiseOp::Prod).unwrap();
    let other = net.add_activation(x, ActivationKind::Sigmoid).unwrap();
    let input_silu = net.add_elementwise(x, net.output(other, 0), ElementwiseOp::Prod).unwrap();
    let unrelated = net.add_activation(net.output(silu2, 0), ActivationKind::Sigmoid).unwrap();
    let crossed = net.add_elementwise(z, net.output(unrelated, 0), ElementwiseOp::Prod).unwrap();
    for l in [input_silu, crossed] {
        net.mark_output(net.output(l, 0)).unwrap();
    }
    let out = Pipeline::new(vec![Box::new(SwishFusion), Box::new(DeadLayerElimination)]).run(&net, &PassContext::default()).expect("passes");
    let swishes = out.layers().iter().filter(|l| l.kind == LayerKind::Activation { kind: ActivationKind::Swish }).count();
    assert_eq!(swishes, 3, "the three SiLUs, and only they: {}", out.dump());
    assert_eq!(kinds(&out).iter().filter(|k| **k == "ElementWise").count(), 1, "z · sigmoid(silu(z)) stays: {}", out.dump());
    let optimized = check_equivalent(&net, 1e-5);
    let fused = optimized.layers().iter().find_map(|l| match &l.kind {
        LayerKind::Fused(p) => Some(p.epilogue.clone()),
        _ => None,
    });
    assert_eq!(
        fused.expect("a fused convolution").first(),
        Some(&PostOp::Activation(ActivationKind::Swish)),
        "{}",
        optimized.dump()
    );
}

/// The builder lowers precision before the passes: GELU is still recognized when its constants
/// are rounded to 16 bits.
#[test]
fn gelu_recognition_with_16_bit_constants() {
    for dtype in [kiln::DataType::F16, kiln::DataType::BF16] {
        let net = networks::gelu_in(dtype);
        let out = Pipeline::new(vec![Box::new(GeluFusion), Box::new(DeadLayerElimination)])
            .run(&net, &PassContext::default())
            .expect("passes");
        assert_eq!(kinds(&out), ["Activation", "Activation"], "{dtype}: {}", out.dump());
    }
}

#[test]
fn attention_recognition() {
    let net = networks::attention();
    let out = check_golden("attention_fusion", &net, Box::new(AttentionFusion), None);
    assert_eq!(kinds(&out), ["Attention"]);
    let optimized = check_equivalent(&net, 1e-6);
    assert_eq!(kinds(&optimized), ["Attention"]);
}

#[test]
fn sdpa_export_attention_recognition() {
    let net = networks::sdpa_attention();
    let out = check_golden("sdpa_attention_fusion", &net, Box::new(AttentionFusion), None);
    assert_eq!(kinds(&out), ["Attention"]);
    let attention = out.layers().iter().find_map(|l| match &l.kind {
        LayerKind::Attention(p) => Some(*p),
        _ => None,
    });
    let p = attention.expect("an Attention layer");
    assert!(p.zero_nan_rows && p.scale_multiplies && !p.key_transposed);
    assert!((p.scale - 8f32.powf(-0.5)).abs() < 1e-6, "scale {}", p.scale);
    check_equivalent(&net, 1e-5);
}

#[test]
fn windowed_attention_with_a_mask_per_window_is_regrouped_and_fused() {
    let net = networks::windowed_attention(false);
    let optimized = check_equivalent(&net, 1e-5);
    let attention: Vec<_> = optimized.layers().iter().filter(|l| matches!(l.kind, LayerKind::Attention(_))).collect();
    assert_eq!(attention.len(), 1, "{}", optimized.dump());
    assert!(!kinds(&optimized).contains(&"SoftMax"), "{}", optimized.dump());
    // The windows became heads: the mask broadcasts over the images only.
    let mask = attention[0].inputs[3].expect("a mask");
    assert_eq!(optimized.tensor(mask).shape, kiln::Shape::fixed(&[1, 6, 4, 4]), "{}", optimized.dump());
}

#[test]
fn quantized_windowed_attention_is_regrouped_and_fused_with_its_levels() {
    let net = networks::windowed_attention(true);
    let backend = CpuBackend::new();
    let inputs = networks::inputs(&net);
    let build = |optimization| Builder::new(&backend).build(&net, &BuilderConfig { optimization, ..BuilderConfig::default() }).expect("build");
    let fused = build(Optimization::Full);
    let levels = fused.network().layers().iter().find_map(|l| match &l.kind {
        LayerKind::Attention(p) => Some(*p),
        _ => None,
    });
    let p = levels.unwrap_or_else(|| panic!("no Attention layer: {}", fused.network().dump()));
    assert!(p.scores_levels.is_some() && p.probs_levels.is_some() && p.input_levels.is_some(), "{p:?}");
    let run = |engine| ExecutionContext::new(engine, &backend).expect("prepare").run(&inputs).expect("run").remove("out").expect("out");
    let (got, want) = (run(fused).to_f64_vec(), run(build(Optimization::None)).to_f64_vec());
    // A probability may land on the other side of a rounding of its levels: one level of 1/127
    // at most, in a few places.
    let worst = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    let l2 = (got.iter().zip(&want).map(|(a, b)| (a - b).powi(2)).sum::<f64>() / want.iter().map(|b| b * b).sum::<f64>()).sqrt();
    assert!(l2 < 1e-2 && worst < 0.1, "relative L2 {l2}, worst {worst}");
}

#[test]
fn fused_layers_only_absorb_single_reader_intermediates() {
    // The conv output is also a network output: nothing may be fused into it.
    let mut net = networks::conv_block();
    let conv1 = net
        .layers()
        .iter()
        .position(|l| l.name == "conv1")
        .expect("conv1");
    let t = net.layers()[conv1].outputs[0];
    net.mark_output(t).expect("output");
    let (out, _) = Pipeline::new(vec![Box::new(EpilogueFusion)])
        .run_traced(&net, &PassContext::default())
        .expect("passes");
    assert!(out
        .layers()
        .iter()
        .any(|l| l.name == "conv1" && matches!(l.kind, LayerKind::Convolution(_))));
    assert!(
        out.layers()
            .iter()
            .any(|l| l.name == "bn mul + bn add + relu1" || l.name == "bn mul"),
        "{}",
        out.dump()
    );
    check_equivalent(&net, 1e-6);
}

#[test]
fn standard_pipeline_fuses_the_conv_block_into_three_layers_and_a_reshape() {
    let net = networks::conv_block();
    let optimized = check_equivalent(&net, 1e-6);
    assert_eq!(kinds(&optimized), ["Fused", "Fused", "Shuffle", "Fused"]);
    let fc = optimized
        .layers()
        .iter()
        .find(|l| l.name.starts_with("fc + "))
        .expect("fc");
    let LayerKind::Fused(p) = &fc.kind else {
        panic!("fc is not fused")
    };
    assert_eq!(
        p.epilogue.last(),
        Some(&PostOp::Activation(ActivationKind::Relu))
    );
}

#[test]
fn optimized_engines_survive_serialization() {
    let backend = CpuBackend::new();
    for net in [
        networks::conv_block(),
        networks::attention(),
        networks::pointwise_chain(),
    ] {
        let engine = Builder::new(&backend)
            .build(&net, &BuilderConfig::default())
            .expect("build");
        assert!(engine
            .network()
            .layers()
            .iter()
            .any(|l| matches!(l.kind, LayerKind::Fused(_) | LayerKind::Attention(_))));
        let inputs = networks::inputs(&net);
        let loaded = kiln::Engine::deserialize(&engine.serialize()).expect("load");
        assert_eq!(loaded.network().dump(), engine.network().dump());
        let want = ExecutionContext::new(engine, &backend)
            .expect("prepare")
            .run(&inputs)
            .expect("run");
        let got = ExecutionContext::new(loaded, &backend)
            .expect("prepare")
            .run(&inputs)
            .expect("run");
        assert_eq!(got, want, "{}", net.name);
    }
}

/// With every float layer constrained to f16 (the precision pass runs before fusion), the
/// batch norm still folds into the convolution, now into its f16 weights and bias.
#[test]
fn batch_norm_folds_into_reduced_precision_convolution_weights() {
    let mut net = networks::conv_block();
    for i in 0..net.layers().len() {
        if kiln::precision::is_float_compute(&net.layers()[i].kind) {
            net.set_layer_precision(kiln::LayerId(i), kiln::DataType::F16).unwrap();
        }
    }
    let mut config = BuilderConfig::default();
    config.set_flag(kiln::BuilderFlag::Fp16);
    config.set_flag(kiln::BuilderFlag::ObeyPrecisionConstraints);
    let backend = CpuBackend::new();
    let engine = Builder::new(&backend).build(&net, &config).expect("f16 build");
    let built = engine.network();
    let conv = built.layers().iter().find(|l| matches!(l.kind, LayerKind::Fused(_)) && l.name.starts_with("conv1")).expect("conv1 is fused");
    assert_eq!(conv.name, "conv1 + bn mul + bn add + relu1");
    let LayerKind::Fused(fused) = &conv.kind else { unreachable!() };
    assert_eq!(fused.epilogue, [kiln::PostOp::Activation(ActivationKind::Relu)], "the batch norm folded (no epilogue step left)");
    let weights = conv.inputs[1].expect("weights");
    assert_eq!(built.tensor(weights).dtype, kiln::DataType::F16, "the folded weights stay f16");
    // Same function as the f32 network, within f16 rounding.
    let inputs = networks::inputs(&net);
    let got = ExecutionContext::new(engine, &backend).expect("prepare").run(&inputs).expect("run");
    let f32_engine = Builder::new(&backend).build(&networks::conv_block(), &BuilderConfig::default()).expect("f32 build");
    let want = ExecutionContext::new(f32_engine, &backend).expect("prepare").run(&inputs).expect("run");
    for (name, w) in &want {
        let worst = got[name]
            .to_f64_vec()
            .iter()
            .zip(w.to_f64_vec())
            .map(|(a, e)| (a - e).abs() / (1.0 + e.abs()))
            .fold(0.0, f64::max);
        assert!(worst <= 2e-2, "{name}: f16 differs from f32 by {worst}");
    }
}

fn fixed(dims: &[usize]) -> Vec<Dim> {
    dims.iter().map(|&d| Dim::Fixed(d)).collect()
}

/// Shuffle chains compose into one transpose of their factors (a reshape after it where the
/// output merges them), and give the same elements as the chain.
#[test]
fn shuffle_chains_compose_into_one_transpose_of_their_factors() {
    let shuffles = |net: &Network| net.layers().iter().filter(|l| matches!(l.kind, LayerKind::Shuffle(_))).count();
    // The dynamo exporter's key transpose: [b, s, h·d] → [b, h, d, s] through [b·h, s, d].
    let key = networks::shuffle_chain(
        "key transpose",
        fixed(&[2, 8, 12]),
        &[
            (vec![], Some(vec![-1, 8, 3, 4]), vec![]),
            (vec![0, 2, 1, 3], None, vec![]),
            (vec![], Some(vec![-1, 8, 4]), vec![]),
            (vec![0, 2, 1], None, vec![]),
            (vec![], Some(vec![2, 3, 4, 8]), vec![]),
        ],
    );
    // Split, transpose, merge across the transpose, transpose, merge: the factors transposed once, then merged.
    let merged = networks::shuffle_chain(
        "merged",
        fixed(&[2, 4, 6]),
        &[
            (vec![], Some(vec![2, 4, 2, 3]), vec![]),
            (vec![0, 2, 1, 3], None, vec![]),
            (vec![], Some(vec![4, 4, 3]), vec![]),
            (vec![1, 0, 2], None, vec![]),
            (vec![], Some(vec![4, 12]), vec![]),
        ],
    );
    // The same key transpose with a dynamic batch: `0` keeps it, the merge of batch and heads
    // is an unknown dim, and `-1` splits it back.
    let dynamic_key = networks::shuffle_chain(
        "dynamic key transpose",
        vec![Dim::Named("batch".into()), Dim::Fixed(8), Dim::Fixed(12)],
        &[
            (vec![], Some(vec![0, 8, 3, 4]), vec![]),
            (vec![0, 2, 1, 3], None, vec![]),
            (vec![], Some(vec![-1, 8, 4]), vec![]),
            (vec![0, 2, 1], None, vec![]),
            (vec![], Some(vec![-1, 3, 4, 8]), vec![]),
        ],
    );
    // A `-1` standing for batch · 6 (an unknown dim): the dims after it split off the back.
    let from_the_back = networks::shuffle_chain(
        "split from the back",
        vec![Dim::Named("batch".into()), Dim::Fixed(6), Dim::Fixed(20)],
        &[
            (vec![], Some(vec![-1, 20]), vec![]),
            (vec![], Some(vec![-1, 4, 5]), vec![]),
            (vec![0, 2, 1], None, vec![]),
            (vec![], Some(vec![-1, 6, 5, 4]), vec![]),
        ],
    );
    for (net, want) in [(key, 1), (merged, 2), (dynamic_key, 1), (from_the_back, 1)] {
        let optimized = check_equivalent(&net, 0.0);
        assert_eq!(shuffles(&optimized), want, "{}", optimized.dump());
    }
}

#[test]
fn transposes_of_size_one_axes_are_reshapes_and_merge() {
    let net = networks::unsqueezes();
    let out = NoOpRemoval.run(&net, &PassContext::default()).expect("pass").expect("changed");
    let out = DeadLayerElimination.run(&out, &PassContext::default()).expect("pass").unwrap_or(out);
    let shuffles: Vec<(String, kiln::ShuffleParams)> = out
        .layers()
        .iter()
        .filter_map(|l| match &l.kind {
            LayerKind::Shuffle(p) => Some((l.name.clone(), p.clone())),
            _ => None,
        })
        .collect();
    // Both unsqueezes are one plain reshape to [2, 1, 1, 16]; the swap of 16 and 1 moves only
    // a size-1 axis too, so it becomes a reshape (and merges) as well.
    assert_eq!(shuffles.len(), 1, "{shuffles:?}");
    assert_eq!(shuffles[0].1, kiln::ShuffleParams { reshape: Some(vec![2, 1, 16, 1]), ..Default::default() });
    check_equivalent(&net, 0.0);
}

#[test]
fn horizontal_matmul_fusion_merges_2_4_weights_only_with_2_4_siblings() {
    use kiln::{DataType, MatrixOp, TensorData};
    let mut net = Network::new("sparse_siblings");
    let x = net.add_input("x", DataType::F32, [3, 8]).unwrap();
    // [8, 4] weights, element (r, c) at r·4 + c: rows 1 and 2 of every four zero (2:4 along depth).
    let two_four = |seed: f32| TensorData::F32((0..32).map(|i| if matches!((i / 4) % 4, 1 | 2) { 0.0 } else { seed + i as f32 }).collect());
    let dense = TensorData::F32((0..32).map(|i| 0.25 + i as f32).collect());
    for (name, weights) in [("a", two_four(0.5)), ("b", two_four(1.5)), ("dense", dense)] {
        let w = net.add_constant(&[8, 4], weights).unwrap();
        let w = net.output(w, 0);
        let y = net.add_matrix_multiply(x, MatrixOp::None, w, MatrixOp::None).unwrap();
        net.set_layer_name(y, name);
        let y = net.output(y, 0);
        let relu = net.add_activation(y, ActivationKind::Relu).unwrap();
        let out = net.output(relu, 0);
        net.set_tensor_name(out, name).unwrap();
        net.mark_output(out).unwrap();
    }
    let out = HorizontalMatMulFusion.run(&net, &PassContext::default()).expect("pass").expect("a merge");
    let products: Vec<&str> = out.layers().iter().filter(|l| matches!(l.kind, LayerKind::MatrixMultiply { .. })).map(|l| l.name.as_str()).collect();
    assert_eq!(products.len(), 2, "the two 2:4 products merge, the dense one stays: {products:?}");
    let eligible: Vec<String> = kiln::sparsity::eligible_layers(&out).into_iter().map(|l| out.layer(l).name.clone()).collect();
    assert_eq!(eligible.len(), 1, "the merged product is still 2:4: {eligible:?}");
    assert!(eligible[0].contains('a') && eligible[0].contains('b'), "{eligible:?}");
    check_equivalent(&net, 1e-6);
}

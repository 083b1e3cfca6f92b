//! Arithmetic, activations, Softmax, reductions and normalizations built in Rust, across
//! the opset versions whose conventions differ.

mod common;

use common::*;
use kiln::{ActivationKind, DataType, Dim, ElementwiseOp, LayerKind};
use kiln_onnx::proto::ModelProto;
use kiln_onnx::ImportError;

fn unary_model(op: kiln_onnx::proto::NodeProto, dims: &str, opset: i64) -> ModelProto {
    Graph::new().input("x", F32, dims).node(op).output("y").model(opset)
}

#[test]
fn binary_ops_broadcast_numpy_style() {
    let model = Graph::new()
        .input("a", F32, "2,1")
        .input("b", F32, "3")
        .node(node("Sub", &["a", "b"], &["d"]))
        .node(node("Mul", &["d", "d"], &["y"]))
        .output("y")
        .model(14);
    let y = run(&model, vec![("a", f32s(&[2, 1], &[1., 2.])), ("b", f32s(&[3], &[0., 1., 3.]))], "y");
    assert_close(&y, &[2, 3], &[1., 0., 4., 4., 1., 1.], 0.0);
}

#[test]
fn opset6_broadcast_attribute_aligns_at_axis() {
    let model = Graph::new()
        .input("a", F32, "2,3,2")
        .input("b", F32, "3")
        .node(node("Add", &["a", "b"], &["y"]).int("broadcast", 1).int("axis", 1))
        .output("y")
        .model(6);
    let y = run(&model, vec![("a", f32s(&[2, 3, 2], &[0.; 12])), ("b", f32s(&[3], &[1., 2., 3.]))], "y");
    assert_close(&y, &[2, 3, 2], &[1., 1., 2., 2., 3., 3., 1., 1., 2., 2., 3., 3.], 0.0);
}

#[test]
fn pow_casts_the_exponent_to_the_base_type() {
    let model = Graph::new()
        .input("x", F32, "3")
        .init(tensor_i64("e", &[3], &[2, 3, 0]))
        .node(node("Pow", &["x", "e"], &["y"]))
        .output("y")
        .model(15);
    let net = import(&model);
    assert!(net.layers().iter().any(|l| l.kind == LayerKind::Cast { to: DataType::F32 }));
    let y = run(&model, vec![("x", f32s(&[3], &[3., 2., 5.]))], "y");
    assert_close(&y, &[3], &[9., 8., 1.], 0.0);
}

#[test]
fn comparisons_give_bool() {
    let model = Graph::new()
        .input("a", I64, "3")
        .input("b", I64, "3")
        .node(node("Less", &["a", "b"], &["lt"]))
        .node(node("Equal", &["a", "b"], &["eq"]))
        .node(node("Or", &["lt", "eq"], &["le"]))
        .node(node("Not", &["le"], &["y"]))
        .output("y")
        .model(13);
    let y = run(&model, vec![("a", i64s(&[3], &[1, 2, 3])), ("b", i64s(&[3], &[2, 2, 2]))], "y");
    assert_bool(&y, &[3], &[false, false, true]);
}

#[test]
fn variadic_ops_fold_pairwise() {
    let model = Graph::new()
        .input("a", F32, "2")
        .input("b", F32, "2")
        .input("c", F32, "1")
        .node(node("Mean", &["a", "b", "c"], &["mean"]))
        .node(node("Max", &["a", "b", "c"], &["max"]))
        .node(node("Min", &["a"], &["min"]))
        .output("mean")
        .output("max")
        .output("min")
        .model(13);
    let inputs = vec![("a", f32s(&[2], &[1., 5.])), ("b", f32s(&[2], &[2., -4.])), ("c", f32s(&[1], &[3.]))];
    let out = run_network(&import(&model), inputs);
    assert_close(&out["mean"], &[2], &[2., 4. / 3.], 1e-6);
    assert_close(&out["max"], &[2], &[3., 5.], 0.0);
    assert_close(&out["min"], &[2], &[1., 5.], 0.0);
}

#[test]
fn gemm_with_transposes_alpha_beta_and_bias() {
    let model = Graph::new()
        .input("a", F32, "2,1")
        .init(tensor_f32("b", &[2, 2], &[1., 2., 3., 4.]))
        .init(tensor_f32("c", &[2], &[10., 20.]))
        .node(
            node("Gemm", &["a", "b", "c"], &["y"])
                .int("transA", 1)
                .int("transB", 1)
                .float("alpha", 2.)
                .float("beta", 0.5),
        )
        .output("y")
        .model(13);
    // aᵀ = [[1, 2]], bᵀ = [[1, 3], [2, 4]] → [[5, 11]] × 2 + [5, 10].
    let y = run(&model, vec![("a", f32s(&[2, 1], &[1., 2.]))], "y");
    assert_close(&y, &[1, 2], &[15., 32.], 0.0);
}

#[test]
fn gemm_before_opset_11_needs_c() {
    let model = Graph::new()
        .input("a", F32, "1,2")
        .input("b", F32, "2,1")
        .node(node("Gemm", &["a", "b"], &["y"]))
        .output("y")
        .model(9);
    assert!(matches!(import_err(&model), ImportError::InvalidModel { .. }));
    let mut ok = model.clone();
    ok.opset_import[0].version = Some(11);
    let y = run(&ok, vec![("a", f32s(&[1, 2], &[1., 2.])), ("b", f32s(&[2, 1], &[3., 4.]))], "y");
    assert_close(&y, &[1, 1], &[11.], 0.0);
}

#[test]
fn matmul_one_dimensional_operands() {
    let model = Graph::new()
        .input("v", F32, "2")
        .input("m", F32, "2,3")
        .node(node("MatMul", &["v", "m"], &["vm"]))
        .node(node("MatMul", &["vm", "vm"], &["dot"]))
        .output("vm")
        .output("dot")
        .model(13);
    let out = run_network(&import(&model), vec![("v", f32s(&[2], &[1., 2.])), ("m", iota(&[2, 3]))]);
    assert_close(&out["vm"], &[3], &[6., 9., 12.], 0.0);
    assert_close(&out["dot"], &[], &[36. + 81. + 144.], 0.0);
}

#[test]
fn activation_attributes_and_defaults() {
    let model = |op: kiln_onnx::proto::NodeProto, opset| unary_model(op, "4", opset);
    let x = f32s(&[4], &[-2., -0.5, 0.5, 2.]);
    let cases: Vec<(ModelProto, Vec<f64>)> = vec![
        (model(node("LeakyRelu", &["x"], &["y"]), 16), vec![-0.02, -0.005, 0.5, 2.]),
        (model(node("LeakyRelu", &["x"], &["y"]).float("alpha", 0.5), 6), vec![-1., -0.25, 0.5, 2.]),
        (model(node("HardSigmoid", &["x"], &["y"]), 6), vec![0.1, 0.4, 0.6, 0.9]),
        (
            model(node("Elu", &["x"], &["y"]).float("alpha", 2.), 6),
            vec![2. * ((-2f64).exp() - 1.), 2. * ((-0.5f64).exp() - 1.), 0.5, 2.],
        ),
        (model(node("ThresholdedRelu", &["x"], &["y"]), 10), vec![0., 0., 0., 2.]),
        (model(node("Softsign", &["x"], &["y"]), 1), vec![-2. / 3., -1. / 3., 1. / 3., 2. / 3.]),
    ];
    for (m, expected) in cases {
        let y = run(&m, vec![("x", x.clone())], "y");
        assert_close(&y, &[4], &expected, 1e-6);
    }
}

#[test]
fn gelu_approximations() {
    let erf = import(&unary_model(node("Gelu", &["x"], &["y"]), "2", 20));
    assert!(matches!(erf.layers()[0].kind, LayerKind::Activation { kind: ActivationKind::GeluErf }));
    let tanh = import(&unary_model(node("Gelu", &["x"], &["y"]).string("approximate", "tanh"), "2", 20));
    assert!(matches!(tanh.layers()[0].kind, LayerKind::Activation { kind: ActivationKind::GeluTanh }));
    let bad = unary_model(node("Gelu", &["x"], &["y"]).string("approximate", "fast"), "2", 20);
    assert!(matches!(import_err(&bad), ImportError::InvalidModel { .. }));
}

#[test]
fn clip_attributes_before_opset_11() {
    let m = unary_model(node("Clip", &["x"], &["y"]).float("min", -1.).float("max", 1.), "3", 6);
    let net = import(&m);
    assert!(
        matches!(net.layers()[0].kind, LayerKind::Activation { kind: ActivationKind::Clip { min, max } } if min == -1. && max == 1.)
    );
    let y = run(&m, vec![("x", f32s(&[3], &[-5., 0.5, 5.]))], "y");
    assert_close(&y, &[3], &[-1., 0.5, 1.], 0.0);
}

#[test]
fn clip_inputs_from_opset_11() {
    // Constant bounds (only max given) fold into one Clip activation.
    let constant = Graph::new()
        .input("x", F32, "3")
        .init(tensor_f32("hi", &[], &[1.]))
        .node(node("Clip", &["x", "", "hi"], &["y"]))
        .output("y")
        .model(13);
    let net = import(&constant);
    assert!(
        matches!(net.layers().last().expect("clip").kind, LayerKind::Activation { kind: ActivationKind::Clip { max, .. } } if max == 1.)
    );
    let y = run(&constant, vec![("x", f32s(&[3], &[-5., 0.5, 5.]))], "y");
    assert_close(&y, &[3], &[-5., 0.5, 1.], 0.0);
    // Run-time bounds become Max and Min layers.
    let dynamic = Graph::new()
        .input("x", F32, "3")
        .input("lo", F32, "")
        .input("hi", F32, "")
        .node(node("Clip", &["x", "lo", "hi"], &["y"]))
        .output("y")
        .model(11);
    let net = import(&dynamic);
    let ops: Vec<_> = net
        .layers()
        .iter()
        .filter_map(|l| match l.kind {
            LayerKind::Elementwise { op } => Some(op),
            _ => None,
        })
        .collect();
    assert_eq!(ops, [ElementwiseOp::Max, ElementwiseOp::Min]);
    let y = run(
        &dynamic,
        vec![("x", f32s(&[3], &[-5., 0.5, 5.])), ("lo", f32s(&[], &[0.])), ("hi", f32s(&[], &[2.]))],
        "y",
    );
    assert_close(&y, &[3], &[0., 0.5, 2.], 0.0);
}

#[test]
fn prelu_opset6_per_channel_slope() {
    let model = Graph::new()
        .input("x", F32, "1,2,2")
        .init(tensor_f32("s", &[2], &[0.5, 2.]))
        .node(node("PRelu", &["x", "s"], &["y"]))
        .output("y")
        .model(6);
    let y = run(&model, vec![("x", f32s(&[1, 2, 2], &[-2., 2., -2., 2.]))], "y");
    assert_close(&y, &[1, 2, 2], &[-1., 2., -4., 2.], 0.0);
}

#[test]
fn softmax_11_coerces_to_2d_but_13_uses_one_axis() {
    let x = f32s(&[1, 2, 2], &[0., 0., 0., (3f32).ln()]);
    let m11 = unary_model(node("Softmax", &["x"], &["y"]), "1,2,2", 11);
    let y = run(&m11, vec![("x", x.clone())], "y");
    // One softmax over all four values (axis 1 onwards): e^0, e^0, e^0, 3 over 6.
    assert_close(&y, &[1, 2, 2], &[1. / 6., 1. / 6., 1. / 6., 0.5], 1e-6);
    let m13 = unary_model(node("Softmax", &["x"], &["y"]).int("axis", 1), "1,2,2", 13);
    let y = run(&m13, vec![("x", x.clone())], "y");
    assert_close(&y, &[1, 2, 2], &[0.5, 0.25, 0.5, 0.75], 1e-6);
    let default13 = unary_model(node("Softmax", &["x"], &["y"]), "1,2,2", 13);
    let y = run(&default13, vec![("x", x)], "y");
    assert_close(&y, &[1, 2, 2], &[0.5, 0.5, 0.25, 0.75], 1e-6);
}

#[test]
fn softmax_11_on_dynamic_dims_reshapes_back_with_the_input_shape() {
    let m = unary_model(node("Softmax", &["x"], &["y"]).int("axis", 1), "N,2,?", 11);
    let net = import(&m);
    assert!(net.layers().iter().any(|l| l.kind == LayerKind::Shape));
    let y = net.tensor(net.outputs()[0]);
    assert_eq!(y.shape.rank(), 3);
    let out = run_network(&net, vec![("x", f32s(&[2, 2, 1], &[0., 0., 1., 1.]))]);
    assert_close(&out["y"], &[2, 2, 1], &[0.5, 0.5, 0.5, 0.5], 1e-6);
}

#[test]
fn reduce_axes_attribute_then_input() {
    let x = iota(&[2, 3]);
    // ReduceSum: attribute until 13.
    let attr = unary_model(node("ReduceSum", &["x"], &["y"]).ints("axes", &[-1]).int("keepdims", 0), "2,3", 11);
    assert_close(&run(&attr, vec![("x", x.clone())], "y"), &[2], &[3., 12.], 0.0);
    let input = Graph::new()
        .input("x", F32, "2,3")
        .init(tensor_i64("axes", &[1], &[0]))
        .node(node("ReduceSum", &["x", "axes"], &["y"]))
        .output("y")
        .model(13);
    assert_close(&run(&input, vec![("x", x.clone())], "y"), &[1, 3], &[3., 5., 7.], 0.0);
    // ReduceMean: attribute until 18; at 13 the input form is not yet defined.
    let mean13 = unary_model(node("ReduceMean", &["x"], &["y"]).ints("axes", &[1]), "2,3", 13);
    assert_close(&run(&mean13, vec![("x", x.clone())], "y"), &[2, 1], &[1., 4.], 0.0);
    let mean18 = Graph::new()
        .input("x", F32, "2,3")
        .init(tensor_i64("axes", &[1], &[1]))
        .node(node("ReduceMean", &["x", "axes"], &["y"]).int("keepdims", 0))
        .output("y")
        .model(18);
    assert_close(&run(&mean18, vec![("x", x.clone())], "y"), &[2], &[1., 4.], 0.0);
    // No axes: everything, unless noop_with_empty_axes.
    let all = unary_model(node("ReduceMax", &["x"], &["y"]), "2,3", 18);
    assert_close(&run(&all, vec![("x", x)], "y"), &[1, 1], &[5.], 0.0);
}

#[test]
fn reduce_axes_input_may_be_computed_at_run_time() {
    let model = Graph::new()
        .input("x", F32, "2,3")
        .input("axes", I64, "1")
        .node(node("ReduceSum", &["x", "axes"], &["y"]))
        .output("y")
        .model(13);
    let x = f32s(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
    let y = run(&model, vec![("x", x.clone()), ("axes", i64s(&[1], &[-1]))], "y");
    assert_close(&y, &[2, 1], &[6., 15.], 0.);
    let y = run(&model, vec![("x", x), ("axes", i64s(&[1], &[0]))], "y");
    assert_close(&y, &[1, 3], &[5., 7., 9.], 0.);
    // With noop_with_empty_axes, run-time axes declared empty make the op an identity; of
    // unknown length, they cannot be told apart from "no-op" at build time.
    let noop = |axes_dims: &str| {
        Graph::new()
            .input("x", F32, "2,3")
            .input("axes", I64, axes_dims)
            .node(node("ReduceSum", &["x", "axes"], &["y"]).int("noop_with_empty_axes", 1))
            .output("y")
            .model(13)
    };
    let x = f32s(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
    let y = run(&noop("0"), vec![("x", x), ("axes", i64s(&[0], &[]))], "y");
    assert_close(&y, &[2, 3], &[1., 2., 3., 4., 5., 6.], 0.);
    assert!(matches!(import_err(&noop("?")), ImportError::UnsupportedFeature { .. }));
}

#[test]
fn layer_normalization_over_trailing_axes() {
    let model = Graph::new()
        .input("x", F32, "N,2")
        .init(tensor_f32("s", &[2], &[1., 2.]))
        .node(node("LayerNormalization", &["x", "s"], &["y"]).float("epsilon", 0.))
        .output("y")
        .model(17);
    let net = import(&model);
    assert!(matches!(&net.layers().last().expect("norm").kind, LayerKind::Normalization { axes, .. } if axes == &[1]));
    let y = run(&model, vec![("x", f32s(&[2, 2], &[1., 3., 4., 6.]))], "y");
    assert_close(&y, &[2, 2], &[-1., 2., -1., 2.], 1e-5);
    let stats = Graph::new()
        .input("x", F32, "2,2")
        .init(tensor_f32("s", &[2], &[1., 2.]))
        .node(node("LayerNormalization", &["x", "s"], &["y", "mean"]))
        .output("y")
        .output("mean")
        .model(17);
    let outputs = run_network(&import(&stats), vec![("x", f32s(&[2, 2], &[1., 3., 4., 6.]))]);
    assert_close(&outputs["y"], &[2, 2], &[-1., 2., -1., 2.], 1e-4);
    assert_close(&outputs["mean"], &[2, 1], &[2., 5.], 0.);
}

#[test]
fn batch_normalization_keeps_its_parameters_and_the_builder_folds_them() {
    let model = Graph::new()
        .input("x", F32, "1,2,1,2")
        .init(tensor_f32("scale", &[2], &[2., 1.]))
        .init(tensor_f32("bias", &[2], &[1., 0.]))
        .init(tensor_f32("mean", &[2], &[1., 10.]))
        .init(tensor_f32("var", &[2], &[4., 1.]))
        .node(node("BatchNormalization", &["x", "scale", "bias", "mean", "var"], &["y"]).float("epsilon", 0.))
        .output("y")
        .model(15);
    let net = import(&model);
    // The parameters stay the model's named weights (a refit finds them by name) …
    for name in ["scale", "bias", "mean", "var"] {
        assert!(net.layers().iter().any(|l| l.name == name && matches!(l.kind, LayerKind::Constant { .. })), "{name}");
    }
    // … and the builder folds them into one scale and one shift: y = x * a + b.
    let backend = kiln_cpu::CpuBackend::new();
    let engine = kiln::Builder::new(&backend).build(&net, &kiln::BuilderConfig::default()).unwrap();
    let kinds: Vec<&str> = engine.network().layers().iter().map(|l| l.kind.type_name()).collect();
    assert_eq!(kinds.iter().filter(|k| **k != "Constant").count(), 1, "one fused pointwise layer: {kinds:?}");
    let y = run(&model, vec![("x", f32s(&[1, 2, 1, 2], &[1., 3., 10., 12.]))], "y");
    assert_close(&y, &[1, 2, 1, 2], &[1., 3., 0., 2.], 1e-6);
}

/// Training mode normalizes by the batch's own statistics (per channel over N and the
/// spatial axes, population variance) and blends the running statistics by momentum.
#[test]
fn batch_normalization_in_training_mode_uses_the_batch_statistics() {
    let training = |outputs: &[&str]| {
        let mut g = Graph::new()
            .input("x", F32, "2,2,2")
            .init(tensor_f32("scale", &[2], &[1., 2.]))
            .init(tensor_f32("bias", &[2], &[0., 1.]))
            .init(tensor_f32("mean", &[2], &[10., 20.]))
            .init(tensor_f32("var", &[2], &[1., 1.]))
            .node(
                node("BatchNormalization", &["x", "scale", "bias", "mean", "var"], outputs)
                    .int("training_mode", 1)
                    .float("epsilon", 0.0)
                    .float("momentum", 0.5),
            );
        for o in outputs {
            g = g.output(o);
        }
        g.model(15)
    };
    // Channel 0 holds 1, 3, 5, 7 (mean 4, variance 5); channel 1 holds 2, 2, 6, 6 (mean 4, variance 4).
    let x = f32s(&[2, 2, 2], &[1., 3., 2., 2., 5., 7., 6., 6.]);
    let outs = run_network(&import(&training(&["y", "running_mean", "running_var"])), vec![("x", x)]);
    let s5 = 5f64.sqrt();
    assert_close(&outs["y"], &[2, 2, 2], &[-3. / s5, -1. / s5, -1., -1., 1. / s5, 3. / s5, 3., 3.], 1e-6);
    assert_close(&outs["running_mean"], &[2], &[7., 12.], 1e-6);
    assert_close(&outs["running_var"], &[2], &[3., 2.5], 1e-6);
    // Statistics over N and the spatial axes are not a row normalization: the optimizer
    // must not fuse them into one (the cuda kernels normalize trailing axes only).
    let backend = kiln_cpu::CpuBackend::new();
    let engine = kiln::Builder::new(&backend).build(&import(&training(&["y"])), &kiln::BuilderConfig::default()).expect("build");
    let fused = engine.network().layers().iter().find_map(|l| match &l.kind {
        LayerKind::Normalization { axes, .. } => Some(axes.clone()),
        _ => None,
    });
    assert_eq!(fused, None, "the batch statistics were fused into a Normalization layer");
}

#[test]
fn instance_normalization_per_channel() {
    let model = Graph::new()
        .input("x", F32, "1,2,2")
        .init(tensor_f32("s", &[2], &[1., 3.]))
        .init(tensor_f32("b", &[2], &[0., 1.]))
        .node(node("InstanceNormalization", &["x", "s", "b"], &["y"]).float("epsilon", 0.))
        .output("y")
        .model(6);
    let y = run(&model, vec![("x", f32s(&[1, 2, 2], &[0., 2., 5., 7.]))], "y");
    assert_close(&y, &[1, 2, 2], &[-1., 1., -2., 4.], 1e-5);
}

#[test]
fn shapes_stay_symbolic_through_elementwise_ops() {
    let model = Graph::new()
        .input("x", F32, "B,T,4")
        .node(node("Sigmoid", &["x"], &["s"]))
        .node(node("Mul", &["x", "s"], &["y"]))
        .output("y")
        .model(13);
    let net = import(&model);
    let y = net.tensor(net.outputs()[0]);
    assert_eq!(y.shape.dims(), &[Dim::Named("B".into()), Dim::Named("T".into()), Dim::Fixed(4)]);
}

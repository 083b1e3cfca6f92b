//! The long tail: shape arithmetic that folds through ConstantOfShape, run-time Dropout
//! training flags, and the errors of context-dependent function bodies. (Numeric checks of
//! DFT, STFT, Col2Im, Det, RoiAlign, MaxUnpool, TensorScatter, the integer ops and the
//! function-body ops are reference cases in `fixtures.rs`.)

mod common;

use common::*;
use kiln::{BuilderConfig, Dim, ExecutionContext, HostTensor, TensorData};
use kiln_onnx::ImportError;
use std::collections::HashMap;

/// The LayerNormalization function body's reduced shape: `Concat(Slice(Shape(X), 0, -1),
/// ConstantOfShape(Neg([-1])))` must fold at import, so the Reshape it feeds is static.
#[test]
fn constant_of_shape_of_folded_values_gives_static_reshape_dims() {
    let model = Graph::new()
        .input("x", F32, "2,3,4")
        .init(tensor_i64("zero", &[1], &[0]))
        .init(tensor_i64("minus_one", &[1], &[-1]))
        .node(node("Shape", &["x"], &["shape"]))
        .node(node("Slice", &["shape", "zero", "minus_one"], &["prefix"]))
        .node(node("Neg", &["minus_one"], &["count"]))
        .node(node("ConstantOfShape", &["count"], &["ones"]).tensor("value", tensor_i64("v", &[1], &[1])))
        .node(node("Concat", &["prefix", "ones"], &["reduced"]).int("axis", 0))
        .node(node("ReduceMean", &["x"], &["mean"]).ints("axes", &[2]).int("keepdims", 0))
        .node(node("Reshape", &["mean", "reduced"], &["y"]))
        .output("y")
        .model(17);
    let net = import(&model);
    let y = net.outputs()[0];
    assert_eq!(net.tensor(y).shape.dims(), &[Dim::Fixed(2), Dim::Fixed(3), Dim::Fixed(1)]);
    let x: Vec<f32> = (0..24).map(|v| v as f32).collect();
    let out = run(&model, vec![("x", f32s(&[2, 3, 4], &x))], "y");
    let means: Vec<f64> = (0..6).map(|row| (4 * row) as f64 + 1.5).collect();
    assert_close(&out, &[2, 3, 1], &means, 1e-6);
}

fn dropout_model() -> kiln_onnx::proto::ModelProto {
    Graph::new()
        .input("x", F32, "2,2")
        .input("ratio", F32, "")
        .input("training", BOOL, "")
        .node(node("Dropout", &["x", "ratio", "training"], &["y", "mask"]))
        .output("y")
        .output("mask")
        .model(22)
}

fn scalar_bool(v: bool) -> HostTensor {
    HostTensor::new(vec![], TensorData::Bool(vec![v])).unwrap()
}

/// A run-time training flag: deterministic cases run (identity, all-true mask); training
/// with a non-zero ratio needs random masks and fails the run with a message saying so.
#[test]
fn dropout_with_run_time_training_mode() {
    let net = import(&dropout_model());
    let x = f32s(&[2, 2], &[1.0, -2.0, 3.0, 4.0]);
    for (ratio, training) in [(0.5, false), (0.0, true)] {
        let outputs = run_network(
            &net,
            vec![("x", x.clone()), ("ratio", f32s(&[], &[ratio])), ("training", scalar_bool(training))],
        );
        assert_close(&outputs["y"], &[2, 2], &[1.0, -2.0, 3.0, 4.0], 0.0);
        assert_bool(&outputs["mask"], &[2, 2], &[true; 4]);
    }
    let backend = kiln_cpu::CpuBackend::new();
    let engine = kiln::Builder::new(&backend).build(&net, &BuilderConfig::default()).expect("build");
    let context = ExecutionContext::new(engine, &backend).expect("prepare");
    let inputs: HashMap<String, HostTensor> =
        [("x".to_string(), x), ("ratio".to_string(), f32s(&[], &[0.5])), ("training".to_string(), scalar_bool(true))]
            .into_iter()
            .collect();
    let error = context.run(&inputs).expect_err("training with ratio 0.5 must not run").to_string();
    assert!(error.contains("random masks"), "{error}");
}

/// A body builder's refusal names the node, the op and what it cannot expand.
#[test]
fn context_function_errors_name_the_node_and_the_reason() {
    let model = Graph::new()
        .input("x", F32, "1,2,5")
        .init(tensor_f32("w", &[2, 1, 3], &[0.5; 6]))
        .node(node("CausalConvWithState", &["x", "w"], &["y"]).string("activation", "relu").named("conv"))
        .output("y")
        .model(27);
    match import_err(&model) {
        ImportError::UnsupportedFeature { node, op_type, feature } => {
            assert_eq!((node.as_str(), op_type.as_str()), ("conv", "CausalConvWithState"));
            assert!(feature.contains("activation `relu`"), "{feature}");
        }
        other => panic!("expected an unsupported feature, got {other}"),
    }
    let model = Graph::new()
        .input("q", F32, "1,2,8")
        .node(
            node("LinearAttention", &["q", "q", "q"], &["y"])
                .int("q_num_heads", 3)
                .int("kv_num_heads", 2)
                .string("update_rule", "linear"),
        )
        .output("y")
        .model(27);
    let error = import_err(&model).to_string();
    assert!(error.contains("q_num_heads 3 must be a positive multiple of kv_num_heads 2"), "{error}");
}

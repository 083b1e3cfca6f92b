//! `ai.onnx.preview.training::Gradient`: gradients built at import time, checked against
//! central finite differences of the forward outputs on random inputs.

mod common;

use common::*;
use kiln::HostTensor;
use kiln_onnx::proto::attribute_proto::AttributeType;
use kiln_onnx::proto::{AttributeProto, ModelProto, OperatorSetIdProto};

fn strings_attr(name: &str, values: &[&str]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Strings as i32),
        strings: values.iter().map(|s| s.as_bytes().to_vec()).collect(),
        ..Default::default()
    }
}

fn string_attr(name: &str, value: &str) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::String as i32),
        s: Some(value.as_bytes().to_vec()),
        ..Default::default()
    }
}

/// The forward graph plus `Gradient(xs → y)` whose outputs are `d<x>`.
fn with_gradient(graph: Graph, xs: &[&str], y: &str) -> ModelProto {
    let outputs: Vec<String> = xs.iter().map(|x| format!("d{x}")).collect();
    let out_refs: Vec<&str> = outputs.iter().map(String::as_str).collect();
    let mut gradient = node("Gradient", xs, &out_refs).attr(strings_attr("xs", xs)).attr(string_attr("y", y));
    gradient.domain = Some("ai.onnx.preview.training".into());
    let mut graph = graph.node(gradient).output(y);
    for o in &out_refs {
        graph = graph.output(o);
    }
    let mut model = graph.model(13);
    model.opset_import.push(OperatorSetIdProto { domain: Some("ai.onnx.preview.training".into()), version: Some(1) });
    model
}

/// Deterministic pseudo-random values in [lo, hi).
fn random(n: usize, seed: u64, lo: f32, hi: f32) -> Vec<f32> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            lo + (hi - lo) * ((state >> 40) as f32 / (1u64 << 24) as f32)
        })
        .collect()
}

/// Sum of output `y` for the given inputs.
fn sum_of(net: &kiln::Network, inputs: &[(&str, Vec<usize>, Vec<f32>)], y: &str) -> f64 {
    let feed = inputs.iter().map(|(n, s, v)| (*n, f32s(s, v))).collect();
    let out = run_network(net, feed);
    out[y].to_f64_vec().iter().sum()
}

/// Compares every `d<x>` with central differences of `sum(y)`.
fn check_against_finite_differences(model: &ModelProto, inputs: &[(&str, Vec<usize>, Vec<f32>)], y: &str) {
    let net = import(model);
    let feed = inputs.iter().map(|(n, s, v)| (*n, f32s(s, v))).collect();
    let outputs = run_network(&net, feed);
    let eps = 1e-2f32;
    for (k, (name, shape, values)) in inputs.iter().enumerate() {
        let grad: &HostTensor = &outputs[&format!("d{name}")];
        assert_eq!(grad.shape(), shape.as_slice(), "gradient of `{name}` has the input's shape");
        let grad = grad.to_f64_vec();
        for i in 0..values.len() {
            let mut shifted = inputs.to_vec();
            shifted[k].2[i] = values[i] + eps;
            let up = sum_of(&net, &shifted, y);
            shifted[k].2[i] = values[i] - eps;
            let down = sum_of(&net, &shifted, y);
            let numeric = (up - down) / (2.0 * eps as f64);
            let tolerance = 2e-2 * (1.0 + numeric.abs());
            assert!(
                (grad[i] - numeric).abs() <= tolerance,
                "d{name}[{i}]: analytic {} vs finite difference {numeric}",
                grad[i]
            );
        }
    }
}

#[test]
fn gradient_of_add_and_mul_matches_the_closed_form() {
    // d = (a + b) * a: dd/da = 2a + b, dd/db = a (the ONNX `simple` model).
    let graph = Graph::new().input("a", F32, "").input("b", F32, "").node(node("Add", &["a", "b"], &["c"])).node(node(
        "Mul",
        &["c", "a"],
        &["d"],
    ));
    let model = with_gradient(graph, &["a", "b"], "d");
    let out = run_network(&import(&model), vec![("a", f32s(&[], &[3.0])), ("b", f32s(&[], &[-5.0]))]);
    assert_close(&out["da"], &[], &[1.0], 1e-6);
    assert_close(&out["db"], &[], &[3.0], 1e-6);
}

#[test]
fn gradient_through_broadcasts_and_nonlinearities_matches_finite_differences() {
    let graph = Graph::new()
        .input("a", F32, "2,3")
        .input("b", F32, "3")
        .input("w", F32, "3,2")
        .input("s", F32, "1")
        .init(tensor_f32("two", &[], &[2.0]))
        .node(node("Add", &["a", "b"], &["c"]))
        .node(node("Mul", &["c", "a"], &["d"]))
        .node(node("Tanh", &["d"], &["e"]))
        .node(node("MatMul", &["e", "w"], &["f"]))
        .node(node("Sigmoid", &["f"], &["g"]))
        .node(node("Div", &["g", "s"], &["h"]))
        .node(node("Add", &["h", "two"], &["i"]))
        .node(node("Log", &["i"], &["j"]))
        .node(node("Neg", &["h"], &["k"]))
        .node(node("Exp", &["k"], &["l"]))
        .node(node("Sub", &["j", "l"], &["y"]));
    let model = with_gradient(graph, &["a", "b", "w", "s"], "y");
    let inputs = vec![
        ("a", vec![2, 3], random(6, 1, -1.0, 1.0)),
        ("b", vec![3], random(3, 2, -1.0, 1.0)),
        ("w", vec![3, 2], random(6, 3, -1.0, 1.0)),
        ("s", vec![1], random(1, 4, 0.5, 1.5)),
    ];
    check_against_finite_differences(&model, &inputs, "y");
}

#[test]
fn gradient_through_reshape_transpose_and_relu_matches_finite_differences() {
    let graph = Graph::new()
        .input("x", F32, "2,3")
        .init(tensor_i64("shape", &[2], &[3, 2]))
        .node(node("Reshape", &["x", "shape"], &["r"]))
        .node(node("Transpose", &["r"], &["t"]).ints("perm", &[1, 0]))
        .node(node("Relu", &["t"], &["u"]))
        .node(node("Mul", &["u", "u"], &["y"]));
    let model = with_gradient(graph, &["x"], "y");
    // Away from Relu's kink at 0, where the finite difference straddles it.
    let values = vec![0.7, -0.4, 1.3, -1.1, 0.5, 0.9];
    check_against_finite_differences(&model, &[("x", vec![2, 3], values)], "y");
}

#[test]
fn gradient_of_an_input_y_does_not_use_is_zero() {
    let graph = Graph::new().input("a", F32, "2").input("b", F32, "2").node(node("Neg", &["a"], &["y"]));
    let model = with_gradient(graph, &["a", "b"], "y");
    let out = run_network(&import(&model), vec![("a", f32s(&[2], &[1.0, 2.0])), ("b", f32s(&[2], &[3.0, 4.0]))]);
    assert_close(&out["da"], &[2], &[-1.0, -1.0], 0.0);
    assert_close(&out["db"], &[2], &[0.0, 0.0], 0.0);
}

#[test]
fn an_op_without_a_derivative_rule_is_named_in_the_error() {
    let graph = Graph::new().input("a", F32, "2").node(node("Sin", &["a"], &["y"]));
    let err = import_err(&with_gradient(graph, &["a"], "y")).to_string();
    assert!(err.contains("`Sin`") && err.contains("Gradient"), "{err}");
}

//! Graphs of tens of thousands of nodes import, build for the cpu backend and run (issue
//! #25): no quadratic pass or lookup makes them take minutes, and no recursion overflows
//! the test thread's stack. Times are tracked by the `graph_size` benchmark, not here.

mod common;

use common::large_graphs::{LargeGraph, WIDTH};
use common::{assert_close, f32s, import, run_network};
use kiln_onnx::proto::ModelProto;
use std::collections::HashMap;

const NODES: usize = 50_000;
const INPUT: [f32; WIDTH as usize] = [0.5, -0.25, 1.0, -1.0];

/// Evaluates the generated model's ops (Relu, Add, Mul, Sub, Concat on axis 0) one
/// element at a time in f32, node by node as listed.
fn reference(model: &ModelProto) -> (Vec<usize>, Vec<f64>) {
    let graph = model.graph.as_ref().expect("generated models have a graph");
    let mut values: HashMap<&str, Vec<f32>> = HashMap::new();
    values.insert("x", INPUT.to_vec());
    for init in &graph.initializer {
        values.insert(init.name(), init.float_data.clone());
    }
    for node in &graph.node {
        let operand = |i: usize| &values[node.input[i].as_str()];
        let binary = |f: fn(f32, f32) -> f32| operand(0).iter().zip(operand(1)).map(|(&a, &b)| f(a, b)).collect();
        let result: Vec<f32> = match node.op_type() {
            "Relu" => operand(0).iter().map(|&v| v.max(0.0)).collect(),
            "Add" => binary(|a, b| a + b),
            "Mul" => binary(|a, b| a * b),
            "Sub" => binary(|a, b| a - b),
            "Concat" => (0..node.input.len()).flat_map(|i| operand(i).clone()).collect(),
            other => panic!("the reference does not evaluate {other}"),
        };
        values.insert(node.output[0].as_str(), result);
    }
    let output = &values[graph.output[0].name()];
    (vec![output.len() / WIDTH as usize, WIDTH as usize], output.iter().map(|&v| f64::from(v)).collect())
}

fn imports_builds_and_runs(kind: LargeGraph) {
    let model = kind.model(NODES);
    let network = import(&model);
    assert!(network.layers().len() >= NODES, "{}: {} layers", kind.name(), network.layers().len());
    let outputs = run_network(&network, vec![("x", f32s(&[1, WIDTH as usize], &INPUT))]);
    let (shape, expected) = reference(&model);
    let output = model.graph.as_ref().and_then(|g| g.output.first()).map(|o| o.name().to_string()).unwrap_or_default();
    assert_close(&outputs[&output], &shape, &expected, 1e-4);
}

#[test]
fn relu_chain_of_50k_nodes() {
    imports_builds_and_runs(LargeGraph::ReluChain);
}

#[test]
fn add_mul_sub_chain_of_50k_nodes() {
    imports_builds_and_runs(LargeGraph::ArithmeticChain);
}

#[test]
fn wide_graph_of_50k_nodes() {
    imports_builds_and_runs(LargeGraph::Wide);
}

//! The PyTorch-exported reference models in the repository's `tests/data/pytorch/`
//! (TorchScript and dynamo exporters, opsets 17 and 18) import, build and match
//! onnxruntime's outputs stored next to them; the scripted loops of `export_loops.py` match
//! PyTorch's own outputs.

mod common;

use common::pytorch_data::{data_dir, read_npz, worst_error};
use kiln::HostTensor;
use std::collections::HashMap;

fn check_model(name: &str) {
    let dir = data_dir();
    let net = kiln_onnx::import_file(&dir.join(format!("{name}.onnx"))).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut arrays = read_npz(&dir.join(format!("{name}.npz")));
    let input_names: Vec<String> = net.inputs().iter().map(|&t| net.tensor(t).name.clone()).collect();
    let inputs: HashMap<String, HostTensor> = input_names
        .iter()
        .map(|n| (n.clone(), arrays.remove(n).unwrap_or_else(|| panic!("{name}: no input {n}"))))
        .collect();
    let backend = kiln_cpu::CpuBackend::new();
    let engine = kiln::Builder::new(&backend)
        .build(&net, &kiln::BuilderConfig::default())
        .unwrap_or_else(|e| panic!("{name}: build failed: {e}"));
    let outputs = kiln::ExecutionContext::new(engine, &backend)
        .expect("prepare")
        .run(&inputs)
        .unwrap_or_else(|e| panic!("{name}: run failed: {e}"));
    assert!(!arrays.is_empty(), "{name}: no expected outputs");
    for (output, want) in arrays {
        let got = outputs.get(&output).unwrap_or_else(|| panic!("{name}: no output `{output}`"));
        assert_eq!(got.shape(), want.shape(), "{name}/{output}");
        let worst = worst_error(got, &want);
        assert!(worst < 1e-4, "{name}/{output}: relative error {worst}");
    }
}

#[test]
fn cnn_torchscript() {
    check_model("cnn_torchscript");
}

#[test]
fn cnn_dynamo() {
    check_model("cnn_dynamo");
}

#[test]
fn bert_torchscript() {
    check_model("bert_torchscript");
}

#[test]
fn bert_dynamo() {
    check_model("bert_dynamo");
}

// TorchScript-scripted loops (tests/data/pytorch/export_loops.py), checked against PyTorch.

#[test]
fn loop_with_if_inside() {
    check_model("loop_sum_even");
}

#[test]
fn while_loop() {
    check_model("loop_while");
}

#[test]
fn loop_appending_to_a_list() {
    check_model("loop_list");
}

#[test]
fn nested_loops() {
    check_model("loop_nested");
}

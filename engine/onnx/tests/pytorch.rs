//! The PyTorch-exported reference models in the repository's `tests/data/pytorch/`
//! (TorchScript and dynamo exporters, opsets 17 and 18) import, build and match
//! onnxruntime's outputs stored next to them; the scripted loops of `export_loops.py` match
//! PyTorch's own outputs.

use kiln::{HostTensor, TensorData};
use npyz::npz::NpzArchive;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/pytorch")
}

/// Every array of an npz file, as host tensors (the models use f32 and i64 only).
fn read_npz(path: &Path) -> HashMap<String, HostTensor> {
    let mut archive = NpzArchive::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let names: Vec<String> = archive.array_names().map(str::to_string).collect();
    names
        .into_iter()
        .map(|name| {
            let npy = archive.by_name(&name).expect("read array").expect("array exists");
            let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
            let data = match npy.dtype().descr().trim_matches('\'') {
                "<f4" => TensorData::F32(npy.into_vec::<f32>().expect("f32 data")),
                "<i8" => TensorData::I64(npy.into_vec::<i64>().expect("i64 data")),
                other => panic!("{name}: unexpected dtype {other}"),
            };
            (name, HostTensor::new(shape, data).expect("shape matches"))
        })
        .collect()
}

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
        let worst = got
            .to_f64_vec()
            .iter()
            .zip(want.to_f64_vec())
            .map(|(a, e)| (a - e).abs() / (1.0 + e.abs()))
            .fold(0.0, f64::max);
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

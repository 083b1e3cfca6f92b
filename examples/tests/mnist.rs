//! The MNIST model three ways: kiln's network API, kiln's ONNX importer, and onnxruntime's
//! output saved by `models/make_mnist.py`.

use kiln::{Builder, BuilderConfig, ExecutionContext, HostTensor, Network};
use kiln_examples::mnist_network;
use std::collections::HashMap;
use std::path::PathBuf;

fn model_path(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models").join(file)
}

/// Reads one f32 array of `mnist_expected.npz` with its shape.
fn expected_array(name: &str) -> (Vec<usize>, Vec<f32>) {
    let mut npz = npyz::npz::NpzArchive::open(model_path("mnist_expected.npz")).expect("open mnist_expected.npz");
    let array = npz.by_name(name).expect("read npz").unwrap_or_else(|| panic!("no `{name}` in mnist_expected.npz"));
    let shape = array.shape().iter().map(|&d| d as usize).collect();
    (shape, array.into_vec::<f32>().expect("f32 array"))
}

fn run_on_cpu(network: &Network, data: &HostTensor) -> Vec<f32> {
    let cpu = kiln_cpu::CpuBackend::new();
    let engine = Builder::new(&cpu).build(network, &BuilderConfig::default()).expect("build");
    let context = ExecutionContext::new(engine, &cpu).expect("prepare");
    let outputs = context.run(&HashMap::from([("data".to_string(), data.clone())])).expect("run");
    let prob = &outputs["prob"];
    assert_eq!(prob.shape(), &[1, 10]);
    prob.as_f32().expect("f32 output").to_vec()
}

fn expected_input() -> HostTensor {
    let (shape, values) = expected_array("data");
    HostTensor::from_f32(shape, values).expect("consistent npz array")
}

#[test]
fn api_network_and_onnx_model_agree() {
    let data = expected_input();
    let from_api = run_on_cpu(&mnist_network(1).expect("api network"), &data);
    let imported = kiln_onnx::import_file(&model_path("mnist.onnx")).expect("import mnist.onnx");
    let from_onnx = run_on_cpu(&imported, &data);
    for (i, (a, o)) in from_api.iter().zip(&from_onnx).enumerate() {
        assert!((a - o).abs() <= 1e-5, "prob[{i}]: api {a} vs onnx {o}");
    }
}

#[test]
fn onnx_model_matches_onnxruntime() {
    let imported = kiln_onnx::import_file(&model_path("mnist.onnx")).expect("import mnist.onnx");
    let got = run_on_cpu(&imported, &expected_input());
    let (shape, want) = expected_array("prob");
    assert_eq!(shape, [1, 10]);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!((g - w).abs() <= 1e-4 + 1e-3 * w.abs(), "prob[{i}]: kiln {g} vs onnxruntime {w}");
    }
    assert!((got.iter().sum::<f32>() - 1.0).abs() < 1e-5, "softmax sums to 1");
}

#[test]
fn api_network_shapes_follow_the_batch() {
    let network = mnist_network(3).expect("api network");
    let prob = network.outputs()[0];
    assert_eq!(network.tensor(prob).name, "prob");
    assert_eq!(network.tensor(prob).shape, kiln::Shape::fixed(&[3, 10]));
    assert_eq!(network.tensor(network.inputs()[0]).shape, kiln::Shape::fixed(&[3, 1, 28, 28]));
}

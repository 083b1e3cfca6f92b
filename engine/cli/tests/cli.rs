//! End-to-end tests of the `kiln` binary: the contract an external harness relies on.
//!
//! `data/unsupported_op.onnx` is a one-node model (op `FrobnicateTensor`, opset 13, input
//! `x` f32[2], output `y`) written with onnx's `helper.make_model`.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use tempfile::TempDir;

fn mnist_onnx() -> PathBuf {
    repo_path("examples/models/mnist.onnx")
}

/// An MNIST input: a smooth deterministic pattern in [0, 1].
fn write_mnist_input(path: &Path) {
    let image: Vec<f32> = (0..784).map(|i| 0.5 + 0.5 * (i as f32 * 0.05).sin()).collect();
    write_npz_array(path, "data", &[1, 1, 28, 28], &image);
}

#[test]
fn runs_mnist_with_random_inputs() {
    let stdout = kiln_ok(&["run", mnist_onnx().to_str().unwrap()]);
    assert!(stdout.contains("cpu"), "{stdout}");
    assert!(stdout.contains("`data`: f32[1,1,28,28]"), "{stdout}");
    assert!(stdout.contains("`prob`: f32[1,10]"), "{stdout}");
}

#[test]
fn runs_mnist_with_npz_inputs_and_saves_outputs() {
    let dir = TempDir::new().unwrap();
    let (input, output) = (dir.path().join("in.npz"), dir.path().join("out.npz"));
    write_mnist_input(&input);
    kiln_ok(&[
        "run",
        mnist_onnx().to_str().unwrap(),
        "--inputs",
        path_arg(&input),
        "--save-outputs",
        path_arg(&output),
    ]);
    let arrays = read_f32_arrays(&output);
    assert_eq!(arrays.len(), 1);
    let (name, shape, values) = &arrays[0];
    assert_eq!(name, "prob");
    assert_eq!(shape, &[1, 10]);
    let sum: f32 = values.iter().sum();
    assert!((sum - 1.0).abs() < 1e-5, "softmax sums to {sum}");
    assert!(values.iter().all(|p| (0.0..=1.0).contains(p)));
}

#[test]
fn built_engine_runs_like_the_onnx_model() {
    let dir = TempDir::new().unwrap();
    let engine = dir.path().join("mnist.engine");
    let input = dir.path().join("in.npz");
    write_mnist_input(&input);
    let stdout = kiln_ok(&["build", mnist_onnx().to_str().unwrap(), "-o", path_arg(&engine)]);
    assert!(stdout.contains("layers:"), "{stdout}");
    assert!(std::fs::metadata(&engine).unwrap().len() > 1_000_000, "the engine holds the weights");

    let (from_onnx, from_engine) = (dir.path().join("onnx_out.npz"), dir.path().join("engine_out.npz"));
    kiln_ok(&[
        "run",
        mnist_onnx().to_str().unwrap(),
        "--inputs",
        path_arg(&input),
        "--save-outputs",
        path_arg(&from_onnx),
    ]);
    let stdout =
        kiln_ok(&["run", path_arg(&engine), "--inputs", path_arg(&input), "--save-outputs", path_arg(&from_engine)]);
    assert!(stdout.contains("cpu"), "{stdout}");
    // Two builds, each timing its tactics: the convolution picked may differ, and round
    // differently in the last bit.
    let (onnx_arrays, engine_arrays) = (read_f32_arrays(&from_onnx), read_f32_arrays(&from_engine));
    assert_eq!(onnx_arrays.len(), engine_arrays.len());
    for ((name, shape, values), (engine_name, engine_shape, engine_values)) in onnx_arrays.iter().zip(&engine_arrays) {
        assert_eq!((name, shape), (engine_name, engine_shape));
        assert_close(engine_values, values, 1e-6);
    }
    // An explicit backend that matches the engine's is fine too.
    kiln_ok(&["run", path_arg(&engine), "--backend", "cpu"]);
}

fn build_mnist_engine(dir: &TempDir) -> PathBuf {
    let engine = dir.path().join("mnist.engine");
    kiln_ok(&["build", mnist_onnx().to_str().unwrap(), "-o", path_arg(&engine), "--backend", "cpu"]);
    engine
}

#[test]
fn a_verbose_build_lists_each_layers_tactic_and_the_candidates_timed() {
    let dir = TempDir::new().unwrap();
    let engine = dir.path().join("mnist.engine");
    let stdout = kiln_ok(&["build", mnist_onnx().to_str().unwrap(), "-o", path_arg(&engine), "--backend", "cpu", "--verbose"]);
    let conv: Vec<&str> = stdout.lines().skip_while(|l| !l.starts_with("layer `Conv0` [Convolution]: conv_")).take(3).collect();
    assert_eq!(conv.len(), 3, "{stdout}");
    let timed: Vec<&str> = conv[1..].iter().map(|l| l.trim_start()).collect();
    assert!(timed.iter().all(|l| l.starts_with("timed cpu/conv_") && l.contains(" ms")), "{stdout}");
    assert_eq!(timed.iter().filter(|l| l.ends_with("(fastest)")).count(), 1, "{stdout}");
    // `conv_im2col_gemm (0x…)` chosen, `timed cpu/conv_im2col_gemm@…: 0.1 ms (fastest)` listed.
    let (name, value) = conv[0].rsplit(": ").next().unwrap().split_once(" (0x").unwrap();
    let chosen = format!("timed cpu/{name}@{}:", value.trim_end_matches(')'));
    assert!(timed.iter().any(|l| l.starts_with(&chosen) && l.ends_with("(fastest)")), "the fastest was chosen: {stdout}");
    assert!(stdout.contains("layer `MatMul5 + Add6 + Relu7` [Fused]: matmul_"), "fusions show in the names: {stdout}");
    assert!(stdout.contains("engine:"), "the summary follows: {stdout}");
}

#[test]
fn inspects_engines_as_text_and_json() {
    let dir = TempDir::new().unwrap();
    let engine = build_mnist_engine(&dir);

    let text = kiln_ok(&["inspect", path_arg(&engine)]);
    for expected in
        ["backend:      cpu", "`data`: f32[1,1,28,28]", "`prob`: f32[1,10]", "Convolution", "Pooling", "SoftMax"]
    {
        assert!(text.contains(expected), "`{expected}` missing from:\n{text}");
    }

    let json: serde_json::Value =
        serde_json::from_str(&kiln_ok(&["inspect", path_arg(&engine), "--format", "json"])).expect("valid json");
    assert_eq!(json["backend"], "cpu");
    assert!(json["device"]["name"].is_string());
    assert_eq!(json["inputs"][0], serde_json::json!({"name": "data", "dtype": "f32", "shape": [1, 1, 28, 28]}));
    assert_eq!(json["outputs"][0]["name"], "prob");
    assert_eq!(json["outputs"][0]["shape"], serde_json::json!([1, 10]));
    let layers = json["layers"].as_array().expect("layers array");
    assert!(layers.iter().any(|l| l["type"] == "Convolution"));
    for layer in layers {
        assert!(layer["name"].is_string() && layer["type"].is_string() && layer["parameters"].is_string(), "{layer}");
        assert!(layer["inputs"].is_array() && layer["outputs"].is_array(), "{layer}");
    }
}

#[test]
fn rejects_bad_inputs_with_one_error_line() {
    let dir = TempDir::new().unwrap();
    let model = mnist_onnx();
    let model = model.to_str().unwrap();
    let image = vec![0.0f32; 784];

    let wrong_name = dir.path().join("wrong_name.npz");
    write_npz_array(&wrong_name, "image", &[1, 1, 28, 28], &image);
    kiln_fails(&["run", model, "--inputs", path_arg(&wrong_name)], "`image`");

    let wrong_dtype = dir.path().join("wrong_dtype.npz");
    write_npz_array(&wrong_dtype, "data", &[1, 1, 28, 28], &vec![0i64; 784]);
    let line = kiln_fails(&["run", model, "--inputs", path_arg(&wrong_dtype)], "i64");
    assert_eq!(line, "error: input `data` must be f32, got i64");

    let wrong_shape = dir.path().join("wrong_shape.npz");
    write_npz_array(&wrong_shape, "data", &[1, 28, 28], &image);
    kiln_fails(&["run", model, "--inputs", path_arg(&wrong_shape)], "shape");

    kiln_fails(&["run", model, "--inputs", path_arg(&dir.path().join("absent.npz"))], "absent.npz");
}

#[test]
fn rejects_bad_model_files_with_one_error_line() {
    let dir = TempDir::new().unwrap();
    kiln_fails(&["run", path_arg(&dir.path().join("no_such_model.onnx"))], "no_such_model.onnx");

    let garbage = dir.path().join("garbage.onnx");
    std::fs::write(&garbage, b"\x12\x34 this is not a protobuf \xff\xfe\xfd".repeat(8)).unwrap();
    kiln_fails(&["run", path_arg(&garbage)], "ONNX");

    let unsupported = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/unsupported_op.onnx");
    kiln_fails(&["run", path_arg(&unsupported)], "FrobnicateTensor");

    let engine = build_mnist_engine(&dir);
    let bytes = std::fs::read(&engine).unwrap();
    let truncated = dir.path().join("truncated.engine");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    kiln_fails(&["run", path_arg(&truncated)], "truncated");
    kiln_fails(&["inspect", path_arg(&truncated)], "truncated");

    let mut flipped = bytes.clone();
    flipped[bytes.len() / 2] ^= 0x40;
    let corrupted = dir.path().join("corrupted.engine");
    std::fs::write(&corrupted, &flipped).unwrap();
    kiln_fails(&["run", path_arg(&corrupted)], "corrupted");
}

#[test]
fn unavailable_backends_are_clear_errors() {
    let model = mnist_onnx();
    let model = model.to_str().unwrap();
    if kiln_ok(&["devices"]).contains("cuda: available") {
        eprintln!("SKIPPED: the unavailable-cuda checks (this machine has CUDA)");
    } else {
        // The probe names every library it could not open.
        let line = kiln_fails(&["run", model, "--backend", "cuda"], "backend `cuda` is not available");
        assert!(line.contains("cannot open libcuda.so.1"), "{line}");
        kiln_fails(&["build", model, "-o", "/nonexistent/never.engine", "--backend", "cuda"], "not available");
    }

    let dir = TempDir::new().unwrap();
    let engine = build_mnist_engine(&dir);
    kiln_fails(&["run", path_arg(&engine), "--backend", "cuda"], "built for backend `cpu`");
}

#[test]
fn usage_errors_are_one_line_too() {
    kiln_fails(&["run", "model.onnx", "--backend", "tpu"], "tpu");
    kiln_fails(&["frobnicate"], "frobnicate");
}

//! `kiln compare` as Polygraphy's `run`: golden outputs (`--load-outputs`), an engine file
//! as the model, per-tensor tolerances, and saving each backend's outputs and intermediates.

mod common;

use common::*;
use std::path::Path;
use tempfile::TempDir;

fn mnist() -> String {
    repo_path("examples/models/mnist.onnx").to_str().unwrap().to_string()
}

/// An input file, and the cpu's outputs for it as golden outputs (`prob` moved by `shift`).
fn golden(dir: &Path, shift: f32) -> (String, String) {
    let (input, golden) = (dir.join("in.npz"), dir.join(format!("golden{shift}.npz")));
    let image: Vec<f32> = (0..784).map(|i| (i as f32 * 0.02).sin()).collect();
    write_npz_array(&input, "data", &[1, 1, 28, 28], &image);
    let raw = dir.join("raw.npz");
    kiln_ok(&["run", &mnist(), "--backend", "cpu", "--inputs", path_arg(&input), "--save-outputs", path_arg(&raw)]);
    let prob: Vec<f32> = read_f32_arrays(&raw).remove(0).2.iter().map(|p| p + shift).collect();
    write_npz_array(&golden, "prob", &[1, 10], &prob);
    (path_arg(&input).to_string(), path_arg(&golden).to_string())
}

#[test]
fn a_backend_is_compared_with_golden_outputs_and_per_tensor_tolerances_apply() {
    let dir = TempDir::new().unwrap();
    let mnist = mnist();
    let (input, exact) = golden(dir.path(), 0.0);
    let stdout = kiln_ok(&["compare", &mnist, "--backends", "cpu", "--inputs", &input, "--load-outputs", &exact]);
    assert!(stdout.contains(&format!("(reference: `{exact}`)")), "{stdout}");
    assert!(stdout.contains("result: PASS"), "{stdout}");

    let (_, shifted) = golden(dir.path(), 1e-3);
    let out = kiln(&["compare", &mnist, "--backends", "cpu", "--inputs", &input, "--load-outputs", &shifted]);
    assert_eq!(out.status.code(), Some(3), "1e-3 is outside fp32's 1e-5: {}", text(&out.stdout));
    let stdout = kiln_ok(&["compare", &mnist, "--backends", "cpu", "--inputs", &input, "--load-outputs", &shifted, "--atol", "prob:2e-3"]);
    assert!(stdout.contains("result: PASS") && stdout.contains("1 per-tensor value"), "{stdout}");
    kiln_fails(&["compare", &mnist, "--backends", "cpu", "--load-outputs", &shifted, "--atol", "probs:1"], "no tensor named `probs`");
    kiln_fails(&["compare", &mnist, "--backends", "cpu", "--load-outputs", &shifted, "--rtol", "prob:-1"], "non-negative number");
    kiln_fails(&["compare", &mnist, "--backends", "cpu"], "or one with --load-outputs");
}

#[test]
fn an_engine_file_is_compared_with_golden_outputs() {
    let dir = TempDir::new().unwrap();
    let (input, exact) = golden(dir.path(), 0.0);
    let engine = dir.path().join("m.engine");
    kiln_ok(&["build", &mnist(), "-o", path_arg(&engine), "--backend", "cpu"]);
    let stdout = kiln_ok(&["compare", path_arg(&engine), "--inputs", &input, "--load-outputs", &exact]);
    assert!(stdout.contains("result: PASS"), "{stdout}");
    kiln_fails(&["compare", path_arg(&engine), "--inputs", &input], "compare it with --load-outputs");
    kiln_fails(&["compare", path_arg(&engine), "--load-outputs", &exact, "--backends", "wgpu"], "it cannot run on `wgpu`");
    kiln_fails(&["compare", path_arg(&engine), "--load-outputs", &exact, "--mark-all"], "--mark-all needs the network");
}

#[test]
fn each_backends_outputs_and_intermediates_are_saved() {
    let dir = TempDir::new().unwrap();
    let (outputs, intermediates) = (dir.path().join("outputs"), dir.path().join("intermediates"));
    kiln_ok(&[
        "compare",
        &mnist(),
        "--backends",
        "cpu,cpu",
        "--mark-all",
        "--save-outputs",
        path_arg(&outputs),
        "--save-intermediates",
        path_arg(&intermediates),
    ]);
    for file in ["cpu.npz", "cpu-2.npz"] {
        let saved = read_f32_arrays(&outputs.join(file));
        assert_eq!(saved.iter().map(|(n, ..)| n.as_str()).collect::<Vec<_>>(), ["prob"], "{file}");
        let all = read_f32_arrays(&intermediates.join(file));
        assert!(all.len() > 5 && all.iter().any(|(n, ..)| n == "prob"), "{file}: {:?}", all.iter().map(|(n, ..)| n).collect::<Vec<_>>());
    }
    let out = kiln(&["compare", &mnist(), "--backends", "cpu,cpu", "--save-intermediates", path_arg(&intermediates)]);
    assert_eq!(out.status.code(), Some(2), "--save-intermediates needs --mark-all: {}", text(&out.stderr));
}

//! The model zoo's regression fixtures (tests/data/zoo, made by its export.py): small models
//! with the op patterns of real PyTorch exports, from both exporters, static and dynamic,
//! run through `kiln run` from a working directory other than the model's folder (dynamo
//! exports keep their weights as external data beside the model) on cpu and, where an
//! adapter exists, wgpu; outputs must match PyTorch's.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use tempfile::TempDir;

/// Relative L2 error allowed against PyTorch's fp32 outputs (the zoo's fp32 criterion).
const REL_L2: f64 = 1e-4;

fn fixtures() -> Vec<PathBuf> {
    let root = repo_path("tests/data/zoo");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("tests/data/zoo exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.join("model.onnx").is_file())
        .collect();
    found.sort();
    assert!(found.len() >= 3, "expected the zoo fixtures in {}", root.display());
    found
}

fn relative_l2(got: &[f32], want: &[f32]) -> f64 {
    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    for (&g, &w) in got.iter().zip(want) {
        diff += (f64::from(g) - f64::from(w)).powi(2);
        norm += f64::from(w).powi(2);
    }
    (diff / norm.max(f64::MIN_POSITIVE)).sqrt()
}

/// Runs `kiln run MODEL` from `cwd` and checks every output against expected.npz.
fn check(fixture: &Path, model_arg: &str, cwd: &Path, backend: &str) {
    let out_dir = TempDir::new().unwrap();
    let outputs = out_dir.path().join("out.npz");
    let inputs = fixture.join("inputs.npz");
    let run = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .current_dir(cwd)
        .args(["run", model_arg, "--backend", backend, "--inputs", path_arg(&inputs), "--save-outputs", path_arg(&outputs)])
        .output()
        .expect("start kiln");
    let name = fixture.file_name().unwrap().to_string_lossy();
    assert!(run.status.success(), "{name} on {backend} (cwd {}): {}", cwd.display(), text(&run.stderr));
    let got = read_f32_arrays(&outputs);
    let expected = read_f32_arrays(&fixture.join("expected.npz"));
    assert!(!expected.is_empty());
    for (out_name, shape, want) in &expected {
        let (_, got_shape, values) = got
            .iter()
            .find(|(n, _, _)| n == out_name)
            .unwrap_or_else(|| panic!("{name} on {backend}: output `{out_name}` missing"));
        assert_eq!(got_shape, shape, "{name}/{out_name} on {backend}: shape");
        let err = relative_l2(values, want);
        assert!(err <= REL_L2, "{name}/{out_name} on {backend}: relative L2 error {err:.3e} > {REL_L2:e}");
    }
}

#[test]
fn zoo_fixtures_match_pytorch_on_cpu_from_another_directory() {
    let elsewhere = TempDir::new().unwrap();
    for fixture in fixtures() {
        let model = fixture.join("model.onnx");
        check(&fixture, path_arg(&model), elsewhere.path(), "cpu");
    }
}

#[test]
fn external_data_resolves_against_the_model_folder_for_relative_paths() {
    // `kiln run vit_dynamo_dynamic/model.onnx` from tests/data/zoo: the weights are in
    // `vit_dynamo_dynamic/model.onnx.data`, not in the working directory.
    let root = repo_path("tests/data/zoo");
    let fixture = root.join("vit_dynamo_dynamic");
    assert!(fixture.join("model.onnx.data").is_file(), "the dynamo fixture keeps external data");
    check(&fixture, "vit_dynamo_dynamic/model.onnx", &root, "cpu");
    // `kiln build` and `kiln compare` read external data the same way.
    let dir = TempDir::new().unwrap();
    let engine = dir.path().join("vit.engine");
    let build = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .current_dir(&root)
        .args(["build", "vit_dynamo_dynamic/model.onnx", "-o", path_arg(&engine), "--backend", "cpu"])
        .args(["--min-shapes", "input:1x3x32x32", "--opt-shapes", "input:2x3x32x32", "--max-shapes", "input:4x3x32x32"])
        .output()
        .expect("start kiln");
    assert!(build.status.success(), "build: {}", text(&build.stderr));
    check(&fixture, path_arg(&engine), dir.path(), "cpu");
    let compare = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .current_dir(&root)
        .args(["compare", "vit_dynamo_dynamic/model.onnx", "--backends", "cpu,cpu", "--shapes", "input:2x3x32x32"])
        .output()
        .expect("start kiln");
    assert!(compare.status.success(), "compare: {}", text(&compare.stderr));
}

#[test]
fn zoo_fixtures_match_pytorch_on_wgpu() {
    if !kiln_ok(&["devices"]).contains("wgpu: available") {
        eprintln!("SKIPPED: no wgpu adapter/driver, the zoo fixtures ran on cpu only");
        return;
    }
    let elsewhere = TempDir::new().unwrap();
    for fixture in fixtures() {
        let model = fixture.join("model.onnx");
        check(&fixture, path_arg(&model), elsewhere.path(), "wgpu");
    }
}

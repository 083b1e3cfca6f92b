//! `kiln build --profiling-verbosity` / `--flag` and `kiln inspect --verbosity`: the engine
//! inspector (seed §6.12) and the build summary from the command line.

mod common;

use common::*;
use std::path::PathBuf;
use tempfile::TempDir;

fn build(dir: &TempDir, extra: &[&str]) -> (PathBuf, String) {
    let engine = dir.path().join("mnist.engine");
    let model = repo_path("examples/models/mnist.onnx");
    let mut args = vec!["build", model.to_str().unwrap(), "-o", path_arg(&engine), "--backend", "cpu"];
    args.extend_from_slice(extra);
    let stdout = kiln_ok(&args);
    (engine, stdout)
}

#[test]
fn build_prints_a_summary_with_layer_counts_and_phase_times() {
    let dir = TempDir::new().unwrap();
    let (_, stdout) = build(&dir, &["--flag", "fp16", "--no-tf32"]);
    assert!(stdout.contains("flags:    FP16\n"), "{stdout}");
    assert!(stdout.contains(" before passes, ") && stdout.contains(" in the engine"), "{stdout}");
    for phase in ["validate:", "passes:", "lowering:", "support check:", "serialize:"] {
        assert!(stdout.contains(phase), "`{phase}` missing from:\n{stdout}");
    }
    let dir = TempDir::new().unwrap();
    let model = repo_path("examples/models/mnist.onnx");
    let engine = dir.path().join("x.engine");
    kiln_fails(&["build", model.to_str().unwrap(), "-o", path_arg(&engine), "--flag", "fp17"], "unknown builder flag `fp17`");
}

#[test]
fn inspect_prints_detailed_json_for_an_engine_built_detailed() {
    let dir = TempDir::new().unwrap();
    let (engine, _) = build(&dir, &["--profiling-verbosity", "detailed"]);
    let text = kiln_ok(&["inspect", path_arg(&engine), "--verbosity", "detailed", "--format", "json"]);
    let json: serde_json::Value = serde_json::from_str(&text).expect("valid json");
    assert_eq!(json["Bindings"], serde_json::json!(["data", "prob"]));
    let layers = json["Layers"].as_array().expect("Layers");
    assert!(!layers.is_empty());
    for layer in layers {
        for key in ["Name", "LayerType", "Inputs", "Outputs", "ParameterType", "TacticName", "TacticValue"] {
            assert!(layer.get(key).is_some(), "`{key}` missing from {layer}");
        }
    }
    let conv = layers.iter().find(|l| l["LayerType"] == "Convolution").expect("a convolution");
    assert_eq!(conv["Inputs"][0]["Dimensions"], serde_json::json!([1, 1, 28, 28]));
    assert_eq!(conv["Inputs"][0]["Format/Datatype"], "Row major linear FP32 format");
    assert!(conv["Weights"]["Count"].as_u64().unwrap() > 0);

    let summary: serde_json::Value = serde_json::from_str(&kiln_ok(&["inspect", path_arg(&engine), "--format", "json"])).unwrap();
    assert_eq!(summary["profiling_verbosity"], "detailed");
    assert_eq!(summary["builder_flags"], serde_json::json!(["TF32"]));

    let names = kiln_ok(&["inspect", path_arg(&engine), "--verbosity", "layer-names-only", "--format", "json"]);
    let names: serde_json::Value = serde_json::from_str(&names).unwrap();
    assert_eq!(names["Layers"].as_array().unwrap().len(), layers.len());
    assert!(names["Layers"][0].is_string());
}

#[test]
fn inspect_caps_the_verbosity_at_the_engines() {
    let dir = TempDir::new().unwrap();
    let (engine, _) = build(&dir, &[]);
    let text = kiln_ok(&["inspect", path_arg(&engine), "--verbosity", "detailed"]);
    assert!(text.ends_with("Bindings: data, prob\n"), "{text}");
    assert!(!text.contains("LayerType"), "a layer-names-only engine shows names only: {text}");
}

#[test]
fn nvidia_tf32_override_0_at_build_time_clears_tf32() {
    let dir = TempDir::new().unwrap();
    let engine = dir.path().join("mnist.engine");
    let model = repo_path("examples/models/mnist.onnx");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["build", model.to_str().unwrap(), "-o", path_arg(&engine), "--backend", "cpu"])
        .env("NVIDIA_TF32_OVERRIDE", "0")
        .output()
        .expect("spawn kiln");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("flags:    (none)\n"));
    let (_, stdout) = build(&dir, &[]);
    assert!(stdout.contains("flags:    TF32\n"), "without the variable TF32 stays on: {stdout}");
}

//! The log on stderr: `-q`, `-v`/`-vv`, `RUST_LOG` and `--log-format json`, and the warning
//! for a precision flag the backend cannot honour.

mod common;

use common::*;
use tempfile::TempDir;

fn mnist() -> String {
    repo_path("examples/models/mnist.onnx").to_str().unwrap().to_string()
}

/// `kiln build` of MNIST for cpu with `extra` flags and environment; (stdout, stderr).
fn build(extra: &[&str], env: &[(&str, &str)]) -> (String, String) {
    let dir = TempDir::new().unwrap();
    let engine = dir.path().join("m.engine");
    let mnist = mnist();
    let mut args = vec!["build", mnist.as_str(), "-o", path_arg(&engine), "--backend", "cpu"];
    args.extend_from_slice(extra);
    let out = kiln_env(&args, env);
    assert!(out.status.success(), "kiln {args:?}: {}", text(&out.stderr));
    assert!(engine.exists());
    (text(&out.stdout), text(&out.stderr))
}

#[test]
fn rust_log_debug_shows_fusions_and_tactic_decisions() {
    let (_, stderr) = build(&[], &[("RUST_LOG", "kiln=debug")]);
    // MNIST's MatMul, bias Add and Relu become one layer; its tactic is timed.
    assert!(stderr.contains("debug kiln::passes: epilogue-fusion: made `MatMul5 + Add6 + Relu7`"), "{stderr}");
    assert!(stderr.contains("debug kiln::tactics: layer `Conv0`: cpu/"), "{stderr}");
    assert!(stderr.contains("(timed): cpu/conv_"), "{stderr}");
    assert!(stderr.contains("info kiln::memory: memory plan, profile 0:"), "{stderr}");
    assert!(stderr.contains("info kiln::builder: passes:"), "{stderr}");
}

/// The Q/DQ passes the builder runs before the precision pass are logged as the pipeline's are:
/// on a torchvision ViT's Q/DQ export, the attention's scale folded from Q's shape and the
/// split moved onto the levels.
#[test]
fn the_passes_before_the_precision_pass_are_logged() {
    let dir = TempDir::new().unwrap();
    let engine = dir.path().join("vit.engine");
    let model = repo_path("engine/onnx/tests/qdq_models/tiny_vit_legacy_s8/model.onnx");
    let args = ["build", model.to_str().unwrap(), "-o", path_arg(&engine), "--backend", "cpu", "-vv"];
    let out = kiln_env(&args, &[]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("debug kiln::passes: shape-value-folding: "), "{stderr}");
    let attention = "/encoder/layers/encoder_layer_0/self_attention";
    let moved = format!("debug kiln::passes: qdq-propagation: made `{attention}/Reshape_3 (after {attention}/Mul_1) (integer)` [Shuffle]");
    assert!(stderr.contains(&moved), "{stderr}");
    assert!(stderr.contains("debug kiln::passes: quantized-fusion: made `"), "{stderr}");
}

#[test]
fn vv_is_debug_and_v_is_info_and_the_default_is_warnings_only() {
    let (_, debug) = build(&["-vv"], &[]);
    assert!(debug.contains("debug kiln::tactics:"), "{debug}");
    let (stdout, info) = build(&["-v"], &[]);
    assert!(info.contains("info kiln::builder: layer precisions: "), "{info}");
    assert!(!info.contains("debug "), "{info}");
    assert!(stdout.contains("layer `Conv0` [Convolution]: conv_"), "-v lists every layer's tactic: {stdout}");
    let (_, quiet) = build(&[], &[]);
    assert_eq!(quiet, "", "no log lines by default");
}

#[test]
fn flags_win_over_rust_log() {
    let (_, stderr) = build(&["-q"], &[("RUST_LOG", "kiln=debug")]);
    assert_eq!(stderr, "");
}

#[test]
fn quiet_prints_nothing_but_errors() {
    // fp16 on cpu would warn; -q silences the warning and the build summary.
    let (stdout, stderr) = build(&["-q", "--flag", "fp16"], &[]);
    assert_eq!((stdout.as_str(), stderr.as_str()), ("", ""));
    let line = kiln_fails(&["-q", "build", "missing.onnx", "-o", "x.engine"], "missing.onnx");
    assert!(line.starts_with("error: cannot read model file"), "{line}");
}

#[test]
fn a_precision_flag_the_backend_cannot_honour_is_a_warning_with_the_layer_counts() {
    let (stdout, stderr) = build(&["--flag", "fp16"], &[]);
    let warning = stderr.lines().find(|l| l.starts_with("warning: builder flag FP16")).unwrap_or_else(|| panic!("{stderr}"));
    assert!(warning.contains("backend `cpu` runs none of the network's layers in f16"), "{warning}");
    assert!(warning.contains("layer precisions: ") && warning.contains(" f32"), "{warning}");
    assert!(stdout.contains("flags:    FP16|TF32"), "{stdout}");
}

#[test]
fn json_log_lines_are_one_object_per_event() {
    let (_, stderr) = build(&["-vv", "--log-format", "json"], &[]);
    let events: Vec<serde_json::Value> =
        stderr.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    assert!(events.iter().any(|e| e["level"] == "DEBUG" && e["target"] == "kiln::tactics"), "{stderr}");
    assert!(events.iter().all(|e| e["fields"]["message"].is_string()), "{stderr}");
}

#[test]
fn a_malformed_rust_log_is_an_error_naming_it_and_q_with_v_is_a_usage_error() {
    let out = kiln_env(&["devices"], &[("RUST_LOG", "kiln=loudest")]);
    let line = one_error_line(&out, "RUST_LOG=kiln=loudest");
    assert!(line.contains("RUST_LOG=`kiln=loudest` is not a log filter"), "{line}");
    let out = kiln(&["-q", "-v", "devices"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("cannot be used with"), "{}", text(&out.stderr));
}

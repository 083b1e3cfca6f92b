//! `kiln refit`: an engine built with `--flag refit` takes new weights from an ONNX model or
//! an npz; a `--flag strip_weights` engine refuses to run until refitted; every mistake is
//! one clear error line.

mod common;

use common::conv_bn::conv_bn_model;
use common::*;
use std::path::{Path, PathBuf};
use tempfile::TempDir;

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// `y` of one run on fixed inputs.
fn output(dir: &Path, model: &Path, inputs: &Path) -> Vec<f32> {
    let out = dir.join("out.npz");
    kiln_ok(&["run", path_arg(model), "--backend", "cpu", "--inputs", path_arg(inputs), "--save-outputs", path_arg(&out)]);
    read_f32_arrays(&out).remove(0).2
}

fn setup() -> (TempDir, PathBuf, PathBuf, PathBuf) {
    let dir = TempDir::new().unwrap();
    let (a, b) = (write(dir.path(), "a.onnx", &conv_bn_model(0.0)), write(dir.path(), "b.onnx", &conv_bn_model(3.0)));
    let inputs = dir.path().join("x.npz");
    write_npz_array(&inputs, "x", &[2, 3, 6, 6], &(0..216).map(|i| (i as f32 * 0.21).cos()).collect::<Vec<f32>>());
    (dir, a, b, inputs)
}

#[test]
fn an_engine_refitted_from_another_onnx_model_gives_that_models_outputs() {
    let (dir, a, b, inputs) = setup();
    let engine = dir.path().join("a.engine");
    kiln_ok(&["build", path_arg(&a), "--backend", "cpu", "--flag", "refit", "-o", path_arg(&engine)]);
    let inspected = kiln_ok(&["inspect", path_arg(&engine)]);
    assert!(inspected.contains("refit:") && inspected.contains("refittable weights"), "{inspected}");
    let refitted = dir.path().join("b.engine");
    let out = kiln(&["-v", "refit", path_arg(&engine), "--weights", path_arg(&b), "-o", path_arg(&refitted)]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("refittable weights from") && stdout.contains("written to"), "{stdout}");
    // The log says what the refit did.
    assert!(stderr.contains("kiln::refit: refit: ") && stderr.contains("weights blobs of the engine changed (replay on `cpu`"), "{stderr}");
    assert_eq!(kiln_ok(&["refit", path_arg(&engine), "--weights", path_arg(&b), "-o", path_arg(&refitted), "-q"]), "", "-q prints nothing");
    let (before, after, want) = (output(dir.path(), &engine, &inputs), output(dir.path(), &refitted, &inputs), output(dir.path(), &b, &inputs));
    assert_ne!(before, want);
    assert_close(&after, &want, 1e-6);
}

#[test]
fn npz_weights_replace_the_weights_they_name() {
    let (dir, a, _, inputs) = setup();
    let engine = dir.path().join("a.engine");
    kiln_ok(&["build", path_arg(&a), "--backend", "cpu", "--flag", "refit", "-o", path_arg(&engine)]);
    let before = output(dir.path(), &engine, &inputs);
    // y = f · Wᵀ + bias: a new bias moves every output by its change.
    let bias = [1.0f32, 2.0, 3.0, 4.0];
    let weights = dir.path().join("w.npz");
    write_npz_array(&weights, "fc.bias", &[4], &bias);
    let refitted = dir.path().join("r.engine");
    kiln_ok(&["refit", path_arg(&engine), "--weights", path_arg(&weights), "-o", path_arg(&refitted)]);
    let after = output(dir.path(), &refitted, &inputs);
    let old_bias: Vec<f32> = (0..4).map(|i| ((i as f32) * 2.1).sin() * 0.5).collect();
    for (i, (a, b)) in after.iter().zip(&before).enumerate() {
        let expected = b - old_bias[i % 4] + bias[i % 4];
        assert!((a - expected).abs() < 1e-5, "element {i}: {a} vs {expected}");
    }

    write_npz_array(&weights, "fc.bias", &[5], &[0f32; 5]);
    kiln_fails(&["refit", path_arg(&engine), "--weights", path_arg(&weights), "-o", path_arg(&refitted)], "weights `fc.bias` are f32[4]; the new ones are f32[5]");
    write_npz_array(&weights, "fc.bias2", &[4], &bias);
    kiln_fails(&["refit", path_arg(&engine), "--weights", path_arg(&weights), "-o", path_arg(&refitted)], "`fc.bias2` is not a refittable weight");
}

#[test]
fn a_weight_stripped_engine_runs_once_refitted_from_its_model() {
    let (dir, a, _, inputs) = setup();
    let (full, stripped) = (dir.path().join("full.engine"), dir.path().join("stripped.engine"));
    kiln_ok(&["build", path_arg(&a), "--backend", "cpu", "--flag", "refit", "-o", path_arg(&full)]);
    kiln_ok(&["build", path_arg(&a), "--backend", "cpu", "--flag", "refit", "--flag", "strip_weights", "-o", path_arg(&stripped)]);
    let inspected = kiln_ok(&["inspect", path_arg(&stripped)]);
    assert!(inspected.contains("stripped: `kiln refit` gives them"), "{inspected}");
    kiln_fails(&["run", path_arg(&stripped)], "built with STRIP_WEIGHTS and holds no weights yet");
    // An npz without the stripped weights cannot complete it.
    let weights = dir.path().join("w.npz");
    write_npz_array(&weights, "fc.bias", &[4], &[0f32; 4]);
    let refitted = dir.path().join("refitted.engine");
    kiln_fails(&["refit", path_arg(&stripped), "--weights", path_arg(&weights), "-o", path_arg(&refitted)], "lacks weights the stripped engine needs: conv.weight");
    kiln_ok(&["refit", path_arg(&stripped), "--weights", path_arg(&a), "-o", path_arg(&refitted)]);
    assert_close(&output(dir.path(), &refitted, &inputs), &output(dir.path(), &full, &inputs), 1e-6);
}

#[test]
fn refit_mistakes_are_clear_errors() {
    let (dir, a, _, _) = setup();
    let plain = dir.path().join("plain.engine");
    kiln_ok(&["build", path_arg(&a), "--backend", "cpu", "-o", path_arg(&plain)]);
    let out = path_arg(&dir.path().join("o.engine")).to_string();
    kiln_fails(&["refit", path_arg(&plain), "--weights", path_arg(&a), "-o", &out], "built without the REFIT builder flag");
    kiln_fails(&["refit", path_arg(&a), "--weights", path_arg(&a), "-o", &out], "is not a kiln engine file");
    kiln_fails(&["build", path_arg(&a), "--flag", "strip_weights", "-o", &out], "STRIP_WEIGHTS needs REFIT");
    let refittable = dir.path().join("r.engine");
    kiln_ok(&["build", path_arg(&a), "--backend", "cpu", "--flag", "refit", "-o", path_arg(&refittable)]);
    let other = repo_path("examples/models/mnist.onnx");
    kiln_fails(&["refit", path_arg(&refittable), "--weights", path_arg(&other), "-o", &out], "has none of the engine's");
}

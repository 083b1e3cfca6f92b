//! No command writes over one of its own inputs, however the output names it (the same
//! path, a hard link, a symlink), and a failed write is one error line.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use tempfile::TempDir;

/// A copy of the MNIST example model and an inputs file in a fresh folder.
fn setup() -> (TempDir, PathBuf, PathBuf) {
    let dir = TempDir::new().unwrap();
    let model = dir.path().join("m.onnx");
    std::fs::copy(repo_path("examples/models/mnist.onnx"), &model).unwrap();
    let inputs = dir.path().join("in.npz");
    std::fs::copy(repo_path("examples/models/mnist_expected.npz"), &inputs).unwrap();
    (dir, model, inputs)
}

/// Runs kiln expecting the refusal, and checks the file is unchanged.
fn refused(args: &[&str], input: &Path, keyword: &str) {
    let before = std::fs::read(input).unwrap();
    let line = kiln_fails(args, keyword);
    assert!(line.contains("kiln never writes over its inputs"), "{line}");
    assert_eq!(std::fs::read(input).unwrap(), before, "kiln {args:?} changed `{}`", input.display());
}

#[test]
fn build_refuses_to_write_the_engine_over_the_model_by_any_name() {
    let (dir, model, _) = setup();
    let hard = dir.path().join("hard.onnx");
    std::fs::hard_link(&model, &hard).unwrap();
    let soft = dir.path().join("soft.onnx");
    std::os::unix::fs::symlink(&model, &soft).unwrap();
    let dotted = dir.path().join(".").join("m.onnx");
    for output in [&model, &hard, &soft, &dotted] {
        refused(
            &["build", path_arg(&model), "-o", path_arg(output), "--backend", "cpu"],
            &model,
            "is the same file as the model",
        );
    }
}

#[test]
fn build_refuses_a_timing_cache_that_is_the_engine_or_the_model() {
    let (dir, model, _) = setup();
    let cache = dir.path().join("cache.bin");
    // Not there yet: the same name is still the same file.
    kiln_fails(
        &["build", path_arg(&model), "-o", path_arg(&cache), "--timing-cache", path_arg(&cache), "--backend", "cpu"],
        "--output `",
    );
    assert!(!cache.exists());
    refused(
        &["build", path_arg(&model), "-o", path_arg(&dir.path().join("e")), "--timing-cache", path_arg(&model)],
        &model,
        "--timing-cache",
    );
}

#[test]
fn run_compare_and_bench_refuse_outputs_over_their_inputs() {
    let (dir, model, inputs) = setup();
    let (m, i) = (path_arg(&model), path_arg(&inputs));
    refused(&["run", m, "--save-outputs", m], &model, "--save-outputs");
    refused(&["run", m, "--inputs", i, "--save-outputs", i], &inputs, "the same file as --inputs");
    let link = dir.path().join("link.npz");
    std::fs::hard_link(&inputs, &link).unwrap();
    refused(&["run", m, "--inputs", i, "--save-outputs", path_arg(&link)], &inputs, "--save-outputs");
    refused(&["compare", m, "--backends", "cpu,cpu", "--json", m], &model, "--json");
    refused(&["bench", m, "--json", m], &model, "--json");
    refused(&["bench", m, "--inputs", i, "--export-profile", i], &inputs, "--export-profile");
    let twice = dir.path().join("out.json");
    kiln_fails(&["bench", m, "--json", path_arg(&twice), "--export-profile", path_arg(&twice)], "another output");
}

#[test]
fn run_refuses_to_save_outputs_over_the_engine_it_runs() {
    let (dir, model, _) = setup();
    let engine = dir.path().join("m.engine");
    kiln_ok(&["build", path_arg(&model), "-o", path_arg(&engine), "--backend", "cpu"]);
    refused(&["run", path_arg(&engine), "--save-outputs", path_arg(&engine)], &engine, "the same file as the model");
}

#[test]
fn cache_merge_refuses_an_output_that_is_an_input() {
    let (dir, model, _) = setup();
    let cache = dir.path().join("c.bin");
    kiln_ok(&[
        "build",
        path_arg(&model),
        "-o",
        path_arg(&dir.path().join("e")),
        "--backend",
        "cpu",
        "--timing-cache",
        path_arg(&cache),
    ]);
    let c = path_arg(&cache);
    refused(&["cache", "merge", c, c, "-o", c], &cache, "is the same file as cache A");
}

#[test]
fn a_plugin_library_is_an_input_too() {
    let (dir, model, _) = setup();
    let lib = kiln_plugins::examples::build_clip_example("clip_outputs", dir.path(), &[]).unwrap();
    refused(
        &["build", path_arg(&model), "-o", path_arg(&lib), "--plugins", path_arg(&lib)],
        &lib,
        "the plugin library",
    );
}

#[test]
fn saving_outputs_to_a_full_device_is_one_error_line() {
    let (_dir, model, _) = setup();
    let line =
        kiln_fails(&["run", path_arg(&model), "--save-outputs", "/dev/full"], "cannot write npz file `/dev/full`");
    assert!(line.contains("No space left on device"), "{line}");
}

#[test]
fn a_failed_write_keeps_the_old_file() {
    let (dir, model, _) = setup();
    // The output's folder is a file: nothing can be created there.
    let blocker = dir.path().join("blocker");
    std::fs::write(&blocker, b"keep").unwrap();
    kiln_fails(&["run", path_arg(&model), "--save-outputs", path_arg(&blocker.join("o.npz"))], "cannot write npz file");
    assert_eq!(std::fs::read(&blocker).unwrap(), b"keep");
    // A successful write replaces the file and leaves no temporary beside it.
    let out = dir.path().join("o.npz");
    std::fs::write(&out, b"old").unwrap();
    kiln_ok(&["run", path_arg(&model), "--save-outputs", path_arg(&out)]);
    assert_eq!(read_f32_arrays(&out).len(), 1);
    let names: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(!names.iter().any(|n| n.ends_with(".tmp")), "{names:?}");
}

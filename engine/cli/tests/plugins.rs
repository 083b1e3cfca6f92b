//! Plugins through the CLI: `--plugins` and KILN_PLUGIN_PATH on run/build, `kiln plugins
//! list`, a custom-domain ONNX model, an engine that records its plugins, bad libraries.

mod common;

use common::*;
use kiln_plugins::examples;
use std::path::PathBuf;
use std::sync::OnceLock;
use tempfile::TempDir;

fn scratch() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

/// The two example plugin libraries (C and Rust), built once.
fn libraries() -> &'static (PathBuf, PathBuf) {
    static LIBS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    LIBS.get_or_init(|| {
        let clip = examples::build_clip_example("clip_cli", &scratch(), &[]).unwrap();
        let swish = examples::build_swish_example(env!("CARGO"), &scratch().join("swish-build")).unwrap();
        (clip, swish)
    })
}

fn model() -> String {
    repo_path("plugins/examples/models/clip_swish.onnx").to_str().unwrap().to_string()
}

fn expected(x: &[f32]) -> Vec<f32> {
    x.iter().map(|&v| v.clamp(-1.0, 2.0)).map(|v| v / (1.0 + (-1.5 * v).exp())).collect()
}

#[test]
fn plugins_list_shows_what_the_libraries_register() {
    let (clip, swish) = libraries();
    let stdout = kiln_ok(&["plugins", "list", "--plugins", path_arg(clip), "--plugins", path_arg(swish)]);
    assert!(stdout.contains("kiln.examples::ClipC@1  (from "), "{stdout}");
    assert!(stdout.contains("kiln.examples::Swish@1  (from "), "{stdout}");
    assert!(stdout.contains("field lo: f32") && stdout.contains("field beta: f32"), "{stdout}");
    assert!(stdout.contains("2 libraries loaded"), "{stdout}");
    let none = kiln_ok(&["plugins", "list"]);
    assert!(none.contains("no plugins loaded"), "{none}");
}

#[test]
fn a_custom_domain_model_runs_and_builds_with_plugins_from_flags_and_the_path_variable() {
    let (clip, swish) = libraries();
    let dir = TempDir::new().unwrap();
    let (input, output) = (dir.path().join("in.npz"), dir.path().join("out.npz"));
    let x = [-3.0f32, -0.5, 0.25, 1.0, 2.5, 9.0];
    write_npz_array(&input, "x", &[2, 3], &x);
    let args = ["run", &model(), "--inputs", path_arg(&input), "--save-outputs", path_arg(&output)];
    kiln_ok(&[&args[..], &["--plugins", path_arg(clip), "--plugins", path_arg(swish)]].concat());
    assert_eq!(read_f32_arrays(&output)[0].2, expected(&x));
    // The same through KILN_PLUGIN_PATH, and into an engine that needs both plugins.
    let engine = dir.path().join("m.engine");
    let path = std::env::join_paths([clip, swish]).unwrap();
    let built = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["build", &model(), "-o", path_arg(&engine), "--min-shapes", "x:1x3", "--max-shapes", "x:4x3"])
        .env("KILN_PLUGIN_PATH", &path)
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", text(&built.stderr));
    let err =
        kiln_fails(&["run", path_arg(&engine), "--inputs", path_arg(&input)], "needs plugins that are not loaded");
    assert!(err.contains("kiln.examples::ClipC@1") && err.contains("kiln.examples::Swish@1"), "{err}");
    let ran = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["run", path_arg(&engine), "--inputs", path_arg(&input), "--save-outputs", path_arg(&output)])
        .env("KILN_PLUGIN_PATH", &path)
        .output()
        .unwrap();
    assert!(ran.status.success(), "{}", text(&ran.stderr));
    assert_eq!(read_f32_arrays(&output)[0].2, expected(&x));
}

#[test]
fn bad_libraries_are_clear_errors() {
    let dir = TempDir::new().unwrap();
    let source = dir.path().join("empty.c");
    std::fs::write(&source, "int kiln_not_a_plugin(void) { return 0; }\n").unwrap();
    let lib = examples::build_c_plugin("empty", &source, dir.path(), &[]).unwrap();
    kiln_fails(&["plugins", "list", "--plugins", path_arg(&lib)], "does not export `kiln_plugin_library_v1`");
    let wrong = examples::build_clip_example("clip_v7", dir.path(), &["-DKILN_TEST_ABI_VERSION=7"]).unwrap();
    kiln_fails(&["run", &model(), "--plugins", path_arg(&wrong)], "plugin ABI version 7");
    kiln_fails(&["run", &model()], "ClipC");
}

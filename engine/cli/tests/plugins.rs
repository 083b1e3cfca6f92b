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
    let json = kiln_ok(&["plugins", "list", "--plugins", path_arg(clip), "--json", "-"]);
    let listed: serde_json::Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
    assert_eq!(listed["plugins"][0]["plugin"], "kiln.examples::ClipC@1", "{listed}");
    assert_eq!(listed["plugins"][0]["fields"][0], serde_json::json!({ "name": "lo", "type": "f32" }), "{listed}");
    assert_eq!(listed["libraries"].as_array().map(Vec::len), Some(1), "{listed}");
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
    // The entry point's name on data: calling it would crash.
    std::fs::write(&source, "const char kiln_plugin_library_v1[64] = {1};\n").unwrap();
    let data = examples::build_c_plugin("data_entry", &source, dir.path(), &[]).unwrap();
    kiln_fails(&["plugins", "list", "--plugins", path_arg(&data)], "exports `kiln_plugin_library_v1` as data");
    let wrong = examples::build_clip_example("clip_v7", dir.path(), &["-DKILN_TEST_ABI_VERSION=7"]).unwrap();
    kiln_fails(&["run", &model(), "--plugins", path_arg(&wrong)], "plugin ABI version 7");
    kiln_fails(&["run", &model()], "ClipC");
}

/// Runs kiln in `dir` with `KILN_PLUGIN_PATH` set as given (or unset).
fn kiln_in(dir: &std::path::Path, args: &[&str], plugin_path: Option<&std::path::Path>) -> std::process::Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"));
    command.args(args).current_dir(dir).env_remove("KILN_PLUGIN_PATH");
    if let Some(path) = plugin_path {
        command.env("KILN_PLUGIN_PATH", path);
    }
    command.output().unwrap()
}

#[test]
fn a_truncated_library_is_refused_before_it_is_loaded() {
    let (clip, _) = libraries();
    let dir = TempDir::new().unwrap();
    let whole = std::fs::read(clip).unwrap();
    // Cut inside the contents (a segment past the end) and inside the headers.
    for keep in [whole.len() / 2, 100, 10] {
        let cut = dir.path().join(format!("libcut{keep}.so"));
        std::fs::write(&cut, &whole[..keep]).unwrap();
        let out = kiln_in(dir.path(), &["plugins", "list", "--plugins", path_arg(&cut)], None);
        let line = one_error_line(&out, &format!("--plugins with {keep} bytes"));
        assert!(line.contains("is truncated") || line.contains("too short"), "{line}");
        assert!(line.contains(&format!("libcut{keep}.so")), "{line}");
        let out = kiln_in(dir.path(), &["plugins", "list"], Some(&cut));
        let line = one_error_line(&out, &format!("KILN_PLUGIN_PATH with {keep} bytes"));
        assert!(line.contains("KILN_PLUGIN_PATH") && line.contains(&format!("libcut{keep}.so")), "{line}");
    }
}

#[test]
fn a_bare_file_name_is_the_file_in_the_current_folder_only() {
    let (clip, _) = libraries();
    let dir = TempDir::new().unwrap();
    std::fs::copy(clip, dir.path().join("libclip_local.so")).unwrap();
    let out = kiln_in(dir.path(), &["plugins", "list", "--plugins", "libclip_local.so"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("kiln.examples::ClipC@1  (from ./libclip_local.so)"), "{}", text(&out.stdout));
    // A system library's name is not looked up in the system's folders.
    let out = kiln_in(dir.path(), &["plugins", "list", "--plugins", "libm.so.6"], None);
    let line = one_error_line(&out, "--plugins libm.so.6");
    assert!(line.contains("`./libm.so.6`") && line.contains("cannot be opened"), "{line}");
}

/// `clip_swish.onnx` with its Swish node asked to panic when it runs.
fn panicking_model(dir: &std::path::Path) -> PathBuf {
    use kiln_onnx::proto::{attribute_proto::AttributeType, AttributeProto, ModelProto};
    use prost::Message;
    let mut model = ModelProto::decode(std::fs::read(model()).unwrap().as_slice()).unwrap();
    let graph = model.graph.as_mut().unwrap();
    let swish = graph.node.iter_mut().find(|n| n.op_type.as_deref() == Some("Swish")).unwrap();
    swish.attribute.push(AttributeProto {
        name: Some("panic_on_enqueue".into()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(1),
        ..Default::default()
    });
    let path = dir.join("panics.onnx");
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    path
}

#[test]
fn a_panicking_plugin_is_reported_once_as_the_error() {
    let (clip, swish) = libraries();
    let dir = TempDir::new().unwrap();
    let model = panicking_model(dir.path());
    let args = ["run", path_arg(&model), "--backend", "cpu", "--shapes", "x:1x3", "--plugins", path_arg(clip), "--plugins", path_arg(swish)];
    let out = kiln_in(dir.path(), &args, None);
    let line = one_error_line(&out, "a panicking plugin");
    assert!(line.contains("the plugin panicked: Swish was asked to panic"), "{line}");
}

fn wgpu_available() -> bool {
    let devices = kiln_ok(&["devices"]);
    if !devices.contains("wgpu: available") {
        eprintln!("SKIPPED: no wgpu adapter/driver (kiln devices: {})", devices.lines().find(|l| l.starts_with("wgpu")).unwrap_or(""));
        return false;
    }
    true
}

#[test]
fn the_custom_domain_model_runs_both_plugins_on_wgpu() {
    if !wgpu_available() {
        return;
    }
    let (clip, swish) = libraries();
    let dir = TempDir::new().unwrap();
    let (input, output) = (dir.path().join("in.npz"), dir.path().join("out.npz"));
    let x = [-3.0f32, -0.5, 0.25, 1.0, 2.5, 9.0, 0.0, -1.0, 1.5];
    write_npz_array(&input, "x", &[3, 3], &x);
    let stdout = kiln_ok(&[
        "run",
        &model(),
        "--backend",
        "wgpu",
        "--plugins",
        path_arg(clip),
        "--plugins",
        path_arg(swish),
        "--inputs",
        path_arg(&input),
        "--save-outputs",
        path_arg(&output),
    ]);
    assert!(stdout.contains("wgpu"), "{stdout}");
    assert_close(&read_f32_arrays(&output)[0].2, &expected(&x), 1e-5);
}

/// The wgpu backend as a backend library, built into this test's target folder.
fn wgpu_backend_library() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let target = scratch().parent().expect("CARGO_TARGET_TMPDIR is target/tmp").to_path_buf();
        examples::build_backend_plugin(env!("CARGO"), "wgpu", &target).unwrap()
    })
    .clone()
}

fn kiln_with_env(args: &[&str], env: &[(&str, &std::ffi::OsStr)]) -> std::process::Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"));
    command.args(args);
    for (k, v) in env {
        command.env(k, v);
    }
    command.output().unwrap()
}

#[test]
fn a_backend_library_on_the_plugin_path_is_listed_and_runs_when_preferred() {
    let lib = wgpu_backend_library();
    let path = lib.as_os_str();
    let listed = kiln_with_env(&["devices"], &[("KILN_PLUGIN_PATH", path)]);
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    let listed = text(&listed.stdout);
    assert!(listed.contains(&format!("from:               backend library {}", lib.display())), "{listed}");
    assert!(listed.contains("wgpu: not used: shadowed by the built-in `wgpu`"), "{listed}");
    assert!(listed.contains("cpu: available\n  from:               built in"), "{listed}");
    let prefer = [("KILN_PLUGIN_PATH", path), ("KILN_PREFER_PLUGIN_BACKENDS", std::ffi::OsStr::new("1"))];
    let preferred = text(&kiln_with_env(&["devices"], &prefer).stdout);
    if !preferred.contains("wgpu: available") {
        eprintln!("SKIPPED: running through the wgpu backend library (no wgpu adapter/driver)");
        return;
    }
    assert!(!preferred.contains("shadowed"), "{preferred}");
    let dir = TempDir::new().unwrap();
    let mnist = repo_path("examples/models/mnist.onnx");
    let (from_library, from_cpu) = (dir.path().join("lib.npz"), dir.path().join("cpu.npz"));
    let ran = kiln_with_env(
        &["run", path_arg(&mnist), "--backend", "wgpu", "--save-outputs", path_arg(&from_library)],
        &prefer,
    );
    assert!(ran.status.success(), "{}", text(&ran.stderr));
    kiln_ok(&["run", path_arg(&mnist), "--backend", "cpu", "--save-outputs", path_arg(&from_cpu)]);
    assert_close(&read_f32_arrays(&from_library)[0].2, &read_f32_arrays(&from_cpu)[0].2, 1e-3);
}

#[test]
fn a_backend_library_from_another_compiler_fails_every_command_clearly() {
    let dir = TempDir::new().unwrap();
    let source = dir.path().join("fake.c");
    let code = format!(
        "#include <stdint.h>\n#include <stddef.h>\n\
         typedef struct {{ uint32_t abi_version, struct_size; const char *name, *kiln_version, *rustc_version;\n\
           void* (*create)(void); }} desc;\n\
         static void* create(void) {{ return NULL; }}\n\
         static const desc D = {{ 1u, sizeof(desc), \"fake\", \"{}\", \"rustc 0.0.1 (elsewhere)\", create }};\n\
         const desc* kiln_backend_entry(void) {{ return &D; }}\n",
        env!("CARGO_PKG_VERSION")
    );
    std::fs::write(&source, code).unwrap();
    let lib = examples::build_c_plugin("kiln_backend_fake", &source, dir.path(), &[]).unwrap();
    let out = kiln_with_env(&["devices"], &[("KILN_PLUGIN_PATH", dir.path().as_os_str())]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains(&lib.display().to_string()) && err.contains("rustc 0.0.1 (elsewhere)"), "{err}");
    assert!(err.contains("rebuild the library"), "{err}");
}

#[test]
fn inspect_hints_only_at_custom_ops_that_no_loaded_plugin_provides() {
    let text = kiln_ok(&["inspect", &model()]);
    assert!(text.contains("import:       2 of 2 nodes kiln cannot import:"), "{text}");
    assert_eq!(text.matches("load its library with --plugins LIB").count(), 2, "{text}");
    // With the C example loaded, ClipC imports and only Swish is left.
    let clip = examples::build_clip_example("clip_inspect", &scratch(), &[]).unwrap();
    let text = kiln_ok(&["inspect", &model(), "--plugins", path_arg(&clip)]);
    assert!(text.contains("import:       1 of 2 nodes kiln cannot import:"), "{text}");
    assert!(text.contains("hint: no loaded plugin provides `kiln.examples::Swish`"), "{text}");
    assert!(!text.contains("`kiln.examples::ClipC`"), "{text}");
}

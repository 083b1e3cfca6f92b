//! Backend plugins: kiln's wgpu backend built as `libkiln_backend_wgpu.so` by cargo (as a
//! packager would), loaded through the handshake and run on a model (lavapipe in CI),
//! checked against the cpu backend; libraries without the entry point, of another backend
//! ABI version or built by another compiler are refused with clear errors.

use kiln::*;
use kiln_cpu::CpuBackend;
use kiln_plugins::backend::{backend_library_paths, is_backend_library, load_backend, BackendLoadError};
use kiln_plugins::examples;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn scratch() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

/// Builds into this test's own target folder, so the library shares the test's build of
/// kiln and of every dependency (the handshake's premise).
fn target_dir() -> PathBuf {
    scratch().parent().expect("CARGO_TARGET_TMPDIR is target/tmp").to_path_buf()
}

/// A C library exporting `kiln_backend_entry` with a descriptor of the given ABI version
/// and rustc version string (the kiln version is this kiln's).
fn fake_backend(name: &str, abi_version: u32, rustc: &str) -> PathBuf {
    let source = scratch().join(format!("{name}.c"));
    let code = format!(
        "#include <stdint.h>\n#include <stddef.h>\n\
         typedef struct {{ uint32_t abi_version, struct_size; const char *name, *kiln_version, *rustc_version;\n\
           void* (*create)(void); }} desc;\n\
         static void* create(void) {{ return NULL; }}\n\
         static const desc D = {{ {abi_version}u, sizeof(desc), \"fake\", \"{}\", \"{rustc}\", create }};\n\
         const desc* kiln_backend_entry(void) {{ return &D; }}\n",
        kiln_plugins::backend::KILN_VERSION.to_str().unwrap()
    );
    std::fs::write(&source, code).unwrap();
    examples::build_c_plugin(name, &source, &scratch(), &[]).unwrap()
}

#[test]
fn the_wgpu_backend_plugin_loads_and_runs_a_model_like_the_cpu_backend() {
    let lib = examples::build_backend_plugin(env!("CARGO"), "wgpu", &target_dir()).unwrap();
    assert!(is_backend_library(&lib), "{}", lib.display());
    let loaded = load_backend(&lib).expect("the handshake succeeds");
    assert_eq!(loaded.name, "wgpu");
    let backend = loaded.open().unwrap();
    assert_eq!(backend.name(), "wgpu");
    if let Err(e) = backend.device() {
        eprintln!("SKIPPED: no wgpu adapter/driver: {e}");
        return;
    }
    let model = examples::repo_root().join("examples/models/mnist.onnx");
    let net = kiln_onnx::import_file(&model).unwrap();
    let input = net.tensor(net.inputs()[0]);
    let dims = input.shape.as_fixed().unwrap_or_else(|| vec![1, 1, 28, 28]);
    let n: usize = dims.iter().product();
    let x: Vec<f32> = (0..n).map(|i| ((i * 7919) % 255) as f32 / 255.0).collect();
    let feed = HashMap::from([(input.name.clone(), HostTensor::from_f32(dims, x).unwrap())]);
    let run = |backend: &dyn Backend| {
        let engine = Builder::new(backend).build(&net, &BuilderConfig::default()).unwrap();
        let engine = Engine::deserialize(&engine.serialize()).unwrap();
        let ctx = ExecutionContext::new(engine, backend).unwrap();
        let out = ctx.run(&feed).unwrap();
        out.values().next().unwrap().as_f32().unwrap().to_vec()
    };
    let got = run(backend.as_ref());
    let want = run(&CpuBackend::new());
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!((g - w).abs() <= 1e-3 * w.abs().max(1.0), "output {i}: plugin wgpu {g}, cpu {w}");
    }
}

/// The backend library has its own copy of kiln's statics, so its plugin registry is empty:
/// the Plugin layer's instance travels with the network (and is made anew from this
/// process's registry when the engine is loaded).
#[test]
fn a_plugin_this_process_loaded_runs_on_a_backend_library() {
    let lib = examples::build_backend_plugin(env!("CARGO"), "wgpu", &target_dir()).unwrap();
    let backend = load_backend(&lib).expect("the handshake succeeds").open().unwrap();
    if let Err(e) = backend.device() {
        eprintln!("SKIPPED: no wgpu adapter/driver: {e}");
        return;
    }
    let clip = examples::build_clip_example("clip_for_backend_library", &scratch(), &["-DKILN_TEST_NAMESPACE=\"kiln.backend_lib\""]).unwrap();
    kiln_plugins::load_library(&clip).expect("the C example loads");
    let key = kiln::plugin::PluginKey::new("kiln.backend_lib", "ClipC", "1");
    let fields = [("lo".into(), PluginField::F32(vec![-0.5])), ("hi".into(), PluginField::F32(vec![1.0]))];
    let plugin = kiln::plugin::registry().creator(&key).expect("registered").create(&fields).unwrap();
    let mut net = Network::new("plugin");
    let x = net.add_input("x", DataType::F32, Shape::fixed(&[2, 3])).unwrap();
    let layer = net.add_plugin_v3(&[x], plugin).unwrap();
    net.mark_output(net.output(layer, 0)).unwrap();
    let engine = Builder::new(backend.as_ref()).build(&net, &BuilderConfig::default()).expect("builds on the library");
    let engine = Engine::deserialize(&engine.serialize()).unwrap();
    let ctx = ExecutionContext::new(engine, backend.as_ref()).unwrap();
    let feed = HashMap::from([("x".to_string(), HostTensor::from_f32(vec![2, 3], vec![-2.0, -0.25, 0.0, 0.5, 1.0, 7.0]).unwrap())]);
    let out = ctx.run(&feed).expect("runs on the library");
    assert_eq!(out.values().next().unwrap().as_f32().unwrap(), &[-0.5, -0.25, 0.0, 0.5, 1.0, 1.0]);
}

#[test]
fn a_library_without_the_backend_entry_point_is_refused() {
    let source = scratch().join("not_a_backend.c");
    std::fs::write(&source, "int not_a_backend(void) { return 1; }\n").unwrap();
    let lib = examples::build_c_plugin("kiln_backend_nothing", &source, &scratch(), &[]).unwrap();
    let err = load_backend(&lib).unwrap_err();
    assert!(matches!(err, BackendLoadError::NoEntryPoint { .. }), "{err}");
    assert!(err.to_string().contains("does not export `kiln_backend_entry`"), "{err}");
    let err = load_backend(Path::new("/nonexistent/libkiln_backend_x.so")).unwrap_err();
    assert!(matches!(err, BackendLoadError::CannotLoad { .. }), "{err}");
}

#[test]
fn a_library_built_by_another_compiler_is_refused_naming_both_versions() {
    let lib = fake_backend("kiln_backend_other_rustc", 1, "rustc 0.0.1 (elsewhere)");
    let err = load_backend(&lib).unwrap_err().to_string();
    assert!(err.contains("rustc 0.0.1 (elsewhere)") && err.contains(kiln_plugins::backend::RUSTC_VERSION.to_str().unwrap()), "{err}");
    assert!(err.contains("rebuild the library"), "{err}");
}

#[test]
fn a_library_of_another_backend_abi_version_is_refused() {
    let lib = fake_backend("kiln_backend_abi9", 9, "whatever");
    let err = load_backend(&lib).unwrap_err().to_string();
    assert!(err.contains("backend ABI version 9") && err.contains("supports version 1"), "{err}");
}

#[test]
fn backend_libraries_are_found_next_to_kiln_and_on_the_plugin_path() {
    let dir = tempfile::tempdir().unwrap();
    let ext = std::env::consts::DLL_EXTENSION;
    for name in [format!("libkiln_backend_b.{ext}"), format!("libkiln_backend_a.{ext}"), format!("libother.{ext}")] {
        std::fs::write(dir.path().join(name), b"").unwrap();
    }
    let found = backend_library_paths(Some(dir.path()));
    let names: Vec<_> = found.iter().map(|p| p.file_name().unwrap().to_str().unwrap().to_string()).collect();
    // (KILN_PLUGIN_PATH, when set, adds its libraries after these.)
    assert_eq!(names[..2.min(names.len())], [format!("libkiln_backend_a.{ext}"), format!("libkiln_backend_b.{ext}")]);
}

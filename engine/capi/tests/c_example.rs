//! The C API from C and C++: `examples/c/run_engine.cpp`, compiled against
//! `include/kiln.h` and `libkiln_capi.so`, runs an MNIST engine on cpu and prints what the Rust
//! API computes; `tests/c/api_errors.c` checks that failures are statuses with messages.

use kiln_core::{Builder, BuilderConfig, ExecutionContext, HostTensor};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// MNIST built for cpu into `dir`, and the engine.
fn mnist_engine(dir: &Path) -> (PathBuf, kiln_core::Engine) {
    let network = kiln_onnx::import_file(&repo().join("examples/models/mnist.onnx")).expect("import");
    let cpu = kiln_cpu::CpuBackend::new();
    let engine = Builder::new(&cpu).build(&network, &BuilderConfig::default()).expect("build");
    let path = dir.join("mnist.engine");
    std::fs::write(&path, engine.serialize()).unwrap();
    (path, engine)
}

/// The folder holding libkiln_capi.so. A test build does not make the cdylib, and a cargo build
/// started from here would build the workspace a second way beside the running test build
/// (doctests then see two `kiln` crates), so it is built before the tests:
/// `scripts/test.sh` runs `cargo build --workspace --lib` first.
fn library_dir() -> PathBuf {
    // target/debug/deps/c_example-… → target/debug.
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).expect("a target folder").to_path_buf();
    let lib = profile_dir.join("libkiln_capi.so");
    assert!(lib.exists(), "{} is not built: run `cargo build --workspace --lib` first (scripts/test.sh does)", lib.display());
    profile_dir
}

/// Compiles `source` against include/kiln.h and libkiln_capi.so into `dir/name`.
fn compile(dir: &Path, compiler: &str, flags: &[&str], source: &Path, name: &str, libs: &[&str]) -> PathBuf {
    let (exe, lib) = (dir.join(name), library_dir());
    let compiled = Command::new(compiler)
        .args(flags)
        .arg("-I")
        .arg(repo().join("include"))
        .arg(source)
        .arg("-L")
        .arg(&lib)
        .arg("-lkiln_capi")
        .args(libs)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("no C/C++ compiler `{compiler}` to build {}: {e}", source.display()));
    assert!(compiled.status.success(), "{compiler} failed on {}: {}", source.display(), String::from_utf8_lossy(&compiled.stderr));
    exe
}

#[test]
fn the_cpp_example_runs_an_engine_and_prints_what_rust_computes() {
    let dir = std::env::temp_dir().join(format!("kiln-capi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (engine_path, engine) = mnist_engine(&dir);
    let exe = compile(&dir, "c++", &["-std=c++17", "-Wall", "-Werror"], &repo().join("examples/c/run_engine.cpp"), "run_engine", &[]);
    let ran = Command::new(&exe).arg(&engine_path).output().unwrap();
    let stdout = String::from_utf8_lossy(&ran.stdout).into_owned();
    assert!(ran.status.success(), "run_engine failed: {}", String::from_utf8_lossy(&ran.stderr));

    // The same pattern through the Rust API.
    let image: Vec<f32> = (0..784).map(|k| (k % 7) as f32 * 0.125).collect();
    let inputs = HashMap::from([("data".to_string(), HostTensor::from_f32(vec![1, 1, 28, 28], image).unwrap())]);
    let want = ExecutionContext::new(engine, &kiln_cpu::CpuBackend::new()).unwrap().run(&inputs).unwrap();
    let want = want["prob"].as_f32().unwrap().to_vec();
    let line = stdout.lines().find(|l| l.starts_with("prob: 1 10:")).unwrap_or_else(|| panic!("{stdout}"));
    let got: Vec<f32> = line["prob: 1 10:".len()..].split_whitespace().map(|v| v.parse().unwrap()).collect();
    assert_eq!(got, want, "the C++ run prints the Rust run's values");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn failures_are_statuses_with_messages_from_c() {
    let dir = std::env::temp_dir().join(format!("kiln-capi-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (engine_path, _) = mnist_engine(&dir);
    let exe = compile(&dir, "cc", &["-std=c11", "-Wall", "-Werror"], &repo().join("engine/capi/tests/c/api_errors.c"), "api_errors", &["-lm"]);
    let ran = Command::new(&exe).arg(&engine_path).output().unwrap();
    assert!(ran.status.success(), "api_errors: {}{}", String::from_utf8_lossy(&ran.stdout), String::from_utf8_lossy(&ran.stderr));
    assert_eq!(String::from_utf8_lossy(&ran.stdout), "ok\n");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn contexts_of_one_engine_run_on_different_profiles_from_c() {
    let dir = std::env::temp_dir().join(format!("kiln-capi-profiles-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let network = kiln_onnx::import_file(&repo().join("tests/data/pytorch/cnn_torchscript.onnx")).expect("import");
    let mut config = BuilderConfig::default();
    for (low, high) in [(1, 2), (3, 8)] {
        let mut profile = kiln_core::OptimizationProfile::new();
        profile.set_dimensions("image", &[low, 3, 32, 32], &[high, 3, 32, 32], &[high, 3, 32, 32]);
        config.profiles.push(profile);
    }
    let engine = Builder::new(&kiln_cpu::CpuBackend::new()).build(&network, &config).expect("build");
    let engine_path = dir.join("cnn.engine");
    std::fs::write(&engine_path, engine.serialize()).unwrap();
    let exe = compile(&dir, "cc", &["-std=c11", "-Wall", "-Werror"], &repo().join("engine/capi/tests/c/profiles.c"), "profiles", &[]);
    let ran = Command::new(&exe).arg(&engine_path).output().unwrap();
    assert!(ran.status.success(), "profiles: {}{}", String::from_utf8_lossy(&ran.stdout), String::from_utf8_lossy(&ran.stderr));
    assert_eq!(String::from_utf8_lossy(&ran.stdout), "ok\n");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `examples/c/run_engine_device.cpp` builds everywhere (it opens the CUDA driver itself).
/// Here, on a cpu engine, it either finds no driver and says so (exit 3), or finds one and
/// kiln refuses device memory for a cpu engine by name; on the GPU machine it runs cuda
/// engines (the closing notes of #23 give that run).
#[test]
fn the_device_io_example_builds_and_refuses_what_it_cannot_run() {
    let dir = std::env::temp_dir().join(format!("kiln-capi-device-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (engine_path, _) = mnist_engine(&dir);
    let source = repo().join("examples/c/run_engine_device.cpp");
    let exe = compile(&dir, "c++", &["-std=c++17", "-Wall", "-Werror"], &source, "run_engine_device", &["-ldl"]);
    let ran = Command::new(&exe).arg(&engine_path).output().unwrap();
    let stderr = String::from_utf8_lossy(&ran.stderr).into_owned();
    match ran.status.code() {
        Some(3) => {
            assert!(stderr.contains("no CUDA driver (libcuda.so.1)"), "{stderr}");
            eprintln!("SKIPPED the device run: no CUDA driver on this machine");
        }
        _ => assert!(!ran.status.success() && stderr.contains("backend `cpu` cannot run on device memory"), "{stderr}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

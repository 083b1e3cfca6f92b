//! `kiln build --timing-cache` and `kiln cache`: rebuilding with a grown cache times
//! nothing and writes a byte-identical engine; the cache can be shown, edited and merged.

mod common;

use common::*;
use tempfile::TempDir;

const SHAPES: [&str; 6] =
    ["--min-shapes", "image:1x3x32x32", "--opt-shapes", "image:2x3x32x32", "--max-shapes", "image:2x3x32x32"];

#[test]
fn building_twice_with_a_timing_cache_gives_identical_engines() {
    let dir = TempDir::new().unwrap();
    let model = repo_path("tests/data/pytorch/cnn_torchscript.onnx");
    let (a, b, cache) = (dir.path().join("a.engine"), dir.path().join("b.engine"), dir.path().join("c.bin"));
    let build = |out: &std::path::Path, extra: &[&str]| {
        let mut args = vec!["build", model.to_str().unwrap(), "-o", path_arg(out), "--backend", "cpu", "--timing-cache", path_arg(&cache)];
        args.extend(SHAPES);
        args.extend(extra);
        kiln_ok(&args)
    };
    let first = build(&a, &[]);
    assert!(!first.contains("tactics:  0 layer signatures timed"), "{first}");
    let second = build(&b, &["--error-on-timing-cache-miss"]);
    assert!(second.contains("tactics:  0 layer signatures timed"), "{second}");
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());

    let shown = kiln_ok(&["cache", "show", path_arg(&cache)]);
    assert!(shown.contains("chosen: cpu/conv_im2col_gemm@") || shown.contains("chosen: cpu/conv_direct@"), "{shown}");
    let key = shown.lines().find(|l| l.starts_with("Fused:") || l.starts_with("Convolution:")).unwrap().to_string();
    let edited = kiln_ok(&["cache", "edit", path_arg(&cache), &key, "conv_direct"]);
    assert!(edited.contains("cpu/conv_direct@"), "{edited}");
    let merged = dir.path().join("m.bin");
    kiln_ok(&["cache", "merge", path_arg(&cache), path_arg(&cache), "-o", path_arg(&merged)]);
    let shown = kiln_ok(&["cache", "show", path_arg(&merged)]);
    let after_key = shown.lines().skip_while(|l| *l != key).nth(1).unwrap();
    assert!(after_key.contains("chosen: cpu/conv_direct@"), "{shown}");
}

/// The entry keys `kiln cache show` lists.
fn cache_keys(cache: &std::path::Path) -> std::collections::BTreeSet<String> {
    let shown = kiln_ok(&["cache", "show", path_arg(cache)]);
    shown.lines().skip_while(|l| !l.starts_with("entries:")).skip(1).filter(|l| !l.starts_with(' ')).map(str::to_string).collect()
}

/// Small builds with different layers or settings, each timing something of its own.
fn distinct_builds() -> Vec<Vec<String>> {
    let mnist = repo_path("examples/models/mnist.onnx").to_str().unwrap().to_string();
    let cnn = repo_path("tests/data/pytorch/cnn_torchscript.onnx").to_str().unwrap().to_string();
    let with_shapes = |model: &str, extra: &[&str]| {
        let mut args = vec![model.to_string()];
        if model.contains("cnn") {
            args.extend(SHAPES.iter().map(|s| s.to_string()));
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    vec![with_shapes(&mnist, &[]), with_shapes(&mnist, &["--no-tf32"]), with_shapes(&cnn, &[]), with_shapes(&cnn, &["--no-tf32"])]
}

#[test]
fn parallel_builds_sharing_a_timing_cache_keep_every_entry() {
    let dir = TempDir::new().unwrap();
    let builds = distinct_builds();
    // What each build adds on its own.
    let mut union = std::collections::BTreeSet::new();
    let mut largest = 0;
    for (i, build) in builds.iter().enumerate() {
        let cache = dir.path().join(format!("alone{i}.bin"));
        let engine = dir.path().join(format!("alone{i}.engine"));
        let mut args = vec!["build", "-o", path_arg(&engine), "--backend", "cpu", "--timing-cache", path_arg(&cache)];
        args.extend(build.iter().map(String::as_str));
        kiln_ok(&args);
        let keys = cache_keys(&cache);
        largest = largest.max(keys.len());
        union.extend(keys);
    }
    assert!(union.len() > largest, "the builds must add different entries for this test to mean anything");

    let shared = dir.path().join("shared.bin");
    let children: Vec<_> = builds
        .iter()
        .enumerate()
        .map(|(i, build)| {
            let engine = dir.path().join(format!("p{i}.engine"));
            std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
                .args(["build", "-o", path_arg(&engine), "--backend", "cpu"])
                .args(["--timing-cache", path_arg(&shared)])
                .args(build)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    }
    assert_eq!(cache_keys(&shared), union);
}

/// A cache of the cpu build relabelled as made on another machine.
fn foreign_cache(dir: &std::path::Path) -> std::path::PathBuf {
    let cache = dir.join("foreign.bin");
    let model = repo_path("examples/models/mnist.onnx");
    kiln_ok(&["build", path_arg(&model), "-o", path_arg(&dir.join("e")), "--backend", "cpu", "--timing-cache", path_arg(&cache)]);
    let mut timing = kiln::TimingCache::from_bytes(&std::fs::read(&cache).unwrap()).unwrap();
    let mut header = timing.header().unwrap().clone();
    header.device.name = "NVIDIA H100".into();
    timing.check_and_adopt(&header, true).unwrap();
    std::fs::write(&cache, timing.serialize()).unwrap();
    cache
}

#[test]
fn another_devices_cache_is_refused_naming_the_flag_and_the_differences() {
    let dir = TempDir::new().unwrap();
    let cache = foreign_cache(dir.path());
    let model = repo_path("examples/models/mnist.onnx");
    let engine = dir.path().join("e2");
    let args = ["build", path_arg(&model), "-o", path_arg(&engine), "--backend", "cpu", "--timing-cache", path_arg(&cache)];
    let line = kiln_fails(&args, "--ignore-timing-cache-mismatch");
    assert!(line.contains("device: NVIDIA H100 (cache) vs ") && line.contains(" (this machine)"), "{line}");
    assert!(!line.contains("ignore_mismatch") && !line.contains("DeviceFingerprint"), "{line}");
}

#[test]
fn ignoring_the_mismatch_leaves_the_other_devices_cache_unless_told_to_overwrite() {
    let dir = TempDir::new().unwrap();
    let cache = foreign_cache(dir.path());
    let before = std::fs::read(&cache).unwrap();
    let model = repo_path("examples/models/mnist.onnx");
    let engine = dir.path().join("e2");
    let args = ["build", path_arg(&model), "-o", path_arg(&engine), "--backend", "cpu", "--timing-cache", path_arg(&cache), "--ignore-timing-cache-mismatch"];
    let out = kiln(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.lines().all(|l| l.starts_with("warning: ")), "{stderr}");
    assert!(stderr.contains("--overwrite-timing-cache"), "{stderr}");
    assert_eq!(std::fs::read(&cache).unwrap(), before, "the other device's cache was rewritten");
    assert!(engine.exists());

    kiln_ok(&[&args[..], &["--overwrite-timing-cache"]].concat());
    let shown = kiln_ok(&["cache", "show", path_arg(&cache)]);
    assert!(!shown.contains("NVIDIA H100"), "{shown}");
    kiln_fails(&["build", path_arg(&model), "-o", path_arg(&engine), "--overwrite-timing-cache", "--timing-cache", path_arg(&cache)], "--ignore-timing-cache-mismatch");
}

#[test]
fn an_unwritable_timing_cache_is_a_warning_and_the_engine_is_written() {
    let dir = TempDir::new().unwrap();
    // A cache "inside" a regular file can be neither locked nor written, even by root.
    let blocker = dir.path().join("blocker");
    std::fs::write(&blocker, b"").unwrap();
    let cache = blocker.join("cache.bin");
    let engine = dir.path().join("e");
    let model = repo_path("examples/models/mnist.onnx");
    let out = kiln(&["build", path_arg(&model), "-o", path_arg(&engine), "--backend", "cpu", "--timing-cache", path_arg(&cache)]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("warning: timing cache not saved: "), "{stderr}");
    assert!(engine.exists());
}

//! End-to-end tests of `kiln compare`, `kiln bench` and `kiln devices`.

mod common;

use common::*;
use std::path::PathBuf;
use tempfile::TempDir;

fn mnist() -> String {
    repo_path("examples/models/mnist.onnx").to_str().expect("utf-8 path").to_string()
}

/// Exit statuses of `kiln compare` (see its `--help`).
const EXIT_BACKEND_FAILED: i32 = 4;

#[test]
fn compare_cpu_against_cpu_passes() {
    let stdout = kiln_ok(&["compare", &mnist(), "--backends", "cpu,cpu"]);
    assert!(stdout.contains("output `prob` f32[1, 10]: PASS"), "{stdout}");
    assert!(stdout.contains("mismatches: 0 of 10 elements"), "{stdout}");
    assert!(stdout.contains("fp32 tier, rtol 1e-5, atol 1e-5 (default)"), "{stdout}");
    assert!(stdout.contains("result: PASS"), "{stdout}");
    for figure in ["abs error: max", "rel error: max", "median", "p99"] {
        assert!(stdout.contains(figure), "`{figure}` missing: {stdout}");
    }
}

#[test]
fn compare_with_given_inputs_and_tolerances() {
    let dir = TempDir::new().unwrap();
    let input = dir.path().join("in.npz");
    let image: Vec<f32> = (0..784).map(|i| (i as f32 * 0.01).cos()).collect();
    write_npz_array(&input, "data", &[1, 1, 28, 28], &image);
    let stdout = kiln_ok(&[
        "compare",
        &mnist(),
        "--backends",
        "cpu,cpu",
        "--inputs",
        path_arg(&input),
        "--rtol",
        "0.5",
        "--atol",
        "0.25",
    ]);
    assert!(stdout.contains("rtol 5e-1, atol 2.5e-1 (given)"), "{stdout}");
    assert!(stdout.contains(&format!("from `{}`", input.display())), "{stdout}");
}

#[test]
fn compare_tier_follows_the_builder_flags() {
    let stdout = kiln_ok(&["compare", &mnist(), "--backends", "cpu,cpu", "--flag", "fp16"]);
    assert!(stdout.contains("fp16 tier, rtol 1e-2, atol 1e-2"), "{stdout}");
    let stdout = kiln_ok(&["compare", &mnist(), "--backends", "cpu,cpu", "--flag", "tf32", "--rtol", "1e-4"]);
    assert!(stdout.contains("tf32 tier, rtol 1e-4, atol 1e-3"), "{stdout}");
}

#[test]
fn compare_mark_all_compares_every_layer_unoptimized() {
    let stdout = kiln_ok(&["compare", &mnist(), "--backends", "cpu,cpu", "--mark-all"]);
    assert!(stdout.contains("optimization: none"), "{stdout}");
    assert!(stdout.contains("first divergence: none"), "{stdout}");
    let line = stdout.lines().find(|l| l.starts_with("intermediate tensors:")).expect("intermediate line");
    let count: usize = line.split_whitespace().nth(2).and_then(|n| n.parse().ok()).expect("a count");
    assert!(count >= 4, "{line}");
}

#[test]
fn compare_writes_its_figures_as_json() {
    let dir = TempDir::new().unwrap();
    let json = dir.path().join("compare.json");
    kiln_ok(&["compare", &mnist(), "--backends", "cpu,cpu", "--mark-all", "--json", path_arg(&json)]);
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(
        (v["passed"].as_bool(), v["tier"].as_str(), v["optimization"].as_str()),
        (Some(true), Some("fp32"), Some("none"))
    );
    let pair = &v["pairs"][0];
    assert!(pair["first_divergence"].is_null(), "{pair}");
    let tensors = pair["tensors"].as_array().expect("tensors");
    assert!(tensors.len() >= 5, "{pair}");
    let prob = &tensors[0];
    assert_eq!((prob["name"].as_str(), prob["network_output"].as_bool()), (Some("prob"), Some(true)));
    let abs = &prob["absolute_error"];
    assert!(
        abs["max"].as_f64().unwrap() < 1e-6 && abs["median"].as_f64().unwrap() <= abs["p99"].as_f64().unwrap(),
        "{abs}"
    );
    assert!(tensors.iter().skip(1).all(|t| t["layer"]["index"].is_u64()), "{pair}");
}

#[test]
fn compare_mark_all_leaves_loop_interiors_out() {
    // A loop inside a loop: mark-all marks only the tensors computed once per run.
    let model = repo_path("tests/data/pytorch/loop_nested.onnx");
    let stdout = kiln_ok(&["compare", path_arg(&model), "--backends", "cpu,cpu", "--mark-all"]);
    assert!(stdout.contains("output `acc` f32[1, 2]: PASS"), "{stdout}");
    assert!(stdout.contains("result: PASS"), "{stdout}");
}

#[test]
fn compare_takes_an_engine_only_with_golden_outputs() {
    let dir = TempDir::new().unwrap();
    let engine = dir.path().join("mnist.engine");
    kiln_ok(&["build", &mnist(), "-o", path_arg(&engine), "--backend", "cpu"]);
    kiln_fails(&["compare", path_arg(&engine), "--backends", "cpu,cpu"], "compare it with --load-outputs GOLDEN.npz, or give the ONNX model");
}

#[test]
fn compare_refuses_unknown_and_unavailable_backends_clearly() {
    let line = kiln_fails(&["compare", &mnist(), "--backends", "tpu,cpu"], "unknown backend `tpu`");
    assert!(line.contains("known: cuda, wgpu, cpu"), "{line}");
    kiln_fails(&["compare", &mnist(), "--backends", "cpu"], "at least two backends");
    // A registry backend that cannot run here is a backend failure, with its own status.
    // (Skipped once every backend in the registry is available on this machine.)
    let unavailable =
        ["cuda", "wgpu"].into_iter().find(|b| !kiln_ok(&["devices"]).contains(&format!("{b}: available")));
    if let Some(backend) = unavailable {
        let pair = format!("{backend},cpu");
        let out = kiln(&["compare", &mnist(), "--backends", &pair]);
        assert_eq!(out.status.code(), Some(EXIT_BACKEND_FAILED), "{}", text(&out.stderr));
        assert!(text(&out.stderr).contains(&format!("`{backend}` is not available")), "{}", text(&out.stderr));
    } else {
        eprintln!("SKIPPED: every registry backend is available here; no unavailable backend to refuse");
    }
}

#[test]
fn compare_rejects_bad_tolerances_and_flags() {
    kiln_fails(&["compare", &mnist(), "--backends", "cpu,cpu", "--rtol=-1"], "non-negative");
    kiln_fails(&["compare", &mnist(), "--backends", "cpu,cpu", "--atol", "nan"], "non-negative");
    kiln_fails(&["compare", &mnist(), "--backends", "cpu,cpu", "--flag", "fp9"], "unknown builder flag `fp9`");
}

#[test]
fn compare_help_states_the_tiers() {
    let help = kiln_ok(&["compare", "--help"]);
    for tier in ["fp32", "tf32", "fp16", "bf16", "rtol 2e-2"] {
        assert!(help.contains(tier), "`{tier}` missing from help: {help}");
    }
}

fn bench_json(extra: &[&str]) -> (String, serde_json::Value) {
    let dir = TempDir::new().unwrap();
    let json: PathBuf = dir.path().join("bench.json");
    let mut args = vec!["bench", "--warmup-ms", "20", "--duration-s", "0", "--json", path_arg(&json)];
    args.extend_from_slice(extra);
    let stdout = kiln_ok(&args);
    let value = serde_json::from_str(&std::fs::read_to_string(&json).expect("json written")).expect("valid json");
    (stdout, value)
}

#[test]
fn bench_exports_every_iterations_times() {
    let dir = TempDir::new().unwrap();
    let times = dir.path().join("times.json");
    let model = mnist();
    let (_, v) = bench_json(&[&model, "--iterations", "7", "--backend", "cpu", "--export-times", path_arg(&times)]);
    let exported: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&times).unwrap()).unwrap();
    let items = exported.as_array().expect("an array");
    assert_eq!(items.len() as u64, v["iterations"].as_u64().unwrap(), "one object per timed iteration");
    let latencies: Vec<f64> = items.iter().map(|i| i["latency_ms"].as_f64().unwrap()).collect();
    let min = latencies.iter().copied().fold(f64::INFINITY, f64::min);
    assert!((min - v["latency_ms"]["min"].as_f64().unwrap()).abs() < 1e-9, "{exported} {v}");
    assert!(items.iter().enumerate().all(|(n, i)| i["iteration"] == n && i["enqueue_ms"].as_f64().unwrap() > 0.0));
}

#[test]
fn bench_reports_sane_figures_as_json() {
    let model = mnist();
    let (stdout, v) = bench_json(&[&model, "--iterations", "25", "--backend", "cpu"]);
    assert_eq!(v["iterations"], 25, "{v}");
    assert_eq!(v["backend"], "cpu");
    let latency = &v["latency_ms"];
    let f = |key: &str| latency[key].as_f64().unwrap_or_else(|| panic!("latency {key} in {v}"));
    assert!(f("min") > 0.0);
    assert!(f("min") <= f("median") && f("median") <= f("p90") && f("p90") <= f("p95"), "{latency}");
    assert!(f("p95") <= f("p99") && f("p99") <= f("max"), "{latency}");
    assert!(f("min") <= f("mean") && f("mean") <= f("max"), "{latency}");
    let enqueue_median = v["enqueue_ms"]["median"].as_f64().expect("enqueue median");
    assert!(enqueue_median > 0.0 && enqueue_median <= f("max"), "{v}");
    let throughput = v["throughput"]["inferences_per_s"].as_f64().expect("throughput");
    // 25 runs in the measured wall time.
    let wall = v["duration_s"].as_f64().expect("duration");
    assert!((throughput * wall - 25.0).abs() < 1e-6, "{v}");
    assert!(throughput <= 1e3 / f("min") * 1.0001, "{v}");
    assert_eq!(v["throughput"]["batch"], 1);
    assert!(v["gpu_compute_ms"].is_null() && v["h2d_ms"].is_null() && v["d2h_ms"].is_null(), "{v}");
    assert!(v["warmup"]["iterations"].as_u64().expect("warm-up count") >= 1, "{v}");
    assert!(v["first_run_s"].as_f64().expect("first run") > 0.0, "{v}");
    assert_eq!(v["input_shapes"]["data"], "f32[1,1,28,28]", "{v}");
    let sd = f("stddev");
    assert!(sd >= 0.0 && sd <= f("max") - f("min"), "{latency}");
    for line in ["first run:", "inputs:      data f32[1,1,28,28] (random, ChaCha8 seed 0)", "latency:", "enqueue:", "throughput:", "GPU compute: n/a", "H2D / D2H:   n/a"] {
        assert!(stdout.contains(line), "`{line}` missing: {stdout}");
    }
}

#[test]
fn bench_runs_an_engine_file_and_notes_cuda_graph_off() {
    let dir = TempDir::new().unwrap();
    let engine = dir.path().join("mnist.engine");
    kiln_ok(&["build", &mnist(), "-o", path_arg(&engine), "--backend", "cpu"]);
    let engine = path_arg(&engine).to_string();
    let (stdout, v) = bench_json(&[&engine, "--iterations", "5", "--no-cuda-graph"]);
    assert_eq!(v["iterations"], 5);
    assert!(v["build_s"].is_null(), "an engine file is not built: {v}");
    assert!(stdout.contains("--no-cuda-graph has no effect on backend `cpu`"), "{stdout}");
    assert_eq!(v["cuda_graph"]["requested"], false);
    kiln_fails(&["bench", &engine, "--fp16"], "apply when building from ONNX");
}

#[test]
fn bench_dumps_a_per_layer_profile_as_text_and_json() {
    let dir = TempDir::new().unwrap();
    let export = dir.path().join("profile.json");
    let model = mnist();
    let (stdout, v) =
        bench_json(&[&model, "--iterations", "3", "--backend", "cpu", "--dump-profile", "--profile-runs", "4", "--export-profile", path_arg(&export)]);
    let exported: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&export).expect("profile written")).expect("json");
    assert_eq!(v["profile"], exported, "--json carries the exported profile");
    assert_eq!(exported["runs"], 4);
    let layers = exported["layers"].as_array().expect("layers");
    // mnist's two convolutions, two pools, its reshape, the two fused products and the softmax.
    assert_eq!(layers.len(), 8, "{exported}");
    let names: Vec<&str> = layers.iter().map(|l| l["name"].as_str().expect("name")).collect();
    assert_eq!(names[0], "Conv0");
    assert!(names.contains(&"MatMul5 + Add6 + Relu7"), "fused layers list what they replaced: {names:?}");
    let percent: f64 = layers.iter().map(|l| l["percent"].as_f64().expect("percent")).sum();
    assert!((percent - 100.0).abs() < 1e-6, "{exported}");
    let total: f64 = layers.iter().map(|l| l["median_ms"].as_f64().expect("median")).sum();
    assert!((total - exported["total_ms"].as_f64().expect("total")).abs() < 1e-9 && total > 0.0, "{exported}");
    assert!(layers.iter().all(|l| l["tactic"].as_str().is_some_and(|t| !t.is_empty())), "{exported}");
    assert!(stdout.contains("=== Per-layer profile (4 runs, medians) ==="), "{stdout}");
    assert!(stdout.contains("MatMul5 + Add6 + Relu7 [Fused(MatrixMultiply)]"), "{stdout}");
    kiln_fails(&["bench", &model, "--backend", "cpu", "--dump-profile", "--profile-runs", "0"], "--profile-runs");
}

#[test]
fn bench_refuses_zero_iterations() {
    kiln_fails(&["bench", &mnist(), "--iterations", "0"], "--iterations");
}

#[test]
fn devices_lists_every_backend() {
    let stdout = kiln_ok(&["devices"]);
    for backend in ["cuda", "wgpu", "cpu"] {
        assert!(stdout.lines().any(|l| l.starts_with(&format!("{backend}: "))), "{backend} missing: {stdout}");
    }
    assert!(stdout.contains("cpu: available"), "{stdout}");
    for field in ["device:", "compute capability:", "memory:", "multiprocessors:", "driver:"] {
        assert!(stdout.contains(field), "`{field}` missing: {stdout}");
    }
}

#[test]
fn bench_streams_runs_several_contexts_at_once() {
    let model = mnist();
    let (stdout, v) = bench_json(&[&model, "--iterations", "12", "--backend", "cpu", "--streams", "3"]);
    assert_eq!(v["streams"], 3, "{v}");
    // Each stream starts an iteration while fewer than 12 are done: at most two more finish.
    let iterations = v["iterations"].as_u64().unwrap();
    assert!((12..=14).contains(&iterations), "{v}");
    assert!(stdout.contains("streams:     3 contexts at once"), "{stdout}");
    kiln_fails(&["bench", &model, "--backend", "cpu", "--streams", "0"], "--streams must be between 1 and 64, got 0");
}

#[test]
fn bench_no_data_transfers_needs_device_memory_and_says_which_io_was_timed() {
    let model = mnist();
    let (stdout, v) = bench_json(&[&model, "--iterations", "2", "--backend", "cpu"]);
    assert_eq!(v["no_data_transfers"], false, "{v}");
    assert!(stdout.contains("I/O:         host buffers"), "{stdout}");
    kiln_fails(
        &["bench", &model, "--backend", "cpu", "--no-data-transfers"],
        "--no-data-transfers keeps the inputs and outputs in device memory (a cuda engine; backend `cpu` was chosen): backend `cpu` cannot allocate device memory",
    );
    kiln_fails(
        &["bench", &model, "--backend", "cpu", "--pinned-host-io"],
        "--pinned-host-io keeps the inputs and outputs in page-locked host memory (a cuda engine; backend `cpu` was chosen): backend `cpu` cannot allocate page-locked host memory",
    );
}

#[test]
fn device_ordinals_past_a_backends_devices_are_refused_by_name() {
    kiln_fails(&["run", &mnist(), "--backend", "cpu", "--device", "1"], "backend `cpu` is not available: it runs on one device, 0; there is no device 1");
}

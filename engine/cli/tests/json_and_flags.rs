//! `--json OUT` on every command that reports (`-`: stdout, instead of the text), the same
//! precision flags on build, run, bench and compare, INT8 calibration, and bare `kiln`.

mod common;

use common::*;
use serde_json::Value;
use tempfile::TempDir;

fn mnist() -> String {
    repo_path("examples/models/mnist.onnx").to_str().unwrap().to_string()
}

/// stdout of a successful run, parsed as one JSON document (so no text came with it).
fn json_stdout(args: &[&str]) -> Value {
    let stdout = kiln_ok(args);
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("kiln {args:?}: stdout is not one JSON document ({e}): {stdout}"))
}

#[test]
fn json_dash_writes_only_json_to_stdout_for_every_reporting_command() {
    let dir = TempDir::new().unwrap();
    let mnist = mnist();
    let engine = dir.path().join("m.engine");
    let cache = dir.path().join("t.cache");
    let built = json_stdout(&["build", &mnist, "-o", path_arg(&engine), "--backend", "cpu", "--timing-cache", path_arg(&cache), "--json", "-"]);
    assert_eq!(built["backend"], "cpu");
    assert_eq!(built["layers_before_passes"], 20, "{built}");
    let layers = built["layers"].as_array().unwrap();
    assert!(layers.iter().any(|l| l["type"] == "Convolution" && l["tactic"].as_str().unwrap().starts_with("conv_")), "{built}");
    assert!(built["engine_bytes"].as_u64().unwrap() > built["weights_bytes"].as_u64().unwrap(), "{built}");

    let ran = json_stdout(&["run", path_arg(&engine), "--json", "-"]);
    assert_eq!(ran["outputs"][0]["name"], "prob");
    assert_eq!(ran["outputs"][0]["type"], "f32[1,10]");
    let (min, max) = (ran["outputs"][0]["min"].as_f64().unwrap(), ran["outputs"][0]["max"].as_f64().unwrap());
    assert!(0.0 <= min && min <= max && max <= 1.0, "softmax: {ran}");
    assert_eq!(ran["inputs"][0]["type"], "f32[1,1,28,28]");
    assert!(ran["load_s"].is_number() && ran["build_s"].is_null(), "{ran}");

    let shown = json_stdout(&["cache", "show", path_arg(&cache), "--json", "-"]);
    assert_eq!(shown["header"]["backend"], "cpu");
    assert_eq!(shown["entries"].as_array().unwrap().len(), built["layers_timed"].as_u64().unwrap() as usize, "{shown}");

    let devices = json_stdout(&["devices", "--json", "-"]);
    let cpu = devices.as_array().unwrap().iter().find(|d| d["backend"] == "cpu").expect("cpu listed");
    assert_eq!(cpu["state"], "available");
    assert!(cpu["device"]["name"].as_str().unwrap().contains("cpu"), "{cpu}");

    let compared = json_stdout(&["compare", &mnist, "--backends", "cpu,cpu", "--json", "-"]);
    assert!(compared.is_object(), "{compared}");
    let bench = json_stdout(&["bench", &mnist, "--backend", "cpu", "--warmup-ms", "1", "--duration-s", "0", "--iterations", "2", "--json", "-"]);
    assert_eq!(bench["iterations"], 2);
}

#[test]
fn a_json_file_comes_with_the_text_report() {
    let dir = TempDir::new().unwrap();
    let json = dir.path().join("run.json");
    let stdout = kiln_ok(&["run", &mnist(), "--backend", "cpu", "--json", path_arg(&json)]);
    assert!(stdout.contains("output    `prob`: f32[1,10]"), "{stdout}");
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(written["backend"], "cpu");
    assert!(written["import_s"].is_number() && written["build_s"].is_number(), "{written}");
}

#[test]
fn precision_flags_are_the_same_on_build_run_bench_and_compare() {
    let dir = TempDir::new().unwrap();
    let mnist = mnist();
    let engine = dir.path().join("m.engine");
    let bench_common = ["--warmup-ms", "1", "--duration-s", "0", "--iterations", "1", "--backend", "cpu"];
    for flags in [vec!["--fp16"], vec!["--bf16", "--no-tf32"], vec!["--flag", "fp16"]] {
        let build = kiln_ok(&[&["build", mnist.as_str(), "-o", path_arg(&engine), "--backend", "cpu"], flags.as_slice()].concat());
        let want = if flags.contains(&"--bf16") { "BF16" } else { "FP16" };
        assert!(build.lines().any(|l| l.starts_with("flags:") && l.contains(want)), "{flags:?}: {build}");
        let bench = kiln_ok(&[&["bench", mnist.as_str()], &bench_common[..], flags.as_slice()].concat());
        assert!(bench.lines().any(|l| l.starts_with("flags:") && l.contains(want)), "{flags:?}: {bench}");
        let compare = kiln_ok(&[&["compare", mnist.as_str(), "--backends", "cpu,cpu"], flags.as_slice()].concat());
        assert!(compare.lines().any(|l| l.starts_with("flags:") && l.contains(want)), "{flags:?}: {compare}");
        let out = kiln(&[&["run", mnist.as_str(), "--backend", "cpu"], flags.as_slice()].concat());
        assert!(out.status.success(), "{}", text(&out.stderr));
        // cpu computes nothing in reduced precision, and run says so through the builder's warning.
        assert!(text(&out.stderr).contains(&format!("warning: builder flag {want} is set but backend `cpu` runs none")), "{}", text(&out.stderr));
    }
    kiln_fails(&["run", path_arg(&engine), "--fp16"], "apply when building from ONNX");
}

#[test]
fn bare_kiln_prints_the_help_and_exits_2() {
    let out = kiln(&[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("Usage: kiln [OPTIONS] <COMMAND>") && stderr.contains("Commands:"), "{stderr}");
    assert!(!stderr.starts_with("error:"), "{stderr}");
}

#[test]
fn an_int8_build_calibrates_over_a_folder_once_and_then_reads_the_cache() {
    let dir = TempDir::new().unwrap();
    let calib = dir.path().join("calib");
    std::fs::create_dir(&calib).unwrap();
    for b in 0..3u32 {
        let values: Vec<f32> = (0..28 * 28).map(|i| ((i * 7 + b as usize * 13) % 17) as f32 / 17.0).collect();
        write_npz_array(&calib.join(format!("batch{b}.npz")), "data", &[1, 1, 28, 28], &values);
    }
    let (cache, engine) = (dir.path().join("mnist.calib"), dir.path().join("mnist.kiln"));
    let mnist = mnist();
    let build = |extra: &[&str]| {
        let mut args = vec!["build", mnist.as_str(), "-o", path_arg(&engine), "--backend", "cpu", "--flag", "int8", "-v"];
        args.extend_from_slice(extra);
        let out = kiln(&args);
        assert!(out.status.success(), "kiln {args:?}: {}", text(&out.stderr));
        text(&out.stderr)
    };
    let log = build(&["--calib", path_arg(&calib), "--calib-cache", path_arg(&cache), "--calib-method", "minmax"]);
    // The input and what the second convolution and the two products read.
    assert!(log.contains("calibrated 4 tensors (minmax) over 3 batches"), "{log}");
    assert!(log.contains("INT8: 4 layers read INT8 inputs"), "{log}");
    let cached = std::fs::read_to_string(&cache).unwrap();
    assert!(cached.starts_with("kiln-calibration 1 minmax\n") && cached.lines().count() == 5, "{cached}");
    let log = build(&["--int8", "--calib", path_arg(&calib), "--calib-cache", path_arg(&cache)]);
    assert!(log.contains("calibration skipped") && !log.contains("calibrated"), "{log}");
    assert!(kiln_ok(&["inspect", path_arg(&engine)]).contains("INT8"));
    kiln_ok(&["run", path_arg(&engine)]);

    let engine_arg = path_arg(&engine);
    kiln_fails(&["build", &mnist, "-o", engine_arg, "--backend", "cpu", "--calib", path_arg(&calib)], "add --flag int8");
    let missing = dir.path().join("missing.calib");
    kiln_fails(&["build", &mnist, "-o", engine_arg, "--flag", "int8", "--calib-cache", path_arg(&missing)], "does not exist");
    kiln_fails(&["build", &mnist, "-o", engine_arg, "--flag", "int8", "--calib", path_arg(dir.path())], "holds no .npz files");
    kiln_fails(&["build", &mnist, "-o", engine_arg, "--flag", "int8", "--calib-method", "kl"], "unknown calibration method");
    std::fs::write(&cache, "TRT-8601-EntropyCalibration2\n").unwrap();
    kiln_fails(&["build", &mnist, "-o", engine_arg, "--flag", "int8", "--calib-cache", path_arg(&cache)], "calibration cache line 1");
}

#[test]
fn sparsity_force_prunes_to_two_four_and_the_build_reports_the_eligible_layers() {
    let dir = TempDir::new().unwrap();
    let mnist = mnist();
    let engine = dir.path().join("sparse.engine");
    // The model's own weights are dense: the flag alone finds nothing eligible.
    let plain = json_stdout(&["build", &mnist, "-o", path_arg(&engine), "--backend", "cpu", "--flag", "sparse_weights", "--json", "-"]);
    assert_eq!(plain["sparsity"]["eligible"], serde_json::json!([]), "{plain}");
    assert_eq!(plain["flags"], "TF32|SPARSE_WEIGHTS", "{plain}");
    // Forced: every convolution and product with a reduction length divisible by four
    // (not the first convolution: one input channel) is pruned and eligible.
    let out = kiln(&["build", &mnist, "-o", path_arg(&engine), "--backend", "cpu", "--sparsity", "force", "--profiling-verbosity", "detailed"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(stderr.contains("--sparsity force pruned the weights of 3 layers to 2:4"), "{stderr}");
    assert!(stdout.contains("sparsity: 3 layers eligible for 2:4 sparse math"), "{stdout}");
    // cpu has a sparse product but no sparse convolution: the build says which run dense.
    assert!(stderr.contains("no sparse kernel for 1 of 3 eligible layers (Conv2)"), "{stderr}");
    let inspected = kiln_ok(&["inspect", path_arg(&engine), "--verbosity", "detailed"]);
    assert_eq!(inspected.matches("AllowSparse: 1").count(), 3, "{inspected}");
    kiln_fails(&["build", &mnist, "-o", path_arg(&engine), "--sparsity", "sometimes"], "sometimes");
}

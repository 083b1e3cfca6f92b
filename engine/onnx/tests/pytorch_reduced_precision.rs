//! The PyTorch-exported reference models (`tests/data/pytorch/`) built with every layer
//! constrained to f16 or bf16 (PREFER_PRECISION_CONSTRAINTS): the precision pass must keep
//! real graphs (shape arithmetic, reshapes, gathers, attention) valid, and the results
//! must stay within reduced-precision tolerance of onnxruntime's f32 outputs while
//! differing from kiln's own f32 results. The same models in INT8, calibrated on scaled
//! copies of their inputs.

mod common;

use common::pytorch_data::{data_dir, read_npz, reference_model, worst_error};
use kiln::calibrate;
use kiln::quant::{CalibrationData, CalibrationMethod, CalibrationTable};
use kiln::{BuilderConfig, BuilderFlag, DataType, HostTensor, LayerId};
use std::collections::HashMap;
use std::sync::Arc;

fn check(name: &str, precision: DataType, tolerance: f64) {
    let dir = data_dir();
    let mut net = kiln_onnx::import_file(&dir.join(format!("{name}.onnx"))).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut arrays = read_npz(&dir.join(format!("{name}.npz")));
    let input_names: Vec<String> = net.inputs().iter().map(|&t| net.tensor(t).name.clone()).collect();
    let inputs: HashMap<String, HostTensor> = input_names.iter().map(|n| (n.clone(), arrays.remove(n).expect("input"))).collect();
    let backend = kiln_cpu::CpuBackend::new();
    let run = |engine| kiln::ExecutionContext::new(engine, &backend).expect("prepare").run(&inputs).expect("run");
    let full = run(kiln::Builder::new(&backend).build(&net, &BuilderConfig::default()).expect("f32 build"));

    for i in 0..net.layers().len() {
        if kiln::precision::is_float_compute(&net.layers()[i].kind) {
            net.set_layer_precision(LayerId(i), precision).unwrap();
        }
    }
    let mut config = BuilderConfig::default();
    config.set_flag(if precision == DataType::F16 { BuilderFlag::Fp16 } else { BuilderFlag::Bf16 });
    config.set_flag(BuilderFlag::PreferPrecisionConstraints);
    let out = kiln::Builder::new(&backend).build_with_report(&net, &config).unwrap_or_else(|e| panic!("{name}: {e}"));
    let reduced_layers = out.log.iter().filter(|l| l.ends_with(&format!("computes in {precision}"))).count();
    assert!(reduced_layers > 0, "{name}: no layer runs in {precision}: {:?}", out.log);
    let reduced = run(out.engine);
    for (output, want) in &arrays {
        let got = &reduced[output];
        assert_eq!(got.dtype(), DataType::F32, "{name}/{output}: network outputs keep their type");
        assert_eq!(got.shape(), want.shape(), "{name}/{output}");
        let worst = worst_error(got, want);
        assert!(worst < tolerance, "{name}/{output}: {precision} relative error {worst} ({reduced_layers} layers reduced)");
        assert!(worst_error(got, &full[output]) > 0.0, "{name}/{output}: identical to f32, nothing was reduced");
    }
}

#[test]
fn cnn_torchscript_in_f16() {
    check("cnn_torchscript", DataType::F16, 1e-3);
}

#[test]
fn cnn_dynamo_in_bf16() {
    check("cnn_dynamo", DataType::BF16, 1e-2);
}

#[test]
fn bert_torchscript_in_f16() {
    check("bert_torchscript", DataType::F16, 1e-2);
}

#[test]
fn bert_dynamo_in_f16() {
    check("bert_dynamo", DataType::F16, 1e-2);
}

/// A calibration set made of the reference inputs, scaled: batch `i` is `x · (0.6 + 0.2 i)`
/// (integer inputs such as token ids stay as they are).
struct ScaledInputs(HashMap<String, HostTensor>);

impl CalibrationData for ScaledInputs {
    fn len(&self) -> usize {
        4
    }

    fn batch(&self, i: usize) -> Result<HashMap<String, HostTensor>, String> {
        let k = 0.6 + 0.2 * i as f32;
        Ok(self
            .0
            .iter()
            .map(|(n, x)| {
                let scaled = x.as_f32().map(|v| HostTensor::from_f32(x.shape().to_vec(), v.iter().map(|e| e * k).collect()).unwrap());
                (n.clone(), scaled.unwrap_or_else(|| x.clone()))
            })
            .collect())
    }
}

fn int8_config(table: Option<CalibrationTable>, cache: &SharedCache) -> BuilderConfig {
    let mut config = cached(BuilderConfig::default(), cache);
    config.set_flag(BuilderFlag::Int8);
    config.int8_calibration = table.map(Arc::new);
    config
}

type SharedCache = Arc<std::sync::Mutex<kiln::TimingCache>>;

/// `config` with the test's one timing cache: the cpu times two float products (sgemm and
/// blocked loops, which round differently), so builds compared value for value must pick
/// the same tactic for the same layer.
fn cached(mut config: BuilderConfig, cache: &SharedCache) -> BuilderConfig {
    config.tactics.timing_cache = Some(Arc::clone(cache));
    config
}

/// Calibrated INT8 (each method) stays near f32 but is not f32; the calibration cache
/// round-trips; ranges set on the network build the same engine as the same ranges from a
/// calibration; a layer without a range stays float.
fn check_int8(name: &str, tolerance: f64) {
    let (net, inputs, _) = reference_model(name);
    let cpu = kiln_cpu::CpuBackend::new();
    let run = |engine| kiln::ExecutionContext::new(engine, &cpu).expect("prepare").run(&inputs).expect("run");
    let cache = SharedCache::default();
    let full = run(kiln::Builder::new(&cpu).build(&net, &cached(BuilderConfig::default(), &cache)).expect("f32 build"));
    let set = ScaledInputs(inputs.clone());
    let mut minmax = None;
    for method in [CalibrationMethod::Entropy, CalibrationMethod::MinMax, CalibrationMethod::Percentile(99.99)] {
        let table = calibrate(&net, &cpu, &[], &set, method).unwrap_or_else(|e| panic!("{name} {method}: {e}"));
        assert!(!table.amax.is_empty() && table.amax.values().all(|&a| a > 0.0), "{name} {method}: {table:?}");
        let cached = CalibrationTable::from_cache_text(&table.to_cache_text().unwrap()).unwrap();
        assert_eq!(cached, table, "{name} {method}: the cache round trip");
        let out = kiln::Builder::new(&cpu).build_with_report(&net, &int8_config(Some(cached), &cache)).unwrap_or_else(|e| panic!("{name} {method}: {e}"));
        let summary = out.log.iter().find(|l| l.starts_with("INT8: ")).unwrap_or_else(|| panic!("{name}: no INT8 line in {:?}", out.log));
        assert!(summary.contains("; 0 stay in float") && !summary.starts_with("INT8: 0 layers"), "{name} {method}: {summary}");
        let got = run(out.engine);
        for (output, want) in &full {
            let err = worst_error(&got[output], want);
            eprintln!("{name}/{output} {method}: INT8 vs f32 {err:.4}");
            assert!(err > 0.0 && err < tolerance, "{name}/{output} {method}: INT8 differs from f32 by {err} (tolerance {tolerance})");
        }
        if method == CalibrationMethod::MinMax {
            minmax = Some((table, got));
        }
    }
    let (table, calibrated) = minmax.expect("the min-max run");
    let mut ranged = net.clone();
    for (tensor, amax) in &table.amax {
        let t = ranged.find_tensor(tensor).unwrap_or_else(|| panic!("{name}: no tensor {tensor}"));
        ranged.set_dynamic_range(t, -amax, *amax).unwrap();
    }
    assert_eq!(run(kiln::Builder::new(&cpu).build(&ranged, &int8_config(None, &cache)).unwrap()), calibrated, "{name}: ranges set on the network");
    let out = kiln::Builder::new(&cpu).build_with_report(&net, &int8_config(None, &cache)).unwrap();
    assert!(out.log.iter().any(|l| l.contains("stays in float: tensor")), "{name}: {:?}", out.log);
    assert_eq!(run(out.engine), full, "{name}: without ranges nothing is quantized");
}

#[test]
fn cnn_torchscript_in_int8() {
    check_int8("cnn_torchscript", 0.05);
}

#[test]
fn bert_dynamo_in_int8() {
    check_int8("bert_dynamo", 0.25);
}

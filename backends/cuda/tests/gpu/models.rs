//! The PyTorch-exported models of `tests/data/pytorch/` built for cuda (through the builder
//! and its passes: Fused and Attention layers) against PyTorch's outputs stored beside them.

use crate::common::{backend, exact_f32_config, worst_error};
use crate::pytorch_data::reference_model;

/// The model built with every float layer constrained to `precision` (f16/bf16 kernels and
/// cuBLASLt's 16-bit tensor-core products): within `tolerance` of PyTorch's f32 outputs, and
/// not identical to kiln's own f32 run (something was reduced).
fn check_reduced(name: &str, precision: kiln::DataType, tolerance: f64) {
    let Some(cuda) = backend() else { return };
    let (mut net, inputs, arrays) = reference_model(name);
    let run = |engine| kiln::ExecutionContext::new(engine, cuda).expect("prepare").run(&inputs).expect("run");
    let full = run(kiln::Builder::new(cuda).build(&net, &exact_f32_config()).expect("f32 build"));
    for i in 0..net.layers().len() {
        if kiln::precision::is_float_compute(&net.layers()[i].kind) {
            net.set_layer_precision(kiln::LayerId(i), precision).unwrap();
        }
    }
    let mut config = kiln::BuilderConfig::default();
    config.set_flag(if precision == kiln::DataType::F16 { kiln::BuilderFlag::Fp16 } else { kiln::BuilderFlag::Bf16 });
    config.set_flag(kiln::BuilderFlag::PreferPrecisionConstraints);
    let out = kiln::Builder::new(cuda).build_with_report(&net, &config).unwrap_or_else(|e| panic!("{name}: {e}"));
    let reduced_layers = out.log.iter().filter(|l| l.ends_with(&format!("computes in {precision}"))).count();
    assert!(reduced_layers > 0, "{name}: no layer runs in {precision}");
    let reduced = run(out.engine);
    for (output, want) in &arrays {
        let got = &reduced[output];
        assert_eq!(got.shape(), want.shape(), "{name}/{output}");
        let worst = worst_error(got, want);
        eprintln!("{name}/{output} in {precision}: worst relative error vs PyTorch f32 {worst:.2e} ({reduced_layers} layers reduced)");
        assert!(worst < tolerance, "{name}/{output}: {precision} relative error {worst}");
        assert!(worst_error(got, &full[output]) > 0.0, "{name}/{output}: identical to f32, nothing was reduced");
    }
}

#[test]
fn cnn_torchscript_in_f16() {
    check_reduced("cnn_torchscript", kiln::DataType::F16, 1e-3);
}

#[test]
fn cnn_dynamo_in_bf16() {
    check_reduced("cnn_dynamo", kiln::DataType::BF16, 1e-2);
}

#[test]
fn bert_torchscript_in_f16() {
    check_reduced("bert_torchscript", kiln::DataType::F16, 1e-2);
}

#[test]
fn bert_dynamo_in_bf16() {
    check_reduced("bert_dynamo", kiln::DataType::BF16, 3e-2);
}

fn check_model(name: &str) {
    let Some(cuda) = backend() else { return };
    let (net, inputs, arrays) = reference_model(name);
    let engine = kiln::Builder::new(cuda).build(&net, &exact_f32_config()).unwrap_or_else(|e| panic!("{name}: build failed: {e}"));
    let ctx = kiln::ExecutionContext::new(engine, cuda).expect("prepare");
    let started = std::time::Instant::now();
    let outputs = ctx.run(&inputs).unwrap_or_else(|e| panic!("{name}: run failed: {e}"));
    let first = started.elapsed();
    let started = std::time::Instant::now();
    let again = ctx.run(&inputs).unwrap_or_else(|e| panic!("{name}: second run failed: {e}"));
    let second = started.elapsed();
    assert!(!arrays.is_empty(), "{name}: no expected outputs");
    for (output, want) in arrays {
        let got = outputs.get(&output).unwrap_or_else(|| panic!("{name}: no output `{output}`"));
        assert_eq!(got.shape(), want.shape(), "{name}/{output}");
        let worst = worst_error(got, &want);
        eprintln!("{name}/{output}: worst relative error vs PyTorch {worst:.2e}; run {first:?} (first), {second:?} (second, host-timed)");
        assert!(worst < 1e-4, "{name}/{output}: relative error {worst}");
        assert_eq!(again.get(&output), Some(got), "{name}/{output}: a second run differs");
    }
}

#[test]
fn cnn_torchscript() {
    check_model("cnn_torchscript");
}

#[test]
fn cnn_dynamo() {
    check_model("cnn_dynamo");
}

#[test]
fn bert_torchscript() {
    check_model("bert_torchscript");
}

#[test]
fn bert_dynamo() {
    check_model("bert_dynamo");
}

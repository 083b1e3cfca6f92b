//! The PyTorch-exported CNN and mini-BERT (`tests/data/pytorch/`) built for f16
//! (`BuilderFlag::Fp16`, every float layer constrained to f16) on the wgpu backend, with f16
//! tensors stored as halves and as f32 words, against the cpu backend built the same way:
//! within the fp16 tier. Prints each model's time per execution in both storages.

#[allow(dead_code)]
#[path = "../../../engine/onnx/tests/common/pytorch_data.rs"]
mod pytorch_data;

use kiln::{Backend, BuilderConfig, BuilderFlag, DataType, ExecutionContext, HostTensor, LayerId, Network};
use kiln_wgpu::WgpuBackend;
use pytorch_data::{reference_model, worst_error};
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

/// The model with every float-computing layer constrained to f16, and its inputs.
fn f16_model(name: &str) -> (Network, HashMap<String, HostTensor>) {
    let (mut net, inputs, _) = reference_model(name);
    for i in 0..net.layers().len() {
        if kiln::precision::is_float_compute(&net.layers()[i].kind) {
            net.set_layer_precision(LayerId(i), DataType::F16).expect("precision");
        }
    }
    (net, inputs)
}

type Outputs = BTreeMap<String, HostTensor>;

/// Builds for f16 on `backend`; the outputs and the best time per execution of a few.
fn run_f16(backend: &dyn Backend, net: &Network, inputs: &HashMap<String, HostTensor>) -> (Outputs, f64, usize) {
    let mut config = BuilderConfig::default();
    config.set_flag(BuilderFlag::Fp16);
    config.set_flag(BuilderFlag::PreferPrecisionConstraints);
    let out = kiln::Builder::new(backend).build_with_report(net, &config).expect("f16 build");
    let f16_layers = out.log.iter().filter(|l| l.ends_with("computes in f16")).count();
    let context = ExecutionContext::new(out.engine, backend).expect("prepare");
    let outputs = context.run(inputs).expect("run");
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let start = Instant::now();
        context.run(inputs).expect("run");
        best = best.min(start.elapsed().as_secs_f64() * 1e3);
    }
    (outputs, best, f16_layers)
}

fn check(name: &str, tolerance: f64) {
    if let Err(e) = kiln_wgpu::device::shared() {
        return eprintln!("SKIPPED: no wgpu adapter/driver: {e}");
    }
    let (net, inputs) = f16_model(name);
    let (want, cpu_ms, f16_layers) = run_f16(&kiln_cpu::CpuBackend::new(), &net, &inputs);
    assert!(f16_layers > 0, "{name}: no layer computes in f16");
    for (backend, storage) in [(WgpuBackend::new(), "halves"), (WgpuBackend::without_f16_storage(), "f32 words")] {
        let (got, ms, _) = run_f16(&backend, &net, &inputs);
        eprintln!("{name} fp16 ({f16_layers} f16 layers): wgpu with f16 as {storage}: {ms:.2} ms; cpu {cpu_ms:.2} ms");
        assert_eq!(got.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>(), "{name}: outputs");
        for (output, w) in &want {
            let g = &got[output];
            assert_eq!((g.dtype(), g.shape()), (w.dtype(), w.shape()), "{name}/{output} ({storage})");
            let worst = worst_error(g, w);
            assert!(worst < tolerance, "{name}/{output} ({storage}): relative error {worst} against cpu in f16");
        }
    }
}

#[test]
fn cnn_in_f16_matches_cpu() {
    check("cnn_torchscript", 1e-2);
}

#[test]
fn bert_in_f16_matches_cpu() {
    check("bert_torchscript", 2e-2);
}

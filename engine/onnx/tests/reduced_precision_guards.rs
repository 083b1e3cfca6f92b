//! `F.normalize` as PyTorch's two exporters write it (`x / clamp_min(‖x‖₂, 1e-12)`, the guard a
//! Clip with a constant minimum or a Max with a constant), every layer constrained to f16: f16
//! cannot hold 1e-12, and flushed to zero it made a zero row 0/0 (Swin V2's padded window
//! tokens, zoo cases tv.swin_v2_*). The builder keeps the guard nonzero and says so.

mod common;

use common::*;
use kiln::{BuilderConfig, BuilderFlag, DataType, ExecutionContext, HostTensor, LayerId};
use std::collections::HashMap;

fn normalize(guard: &str) -> kiln_onnx::proto::ModelProto {
    let graph = Graph::new()
        .input("x", F32, "2,3")
        .init(tensor_f32("eps", &[], &[1e-12]))
        .node(node("ReduceL2", &["x"], &["norm"]).ints("axes", &[1]).int("keepdims", 1))
        .node(match guard {
            "Clip" => node("Clip", &["norm", "eps"], &["guarded"]),
            _ => node("Max", &["norm", "eps"], &["guarded"]),
        })
        .node(node("Div", &["x", "guarded"], &["y"]))
        .output("y");
    graph.model(13)
}

#[test]
fn a_normalize_guard_survives_f16_from_either_exporter() {
    for guard in ["Clip", "Max"] {
        let mut net = import(&normalize(guard));
        for i in 0..net.layers().len() {
            if kiln::precision::is_float_compute(&net.layers()[i].kind) {
                net.set_layer_precision(LayerId(i), DataType::F16).unwrap();
            }
        }
        let mut config = BuilderConfig::default();
        config.set_flag(BuilderFlag::Fp16);
        config.set_flag(BuilderFlag::ObeyPrecisionConstraints);
        let backend = kiln_cpu::CpuBackend::new();
        let out = kiln::Builder::new(&backend).build_with_report(&net, &config).unwrap_or_else(|e| panic!("{guard}: {e}"));
        assert!(out.warnings.iter().any(|w| w.contains("smallest subnormal")), "{guard}: {:?}", out.warnings);
        let x = HostTensor::from_f32(vec![2, 3], vec![0.0, 0.0, 0.0, 3.0, 0.0, 4.0]).unwrap();
        let inputs: HashMap<String, HostTensor> = [("x".to_string(), x)].into();
        let y = &ExecutionContext::new(out.engine, &backend).unwrap().run(&inputs).unwrap()["y"];
        let h = |v: f32| f64::from(half::f16::from_f32(v).to_f32());
        assert_eq!(y.to_f64_vec(), vec![0.0, 0.0, 0.0, h(0.6), 0.0, h(0.8)], "{guard}");
    }
}

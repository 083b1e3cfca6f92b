//! The PyTorch-exported reference models (`tests/data/pytorch/`) built with every layer
//! constrained to f16 or bf16 (PREFER_PRECISION_CONSTRAINTS): the precision pass must keep
//! real graphs (shape arithmetic, reshapes, gathers, attention) valid, and the results
//! must stay within reduced-precision tolerance of onnxruntime's f32 outputs while
//! differing from kiln's own f32 results.

mod common;

use common::pytorch_data::{data_dir, read_npz, worst_error};
use kiln::{BuilderConfig, BuilderFlag, DataType, HostTensor, LayerId};
use std::collections::HashMap;

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

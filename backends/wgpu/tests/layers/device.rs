//! The device layer: fingerprint, limits respected with clear errors, unsupported
//! layers refused by name, and the Backend through the builder and an execution context.

use crate::common::*;
use kiln::{Backend, BackendError, Builder, BuilderConfig, DataType, ExecutionContext, LayerKind, Network, Shape};
use kiln_wgpu::{device, DeviceError};

#[test]
fn fingerprint_names_the_adapter() {
    let Some(gpu) = gpu() else { return };
    let fp = gpu.device().unwrap();
    assert_eq!(fp.backend, "wgpu");
    assert!(!fp.name.is_empty());
    assert!(fp.compute_capability.contains('/'), "{}", fp.compute_capability);
    eprintln!("wgpu adapter: {fp:?}");
}

#[test]
fn a_buffer_beyond_the_binding_limit_is_refused() {
    let Some(_) = gpu() else { return };
    let shared = device::shared().unwrap();
    let limit = shared.max_binding();
    match shared.storage("a huge tensor", limit + 4) {
        Err(DeviceError::LimitExceeded { needed, limit: l, .. }) => {
            assert_eq!(needed, limit + 4);
            assert_eq!(l, limit);
        }
        other => panic!("expected LimitExceeded, got {other:?}"),
    }
}

#[test]
fn layers_the_kernels_cannot_run_are_refused_by_name() {
    let Some(gpu) = gpu() else { return };
    let operand = || In::Run(rand_f32(&mut rng(40), &[3], 0.0, 1.0));
    let (net, _) = one_layer(LayerKind::Einsum { equation: "i,i,i->".into() }, vec![operand(), operand(), operand()]);
    match gpu.check_support(&net) {
        Err(BackendError::Unsupported { kind, reason, .. }) => {
            assert_eq!(kind, "Einsum");
            assert!(reason.contains("one or two"), "{reason}");
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
}

#[test]
fn i64_values_beyond_i32_are_refused_on_upload() {
    let Some(gpu) = gpu() else { return };
    let x = i64s(&[2], &[1, 1 << 40]);
    let (net, feeds) = one_layer(LayerKind::Unary { op: kiln::UnaryOp::Neg }, vec![In::Run(x)]);
    let err = gpu.prepare(&net).unwrap().execute(&feeds).unwrap_err().to_string();
    assert!(err.contains("does not fit in i32"), "{err}");
}

#[test]
fn builds_and_runs_through_an_execution_context() {
    let Some(gpu) = gpu() else { return };
    let mut net = Network::new("mlp");
    let x = net.add_input("x", DataType::F32, Shape::fixed(&[4, 16])).unwrap();
    let mut r = rng(41);
    let w = net.add_weights(rand_f32(&mut r, &[16, 8], -1.0, 1.0));
    let w = net.add_layer("w", LayerKind::Constant { weights: w }, vec![]).unwrap();
    let w = net.output(w, 0);
    let y = net.add_matrix_multiply(x, kiln::MatrixOp::None, w, kiln::MatrixOp::None).unwrap();
    let y = net.output(y, 0);
    let y = net.add_activation(y, kiln::ActivationKind::Relu).unwrap();
    let y = net.output(y, 0);
    let s = net.add_softmax_axis(y, 1).unwrap();
    let s = net.output(s, 0);
    net.mark_output(s).unwrap();
    let engine = Builder::new(&gpu).build(&net, &BuilderConfig::default()).expect("build");
    let ctx = ExecutionContext::new(engine, &gpu).expect("context");
    let feeds: std::collections::HashMap<String, kiln::HostTensor> =
        [("x".to_string(), rand_f32(&mut r, &[4, 16], -1.0, 1.0))].into();
    let got = ctx.run(&feeds).expect("run");
    let cpu = kiln_cpu::CpuBackend::new();
    let engine = Builder::new(&cpu).build(&net, &BuilderConfig::default()).expect("build");
    let want = ExecutionContext::new(engine, &cpu).unwrap().run(&feeds).unwrap();
    let (g, w) = (got.values().next().unwrap(), want.values().next().unwrap());
    assert_close(g, w, 1e-5, 1e-6, "mlp");
}

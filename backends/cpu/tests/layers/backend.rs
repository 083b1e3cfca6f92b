use crate::common::*;
use kiln::{
    Backend, BackendError, BuildError, Builder, BuilderConfig, CoordinateTransformation, DataType, Engine,
    ExecutionContext, LayerKind, NearestRounding, Network, ReduceOp, ResizeMode, ResizeParams, Shape,
};
use kiln_cpu::CpuBackend;
use std::collections::HashMap;

#[test]
fn device_fingerprint_names_the_architecture() {
    let d = CpuBackend::new().device().unwrap();
    assert_eq!(d.backend, "cpu");
    assert_eq!(d.compute_capability, std::env::consts::ARCH);
    assert!(d.name.starts_with(std::env::consts::ARCH) && d.name.contains("threads"), "{}", d.name);
    assert_eq!(CpuBackend::new().name(), "cpu");
}

fn assert_unsupported(kind: LayerKind, inputs: Vec<In>, expected_kind: &str) {
    match try_run(kind, inputs) {
        Err(Failure::Build(BuildError::Backend(BackendError::Unsupported { backend, layer, kind, reason }))) => {
            assert_eq!((backend.as_str(), layer.as_str(), kind.as_str()), ("cpu", "layer", expected_kind));
            assert!(!reason.is_empty());
        }
        other => panic!("expected an Unsupported build error, got {other:?}"),
    }
}

#[test]
fn check_support_rejects_type_combinations_without_meaning() {
    let flags = || In::Run(bools(&[2], &[true, false]));
    assert_unsupported(
        LayerKind::Reduce { op: ReduceOp::Sum, axes: vec![0], keep_dims: false },
        vec![flags()],
        "Reduce",
    );
    assert_unsupported(
        LayerKind::CumulativeSum { exclusive: false, reverse: false },
        vec![flags(), In::Const(i64s(&[], &[0]))],
        "Cumulative",
    );
    assert_unsupported(
        LayerKind::CumulativeProduct { exclusive: false, reverse: false },
        vec![flags(), In::Const(i64s(&[], &[0]))],
        "CumulativeProduct",
    );
    assert_unsupported(
        LayerKind::Quantize { axis: None, to: DataType::F32 },
        vec![In::Run(f32s(&[2], &[1.0, 2.0])), In::Const(f32s(&[], &[1.0]))],
        "Quantize",
    );
    assert_unsupported(
        LayerKind::Dequantize { axis: None, to: None },
        vec![In::Run(f32s(&[2], &[1.0, 2.0])), In::Const(f32s(&[], &[1.0]))],
        "Dequantize",
    );
    let params = ResizeParams {
        mode: ResizeMode::Linear,
        coordinate_transformation: CoordinateTransformation::HalfPixel,
        nearest_rounding: NearestRounding::RoundPreferFloor,
        cubic_coeff_a: -0.75,
        exclude_outside: false,
        extrapolation_value: 0.0,
        axes: None,
    };
    assert_unsupported(LayerKind::Resize(params), vec![flags(), In::Absent, In::Const(f32s(&[1], &[2.0]))], "Resize");
}

#[test]
fn engines_survive_serialization_and_run_from_several_threads() {
    let mut net = Network::new("roundtrip");
    let x = net.add_input("x", DataType::F32, Shape::fixed(&[2, 2])).unwrap();
    let c = net.add_constant(&[2, 2], kiln::TensorData::F32(vec![1.0, 2.0, 3.0, 4.0])).unwrap();
    let c = net.output(c, 0);
    let sum = net.add_elementwise(x, c, kiln::ElementwiseOp::Prod).unwrap();
    let y = net.output(sum, 0);
    net.set_tensor_name(y, "y").unwrap();
    net.mark_output(y).unwrap();
    let backend = CpuBackend::new();
    let bytes = Builder::new(&backend).build(&net, &BuilderConfig::default()).unwrap().serialize();
    let engine = Engine::deserialize(&bytes).unwrap();
    let ctx = ExecutionContext::new(engine, &backend).unwrap();
    std::thread::scope(|s| {
        for k in 0..3 {
            let ctx = &ctx;
            s.spawn(move || {
                let feeds = HashMap::from([("x".to_string(), f32s(&[2, 2], &[k as f32; 4]))]);
                let out = ctx.run(&feeds).unwrap();
                let k = k as f64;
                assert_close(&out["y"], DataType::F32, &[2, 2], &[k, 2.0 * k, 3.0 * k, 4.0 * k], 0.0);
            });
        }
    });
}

#[test]
fn errors_name_the_failing_layer_and_keep_running_later_calls() {
    let kind = LayerKind::Gather { mode: kiln::GatherMode::Default { axis: 0 } };
    let reason = run_err(kind.clone(), vec![In::Run(f32s(&[3], &[1.0, 2.0, 3.0])), In::Run(ints(&[3]))]);
    assert!(reason.contains("out of range"), "{reason}");
    let ok = run1(kind, vec![In::Run(f32s(&[3], &[1.0, 2.0, 3.0])), In::Run(ints(&[-1]))]);
    assert_close(&ok, DataType::F32, &[1], &[3.0], 0.0);
}

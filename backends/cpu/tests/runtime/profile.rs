//! Per-layer profiles on the cpu reference: every layer that runs a kernel is timed, layers
//! computed without one (constants, shapes) are not, and a profile run gives the same
//! outputs as a plain one.

use super::*;
use kiln::runtime::layer_profile::LayerProfile;
use std::collections::HashMap;

/// `y = relu(x) · w + reshape(x, shape(x))`: a constant and a Shape layer beside kernels.
fn mixed_net() -> Network {
    let mut net = Network::new("mixed");
    let x = net.add_input("x", DataType::F32, Shape::fixed(&[4, 4])).unwrap();
    let a = net.add_activation(x, ActivationKind::Relu).unwrap();
    let w = net.add_constant(&[4, 4], TensorData::F32((0..16).map(|i| i as f32 * 0.1).collect())).unwrap();
    let m = net.add_matrix_multiply(net.output(a, 0), MatrixOp::None, net.output(w, 0), MatrixOp::None).unwrap();
    let s = net.add_shape(x).unwrap();
    let params = ShuffleParams { reshape: Some(Vec::new()), ..Default::default() };
    let r = net.add_layer("reshape", LayerKind::Shuffle(params), vec![Some(x), Some(net.output(s, 0))]).unwrap();
    let y = net.add_elementwise(net.output(m, 0), net.output(r, 0), ElementwiseOp::Sum).unwrap();
    net.set_tensor_name(net.output(y, 0), "y").unwrap();
    net.mark_output(net.output(y, 0)).unwrap();
    net
}

#[test]
fn a_profile_run_times_every_kernel_and_nothing_else() {
    let backend = CpuBackend::new();
    let config = BuilderConfig { optimization: Optimization::None, ..BuilderConfig::default() };
    let engine = Builder::new(&backend).build(&mixed_net(), &config).expect("build");
    let ctx = PreparedEngine::new(engine, &backend).expect("prepare").create_execution_context();
    let x = HostTensor::from_f32(vec![4, 4], input_values(16, 0.5)).unwrap();
    let inputs = HashMap::from([("x".to_string(), x)]);
    let times = ctx.profile_layers(&inputs).expect("profile").expect("cpu times layers");
    let net = ctx.engine().network();
    assert_eq!(times.0.len(), net.layers().len());
    for (layer, time) in net.layers().iter().zip(&times.0) {
        let kernel_free = matches!(layer.kind, LayerKind::Constant { .. } | LayerKind::Shape);
        assert_eq!(time.is_none(), kernel_free, "layer `{}` ({}): {time:?}", layer.name, layer.kind.type_name());
    }
    let profile = LayerProfile::summarize(ctx.engine(), &[times.clone(), times]);
    assert_eq!(profile.runs, 2);
    assert_eq!(profile.layers.len(), net.layers().iter().filter(|l| !matches!(l.kind, LayerKind::Constant { .. } | LayerKind::Shape)).count());
    assert!((profile.layers.iter().map(|r| r.percent).sum::<f64>() - 100.0).abs() < 1e-9);
    assert!(profile.to_text().contains("[MatrixMultiply]"), "{}", profile.to_text());
}

#[test]
fn a_profile_run_checks_its_inputs_as_a_plain_run_does() {
    let prepared = prepare(&chain_net(n()), vec![profile(1, 2, 4)]);
    let ctx = prepared.create_execution_context();
    let wrong = HostTensor::from_f32(vec![8, 16], input_values(128, 0.0)).unwrap();
    let err = ctx.profile_layers(&HashMap::from([("x".to_string(), wrong)])).expect_err("batch 8 is outside the profile");
    assert!(matches!(err, RunError::ShapeOutOfProfile { .. }), "{err}");
}

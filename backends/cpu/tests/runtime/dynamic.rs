//! Dynamic shapes: runs at a profile's min, opt and max; rejection outside it; several
//! profiles; output shapes before running; shape tensors.

use crate::*;
use std::collections::HashMap;

#[test]
fn runs_at_min_opt_and_max_match_fixed_shape_engines() {
    let prepared = prepare(&chain_net(n()), vec![profile(1, 4, 8)]);
    let mut ctx = prepared.create_execution_context();
    for batch in [1, 4, 8] {
        let (x, y) = run_batch(&mut ctx, batch, batch as f32);
        assert_eq!(y, expected_chain(&x), "batch {batch}");
        // The same rows through an engine built for exactly this batch.
        let fixed = ExecutionContext::new(
            Builder::new(&CpuBackend::new()).build(&chain_net(Dim::Fixed(batch)), &BuilderConfig::default()).unwrap(),
            &CpuBackend::new(),
        )
        .unwrap();
        let input = HostTensor::from_f32(vec![batch, 16], x).unwrap();
        let out = fixed.run(&HashMap::from([("x".to_string(), input)])).unwrap();
        assert_eq!(out["y"].as_f32().unwrap(), y.as_slice(), "batch {batch}");
    }
}

#[test]
fn shapes_outside_the_profile_are_rejected_with_input_axis_and_bounds() {
    let prepared = prepare(&chain_net(n()), vec![profile(2, 4, 8)]);
    let mut ctx = prepared.create_execution_context();
    let err = ctx.set_input_shape("x", &[9, 16]).unwrap_err();
    assert_eq!(err, RunError::ShapeOutOfProfile { input: "x".into(), axis: 0, value: 9, min: 2, max: 8, profile: 0 });
    assert_eq!(err.to_string(), "input `x` axis 0 is 9, outside [2, 8] of optimization profile 0");
    assert!(matches!(ctx.set_input_shape("x", &[1, 16]), Err(RunError::ShapeOutOfProfile { value: 1, .. })));
    let err = ctx.set_input_shape("x", &[4, 15]).unwrap_err();
    assert!(err.to_string().contains("axis 1 must be 16"), "{err}");
    let err = ctx.set_input_shape("x", &[4]).unwrap_err();
    assert!(err.to_string().contains("rank 1 instead of 2"), "{err}");
    let err = ctx.set_input_shape("w", &[4, 16]).unwrap_err();
    assert!(matches!(err, RunError::UnknownInput { .. }), "{err}");
    // The one-call path checks the profile too.
    let big = HostTensor::zeros(DataType::F32, vec![9, 16]);
    let err = ctx.run(&HashMap::from([("x".to_string(), big)])).unwrap_err();
    assert!(matches!(err, RunError::ShapeOutOfProfile { value: 9, .. }), "{err}");
}

#[test]
fn two_profiles_in_one_engine() {
    let prepared = prepare(&chain_net(n()), vec![profile(1, 2, 4), profile(16, 24, 32)]);
    let mut ctx = prepared.create_execution_context();
    assert!(matches!(ctx.set_input_shape("x", &[20, 16]), Err(RunError::ShapeOutOfProfile { max: 4, profile: 0, .. })));
    ctx.set_optimization_profile(1).unwrap();
    assert_eq!(ctx.tensor_shape("x").unwrap(), vec![-1, 16], "switching profiles clears the shapes");
    let (x, y) = run_batch(&mut ctx, 20, 0.5);
    assert_eq!(y, expected_chain(&x));
    assert!(matches!(ctx.set_input_shape("x", &[3, 16]), Err(RunError::ShapeOutOfProfile { min: 16, profile: 1, .. })));
    assert_eq!(ctx.set_optimization_profile(2), Err(RunError::NoSuchProfile { index: 2, count: 2 }));
    // A second context keeps its own profile.
    let mut other = prepared.create_execution_context();
    assert_eq!(other.optimization_profile(), 0);
    let (x, y) = run_batch(&mut other, 3, 0.25);
    assert_eq!(y, expected_chain(&x));
}

#[test]
fn output_shapes_are_known_before_running() {
    let mut net = chain_net(n());
    // A second output whose shape follows from the input's: the row sums, [N, 1].
    let y = net.find_tensor("y").unwrap();
    let sum = net.add_reduce(y, ReduceOp::Sum, &[1], true).unwrap();
    net.set_tensor_name(net.output(sum, 0), "row_sums").unwrap();
    net.mark_output(net.output(sum, 0)).unwrap();
    let prepared = prepare(&net, vec![profile(1, 4, 8)]);
    let mut ctx = prepared.create_execution_context();
    assert_eq!(ctx.tensor_shape("y").unwrap(), vec![-1, 16]);
    assert_eq!(ctx.tensor_shape("row_sums").unwrap(), vec![-1, 1]);
    assert!(!ctx.all_input_shapes_specified());
    ctx.set_input_shape("x", &[6, 16]).unwrap();
    assert!(ctx.all_input_shapes_specified());
    assert_eq!(ctx.tensor_shape("y").unwrap(), vec![6, 16]);
    assert_eq!(ctx.tensor_shape("row_sums").unwrap(), vec![6, 1]);
    let err = ctx.tensor_shape("relu").unwrap_err();
    assert!(matches!(err, RunError::UnknownTensor { .. }), "{err}");
}

#[test]
fn shape_tensor_values_size_the_outputs() {
    let mut net = Network::new("fill");
    let dims = net.add_input("dims", DataType::I64, [2]).unwrap();
    let value = HostTensor::scalar(TensorData::F32(vec![1.5])).unwrap();
    let fill = net.add_layer("fill", LayerKind::Fill { value }, vec![Some(dims)]).unwrap();
    net.set_tensor_name(net.output(fill, 0), "y").unwrap();
    net.mark_output(net.output(fill, 0)).unwrap();
    let mut p = OptimizationProfile::new();
    p.set_shape_values("dims", &[1, 1], &[2, 2], &[4, 8]);
    let prepared = prepare(&net, vec![p]);
    let mut ctx = prepared.create_execution_context();
    assert_eq!(ctx.tensor_shape("y").unwrap(), vec![-1, -1]);
    let err = ctx.set_shape_tensor_values("dims", &[5, 2]).unwrap_err();
    assert_eq!(
        err,
        RunError::ShapeValueOutOfProfile { input: "dims".into(), index: 0, value: 5, min: 1, max: 4, profile: 0 }
    );
    let stream = Stream::new().unwrap();
    let out = Buffer::new(3 * 7 * 4);
    ctx.set_tensor_address("y", out.clone()).unwrap();
    assert_eq!(ctx.enqueue(&stream, None), Err(RunError::ShapeValuesNotSet { input: "dims".into() }));
    ctx.set_shape_tensor_values("dims", &[3, 7]).unwrap();
    assert_eq!(ctx.tensor_shape("y").unwrap(), vec![3, 7]);
    ctx.enqueue(&stream, None).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(read_f32(&out, &[3, 7]), vec![1.5; 21]);
    // Enqueue reuses its shape inference only while nothing changes: new values re-size.
    ctx.set_shape_tensor_values("dims", &[4, 8]).unwrap();
    assert!(matches!(ctx.enqueue(&stream, None), Err(RunError::BufferTooSmall { needed: 128, .. })));
    ctx.set_shape_tensor_values("dims", &[2, 2]).unwrap();
    ctx.enqueue(&stream, None).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(read_f32(&out, &[2, 2]), vec![1.5; 4]);
}

//! Loop semantics (seeds §10.2) against hand-computed results.

use crate::common::*;
use kiln::{BuilderConfig, DataType, ElementwiseOp, HostTensor, LoopOutputKind, Network, TensorData, TripLimitKind};

/// The seeds' `for (i = j; i < 10; i += k)`: a recurrence and a WHILE limit. With j = 1 and
/// k = 3 the sequence of i is ⟨1, 4, 7, 10, …⟩, so n = 3 (the least n with i_n < 10 false),
/// LAST_VALUE gives i_3 = 10 and CONCATENATE gives ⟨i_0, i_1, i_2⟩.
#[test]
fn for_loop_recurrence_with_while_limit() {
    let mut n = Network::new("for");
    let j = input(&mut n, "j", DataType::I32, &[]);
    let k = input(&mut n, "k", DataType::I32, &[]);
    let ten = constant(&mut n, &[], TensorData::I32(vec![10]));
    let looping = n.add_loop();
    let rec = n.add_recurrence(looping, j).unwrap();
    let i = n.output(rec, 0);
    let next = n.add_elementwise(i, k, ElementwiseOp::Sum).unwrap();
    n.set_recurrence_next(rec, n.output(next, 0)).unwrap();
    let more = n.add_elementwise(i, ten, ElementwiseOp::Less).unwrap();
    n.add_trip_limit(looping, n.output(more, 0), TripLimitKind::While).unwrap();
    let last = n.add_loop_output(looping, i, LoopOutputKind::LastValue, 0).unwrap();
    let all = n.add_loop_output(looping, i, LoopOutputKind::Concatenate, 0).unwrap();
    let (last, all) = (n.output(last, 0), n.output(all, 0));
    n.mark_output(last).unwrap();
    n.mark_output(all).unwrap();
    let outs = try_run(&n, &[("j", i32_scalar(1)), ("k", i32_scalar(3))]).unwrap();
    assert_eq!(values(&outs[&n.tensor(last).name]), [10.0]);
    let stacked = &outs[&n.tensor(all).name];
    assert_eq!(stacked.shape(), [3]);
    assert_eq!(values(stacked), [1.0, 4.0, 7.0]);
    // A condition false from the start: zero trips, the last value is the initial one.
    let outs = try_run(&n, &[("j", i32_scalar(12)), ("k", i32_scalar(3))]).unwrap();
    assert_eq!(values(&outs[&n.tensor(last).name]), [12.0]);
    assert_eq!(outs[&n.tensor(all).name].shape(), [0]);
}

/// Iterates the seeds' matrix [[2,3,5],[4,6,8]] along `axis` (optionally reversed) for
/// `count` trips and stacks the slices with `kind` along `out_axis`.
fn iterate_and_stack(axis: usize, reverse: bool, kind: LoopOutputKind, out_axis: usize, count: i32) -> HostTensor {
    let mut n = Network::new("iterate");
    let m = input(&mut n, "m", DataType::F32, &[2, 3]);
    let trips = constant(&mut n, &[], TensorData::I32(vec![count]));
    let looping = n.add_loop();
    n.add_trip_limit(looping, trips, TripLimitKind::Count).unwrap();
    let it = n.add_iterator(looping, m, axis, reverse).unwrap();
    let slice = n.output(it, 0);
    let out = n.add_loop_output(looping, slice, kind, out_axis).unwrap();
    let out = n.output(out, 0);
    n.mark_output(out).unwrap();
    run_one(&n, &[("m", f32s(&[2, 3], &[2., 3., 5., 4., 6., 8.]))], out)
}

#[test]
fn iterator_axis_0_delivers_rows() {
    let out = iterate_and_stack(0, false, LoopOutputKind::Concatenate, 0, 2);
    assert_eq!(out.shape(), [2, 3]);
    assert_eq!(values(&out), [2., 3., 5., 4., 6., 8.]);
}

#[test]
fn iterator_axis_1_delivers_columns() {
    let out = iterate_and_stack(1, false, LoopOutputKind::Concatenate, 0, 3);
    assert_eq!(out.shape(), [3, 2]);
    assert_eq!(values(&out), [2., 4., 3., 6., 5., 8.]);
}

#[test]
fn reverse_iterator_delivers_the_last_slice_first() {
    let out = iterate_and_stack(1, true, LoopOutputKind::Concatenate, 0, 3);
    assert_eq!(values(&out), [5., 8., 3., 6., 2., 4.]);
}

#[test]
fn concatenate_axis_1_stacks_along_the_new_second_axis() {
    // Rows {2,3,5} and {4,6,8} stacked on axis 1 give the transpose (seeds' a d / b e / c f).
    let out = iterate_and_stack(0, false, LoopOutputKind::Concatenate, 1, 2);
    assert_eq!(out.shape(), [3, 2]);
    assert_eq!(values(&out), [2., 4., 3., 6., 5., 8.]);
}

#[test]
fn reverse_output_stacks_in_reverse_order() {
    let out = iterate_and_stack(0, false, LoopOutputKind::Reverse, 0, 2);
    assert_eq!(values(&out), [4., 6., 8., 2., 3., 5.]);
}

#[test]
fn iterating_past_the_tensor_is_a_run_time_error() {
    let mut n = Network::new("past");
    let m = input(&mut n, "m", DataType::F32, &[2, 3]);
    let trips = constant(&mut n, &[], TensorData::I32(vec![3]));
    let looping = n.add_loop();
    n.add_trip_limit(looping, trips, TripLimitKind::Count).unwrap();
    let it = n.add_iterator(looping, m, 0, false).unwrap();
    let out = n.add_loop_output(looping, n.output(it, 0), LoopOutputKind::Concatenate, 0).unwrap();
    n.mark_output(n.output(out, 0)).unwrap();
    let err = try_run(&n, &[("m", f32s(&[2, 3], &[0.; 6]))]).unwrap_err().to_string();
    assert!(err.contains("iteration 2 is beyond the 2 slices"), "{err}");
}

/// CONCATENATE with a length input: the first n slices, then unspecified padding; a length
/// shorter than the trip count is a run-time error.
fn padded(length: i32, kind: LoopOutputKind) -> Result<HostTensor, String> {
    let mut n = Network::new("padded");
    let x = input(&mut n, "x", DataType::F32, &[2]);
    let trips = constant(&mut n, &[], TensorData::I32(vec![3]));
    let len = constant(&mut n, &[], TensorData::I32(vec![length]));
    let looping = n.add_loop();
    n.add_trip_limit(looping, trips, TripLimitKind::Count).unwrap();
    let rec = n.add_recurrence(looping, x).unwrap();
    let cur = n.output(rec, 0);
    let doubled = n.add_elementwise(cur, cur, ElementwiseOp::Sum).unwrap();
    n.set_recurrence_next(rec, n.output(doubled, 0)).unwrap();
    let out = n.add_loop_output(looping, cur, kind, 0).unwrap();
    n.set_loop_output_length(out, len).unwrap();
    let out = n.output(out, 0);
    n.mark_output(out).unwrap();
    let name = n.tensor(out).name.clone();
    try_run(&n, &[("x", f32s(&[2], &[1., -1.]))]).map(|mut o| o.remove(&name).unwrap()).map_err(|e| e.to_string())
}

#[test]
fn concatenate_pads_to_the_length() {
    let out = padded(5, LoopOutputKind::Concatenate).unwrap();
    assert_eq!(out.shape(), [5, 2]);
    assert_eq!(values(&out)[..6], [1., -1., 2., -2., 4., -4.]);
}

#[test]
fn reverse_pads_after_the_reversed_values() {
    let out = padded(4, LoopOutputKind::Reverse).unwrap();
    assert_eq!(out.shape(), [4, 2]);
    assert_eq!(values(&out)[..6], [4., -4., 2., -2., 1., -1.]);
}

#[test]
fn a_length_below_the_trip_count_is_a_run_time_error() {
    let err = padded(2, LoopOutputKind::Concatenate).unwrap_err();
    assert!(err.contains("less than the trip count"), "{err}");
}

/// COUNT and WHILE together: the loop stops at whichever comes first.
#[test]
fn count_and_while_limits_together_stop_at_the_first() {
    for (count, expected) in [(2, 2.0), (10, 4.0)] {
        let mut n = Network::new("both");
        let zero = constant(&mut n, &[], TensorData::I32(vec![0]));
        let one = constant(&mut n, &[], TensorData::I32(vec![1]));
        let four = constant(&mut n, &[], TensorData::I32(vec![4]));
        let trips = constant(&mut n, &[], TensorData::I32(vec![count]));
        let looping = n.add_loop();
        n.add_trip_limit(looping, trips, TripLimitKind::Count).unwrap();
        let rec = n.add_recurrence(looping, zero).unwrap();
        let i = n.output(rec, 0);
        let next = n.add_elementwise(i, one, ElementwiseOp::Sum).unwrap();
        n.set_recurrence_next(rec, n.output(next, 0)).unwrap();
        let more = n.add_elementwise(i, four, ElementwiseOp::Less).unwrap();
        n.add_trip_limit(looping, n.output(more, 0), TripLimitKind::While).unwrap();
        let last = n.add_loop_output(looping, i, LoopOutputKind::LastValue, 0).unwrap();
        let last = n.output(last, 0);
        n.mark_output(last).unwrap();
        assert_eq!(values(&run_one(&n, &[], last)), [expected], "count {count}");
    }
}

/// Row sums of a matrix with a loop over rows holding a loop over the row's elements: the
/// inner loop iterates a value of the outer one, so the builder nests it there.
#[test]
fn nested_loops_sum_each_row() {
    let mut n = Network::new("nested");
    let m = input(&mut n, "m", DataType::F32, &[2, 3]);
    let rows = constant(&mut n, &[], TensorData::I32(vec![2]));
    let cols = constant(&mut n, &[], TensorData::I32(vec![3]));
    let zero = constant(&mut n, &[], TensorData::F32(vec![0.0]));
    let outer = n.add_loop();
    n.add_trip_limit(outer, rows, TripLimitKind::Count).unwrap();
    let row = n.add_iterator(outer, m, 0, false).unwrap();
    let row = n.output(row, 0);
    let inner = n.add_loop();
    n.add_trip_limit(inner, cols, TripLimitKind::Count).unwrap();
    let x = n.add_iterator(inner, row, 0, false).unwrap();
    let acc = n.add_recurrence(inner, zero).unwrap();
    let sum = n.add_elementwise(n.output(acc, 0), n.output(x, 0), ElementwiseOp::Sum).unwrap();
    n.set_recurrence_next(acc, n.output(sum, 0)).unwrap();
    let row_sum = n.add_loop_output(inner, n.output(acc, 0), LoopOutputKind::LastValue, 0).unwrap();
    let sums = n.add_loop_output(outer, n.output(row_sum, 0), LoopOutputKind::Concatenate, 0).unwrap();
    let sums = n.output(sums, 0);
    n.mark_output(sums).unwrap();
    let out = run_one(&n, &[("m", f32s(&[2, 3], &[2., 3., 5., 4., 6., 8.]))], sums);
    assert_eq!(values(&out), [10., 18.]);
}

/// A loop-invariant tensor is replicated: CONCATENATE of it gives n copies.
#[test]
fn loop_invariant_values_are_replicated() {
    let mut n = Network::new("invariant");
    let x = input(&mut n, "x", DataType::F32, &[2]);
    let trips = constant(&mut n, &[], TensorData::I32(vec![3]));
    let looping = n.add_loop();
    n.add_trip_limit(looping, trips, TripLimitKind::Count).unwrap();
    let doubled = n.add_elementwise(x, x, ElementwiseOp::Sum).unwrap();
    let out = n.add_loop_output(looping, n.output(doubled, 0), LoopOutputKind::Concatenate, 0).unwrap();
    let out = n.output(out, 0);
    n.mark_output(out).unwrap();
    let got = run_one(&n, &[("x", f32s(&[2], &[1., 2.]))], out);
    assert_eq!(got.shape(), [3, 2]);
    assert_eq!(values(&got), [2., 4., 2., 4., 2., 4.]);
}

/// Loops are not limited to FP32/FP16: a bool, an i64 and an f16 value through one loop.
#[test]
fn loops_carry_every_data_type() {
    let mut n = Network::new("types");
    let flags = input(&mut n, "flags", DataType::Bool, &[3]);
    let big = input(&mut n, "big", DataType::I64, &[]);
    let half_in = input(&mut n, "half", DataType::F16, &[2]);
    let trips = constant(&mut n, &[], TensorData::I32(vec![3]));
    let looping = n.add_loop();
    n.add_trip_limit(looping, trips, TripLimitKind::Count).unwrap();
    let flag = n.add_iterator(looping, flags, 0, true).unwrap();
    let reversed = n.add_loop_output(looping, n.output(flag, 0), LoopOutputKind::Concatenate, 0).unwrap();
    let acc = n.add_recurrence(looping, big).unwrap();
    let twice = n.add_elementwise(n.output(acc, 0), n.output(acc, 0), ElementwiseOp::Sum).unwrap();
    n.set_recurrence_next(acc, n.output(twice, 0)).unwrap();
    let big_out = n.add_loop_output(looping, n.output(acc, 0), LoopOutputKind::LastValue, 0).unwrap();
    let h = n.add_recurrence(looping, half_in).unwrap();
    let h_next = n.add_elementwise(n.output(h, 0), half_in, ElementwiseOp::Sum).unwrap();
    n.set_recurrence_next(h, n.output(h_next, 0)).unwrap();
    let h_out = n.add_loop_output(looping, n.output(h, 0), LoopOutputKind::LastValue, 0).unwrap();
    let (reversed, big_out, h_out) = (n.output(reversed, 0), n.output(big_out, 0), n.output(h_out, 0));
    for t in [reversed, big_out, h_out] {
        n.mark_output(t).unwrap();
    }
    let feeds = [
        ("flags", HostTensor::new(vec![3], TensorData::Bool(vec![true, false, false])).unwrap()),
        ("big", HostTensor::scalar(TensorData::I64(vec![1 << 40])).unwrap()),
        ("half", HostTensor::new(vec![2], TensorData::F16(vec![half::f16::from_f32(0.5), half::f16::from_f32(-1.0)])).unwrap()),
    ];
    let outs = try_run(&n, &feeds).unwrap();
    assert_eq!(outs[&n.tensor(reversed).name].data(), &TensorData::Bool(vec![false, false, true]));
    assert_eq!(outs[&n.tensor(big_out).name].data(), &TensorData::I64(vec![1 << 43]));
    assert_eq!(values(&outs[&n.tensor(h_out).name]), [2.0, -4.0]);
}

/// A WHILE loop whose condition never turns false stops with an error at the configured
/// maximum trip count, recorded in the engine.
#[test]
fn a_runaway_while_loop_is_an_error_not_a_hang() {
    let mut n = Network::new("runaway");
    let yes = constant(&mut n, &[], TensorData::Bool(vec![true]));
    let zero = constant(&mut n, &[], TensorData::I32(vec![0]));
    let one = constant(&mut n, &[], TensorData::I32(vec![1]));
    let looping = n.add_loop();
    let rec = n.add_recurrence(looping, zero).unwrap();
    let next = n.add_elementwise(n.output(rec, 0), one, ElementwiseOp::Sum).unwrap();
    n.set_recurrence_next(rec, n.output(next, 0)).unwrap();
    n.add_trip_limit(looping, yes, TripLimitKind::While).unwrap();
    let last = n.add_loop_output(looping, n.output(rec, 0), LoopOutputKind::LastValue, 0).unwrap();
    n.mark_output(n.output(last, 0)).unwrap();
    let config = BuilderConfig { max_trip_count: Some(50), ..BuilderConfig::default() };
    let engine = build_with(&n, &config).unwrap();
    assert_eq!(engine.control_flow().max_trip_count, 50);
    let err = run_engine(engine, &[]).unwrap_err().to_string();
    assert!(err.contains("exceeds the maximum trip count of 50"), "{err}");
}

/// Two nested COUNT loops of 40 trips: `x` goes up by one per inner trip.
fn nested_counting_loops() -> (Network, kiln::TensorId) {
    let mut n = Network::new("nested");
    let zero = constant(&mut n, &[], TensorData::I32(vec![0]));
    let one = constant(&mut n, &[], TensorData::I32(vec![1]));
    let forty = constant(&mut n, &[], TensorData::I32(vec![40]));
    let outer = n.add_loop();
    let x = n.add_recurrence(outer, zero).unwrap();
    n.add_trip_limit(outer, forty, TripLimitKind::Count).unwrap();
    let inner = n.add_loop();
    let y = n.add_recurrence(inner, n.output(x, 0)).unwrap();
    let step = n.add_elementwise(n.output(y, 0), one, ElementwiseOp::Sum).unwrap();
    n.set_recurrence_next(y, n.output(step, 0)).unwrap();
    n.add_trip_limit(inner, forty, TripLimitKind::Count).unwrap();
    let y_last = n.add_loop_output(inner, n.output(y, 0), LoopOutputKind::LastValue, 0).unwrap();
    n.set_recurrence_next(x, n.output(y_last, 0)).unwrap();
    let x_last = n.add_loop_output(outer, n.output(x, 0), LoopOutputKind::LastValue, 0).unwrap();
    let out = n.output(x_last, 0);
    n.mark_output(out).unwrap();
    (n, out)
}

/// The trip guard is per loop; nested loops each under it could still run its square.
/// All the loops of one run share a budget of 16 times the guard.
#[test]
fn nested_loops_share_one_iteration_budget_per_run() {
    let (n, out) = nested_counting_loops();
    let within = BuilderConfig { max_trip_count: Some(200), ..BuilderConfig::default() };
    let outs = run_engine(build_with(&n, &within).unwrap(), &[]).unwrap();
    assert_eq!(outs[&n.tensor(out).name].data(), &TensorData::I32(vec![1600]), "40 + 40 x 40 trips fit 16 x 200");
    let over = BuilderConfig { max_trip_count: Some(50), ..BuilderConfig::default() };
    let err = run_engine(build_with(&n, &over).unwrap(), &[]).unwrap_err().to_string();
    assert!(err.contains("the loops of this run exceed 800 iterations together"), "{err}");
}

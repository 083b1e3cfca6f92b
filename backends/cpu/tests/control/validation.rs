//! The seeds' rules for loops and conditionals: each broken one gives an error naming the
//! rule (and the layer), at the API call or when the builder lowers the network.

use crate::common::*;
use kiln::{DataType, ElementwiseOp, LayerId, LoopId, LoopOutputKind, Network, TensorData, TensorId, TripLimitKind};

/// A loop over `x` ([4] f32) with a COUNT limit of 4 and a recurrence summing its slices.
struct SumLoop {
    n: Network,
    looping: LoopId,
    x: TensorId,
    rec: LayerId,
    slice: TensorId,
}

fn sum_loop() -> SumLoop {
    let mut n = Network::new("rules");
    let x = input(&mut n, "x", DataType::F32, &[4]);
    let zero = constant(&mut n, &[], TensorData::F32(vec![0.0]));
    let trips = constant(&mut n, &[], TensorData::I32(vec![4]));
    let looping = n.add_loop();
    n.add_trip_limit(looping, trips, TripLimitKind::Count).unwrap();
    let it = n.add_iterator(looping, x, 0, false).unwrap();
    let slice = n.output(it, 0);
    let rec = n.add_recurrence(looping, zero).unwrap();
    SumLoop { n, looping, x, rec, slice }
}

fn close(s: &mut SumLoop) -> TensorId {
    let cur = s.n.output(s.rec, 0);
    let next = s.n.add_elementwise(cur, s.slice, ElementwiseOp::Sum).unwrap();
    s.n.set_recurrence_next(s.rec, s.n.output(next, 0)).unwrap();
    cur
}

fn assert_has(err: &str, needle: &str) {
    assert!(err.contains(needle), "expected `{needle}` in: {err}");
}

#[test]
fn the_valid_base_network_builds_and_runs() {
    let mut s = sum_loop();
    let cur = close(&mut s);
    let out = s.n.add_loop_output(s.looping, cur, LoopOutputKind::LastValue, 0).unwrap();
    let out = s.n.output(out, 0);
    s.n.mark_output(out).unwrap();
    assert_eq!(values(&run_one(&s.n, &[("x", f32s(&[4], &[1., 2., 3., 4.]))], out)), [10.0]);
}

#[test]
fn at_most_one_trip_limit_of_each_kind() {
    let mut s = sum_loop();
    let again = constant(&mut s.n, &[], TensorData::I32(vec![2]));
    let err = s.n.add_trip_limit(s.looping, again, TripLimitKind::Count).unwrap_err().to_string();
    assert_has(&err, "already has a Count trip limit");
}

#[test]
fn a_loop_needs_a_trip_limit() {
    let mut n = Network::new("unbounded");
    let x = input(&mut n, "x", DataType::F32, &[4]);
    let looping = n.add_loop();
    let it = n.add_iterator(looping, x, 0, false).unwrap();
    let out = n.add_loop_output(looping, n.output(it, 0), LoopOutputKind::Concatenate, 0).unwrap();
    n.mark_output(n.output(out, 0)).unwrap();
    assert_has(&build_error(&n), "has no trip limit");
}

#[test]
fn last_value_input_must_come_from_a_recurrence() {
    let mut s = sum_loop();
    close(&mut s);
    let out = s.n.add_loop_output(s.looping, s.slice, LoopOutputKind::LastValue, 0).unwrap();
    s.n.mark_output(s.n.output(out, 0)).unwrap();
    assert_has(&build_error(&s.n), "LAST_VALUE loop output must be the output of a recurrence");
}

#[test]
fn a_recurrence_initial_value_must_come_from_outside_the_loop() {
    let mut s = sum_loop();
    let cur = close(&mut s);
    let inner = s.n.add_recurrence(s.looping, s.slice).unwrap();
    s.n.set_recurrence_next(inner, s.slice).unwrap();
    let out = s.n.add_loop_output(s.looping, s.n.output(inner, 0), LoopOutputKind::LastValue, 0).unwrap();
    s.n.mark_output(s.n.output(out, 0)).unwrap();
    let other = s.n.add_loop_output(s.looping, cur, LoopOutputKind::LastValue, 0).unwrap();
    s.n.mark_output(s.n.output(other, 0)).unwrap();
    assert_has(&build_error(&s.n), "the first input of a recurrence (its initial value) must come from outside its loop");
}

#[test]
fn a_recurrence_needs_its_next_value() {
    let mut s = sum_loop();
    let out = s.n.add_loop_output(s.looping, s.n.output(s.rec, 0), LoopOutputKind::LastValue, 0).unwrap();
    s.n.mark_output(s.n.output(out, 0)).unwrap();
    assert_has(&build_error(&s.n), "the recurrence has no next value");
}

/// Back edges exist only as a recurrence's input 1: the API offers no other way to point
/// an input at a later layer, and refuses to set a "next value" on any other layer.
#[test]
fn back_edges_only_through_a_recurrence_second_input() {
    let mut s = sum_loop();
    let cur = close(&mut s);
    let sum = s.n.add_elementwise(cur, cur, ElementwiseOp::Sum).unwrap();
    let err = s.n.set_recurrence_next(sum, cur).unwrap_err().to_string();
    assert_has(&err, "is a ElementWise layer, not a Recurrence layer");
}

#[test]
fn values_leave_a_loop_only_through_loop_outputs() {
    let mut s = sum_loop();
    let cur = close(&mut s);
    s.n.mark_output(cur).unwrap();
    assert_has(&build_error(&s.n), "a network output cannot be produced inside loop #0");
}

#[test]
fn loops_that_are_not_cleanly_nested_are_rejected() {
    // Loop A's trip limit reads loop B's interior and B's reads A's: each would be nested
    // in the other.
    let mut n = Network::new("tangled");
    let zero = constant(&mut n, &[], TensorData::I32(vec![0]));
    let one = constant(&mut n, &[], TensorData::I32(vec![1]));
    let three = constant(&mut n, &[], TensorData::I32(vec![3]));
    let a = n.add_loop();
    let b = n.add_loop();
    let ra = n.add_recurrence(a, zero).unwrap();
    let rb = n.add_recurrence(b, zero).unwrap();
    let (ia, ib) = (n.output(ra, 0), n.output(rb, 0));
    let na = n.add_elementwise(ia, one, ElementwiseOp::Sum).unwrap();
    let nb = n.add_elementwise(ib, one, ElementwiseOp::Sum).unwrap();
    n.set_recurrence_next(ra, n.output(na, 0)).unwrap();
    n.set_recurrence_next(rb, n.output(nb, 0)).unwrap();
    let a_more = n.add_elementwise(ib, three, ElementwiseOp::Less).unwrap();
    let b_more = n.add_elementwise(ia, three, ElementwiseOp::Less).unwrap();
    n.add_trip_limit(a, n.output(a_more, 0), TripLimitKind::While).unwrap();
    n.add_trip_limit(b, n.output(b_more, 0), TripLimitKind::While).unwrap();
    let oa = n.add_loop_output(a, ia, LoopOutputKind::LastValue, 0).unwrap();
    let ob = n.add_loop_output(b, ib, LoopOutputKind::LastValue, 0).unwrap();
    n.mark_output(n.output(oa, 0)).unwrap();
    n.mark_output(n.output(ob, 0)).unwrap();
    assert_has(&build_error(&n), "are not cleanly nested");
}

/// Loop C stacks a value computed from the interiors of two sibling loops A and B: C would
/// be nested in both, which are not nested in one another.
#[test]
fn a_loop_reading_two_unrelated_loops_is_rejected() {
    let mut n = Network::new("two-loops");
    let x = input(&mut n, "x", DataType::F32, &[2]);
    let trips = constant(&mut n, &[], TensorData::I32(vec![2]));
    let mut slices = Vec::new();
    for _ in 0..2 {
        let l = n.add_loop();
        n.add_trip_limit(l, trips, TripLimitKind::Count).unwrap();
        let it = n.add_iterator(l, x, 0, false).unwrap();
        slices.push(n.output(it, 0));
    }
    let mixed = n.add_elementwise(slices[0], slices[1], ElementwiseOp::Sum).unwrap();
    let c = n.add_loop();
    n.add_trip_limit(c, trips, TripLimitKind::Count).unwrap();
    let out = n.add_loop_output(c, n.output(mixed, 0), LoopOutputKind::Concatenate, 0).unwrap();
    n.mark_output(n.output(out, 0)).unwrap();
    assert_has(&build_error(&n), "loop #2 uses values defined inside both, and neither is nested in the other");
}

/// The true output is computed from a layer of the false branch: a cross edge.
#[test]
fn no_edges_between_the_branches() {
    let mut n = Network::new("cross");
    let x = input(&mut n, "x", DataType::F32, &[2]);
    let c = input(&mut n, "c", DataType::Bool, &[]);
    let cond = n.add_if_conditional();
    n.set_condition(cond, c).unwrap();
    let xi = n.add_if_input(cond, x).unwrap();
    let xi = n.output(xi, 0);
    let false_value = n.add_elementwise(xi, xi, ElementwiseOp::Sum).unwrap();
    let false_value = n.output(false_value, 0);
    let true_value = n.add_elementwise(false_value, xi, ElementwiseOp::Prod).unwrap();
    let out = n.add_if_output(cond, n.output(true_value, 0), false_value).unwrap();
    n.mark_output(n.output(out, 0)).unwrap();
    assert_has(&build_error(&n), "there must be no edges between the");
}

#[test]
fn branch_outputs_must_agree_in_type_and_shape() {
    let mut n = Network::new("mismatch");
    let x = input(&mut n, "x", DataType::F32, &[5]);
    let y = input(&mut n, "y", DataType::F32, &[3]);
    let z = input(&mut n, "z", DataType::I32, &[5]);
    let c = input(&mut n, "c", DataType::Bool, &[]);
    let cond = n.add_if_conditional();
    n.set_condition(cond, c).unwrap();
    let shape_err = n.add_if_output(cond, x, y).unwrap_err().to_string();
    assert_has(&shape_err, "must have the same type and shape");
    let type_err = n.add_if_output(cond, x, z).unwrap_err().to_string();
    assert_has(&type_err, "must have the same type and shape");
}

#[test]
fn a_condition_must_be_a_bool_scalar() {
    let mut n = Network::new("cond");
    let x = input(&mut n, "x", DataType::F32, &[]);
    let cond = n.add_if_conditional();
    assert_has(&n.set_condition(cond, x).unwrap_err().to_string(), "takes a 0-D bool tensor");
}

#[test]
fn a_conditional_needs_a_condition() {
    let mut n = Network::new("no-cond");
    let x = input(&mut n, "x", DataType::F32, &[2]);
    let cond = n.add_if_conditional();
    let xi = n.add_if_input(cond, x).unwrap();
    let out = n.add_if_output(cond, n.output(xi, 0), x).unwrap();
    n.mark_output(n.output(out, 0)).unwrap();
    assert_has(&build_error(&n), "has no condition");
}

/// An if-conditional inside a loop cannot feed a network output directly.
#[test]
fn a_nested_conditional_cannot_feed_a_network_output() {
    let mut s = sum_loop();
    let cur = close(&mut s);
    let c = input(&mut s.n, "c", DataType::Bool, &[]);
    let cond = s.n.add_if_conditional();
    s.n.set_condition(cond, c).unwrap();
    let slice_in = s.n.add_if_input(cond, s.slice).unwrap();
    let out = s.n.add_if_output(cond, s.n.output(slice_in, 0), s.slice).unwrap();
    s.n.mark_output(s.n.output(out, 0)).unwrap();
    let last = s.n.add_loop_output(s.looping, cur, LoopOutputKind::LastValue, 0).unwrap();
    s.n.mark_output(s.n.output(last, 0)).unwrap();
    assert_has(&build_error(&s.n), "a network output cannot be produced inside loop #0");
}

#[test]
fn the_iterated_tensor_must_come_from_outside_the_loop() {
    let mut s = sum_loop();
    close(&mut s);
    let again = s.n.add_iterator(s.looping, s.n.output(s.rec, 0), 0, false);
    // The recurrence is 0-D, so iterate the slice instead: widen it first.
    assert!(again.is_err());
    let wide = s.n.add_elementwise(s.slice, s.x, ElementwiseOp::Sum).unwrap();
    let it = s.n.add_iterator(s.looping, s.n.output(wide, 0), 0, false).unwrap();
    let out = s.n.add_loop_output(s.looping, s.n.output(it, 0), LoopOutputKind::Concatenate, 0).unwrap();
    s.n.mark_output(s.n.output(out, 0)).unwrap();
    assert_has(&build_error(&s.n), "the tensor an iterator iterates over must come from outside its loop");
}

/// A loop with no outputs has no effect: the builder removes it.
#[test]
fn a_loop_without_outputs_is_removed() {
    let mut s = sum_loop();
    close(&mut s);
    let y = s.n.add_elementwise(s.x, s.x, ElementwiseOp::Sum).unwrap();
    let y = s.n.output(y, 0);
    s.n.mark_output(y).unwrap();
    let engine = build(&s.n).unwrap();
    assert!(engine.network().layers().iter().all(|l| l.kind.type_name() == "ElementWise"), "{}", engine.network().dump());
    assert_eq!(values(&run_one(&s.n, &[("x", f32s(&[4], &[1., 2., 3., 4.]))], y)), [2., 4., 6., 8.]);
}

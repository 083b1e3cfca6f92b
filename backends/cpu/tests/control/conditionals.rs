//! If-conditional semantics (seeds §11) against hand-computed results.

use crate::common::*;
use kiln::{
    DataType, ElementwiseOp, GatherMode, LayerKind, LoopOutputKind, Network, TensorData, TensorId, TripLimitKind,
};

/// The seeds' simple conditional: `x + y` when the condition holds, else `x - y`; the
/// condition is an int constant cast to bool, as in `addCondition`.
fn simple_if(predicate: bool) -> Vec<f64> {
    let mut n = Network::new("simple-if");
    let x = input(&mut n, "x", DataType::F32, &[5]);
    let y = input(&mut n, "y", DataType::F32, &[5]);
    let c = constant(&mut n, &[], TensorData::I32(vec![i32::from(predicate)]));
    let cond = n.add_cast(c, DataType::Bool).unwrap();
    let simple_if = n.add_if_conditional();
    n.set_condition(simple_if, n.output(cond, 0)).unwrap();
    let xi = n.add_if_input(simple_if, x).unwrap();
    let yi = n.add_if_input(simple_if, y).unwrap();
    let (xi, yi) = (n.output(xi, 0), n.output(yi, 0));
    let sum = n.add_elementwise(xi, yi, ElementwiseOp::Sum).unwrap();
    let diff = n.add_elementwise(xi, yi, ElementwiseOp::Sub).unwrap();
    let out = n.add_if_output(simple_if, n.output(sum, 0), n.output(diff, 0)).unwrap();
    let out = n.output(out, 0);
    n.mark_output(out).unwrap();
    let xs = f32s(&[5], &[1., 2., 3., 4., 5.]);
    let ys = f32s(&[5], &[10., 20., 30., 40., 50.]);
    values(&run_one(&n, &[("x", xs), ("y", ys)], out))
}

#[test]
fn simple_if_adds_when_true() {
    assert_eq!(simple_if(true), [11., 22., 33., 44., 55.]);
}

#[test]
fn simple_if_subtracts_when_false() {
    assert_eq!(simple_if(false), [-9., -18., -27., -36., -45.]);
}

/// A conditional whose else branch gathers `x` at index 7, out of range for its 3
/// elements; the then branch adds `x` to itself. `eager_failure` feeds the else
/// output from a failing gather that reads no conditional input (diagram C): it runs
/// eagerly, whatever the condition.
fn guarded_gather(cond: bool, eager_failure: bool) -> Result<Vec<f64>, String> {
    let mut n = Network::new("lazy");
    let x = input(&mut n, "x", DataType::F32, &[3]);
    let c = input(&mut n, "c", DataType::Bool, &[]);
    let bad_index = constant(&mut n, &[1], TensorData::I64(vec![7]));
    let conditional = n.add_if_conditional();
    n.set_condition(conditional, c).unwrap();
    let xi = n.add_if_input(conditional, x).unwrap();
    let xi = n.output(xi, 0);
    let twice = n.add_elementwise(xi, xi, ElementwiseOp::Sum).unwrap();
    let source = if eager_failure { x } else { xi };
    let gathered = n.add_gather(source, bad_index, GatherMode::Default { axis: 0 }).unwrap();
    let gathered = n.output(gathered, 0);
    // Broadcast the 1-element gather to 3 elements so both branches agree in shape.
    let widened = n.add_elementwise(gathered, xi, ElementwiseOp::Sum).unwrap();
    let out = n.add_if_output(conditional, n.output(twice, 0), n.output(widened, 0)).unwrap();
    let out = n.output(out, 0);
    n.mark_output(out).unwrap();
    let name = n.tensor(out).name.clone();
    try_run(&n, &[("x", f32s(&[3], &[1., 2., 3.])), ("c", bool_scalar(cond))])
        .map(|mut o| values(&o.remove(&name).unwrap()))
        .map_err(|e| e.to_string())
}

#[test]
fn the_branch_not_taken_is_not_executed() {
    assert_eq!(guarded_gather(true, false).unwrap(), [2., 4., 6.]);
    let err = guarded_gather(false, false).unwrap_err();
    assert!(err.contains("out of range") || err.contains("index"), "{err}");
}

#[test]
fn layers_reading_no_conditional_input_run_eagerly() {
    let err = guarded_gather(true, true).unwrap_err();
    assert!(err.contains("out of range") || err.contains("index"), "{err}");
}

/// A branch with no layers: the output passes a tensor computed outside straight through.
#[test]
fn an_empty_branch_passes_its_input_through() {
    let mut n = Network::new("empty-else");
    let x = input(&mut n, "x", DataType::F32, &[2]);
    let c = input(&mut n, "c", DataType::Bool, &[]);
    let conditional = n.add_if_conditional();
    n.set_condition(conditional, c).unwrap();
    let xi = n.add_if_input(conditional, x).unwrap();
    let xi = n.output(xi, 0);
    let squared = n.add_elementwise(xi, xi, ElementwiseOp::Prod).unwrap();
    let out = n.add_if_output(conditional, n.output(squared, 0), xi).unwrap();
    let out = n.output(out, 0);
    n.mark_output(out).unwrap();
    let x_val = f32s(&[2], &[3., -2.]);
    assert_eq!(values(&run_one(&n, &[("x", x_val.clone()), ("c", bool_scalar(true))], out)), [9., 4.]);
    assert_eq!(values(&run_one(&n, &[("x", x_val), ("c", bool_scalar(false))], out)), [3., -2.]);
}

/// `sum_even` from the seeds (PyTorch, §11.5.2): a conditional nested in a loop.
#[test]
fn if_in_loop_sums_the_even_items() {
    let mut n = Network::new("sum_even");
    let items = input(&mut n, "items", DataType::F32, &[5]);
    let zero = constant(&mut n, &[1], TensorData::F32(vec![0.0]));
    let two = constant(&mut n, &[], TensorData::F32(vec![2.0]));
    let zero_scalar = constant(&mut n, &[], TensorData::F32(vec![0.0]));
    let trips = constant(&mut n, &[], TensorData::I32(vec![5]));
    let looping = n.add_loop();
    n.add_trip_limit(looping, trips, TripLimitKind::Count).unwrap();
    let c = n.add_iterator(looping, items, 0, false).unwrap();
    let c = n.output(c, 0);
    let s = n.add_recurrence(looping, zero).unwrap();
    let s_cur = n.output(s, 0);
    let rem = n.add_elementwise(c, two, ElementwiseOp::Fmod).unwrap();
    let even = n.add_elementwise(n.output(rem, 0), zero_scalar, ElementwiseOp::Equal).unwrap();
    let conditional = n.add_if_conditional();
    n.set_condition(conditional, n.output(even, 0)).unwrap();
    let s_in = n.add_if_input(conditional, s_cur).unwrap();
    let c_in = n.add_if_input(conditional, c).unwrap();
    let added = n.add_elementwise(n.output(s_in, 0), n.output(c_in, 0), ElementwiseOp::Sum).unwrap();
    let s_next = n.add_if_output(conditional, n.output(added, 0), n.output(s_in, 0)).unwrap();
    n.set_recurrence_next(s, n.output(s_next, 0)).unwrap();
    let out = n.add_loop_output(looping, s_cur, LoopOutputKind::LastValue, 0).unwrap();
    let out = n.output(out, 0);
    n.mark_output(out).unwrap();
    let got = run_one(&n, &[("items", f32s(&[5], &[1., 2., 3., 4., 6.]))], out);
    assert_eq!(values(&got), [12.0]);
}

/// A loop inside the then branch: a prefix sum when the condition holds, else the input.
fn loop_in_if(cond: bool) -> Vec<f64> {
    let mut n = Network::new("loop-in-if");
    let x = input(&mut n, "x", DataType::F32, &[3]);
    let c = input(&mut n, "c", DataType::Bool, &[]);
    let zero = constant(&mut n, &[], TensorData::F32(vec![0.0]));
    let trips = constant(&mut n, &[], TensorData::I32(vec![3]));
    let conditional = n.add_if_conditional();
    n.set_condition(conditional, c).unwrap();
    let xi = n.add_if_input(conditional, x).unwrap();
    let xi: TensorId = n.output(xi, 0);
    let looping = n.add_loop();
    n.add_trip_limit(looping, trips, TripLimitKind::Count).unwrap();
    let e = n.add_iterator(looping, xi, 0, false).unwrap();
    let acc = n.add_recurrence(looping, zero).unwrap();
    let sum = n.add_elementwise(n.output(acc, 0), n.output(e, 0), ElementwiseOp::Sum).unwrap();
    let sum = n.output(sum, 0);
    n.set_recurrence_next(acc, sum).unwrap();
    let prefix = n.add_loop_output(looping, sum, LoopOutputKind::Concatenate, 0).unwrap();
    let out = n.add_if_output(conditional, n.output(prefix, 0), xi).unwrap();
    let out = n.output(out, 0);
    n.mark_output(out).unwrap();
    // The loop sits inside the then branch of the lowered plan.
    let engine = build(&n).unwrap();
    let plan = format!("{:?}", engine.control_flow());
    assert!(plan.contains("then_branch: Block { steps: [Loop("), "{plan}");
    values(&run_one(&n, &[("x", f32s(&[3], &[1., 2., 3.])), ("c", bool_scalar(cond))], out))
}

#[test]
fn loop_in_if_runs_only_when_its_branch_is_taken() {
    assert_eq!(loop_in_if(true), [1., 3., 6.]);
    assert_eq!(loop_in_if(false), [1., 2., 3.]);
}

/// Nested conditionals: the inner one reads the outer's input, so it is nested there.
#[test]
fn conditionals_nest() {
    let run = |a: bool, b: bool| {
        let mut n = Network::new("nested-if");
        let x = input(&mut n, "x", DataType::F32, &[1]);
        let ca = input(&mut n, "a", DataType::Bool, &[]);
        let cb = input(&mut n, "b", DataType::Bool, &[]);
        let outer = n.add_if_conditional();
        n.set_condition(outer, ca).unwrap();
        let xo = n.add_if_input(outer, x).unwrap();
        let xo = n.output(xo, 0);
        let inner = n.add_if_conditional();
        n.set_condition(inner, cb).unwrap();
        let xin = n.add_if_input(inner, xo).unwrap();
        let xin = n.output(xin, 0);
        let doubled = n.add_elementwise(xin, xin, ElementwiseOp::Sum).unwrap();
        let squared = n.add_elementwise(xin, xin, ElementwiseOp::Prod).unwrap();
        let inner_out = n.add_if_output(inner, n.output(doubled, 0), n.output(squared, 0)).unwrap();
        let negated = n.add_layer("negate", LayerKind::Unary { op: kiln::UnaryOp::Neg }, vec![Some(xo)]).unwrap();
        let out = n.add_if_output(outer, n.output(inner_out, 0), n.output(negated, 0)).unwrap();
        let out = n.output(out, 0);
        n.mark_output(out).unwrap();
        values(&run_one(&n, &[("x", f32s(&[1], &[3.])), ("a", bool_scalar(a)), ("b", bool_scalar(b))], out))[0]
    };
    assert_eq!(run(true, true), 6.0);
    assert_eq!(run(true, false), 9.0);
    assert_eq!(run(false, true), -3.0);
}

//! Loops and conditionals through kiln's plan interpreter on device values: recurrences,
//! WHILE limits read back from the device, iterators (sliced on the device) and stacked
//! loop outputs, and if-conditionals.

use crate::common::*;
use kiln::{DataType, ElementwiseOp, HostTensor, LoopOutputKind, Network, Shape, TensorData, TripLimitKind};

fn input(n: &mut Network, name: &str, dtype: DataType, dims: &[usize]) -> kiln::TensorId {
    n.add_input(name, dtype, Shape::fixed(dims)).unwrap()
}

fn constant(n: &mut Network, dims: &[usize], data: TensorData) -> kiln::TensorId {
    let l = n.add_constant(dims, data).unwrap();
    n.output(l, 0)
}

#[test]
fn while_loop_with_recurrence_and_stacked_outputs() {
    let Some(gpu) = gpu() else { return };
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
    let scalar = |v: i32| HostTensor::new(vec![], TensorData::I32(vec![v])).unwrap();
    for (j, k) in [(1, 3), (12, 3), (-5, 2)] {
        let (got, want) = both(&gpu, &n, &[scalar(j), scalar(k)]);
        for (g, w) in got.iter().zip(&want) {
            assert_close(g, w, 0.0, 0.0, &format!("loop j={j} k={k}"));
        }
    }
}

#[test]
fn iterators_and_reverse_outputs() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(50);
    for (axis, reverse, kind, out_axis, count) in [
        (0, false, LoopOutputKind::Concatenate, 1, 2),
        (1, true, LoopOutputKind::Concatenate, 0, 3),
        (1, false, LoopOutputKind::Reverse, 1, 3),
        (2, false, LoopOutputKind::Concatenate, 2, 4),
    ] {
        let mut n = Network::new("iterate");
        let m = input(&mut n, "m", DataType::F32, &[2, 3, 4]);
        let trips = constant(&mut n, &[], TensorData::I32(vec![count]));
        let looping = n.add_loop();
        n.add_trip_limit(looping, trips, TripLimitKind::Count).unwrap();
        let it = n.add_iterator(looping, m, axis, reverse).unwrap();
        let slice = n.output(it, 0);
        let doubled = n.add_elementwise(slice, slice, ElementwiseOp::Sum).unwrap();
        let out = n.add_loop_output(looping, n.output(doubled, 0), kind, out_axis).unwrap();
        let out = n.output(out, 0);
        n.mark_output(out).unwrap();
        let (got, want) = both(&gpu, &n, &[rand_f32(&mut r, &[2, 3, 4], -1.0, 1.0)]);
        assert_close(&got[0], &want[0], 0.0, 0.0, &format!("iterate axis {axis} reverse {reverse} {kind:?}"));
    }
}

#[test]
fn if_conditional_runs_the_taken_branch() {
    let Some(gpu) = gpu() else { return };
    let mut n = Network::new("if");
    let c = input(&mut n, "c", DataType::Bool, &[]);
    let x = input(&mut n, "x", DataType::F32, &[3]);
    let cond = n.add_if_conditional();
    n.set_condition(cond, c).unwrap();
    let xin = n.add_if_input(cond, x).unwrap();
    let xin = n.output(xin, 0);
    let t = n.add_elementwise(xin, xin, ElementwiseOp::Prod).unwrap();
    let f = n.add_elementwise(xin, xin, ElementwiseOp::Sub).unwrap();
    let out = n.add_if_output(cond, n.output(t, 0), n.output(f, 0)).unwrap();
    let out = n.output(out, 0);
    n.mark_output(out).unwrap();
    for flag in [true, false] {
        let c = HostTensor::new(vec![], TensorData::Bool(vec![flag])).unwrap();
        let x = HostTensor::from_f32(vec![3], vec![1.5, -2.0, 3.0]).unwrap();
        let (got, want) = both(&gpu, &n, &[c, x]);
        assert_close(&got[0], &want[0], 0.0, 0.0, &format!("if {flag}"));
    }
}

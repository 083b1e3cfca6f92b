//! Reduce (every op, any axes, run-time axes), SoftMax, Normalization (layer and group),
//! RmsNormalization.

use crate::common::*;
use kiln::{LayerKind, ReduceOp};

#[test]
fn reduce_every_op() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(30);
    use ReduceOp::*;
    for op in [Sum, Prod, Max, Min, Mean, L1, L2, LogSum, LogSumExp, SumSquare] {
        let x = rand_f32(&mut r, &[3, 4, 5], 0.2, 1.5);
        for (axes, keep_dims) in [(vec![1], true), (vec![0, 2], false), (vec![0, 1, 2], false)] {
            let kind = LayerKind::Reduce { op, axes: axes.clone(), keep_dims };
            check(&gpu, kind, vec![In::Run(x.clone())], &format!("{op:?} over {axes:?}"));
        }
    }
    for op in [Sum, Max, Min, Prod] {
        let x = rand_i32(&mut r, &[4, 6], -5, 5);
        check(
            &gpu,
            LayerKind::Reduce { op, axes: vec![1], keep_dims: false },
            vec![In::Run(x)],
            &format!("{op:?} i32"),
        );
    }
    let x = rand_f32(&mut r, &[3, 4, 5], -1.0, 1.0);
    let kind = LayerKind::Reduce { op: Sum, axes: vec![], keep_dims: true };
    check(&gpu, kind, vec![In::Run(x), In::Const(i64s(&[1], &[-1]))], "run-time axes");
    // An empty run-time axes list reduces every axis, as inference reads it.
    let x = rand_f32(&mut r, &[2, 3, 4], -1.0, 1.0);
    let kind = LayerKind::Reduce { op: Sum, axes: vec![], keep_dims: false };
    check(&gpu, kind, vec![In::Run(x), In::Run(i64s(&[0], &[]))], "empty run-time axes");
}

#[test]
fn softmax_and_normalizations() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(31);
    let x = rand_f32(&mut r, &[2, 3, 4, 5], -3.0, 3.0);
    for axis in 0..4 {
        check(&gpu, LayerKind::SoftMax { axis }, vec![In::Run(x.clone())], &format!("softmax axis {axis}"));
    }
    let (scale, bias) = (rand_f32(&mut r, &[5], 0.5, 1.5), rand_f32(&mut r, &[5], -0.5, 0.5));
    let kind = LayerKind::Normalization { axes: vec![3], epsilon: 1e-5, num_groups: 1 };
    check_tol(
        &gpu,
        kind,
        vec![In::Run(x.clone()), In::Const(scale.clone()), In::Const(bias)],
        1e-5,
        1e-5,
        "layer norm",
    );
    let (gs, gb) = (rand_f32(&mut r, &[1, 6, 1, 1], 0.5, 1.5), rand_f32(&mut r, &[1, 6, 1, 1], -0.5, 0.5));
    let y = rand_f32(&mut r, &[2, 6, 3, 4], -2.0, 2.0);
    let kind = LayerKind::Normalization { axes: vec![2, 3], epsilon: 1e-5, num_groups: 3 };
    check_tol(&gpu, kind, vec![In::Run(y), In::Const(gs), In::Const(gb)], 1e-5, 1e-5, "group norm");
    let kind = LayerKind::RmsNormalization { axes: vec![3], epsilon: 1e-6 };
    check_tol(&gpu, kind, vec![In::Run(x), In::Const(scale)], 1e-5, 1e-5, "rms norm");
}

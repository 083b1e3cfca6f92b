//! Reduce (every op, axes, keep_dims, empty reductions) and CumulativeSum.

use crate::common::*;
use kiln::{DataType, HostTensor, LayerKind, ReduceOp as R};

fn reduce(op: R, x: HostTensor, axes: &[usize], keep_dims: bool) -> HostTensor {
    run1(LayerKind::Reduce { op, axes: axes.to_vec(), keep_dims }, vec![In::Run(x)])
}

fn sample() -> HostTensor {
    // [2, 3]: [[1, 2, 3], [4, 5, 6]]
    f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
}

#[test]
fn every_float_reduction_over_one_axis() {
    let cases: [(R, [f64; 2]); 10] = [
        (R::Sum, [6.0, 15.0]),
        (R::Prod, [6.0, 120.0]),
        (R::Max, [3.0, 6.0]),
        (R::Min, [1.0, 4.0]),
        (R::Mean, [2.0, 5.0]),
        (R::L1, [6.0, 15.0]),
        (R::L2, [14f64.sqrt(), 77f64.sqrt()]),
        (R::LogSum, [6f64.ln(), 15f64.ln()]),
        (R::LogSumExp, [(1f64.exp() + 2f64.exp() + 3f64.exp()).ln(), (4f64.exp() + 5f64.exp() + 6f64.exp()).ln()]),
        (R::SumSquare, [14.0, 77.0]),
    ];
    for (op, expected) in cases {
        assert_close(&reduce(op, sample(), &[1], false), DataType::F32, &[2], &expected, 1e-6);
    }
}

#[test]
fn axes_and_keep_dims_shape_the_output() {
    let x: Vec<f32> = (0..24).map(|v| v as f32).collect();
    let x = f32s(&[2, 3, 4], &x);
    let y = reduce(R::Sum, x.clone(), &[0, 2], true);
    assert_close(&y, DataType::F32, &[1, 3, 1], &[60.0, 92.0, 124.0], 0.0);
    let y = reduce(R::Max, x.clone(), &[1], false);
    assert_close(&y, DataType::F32, &[2, 4], &[8.0, 9.0, 10.0, 11.0, 20.0, 21.0, 22.0, 23.0], 0.0);
    let y = reduce(R::Sum, x.clone(), &[0, 1, 2], false);
    assert_close(&y, DataType::F32, &[], &[276.0], 0.0);
    // No axes: every element reduces alone.
    let y = reduce(R::SumSquare, f32s(&[2], &[-2.0, 3.0]), &[], false);
    assert_close(&y, DataType::F32, &[2], &[4.0, 9.0], 0.0);
}

#[test]
fn empty_reductions_give_identities() {
    let x = f32s(&[2, 0], &[]);
    let check =
        |op, expected: f64| assert_close(&reduce(op, x.clone(), &[1], false), DataType::F32, &[2], &[expected; 2], 0.0);
    check(R::Sum, 0.0);
    check(R::Prod, 1.0);
    check(R::Max, f64::NEG_INFINITY);
    check(R::Min, f64::INFINITY);
    check(R::Mean, f64::NAN);
    check(R::LogSumExp, f64::NEG_INFINITY);
    assert_exact(&reduce(R::Max, i32s(&[0, 2], &[]), &[0], false), &i32s(&[2], &[i32::MIN; 2]));
    assert_exact(&reduce(R::Min, u8s(&[0], &[]), &[0], true), &u8s(&[1], &[255]));
    assert_exact(&reduce(R::Sum, i64s(&[2, 0], &[]), &[0], false), &i64s(&[0], &[]));
    let reason =
        run_err(LayerKind::Reduce { op: R::Mean, axes: vec![0], keep_dims: false }, vec![In::Run(i32s(&[0], &[]))]);
    assert!(reason.contains("zero elements"), "{reason}");
}

#[test]
fn integer_reductions_wrap_and_mean_truncates() {
    let x = i32s(&[2, 2], &[-7, 2, 5, 4]);
    assert_exact(&reduce(R::Mean, x.clone(), &[1], false), &i32s(&[2], &[-2, 4]));
    assert_exact(&reduce(R::L1, x.clone(), &[1], false), &i32s(&[2], &[9, 9]));
    assert_exact(&reduce(R::L2, x.clone(), &[0], false), &i32s(&[2], &[8, 4]));
    assert_exact(&reduce(R::Prod, x, &[0], false), &i32s(&[2], &[-35, 8]));
    assert_exact(&reduce(R::Sum, i8s(&[2], &[100, 100]), &[0], false), &i8s(&[], &[-56]));
}

#[test]
fn nan_propagates_through_max_and_half_types_reduce_in_wide_precision() {
    let y = reduce(R::Max, f32s(&[3], &[1.0, f32::NAN, 2.0]), &[0], false);
    assert_close(&y, DataType::F32, &[], &[f64::NAN], 0.0);
    // 4096 ones in f16 sum exactly (an f16 accumulator would stall at 2048).
    let y = reduce(R::Sum, f16s(&[4096], &[1.0; 4096]), &[0], false);
    assert_close(&y, DataType::F16, &[], &[4096.0], 0.0);
}

#[test]
fn bool_max_is_any_and_min_is_all() {
    let x = bools(&[2, 2], &[true, false, false, false]);
    assert_exact(&reduce(R::Max, x.clone(), &[1], false), &bools(&[2], &[true, false]));
    assert_exact(&reduce(R::Min, x, &[0], false), &bools(&[2], &[false, false]));
}

fn cumsum(x: HostTensor, axis: i64, exclusive: bool, reverse: bool) -> HostTensor {
    run1(LayerKind::CumulativeSum { exclusive, reverse }, vec![In::Run(x), In::Const(i64s(&[], &[axis]))])
}

#[test]
fn cumulative_sum_variants() {
    let x = || f32s(&[4], &[1.0, 2.0, 3.0, 4.0]);
    assert_close(&cumsum(x(), 0, false, false), DataType::F32, &[4], &[1.0, 3.0, 6.0, 10.0], 0.0);
    assert_close(&cumsum(x(), 0, true, false), DataType::F32, &[4], &[0.0, 1.0, 3.0, 6.0], 0.0);
    assert_close(&cumsum(x(), 0, false, true), DataType::F32, &[4], &[10.0, 9.0, 7.0, 4.0], 0.0);
    assert_close(&cumsum(x(), -1, true, true), DataType::F32, &[4], &[9.0, 7.0, 4.0, 0.0], 0.0);
    let m = i32s(&[2, 3], &[1, 2, 3, 4, 5, 6]);
    assert_exact(&cumsum(m.clone(), 0, false, false), &i32s(&[2, 3], &[1, 2, 3, 5, 7, 9]));
    assert_exact(&cumsum(m, 1, false, false), &i32s(&[2, 3], &[1, 3, 6, 4, 9, 15]));
    let reason = run_err(
        LayerKind::CumulativeSum { exclusive: false, reverse: false },
        vec![In::Run(x()), In::Run(i32s(&[1], &[3]))],
    );
    assert!(reason.contains("out of range"), "{reason}");
}

#[test]
fn axes_given_at_run_time_replace_the_parameter() {
    let kind = |keep_dims| LayerKind::Reduce { op: R::Sum, axes: vec![], keep_dims };
    let x: Vec<f32> = (0..24).map(|v| v as f32).collect();
    let x = f32s(&[2, 3, 4], &x);
    // Negative axes count from the end, as ONNX's do.
    let y = run1(kind(true), vec![In::Run(x.clone()), In::Run(i64s(&[2], &[0, -1]))]);
    assert_close(&y, DataType::F32, &[1, 3, 1], &[60.0, 92.0, 124.0], 0.0);
    let y = run1(kind(false), vec![In::Run(x.clone()), In::Run(i64s(&[1], &[1]))]);
    assert_close(&y, DataType::F32, &[2, 4], &[12.0, 15.0, 18.0, 21.0, 48.0, 51.0, 54.0, 57.0], 0.0);
    // An empty axes tensor reduces every axis.
    let y = run1(kind(false), vec![In::Run(x.clone()), In::Run(i64s(&[0], &[]))]);
    assert_close(&y, DataType::F32, &[], &[276.0], 0.0);
    let message = run_err(kind(true), vec![In::Run(x), In::Run(i64s(&[1], &[3]))]);
    assert!(message.contains("out of range"), "{message}");
}

fn cumprod(x: HostTensor, axis: i64, exclusive: bool, reverse: bool) -> HostTensor {
    run1(LayerKind::CumulativeProduct { exclusive, reverse }, vec![In::Run(x), In::Const(i64s(&[], &[axis]))])
}

#[test]
fn cumulative_product_variants() {
    let x = || f32s(&[4], &[1.0, 2.0, 3.0, 4.0]);
    assert_close(&cumprod(x(), 0, false, false), DataType::F32, &[4], &[1.0, 2.0, 6.0, 24.0], 0.0);
    assert_close(&cumprod(x(), 0, true, false), DataType::F32, &[4], &[1.0, 1.0, 2.0, 6.0], 0.0);
    assert_close(&cumprod(x(), 0, false, true), DataType::F32, &[4], &[24.0, 24.0, 12.0, 4.0], 0.0);
    assert_close(&cumprod(x(), -1, true, true), DataType::F32, &[4], &[24.0, 12.0, 4.0, 1.0], 0.0);
    let m = i32s(&[2, 3], &[1, 2, 3, 4, 5, 6]);
    assert_exact(&cumprod(m.clone(), 0, false, false), &i32s(&[2, 3], &[1, 2, 3, 4, 10, 18]));
    assert_exact(&cumprod(m, 1, false, false), &i32s(&[2, 3], &[1, 2, 6, 4, 20, 120]));
    let reason = run_err(
        LayerKind::CumulativeProduct { exclusive: false, reverse: false },
        vec![In::Run(x()), In::Run(i32s(&[1], &[3]))],
    );
    assert!(reason.contains("out of range"), "{reason}");
}

//! TopK, NonZero and Assertion.

use crate::common::*;
use kiln::{DataType, HostTensor, LayerKind};

fn top_k(x: HostTensor, k: i64, axis: usize, largest: bool) -> Vec<HostTensor> {
    run(LayerKind::TopK { largest, axis, sorted: true }, vec![In::Run(x), In::Const(i64s(&[1], &[k]))])
}

#[test]
fn top_k_largest_and_smallest_with_ties_by_index() {
    let x = f32s(&[2, 4], &[1.0, 3.0, 3.0, 2.0, 5.0, -1.0, 5.0, 0.0]);
    let out = top_k(x.clone(), 2, 1, true);
    assert_close(&out[0], DataType::F32, &[2, 2], &[3.0, 3.0, 5.0, 5.0], 0.0);
    assert_exact(&out[1], &i64s(&[2, 2], &[1, 2, 0, 2]));
    let out = top_k(x.clone(), 3, 1, false);
    assert_close(&out[0], DataType::F32, &[2, 3], &[1.0, 2.0, 3.0, -1.0, 0.0, 5.0], 0.0);
    assert_exact(&out[1], &i64s(&[2, 3], &[0, 3, 1, 1, 3, 0]));
    let out = top_k(x, 1, 0, true);
    assert_exact(&out[1], &i64s(&[1, 4], &[1, 0, 1, 0]));
    let out = top_k(i32s(&[3], &[4, 9, 1]), 0, 0, true);
    assert_exact(&out[0], &i32s(&[0], &[]));
    assert_exact(&out[1], &i64s(&[0], &[]));
}

#[test]
fn top_k_orders_nan_above_numbers() {
    let out = top_k(f64s(&[3], &[1.0, f64::NAN, 2.0]), 2, 0, true);
    assert_close(&out[0], DataType::F64, &[2], &[f64::NAN, 2.0], 0.0);
    assert_exact(&out[1], &i64s(&[2], &[1, 2]));
}

#[test]
fn non_zero_lists_coordinates_in_row_major_order() {
    let y = run1(LayerKind::NonZero, vec![In::Run(f32s(&[2, 3], &[0.0, 1.0, 0.0, 2.0, 0.0, f32::NAN]))]);
    assert_exact(&y, &i64s(&[2, 3], &[0, 1, 1, 1, 0, 2]));
    let y = run1(LayerKind::NonZero, vec![In::Run(bools(&[0], &[]))]);
    assert_exact(&y, &i64s(&[1, 0], &[]));
    let y = run1(LayerKind::NonZero, vec![In::Run(i8s(&[], &[3]))]);
    assert_exact(&y, &i64s(&[0, 1], &[]));
}

#[test]
fn assertion_fails_with_its_message() {
    let kind = || LayerKind::Assertion { message: "inputs must be positive".into() };
    let reason = run_err(kind(), vec![In::Run(bools(&[3], &[true, false, true]))]);
    assert!(reason.contains("inputs must be positive"), "{reason}");
    // A passing assertion lets the network run.
    assert!(try_run(kind(), vec![In::Run(bools(&[2], &[true, true]))]).is_ok());
}

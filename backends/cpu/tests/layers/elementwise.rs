//! Elementwise (every op, broadcasting, integer semantics), Select and ParametricRelu.

use crate::common::*;
use kiln::{DataType, ElementwiseOp as E, HostTensor, LayerKind, TensorData};

fn ew(op: E, a: HostTensor, b: HostTensor) -> HostTensor {
    run1(LayerKind::Elementwise { op }, vec![In::Run(a), In::Run(b)])
}

#[test]
fn float_arithmetic_broadcasts() {
    let a = f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let b = f32s(&[3], &[10.0, 20.0, 30.0]);
    assert_close(&ew(E::Sum, a.clone(), b.clone()), DataType::F32, &[2, 3], &[11.0, 22.0, 33.0, 14.0, 25.0, 36.0], 0.0);
    assert_close(&ew(E::Sub, b.clone(), a.clone()), DataType::F32, &[2, 3], &[9.0, 18.0, 27.0, 6.0, 15.0, 24.0], 0.0);
    let col = f32s(&[2, 1], &[2.0, -1.0]);
    assert_close(
        &ew(E::Prod, col.clone(), b.clone()),
        DataType::F32,
        &[2, 3],
        &[20.0, 40.0, 60.0, -10.0, -20.0, -30.0],
        0.0,
    );
    assert_close(&ew(E::Div, b, col), DataType::F32, &[2, 3], &[5.0, 10.0, 15.0, -10.0, -20.0, -30.0], 0.0);
    assert_close(&ew(E::Pow, a, f32s(&[], &[2.0])), DataType::F32, &[2, 3], &[1.0, 4.0, 9.0, 16.0, 25.0, 36.0], 1e-6);
    // An empty dim broadcasts to an empty result.
    let empty = ew(E::Sum, f32s(&[0, 3], &[]), f32s(&[1, 3], &[1.0, 2.0, 3.0]));
    assert_close(&empty, DataType::F32, &[0, 3], &[], 0.0);
}

#[test]
fn float_floor_div_mod_and_fmod_follow_their_signs() {
    let a = f64s(&[4], &[7.5, -7.5, 7.5, -7.5]);
    let b = f64s(&[4], &[2.0, 2.0, -2.0, -2.0]);
    assert_close(&ew(E::FloorDiv, a.clone(), b.clone()), DataType::F64, &[4], &[3.0, -4.0, -4.0, 3.0], 0.0);
    assert_close(&ew(E::Mod, a.clone(), b.clone()), DataType::F64, &[4], &[1.5, 0.5, -0.5, -1.5], 0.0);
    assert_close(&ew(E::Fmod, a, b), DataType::F64, &[4], &[1.5, -1.5, 1.5, -1.5], 0.0);
}

#[test]
fn float_max_min_propagate_nan_and_comparisons_give_bool() {
    let a = f32s(&[3], &[1.0, f32::NAN, 5.0]);
    let b = f32s(&[3], &[2.0, 0.0, 5.0]);
    assert_close(&ew(E::Max, a.clone(), b.clone()), DataType::F32, &[3], &[2.0, f64::NAN, 5.0], 0.0);
    assert_close(&ew(E::Min, a.clone(), b.clone()), DataType::F32, &[3], &[1.0, f64::NAN, 5.0], 0.0);
    assert_exact(&ew(E::Equal, a.clone(), b.clone()), &bools(&[3], &[false, false, true]));
    assert_exact(&ew(E::Less, a.clone(), b.clone()), &bools(&[3], &[true, false, false]));
    assert_exact(&ew(E::GreaterOrEqual, a.clone(), b.clone()), &bools(&[3], &[false, false, true]));
    assert_exact(&ew(E::Greater, b.clone(), a.clone()), &bools(&[3], &[true, false, false]));
    assert_exact(&ew(E::LessOrEqual, b, a), &bools(&[3], &[false, false, true]));
}

#[test]
fn half_precision_rounds_the_exact_result_once() {
    // 2049 is not an f16; 2048 + 1 rounds to even (2048).
    let y = ew(E::Sum, f16s(&[2], &[2048.0, 1.0]), f16s(&[2], &[1.0, 0.5]));
    assert_close(&y, DataType::F16, &[2], &[2048.0, 1.5], 0.0);
    let y = ew(E::Prod, bf16s(&[1], &[3.0]), bf16s(&[1], &[1.0 / 3.0]));
    assert_close(&y, DataType::BF16, &[1], &[1.0], 0.0);
}

#[test]
fn integer_division_truncates_floor_div_floors_and_remainders_take_signs() {
    let a = i32s(&[4], &[-7, 7, -7, 7]);
    let b = i32s(&[4], &[2, 2, -2, -2]);
    assert_exact(&ew(E::Div, a.clone(), b.clone()), &i32s(&[4], &[-3, 3, 3, -3]));
    assert_exact(&ew(E::FloorDiv, a.clone(), b.clone()), &i32s(&[4], &[-4, 3, 3, -4]));
    assert_exact(&ew(E::Mod, a.clone(), b.clone()), &i32s(&[4], &[1, 1, -1, -1]));
    assert_exact(&ew(E::Fmod, a, b), &i32s(&[4], &[-1, 1, -1, 1]));
    // MIN / -1 wraps instead of trapping.
    assert_exact(&ew(E::Div, i8s(&[1], &[-128]), i8s(&[1], &[-1])), &i8s(&[1], &[-128]));
    assert_exact(&ew(E::Mod, i8s(&[1], &[-128]), i8s(&[1], &[-1])), &i8s(&[1], &[0]));
}

#[test]
fn integer_division_by_zero_is_an_execution_error() {
    for op in [E::Div, E::FloorDiv, E::Mod, E::Fmod] {
        let reason =
            run_err(LayerKind::Elementwise { op }, vec![In::Run(i64s(&[2], &[1, 2])), In::Run(i64s(&[2], &[1, 0]))]);
        assert!(reason.contains("division by zero"), "{op:?}: {reason}");
    }
}

#[test]
fn integer_pow_multiplies_repeatedly_and_wraps() {
    let base = i32s(&[6], &[2, 3, 1, -1, -1, 5]);
    let exp = i32s(&[6], &[10, 0, -5, -3, -2, -1]);
    assert_exact(&ew(E::Pow, base, exp), &i32s(&[6], &[1024, 1, 1, -1, 1, 0]));
    assert_exact(&ew(E::Pow, u8s(&[1], &[3]), u8s(&[1], &[5])), &u8s(&[1], &[243]));
    assert_exact(&ew(E::Pow, u8s(&[1], &[2]), u8s(&[1], &[9])), &u8s(&[1], &[0]));
    let reason =
        run_err(LayerKind::Elementwise { op: E::Pow }, vec![In::Run(i32s(&[1], &[0])), In::Run(i32s(&[1], &[-1]))]);
    assert!(reason.contains("division by zero"), "{reason}");
}

#[test]
fn integer_arithmetic_wraps_and_max_min_compare() {
    assert_exact(&ew(E::Sum, i8s(&[2], &[100, -100]), i8s(&[2], &[100, -100])), &i8s(&[2], &[-56, 56]));
    assert_exact(&ew(E::Prod, u8s(&[1], &[16]), u8s(&[1], &[17])), &u8s(&[1], &[16]));
    assert_exact(&ew(E::Sub, u8s(&[1], &[0]), u8s(&[1], &[1])), &u8s(&[1], &[255]));
    assert_exact(&ew(E::Max, i64s(&[2], &[-5, 3]), i64s(&[], &[0])), &i64s(&[2], &[0, 3]));
    assert_exact(&ew(E::Min, i64s(&[2], &[-5, 3]), i64s(&[], &[0])), &i64s(&[2], &[-5, 0]));
    assert_exact(&ew(E::Greater, i64s(&[2], &[-5, 3]), i64s(&[], &[0])), &bools(&[2], &[false, true]));
}

#[test]
fn bit_ops_and_shifts_follow_numpy() {
    let a = u8s(&[3], &[0b1100, 0b1010, 0xff]);
    let b = u8s(&[3], &[0b1010, 0b0110, 0x0f]);
    assert_exact(&ew(E::BitAnd, a.clone(), b.clone()), &u8s(&[3], &[0b1000, 0b0010, 0x0f]));
    assert_exact(&ew(E::BitOr, a.clone(), b.clone()), &u8s(&[3], &[0b1110, 0b1110, 0xff]));
    assert_exact(&ew(E::BitXor, a, b), &u8s(&[3], &[0b0110, 0b1100, 0xf0]));
    assert_exact(&ew(E::ShiftLeft, u8s(&[3], &[1, 1, 3]), u8s(&[3], &[7, 8, 1])), &u8s(&[3], &[128, 0, 6]));
    assert_exact(
        &ew(E::ShiftRight, i8s(&[4], &[-8, -8, 8, 8]), i8s(&[4], &[1, 10, 2, -1])),
        &i8s(&[4], &[-4, -1, 2, 0]),
    );
    assert_exact(&ew(E::ShiftLeft, i32s(&[2], &[-3, 5]), i32s(&[2], &[2, -1])), &i32s(&[2], &[-12, 0]));
}

#[test]
fn bool_logic_and_equality() {
    let a = bools(&[4], &[true, true, false, false]);
    let b = bools(&[4], &[true, false, true, false]);
    assert_exact(&ew(E::And, a.clone(), b.clone()), &bools(&[4], &[true, false, false, false]));
    assert_exact(&ew(E::Or, a.clone(), b.clone()), &bools(&[4], &[true, true, true, false]));
    assert_exact(&ew(E::Xor, a.clone(), b.clone()), &bools(&[4], &[false, true, true, false]));
    assert_exact(&ew(E::Equal, a, b), &bools(&[4], &[true, false, false, true]));
}

#[test]
fn select_broadcasts_condition_and_branches() {
    let cond = bools(&[2, 1], &[true, false]);
    let a = i64s(&[3], &[1, 2, 3]);
    let b = i64s(&[], &[-1]);
    let y = run1(LayerKind::Select, vec![In::Run(cond), In::Run(a), In::Run(b)]);
    assert_exact(&y, &i64s(&[2, 3], &[1, 2, 3, -1, -1, -1]));
    let y = run1(
        LayerKind::Select,
        vec![
            In::Run(bools(&[2], &[false, true])),
            In::Run(bools(&[2], &[true, true])),
            In::Run(bools(&[2], &[false, false])),
        ],
    );
    assert_exact(&y, &bools(&[2], &[false, true]));
}

#[test]
fn parametric_relu_scales_negatives_per_channel() {
    let x = f32s(&[1, 2, 2], &[-1.0, 2.0, -3.0, 4.0]);
    let slope = f32s(&[2, 1], &[0.5, 0.25]);
    let y = run1(LayerKind::ParametricRelu, vec![In::Run(x), In::Const(slope)]);
    assert_close(&y, DataType::F32, &[1, 2, 2], &[-0.5, 2.0, -0.75, 4.0], 0.0);
    let y = run1(LayerKind::ParametricRelu, vec![In::Run(f64s(&[2], &[-2.0, 0.0])), In::Const(f64s(&[1], &[0.1]))]);
    assert_exact(&y, &HostTensor::new(vec![2], TensorData::F64(vec![-0.2, 0.0])).unwrap());
}

#[test]
fn parameters_that_would_enlarge_the_input_are_refused() {
    let refused =
        try_run(LayerKind::ParametricRelu, vec![In::Run(f32s(&[3], &[1.0; 3])), In::Const(f32s(&[2, 3], &[0.1; 6]))]);
    assert!(matches!(refused, Err(Failure::Network(_))), "{refused:?}");
}

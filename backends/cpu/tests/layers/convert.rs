//! Cast, Quantize and Dequantize.

use crate::common::*;
use half::{bf16, f16};
use kiln::{DataType, HostTensor, LayerKind, TensorData};

fn cast(x: HostTensor, to: DataType) -> HostTensor {
    run1(LayerKind::Cast { to }, vec![In::Run(x)])
}

#[test]
fn float_to_int_truncates_toward_zero_and_saturates() {
    let x = f32s(&[7], &[2.9, -2.9, 1e10, -1e10, f32::NAN, f32::INFINITY, -0.5]);
    assert_exact(&cast(x.clone(), DataType::I32), &i32s(&[7], &[2, -2, i32::MAX, i32::MIN, 0, i32::MAX, 0]));
    assert_exact(&cast(x.clone(), DataType::U8), &u8s(&[7], &[2, 0, 255, 0, 0, 255, 0]));
    assert_exact(&cast(x, DataType::Bool), &bools(&[7], &[true, true, true, true, true, true, true]));
    let h = f16s(&[3], &[-3.75, 70.5, 0.0]);
    assert_exact(&cast(h, DataType::I8), &i8s(&[3], &[-3, 70, 0]));
}

#[test]
fn int_to_int_wraps_and_bool_converts_to_zero_or_one() {
    assert_exact(&cast(i64s(&[3], &[300, -129, 5]), DataType::I8), &i8s(&[3], &[44, 127, 5]));
    assert_exact(&cast(i32s(&[2], &[-1, 256]), DataType::U8), &u8s(&[2], &[255, 0]));
    assert_exact(&cast(bools(&[2], &[true, false]), DataType::F32), &f32s(&[2], &[1.0, 0.0]));
    assert_exact(&cast(i32s(&[3], &[0, -4, 9]), DataType::Bool), &bools(&[3], &[false, true, true]));
}

#[test]
fn narrowing_to_half_types_rounds_once_to_nearest_even() {
    // Ties go to even; 1 + 2^-11 is halfway between 1 and the next f16.
    let x = f32s(&[3], &[1.0 + 2f32.powi(-11), 1.0 + 3.0 * 2f32.powi(-11), 65520.0]);
    let y = cast(x, DataType::F16);
    let expected: Vec<f16> = vec![f16::from_f32(1.0), f16::from_f32(1.0 + 2f32.powi(-9)), f16::INFINITY];
    assert_exact(&y, &HostTensor::new(vec![3], TensorData::F16(expected)).unwrap());
    // Just above a tie in bits that f32 cannot hold: rounding through f32 would tie to even.
    let above = f64s(&[2], &[1.0 + 2f64.powi(-11) + 2f64.powi(-40), 1.0 + 2f64.powi(-8) + 2f64.powi(-40)]);
    assert_exact(
        &cast(above.clone(), DataType::F16),
        &HostTensor::new(
            vec![2],
            TensorData::F16(vec![f16::from_f64(1.0 + 2f64.powi(-10)), f16::from_f64(1.0 + 2f64.powi(-8))]),
        )
        .unwrap(),
    );
    assert_exact(
        &cast(above, DataType::BF16),
        &HostTensor::new(vec![2], TensorData::BF16(vec![bf16::from_f32(1.0), bf16::from_f32(1.0 + 2f32.powi(-7))]))
            .unwrap(),
    );
    // 2^60 + 2^52 + 1: the +1 breaks the tie upward; via f64 it would be lost.
    let big = i64s(&[1], &[(1i64 << 60) + (1i64 << 52) + 1]);
    let expected = bf16::from_f64(((1i64 << 60) + (1i64 << 53)) as f64);
    assert_exact(&cast(big, DataType::BF16), &HostTensor::new(vec![1], TensorData::BF16(vec![expected])).unwrap());
}

#[test]
fn casts_between_float_types_and_empty_tensors() {
    let y = cast(bf16s(&[2], &[1.5, -0.25]), DataType::F64);
    assert_exact(&y, &f64s(&[2], &[1.5, -0.25]));
    let empty = cast(f32s(&[0, 3], &[]), DataType::I64);
    assert_exact(&empty, &i64s(&[0, 3], &[]));
}

#[test]
fn quantize_rounds_half_to_even_and_saturates() {
    let x = f32s(&[6], &[2.5, 3.5, -2.5, 1000.0, -1000.0, 0.26]);
    let y = run1(
        LayerKind::Quantize { axis: None, to: DataType::U8 },
        vec![In::Run(x.clone()), In::Const(f32s(&[], &[1.0])), In::Const(u8s(&[], &[10]))],
    );
    assert_exact(&y, &u8s(&[6], &[12, 14, 8, 255, 0, 10]));
    let y = run1(LayerKind::Quantize { axis: None, to: DataType::I8 }, vec![In::Run(x), In::Const(f32s(&[1], &[0.5]))]);
    assert_exact(&y, &i8s(&[6], &[5, 7, -5, 127, -128, 1]));
}

#[test]
fn quantize_and_dequantize_per_axis() {
    let x = f32s(&[2, 3], &[1.0, 2.0, 3.0, -1.0, -2.0, -3.0]);
    let scales = f32s(&[3], &[1.0, 0.5, 0.25]);
    let zps = i8s(&[3], &[0, 1, -1]);
    let q = run1(
        LayerKind::Quantize { axis: Some(1), to: DataType::I8 },
        vec![In::Run(x), In::Const(scales.clone()), In::Const(zps.clone())],
    );
    assert_exact(&q, &i8s(&[2, 3], &[1, 5, 11, -1, -3, -13]));
    let d = run1(LayerKind::Dequantize { axis: Some(1), to: None }, vec![In::Run(q), In::Const(scales), In::Const(zps)]);
    assert_close(&d, DataType::F32, &[2, 3], &[1.0, 2.0, 3.0, -1.0, -2.0, -3.0], 0.0);
    // Per-axis over axis 0 with an f16 scale gives f16.
    let d = run1(
        LayerKind::Dequantize { axis: Some(0), to: None },
        vec![In::Run(u8s(&[2, 2], &[10, 20, 30, 40])), In::Const(f16s(&[2], &[0.5, 2.0]))],
    );
    assert_close(&d, DataType::F16, &[2, 2], &[5.0, 10.0, 60.0, 80.0], 0.0);
}

#[test]
fn quantize_with_mismatched_scales_fails_at_run_time() {
    let reason = run_err(
        LayerKind::Quantize { axis: Some(1), to: DataType::I8 },
        vec![In::Run(f32s(&[2, 3], &[0.0; 6])), In::Run(f32s(&[2], &[1.0, 1.0]))],
    );
    assert!(reason.contains("scales"), "{reason}");
}

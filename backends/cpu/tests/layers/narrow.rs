//! Cast, CastNarrow, Quantize and Dequantize on the storage-only types (float8, e8m0,
//! float4, 4-bit integers). Expected codes are ml_dtypes' (see kiln's narrow_types test).

use crate::common::*;
use kiln::{DataType, E8M0Rounding, HostTensor, LayerKind, TensorData, F8E4M3FN, F8E8M0, I4};

fn e4m3fn(shape: &[usize], codes: &[u8]) -> HostTensor {
    HostTensor::new(shape.to_vec(), TensorData::F8E4M3FN(codes.iter().map(|&c| F8E4M3FN(c)).collect())).unwrap()
}

fn int4(shape: &[usize], values: &[i8]) -> HostTensor {
    HostTensor::new(shape.to_vec(), TensorData::I4(values.iter().map(|&v| I4(v)).collect())).unwrap()
}

#[test]
fn cast_to_float8_saturates_unless_cast_narrow_says_otherwise() {
    let x = f32s(&[5], &[1000.0, -1000.0, 0.3, f32::NAN, f32::INFINITY]);
    let saturated = run1(LayerKind::Cast { to: DataType::F8E4M3FN }, vec![In::Run(x.clone())]);
    assert_exact(&saturated, &e4m3fn(&[5], &[0x7E, 0xFE, 42, 0x7F, 0x7E]));
    let kind = LayerKind::CastNarrow { to: DataType::F8E4M3FN, saturate: false, e8m0_rounding: E8M0Rounding::Up };
    let overflowing = run1(kind, vec![In::Run(x)]);
    assert_exact(&overflowing, &e4m3fn(&[5], &[0x7F, 0xFF, 42, 0x7F, 0x7F]));
    // Back to f32: 448, -448, 0.3125, NaN, 448.
    let back = run1(LayerKind::Cast { to: DataType::F32 }, vec![In::Run(saturated)]);
    assert_close(&back, DataType::F32, &[5], &[448.0, -448.0, 0.3125, f64::NAN, 448.0], 0.0);
}

#[test]
fn cast_to_int4_truncates_and_wraps_and_widens_sign_correct() {
    let x = f32s(&[5], &[-9.0, 15.0, 7.9, -0.5, f32::NAN]);
    let y = run1(LayerKind::Cast { to: DataType::I4 }, vec![In::Run(x)]);
    assert_exact(&y, &int4(&[5], &[7, -1, 7, 0, 0]));
    let wide = run1(LayerKind::Cast { to: DataType::I8 }, vec![In::Run(y)]);
    assert_exact(&wide, &i8s(&[5], &[7, -1, 7, 0, 0]));
}

#[test]
fn cast_to_e8m0_rounds_up_by_default_and_down_when_asked() {
    let x = f32s(&[3], &[3.0, 0.25, 5.0]);
    let up = run1(LayerKind::Cast { to: DataType::F8E8M0 }, vec![In::Run(x.clone())]);
    let codes = |t: &HostTensor| match t.data() {
        TensorData::F8E8M0(v) => v.iter().map(|c: &F8E8M0| c.0).collect::<Vec<u8>>(),
        other => panic!("expected e8m0, got {other:?}"),
    };
    assert_eq!(codes(&up), vec![129, 125, 130]);
    let kind = LayerKind::CastNarrow { to: DataType::F8E8M0, saturate: true, e8m0_rounding: E8M0Rounding::Down };
    assert_eq!(codes(&run1(kind, vec![In::Run(x)])), vec![128, 125, 129]);
}

#[test]
fn quantize_to_float8_and_back() {
    let x = f32s(&[3], &[1.0, 1000.0, -0.75]);
    let q = run1(
        LayerKind::Quantize { axis: None, to: DataType::F8E4M3FN },
        vec![In::Run(x), In::Const(f32s(&[], &[2.0])), In::Const(e4m3fn(&[], &[0]))],
    );
    // 0.5, 500 → 448 (saturated), -0.375.
    assert_exact(&q, &e4m3fn(&[3], &[0x30, 0x7E, 0xAC]));
    let d = run1(LayerKind::Dequantize { axis: None, to: None }, vec![In::Run(q), In::Const(f32s(&[], &[2.0]))]);
    assert_close(&d, DataType::F32, &[3], &[1.0, 896.0, -0.75], 0.0);
}

#[test]
fn quantize_to_int4_rounds_half_even_adds_the_zero_point_and_clamps() {
    let x = f32s(&[4], &[-20.0, 3.5, 100.0, 2.5]);
    let q = run1(
        LayerKind::Quantize { axis: None, to: DataType::I4 },
        vec![In::Run(x), In::Const(f32s(&[], &[1.0])), In::Const(int4(&[], &[1]))],
    );
    assert_exact(&q, &int4(&[4], &[-8, 5, 7, 3]));
    let d = run1(
        LayerKind::Dequantize { axis: None, to: None },
        vec![In::Run(q), In::Const(f32s(&[], &[0.5])), In::Const(int4(&[], &[1]))],
    );
    assert_close(&d, DataType::F32, &[4], &[-4.5, 2.0, 3.0, 1.0], 0.0);
}

#[test]
fn a_scale_of_the_input_shape_applies_per_element() {
    let x = f32s(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let scale = f32s(&[2, 2], &[1.0, 2.0, 0.5, 4.0]);
    let q = run1(LayerKind::Quantize { axis: None, to: DataType::I8 }, vec![In::Run(x), In::Const(scale.clone())]);
    assert_exact(&q, &i8s(&[2, 2], &[1, 1, 6, 1]));
    let bad = run_err(
        LayerKind::Quantize { axis: None, to: DataType::I8 },
        vec![In::Run(f32s(&[2, 2], &[1.0; 4])), In::Const(f32s(&[2, 1], &[1.0, 2.0]))],
    );
    assert!(bad.contains("scale"), "{bad}");
}

//! Constant, Identity, Shuffle, Concatenation, Slice, Shape, Fill, Expand and Padding.

use crate::common::*;
use kiln::{DataType, HostTensor, LayerKind, PaddingMode, ShuffleParams, TensorData};

#[test]
fn constant_and_identity_pass_values_through() {
    let w = i64s(&[2, 2], &[1, 2, 3, 4]);
    let y = run1(LayerKind::Identity, vec![In::Const(w.clone())]);
    assert_exact(&y, &w);
    let y = run1(LayerKind::Identity, vec![In::Run(bools(&[0], &[]))]);
    assert_exact(&y, &bools(&[0], &[]));
}

#[test]
fn shuffle_transposes_reshapes_and_transposes_again() {
    let x = i32s(&[2, 3], &[1, 2, 3, 4, 5, 6]);
    let p = ShuffleParams { first_transpose: vec![1, 0], ..Default::default() };
    assert_exact(&run1(LayerKind::Shuffle(p), vec![In::Run(x.clone())]), &i32s(&[3, 2], &[1, 4, 2, 5, 3, 6]));
    let p = ShuffleParams {
        first_transpose: vec![1, 0],
        reshape: Some(vec![0, -1]),
        second_transpose: vec![1, 0],
        zero_is_placeholder: true,
    };
    assert_exact(&run1(LayerKind::Shuffle(p), vec![In::Run(x.clone())]), &i32s(&[2, 3], &[1, 2, 3, 4, 5, 6]));
    let p = ShuffleParams { reshape: Some(vec![3, 1, -1]), ..Default::default() };
    assert_exact(&run1(LayerKind::Shuffle(p), vec![In::Run(x.clone())]), &i32s(&[3, 1, 2], &[1, 2, 3, 4, 5, 6]));
    // Reshape dims from a run-time tensor replace the static ones; 0 means zero-length here.
    let p = ShuffleParams { reshape: Some(vec![6]), ..Default::default() };
    let y = run1(LayerKind::Shuffle(p), vec![In::Run(f32s(&[2, 0], &[])), In::Run(ints(&[0, 5]))]);
    assert_close(&y, DataType::F32, &[0, 5], &[], 0.0);
    let p = ShuffleParams { reshape: Some(vec![6]), ..Default::default() };
    let y = run1(LayerKind::Shuffle(p), vec![In::Run(x), In::Run(ints(&[-1, 2]))]);
    assert_exact(&y, &i32s(&[3, 2], &[1, 2, 3, 4, 5, 6]));
}

#[test]
fn shuffle_with_a_bad_runtime_shape_fails() {
    let p = ShuffleParams { reshape: Some(vec![6]), ..Default::default() };
    let reason = run_err(LayerKind::Shuffle(p), vec![In::Run(i32s(&[2, 3], &[0; 6])), In::Run(ints(&[4, 2]))]);
    assert!(reason.contains("reshape"), "{reason}");
}

#[test]
fn concatenation_along_inner_and_outer_axes() {
    let a = f32s(&[2, 1], &[1.0, 2.0]);
    let b = f32s(&[2, 2], &[3.0, 4.0, 5.0, 6.0]);
    let e = f32s(&[2, 0], &[]);
    let y = run1(LayerKind::Concatenation { axis: 1 }, vec![In::Run(a.clone()), In::Run(e), In::Const(b)]);
    assert_close(&y, DataType::F32, &[2, 3], &[1.0, 3.0, 4.0, 2.0, 5.0, 6.0], 0.0);
    let y = run1(LayerKind::Concatenation { axis: 0 }, vec![In::Run(a.clone()), In::Run(a)]);
    assert_close(&y, DataType::F32, &[4, 1], &[1.0, 2.0, 1.0, 2.0], 0.0);
}

fn slice(x: HostTensor, starts: &[i64], ends: &[i64], axes: Option<&[i64]>, steps: Option<&[i64]>) -> HostTensor {
    let mut inputs = vec![In::Run(x), In::Const(ints(starts)), In::Run(ints(ends))];
    inputs.push(axes.map_or(In::Absent, |a| In::Const(ints(a))));
    inputs.push(steps.map_or(In::Absent, |s| In::Const(ints(s))));
    run1(LayerKind::Slice, inputs)
}

#[test]
fn slice_clamps_wraps_negative_indices_and_steps_backward() {
    let x = i64s(&[2, 4], &[0, 1, 2, 3, 4, 5, 6, 7]);
    assert_exact(&slice(x.clone(), &[0, 1], &[2, 3], None, None), &i64s(&[2, 2], &[1, 2, 5, 6]));
    assert_exact(&slice(x.clone(), &[-3], &[100], Some(&[1]), None), &i64s(&[2, 3], &[1, 2, 3, 5, 6, 7]));
    assert_exact(&slice(x.clone(), &[-1], &[-100], Some(&[-1]), Some(&[-2])), &i64s(&[2, 2], &[3, 1, 7, 5]));
    assert_exact(
        &slice(x.clone(), &[1, 3], &[-5, 0], Some(&[0, 1]), Some(&[-1, -1])),
        &i64s(&[2, 3], &[7, 6, 5, 3, 2, 1]),
    );
    assert_exact(&slice(x, &[3], &[1], Some(&[1]), None), &i64s(&[2, 0], &[]));
    let reason = run_err(
        LayerKind::Slice,
        vec![In::Run(i64s(&[2], &[0, 1])), In::Run(ints(&[0])), In::Run(ints(&[1])), In::Absent, In::Run(ints(&[0]))],
    );
    assert!(reason.contains("step"), "{reason}");
}

#[test]
fn shape_fill_and_expand() {
    let y = run1(LayerKind::Shape, vec![In::Run(f32s(&[2, 0, 3], &[]))]);
    assert_exact(&y, &i64s(&[3], &[2, 0, 3]));
    let value = HostTensor::scalar(TensorData::I8(vec![-3])).unwrap();
    let y = run1(LayerKind::Fill { value }, vec![In::Run(ints(&[2, 2]))]);
    assert_exact(&y, &i8s(&[2, 2], &[-3; 4]));
    let y = run1(LayerKind::Expand, vec![In::Run(f32s(&[3, 1], &[1.0, 2.0, 3.0])), In::Run(ints(&[2, 1, 2]))]);
    assert_close(&y, DataType::F32, &[2, 3, 2], &[1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0], 0.0);
    // Expanding to a smaller dim keeps the larger one (numpy broadcast of both shapes).
    let y = run1(LayerKind::Expand, vec![In::Run(bools(&[2], &[true, false])), In::Run(ints(&[1]))]);
    assert_exact(&y, &bools(&[2], &[true, false]));
}

fn pad(mode: PaddingMode, x: HostTensor, pads: &[i64], value: Option<HostTensor>) -> HostTensor {
    run1(LayerKind::Padding { mode }, vec![In::Run(x), In::Run(ints(pads)), value.map_or(In::Absent, In::Run)])
}

#[test]
fn padding_modes() {
    let x = || i32s(&[3], &[1, 2, 3]);
    assert_exact(&pad(PaddingMode::Constant, x(), &[2, 1], Some(i32s(&[], &[9]))), &i32s(&[6], &[9, 9, 1, 2, 3, 9]));
    assert_exact(&pad(PaddingMode::Constant, x(), &[1, 0], None), &i32s(&[4], &[0, 1, 2, 3]));
    assert_exact(&pad(PaddingMode::Reflect, x(), &[2, 2], None), &i32s(&[7], &[3, 2, 1, 2, 3, 2, 1]));
    assert_exact(&pad(PaddingMode::Reflect, x(), &[4, 0], None), &i32s(&[7], &[1, 2, 3, 2, 1, 2, 3]));
    assert_exact(&pad(PaddingMode::Edge, x(), &[2, 1], None), &i32s(&[6], &[1, 1, 1, 2, 3, 3]));
    assert_exact(&pad(PaddingMode::Wrap, x(), &[2, 4], None), &i32s(&[9], &[2, 3, 1, 2, 3, 1, 2, 3, 1]));
}

#[test]
fn padding_two_dims_and_negative_pads_crop() {
    let x = f32s(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let y = pad(PaddingMode::Constant, x.clone(), &[1, 0, 0, 1], Some(f32s(&[], &[-1.0])));
    assert_close(&y, DataType::F32, &[3, 3], &[-1.0, -1.0, -1.0, 1.0, 2.0, -1.0, 3.0, 4.0, -1.0], 0.0);
    // Crop one row in front, then pad the cropped row with its edge.
    let y = pad(PaddingMode::Edge, x, &[-1, 1, 0, 0], None);
    assert_close(&y, DataType::F32, &[1, 3], &[3.0, 3.0, 4.0], 0.0);
    let reason = run_err(
        LayerKind::Padding { mode: PaddingMode::Reflect },
        vec![In::Run(i32s(&[0], &[])), In::Run(ints(&[1, 1]))],
    );
    assert!(reason.contains("non-empty"), "{reason}");
}

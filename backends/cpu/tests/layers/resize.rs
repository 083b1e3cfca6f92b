//! Resize against the outputs of the ONNX operator documentation examples.

use crate::common::*;
use kiln::{
    CoordinateTransformation as CT, DataType, HostTensor, LayerKind, NearestRounding as NR, ResizeMode, ResizeParams,
};

fn params(mode: ResizeMode, ct: CT) -> ResizeParams {
    ResizeParams {
        mode,
        coordinate_transformation: ct,
        nearest_rounding: NR::RoundPreferFloor,
        cubic_coeff_a: -0.75,
        exclude_outside: false,
        extrapolation_value: 0.0,
        axes: None,
    }
}

fn by_scales(p: ResizeParams, x: HostTensor, scales: &[f32]) -> HostTensor {
    run1(LayerKind::Resize(p), vec![In::Run(x), In::Absent, In::Const(f32s(&[scales.len()], scales))])
}

fn by_sizes(p: ResizeParams, x: HostTensor, roi: Option<&[f32]>, sizes: &[i64]) -> HostTensor {
    let roi = roi.map_or(In::Absent, |r| In::Const(f32s(&[r.len()], r)));
    run1(LayerKind::Resize(p), vec![In::Run(x), roi, In::Absent, In::Const(ints(sizes))])
}

fn two_by_two() -> HostTensor {
    f32s(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0])
}

fn four_by_four() -> HostTensor {
    f32s(&[1, 1, 4, 4], &(1..=16).map(|v| v as f32).collect::<Vec<_>>())
}

#[test]
fn nearest_upsample_and_downsample() {
    let p = params(ResizeMode::Nearest, CT::HalfPixel);
    let y = by_scales(p.clone(), two_by_two(), &[1.0, 1.0, 2.0, 3.0]);
    let row = |a: f64, b: f64| [a, a, a, b, b, b];
    let expected: Vec<f64> = [row(1.0, 2.0), row(1.0, 2.0), row(3.0, 4.0), row(3.0, 4.0)].concat();
    assert_close(&y, DataType::F32, &[1, 1, 4, 6], &expected, 0.0);
    let x = f32s(&[1, 1, 2, 4], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    assert_close(
        &by_scales(p.clone(), x.clone(), &[1.0, 1.0, 0.6, 0.6]),
        DataType::F32,
        &[1, 1, 1, 2],
        &[1.0, 3.0],
        0.0,
    );
    assert_close(&by_sizes(p.clone(), x, None, &[1, 1, 1, 3]), DataType::F32, &[1, 1, 1, 3], &[1.0, 2.0, 4.0], 0.0);
    let y = by_sizes(p, two_by_two(), None, &[1, 1, 7, 8]);
    let row = |a: f64, b: f64| [a, a, a, a, b, b, b, b];
    let expected: Vec<f64> = [[row(1.0, 2.0); 4].concat(), [row(3.0, 4.0); 3].concat()].concat();
    assert_close(&y, DataType::F32, &[1, 1, 7, 8], &expected, 0.0);
}

#[test]
fn nearest_rounding_modes() {
    let expect_rows = |rows: [[f64; 8]; 8]| -> Vec<f64> { rows.concat() };
    let a = [1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0, 4.0];
    let shift = |r: [f64; 8], by: f64| r.map(|v| v + by);
    let ceil_like = expect_rows([
        a,
        shift(a, 4.0),
        shift(a, 4.0),
        shift(a, 8.0),
        shift(a, 8.0),
        shift(a, 12.0),
        shift(a, 12.0),
        shift(a, 12.0),
    ]);
    let p = ResizeParams { nearest_rounding: NR::RoundPreferCeil, ..params(ResizeMode::Nearest, CT::Asymmetric) };
    assert_close(&by_sizes(p, four_by_four(), None, &[1, 1, 8, 8]), DataType::F32, &[1, 1, 8, 8], &ceil_like, 0.0);
    let p = ResizeParams { nearest_rounding: NR::Ceil, ..params(ResizeMode::Nearest, CT::HalfPixel) };
    assert_close(&by_sizes(p, four_by_four(), None, &[1, 1, 8, 8]), DataType::F32, &[1, 1, 8, 8], &ceil_like, 0.0);
    let b = [1.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0];
    let floor_like = expect_rows([b, b, b, shift(b, 4.0), shift(b, 4.0), shift(b, 8.0), shift(b, 8.0), shift(b, 12.0)]);
    let p = ResizeParams { nearest_rounding: NR::Floor, ..params(ResizeMode::Nearest, CT::AlignCorners) };
    assert_close(&by_sizes(p, four_by_four(), None, &[1, 1, 8, 8]), DataType::F32, &[1, 1, 8, 8], &floor_like, 0.0);
}

#[test]
fn linear_half_pixel_and_align_corners() {
    let y = by_scales(params(ResizeMode::Linear, CT::HalfPixel), two_by_two(), &[1.0, 1.0, 2.0, 2.0]);
    let expected = [1.0, 1.25, 1.75, 2.0, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3.0, 3.25, 3.75, 4.0];
    assert_close(&y, DataType::F32, &[1, 1, 4, 4], &expected, 1e-6);
    let y = by_scales(params(ResizeMode::Linear, CT::AlignCorners), two_by_two(), &[1.0, 1.0, 2.0, 2.0]);
    let t = 1.0 / 3.0;
    let expected = [
        1.0,
        1.0 + t,
        1.0 + 2.0 * t,
        2.0,
        1.0 + 2.0 * t,
        2.0,
        2.0 + t,
        2.0 + 2.0 * t,
        2.0 + t,
        2.0 + 2.0 * t,
        3.0,
        3.0 + t,
        3.0,
        3.0 + t,
        3.0 + 2.0 * t,
        4.0,
    ];
    assert_close(&y, DataType::F32, &[1, 1, 4, 4], &expected, 1e-6);
    let x = f32s(&[1, 1, 2, 4], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    let y = by_scales(params(ResizeMode::Linear, CT::HalfPixel), x.clone(), &[1.0, 1.0, 0.6, 0.6]);
    assert_close(&y, DataType::F32, &[1, 1, 1, 2], &[2.6666665, 4.3333331], 1e-6);
    // The fractional target width 2.4 (not the output length 2) sets align_corners' ratio.
    let y = by_scales(params(ResizeMode::Linear, CT::AlignCorners), x, &[1.0, 1.0, 0.6, 0.6]);
    assert_close(&y, DataType::F32, &[1, 1, 1, 2], &[1.0, 3.142857], 1e-6);
    let y = by_sizes(params(ResizeMode::Linear, CT::PytorchHalfPixel), four_by_four(), None, &[1, 1, 3, 1]);
    assert_close(&y, DataType::F32, &[1, 1, 3, 1], &[1.6666666, 7.0, 12.333333], 1e-6);
}

#[test]
fn cubic_matches_onnx_examples() {
    let y = by_scales(params(ResizeMode::Cubic, CT::HalfPixel), four_by_four(), &[1.0, 1.0, 0.8, 0.8]);
    let expected =
        [1.47119141, 2.78125, 4.08251953, 6.71142578, 8.02148438, 9.32275391, 11.91650391, 13.2265625, 14.52783203];
    assert_close(&y, DataType::F32, &[1, 1, 3, 3], &expected, 1e-6);
    let y = by_scales(params(ResizeMode::Cubic, CT::AlignCorners), four_by_four(), &[1.0, 1.0, 0.8, 0.8]);
    let expected =
        [1.0, 2.39519159, 3.79038317, 6.58076634, 7.97595793, 9.37114951, 12.16153268, 13.55672427, 14.95191585];
    assert_close(&y, DataType::F32, &[1, 1, 3, 3], &expected, 1e-6);
    let y = by_sizes(params(ResizeMode::Cubic, CT::HalfPixel), four_by_four(), None, &[1, 1, 3, 3]);
    let expected =
        [1.63078704, 3.00462963, 4.37847222, 7.12615741, 8.5, 9.87384259, 12.62152778, 13.99537037, 15.36921296];
    assert_close(&y, DataType::F32, &[1, 1, 3, 3], &expected, 1e-6);
    let p = ResizeParams { cubic_coeff_a: -0.5, exclude_outside: true, ..params(ResizeMode::Cubic, CT::HalfPixel) };
    let y = by_scales(p, four_by_four(), &[1.0, 1.0, 0.8, 0.8]);
    let expected =
        [1.36812675, 2.6695014, 4.0133367, 6.57362535, 7.875, 9.2188353, 11.94896657, 13.25034122, 14.59417652];
    assert_close(&y, DataType::F32, &[1, 1, 3, 3], &expected, 1e-6);
    let y = by_scales(params(ResizeMode::Cubic, CT::Asymmetric), four_by_four(), &[1.0, 1.0, 2.0, 2.0]);
    let first_rows = [
        1.0, 1.40625, 2.0, 2.5, 3.0, 3.59375, 4.0, 4.09375, 2.625, 3.03125, 3.625, 4.125, 4.625, 5.21875, 5.625,
        5.71875,
    ];
    assert_values_at(&y, 0, &first_rows);
    let y = by_scales(params(ResizeMode::Cubic, CT::HalfPixel), four_by_four(), &[1.0, 1.0, 2.0, 2.0]);
    assert_values_at(&y, 0, &[0.47265625, 0.76953125, 1.24609375, 1.875, 2.28125, 2.91015625, 3.38671875, 3.68359375]);
    assert_values_at(
        &y,
        56,
        &[13.31640625, 13.61328125, 14.08984375, 14.71875, 15.125, 15.75390625, 16.23046875, 16.52734375],
    );
}

/// Checks a run of values of an [1, 1, 8, 8] f32 result.
#[track_caller]
fn assert_values_at(y: &HostTensor, start: usize, expected: &[f64]) {
    assert_eq!((y.dtype(), y.shape()), (DataType::F32, &[1usize, 1, 8, 8][..]));
    let got = &y.to_f64_vec()[start..start + expected.len()];
    for (g, e) in got.iter().zip(expected) {
        assert!((g - e).abs() <= 1e-6 * e.abs(), "got {got:?}, expected {expected:?}");
    }
}

#[test]
fn tf_crop_and_resize_with_extrapolation() {
    let p = params(ResizeMode::Linear, CT::TfCropAndResize);
    let y = by_sizes(p.clone(), four_by_four(), Some(&[0.0, 0.0, 0.4, 0.6, 1.0, 1.0, 0.6, 0.8]), &[1, 1, 3, 3]);
    assert_close(&y, DataType::F32, &[1, 1, 3, 3], &[7.6, 7.9, 8.2, 8.8, 9.1, 9.4, 10.0, 10.3, 10.6], 1e-6);
    let p = ResizeParams { extrapolation_value: 10.0, ..p };
    let y = by_sizes(p, four_by_four(), Some(&[0.0, 0.0, 0.4, 0.6, 1.0, 1.0, 1.2, 1.7]), &[1, 1, 3, 3]);
    assert_close(&y, DataType::F32, &[1, 1, 3, 3], &[7.6, 10.0, 10.0, 12.4, 10.0, 10.0, 10.0, 10.0, 10.0], 1e-6);
}

#[test]
fn axes_integer_and_bool_inputs() {
    // Only axis 1 is resized, by sizes; integers interpolate in f64 and truncate.
    let p = ResizeParams { axes: Some(vec![1]), ..params(ResizeMode::Linear, CT::AlignCorners) };
    let y = run1(
        LayerKind::Resize(p),
        vec![In::Run(i32s(&[2, 2], &[0, 3, 10, 20])), In::Absent, In::Absent, In::Const(ints(&[3]))],
    );
    assert_exact(&y, &i32s(&[2, 3], &[0, 1, 3, 10, 15, 20]));
    let p = ResizeParams { axes: Some(vec![0]), ..params(ResizeMode::Nearest, CT::Asymmetric) };
    let y = run1(
        LayerKind::Resize(p),
        vec![In::Run(bools(&[2], &[true, false])), In::Absent, In::Const(f32s(&[1], &[2.0]))],
    );
    assert_exact(&y, &bools(&[4], &[true, true, false, false]));
    let y = by_scales(params(ResizeMode::Linear, CT::HalfPixel), f16s(&[1, 2], &[0.0, 1.0]), &[1.0, 2.0]);
    assert_close(&y, DataType::F16, &[1, 4], &[0.0, 0.25, 0.75, 1.0], 0.0);
}

#[test]
fn half_pixel_symmetric_and_single_output_pytorch_half_pixel() {
    // ONNX example resize_downsample_scales_linear_half_pixel_symmetric: the target width
    // 2.4 floors to 2, and the sampling grid stays centred.
    let x = f32s(&[1, 1, 1, 4], &[1.0, 2.0, 3.0, 4.0]);
    let y = by_scales(params(ResizeMode::Linear, CT::HalfPixelSymmetric), x.clone(), &[1.0, 1.0, 1.0, 0.6]);
    assert_close(&y, DataType::F32, &[1, 1, 1, 2], &[1.6666666, 3.3333333], 1e-6);
    // A single output samples coordinate 0 (the spec's rule), so cubic returns x[0] exactly.
    let y = by_sizes(params(ResizeMode::Cubic, CT::PytorchHalfPixel), x, None, &[1, 1, 1, 1]);
    assert_close(&y, DataType::F32, &[1, 1, 1, 1], &[1.0], 0.0);
}

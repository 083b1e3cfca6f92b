//! Resize (nearest under every rounding mode, linear, cubic; every coordinate
//! transformation, axes, tf_crop_and_resize), GridSample and Quantize / Dequantize.

use crate::common::*;
use kiln::{
    CoordinateTransformation, DataType, GridSampleMode, GridSamplePadding, GridSampleParams, HostTensor, LayerKind,
    NearestRounding, ResizeMode, ResizeParams,
};
use rand::Rng;

fn params(mode: ResizeMode, ct: CoordinateTransformation) -> ResizeParams {
    ResizeParams {
        mode,
        coordinate_transformation: ct,
        nearest_rounding: NearestRounding::RoundPreferFloor,
        cubic_coeff_a: -0.75,
        exclude_outside: false,
        extrapolation_value: 0.0,
        axes: None,
    }
}

fn f32s(v: &[f32]) -> HostTensor {
    HostTensor::from_f32(vec![v.len()], v.to_vec()).expect("shape")
}

const TRANSFORMS: [CoordinateTransformation; 5] = [
    CoordinateTransformation::HalfPixel,
    CoordinateTransformation::HalfPixelSymmetric,
    CoordinateTransformation::PytorchHalfPixel,
    CoordinateTransformation::AlignCorners,
    CoordinateTransformation::Asymmetric,
];

#[test]
fn resize_every_mode_and_transformation_by_scales_and_sizes() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(60);
    let x = rand_f32(&mut r, &[2, 3, 5, 7], -2.0, 2.0);
    for mode in [ResizeMode::Nearest, ResizeMode::Linear, ResizeMode::Cubic] {
        for ct in TRANSFORMS {
            let p = params(mode, ct);
            let what = format!("{mode:?} {ct:?}");
            // Up along one axis, down along another (fractional scales).
            let scales = In::Const(f32s(&[1.0, 1.0, 1.7, 0.6]));
            let ins = vec![In::Run(x.clone()), In::Absent, scales];
            check_tol(&gpu, LayerKind::Resize(p.clone()), ins, 1e-5, 1e-5, &format!("{what} scales"));
            // Sizes as a run-time input (read back to the host).
            let sizes = In::Run(i64s(&[4], &[2, 3, 9, 4]));
            let ins = vec![In::Run(x.clone()), In::Absent, In::Absent, sizes];
            check_tol(&gpu, LayerKind::Resize(p), ins, 1e-5, 1e-5, &format!("{what} sizes"));
        }
    }
}

#[test]
fn resize_nearest_rounding_modes_and_integers() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(61);
    let x = rand_i32(&mut r, &[1, 2, 4, 6], -100, 100);
    for rounding in [
        NearestRounding::RoundPreferFloor,
        NearestRounding::RoundPreferCeil,
        NearestRounding::Floor,
        NearestRounding::Ceil,
    ] {
        for ct in TRANSFORMS {
            let p = ResizeParams { nearest_rounding: rounding, ..params(ResizeMode::Nearest, ct) };
            let ins = vec![In::Run(x.clone()), In::Absent, In::Const(f32s(&[1.0, 1.0, 2.5, 0.5]))];
            check(&gpu, LayerKind::Resize(p), ins, &format!("nearest {rounding:?} {ct:?}"));
        }
    }
}

#[test]
fn resize_cubic_options_axes_and_five_dims() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(62);
    let x = rand_f32(&mut r, &[1, 2, 6, 5], -1.0, 1.0);
    let p = ResizeParams {
        cubic_coeff_a: -0.5,
        exclude_outside: true,
        ..params(ResizeMode::Cubic, CoordinateTransformation::HalfPixel)
    };
    let ins = vec![In::Run(x.clone()), In::Absent, In::Const(f32s(&[1.0, 1.0, 0.8, 1.6]))];
    check(&gpu, LayerKind::Resize(p), ins, "cubic a=-0.5 exclude_outside");
    // axes [3, 2]: scales listed in that order.
    let p = ResizeParams { axes: Some(vec![3, 2]), ..params(ResizeMode::Linear, CoordinateTransformation::HalfPixel) };
    let ins = vec![In::Run(x), In::Absent, In::Const(f32s(&[2.0, 0.5]))];
    check(&gpu, LayerKind::Resize(p), ins, "linear axes [3, 2]");
    let x = rand_f32(&mut r, &[2, 3, 4, 3, 5], -1.0, 1.0);
    let p = params(ResizeMode::Linear, CoordinateTransformation::AlignCorners);
    let ins = vec![In::Run(x), In::Absent, In::Const(f32s(&[1.0, 1.5, 2.0, 0.7, 1.2]))];
    check(&gpu, LayerKind::Resize(p), ins, "linear 5-D");
}

#[test]
fn resize_tf_crop_and_resize_extrapolates() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(63);
    let x = rand_f32(&mut r, &[1, 1, 6, 6], -1.0, 1.0);
    for mode in [ResizeMode::Nearest, ResizeMode::Linear, ResizeMode::Cubic] {
        let p = ResizeParams { extrapolation_value: 10.0, ..params(mode, CoordinateTransformation::TfCropAndResize) };
        // The crop reaches past the input on both spatial axes.
        let roi = In::Const(f32s(&[0.0, 0.0, -0.3, 0.2, 1.0, 1.0, 0.9, 1.4]));
        let ins = vec![In::Run(x.clone()), roi, In::Absent, In::Const(i64s(&[4], &[1, 1, 5, 7]))];
        check(&gpu, LayerKind::Resize(p), ins, &format!("tf_crop_and_resize {mode:?}"));
    }
}

#[test]
fn resize_refuses_interpolating_integers() {
    let Some(gpu) = gpu() else { return };
    let x = rand_i32(&mut rng(64), &[1, 1, 2, 2], 0, 9);
    let p = params(ResizeMode::Linear, CoordinateTransformation::HalfPixel);
    let (net, _) =
        one_layer(LayerKind::Resize(p), vec![In::Run(x), In::Absent, In::Const(f32s(&[1.0, 1.0, 2.0, 2.0]))]);
    let err = kiln::Backend::check_support(&gpu, &net).expect_err("linear resize of i32 must be refused");
    assert!(err.to_string().contains("floats only"), "{err}");
}

#[test]
fn grid_sample_every_mode_padding_and_alignment() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(65);
    let x2 = rand_f32(&mut r, &[2, 3, 5, 6], -1.0, 1.0);
    // Coordinates past [-1, 1] exercise the padding modes.
    let g2 = rand_f32(&mut r, &[2, 4, 7, 2], -1.4, 1.4);
    let x3 = rand_f32(&mut r, &[1, 2, 3, 4, 5], -1.0, 1.0);
    let g3 = rand_f32(&mut r, &[1, 2, 3, 4, 3], -1.3, 1.3);
    for mode in [GridSampleMode::Nearest, GridSampleMode::Linear, GridSampleMode::Cubic] {
        for padding in [GridSamplePadding::Zeros, GridSamplePadding::Border, GridSamplePadding::Reflection] {
            for align_corners in [false, true] {
                let p = GridSampleParams { mode, padding, align_corners };
                let what = format!("{mode:?} {padding:?} align_corners={align_corners}");
                let ins = vec![In::Run(x2.clone()), In::Run(g2.clone())];
                check_tol(&gpu, LayerKind::GridSample(p), ins, 1e-4, 1e-5, &format!("2-D {what}"));
                if mode != GridSampleMode::Cubic {
                    let ins = vec![In::Run(x3.clone()), In::Run(g3.clone())];
                    check_tol(&gpu, LayerKind::GridSample(p), ins, 1e-4, 1e-5, &format!("3-D {what}"));
                }
            }
        }
    }
}

fn ints(dtype: DataType, shape: &[usize], v: Vec<i64>) -> HostTensor {
    cast(&HostTensor::from_i64(shape.to_vec(), v).expect("shape"), dtype)
}

#[test]
fn quantize_per_tensor_per_axis_and_per_element() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(66);
    let x = rand_f32(&mut r, &[2, 3, 4], -300.0, 300.0);
    for to in [DataType::I8, DataType::U8, DataType::I16, DataType::U16, DataType::I32] {
        let (lo, hi) = if matches!(to, DataType::U8 | DataType::U16) { (0, 200) } else { (-50, 50) };
        let zp1 = ints(to, &[], vec![(lo + hi) / 2]);
        let what = format!("quantize to {to}");
        let ins =
            vec![In::Run(x.clone()), In::Const(HostTensor::from_f32(vec![], vec![0.7]).expect("s")), In::Const(zp1)];
        check(&gpu, LayerKind::Quantize { axis: None, to }, ins, &format!("{what} per tensor"));
        let zp3 = ints(to, &[3], vec![lo, hi, (lo + hi) / 2]);
        let ins = vec![In::Run(x.clone()), In::Const(f32s(&[0.5, 2.0, 0.25])), In::Const(zp3)];
        check(&gpu, LayerKind::Quantize { axis: Some(1), to }, ins, &format!("{what} per axis"));
        let scale = rand_f32(&mut r, &[2, 3, 4], 0.1, 3.0);
        let ins = vec![In::Run(x.clone()), In::Run(scale), In::Absent];
        check(&gpu, LayerKind::Quantize { axis: None, to }, ins, &format!("{what} per element, no zero point"));
    }
    // Ties round to even: 2.5 → 2, 3.5 → 4, -2.5 → -2.
    let ties = f32s(&[2.5, 3.5, -2.5, -0.5, 0.5, 1000.0, -1000.0]);
    let ins = vec![In::Run(ties), In::Const(HostTensor::from_f32(vec![], vec![1.0]).expect("s"))];
    check(&gpu, LayerKind::Quantize { axis: None, to: DataType::I8 }, ins, "quantize ties and saturation");
}

#[test]
fn dequantize_integers_per_tensor_and_per_axis() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(67);
    for dtype in [DataType::I8, DataType::U8, DataType::I16, DataType::U16, DataType::I32] {
        let (lo, hi) = if matches!(dtype, DataType::U8 | DataType::U16) { (0, 250) } else { (-120, 120) };
        let x = ints(dtype, &[2, 3, 4], (0..24).map(|_| r.gen_range(lo..hi)).collect());
        let what = format!("dequantize {dtype}");
        let zp1 = ints(dtype, &[], vec![(lo + hi) / 3]);
        let scale1 = In::Const(HostTensor::from_f32(vec![], vec![0.37]).expect("s"));
        let ins = vec![In::Run(x.clone()), scale1, In::Const(zp1)];
        check(&gpu, LayerKind::Dequantize { axis: None, to: None }, ins, &format!("{what} per tensor"));
        let zp4 = ints(dtype, &[4], vec![lo, hi, 0, (lo + hi) / 2]);
        let ins = vec![In::Run(x.clone()), In::Const(f32s(&[0.5, 2.0, 0.25, 1.5])), In::Const(zp4)];
        check(&gpu, LayerKind::Dequantize { axis: Some(2), to: None }, ins, &format!("{what} per axis"));
        let ins = vec![In::Run(x), In::Const(f32s(&[0.1, 0.2, 0.3]))];
        check(&gpu, LayerKind::Dequantize { axis: Some(1), to: None }, ins, &format!("{what} without zero point"));
    }
    // An f16 scale gives an f16 output.
    let x = ints(DataType::I8, &[5], vec![-128, -3, 0, 7, 127]);
    let scale = cast(&HostTensor::from_f32(vec![], vec![0.3]).expect("s"), DataType::F16);
    check(&gpu, LayerKind::Dequantize { axis: None, to: None }, vec![In::Run(x.clone()), In::Const(scale)], "dequantize to f16");
    // An f32 scale written as f16 (`to`): the f32 value rounded once, as a Cast rounds it.
    let scale = HostTensor::from_f32(vec![], vec![0.0371]).expect("s");
    check(&gpu, LayerKind::Dequantize { axis: None, to: Some(DataType::F16) }, vec![In::Run(x), In::Const(scale)], "dequantize f32 values into f16");
}

//! Select, Fill, GatherElements/ND, Scatter, TopK, running sums, Resize (every mode) and Pad
//! against the cpu oracle; shape-like inputs fed as network inputs exercise the read-back
//! of small device values for shape inference.

use crate::common::{check, f32s, i64s, random, rng, In};
use kiln::*;

#[test]
fn select_broadcasts_every_storage_width() {
    let mut r = rng(21);
    for (dtype, shape_a, shape_b) in [
        (DataType::F32, vec![2, 1, 5], vec![5]),
        (DataType::F16, vec![4, 5], vec![1]),
        (DataType::I64, vec![1, 4, 1], vec![2, 1, 5]),
    ] {
        let cond = random(&mut r, DataType::Bool, &[2, 4, 5]);
        let (a, b) = (random(&mut r, dtype, &shape_a), random(&mut r, dtype, &shape_b));
        check(&format!("select {dtype}"), LayerKind::Select, vec![In::Run(cond), In::Run(a), In::Run(b)], 0.0);
    }
    let (c, a, b) = (
        random(&mut r, DataType::Bool, &[7]),
        random(&mut r, DataType::Bool, &[7]),
        random(&mut r, DataType::Bool, &[1]),
    );
    check("select bool", LayerKind::Select, vec![In::Run(c), In::Run(a), In::Run(b)], 0.0);
}

#[test]
fn fill_and_expand_take_their_shape_from_a_network_input() {
    let value = HostTensor::scalar(TensorData::F32(vec![2.5])).unwrap();
    check("fill", LayerKind::Fill { value }, vec![In::Run(i64s(&[3], vec![2, 3, 4]))], 0.0);
    let mut r = rng(22);
    check(
        "expand",
        LayerKind::Expand,
        vec![In::Run(random(&mut r, DataType::F32, &[3, 1])), In::Run(i64s(&[3], vec![2, 3, 6]))],
        0.0,
    );
}

#[test]
fn gather_elements_and_nd_match() {
    let mut r = rng(23);
    let data = random(&mut r, DataType::F32, &[3, 4, 5]);
    let idx = i64s(&[3, 2, 5], (0..30).map(|i| (i * 7 % 8) as i64 - 4).collect());
    check(
        "gather elements axis 1",
        LayerKind::Gather { mode: GatherMode::Elements { axis: 1 } },
        vec![In::Run(data.clone()), In::Run(idx)],
        0.0,
    );
    let idx = i64s(&[3, 2, 2], vec![0, 1, 3, -1, 2, 2, 1, 0, -4, 4, 0, 0]);
    check(
        "gather nd batch 1",
        LayerKind::Gather { mode: GatherMode::Nd { batch_dims: 1 } },
        vec![In::Run(data.clone()), In::Run(idx)],
        0.0,
    );
    let idx = i64s(&[2, 1], vec![2, -3]);
    check(
        "gather nd slices",
        LayerKind::Gather { mode: GatherMode::Nd { batch_dims: 0 } },
        vec![In::Run(data), In::Run(idx)],
        0.0,
    );
}

#[test]
fn scatter_elements_and_nd_with_reductions_match() {
    let mut r = rng(24);
    let data = random(&mut r, DataType::F32, &[4, 5]);
    let idx = i64s(&[4, 3], vec![0, 1, 1, 4, -1, 2, 3, 3, 3, 0, 0, 0]);
    for reduction in [ScatterReduction::None, ScatterReduction::Add, ScatterReduction::Mul, ScatterReduction::Max] {
        let upd = random(&mut r, DataType::F32, &[4, 3]);
        let kind = LayerKind::Scatter { mode: ScatterMode::Elements { axis: 1 }, reduction };
        check(
            &format!("scatter elements {reduction:?}"),
            kind,
            vec![In::Run(data.clone()), In::Run(idx.clone()), In::Run(upd)],
            1e-6,
        );
    }
    let data = random(&mut r, DataType::I64, &[4, 3, 2]);
    let idx = i64s(&[3, 1], vec![1, 3, 1]);
    let upd = random(&mut r, DataType::I64, &[3, 3, 2]);
    let kind = LayerKind::Scatter { mode: ScatterMode::Nd, reduction: ScatterReduction::Add };
    check("scatter nd add i64", kind, vec![In::Run(data), In::Run(idx), In::Run(upd)], 0.0);
}

#[test]
fn top_k_and_running_sums_match() {
    let mut r = rng(25);
    let x = random(&mut r, DataType::F32, &[3, 7, 2]);
    for largest in [true, false] {
        let kind = LayerKind::TopK { largest, axis: 1, sorted: true };
        check(&format!("topk largest={largest}"), kind, vec![In::Run(x.clone()), In::Run(i64s(&[1], vec![4]))], 0.0);
    }
    // Ties go to the lower index.
    let ties = i64s(&[2, 6], vec![3, 1, 3, 2, 3, 1, 0, 0, 5, 5, 0, 5]);
    check(
        "topk ties",
        LayerKind::TopK { largest: true, axis: 1, sorted: true },
        vec![In::Run(ties), In::Const(i64s(&[1], vec![3]))],
        0.0,
    );
    for (exclusive, reverse) in [(false, false), (true, false), (false, true), (true, true)] {
        let kind = LayerKind::CumulativeSum { exclusive, reverse };
        let axis = HostTensor::scalar(TensorData::I64(vec![-2])).unwrap();
        check(&format!("cumsum ex={exclusive} rev={reverse}"), kind, vec![In::Run(x.clone()), In::Run(axis)], 1e-6);
    }
    let axis = HostTensor::scalar(TensorData::I32(vec![1])).unwrap();
    let kind = LayerKind::CumulativeProduct { exclusive: false, reverse: true };
    check("cumprod i64", kind, vec![In::Run(random(&mut r, DataType::I64, &[2, 5])), In::Const(axis)], 0.0);
}

fn resize_params(mode: ResizeMode, ct: CoordinateTransformation, rounding: NearestRounding) -> ResizeParams {
    ResizeParams {
        mode,
        coordinate_transformation: ct,
        nearest_rounding: rounding,
        cubic_coeff_a: -0.75,
        exclude_outside: false,
        extrapolation_value: 0.0,
        axes: None,
    }
}

#[test]
fn resize_every_mode_matches() {
    use CoordinateTransformation as C;
    let mut r = rng(26);
    let x = random(&mut r, DataType::F32, &[1, 2, 4, 5]);
    let scales = f32s(&[4], vec![1.0, 1.0, 1.7, 0.6]);
    let cases = [
        resize_params(ResizeMode::Nearest, C::HalfPixel, NearestRounding::RoundPreferCeil),
        resize_params(ResizeMode::Nearest, C::AlignCorners, NearestRounding::RoundPreferFloor),
        resize_params(ResizeMode::Linear, C::HalfPixel, NearestRounding::Floor),
        resize_params(ResizeMode::Linear, C::AlignCorners, NearestRounding::Floor),
        resize_params(ResizeMode::Cubic, C::Asymmetric, NearestRounding::Floor),
        ResizeParams {
            exclude_outside: true,
            ..resize_params(ResizeMode::Cubic, C::HalfPixel, NearestRounding::Floor)
        },
    ];
    for p in cases {
        let what = format!("resize {:?} {:?}", p.mode, p.coordinate_transformation);
        check(&what, LayerKind::Resize(p), vec![In::Run(x.clone()), In::Absent, In::Run(scales.clone())], 1e-5);
    }
    let p = ResizeParams {
        extrapolation_value: 9.0,
        ..resize_params(ResizeMode::Linear, C::TfCropAndResize, NearestRounding::Floor)
    };
    let roi = f32s(&[8], vec![0.0, 0.0, -0.2, 0.1, 1.0, 1.0, 0.8, 1.3]);
    check(
        "crop and resize",
        LayerKind::Resize(p),
        vec![In::Run(x), In::Run(roi), In::Absent, In::Run(i64s(&[4], vec![1, 2, 3, 6]))],
        1e-5,
    );
}

#[test]
fn padding_every_mode_matches() {
    let mut r = rng(27);
    let x = random(&mut r, DataType::F32, &[2, 3, 4]);
    let pads = i64s(&[6], vec![0, 2, -1, 1, 3, 5]);
    for mode in [PaddingMode::Constant, PaddingMode::Reflect, PaddingMode::Edge, PaddingMode::Wrap] {
        check(
            &format!("pad {mode:?}"),
            LayerKind::Padding { mode },
            vec![In::Run(x.clone()), In::Run(pads.clone())],
            0.0,
        );
    }
    let value = HostTensor::scalar(TensorData::F32(vec![-7.0])).unwrap();
    check(
        "pad constant value",
        LayerKind::Padding { mode: PaddingMode::Constant },
        vec![In::Run(x), In::Const(pads), In::Run(value)],
        0.0,
    );
}

#[test]
fn parametric_relu_broadcasts_the_slope() {
    let mut r = rng(28);
    let x = random(&mut r, DataType::F32, &[2, 3, 4]);
    check(
        "prelu",
        LayerKind::ParametricRelu,
        vec![In::Run(x), In::Const(random(&mut r, DataType::F32, &[3, 1]))],
        1e-6,
    );
}

//! GridSample, N-D and integer pooling, Einsum and Deconvolution against the cpu oracle.
//! GridSample, pooling and Einsum compute as kiln-cpu does (in double, in its order), so their
//! tolerances only allow a last-place difference; Deconvolution sums in f32 in another order.

use crate::common::{check, random, rng, In};
use half::{bf16, f16};
use kiln::*;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// A last-place difference of each type (relative to 1 + |want|).
fn last_place(dtype: DataType) -> f64 {
    match dtype {
        DataType::F16 => 1e-3,
        DataType::BF16 => 8e-3,
        _ => 1e-6,
    }
}

/// Uniform values in [-limit, limit) of a float `dtype`.
fn spread(r: &mut ChaCha8Rng, dtype: DataType, shape: &[usize], limit: f32) -> HostTensor {
    let v: Vec<f32> = (0..shape.iter().product()).map(|_| r.gen_range(-limit..limit)).collect();
    let data = match dtype {
        DataType::F32 => TensorData::F32(v),
        DataType::F16 => TensorData::F16(v.iter().map(|&x| f16::from_f32(x)).collect()),
        DataType::BF16 => TensorData::BF16(v.iter().map(|&x| bf16::from_f32(x)).collect()),
        other => panic!("no spread {other}"),
    };
    HostTensor::new(shape.to_vec(), data).unwrap()
}

const GRID_MODES: [GridSampleMode; 3] = [GridSampleMode::Nearest, GridSampleMode::Linear, GridSampleMode::Cubic];
const GRID_PADDINGS: [GridSamplePadding; 3] =
    [GridSamplePadding::Zeros, GridSamplePadding::Border, GridSamplePadding::Reflection];

#[test]
fn grid_sample_every_mode_padding_and_alignment_matches() {
    let mut r = rng(90);
    for dtype in [DataType::F32, DataType::F16, DataType::BF16] {
        let x = random(&mut r, dtype, &[2, 3, 5, 6]);
        // Points up to 1.5 outside [-1, 1]: every padding mode folds or clamps some.
        let grid = spread(&mut r, dtype, &[2, 4, 7, 2], 2.5);
        for mode in GRID_MODES {
            for padding in GRID_PADDINGS {
                for align_corners in [false, true] {
                    let p = GridSampleParams { mode, padding, align_corners };
                    check(
                        &format!("grid sample {mode:?} {padding:?} align={align_corners} {dtype}"),
                        LayerKind::GridSample(p),
                        vec![In::Run(x.clone()), In::Run(grid.clone())],
                        last_place(dtype),
                    );
                }
            }
        }
    }
}

#[test]
fn grid_sample_in_one_and_three_dims_and_at_hostile_points_matches() {
    let mut r = rng(91);
    let volume = random(&mut r, DataType::F32, &[1, 2, 3, 4, 5]);
    let volume_grid = spread(&mut r, DataType::F32, &[1, 2, 3, 4, 3], 1.4);
    let line = random(&mut r, DataType::F32, &[2, 3, 7]);
    let line_grid = spread(&mut r, DataType::F32, &[2, 5, 1], 1.4);
    // NaN, infinities, huge and far-outside coordinates.
    let image = random(&mut r, DataType::F32, &[1, 2, 4, 4]);
    let hostile = [f32::NAN, 0.3, f32::INFINITY, -0.2, f32::NEG_INFINITY, 1e30, -7.0, 3.5, 0.0, -1e30, 1.0, -1.0];
    let hostile_grid = HostTensor::new(vec![1, 2, 3, 2], TensorData::F32(hostile.to_vec())).unwrap();
    for mode in GRID_MODES {
        for padding in GRID_PADDINGS {
            for align_corners in [false, true] {
                let p = GridSampleParams { mode, padding, align_corners };
                let what = format!("{mode:?} {padding:?} align={align_corners}");
                let cases =
                    [("3-D", &volume, &volume_grid), ("1-D", &line, &line_grid), ("hostile", &image, &hostile_grid)];
                for (name, x, grid) in cases {
                    check(
                        &format!("grid sample {name} {what}"),
                        LayerKind::GridSample(p),
                        vec![In::Run(x.clone()), In::Run(grid.clone())],
                        1e-6,
                    );
                }
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn pool(
    kind: PoolingKind,
    window: &[usize],
    strides: &[usize],
    dilations: &[usize],
    pre: &[usize],
    post: &[usize],
    ceil: bool,
    excl: bool,
) -> PoolingParams {
    PoolingParams {
        kind,
        window: window.to_vec(),
        strides: strides.to_vec(),
        dilations: dilations.to_vec(),
        pre_padding: pre.to_vec(),
        post_padding: post.to_vec(),
        ceil_mode: ceil,
        average_count_excludes_padding: excl,
    }
}

#[test]
fn three_d_one_d_and_dilated_pooling_matches() {
    use PoolingKind::{Average, Max};
    let mut r = rng(92);
    for dtype in [DataType::F32, DataType::F16, DataType::BF16] {
        let cases = [
            (
                "3-D default",
                pool(Max, &[2, 2, 2], &[1, 1, 1], &[1, 1, 1], &[0, 0, 0], &[0, 0, 0], false, true),
                vec![1, 3, 6, 5, 7],
            ),
            (
                "3-D dilated",
                pool(Max, &[2, 2, 2], &[1, 1, 1], &[2, 2, 2], &[0, 0, 0], &[0, 0, 0], false, true),
                vec![1, 1, 6, 6, 6],
            ),
            (
                "3-D avg incl pad ceil",
                pool(Average, &[3, 3, 3], &[2, 2, 2], &[2, 1, 2], &[1, 1, 1], &[1, 1, 1], true, false),
                vec![2, 2, 9, 8, 9],
            ),
            (
                "3-D avg excl pad ceil",
                pool(Average, &[3, 2, 3], &[2, 2, 1], &[2, 2, 1], &[1, 0, 1], &[1, 1, 0], true, true),
                vec![1, 2, 9, 8, 7],
            ),
            (
                "3-D avg incl pad",
                pool(Average, &[2, 3, 2], &[1, 2, 2], &[1, 1, 1], &[1, 1, 0], &[0, 1, 1], false, false),
                vec![1, 2, 5, 6, 7],
            ),
            ("1-D max", pool(Max, &[3], &[2], &[2], &[1], &[2], true, true), vec![2, 3, 11]),
            ("1-D avg", pool(Average, &[4], &[1], &[1], &[2], &[1], false, false), vec![2, 3, 9]),
            (
                "2-D dilated avg",
                pool(Average, &[2, 3], &[2, 1], &[2, 2], &[1, 2], &[0, 1], true, true),
                vec![2, 3, 8, 9],
            ),
            // Windows mostly over padding: the kernel finds the inside cells by division
            // (every window keeps a cell inside, as -inf - -inf would not compare).
            (
                "2-D wide avg incl pad",
                pool(Average, &[5, 300], &[1, 2], &[2, 1], &[6, 290], &[3, 5], false, false),
                vec![1, 2, 9, 10],
            ),
            (
                "2-D wide max",
                pool(Max, &[5, 1 << 20], &[1, 1], &[2, 1], &[6, (1 << 20) - 1], &[3, 7], false, true),
                vec![1, 2, 9, 10],
            ),
        ];
        for (name, p, shape) in cases {
            check(
                &format!("pool {name} {dtype}"),
                LayerKind::Pooling(p),
                vec![In::Run(random(&mut r, dtype, &shape))],
                last_place(dtype),
            );
        }
    }
}

#[test]
fn max_pooling_on_integers_matches() {
    let mut r = rng(93);
    let p2 = pool(PoolingKind::Max, &[2, 2], &[2, 2], &[1, 1], &[1, 0], &[1, 1], true, true);
    let p3 = pool(PoolingKind::Max, &[2, 2, 2], &[1, 2, 1], &[1, 1, 2], &[0, 1, 0], &[1, 0, 0], false, true);
    let u8s = |r: &mut ChaCha8Rng, shape: &[usize]| {
        let v = (0..shape.iter().product()).map(|_| r.gen::<u8>()).collect();
        HostTensor::new(shape.to_vec(), TensorData::U8(v)).unwrap()
    };
    let i8s = |r: &mut ChaCha8Rng, shape: &[usize]| {
        let v = (0..shape.iter().product()).map(|_| r.gen::<i8>()).collect();
        HostTensor::new(shape.to_vec(), TensorData::I8(v)).unwrap()
    };
    check("max pool u8 2-D", LayerKind::Pooling(p2.clone()), vec![In::Run(u8s(&mut r, &[1, 2, 5, 5]))], 0.0);
    check("max pool i8 2-D", LayerKind::Pooling(p2.clone()), vec![In::Run(i8s(&mut r, &[2, 1, 6, 7]))], 0.0);
    check("max pool u8 3-D", LayerKind::Pooling(p3.clone()), vec![In::Run(u8s(&mut r, &[1, 2, 4, 5, 6]))], 0.0);
    for dtype in [DataType::I32, DataType::I64] {
        check(
            &format!("max pool {dtype} 2-D"),
            LayerKind::Pooling(p2.clone()),
            vec![In::Run(random(&mut r, dtype, &[2, 3, 7, 6]))],
            0.0,
        );
        check(
            &format!("max pool {dtype} 3-D"),
            LayerKind::Pooling(p3.clone()),
            vec![In::Run(random(&mut r, dtype, &[1, 2, 4, 5, 6]))],
            0.0,
        );
    }
}

#[test]
fn einsum_equations_match() {
    let mut r = rng(94);
    let cases: [(&str, Vec<Vec<usize>>); 10] = [
        ("bij,bjk->bik", vec![vec![3, 4, 5], vec![3, 5, 6]]),
        ("ij->ji", vec![vec![4, 7]]),
        ("ij->i", vec![vec![5, 9]]),
        ("ij->", vec![vec![6, 7]]),
        ("i,i", vec![vec![33], vec![33]]),
        ("ii->i", vec![vec![5, 5]]),
        ("...ii->...i", vec![vec![2, 3, 4, 4]]),
        ("bn,anm,bm->ba", vec![vec![2, 3], vec![4, 3, 5], vec![2, 5]]),
        ("bij,bjk", vec![vec![2, 3, 4], vec![2, 4, 2]]),
        ("i,j->ij", vec![vec![4], vec![6]]),
    ];
    for dtype in [DataType::F32, DataType::F16, DataType::BF16] {
        for (equation, shapes) in &cases {
            let inputs = shapes.iter().map(|s| In::Run(random(&mut r, dtype, s))).collect();
            check(
                &format!("einsum {equation} {dtype}"),
                LayerKind::Einsum { equation: equation.to_string() },
                inputs,
                last_place(dtype),
            );
        }
    }
    for dtype in [DataType::I32, DataType::I64] {
        let inputs = vec![In::Run(random(&mut r, dtype, &[3, 4])), In::Run(random(&mut r, dtype, &[4, 5]))];
        check(&format!("einsum ij,jk->ik {dtype}"), LayerKind::Einsum { equation: "ij,jk->ik".into() }, inputs, 0.0);
    }
}

fn deconv(
    groups: usize,
    strides: &[usize],
    dilations: &[usize],
    pre: &[usize],
    post: &[usize],
    out_pad: &[usize],
) -> DeconvolutionParams {
    DeconvolutionParams {
        groups,
        strides: strides.to_vec(),
        dilations: dilations.to_vec(),
        pre_padding: pre.to_vec(),
        post_padding: post.to_vec(),
        output_padding: out_pad.to_vec(),
    }
}

#[test]
fn deconvolution_matches_in_each_precision() {
    let mut r = rng(95);
    // (name, params, input dims, weight dims [C_in, maps / groups, kernel…]).
    let cases = [
        ("2-D plain", deconv(1, &[1, 1], &[1, 1], &[0, 0], &[0, 0], &[0, 0]), vec![1, 3, 4, 5], vec![3, 2, 3, 3]),
        (
            "2-D stride 3 pads",
            deconv(1, &[3, 2], &[1, 1], &[1, 2], &[2, 1], &[0, 0]),
            vec![2, 2, 3, 4],
            vec![2, 3, 3, 3],
        ),
        (
            "2-D output padding",
            deconv(1, &[2, 2], &[1, 1], &[0, 0], &[0, 0], &[1, 1]),
            vec![1, 1, 3, 3],
            vec![1, 2, 3, 3],
        ),
        ("2-D groups 2", deconv(2, &[1, 1], &[1, 1], &[1, 1], &[1, 1], &[0, 0]), vec![1, 4, 5, 5], vec![4, 3, 3, 3]),
        ("2-D dilations 2", deconv(1, &[2, 1], &[2, 2], &[1, 0], &[0, 1], &[1, 0]), vec![2, 3, 4, 4], vec![3, 2, 2, 3]),
        ("1-D", deconv(1, &[2], &[1], &[1], &[0], &[0]), vec![2, 3, 6], vec![3, 4, 4]),
        (
            "3-D",
            deconv(1, &[2, 1, 2], &[1, 1, 1], &[0, 1, 1], &[0, 1, 0], &[1, 0, 1]),
            vec![1, 2, 3, 4, 3],
            vec![2, 2, 3, 3, 2],
        ),
        (
            "3-D groups 3",
            deconv(3, &[1, 2, 1], &[1, 1, 2], &[0, 0, 0], &[0, 0, 0], &[0, 0, 0]),
            vec![1, 3, 3, 3, 4],
            vec![3, 1, 2, 2, 2],
        ),
    ];
    for dtype in [DataType::F32, DataType::F16, DataType::BF16] {
        let tolerance = match dtype {
            DataType::F16 => 1e-2,
            DataType::BF16 => 5e-2,
            _ => 1e-5,
        };
        for (name, p, x, w) in &cases {
            for bias in [false, true] {
                let maps = w[1] * p.groups;
                let inputs = vec![
                    In::Run(random(&mut r, dtype, x)),
                    In::Const(random(&mut r, dtype, w)),
                    if bias { In::Const(random(&mut r, dtype, &[maps])) } else { In::Absent },
                ];
                check(
                    &format!("deconvolution {name} bias={bias} {dtype}"),
                    LayerKind::Deconvolution(p.clone()),
                    inputs,
                    tolerance,
                );
            }
        }
    }
}

/// The channels-last 2-D kernel (what pooling after a 16-bit convolution runs where cuDNN does
/// not: ceil mode, asymmetric padding, dilation) gives bit for bit what the general kernel gives
/// on the same values in N×C×H×W, which the tests above hold to the cpu oracle.
#[test]
fn channels_last_2d_pooling_equals_the_general_kernel() {
    use kiln_cuda::ops::{layout, pool, Ctx};
    use PoolingKind::{Average, Max};
    let Some(cuda) = crate::common::backend() else { return };
    let gpu = cuda.gpu().expect("device");
    let cx = Ctx::new(&gpu, false);
    let mut r = rng(93);
    let cases = [
        ("max 3x3/2 ceil (GoogLeNet)", pool(Max, &[3, 3], &[2, 2], &[1, 1], &[0, 0], &[0, 0], true, false)),
        ("max dilated, asymmetric pads", pool(Max, &[3, 2], &[1, 2], &[2, 1], &[2, 0], &[1, 1], false, false)),
        ("avg ceil, padding counted", pool(Average, &[3, 3], &[2, 2], &[1, 1], &[1, 0], &[0, 1], true, false)),
        ("avg dilated, padding excluded", pool(Average, &[2, 3], &[2, 1], &[2, 2], &[1, 2], &[0, 1], true, true)),
    ];
    // 24 channels: a thread takes 8 (16-bit) or 4 (f32); 7: one each.
    for (dtype, c) in [DataType::F32, DataType::F16, DataType::BF16].into_iter().flat_map(|t| [(t, 24), (t, 7)]) {
        let (h, w) = (15usize, 17usize);
        let x = random(&mut r, dtype, &[2, c, h, w]);
        for (what, p) in &cases {
            let out_len = |len: usize, d: usize| {
                let span = len + p.pre_padding[d] + p.post_padding[d] - ((p.window[d] - 1) * p.dilations[d] + 1);
                if p.ceil_mode { span.div_ceil(p.strides[d]) + 1 } else { span / p.strides[d] + 1 }
            };
            let out_shape = [2, c, out_len(h, 0), out_len(w, 1)];
            let rows = gpu.upload(&x).expect("upload");
            let general = pool::pooling(&cx, p, &rows, &out_shape).expect("general kernel");
            let nhwc = layout::to_channels_last(&cx, &rows).expect("to channels-last");
            let fast = pool::pooling_channels_last(&cx, p, &nhwc, &out_shape).expect("nhwc kernel").expect("the NHWC kernel applies");
            assert!(fast.channels_last(), "{what}: the output stays channels-last");
            let fast = layout::to_row_major(&cx, &fast).expect("to row-major");
            let (want, got) = (gpu.download(&general).unwrap(), gpu.download(&fast).unwrap());
            assert_eq!(got, want, "{what} {dtype} {c} channels");
        }
    }
}

/// A concatenation of channels-last parts (Inception's and DenseNet's, after 16-bit
/// convolutions) stays channels-last, on the channel axis and on a spatial one, and holds what
/// the concatenation of the same values row-major holds; a mix of layouts gives row-major.
#[test]
fn concatenation_keeps_channels_last_parts_channels_last() {
    use kiln_cuda::ops::{layout, movement, Ctx};
    let Some(cuda) = crate::common::backend() else { return };
    let gpu = cuda.gpu().expect("device");
    let cx = Ctx::new(&gpu, false);
    let mut r = rng(94);
    for dtype in [DataType::F16, DataType::F32] {
        let a = gpu.upload(&random(&mut r, dtype, &[2, 8, 5, 6])).unwrap();
        let b = gpu.upload(&random(&mut r, dtype, &[2, 12, 5, 6])).unwrap();
        let c = gpu.upload(&random(&mut r, dtype, &[2, 8, 3, 6])).unwrap();
        let nhwc = |t| layout::to_channels_last(&cx, t).unwrap();
        for (axis, parts, out_shape) in [(1, [&a, &b], [2, 20, 5, 6]), (2, [&a, &c], [2, 8, 8, 6])] {
            let want = gpu.download(&movement::concatenation(&cx, &parts, axis, &out_shape).unwrap()).unwrap();
            let last = [nhwc(parts[0]), nhwc(parts[1])];
            let got = movement::concatenation(&cx, &[&last[0], &last[1]], axis, &out_shape).unwrap();
            assert!(got.channels_last(), "{dtype} axis {axis}: channels-last parts give a channels-last output");
            assert_eq!(gpu.download(&layout::to_row_major(&cx, &got).unwrap()).unwrap(), want, "{dtype} axis {axis}");
            let mixed = movement::concatenation(&cx, &[&last[0], parts[1]], axis, &out_shape).unwrap();
            assert!(!mixed.channels_last(), "{dtype} axis {axis}: mixed layouts give row-major");
            assert_eq!(gpu.download(&mixed).unwrap(), want, "{dtype} axis {axis}, mixed layouts");
        }
    }
}

//! Each kernel family against the cpu oracle on random inputs.

use crate::common::{check, f32s, i64s, random, rng, In};
use kiln::*;

const F32_TOL: f64 = 1e-5;

#[test]
fn elementwise_binary_broadcasts_like_the_oracle() {
    let mut r = rng(1);
    for op in [ElementwiseOp::Sum, ElementwiseOp::Sub, ElementwiseOp::Prod, ElementwiseOp::Div, ElementwiseOp::Max, ElementwiseOp::Min, ElementwiseOp::Greater, ElementwiseOp::Equal] {
        let a = random(&mut r, DataType::F32, &[2, 3, 4]);
        let b = random(&mut r, DataType::F32, &[3, 1]);
        check(&format!("{op:?}"), LayerKind::Elementwise { op }, vec![In::Run(a), In::Run(b)], F32_TOL);
    }
    let a = random(&mut r, DataType::F16, &[5, 1, 7]);
    let b = random(&mut r, DataType::F16, &[1, 6, 7]);
    check("f16 sum", LayerKind::Elementwise { op: ElementwiseOp::Sum }, vec![In::Run(a), In::Run(b)], 1e-3);
    // 16-byte vectors (`binary_vec_*`): a bias, an attention-mask broadcast, a scalar; an
    // innermost length of 12 halves is not whole vectors and runs element by element.
    for (a, b) in [(vec![4, 6, 16], vec![16]), (vec![2, 3, 4, 8], vec![2, 1, 1, 8]), (vec![3, 8], vec![]), (vec![4, 6, 12], vec![12]), (vec![2, 8, 1], vec![2, 1, 8])] {
        for dtype in [DataType::F16, DataType::BF16, DataType::F32] {
            let tolerance = if dtype == DataType::F32 { F32_TOL } else { 1e-2 };
            let (x, y) = (random(&mut r, dtype, &a), random(&mut r, dtype, &b));
            check(&format!("{dtype} {a:?} - {b:?}"), LayerKind::Elementwise { op: ElementwiseOp::Sub }, vec![In::Run(x), In::Run(y)], tolerance);
        }
        let x = random(&mut r, DataType::F16, &a);
        check(&format!("f16 gelu {a:?}"), LayerKind::Activation { kind: ActivationKind::GeluErf }, vec![In::Run(x)], 2e-3);
    }
    let a = random(&mut r, DataType::I64, &[4, 3]);
    let b = random(&mut r, DataType::I64, &[3]);
    check("i64 prod", LayerKind::Elementwise { op: ElementwiseOp::Prod }, vec![In::Run(a), In::Run(b)], 0.0);
    let a = random(&mut r, DataType::Bool, &[9]);
    let b = random(&mut r, DataType::Bool, &[9]);
    check("bool xor", LayerKind::Elementwise { op: ElementwiseOp::Xor }, vec![In::Run(a), In::Run(b)], 0.0);
}

#[test]
fn activations_and_unary_ops_match() {
    let mut r = rng(2);
    use ActivationKind as A;
    let kinds = [
        A::Relu,
        A::Sigmoid,
        A::Tanh,
        A::LeakyRelu { alpha: 0.1 },
        A::Elu { alpha: 0.7 },
        A::Selu { alpha: 1.6, gamma: 1.05 },
        A::Softsign,
        A::Softplus,
        A::Clip { min: -0.3, max: 0.4 },
        A::HardSigmoid { alpha: 0.2, beta: 0.5 },
        A::HardSwish,
        A::ScaledTanh { alpha: 1.5, beta: 0.5 },
        A::ThresholdedRelu { alpha: 0.2 },
        A::GeluErf,
        A::GeluTanh,
        A::Celu { alpha: 0.8 },
        A::Mish,
        A::Swish,
    ];
    for kind in kinds {
        check(&format!("{kind:?}"), LayerKind::Activation { kind }, vec![In::Run(random(&mut r, DataType::F32, &[1000]))], 1e-5);
    }
    use UnaryOp as U;
    for op in [U::Exp, U::Sin, U::Cos, U::Atan, U::Erf, U::Neg, U::Abs, U::Floor, U::Ceil, U::Round, U::Sign, U::Asinh] {
        check(&format!("{op:?}"), LayerKind::Unary { op }, vec![In::Run(random(&mut r, DataType::F32, &[1000]))], 1e-5);
    }
    // Domains that need positive inputs.
    let positive = HostTensor::from_f32(vec![500], (1..=500).map(|i| i as f32 / 97.0).collect()).unwrap();
    for op in [U::Log, U::Sqrt, U::Recip] {
        check(&format!("{op:?}"), LayerKind::Unary { op }, vec![In::Run(positive.clone())], 1e-5);
    }
    check("bf16 gelu", LayerKind::Activation { kind: A::GeluErf }, vec![In::Run(random(&mut r, DataType::BF16, &[300]))], 1e-2);
}

#[test]
fn casts_match() {
    let mut r = rng(3);
    for (from, to) in [
        (DataType::F32, DataType::F16),
        (DataType::F32, DataType::BF16),
        (DataType::F32, DataType::I32),
        (DataType::F32, DataType::Bool),
        (DataType::I64, DataType::F32),
        (DataType::I64, DataType::I32),
        (DataType::Bool, DataType::F32),
        (DataType::F16, DataType::F32),
    ] {
        check(&format!("cast {from}->{to}"), LayerKind::Cast { to }, vec![In::Run(random(&mut r, from, &[3, 77]))], 0.0);
    }
}

#[test]
fn data_movement_matches() {
    let mut r = rng(4);
    let shuffle = ShuffleParams { first_transpose: vec![0, 2, 1, 3], reshape: Some(vec![2, 0, -1]), second_transpose: vec![1, 0, 2], zero_is_placeholder: true };
    check("shuffle", LayerKind::Shuffle(shuffle), vec![In::Run(random(&mut r, DataType::F32, &[2, 3, 4, 5]))], 0.0);
    let reshape = ShuffleParams { first_transpose: vec![], reshape: None, second_transpose: vec![], zero_is_placeholder: true };
    check(
        "reshape by tensor",
        LayerKind::Shuffle(reshape),
        vec![In::Run(random(&mut r, DataType::F16, &[2, 3, 4])), In::Const(i64s(&[2], vec![4, -1]))],
        0.0,
    );
    check(
        "slice with steps",
        LayerKind::Slice,
        vec![
            In::Run(random(&mut r, DataType::F32, &[5, 6, 7])),
            In::Const(i64s(&[3], vec![1, -1, 0])),
            In::Const(i64s(&[3], vec![4, -7, 7])),
            In::Const(i64s(&[3], vec![0, 1, 2])),
            In::Const(i64s(&[3], vec![2, -2, 3])),
        ],
        0.0,
    );
    check(
        "concatenation",
        LayerKind::Concatenation { axis: 1 },
        vec![
            In::Run(random(&mut r, DataType::F32, &[2, 1, 3])),
            In::Run(random(&mut r, DataType::F32, &[2, 4, 3])),
            In::Const(random(&mut r, DataType::F32, &[2, 2, 3])),
        ],
        0.0,
    );
    check("expand", LayerKind::Expand, vec![In::Run(random(&mut r, DataType::F32, &[3, 1])), In::Const(i64s(&[3], vec![2, 3, 4]))], 0.0);
    for axis in [0, 1] {
        check(
            &format!("gather axis {axis}"),
            LayerKind::Gather { mode: GatherMode::Default { axis } },
            vec![In::Run(random(&mut r, DataType::F32, &[4, 5, 3])), In::Run(i64s(&[2, 2], vec![0, -1, 3, 2]))],
            0.0,
        );
    }
}

/// Gathers of rows of whole 16-byte words (`gather_rows_v16`, a warp a row): an f16 embedding
/// table with negative indices, and rows of a middle axis under an outer dim.
#[test]
fn gathers_of_whole_rows_match() {
    let mut r = rng(15);
    let tokens = (0..12).map(|k| [3, -1, 9, 0][k % 4] - (k as i64 % 3)).collect();
    check("embedding rows", LayerKind::Gather { mode: GatherMode::Default { axis: 0 } }, vec![In::Run(random(&mut r, DataType::F16, &[10, 64])), In::Run(i64s(&[3, 4], tokens))], 0.0);
    check("rows of axis 1", LayerKind::Gather { mode: GatherMode::Default { axis: 1 } }, vec![In::Run(random(&mut r, DataType::F32, &[3, 5, 8])), In::Run(i64s(&[2], vec![4, -5]))], 0.0);
}

/// Copies whose innermost run is contiguous move 16-, 8- or 4-byte units; offsets or lengths
/// that are not multiples of the unit fall back to narrower ones.
#[test]
fn widened_copies_match() {
    let mut r = rng(14);
    // BERT's head split: [b, s, h, d] -> [b, h, s, d] (d = 64 halves: 16-byte units).
    let heads = ShuffleParams { first_transpose: vec![0, 2, 1, 3], reshape: None, second_transpose: vec![], zero_is_placeholder: true };
    for (dtype, d) in [(DataType::F16, 64), (DataType::F16, 12), (DataType::F16, 3), (DataType::F32, 8), (DataType::BF16, 6)] {
        check(&format!("head split {dtype} d={d}"), LayerKind::Shuffle(heads.clone()), vec![In::Run(random(&mut r, dtype, &[2, 5, 3, d]))], 0.0);
    }
    // True transposes through 32 x 32 shared-memory tiles: K's [b, s, h, d] -> [b, h, d, s], an
    // NCHW -> NHWC move with ragged tiles, in every element width.
    let to_last = ShuffleParams { first_transpose: vec![0, 2, 3, 1], reshape: None, second_transpose: vec![], zero_is_placeholder: true };
    for (dtype, shape) in [(DataType::F16, [2, 40, 3, 64]), (DataType::F32, [2, 24, 5, 20]), (DataType::I64, [1, 17, 3, 33]), (DataType::Bool, [2, 16, 2, 48])] {
        check(&format!("tiled transpose {dtype} {shape:?}"), LayerKind::Shuffle(to_last.clone()), vec![In::Run(random(&mut r, dtype, &shape))], 0.0);
    }
    // Slices starting at 8, 4, 2 and 1 halves into the innermost dim, and their concatenation.
    for start in [8i64, 4, 2, 1] {
        check(
            &format!("slice from {start}"),
            LayerKind::Slice,
            vec![
                In::Run(random(&mut r, DataType::F16, &[3, 4, 40])),
                In::Const(i64s(&[1], vec![start])),
                In::Const(i64s(&[1], vec![start + 16])),
                In::Const(i64s(&[1], vec![2])),
            ],
            0.0,
        );
    }
    check(
        "concatenation of 8 and 7 halves",
        LayerKind::Concatenation { axis: 2 },
        vec![In::Run(random(&mut r, DataType::F16, &[4, 3, 8])), In::Run(random(&mut r, DataType::F16, &[4, 3, 7]))],
        0.0,
    );
}

#[test]
fn gather_out_of_range_is_an_error_not_garbage() {
    let Some(cuda) = crate::common::backend() else { return };
    let (net, feeds) = crate::common::one_layer(
        LayerKind::Gather { mode: GatherMode::Default { axis: 0 } },
        vec![In::Run(f32s(&[3], vec![1.0, 2.0, 3.0])), In::Run(i64s(&[1], vec![7]))],
    );
    let err = cuda.prepare(&net).unwrap().execute(&feeds).expect_err("index 7 of 3 must fail");
    assert!(err.to_string().contains("out of range"), "{err}");
    // Rows of 16-byte words take the row kernel, which checks its indices too.
    let (net, feeds) = crate::common::one_layer(
        LayerKind::Gather { mode: GatherMode::Default { axis: 0 } },
        vec![In::Run(f32s(&[3, 8], (0..24).map(|v| v as f32).collect())), In::Run(i64s(&[2], vec![1, 7]))],
    );
    let err = cuda.prepare(&net).unwrap().execute(&feeds).expect_err("row 7 of 3 must fail");
    assert!(err.to_string().contains("out of range"), "{err}");
}

#[test]
fn matrix_multiply_matches_in_every_layout() {
    let mut r = rng(5);
    use MatrixOp as M;
    let cases: [(&[usize], M, &[usize], M); 6] = [
        (&[5, 7], M::None, &[7, 4], M::None),
        (&[2, 3, 5, 7], M::None, &[7, 4], M::None),
        (&[7, 5], M::Transpose, &[4, 7], M::Transpose),
        (&[2, 1, 5, 7], M::None, &[3, 7, 4], M::None),
        (&[3, 7], M::Vector, &[3, 7, 4], M::None),
        (&[2, 5, 7], M::None, &[7], M::Vector),
    ];
    for (sa, op_a, sb, op_b) in cases {
        let a = random(&mut r, DataType::F32, sa);
        let b = random(&mut r, DataType::F32, sb);
        check(&format!("{sa:?}{op_a:?} x {sb:?}{op_b:?}"), LayerKind::MatrixMultiply { op_a, op_b }, vec![In::Run(a), In::Run(b)], 1e-5);
    }
    let a = random(&mut r, DataType::F16, &[64, 96]);
    let b = random(&mut r, DataType::F16, &[96, 32]);
    check("f16 matmul", LayerKind::MatrixMultiply { op_a: M::None, op_b: M::None }, vec![In::Run(a), In::Run(b)], 1e-2);
}

#[test]
fn convolution_and_pooling_match() {
    let mut r = rng(6);
    let conv = ConvolutionParams { groups: 2, strides: vec![2, 1], dilations: vec![1, 2], pre_padding: vec![1, 2], post_padding: vec![0, 1] };
    check(
        "conv2d",
        LayerKind::Convolution(conv),
        vec![In::Run(random(&mut r, DataType::F32, &[2, 4, 9, 8])), In::Const(random(&mut r, DataType::F32, &[6, 2, 3, 3])), In::Const(random(&mut r, DataType::F32, &[6]))],
        1e-5,
    );
    let conv1 = ConvolutionParams { groups: 1, strides: vec![1], dilations: vec![1], pre_padding: vec![1], post_padding: vec![1] };
    check(
        "conv1d",
        LayerKind::Convolution(conv1),
        vec![In::Run(random(&mut r, DataType::F32, &[1, 3, 10])), In::Const(random(&mut r, DataType::F32, &[2, 3, 3])), In::Absent],
        1e-5,
    );
    for (kind, excl, ceil) in [(PoolingKind::Max, false, false), (PoolingKind::Average, false, true), (PoolingKind::Average, true, false)] {
        let p = PoolingParams {
            kind,
            window: vec![3, 2],
            strides: vec![2, 2],
            dilations: vec![1, 1],
            pre_padding: vec![1, 0],
            post_padding: vec![1, 1],
            ceil_mode: ceil,
            average_count_excludes_padding: excl,
        };
        check(&format!("pool {kind:?} excl={excl} ceil={ceil}"), LayerKind::Pooling(p), vec![In::Run(random(&mut r, DataType::F32, &[2, 3, 8, 7]))], 1e-5);
    }
}

/// Run-time axes given as an empty list reduce every axis (ONNX's default, as inference reads
/// it); the device kernel once read them as "no axes" and wrote past its output.
#[test]
fn reduce_with_empty_run_time_axes_reduces_every_axis() {
    let mut r = rng(31);
    for (dtype, keep_dims) in [(DataType::F32, false), (DataType::F32, true), (DataType::I64, false)] {
        check(
            &format!("reduce sum {dtype}, empty axes, keep_dims {keep_dims}"),
            LayerKind::Reduce { op: ReduceOp::Sum, axes: vec![], keep_dims },
            vec![In::Run(random(&mut r, dtype, &[2, 3, 4])), In::Run(i64s(&[0], vec![]))],
            1e-5,
        );
    }
    check(
        "reduce max, axes [-1, 0]",
        LayerKind::Reduce { op: ReduceOp::Max, axes: vec![], keep_dims: true },
        vec![In::Run(random(&mut r, DataType::F32, &[2, 3, 4])), In::Run(i64s(&[2], vec![-1, 0]))],
        0.0,
    );
}

#[test]
fn softmax_reduce_and_normalization_match() {
    let mut r = rng(7);
    check("softmax axis 1", LayerKind::SoftMax { axis: 1 }, vec![In::Run(random(&mut r, DataType::F32, &[3, 5, 7]))], 1e-5);
    check("softmax last", LayerKind::SoftMax { axis: 1 }, vec![In::Run(random(&mut r, DataType::F32, &[4, 1000]))], 1e-5);
    for (op, axes, keep) in [(ReduceOp::Sum, vec![1], true), (ReduceOp::Mean, vec![0, 2], false), (ReduceOp::Max, vec![2], true), (ReduceOp::L2, vec![1, 2], false), (ReduceOp::LogSumExp, vec![0], true)] {
        check(
            &format!("reduce {op:?} {axes:?}"),
            LayerKind::Reduce { op, axes: axes.clone(), keep_dims: keep },
            vec![In::Run(random(&mut r, DataType::F32, &[4, 6, 33]))],
            1e-5,
        );
    }
    check(
        "layer norm",
        LayerKind::Normalization { axes: vec![2], epsilon: 1e-5, num_groups: 1 },
        vec![In::Run(random(&mut r, DataType::F32, &[2, 3, 64])), In::Run(random(&mut r, DataType::F32, &[64])), In::Run(random(&mut r, DataType::F32, &[64]))],
        1e-4,
    );
    // Rows kept in registers (BERT's 768, the 1024 limit) and rows past them; short rows several
    // to a warp (8 up to 128, 4 up to 256, 2 up to 512; 15 rows fill no warp evenly) and a short
    // row of no whole runs of 4; RMS norm without a bias.
    for (dtype, len, bias, tolerance) in [
        (DataType::F16, 768, true, 4e-3),
        (DataType::F32, 1024, false, 1e-4),
        (DataType::BF16, 512, true, 3e-2),
        (DataType::F16, 1028, true, 4e-3),
        (DataType::F32, 766, true, 1e-4),
        (DataType::F16, 96, true, 4e-3),
        (DataType::F32, 100, false, 1e-4),
        (DataType::F32, 192, true, 1e-4),
        (DataType::BF16, 384, true, 3e-2),
        (DataType::F16, 98, true, 4e-3),
    ] {
        let inputs = vec![In::Run(random(&mut r, dtype, &[3, 5, len])), In::Run(random(&mut r, dtype, &[len]))];
        // Layer norm always has a bias; RMS norm never does.
        if bias {
            let mut with_bias = inputs.clone();
            with_bias.push(In::Run(random(&mut r, dtype, &[len])));
            check(&format!("layer norm {dtype} row {len}"), LayerKind::Normalization { axes: vec![2], epsilon: 1e-5, num_groups: 1 }, with_bias, tolerance);
        }
        check(&format!("rms norm {dtype} row {len}"), LayerKind::RmsNormalization { axes: vec![2], epsilon: 1e-5 }, inputs, tolerance);
    }
    check(
        "group norm",
        LayerKind::Normalization { axes: vec![2, 3], epsilon: 1e-5, num_groups: 2 },
        vec![
            In::Run(random(&mut r, DataType::F32, &[2, 4, 5, 5])),
            In::Run(random(&mut r, DataType::F32, &[4, 1, 1])),
            In::Run(random(&mut r, DataType::F32, &[4, 1, 1])),
        ],
        1e-4,
    );
}

/// Few long rows split over blocks (one group at batch 1, a long layer norm, RMS norm, a
/// GroupNorm of 4 groups at batch 1), lengths no chunk divides, and rows far from zero mean.
#[test]
fn normalization_of_few_long_rows_matches() {
    let mut r = rng(17);
    let shifted = |r: &mut rand_chacha::ChaCha8Rng, shape: &[usize], by: f32| {
        let t = random(r, DataType::F32, shape);
        HostTensor::from_f32(shape.to_vec(), t.as_f32().unwrap().iter().map(|v| v + by).collect()).unwrap()
    };
    let norm = |axes: Vec<usize>, num_groups| LayerKind::Normalization { axes, epsilon: 1e-5, num_groups };
    let x = shifted(&mut r, &[1, 1, 131_077], 100.0);
    let one = || In::Run(HostTensor::from_f32(vec![1, 1, 1], vec![1.5]).unwrap());
    check("one row of 131077 off zero", norm(vec![2], 1), vec![In::Run(x), one(), one()], 5e-4);
    let x = random(&mut r, DataType::F16, &[1, 1, 70_001]);
    check("one f16 row of 70001", norm(vec![2], 1), vec![In::Run(x), In::Run(random(&mut r, DataType::F16, &[1, 1, 1])), In::Run(random(&mut r, DataType::F16, &[1, 1, 1]))], 4e-3);
    let len = 20_000;
    let long_rows = vec![In::Run(random(&mut r, DataType::F32, &[2, 1, len])), In::Run(random(&mut r, DataType::F32, &[len])), In::Run(random(&mut r, DataType::F32, &[len]))];
    check("two layer-norm rows of 20000", norm(vec![2], 1), long_rows.clone(), 1e-4);
    check("rms norm rows of 20000", LayerKind::RmsNormalization { axes: vec![2], epsilon: 1e-5 }, long_rows[..2].to_vec(), 1e-4);
    let groups = vec![
        In::Run(random(&mut r, DataType::BF16, &[1, 64, 32, 32])),
        In::Run(random(&mut r, DataType::BF16, &[64, 1, 1])),
        In::Run(random(&mut r, DataType::BF16, &[64, 1, 1])),
    ];
    check("group norm of 4 groups at batch 1", norm(vec![2, 3], 4), groups, 3e-2);
}

#[test]
fn nearest_resize_matches() {
    let mut r = rng(8);
    let p = ResizeParams {
        mode: ResizeMode::Nearest,
        coordinate_transformation: CoordinateTransformation::Asymmetric,
        nearest_rounding: NearestRounding::Floor,
        cubic_coeff_a: -0.75,
        exclude_outside: false,
        extrapolation_value: 0.0,
        axes: None,
    };
    check(
        "resize x2",
        LayerKind::Resize(p),
        vec![In::Run(random(&mut r, DataType::F32, &[1, 2, 3, 4])), In::Absent, In::Const(f32s(&[4], vec![1.0, 1.0, 2.0, 2.0]))],
        0.0,
    );
}

#[test]
fn builder_times_cublaslt_algorithms_as_tactics_and_the_engine_still_matches() {
    let Some(cuda) = crate::common::backend() else { return };
    let mut r = rng(9);
    let a = random(&mut r, DataType::F32, &[256, 384]);
    let b = random(&mut r, DataType::F32, &[384, 128]);
    let (net, feeds) = crate::common::one_layer(LayerKind::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::None }, vec![In::Run(a), In::Const(b)]);
    let mut config = crate::common::exact_f32_config();
    let cache = config.set_timing_cache(TimingCache::new(), false);
    let engine = Builder::new(cuda).build(&net, &config).expect("build with tactic timing");
    let cache = cache.lock().unwrap().clone();
    let entry = cache.entries().map(|(_, e)| e.clone()).find(|e| e.layer_kind == "MatrixMultiply").expect("the product was timed");
    eprintln!("tactics timed: {:?}", entry.candidates.iter().map(|(id, ns)| format!("{id}: {ns} ns")).collect::<Vec<_>>());
    assert_eq!(entry.candidates.len(), 4, "four cuBLASLt heuristic ranks are candidates");
    assert!(entry.candidates.iter().all(|(_, ns)| *ns > 0), "every candidate has a device time");
    let ctx = ExecutionContext::new(engine, cuda).expect("prepare");
    let got = ctx.run(&[("in0".to_string(), feeds[0].clone())].into_iter().collect()).expect("run");
    let want = kiln_cpu::CpuBackend::new().prepare(&net).unwrap().execute(&feeds).unwrap();
    let out = got.values().next().expect("one output");
    assert!(crate::common::worst_error(out, &want[0]) < 1e-5);
}

/// An engine's worst error against the cpu oracle, built with and without the TF32 flag.
fn errors_with_and_without_tf32(cuda: &kiln_cuda::CudaBackend, net: &Network, feeds: &[HostTensor]) -> (f64, f64) {
    let want = kiln_cpu::CpuBackend::new().prepare(net).unwrap().execute(feeds).unwrap();
    let names: Vec<String> = net.inputs().iter().map(|&t| net.tensor(t).name.clone()).collect();
    let inputs: std::collections::HashMap<String, HostTensor> = names.into_iter().zip(feeds.iter().cloned()).collect();
    let error = |config: &BuilderConfig| {
        let engine = Builder::new(cuda).build(net, config).expect("build");
        let got = ExecutionContext::new(engine, cuda).expect("prepare").run(&inputs).expect("run");
        crate::common::worst_error(got.values().next().expect("one output"), &want[0])
    };
    (error(&BuilderConfig::default()), error(&crate::common::exact_f32_config()))
}

/// The TF32 builder flag (on by default, as TensorRT's) reaches cuBLASLt and cuDNN: with it an
/// f32 product rounds its inputs to TF32's 10-bit mantissa (errors near 2^-11 relative), without
/// it the product matches the cpu oracle to f32 rounding; a convolution builds and runs both ways.
#[test]
fn the_tf32_flag_decides_whether_f32_products_round_to_tf32() {
    let Some(cuda) = crate::common::backend() else { return };
    let mut r = rng(12);
    let a = random(&mut r, DataType::F32, &[256, 512]);
    let b = random(&mut r, DataType::F32, &[512, 128]);
    let (net, feeds) = crate::common::one_layer(LayerKind::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::None }, vec![In::Run(a), In::Const(b)]);
    let (tf32, exact) = errors_with_and_without_tf32(cuda, &net, &feeds);
    eprintln!("f32 product 256x512x128: worst error vs cpu {tf32:.2e} with TF32, {exact:.2e} without");
    assert!(exact < F32_TOL, "without TF32 the product is exact f32: {exact}");
    assert!(tf32 > 20.0 * exact.max(1e-7) && tf32 < 3e-2, "with TF32 the product rounds its inputs: {tf32} (exact {exact})");

    let mut net = Network::new("conv");
    let x = net.add_input("x", DataType::F32, Shape::fixed(&[2, 64, 16, 16])).unwrap();
    let w = random(&mut r, DataType::F32, &[64, 64, 3, 3]).data().clone();
    let conv = net.add_convolution(x, 64, &[3, 3], w, None).unwrap();
    let y = net.output(conv, 0);
    net.mark_output(y).unwrap();
    let feeds = vec![random(&mut r, DataType::F32, &[2, 64, 16, 16])];
    let (tf32, exact) = errors_with_and_without_tf32(cuda, &net, &feeds);
    eprintln!("f32 3x3 convolution, 64 channels: worst error vs cpu {tf32:.2e} with TF32, {exact:.2e} without");
    // cuDNN's Winograd and FFT algorithms are f32 arithmetic but not f32-exact.
    assert!(exact < 1e-3, "without TF32 the convolution computes in f32: {exact}");
    assert!(tf32 < 3e-2, "with TF32 the convolution stays within TF32 rounding: {tf32}");
}

#[test]
fn product_bias_relu_fuses_into_the_cublaslt_epilogue_and_matches() {
    let Some(cuda) = crate::common::backend() else { return };
    let mut r = rng(10);
    let mut net = Network::new("linear");
    let x = net.add_input("x", DataType::F32, Shape::fixed(&[3, 40, 64])).unwrap();
    let constant = |net: &mut Network, name: &str, t: HostTensor| {
        let w = net.add_weights(t);
        let l = net.add_layer(name, LayerKind::Constant { weights: w }, vec![]).unwrap();
        net.output(l, 0)
    };
    let w = constant(&mut net, "w", random(&mut r, DataType::F32, &[64, 48]));
    let bias = constant(&mut net, "bias", random(&mut r, DataType::F32, &[48]));
    let mm = net.add_layer("mm", LayerKind::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::None }, vec![Some(x), Some(w)]).unwrap();
    let mm = net.output(mm, 0);
    let add = net.add_layer("add", LayerKind::Elementwise { op: ElementwiseOp::Sum }, vec![Some(mm), Some(bias)]).unwrap();
    let add = net.output(add, 0);
    let relu = net.add_layer("relu", LayerKind::Activation { kind: ActivationKind::Relu }, vec![Some(add)]).unwrap();
    let y = net.output(relu, 0);
    net.mark_output(y).unwrap();
    let feeds = vec![random(&mut r, DataType::F32, &[3, 40, 64])];
    let engine = Builder::new(cuda).build(&net, &crate::common::exact_f32_config()).expect("build");
    let fused = engine.network().layers().iter().any(|l| matches!(&l.kind, LayerKind::Fused(p) if p.epilogue.len() == 2));
    assert!(fused, "the builder should fuse product, bias and ReLU into one layer");
    let ctx = ExecutionContext::new(engine, cuda).expect("prepare");
    let got = ctx.run(&[("x".to_string(), feeds[0].clone())].into_iter().collect()).expect("run");
    let want = kiln_cpu::CpuBackend::new().prepare(&net).unwrap().execute(&feeds).unwrap();
    let err = crate::common::worst_error(got.values().next().unwrap(), &want[0]);
    assert!(err < 1e-5, "fused product differs by {err}");
}

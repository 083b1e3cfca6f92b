//! MatrixMultiply (tiles, batches, broadcasting, transposes, vectors), Convolution,
//! Deconvolution, Pooling, Attention and Fused layers.

use crate::common::*;
use kiln::{
    ActivationKind, AttentionParams, ConvolutionParams, DeconvolutionParams, ElementwiseOp, FusedAnchor, FusedParams,
    LayerKind, MatrixOp, PoolingKind, PoolingParams, PostOp,
};

fn mm(op_a: MatrixOp, op_b: MatrixOp) -> LayerKind {
    LayerKind::MatrixMultiply { op_a, op_b }
}

#[test]
fn matrix_multiply_shapes() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(20);
    use MatrixOp::*;
    let cases: [(&[usize], MatrixOp, &[usize], MatrixOp); 9] = [
        // M, N >= 128: the 128×128-tile kernel, with ragged edges.
        (&[200, 70], None, &[70, 130], None),
        (&[2, 150, 33], None, &[2, 129, 33], Transpose),
        (&[70, 33], None, &[33, 129], None),
        (&[3, 20, 17], None, &[17, 9], None),
        (&[2, 1, 5, 8], None, &[3, 8, 6], None),
        (&[8, 70], Transpose, &[8, 65], None),
        (&[4, 16, 8], None, &[4, 5, 8], Transpose),
        (&[17], Vector, &[17, 3], None),
        (&[2, 6, 17], None, &[17], Vector),
    ];
    for (i, (sa, oa, sb, ob)) in cases.into_iter().enumerate() {
        let a = rand_f32(&mut r, sa, -1.0, 1.0);
        let b = rand_f32(&mut r, sb, -1.0, 1.0);
        check_tol(&gpu, mm(oa, ob), vec![In::Run(a), In::Const(b)], 1e-5, 1e-5, &format!("matmul case {i}"));
    }
    let (a, b) = (rand_i32(&mut r, &[5, 7], -9, 9), rand_i32(&mut r, &[7, 3], -9, 9));
    check(&gpu, mm(None, None), vec![In::Run(a), In::Run(b)], "matmul i32");
}

fn conv_params(n: usize) -> ConvolutionParams {
    ConvolutionParams {
        groups: 1,
        strides: vec![1; n],
        dilations: vec![1; n],
        pre_padding: vec![0; n],
        post_padding: vec![0; n],
    }
}

#[test]
fn convolutions() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(21);
    let p = ConvolutionParams {
        groups: 2,
        strides: vec![2, 1],
        dilations: vec![1, 2],
        pre_padding: vec![1, 2],
        post_padding: vec![0, 1],
    };
    let (x, w, b) = (
        rand_f32(&mut r, &[2, 4, 9, 8], -1.0, 1.0),
        rand_f32(&mut r, &[6, 2, 3, 3], -1.0, 1.0),
        rand_f32(&mut r, &[6], -1.0, 1.0),
    );
    check(
        &gpu,
        LayerKind::Convolution(p),
        vec![In::Run(x), In::Const(w), In::Const(b)],
        "conv2d groups/strides/dilation/pads",
    );
    let (x, w) = (rand_f32(&mut r, &[1, 3, 20], -1.0, 1.0), rand_f32(&mut r, &[5, 3, 4], -1.0, 1.0));
    check(&gpu, LayerKind::Convolution(conv_params(1)), vec![In::Run(x), In::Const(w), In::Absent], "conv1d");
    let (x, w) = (rand_f32(&mut r, &[1, 2, 4, 5, 6], -1.0, 1.0), rand_f32(&mut r, &[3, 2, 2, 2, 3], -1.0, 1.0));
    check(&gpu, LayerKind::Convolution(conv_params(3)), vec![In::Run(x), In::Const(w), In::Absent], "conv3d");
    let p = DeconvolutionParams {
        groups: 1,
        strides: vec![2, 2],
        dilations: vec![1, 1],
        pre_padding: vec![1, 0],
        post_padding: vec![0, 1],
        output_padding: vec![1, 0],
    };
    let (x, w, b) = (
        rand_f32(&mut r, &[1, 3, 4, 5], -1.0, 1.0),
        rand_f32(&mut r, &[3, 2, 3, 3], -1.0, 1.0),
        rand_f32(&mut r, &[2], -1.0, 1.0),
    );
    check(&gpu, LayerKind::Deconvolution(p), vec![In::Run(x), In::Const(w), In::Const(b)], "deconv2d");
}

#[test]
fn pooling() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(22);
    let x = rand_f32(&mut r, &[2, 3, 9, 10], -1.0, 1.0);
    for kind in [PoolingKind::Max, PoolingKind::Average] {
        for excludes in [false, true] {
            let p = PoolingParams {
                kind,
                window: vec![3, 2],
                strides: vec![2, 3],
                dilations: vec![1, 2],
                pre_padding: vec![1, 1],
                post_padding: vec![1, 0],
                ceil_mode: true,
                average_count_excludes_padding: excludes,
            };
            check(&gpu, LayerKind::Pooling(p), vec![In::Run(x.clone())], &format!("{kind:?} excludes={excludes}"));
            // Windows mostly over padding: the shader finds the inside cells by division.
            let wide = PoolingParams {
                kind,
                window: vec![5, 300],
                strides: vec![1, 2],
                dilations: vec![2, 1],
                pre_padding: vec![6, 290],
                post_padding: vec![3, 5],
                ceil_mode: false,
                average_count_excludes_padding: excludes,
            };
            check(&gpu, LayerKind::Pooling(wide), vec![In::Run(x.clone())], &format!("wide {kind:?} excludes={excludes}"));
        }
    }
    let global = PoolingParams {
        kind: PoolingKind::Average,
        window: vec![9, 10],
        strides: vec![1, 1],
        dilations: vec![1, 1],
        pre_padding: vec![0, 0],
        post_padding: vec![0, 0],
        ceil_mode: false,
        average_count_excludes_padding: false,
    };
    check(&gpu, LayerKind::Pooling(global), vec![In::Run(x)], "global average");
}

#[test]
fn attention_and_fused() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(23);
    let (q, k, v) = (
        rand_f32(&mut r, &[2, 3, 5, 8], -1.0, 1.0),
        rand_f32(&mut r, &[2, 3, 7, 8], -1.0, 1.0),
        rand_f32(&mut r, &[2, 3, 7, 4], -1.0, 1.0),
    );
    let mask = rand_f32(&mut r, &[1, 1, 5, 7], -2.0, 0.0);
    let p = AttentionParams {
        scale: 0.35,
        key_transposed: false,
        scale_multiplies: true,
        zero_nan_rows: false,
        product_levels: None,
        scores_levels: None,
        probs_levels: None,
        input_levels: None,
        output_levels: None,
    };
    check(
        &gpu,
        LayerKind::Attention(p),
        vec![In::Run(q.clone()), In::Run(k), In::Run(v.clone()), In::Run(mask)],
        "attention",
    );
    let kt = rand_f32(&mut r, &[2, 3, 8, 7], -1.0, 1.0);
    let p = AttentionParams { scale: 2.0, key_transposed: true, scale_multiplies: false, ..p };
    check(
        &gpu,
        LayerKind::Attention(p),
        vec![In::Run(q), In::Run(kt), In::Run(v), In::Absent],
        "attention, K transposed",
    );
    // A Q/DQ network's attention: levels on the product and on the probabilities. Operands on
    // quarter steps keep the products exact, so both backends put each score on one level.
    let quarters = |t: kiln::HostTensor| kiln::HostTensor::from_f32(t.shape().to_vec(), t.to_f64_vec().iter().map(|&x| (x as f32 * 8.0).round() / 4.0).collect()).expect("shape");
    let (q, k, v) = (
        quarters(rand_f32(&mut r, &[2, 3, 5, 8], -1.0, 1.0)),
        quarters(rand_f32(&mut r, &[2, 3, 7, 8], -1.0, 1.0)),
        quarters(rand_f32(&mut r, &[2, 3, 7, 4], -1.0, 1.0)),
    );
    let grid = |scale, levels| Some(kiln::LevelGrid { scale, zero: 0, levels });
    let p = AttentionParams {
        key_transposed: false,
        product_levels: grid(0.37, kiln::DataType::I8),
        probs_levels: grid(1.0 / 255.0, kiln::DataType::U8),
        input_levels: None,
        output_levels: None,
        ..p
    };
    check(&gpu, LayerKind::Attention(p), vec![In::Run(q), In::Run(k), In::Run(v), In::Absent], "attention on levels");
    // Q and V given as levels (their DequantizeLinear folded in), K as floats: quarter steps again.
    let as_levels = |t: kiln::HostTensor, zero: i32, dtype| {
        let levels: Vec<i32> = t.to_f64_vec().iter().map(|&x| zero + (x * 8.0).round() as i32).collect();
        let data = match dtype {
            kiln::DataType::U8 => kiln::TensorData::U8(levels.iter().map(|&l| l as u8).collect()),
            _ => kiln::TensorData::I8(levels.iter().map(|&l| l as i8).collect()),
        };
        kiln::HostTensor::new(t.shape().to_vec(), data).expect("shape")
    };
    let (q, k, v) = (
        as_levels(rand_f32(&mut r, &[2, 3, 5, 8], -1.0, 1.0), 0, kiln::DataType::I8),
        quarters(rand_f32(&mut r, &[2, 3, 7, 8], -1.0, 1.0)),
        as_levels(rand_f32(&mut r, &[2, 3, 7, 4], -1.0, 1.0), 128, kiln::DataType::U8),
    );
    let grids = [Some(kiln::LevelGrid { scale: 0.25, zero: 0, levels: kiln::DataType::I8 }), None, Some(kiln::LevelGrid { scale: 0.25, zero: 128, levels: kiln::DataType::U8 })];
    let p = AttentionParams { input_levels: Some(kiln::InputLevels { grids, to: kiln::DataType::F32 }), ..p };
    check(&gpu, LayerKind::Attention(p), vec![In::Run(q.clone()), In::Run(k.clone()), In::Run(v.clone()), In::Absent], "attention on levels, Q and V given as levels");
    // The output's QuantizeLinear folded in: int8 levels, within one of the oracle's (a sum in
    // another order may cross a rounding edge).
    let p = AttentionParams { output_levels: Some(kiln::LevelGrid { scale: 0.02, zero: 3, levels: kiln::DataType::I8 }), ..p };
    check_tol(&gpu, LayerKind::Attention(p), vec![In::Run(q), In::Run(k), In::Run(v), In::Absent], 0.0, 1.0, "attention writing its output's levels");
    // conv + bias-add + relu + residual.
    let fused = FusedParams {
        anchor: FusedAnchor::Convolution(conv_params(2)),
        anchor_inputs: 2,
        epilogue: vec![
            PostOp::Elementwise { op: ElementwiseOp::Sum, operand: 2, running_first: true },
            PostOp::Activation(ActivationKind::Relu),
            PostOp::Elementwise { op: ElementwiseOp::Sub, operand: 3, running_first: false },
        ],
        dequantized: Vec::new(),
    };
    let (x, w) = (rand_f32(&mut r, &[1, 2, 6, 6], -1.0, 1.0), rand_f32(&mut r, &[4, 2, 3, 3], -1.0, 1.0));
    let (bias, res) = (rand_f32(&mut r, &[1, 4, 1, 1], -1.0, 1.0), rand_f32(&mut r, &[1, 4, 4, 4], -1.0, 1.0));
    check(&gpu, LayerKind::Fused(fused), vec![In::Run(x), In::Const(w), In::Const(bias), In::Run(res)], "fused conv");
    // An island ending in a reduction (a CNN's head: add, ReLU, global average pooling).
    let head = FusedParams::new(
        FusedAnchor::Elementwise(ElementwiseOp::Sum),
        2,
        vec![PostOp::Activation(ActivationKind::Relu), PostOp::Reduce { op: kiln::ReduceOp::Mean, axes: kiln::AxisMask(0b1100), keep_dims: true }],
    );
    let (a, b) = (rand_f32(&mut r, &[2, 4, 5, 5], -1.0, 1.0), rand_f32(&mut r, &[2, 4, 5, 5], -1.0, 1.0));
    check(&gpu, LayerKind::Fused(head), vec![In::Run(a), In::Run(b)], "an island ending in a reduction");
}

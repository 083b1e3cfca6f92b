//! Fused layers whose pointwise steps run as one `chain_*` pass, against the cpu oracle.

use crate::common::{check, random, rng, In};
use kiln::{ActivationKind, DataType, ElementwiseOp, FusedAnchor, FusedParams, LayerKind, MatrixOp, PostOp, UnaryOp};

fn binary(op: ElementwiseOp, operand: usize, running_first: bool) -> PostOp {
    PostOp::Elementwise { op, operand, running_first }
}

#[test]
fn gelu_chain_from_an_elementwise_anchor() {
    // x / sqrt(2) → erf → + 1 → (x ·) → · 0.5, as PyTorch exports GELU; operands broadcast.
    for (dtype, tolerance) in [(DataType::F32, 1e-5), (DataType::F16, 4e-3), (DataType::BF16, 3e-2)] {
        let mut r = rng(7);
        let x = random(&mut r, dtype, &[4, 33, 96]);
        let kind = LayerKind::Fused(FusedParams {
            anchor: FusedAnchor::Elementwise(ElementwiseOp::Div),
            anchor_inputs: 2,
            epilogue: vec![
                PostOp::Unary(UnaryOp::Erf),
                binary(ElementwiseOp::Sum, 2, true),
                binary(ElementwiseOp::Prod, 3, false),
                binary(ElementwiseOp::Prod, 4, true),
            ],
            dequantized: Vec::new(),
        });
        let inputs = vec![
            In::Run(x.clone()),
            In::Const(random(&mut r, dtype, &[1])),
            In::Const(random(&mut r, dtype, &[96])),
            In::Run(x),
            In::Const(random(&mut r, dtype, &[33, 1])),
        ];
        check(&format!("gelu-like chain {dtype}"), kind, inputs, tolerance);
    }
}

#[test]
fn product_epilogue_with_bias_residual_and_activation() {
    for (dtype, tolerance) in [(DataType::F32, 1e-4), (DataType::F16, 1e-2)] {
        let mut r = rng(8);
        let kind = LayerKind::Fused(FusedParams {
            anchor: FusedAnchor::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::None },
            anchor_inputs: 2,
            epilogue: vec![
                binary(ElementwiseOp::Sum, 2, false),
                binary(ElementwiseOp::Sum, 3, true),
                PostOp::Activation(ActivationKind::Relu),
                binary(ElementwiseOp::Sub, 4, false),
            ],
            dequantized: Vec::new(),
        });
        let inputs = vec![
            In::Run(random(&mut r, dtype, &[2, 16, 32])),
            In::Const(random(&mut r, dtype, &[32, 24])),
            In::Const(random(&mut r, dtype, &[24])),
            In::Run(random(&mut r, dtype, &[2, 16, 24])),
            In::Run(random(&mut r, dtype, &[2, 1, 1])),
        ];
        check(&format!("product epilogue {dtype}"), kind, inputs, tolerance);
    }
}

#[test]
fn product_epilogues_without_a_bias() {
    // cuBLASLt's epilogue needs a bias: these run on a table of zeros (a shared weight), or
    // as kiln's chain (a batched product, a column operand that is neither bias nor residual).
    let relu = PostOp::Activation(ActivationKind::Relu);
    // (name, a, b, epilogue, the epilogue's operand)
    type Case = (&'static str, &'static [usize], &'static [usize], Vec<PostOp>, &'static [usize]);
    let cases: [Case; 5] = [
        ("ReLU", &[2, 16, 32], &[32, 24], vec![relu, binary(ElementwiseOp::Sub, 2, false)], &[2, 1, 1]),
        ("residual + ReLU", &[2, 16, 32], &[32, 24], vec![binary(ElementwiseOp::Sum, 2, true), relu], &[2, 16, 24]),
        ("residual", &[16, 32], &[32, 24], vec![binary(ElementwiseOp::Sum, 2, false)], &[16, 24]),
        ("batched, residual + ReLU", &[2, 16, 32], &[2, 32, 24], vec![binary(ElementwiseOp::Sum, 2, false), relu], &[2, 16, 24]),
        ("a column operand, then ReLU", &[16, 32], &[32, 24], vec![binary(ElementwiseOp::Sum, 2, false), relu], &[16, 1]),
    ];
    for (dtype, tolerance) in [(DataType::F32, 1e-4), (DataType::F16, 1e-2)] {
        let mut r = rng(18);
        for (name, a, b, epilogue, operand) in &cases {
            let kind = LayerKind::Fused(FusedParams::new(FusedAnchor::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::None }, 2, epilogue.clone()));
            let weights = if b.len() == 2 { In::Const(random(&mut r, dtype, b)) } else { In::Run(random(&mut r, dtype, b)) };
            let inputs = vec![In::Run(random(&mut r, dtype, a)), weights, In::Run(random(&mut r, dtype, operand))];
            check(&format!("product, no bias, {name} {dtype}"), kind, inputs, tolerance);
        }
    }
}

#[test]
fn a_chain_that_broadcasts_the_running_value() {
    // The running value [24] grows to [5, 24] through its first operand.
    let mut r = rng(9);
    let kind = LayerKind::Fused(FusedParams {
        anchor: FusedAnchor::Activation(ActivationKind::Sigmoid),
        anchor_inputs: 1,
        epilogue: vec![binary(ElementwiseOp::Prod, 1, true), binary(ElementwiseOp::Max, 2, false)],
        dequantized: Vec::new(),
    });
    let inputs = vec![
        In::Run(random(&mut r, DataType::F32, &[24])),
        In::Run(random(&mut r, DataType::F32, &[5, 24])),
        In::Const(random(&mut r, DataType::F32, &[5, 1])),
    ];
    check("broadcast running value", kind, inputs, 1e-6);
}

#[test]
fn a_grn_like_chain_of_eight_operands_one_read_twice() {
    // ConvNeXt-V2's GRN, (mean + eps) → gx · → x · → γ · → + β → + x, then three more
    // broadcast operands: eight distinct operands (every slot of the three layouts), `x` read
    // by two steps; a ninth operand leaves the chain kernel for one kernel per step.
    for (dtype, tolerance, ninth) in [(DataType::F32, 1e-5, false), (DataType::F16, 4e-3, false), (DataType::F32, 1e-5, true)] {
        let mut r = rng(17);
        let (n, h, w, c) = (2, 5, 6, 16);
        let mut epilogue = vec![
            binary(ElementwiseOp::Prod, 2, false),
            binary(ElementwiseOp::Prod, 3, false),
            binary(ElementwiseOp::Prod, 4, false),
            binary(ElementwiseOp::Sum, 5, true),
            binary(ElementwiseOp::Sum, 3, true),
            binary(ElementwiseOp::Prod, 6, true),
            binary(ElementwiseOp::Sub, 7, true),
            binary(ElementwiseOp::Max, 8, false),
        ];
        let mut inputs = vec![
            In::Run(random(&mut r, dtype, &[n, 1, 1, 1])),
            In::Const(random(&mut r, dtype, &[1])),
            In::Run(random(&mut r, dtype, &[n, 1, 1, c])),
            In::Run(random(&mut r, dtype, &[n, h, w, c])),
            In::Const(random(&mut r, dtype, &[1, 1, 1, c])),
            In::Const(random(&mut r, dtype, &[c])),
            In::Const(random(&mut r, dtype, &[1, h, 1, 1])),
            In::Const(random(&mut r, dtype, &[w, 1])),
            In::Run(random(&mut r, dtype, &[n, 1, w, c])),
        ];
        if ninth {
            epilogue.push(binary(ElementwiseOp::Sum, 9, true));
            inputs.push(In::Const(random(&mut r, dtype, &[h, w, 1])));
        }
        let kind = LayerKind::Fused(FusedParams::new(FusedAnchor::Elementwise(ElementwiseOp::Sum), 2, epilogue));
        check(&format!("GRN-like chain {dtype}, ninth operand {ninth}"), kind, inputs, tolerance);
    }
}

#[test]
fn pointwise_layers_after_an_nhwc_convolution_keep_its_layout() {
    // f16 convolutions write channels-last; SiLU, a broadcast bias, a squeeze-excitation scale
    // (global mean → [N,C,1,1] → sigmoid → ·), an abs and a residual of a row-major input then
    // run on it in place of converting back: all against the cpu oracle.
    use kiln::{Network, ReduceOp, Shape};
    let mut r = rng(11);
    let (n, c, k, hw) = (2, 8, 16, 9);
    let mut net = Network::new("nhwc pointwise");
    let x = net.add_input("x", DataType::F16, Shape::fixed(&[n, c, hw, hw])).unwrap();
    let skip = net.add_input("skip", DataType::F16, Shape::fixed(&[n, k, hw - 2, hw - 2])).unwrap();
    let w = random(&mut r, DataType::F16, &[k, c, 3, 3]).data().clone();
    let b = random(&mut r, DataType::F16, &[k]).data().clone();
    let conv = net.add_convolution(x, k, &[3, 3], w, Some(b)).unwrap();
    let y = net.output(conv, 0);
    let gate = net.add_activation(y, ActivationKind::Sigmoid).unwrap();
    let silu = net.add_elementwise(y, net.output(gate, 0), ElementwiseOp::Prod).unwrap();
    let bias = net.add_constant(&[k, 1, 1], random(&mut r, DataType::F16, &[k, 1, 1]).data().clone()).unwrap();
    let biased = net.add_elementwise(net.output(silu, 0), net.output(bias, 0), ElementwiseOp::Sum).unwrap();
    let mean = net.add_reduce(net.output(biased, 0), ReduceOp::Mean, &[2, 3], true).unwrap();
    let scale = net.add_activation(net.output(mean, 0), ActivationKind::Sigmoid).unwrap();
    let excited = net.add_elementwise(net.output(biased, 0), net.output(scale, 0), ElementwiseOp::Prod).unwrap();
    let abs = net.add_unary(net.output(excited, 0), UnaryOp::Abs).unwrap();
    let out = net.add_elementwise(net.output(abs, 0), skip, ElementwiseOp::Sub).unwrap();
    net.mark_output(net.output(out, 0)).unwrap();
    let feeds = [random(&mut r, DataType::F16, &[n, c, hw, hw]), random(&mut r, DataType::F16, &[n, k, hw - 2, hw - 2])];
    crate::common::check_network("nhwc pointwise", &net, &feeds, 2e-2);
}

#[test]
fn casts_of_an_nhwc_convolution_output_keep_its_layout() {
    // A Cast is elementwise in memory order: f16 convolution (channels-last) → f32 → a residual
    // of a row-major input → f16 → a second convolution, and the f32 value as a network output
    // (packed row-major at the end); both against the cpu oracle.
    use kiln::{Network, Shape};
    let mut r = rng(12);
    let (n, c, k, hw) = (2, 8, 16, 7);
    let mut net = Network::new("nhwc casts");
    let x = net.add_input("x", DataType::F16, Shape::fixed(&[n, c, hw, hw])).unwrap();
    let skip = net.add_input("skip", DataType::F32, Shape::fixed(&[n, k, hw - 2, hw - 2])).unwrap();
    let w = random(&mut r, DataType::F16, &[k, c, 3, 3]).data().clone();
    let conv = net.add_convolution(x, k, &[3, 3], w, None).unwrap();
    let wide = net.add_layer("to f32", LayerKind::Cast { to: DataType::F32 }, vec![Some(net.output(conv, 0))]).unwrap();
    let sum = net.add_elementwise(net.output(wide, 0), skip, ElementwiseOp::Sum).unwrap();
    let narrow = net.add_layer("to f16", LayerKind::Cast { to: DataType::F16 }, vec![Some(net.output(sum, 0))]).unwrap();
    let w2 = random(&mut r, DataType::F16, &[4, k, 1, 1]).data().clone();
    let conv2 = net.add_convolution(net.output(narrow, 0), 4, &[1, 1], w2, None).unwrap();
    net.mark_output(net.output(conv2, 0)).unwrap();
    net.mark_output(net.output(wide, 0)).unwrap();
    let feeds = [random(&mut r, DataType::F16, &[n, c, hw, hw]), random(&mut r, DataType::F32, &[n, k, hw - 2, hw - 2])];
    crate::common::check_network("nhwc casts", &net, &feeds, 2e-2);
}

#[test]
fn reductions_over_a_middle_axis_with_wide_rows_match() {
    // [outer, len, inner] with inner ≥ 32 runs column-wise: a global pooling of an NHWC
    // activation. Inner 70 reads one element a thread (`reduce_columns_*`), with a ragged last
    // block of columns; inner 264 over 49 rows (a 7×7 pooling) reads 16-byte runs
    // (`reduce_column_runs_*`), its last block ragged for every type's run. Long rows over few
    // blocks split into f32 partials and a second pass (`reduce_column_partials_*`): 112·112
    // rows of 32 columns in runs (an early squeeze-excitation pooling), 3,001 rows of 70 one
    // element a thread, the last slice short.
    use kiln::ReduceOp;
    for (dtype, tolerance) in [(DataType::F32, 1e-5), (DataType::F16, 4e-3), (DataType::BF16, 3e-2)] {
        let mut r = rng(13);
        for shape in [[3, 61, 70], [3, 49, 264], [2, 112 * 112, 32], [3, 3001, 70]] {
            let x = random(&mut r, dtype, &shape);
            for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min, ReduceOp::L1, ReduceOp::L2, ReduceOp::SumSquare] {
                let x = x.clone();
                let kind = LayerKind::Reduce { op, axes: vec![1], keep_dims: false };
                check(&format!("{op:?} over a middle axis of {shape:?} in {dtype}"), kind, vec![In::Run(x)], tolerance);
            }
        }
    }
}

/// An island ending in a reduction ([`PostOp::Reduce`]): a Q/DQ CNN's head (two 8-bit tensors
/// read dequantized, added, ReLU, averaged over H and W), and an f16 island summed over its
/// last axis without keeping it, against the cpu oracle.
#[test]
fn an_island_ending_in_a_reduction_matches() {
    use kiln::{DequantizedInput, HostTensor, ReduceOp, TensorData};
    let mut r = rng(13);
    let shape = [2usize, 16, 7, 7];
    let scalar = |v: f32| HostTensor::from_f32(vec![], vec![v]).expect("scale");
    let zero = |z: i8| HostTensor::new(vec![], TensorData::I8(vec![z])).expect("zero point");
    let head = FusedParams {
        anchor: FusedAnchor::Elementwise(ElementwiseOp::Sum),
        anchor_inputs: 2,
        epilogue: vec![PostOp::Activation(ActivationKind::Relu), PostOp::Reduce { op: ReduceOp::Mean, axes: kiln::AxisMask(0b1100), keep_dims: true }],
        dequantized: vec![DequantizedInput { input: 0, scale: 2, zero: Some(3) }, DequantizedInput { input: 1, scale: 4, zero: Some(5) }],
    };
    let n: usize = shape.iter().product();
    let levels = |seed: usize| HostTensor::new(shape.to_vec(), TensorData::I8((0..n).map(|i| ((i * (31 + seed) + seed * 7) % 256) as u8 as i8).collect())).expect("levels");
    let inputs = vec![
        In::Run(levels(0)),
        In::Run(levels(5)),
        In::Const(scalar(0.031)),
        In::Const(zero(3)),
        In::Const(scalar(0.047)),
        In::Const(zero(-5)),
    ];
    check("a Q/DQ head's island and pooling", LayerKind::Fused(head.clone()), inputs, 1e-5);
    // The same head over [n, h·w, c] levels (an NHWC pooling's view): the column kernels in
    // runs of 16 levels a slot.
    let columns = [2usize, 49, 64];
    let n: usize = columns.iter().product();
    let levels = |seed: usize| HostTensor::new(columns.to_vec(), TensorData::I8((0..n).map(|i| ((i * (29 + seed) + seed * 11) % 256) as u8 as i8).collect())).expect("levels");
    let over_pixels = FusedParams { epilogue: vec![PostOp::Activation(ActivationKind::Relu), PostOp::Reduce { op: ReduceOp::Mean, axes: kiln::AxisMask(0b10), keep_dims: false }], ..head };
    let inputs = vec![In::Run(levels(1)), In::Run(levels(4)), In::Const(scalar(0.031)), In::Const(zero(3)), In::Const(scalar(0.047)), In::Const(zero(-5))];
    check("a Q/DQ head over [n, h·w, c] levels", LayerKind::Fused(over_pixels), inputs, 1e-5);
    let sum = FusedParams::new(
        FusedAnchor::Activation(ActivationKind::Sigmoid),
        1,
        vec![PostOp::Reduce { op: ReduceOp::Sum, axes: kiln::AxisMask(0b1000), keep_dims: false }],
    );
    check("an f16 island summed over its last axis", LayerKind::Fused(sum), vec![In::Run(random(&mut r, DataType::F16, &shape))], 2e-2);
    // A middle axis under wide rows: the column kernels, in runs (f32, 40 columns), one column a
    // thread with an operand along the rows (f16, 33 columns, rows split into partials), and in
    // runs split into partials (2,048 rows) with a result step after them (L2).
    let wide = |dtype: DataType, shape: &[usize], op: ReduceOp, operand: Option<&[usize]>, r: &mut _| {
        let mut epilogue = vec![PostOp::Activation(ActivationKind::Relu)];
        let mut inputs = vec![In::Run(random(r, dtype, shape))];
        if let Some(o) = operand {
            epilogue.push(binary(ElementwiseOp::Sum, 1, true));
            inputs.push(In::Const(random(r, dtype, o)));
        }
        epilogue.push(PostOp::Reduce { op, axes: kiln::AxisMask(0b10), keep_dims: true });
        (LayerKind::Fused(FusedParams::new(FusedAnchor::Activation(ActivationKind::Sigmoid), 1, epilogue)), inputs)
    };
    for (what, dtype, shape, op, operand, tolerance) in [
        ("runs of columns", DataType::F32, &[2usize, 64, 40][..], ReduceOp::Mean, None, 1e-5),
        ("columns split into partials", DataType::F16, &[2, 1024, 33], ReduceOp::Max, Some(&[33usize][..]), 1e-3),
        ("runs split into partials", DataType::F32, &[2, 2048, 64], ReduceOp::L2, None, 1e-4),
    ] {
        let (kind, inputs) = wide(dtype, shape, op, operand, &mut r);
        check(&format!("an island reduced over a middle axis: {what}"), kind, inputs, tolerance);
    }
}

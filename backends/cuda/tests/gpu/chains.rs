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
fn a_chain_that_broadcasts_the_running_value() {
    // The running value [24] grows to [5, 24] through its first operand.
    let mut r = rng(9);
    let kind = LayerKind::Fused(FusedParams {
        anchor: FusedAnchor::Activation(ActivationKind::Sigmoid),
        anchor_inputs: 1,
        epilogue: vec![binary(ElementwiseOp::Prod, 1, true), binary(ElementwiseOp::Max, 2, false)],
    });
    let inputs = vec![
        In::Run(random(&mut r, DataType::F32, &[24])),
        In::Run(random(&mut r, DataType::F32, &[5, 24])),
        In::Const(random(&mut r, DataType::F32, &[5, 1])),
    ];
    check("broadcast running value", kind, inputs, 1e-6);
}

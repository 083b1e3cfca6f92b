//! Inference for the optimizer's layer kinds: each is checked step by step with the rules
//! of the layers it stands for, so a fused layer admits exactly what its parts admit.

use super::{infer_layer, rule, Fact, InferResult, Inputs, OutFact, WeightsLookup};
use crate::ir::fused::{AttentionParams, FusedParams, PostOp};
use crate::ir::layer::{ElementwiseOp, LayerKind, MatrixOp};

pub(super) fn fused(
    p: &FusedParams,
    ins: &Inputs,
    weights: &WeightsLookup<'_>,
) -> InferResult<Vec<OutFact>> {
    let n = ins.0.len();
    if p.anchor_inputs > n {
        return rule(
            None,
            format!(
                "the anchor takes {} inputs, the layer has {n}",
                p.anchor_inputs
            ),
        );
    }
    let anchor = infer_layer(&p.anchor.kind(), &ins.0[..p.anchor_inputs], weights)?;
    let [mut running] = <[OutFact; 1]>::try_from(anchor).map_err(|_| super::InferError {
        input: None,
        rule: "a fused layer's anchor must have one output".into(),
    })?;
    for (i, step) in p.epilogue.iter().enumerate() {
        let current = Fact::new(running.dtype, &running.shape, None);
        let facts: Vec<Option<Fact>> = match *step {
            PostOp::Activation(_) | PostOp::Unary(_) => vec![Some(current)],
            PostOp::Elementwise {
                operand,
                running_first,
                ..
            } => {
                if operand < p.anchor_inputs || operand >= n {
                    return rule(
                        None,
                        format!(
                            "epilogue step {i} reads input {operand}, which is not an operand slot"
                        ),
                    );
                }
                let other = ins.req(operand)?;
                if running_first {
                    vec![Some(current), Some(other)]
                } else {
                    vec![Some(other), Some(current)]
                }
            }
        };
        let out = infer_layer(&step.kind(), &facts, weights).map_err(|mut e| {
            e.rule = format!("epilogue step {i} ({:?}): {}", step, e.rule);
            e
        })?;
        running = out.into_iter().next().ok_or_else(|| super::InferError {
            input: None,
            rule: "no output".into(),
        })?;
        running.value = None;
    }
    Ok(vec![running])
}

/// Checked as the layers it replaces: MatrixMultiply, the scale, the mask add, SoftMax and
/// the second MatrixMultiply.
pub(super) fn attention(
    p: &AttentionParams,
    ins: &Inputs,
    weights: &WeightsLookup<'_>,
) -> InferResult<Vec<OutFact>> {
    ins.arity(3, 4)?;
    let q = ins.float(0)?;
    let op_b = if p.key_transposed {
        MatrixOp::None
    } else {
        MatrixOp::Transpose
    };
    let mm = LayerKind::MatrixMultiply {
        op_a: MatrixOp::None,
        op_b,
    };
    let scores = infer_layer(&mm, &[Some(q), ins.get(1)], weights)?.remove(0);
    let scores = match ins.get(3) {
        None => scores,
        Some(mask) => {
            ins.same_type(0, 3)?;
            let s = Fact::new(scores.dtype, &scores.shape, None);
            infer_layer(
                &LayerKind::Elementwise {
                    op: ElementwiseOp::Sum,
                },
                &[Some(s), Some(mask)],
                weights,
            )?
            .remove(0)
        }
    };
    let s = Fact::new(scores.dtype, &scores.shape, None);
    let pv = LayerKind::MatrixMultiply {
        op_a: MatrixOp::None,
        op_b: MatrixOp::None,
    };
    let mut out = infer_layer(&pv, &[Some(s), ins.get(2)], weights)?;
    out[0].value = None;
    Ok(out)
}

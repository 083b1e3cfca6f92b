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
    // Inputs read dequantized are seen by the anchor and the steps as DequantizeLinear's output.
    let mut seen: Vec<Option<Fact>> = ins.0.to_vec();
    let mut dequantized_shapes = Vec::with_capacity(p.dequantized.len());
    for d in &p.dequantized {
        let slot = |i: usize, what: &str| match i < n {
            true => Ok(i),
            false => rule(None, format!("dequantized input {}: its {what} is input {i}, the layer has {n}", d.input)),
        };
        let facts = [Some(ins.req(slot(d.input, "value")?)?), Some(one_element(ins, slot(d.scale, "scale")?)?), d.zero.map(|z| slot(z, "zero point").and_then(|z| one_element(ins, z))).transpose()?];
        let out = infer_layer(&LayerKind::Dequantize { axis: None, to: None }, &facts, weights).map_err(|mut e| {
            e.rule = format!("dequantized input {}: {}", d.input, e.rule);
            e
        })?;
        dequantized_shapes.push((d.input, out.into_iter().next().expect("Dequantize has one output")));
    }
    for (input, out) in &dequantized_shapes {
        seen[*input] = Some(Fact::new(out.dtype, &out.shape, None));
    }
    let ins = &Inputs(&seen);
    let anchor = infer_layer(&p.anchor.kind(), &ins.0[..p.anchor_inputs], weights)?;
    let [mut running] = <[OutFact; 1]>::try_from(anchor).map_err(|_| super::InferError {
        input: None,
        rule: "a fused layer's anchor must have one output".into(),
    })?;
    for (i, step) in p.epilogue.iter().enumerate() {
        let current = Fact::new(running.dtype, &running.shape, None);
        let operand_slot = |operand: usize| match operand >= p.anchor_inputs && operand < n {
            true => Ok(operand),
            false => rule(None, format!("epilogue step {i} reads input {operand}, which is not an operand slot")),
        };
        let facts: Vec<Option<Fact>> = match *step {
            PostOp::Activation(_) | PostOp::Unary(_) => vec![Some(current)],
            PostOp::Elementwise {
                operand,
                running_first,
                ..
            } => {
                let other = ins.req(operand_slot(operand)?)?;
                if running_first {
                    vec![Some(current), Some(other)]
                } else {
                    vec![Some(other), Some(current)]
                }
            }
            PostOp::Quantize { scale, zero, .. } | PostOp::Dequantize { scale, zero } => {
                let zero = zero.map(|z| operand_slot(z).and_then(|z| one_element(ins, z))).transpose()?;
                vec![Some(current), Some(one_element(ins, operand_slot(scale)?)?), zero]
            }
            PostOp::Normalization { axis, scale, bias, .. } => {
                if axis + 1 != current.shape.rank() {
                    return rule(None, format!("epilogue step {i} normalizes axis {axis}, which is not the last of {}", current.shape));
                }
                vec![Some(current), Some(ins.req(operand_slot(scale)?)?), Some(ins.req(operand_slot(bias)?)?)]
            }
            PostOp::Reduce { .. } => {
                if i + 1 != p.epilogue.len() {
                    return rule(None, format!("epilogue step {i} reduces, and only the last step may"));
                }
                if !p.anchor.pointwise() {
                    return rule(None, format!("epilogue step {i} reduces after a {:?} anchor; only a pointwise island's may", p.anchor.kind().type_name()));
                }
                vec![Some(current)]
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

/// Input `i` of a per-tensor Quantize or Dequantize step: one element.
fn one_element<'a>(ins: &Inputs<'_, 'a>, i: usize) -> InferResult<Fact<'a>> {
    let f = ins.req(i)?;
    match f.shape.dims().iter().all(|d| d.fixed() == Some(1)) {
        true => Ok(f),
        false => rule(Some(i), format!("a per-tensor scale or zero point has one element, input {i} is {}", f.shape)),
    }
}

/// Checked as the layers it replaces: MatrixMultiply, the scale, the mask add, SoftMax and
/// the second MatrixMultiply.
pub(super) fn attention(
    p: &AttentionParams,
    ins: &Inputs,
    weights: &WeightsLookup<'_>,
) -> InferResult<Vec<OutFact>> {
    ins.arity(3, 4)?;
    // A grid's levels are int8 or uint8 with a zero point among them and a positive finite
    // scale, as the QuantizeLinear it stands for has (an engine file may say otherwise).
    let inputs = ["the Q input's", "the K input's", "the V input's"];
    let grids = [("the product", p.product_levels), ("the scores", p.scores_levels), ("the probabilities", p.probs_levels), ("the output", p.output_levels)]
        .into_iter()
        .chain(inputs.into_iter().enumerate().map(|(i, what)| (what, p.input_grid(i))));
    for (what, grid) in grids {
        let Some(g) = grid else { continue };
        let range = matches!(g.levels, crate::DataType::I8 | crate::DataType::U8).then(|| g.range());
        let ok = range.is_some_and(|(lo, hi)| (lo..=hi).contains(&g.zero)) && g.scale.is_finite() && g.scale > 0.0;
        if !ok {
            return rule(None, format!("{what} levels are {} with zero point {} and scale {}: they must be int8 or uint8, the zero point one of their levels and the scale positive", g.levels, g.zero, g.scale));
        }
    }
    // Inputs given as levels read as the floats they dequantize to.
    let mut facts: Vec<Option<Fact<'_>>> = ins.0.to_vec();
    if let Some(levels) = p.input_levels {
        if !levels.to.is_float() {
            return rule(None, format!("attention's inputs dequantize to {}, which is not a floating-point type", levels.to));
        }
        for (slot, grid) in levels.grids.iter().enumerate() {
            let Some(f) = facts[slot].as_mut() else { continue };
            match grid {
                Some(g) if f.dtype != g.levels => {
                    return rule(Some(slot), format!("input {slot} must be the {} levels its grid reads, not {}", g.levels, f.dtype));
                }
                Some(_) => *f = Fact::new(levels.to, f.shape, None),
                None if f.dtype != levels.to => {
                    return rule(Some(slot), format!("input {slot} must be {} as the dequantized inputs are, not {}", levels.to, f.dtype));
                }
                None => {}
            }
        }
    }
    let ins = &Inputs(&facts);
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
    if let Some(grid) = p.output_levels {
        out[0].dtype = grid.levels;
    }
    Ok(out)
}

//! The optimizer's layer kinds, run as the sequence of plain kernels they stand for. The
//! cpu backend is the oracle: a fused layer must give exactly what its unfused layers give,
//! so it reuses their kernels (one rounding per step, as the unfused graph rounds).

use super::{misc, run, Variant};
use kiln::ir::infer::{infer_layer, Fact, OutFact};
use kiln::{
    AttentionParams, DataType, ElementwiseOp, FusedParams, HostTensor, LayerKind, LevelGrid, MatrixOp, PostOp,
    Shape, UnaryOp,
};

/// Runs one plain layer on concrete inputs.
pub(super) fn step(kind: &LayerKind, inputs: &[Option<&HostTensor>]) -> Result<HostTensor, String> {
    step_with(kind, inputs, Variant::Primary)
}

/// [`step`] with the anchor's implementation `variant`.
fn step_with(kind: &LayerKind, inputs: &[Option<&HostTensor>], variant: Variant) -> Result<HostTensor, String> {
    let shapes: Vec<Option<Shape>> = inputs
        .iter()
        .map(|x| x.map(|x| Shape::fixed(x.shape())))
        .collect();
    let facts: Vec<Option<Fact>> = inputs
        .iter()
        .zip(&shapes)
        .map(|(x, s)| {
            x.zip(s.as_ref()).map(|(x, s)| Fact::new(x.dtype(), s, Some(x)))
        })
        .collect();
    let outs: Vec<OutFact> = infer_layer(kind, &facts, &|_| None).map_err(|e| e.rule)?;
    run(kind, inputs, &outs, variant)?
        .into_iter()
        .next()
        .ok_or_else(|| format!("{} gave no output", kind.type_name()))
}

pub fn fused(p: &FusedParams, inputs: &[Option<&HostTensor>], variant: Variant) -> Result<HostTensor, String> {
    // Inputs read dequantized: DequantizeLinear first, as the unfused graph did.
    let mut dequantized = Vec::with_capacity(p.dequantized.len());
    for d in &p.dequantized {
        let slot = |i: usize| inputs.get(i).copied().flatten();
        let x = slot(d.input).ok_or_else(|| format!("dequantized input {} is missing", d.input))?;
        dequantized.push((d.input, step(&LayerKind::Dequantize { axis: None, to: None }, &[Some(x), slot(d.scale), d.zero.and_then(slot)])?));
    }
    let mut seen: Vec<Option<&HostTensor>> = inputs.to_vec();
    for (input, value) in &dequantized {
        seen[*input] = Some(value);
    }
    let inputs = &seen[..];
    let anchor_inputs = inputs
        .get(..p.anchor_inputs)
        .ok_or("fewer inputs than the anchor takes")?;
    let mut running = step_with(&p.anchor.kind(), anchor_inputs, variant)?;
    let input = |i: usize| inputs.get(i).copied().flatten().ok_or_else(|| format!("input {i} is missing"));
    for post in &p.epilogue {
        running = match *post {
            PostOp::Activation(_) | PostOp::Unary(_) | PostOp::Reduce { .. } => step(&post.kind(), &[Some(&running)])?,
            PostOp::Elementwise {
                operand,
                running_first,
                ..
            } => {
                let other = input(operand)?;
                if running_first {
                    step(&post.kind(), &[Some(&running), Some(other)])?
                } else {
                    step(&post.kind(), &[Some(other), Some(&running)])?
                }
            }
            PostOp::Quantize { scale, zero, .. } | PostOp::Dequantize { scale, zero } => {
                let zero = zero.map(input).transpose()?;
                step(&post.kind(), &[Some(&running), Some(input(scale)?), zero])?
            }
            PostOp::Normalization { scale, bias, .. } => step(&post.kind(), &[Some(&running), Some(input(scale)?), Some(input(bias)?)])?,
        };
    }
    Ok(running)
}

/// Input `i`, which the layer kind requires.
fn required<'t>(inputs: &[Option<&'t HostTensor>], i: usize) -> Result<&'t HostTensor, String> {
    inputs.get(i).copied().flatten().ok_or_else(|| format!("input {i} is required"))
}

/// `softmax(Q·Kᵀ ⊙ scale + mask) · V`, step by step as the recognized graph computed it.
pub fn attention(
    p: &AttentionParams,
    inputs: &[Option<&HostTensor>],
) -> Result<HostTensor, String> {
    // Inputs given as levels, dequantized as the DequantizeLinear they stand for did.
    let get = |i: usize| -> Result<std::borrow::Cow<'_, HostTensor>, String> {
        let x = required(inputs, i)?;
        match (p.input_grid(i), p.input_levels) {
            (Some(grid), Some(levels)) => {
                let (scale, zero) = grid.operands()?;
                let kind = LayerKind::Dequantize { axis: None, to: Some(levels.to) };
                Ok(std::borrow::Cow::Owned(step(&kind, &[Some(x), Some(&scale), Some(&zero)])?))
            }
            _ => Ok(std::borrow::Cow::Borrowed(x)),
        }
    };
    let (q, k, v) = (get(0)?, get(1)?, get(2)?);
    let (q, k, v) = (q.as_ref(), k.as_ref(), v.as_ref());
    let op_b = if p.key_transposed {
        MatrixOp::None
    } else {
        MatrixOp::Transpose
    };
    let mut scores = step(
        &LayerKind::MatrixMultiply {
            op_a: MatrixOp::None,
            op_b,
        },
        &[Some(q), Some(k)],
    )?;
    if let Some(grid) = &p.product_levels {
        scores = through_levels(&scores, grid)?;
    }
    let scale = scalar(p.scale, scores.dtype())?;
    let op = if p.scale_multiplies {
        ElementwiseOp::Prod
    } else {
        ElementwiseOp::Div
    };
    scores = step(
        &LayerKind::Elementwise { op },
        &[Some(&scores), Some(&scale)],
    )?;
    if let Some(grid) = &p.scores_levels {
        scores = through_levels(&scores, grid)?;
    }
    if let Some(mask) = inputs.get(3).copied().flatten() {
        scores = step(
            &LayerKind::Elementwise {
                op: ElementwiseOp::Sum,
            },
            &[Some(&scores), Some(mask)],
        )?;
    }
    let axis = scores
        .shape()
        .len()
        .checked_sub(1)
        .ok_or("attention scores have rank 0")?;
    let mut probs = step(&LayerKind::SoftMax { axis }, &[Some(&scores)])?;
    if p.zero_nan_rows {
        // Where(IsNaN(p), 0, p), as the recognized graph computed it.
        let is_nan = step(&LayerKind::Unary { op: UnaryOp::IsNan }, &[Some(&probs)])?;
        let zero = scalar(0.0, probs.dtype())?;
        probs = step(&LayerKind::Select, &[Some(&is_nan), Some(&zero), Some(&probs)])?;
    }
    if let Some(grid) = &p.probs_levels {
        probs = through_levels(&probs, grid)?;
    }
    let out = step(
        &LayerKind::MatrixMultiply {
            op_a: MatrixOp::None,
            op_b: MatrixOp::None,
        },
        &[Some(&probs), Some(v)],
    )?;
    match &p.output_levels {
        Some(grid) => {
            let (scale, zero) = grid.operands()?;
            step(&LayerKind::Quantize { axis: None, to: grid.levels }, &[Some(&out), Some(&scale), Some(&zero)])
        }
        None => Ok(out),
    }
}

/// `DequantizeLinear(QuantizeLinear(x))` on `grid`, back in x's type.
fn through_levels(x: &HostTensor, grid: &LevelGrid) -> Result<HostTensor, String> {
    let (scale, zero) = grid.operands()?;
    let levels = step(&LayerKind::Quantize { axis: None, to: grid.levels }, &[Some(x), Some(&scale), Some(&zero)])?;
    step(&LayerKind::Dequantize { axis: None, to: Some(x.dtype()) }, &[Some(&levels), Some(&scale), Some(&zero)])
}

/// `x / sqrt(mean(x²) + epsilon) * scale`, step by step as the recognized graph computed it.
pub fn rms_normalization(
    inputs: &[Option<&HostTensor>],
    axes: &[usize],
    epsilon: f32,
) -> Result<HostTensor, String> {
    let get = |i: usize| required(inputs, i);
    let (x, scale) = (get(0)?, get(1)?);
    let square = step(
        &LayerKind::Elementwise {
            op: ElementwiseOp::Prod,
        },
        &[Some(x), Some(x)],
    )?;
    let mean = LayerKind::Reduce {
        op: kiln::ReduceOp::Mean,
        axes: axes.to_vec(),
        keep_dims: true,
    };
    let mean = step(&mean, &[Some(&square)])?;
    let eps = scalar(epsilon, x.dtype())?;
    let shifted = step(
        &LayerKind::Elementwise {
            op: ElementwiseOp::Sum,
        },
        &[Some(&mean), Some(&eps)],
    )?;
    let root = step(
        &LayerKind::Unary {
            op: kiln::UnaryOp::Sqrt,
        },
        &[Some(&shifted)],
    )?;
    let normalized = step(
        &LayerKind::Elementwise {
            op: ElementwiseOp::Div,
        },
        &[Some(x), Some(&root)],
    )?;
    step(
        &LayerKind::Elementwise {
            op: ElementwiseOp::Prod,
        },
        &[Some(&normalized), Some(scale)],
    )
}

/// A 0-D tensor of `dtype` holding `value`.
fn scalar(value: f32, dtype: DataType) -> Result<HostTensor, String> {
    let f = HostTensor::from_f32(vec![], vec![value]).map_err(|e| e.to_string())?;
    if dtype == DataType::F32 {
        return Ok(f);
    }
    HostTensor::new(vec![], misc::cast(&f, dtype)?).map_err(|e| e.to_string())
}

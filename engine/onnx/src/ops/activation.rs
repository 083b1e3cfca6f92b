//! Activations (Relu family, Clip, Gelu, PRelu, Swish, Shrink, …) and Softmax.

use super::build::{binary, with_scalar};
use super::{one, Registry};
use crate::context::NodeContext;
use crate::error::ImportError;
use kiln::{ActivationKind, DataType, ElementwiseOp, LayerKind, ShuffleParams, TensorId};

pub(super) fn register(r: &mut Registry) {
    r.add("Relu", &[1, 6, 13, 14], activation);
    r.add("Sigmoid", &[1, 6, 13], activation);
    r.add("Tanh", &[1, 6, 13], activation);
    r.add("LeakyRelu", &[1, 6, 16], activation);
    r.add("HardSigmoid", &[1, 6, 22], activation);
    r.add("HardSwish", &[14, 22], activation);
    r.add("Gelu", &[20], activation);
    r.add("Softplus", &[1, 22], activation);
    r.add("Softsign", &[1, 22], activation);
    r.add("Elu", &[1, 6, 22], activation);
    r.add("Selu", &[1, 6, 22], activation);
    r.add("ThresholdedRelu", &[10, 22], activation);
    r.add("Celu", &[12, 28], activation);
    r.add("Mish", &[18, 22], activation);
    r.add("Clip", &[1, 6, 11, 12, 13], clip);
    r.add("PRelu", &[1, 6, 7, 9, 16], prelu);
    r.add("Softmax", &[1, 11, 13], softmax);
    r.add("Swish", &[24], swish);
    r.add("Shrink", &[9], shrink);
}

/// `x * sigmoid(alpha * x)`.
fn swish(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let alpha = ctx.attrs.float("alpha", 1.0)?;
    if alpha == 1.0 {
        return one(ctx.add("", LayerKind::Activation { kind: ActivationKind::Swish }, &[x])?);
    }
    let scaled = with_scalar(ctx, "alpha x", ElementwiseOp::Prod, x, alpha as f64)?;
    let gate = ctx.add("gate", LayerKind::Activation { kind: ActivationKind::Sigmoid }, &[scaled])?;
    one(binary(ctx, "", ElementwiseOp::Prod, x, gate)?)
}

/// `x < -lambd ? x + bias : x > lambd ? x - bias : 0`.
fn shrink(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let lambd = ctx.attrs.float("lambd", 0.5)? as f64;
    let bias = ctx.attrs.float("bias", 0.0)? as f64;
    let below = with_scalar(ctx, "below", ElementwiseOp::Less, x, -lambd)?;
    let above = with_scalar(ctx, "above", ElementwiseOp::Greater, x, lambd)?;
    let raised = with_scalar(ctx, "x + bias", ElementwiseOp::Sum, x, bias)?;
    let lowered = with_scalar(ctx, "x - bias", ElementwiseOp::Sub, x, bias)?;
    let zero = ctx.scalar("zero", ctx.dtype(x), 0.0)?;
    let upper = ctx.add("upper", LayerKind::Select, &[above, lowered, zero])?;
    one(ctx.add("", LayerKind::Select, &[below, raised, upper])?)
}

fn activation_kind(ctx: &NodeContext) -> Result<ActivationKind, ImportError> {
    let a = &ctx.attrs;
    Ok(match ctx.op_type() {
        "Relu" => ActivationKind::Relu,
        "Sigmoid" => ActivationKind::Sigmoid,
        "Tanh" => ActivationKind::Tanh,
        "LeakyRelu" => ActivationKind::LeakyRelu { alpha: a.float("alpha", 0.01)? },
        "HardSigmoid" => ActivationKind::HardSigmoid { alpha: a.float("alpha", 0.2)?, beta: a.float("beta", 0.5)? },
        "HardSwish" => ActivationKind::HardSwish,
        "Gelu" => match a.string("approximate", "none")? {
            "none" => ActivationKind::GeluErf,
            "tanh" => ActivationKind::GeluTanh,
            other => return Err(ctx.invalid(format!("Gelu approximate must be `none` or `tanh`, got `{other}`"))),
        },
        "Softplus" => ActivationKind::Softplus,
        "Softsign" => ActivationKind::Softsign,
        "Elu" => ActivationKind::Elu { alpha: a.float("alpha", 1.0)? },
        "Selu" => ActivationKind::Selu { alpha: a.float("alpha", 1.673_263_2)?, gamma: a.float("gamma", 1.050_701)? },
        "ThresholdedRelu" => ActivationKind::ThresholdedRelu { alpha: a.float("alpha", 1.0)? },
        "Celu" => ActivationKind::Celu { alpha: a.float("alpha", 1.0)? },
        "Mish" => ActivationKind::Mish,
        other => return Err(ctx.invalid(format!("`{other}` is registered as an activation but has no mapping"))),
    })
}

fn activation(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let kind = activation_kind(ctx)?;
    let x = ctx.input(0)?;
    one(ctx.add("", LayerKind::Activation { kind }, &[x])?)
}

/// The single value of a constant 0-D / 1-element bound.
fn constant_bound(ctx: &NodeContext, t: TensorId, what: &str) -> Result<Option<f64>, ImportError> {
    let Some(value) = ctx.value(t) else {
        return Ok(None);
    };
    match value.to_f64_vec().as_slice() {
        [v] => Ok(Some(*v)),
        other => Err(ctx.invalid(format!("Clip {what} must hold one value, got {}", other.len()))),
    }
}

/// Clip: bounds are attributes before opset 11 and optional inputs after. Float inputs with
/// constant bounds become one Clip activation; otherwise Max/Min layers clamp exactly in
/// the input's type (integers) or against run-time bounds.
fn clip(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    if ctx.version < 11 {
        let min = ctx.attrs.float("min", f32::MIN)?;
        let max = ctx.attrs.float("max", f32::MAX)?;
        return one(ctx.add("", LayerKind::Activation { kind: ActivationKind::Clip { min, max } }, &[x])?);
    }
    let (min, max) = (ctx.opt_input(1), ctx.opt_input(2));
    // f32 bounds are exact for f32 and narrower; f64 (QLinearConv's exact expansion) takes
    // Max / Min with its own bounds.
    if ctx.dtype(x).is_float() && ctx.dtype(x) != DataType::F64 {
        let min_value = min.map(|t| constant_bound(ctx, t, "min")).transpose()?;
        let max_value = max.map(|t| constant_bound(ctx, t, "max")).transpose()?;
        if let (Some(lo), Some(hi)) =
            (min_value.unwrap_or(Some(f64::NEG_INFINITY)), max_value.unwrap_or(Some(f64::INFINITY)))
        {
            let kind = ActivationKind::Clip { min: lo as f32, max: hi as f32 };
            return one(ctx.add("", LayerKind::Activation { kind }, &[x])?);
        }
    }
    let mut y = x;
    if let Some(lo) = min {
        let part = if max.is_some() { "min" } else { "" };
        y = ctx.add(part, LayerKind::Elementwise { op: ElementwiseOp::Max }, &[y, lo])?;
    }
    if let Some(hi) = max {
        y = ctx.add("", LayerKind::Elementwise { op: ElementwiseOp::Min }, &[y, hi])?;
    }
    one(y)
}

/// PRelu. Before opset 7 a 1-D slope of C values applied per channel; numpy broadcasting
/// would align it with the last axis, so it is reshaped to `[C, 1, …]`.
fn prelu(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let mut slope = ctx.input(1)?;
    let rank = ctx.rank(x);
    let per_channel = ctx.rank(slope) == 1 && ctx.dims(slope)[0].fixed() != Some(1);
    if ctx.version < 7 && per_channel && rank >= 3 {
        let mut dims = vec![-1];
        dims.extend(std::iter::repeat_n(1, rank - 2));
        slope = ctx.reshape("slope", slope, dims)?;
    }
    one(ctx.add("", LayerKind::ParametricRelu, &[x, slope])?)
}

/// Softmax. From opset 13 it normalizes one axis (default -1). Before, the input was
/// coerced to 2-D at `axis` (default 1): everything from `axis` on is one row. That equals
/// a softmax over the last axis of `x` reshaped to `[d0, …, d(axis-1), -1]`, reshaped back.
fn softmax(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let rank = ctx.rank(x);
    let default_axis = if ctx.version >= 13 { -1 } else { 1 };
    let axis = ctx.axis(ctx.attrs.int("axis", default_axis)?, rank)?;
    if ctx.version >= 13 || axis + 1 == rank {
        return one(ctx.add("", LayerKind::SoftMax { axis }, &[x])?);
    }
    let mut rows = vec![0; axis];
    rows.push(-1);
    let flat = ctx.reshape("flatten", x, rows)?;
    let y = ctx.add("softmax", LayerKind::SoftMax { axis }, &[flat])?;
    // Exact dims (no 0 placeholders): an empty dim must stay empty.
    let exact = ShuffleParams::default();
    let y = match ctx.fixed_dims(x) {
        Some(d) => {
            let dims = d.iter().map(|&v| v as i64).collect();
            ctx.shuffle("", y, ShuffleParams { reshape: Some(dims), ..exact })?
        }
        None => {
            let shape = ctx.add("shape", LayerKind::Shape, &[x])?;
            ctx.add("", LayerKind::Shuffle(exact), &[y, shape])?
        }
    };
    one(y)
}

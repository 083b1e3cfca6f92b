//! LayerNormalization, BatchNormalization (inference and training form) and
//! InstanceNormalization.

use super::{one, Registry};
use crate::context::NodeContext;
use crate::error::ImportError;
use super::build;
use kiln::{DataType, ElementwiseOp, LayerKind, ReduceOp, TensorId, UnaryOp};

pub(super) fn register(r: &mut Registry) {
    r.add("LayerNormalization", &[17], layer_norm);
    r.add("BatchNormalization", &[1, 6, 7, 9, 14, 15], batch_norm);
    r.add("InstanceNormalization", &[1, 6, 22], instance_norm);
}

fn layer_norm(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    if ctx.output_wanted(1) || ctx.output_wanted(2) {
        return super::normalize::layer_norm_with_statistics(ctx);
    }
    let x = ctx.input(0)?;
    let scale = ctx.input(1)?;
    let rank = ctx.rank(x);
    let axis = ctx.axis(ctx.attrs.int("axis", -1)?, rank)?;
    let epsilon = ctx.attrs.float("epsilon", 1e-5)?;
    let bias = match ctx.opt_input(2) {
        Some(b) => b,
        None => ctx.scalar("zero bias", ctx.dtype(x), 0.0)?,
    };
    let kind = LayerKind::Normalization { axes: (axis..rank).collect(), epsilon, num_groups: 1 };
    one(ctx.add("", kind, &[x, scale, bias])?)
}

/// `[C]` parameter dims that broadcast along axis 1 of a rank-`rank` input: `[C, 1, …]`.
fn channel_dims(rank: usize) -> Vec<i64> {
    let mut dims = vec![-1];
    dims.extend(std::iter::repeat_n(1, rank.saturating_sub(2)));
    dims
}

/// Inference batch norm: `y = x * a + b` with `a = scale / sqrt(var + eps)` and
/// `b = bias - mean * a`, computed in f32 (f64 for f64 inputs) by layers: the builder folds
/// them when the parameters are constant, so the parameters stay the model's own weights
/// (named after its initializers, as a refit finds them).
fn batch_norm(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    if ctx.version >= 14 && ctx.attrs.flag("training_mode", false)? {
        return batch_norm_training(ctx);
    }
    for (i, what) in [(1, "running mean"), (2, "running var"), (3, "saved mean"), (4, "saved var")] {
        ctx.refuse_output(i, what)?;
    }
    let x = ctx.input(0)?;
    let params = [ctx.input(1)?, ctx.input(2)?, ctx.input(3)?, ctx.input(4)?];
    let epsilon = ctx.attrs.float("epsilon", 1e-5)? as f64;
    let rank = ctx.rank(x);
    let dtype = ctx.dtype(x);
    let compute = if dtype == DataType::F64 { DataType::F64 } else { DataType::F32 };
    // Before opset 9, `spatial=0` gave per-activation parameters shaped like x without N.
    let per_activation = ctx.version < 9 && !ctx.attrs.flag("spatial", true)?;
    let names = ["scale", "bias", "mean", "var"];
    let mut shaped = [params[0]; 4];
    for (i, &p) in params.iter().enumerate() {
        let p = ctx.cast(&format!("{} cast", names[i]), p, compute)?;
        shaped[i] = if per_activation || rank <= 2 { p } else { ctx.reshape(names[i], p, channel_dims(rank))? };
    }
    let [scale, bias, mean, var] = shaped;
    let eps = ctx.scalar("epsilon", compute, epsilon)?;
    let var_eps = ctx.add("var + epsilon", LayerKind::Elementwise { op: ElementwiseOp::Sum }, &[var, eps])?;
    let std = ctx.add("std", LayerKind::Unary { op: UnaryOp::Sqrt }, &[var_eps])?;
    let a = ctx.add("scale / std", LayerKind::Elementwise { op: ElementwiseOp::Div }, &[scale, std])?;
    let mean_a = ctx.add("mean * a", LayerKind::Elementwise { op: ElementwiseOp::Prod }, &[mean, a])?;
    let b = ctx.add("bias - mean * a", LayerKind::Elementwise { op: ElementwiseOp::Sub }, &[bias, mean_a])?;
    let (a, b) = (ctx.cast("scale", a, dtype)?, ctx.cast("shift", b, dtype)?);
    let scaled = ctx.add("multiply", LayerKind::Elementwise { op: ElementwiseOp::Prod }, &[x, a])?;
    one(ctx.add("", LayerKind::Elementwise { op: ElementwiseOp::Sum }, &[scaled, b])?)
}

/// Training-mode batch norm (opset 14+): the statistics are the input's own, per channel over
/// every other axis (NF-Nets' weight standardization exports this way), and the running
/// statistics outputs blend them with the given ones by `momentum`, as the ONNX reference
/// does (population variance).
fn batch_norm_training(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    use ElementwiseOp as E;
    let x = ctx.input(0)?;
    let rank = ctx.rank(x);
    if rank < 2 {
        return Err(ctx.invalid(format!("BatchNormalization needs an N×C… input, got rank {rank}")));
    }
    let epsilon = ctx.attrs.float("epsilon", 1e-5)? as f64;
    let momentum = ctx.attrs.float("momentum", 0.9)? as f64;
    let axes: Vec<usize> = std::iter::once(0).chain(2..rank).collect();
    let mean = build::reduce(ctx, "batch mean", ReduceOp::Mean, x, axes.clone(), true)?;
    let centered = build::binary(ctx, "centered", E::Sub, x, mean)?;
    let squares = build::binary(ctx, "squares", E::Prod, centered, centered)?;
    let var = build::reduce(ctx, "batch var", ReduceOp::Mean, squares, axes, true)?;
    let var_eps = build::with_scalar(ctx, "var + epsilon", E::Sum, var, epsilon)?;
    let std = build::unary(ctx, "std", UnaryOp::Sqrt, var_eps)?;
    let normalized = build::binary(ctx, "normalized", E::Div, centered, std)?;
    let (scale, bias) = (ctx.input(1)?, ctx.input(2)?);
    let scale = ctx.reshape("scale", scale, channel_dims(rank))?;
    let bias = ctx.reshape("bias", bias, channel_dims(rank))?;
    let scaled = build::binary(ctx, "scaled", E::Prod, normalized, scale)?;
    let mut outputs = vec![ctx.add("", LayerKind::Elementwise { op: E::Sum }, &[scaled, bias])?];
    // The given running mean and var (inputs 3 and 4) only feed the running outputs.
    ctx.read_inputs(5);
    for (slot, current, what) in [(1, mean, "running mean"), (2, var, "running var")] {
        if !ctx.output_wanted(slot) {
            break;
        }
        // running = given * momentum + current * (1 - momentum), as [C].
        let given = ctx.input(slot + 2)?;
        let current = ctx.reshape(&format!("{what} current"), current, vec![-1])?;
        let kept = build::with_scalar(ctx, &format!("{what} kept"), E::Prod, given, momentum)?;
        let new = build::with_scalar(ctx, &format!("{what} new"), E::Prod, current, 1.0 - momentum)?;
        outputs.push(build::binary(ctx, what, E::Sum, kept, new)?);
    }
    Ok(outputs)
}

/// Instance norm: statistics over the spatial axes per (sample, channel); the `[C]` scale
/// and bias are reshaped to `[1, C, 1, …]`.
fn instance_norm(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let rank = ctx.rank(x);
    if rank < 3 {
        return Err(ctx.invalid(format!("InstanceNormalization needs an N×C×spatial input, got rank {rank}")));
    }
    let epsilon = ctx.attrs.float("epsilon", 1e-5)?;
    let mut dims = vec![1, -1];
    dims.extend(std::iter::repeat_n(1, rank - 2));
    let scale = ctx.input(1)?;
    let scale = ctx.reshape("scale", scale, dims.clone())?;
    let bias = ctx.input(2)?;
    let bias = ctx.reshape("bias", bias, dims)?;
    let kind = LayerKind::Normalization { axes: (2..rank).collect(), epsilon, num_groups: 1 };
    one(ctx.add("", kind, &[x, scale, bias])?)
}

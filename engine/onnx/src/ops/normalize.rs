//! Normalizations that decompose into reductions and element-wise layers (LogSoftmax,
//! RMSNormalization, LpNormalization, MeanVarianceNormalization, LayerNormalization with
//! its statistics outputs), plus GroupNormalization and LRN on kiln's own layers.

use super::build::{binary, reduce, unary, with_scalar};
use super::{one, Registry};
use crate::context::NodeContext;
use crate::error::ImportError;
use kiln::{DataType, ElementwiseOp as E, LayerKind, ReduceOp, TensorId, UnaryOp};

pub(super) fn register(r: &mut Registry) {
    r.add("LogSoftmax", &[1, 11, 13], log_softmax);
    r.add("RMSNormalization", &[23], rms_norm);
    r.add("LpNormalization", &[1, 22], lp_norm);
    r.add("MeanVarianceNormalization", &[9, 13], mean_variance_norm);
    r.add("GroupNormalization", &[18, 21], group_norm);
    r.add("LRN", &[1, 13], lrn);
}

/// `x - max - log(sum(exp(x - max)))` over the normalized axes: the last axis from opset
/// 13, before it every axis from `axis` (default 1) on, as the 2-D coercion had it.
fn log_softmax(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let rank = ctx.rank(x);
    if !ctx.dtype(x).is_float() {
        return Err(ctx.unsupported(format!("LogSoftmax on {}", ctx.dtype(x))));
    }
    let default_axis = if ctx.version >= 13 { -1 } else { 1 };
    let axis = ctx.axis(ctx.attrs.int("axis", default_axis)?, rank)?;
    let axes: Vec<usize> = if ctx.version >= 13 { vec![axis] } else { (axis..rank).collect() };
    let max = reduce(ctx, "max", ReduceOp::Max, x, axes.clone(), true)?;
    let shifted = binary(ctx, "shifted", E::Sub, x, max)?;
    let log_sum = reduce(ctx, "log sum exp", ReduceOp::LogSumExp, shifted, axes, true)?;
    one(binary(ctx, "", E::Sub, shifted, log_sum)?)
}

/// The stash type (attribute `stash_type`, float by default) that statistics use.
fn stash_type(ctx: &NodeContext, x: TensorId) -> Result<DataType, ImportError> {
    match ctx.attrs.int("stash_type", 1)? {
        1 => Ok(DataType::F32),
        11 => Ok(DataType::F64),
        // Other stash types compute in the input's own type.
        _ => Ok(ctx.dtype(x)),
    }
}

/// `x / sqrt(mean(x²) + epsilon) * scale` over the axes from `axis` on.
fn rms_norm(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let (x, scale) = (ctx.input(0)?, ctx.input(1)?);
    let rank = ctx.rank(x);
    let axis = ctx.axis(ctx.attrs.int("axis", -1)?, rank)?;
    let epsilon = ctx.attrs.float("epsilon", 1e-5)? as f64;
    let stash = stash_type(ctx, x)?;
    let xs = ctx.cast("stash", x, stash)?;
    let squares = binary(ctx, "squares", E::Prod, xs, xs)?;
    let mean_square = reduce(ctx, "mean square", ReduceOp::Mean, squares, (axis..rank).collect(), true)?;
    let var = with_scalar(ctx, "plus epsilon", E::Sum, mean_square, epsilon)?;
    let rms = unary(ctx, "rms", UnaryOp::Sqrt, var)?;
    let normalized = binary(ctx, "normalized", E::Div, xs, rms)?;
    let normalized = ctx.cast("normalized cast", normalized, ctx.dtype(scale))?;
    one(binary(ctx, "", E::Prod, normalized, scale)?)
}

/// LayerNormalization computed step by step, for models that read Mean (output 1) or
/// InvStdDev (output 2), which are in the stash type with the normalized axes kept as 1.
pub(super) fn layer_norm_with_statistics(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let (x, scale) = (ctx.input(0)?, ctx.input(1)?);
    let rank = ctx.rank(x);
    let axis = ctx.axis(ctx.attrs.int("axis", -1)?, rank)?;
    let epsilon = ctx.attrs.float("epsilon", 1e-5)? as f64;
    let axes: Vec<usize> = (axis..rank).collect();
    let xs = ctx.cast("stash", x, stash_type(ctx, x)?)?;
    let mean = reduce(ctx, "mean", ReduceOp::Mean, xs, axes.clone(), true)?;
    let centered = binary(ctx, "centered", E::Sub, xs, mean)?;
    let squared = binary(ctx, "squared", E::Prod, centered, centered)?;
    let var = reduce(ctx, "variance", ReduceOp::Mean, squared, axes, true)?;
    let var = with_scalar(ctx, "plus epsilon", E::Sum, var, epsilon)?;
    let std = unary(ctx, "std", UnaryOp::Sqrt, var)?;
    let inv_std = unary(ctx, "inv std", UnaryOp::Recip, std)?;
    let normalized = binary(ctx, "normalized", E::Prod, centered, inv_std)?;
    let normalized = ctx.cast("normalized cast", normalized, ctx.dtype(x))?;
    let mut y = binary(ctx, "scaled", E::Prod, normalized, scale)?;
    if let Some(bias) = ctx.opt_input(2) {
        y = binary(ctx, "", E::Sum, y, bias)?;
    }
    Ok(vec![y, mean, inv_std])
}

/// `x / ||x||_p` along `axis` (p = 1 or 2).
fn lp_norm(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let axis = ctx.axis(ctx.attrs.int("axis", -1)?, ctx.rank(x))?;
    let op = match ctx.attrs.int("p", 2)? {
        1 => ReduceOp::L1,
        2 => ReduceOp::L2,
        p => return Err(ctx.invalid(format!("p must be 1 or 2, got {p}"))),
    };
    let norm = reduce(ctx, "norm", op, x, vec![axis], true)?;
    // A zero vector stays zero (the reference's output) instead of 0/0.
    let is_zero = with_scalar(ctx, "norm is zero", E::Equal, norm, 0.0)?;
    let one_value = ctx.scalar("one", ctx.dtype(x), 1.0)?;
    let norm = ctx.add("safe norm", LayerKind::Select, &[is_zero, one_value, norm])?;
    one(binary(ctx, "", E::Div, x, norm)?)
}

/// `(x - mean) / (sqrt(mean(x²) - mean²) + 1e-9)` over `axes` (default N, H, W), the
/// reference's formula.
fn mean_variance_norm(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let rank = ctx.rank(x);
    let axes = match ctx.attrs.ints("axes")? {
        Some(a) => ctx.axes(a, rank)?,
        None => ctx.axes(&[0, 2, 3], rank)?,
    };
    let mean = reduce(ctx, "mean", ReduceOp::Mean, x, axes.clone(), true)?;
    let mean_squared = binary(ctx, "mean squared", E::Prod, mean, mean)?;
    let squares = binary(ctx, "squares", E::Prod, x, x)?;
    let mean_of_squares = reduce(ctx, "mean of squares", ReduceOp::Mean, squares, axes, true)?;
    let var = binary(ctx, "variance", E::Sub, mean_of_squares, mean_squared)?;
    let std = unary(ctx, "std", UnaryOp::Sqrt, var)?;
    let std = with_scalar(ctx, "std + tiny", E::Sum, std, 1e-9)?;
    let centered = binary(ctx, "centered", E::Sub, x, mean)?;
    one(binary(ctx, "", E::Div, centered, std)?)
}

/// Per-(sample, group) statistics; scale and bias are per group in opset 18 and per
/// channel from 21, laid out as `[C, 1, …]` for the Normalization layer.
fn group_norm(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let (x, scale, bias) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
    let rank = ctx.rank(x);
    if rank < 3 {
        return Err(ctx.invalid(format!("GroupNormalization needs an N×C×spatial input, got rank {rank}")));
    }
    let groups = usize::try_from(ctx.attrs.required_int("num_groups")?)
        .ok()
        .filter(|&g| g > 0)
        .ok_or_else(|| ctx.invalid("num_groups must be positive"))?;
    let epsilon = ctx.attrs.float("epsilon", 1e-5)?;
    let channels = super::build::fixed_dim(ctx, x, 1, "GroupNormalization")?;
    if channels % groups != 0 {
        return Err(ctx.invalid(format!("{channels} channels do not split into {groups} groups")));
    }
    let mut param_dims = vec![channels as i64];
    param_dims.extend(std::iter::repeat_n(1, rank - 2));
    let per_channel = |ctx: &mut NodeContext, t: TensorId, what: &str| -> Result<TensorId, ImportError> {
        let t = ctx.cast(&format!("{what} cast"), t, ctx.dtype(x))?;
        let t = if ctx.version < 21 && groups != channels {
            // One value per group, repeated for the group's channels.
            let column = ctx.reshape(&format!("{what} column"), t, vec![groups as i64, 1])?;
            let shape = ctx.const_i64(&format!("{what} repeat"), &[groups as i64, (channels / groups) as i64])?;
            ctx.add(&format!("{what} repeated"), LayerKind::Expand, &[column, shape])?
        } else {
            t
        };
        ctx.reshape(what, t, param_dims.clone())
    };
    let scale = per_channel(ctx, scale, "scale")?;
    let bias = per_channel(ctx, bias, "bias")?;
    let kind = if groups == 1 {
        LayerKind::Normalization { axes: (1..rank).collect(), epsilon, num_groups: 1 }
    } else {
        LayerKind::Normalization { axes: (2..rank).collect(), epsilon, num_groups: groups }
    };
    one(ctx.add("", kind, &[x, scale, bias])?)
}

fn lrn(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let window = usize::try_from(ctx.attrs.required_int("size")?)
        .ok()
        .filter(|&s| s > 0)
        .ok_or_else(|| ctx.invalid("size must be positive"))?;
    let alpha = ctx.attrs.float("alpha", 1e-4)?;
    let beta = ctx.attrs.float("beta", 0.75)?;
    let k = ctx.attrs.float("bias", 1.0)?;
    one(ctx.add("", LayerKind::Lrn { window, alpha, beta, k }, &[x])?)
}

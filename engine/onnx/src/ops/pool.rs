//! MaxPool, AveragePool and the global pools (a Reduce over the spatial axes).

use super::conv::{spatial_list, spatial_rank, window_padding};
use super::{one, Registry};
use crate::context::NodeContext;
use crate::error::ImportError;
use kiln::{ElementwiseOp, LayerKind, PoolingKind, PoolingParams, ReduceOp, TensorId, UnaryOp};

pub(super) fn register(r: &mut Registry) {
    r.add("MaxPool", &[1, 8, 10, 11, 12, 22], pool);
    r.add("AveragePool", &[1, 7, 10, 11, 19, 22], pool);
    r.add("GlobalAveragePool", &[1, 22], global_pool);
    r.add("GlobalMaxPool", &[1, 22], global_pool);
    r.add("LpPool", &[1, 2, 11, 18, 22], lp_pool);
}

fn pool(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let kind = if ctx.op_type() == "MaxPool" { PoolingKind::Max } else { PoolingKind::Average };
    if kind == PoolingKind::Max {
        ctx.refuse_output(1, "Indices")?;
    }
    let x = ctx.input(0)?;
    let params = pool_params(ctx, x, kind)?;
    one(ctx.add("", LayerKind::Pooling(params), &[x])?)
}

/// The window of a pooling node from its attributes.
fn pool_params(ctx: &NodeContext, x: TensorId, kind: PoolingKind) -> Result<PoolingParams, ImportError> {
    let spatial = spatial_rank(ctx, x)?;
    if !ctx.attrs.has("kernel_shape") {
        return Err(ctx.invalid("attribute `kernel_shape` is required"));
    }
    let window = spatial_list(ctx, "kernel_shape", spatial, 1, 1)?;
    let strides = spatial_list(ctx, "strides", spatial, 1, 1)?;
    let dilations = spatial_list(ctx, "dilations", spatial, 1, 1)?;
    let (pre_padding, post_padding) = window_padding(ctx, x, &window, &strides, &dilations)?;
    let params = PoolingParams {
        kind,
        window,
        strides,
        dilations,
        pre_padding,
        post_padding,
        ceil_mode: ctx.attrs.flag("ceil_mode", false)?,
        average_count_excludes_padding: !ctx.attrs.flag("count_include_pad", false)?,
    };
    Ok(params)
}

/// LpPool: `(Σ_window |x|^p)^(1/p)`, the sum being an average over the whole window (padding
/// counted as zeros) times the window's size.
fn lp_pool(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    // LpPool-1 declares p a float.
    let p = if ctx.version == 1 { f64::from(ctx.attrs.float("p", 2.0)?) } else { ctx.attrs.int("p", 2)? as f64 };
    if !(p > 0.0 && p.is_finite()) {
        return Err(ctx.invalid(format!("p must be positive, got {p}")));
    }
    let mut params = pool_params(ctx, x, PoolingKind::Average)?;
    params.average_count_excludes_padding = false;
    let volume = params.window.iter().product::<usize>() as f64;
    let dtype = ctx.dtype(x);
    let magnitude = ctx.add("abs", LayerKind::Unary { op: UnaryOp::Abs }, &[x])?;
    let power = ctx.scalar("p", dtype, p)?;
    let powered = ctx.add("pow", LayerKind::Elementwise { op: ElementwiseOp::Pow }, &[magnitude, power])?;
    let mean = ctx.add("mean", LayerKind::Pooling(params), &[powered])?;
    let size = ctx.scalar("window size", dtype, volume)?;
    let sum = ctx.add("sum", LayerKind::Elementwise { op: ElementwiseOp::Prod }, &[mean, size])?;
    let root = ctx.scalar("1/p", dtype, 1.0 / p)?;
    one(ctx.add("", LayerKind::Elementwise { op: ElementwiseOp::Pow }, &[sum, root])?)
}

/// Global pooling: a mean or max over every axis after N and C, keeping them as 1s.
fn global_pool(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let op = if ctx.op_type() == "GlobalMaxPool" { ReduceOp::Max } else { ReduceOp::Mean };
    let x = ctx.input(0)?;
    let spatial = spatial_rank(ctx, x)?;
    let axes = (2..2 + spatial).collect();
    one(ctx.add("", LayerKind::Reduce { op, axes, keep_dims: true }, &[x])?)
}

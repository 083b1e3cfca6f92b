//! MaxPool, AveragePool and the global pools (a Reduce over the spatial axes).

use super::conv::{spatial_list, spatial_rank, window_padding};
use super::{one, Registry};
use crate::context::NodeContext;
use crate::error::ImportError;
use kiln::{LayerKind, PoolingKind, PoolingParams, ReduceOp, TensorId};

pub(super) fn register(r: &mut Registry) {
    r.add("MaxPool", &[1, 8, 10, 11, 12, 22], pool);
    r.add("AveragePool", &[1, 7, 10, 11, 19, 22], pool);
    r.add("GlobalAveragePool", &[1, 22], global_pool);
    r.add("GlobalMaxPool", &[1, 22], global_pool);
}

fn pool(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let kind = if ctx.op_type() == "MaxPool" { PoolingKind::Max } else { PoolingKind::Average };
    if kind == PoolingKind::Max {
        ctx.refuse_output(1, "Indices")?;
    }
    let x = ctx.input(0)?;
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
    one(ctx.add("", LayerKind::Pooling(params), &[x])?)
}

/// Global pooling: a mean or max over every axis after N and C, keeping them as 1s.
fn global_pool(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let op = if ctx.op_type() == "GlobalMaxPool" { ReduceOp::Max } else { ReduceOp::Mean };
    let x = ctx.input(0)?;
    let spatial = spatial_rank(ctx, x)?;
    let axes = (2..2 + spatial).collect();
    one(ctx.add("", LayerKind::Reduce { op, axes, keep_dims: true }, &[x])?)
}

//! Small layer-building helpers shared by the op families that decompose an ONNX op into
//! several kiln layers.

use crate::context::NodeContext;
use crate::error::ImportError;
use kiln::{ElementwiseOp, HostTensor, LayerKind, ReduceOp, ShuffleParams, TensorId, UnaryOp};

pub(super) fn binary(
    ctx: &mut NodeContext,
    part: &str,
    op: ElementwiseOp,
    a: TensorId,
    b: TensorId,
) -> Result<TensorId, ImportError> {
    ctx.add(part, LayerKind::Elementwise { op }, &[a, b])
}

pub(super) fn unary(ctx: &mut NodeContext, part: &str, op: UnaryOp, x: TensorId) -> Result<TensorId, ImportError> {
    ctx.add(part, LayerKind::Unary { op }, &[x])
}

/// `x op value` with `value` a 0-D constant of `x`'s type.
pub(super) fn with_scalar(
    ctx: &mut NodeContext,
    part: &str,
    op: ElementwiseOp,
    x: TensorId,
    value: f64,
) -> Result<TensorId, ImportError> {
    let c = ctx.scalar(&format!("{part} constant"), ctx.dtype(x), value)?;
    binary(ctx, part, op, x, c)
}

pub(super) fn reduce(
    ctx: &mut NodeContext,
    part: &str,
    op: ReduceOp,
    x: TensorId,
    axes: Vec<usize>,
    keep_dims: bool,
) -> Result<TensorId, ImportError> {
    ctx.add(part, LayerKind::Reduce { op, axes, keep_dims }, &[x])
}

/// Removes the size-1 `axis`: moved last, then dropped by a reshape that copies the rest.
pub(super) fn squeeze_axis(
    ctx: &mut NodeContext,
    part: &str,
    x: TensorId,
    axis: usize,
) -> Result<TensorId, ImportError> {
    let rank = ctx.rank(x);
    let mut perm: Vec<usize> = (0..rank).filter(|&a| a != axis).collect();
    perm.push(axis);
    let identity = perm.iter().enumerate().all(|(i, &p)| i == p);
    let params = ShuffleParams {
        first_transpose: if identity { Vec::new() } else { perm },
        reshape: Some(vec![0; rank - 1]),
        zero_is_placeholder: true,
        ..Default::default()
    };
    ctx.shuffle(part, x, params)
}

const MAX_IOTA: usize = 1 << 24;

/// `0, 1, …, n-1` (i64) laid along `axis` of a rank-`rank` tensor, every other dim 1.
pub(super) fn iota(
    ctx: &mut NodeContext,
    part: &str,
    n: usize,
    rank: usize,
    axis: usize,
) -> Result<TensorId, ImportError> {
    // A constant of a declared dim's size: bounded, so a hostile dim is an error, not an
    // allocation of its size.
    if n > MAX_IOTA {
        return Err(ctx.unsupported(format!("an index constant of {n} elements (over {MAX_IOTA})")));
    }
    let mut shape = vec![1; rank];
    shape[axis] = n;
    let value = HostTensor::from_i64(shape, (0..n as i64).collect()).map_err(|e| ctx.invalid(e.to_string()))?;
    ctx.constant(part, value)
}

/// A fixed dim of `t`, or an error naming what needs it.
pub(super) fn fixed_dim(ctx: &NodeContext, t: TensorId, axis: usize, what: &str) -> Result<usize, ImportError> {
    ctx.dims(t)[axis].fixed().ok_or_else(|| ctx.unsupported(format!("{what} with a dynamic length on axis {axis}")))
}

//! SpaceToDepth and DepthToSpace (a reshape to six dims, a transpose, a reshape back) and
//! ReverseSequence.

use super::build::{binary, fixed_dim, iota};
use super::{one, Registry};
use crate::context::NodeContext;
use crate::error::ImportError;
use kiln::{DataType, ElementwiseOp as E, GatherMode, LayerKind, ShuffleParams, TensorId};

pub(super) fn register(r: &mut Registry) {
    r.add("SpaceToDepth", &[1, 13, 28], space_to_depth);
    r.add("DepthToSpace", &[1, 11, 13], depth_to_space);
    r.add("ReverseSequence", &[10], reverse_sequence);
}

/// ReverseSequence: a GatherElements along the time axis with index `len[b] - 1 - t` where
/// `t < len[b]` and `t` elsewhere.
fn reverse_sequence(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let (x, lens) = (ctx.input(0)?, ctx.input(1)?);
    let rank = ctx.rank(x);
    let (batch_axis, time_axis) = (ctx.attrs.int("batch_axis", 1)?, ctx.attrs.int("time_axis", 0)?);
    let ok = |a: i64| a == 0 || a == 1;
    if rank < 2 || !ok(batch_axis) || !ok(time_axis) || batch_axis == time_axis {
        return Err(ctx.invalid(format!(
            "batch_axis {batch_axis} and time_axis {time_axis} must be 0 and 1 of an input of rank 2 or more"
        )));
    }
    let (batch_axis, time_axis) = (batch_axis as usize, time_axis as usize);
    let steps = fixed_dim(ctx, x, time_axis, "ReverseSequence")?;
    let t = iota(ctx, "time", steps, rank, time_axis)?;
    let mut lens_shape = vec![1; rank];
    lens_shape[batch_axis] = -1;
    let lens = ctx.cast("lengths i64", lens, DataType::I64)?;
    let lens = ctx.reshape("lengths", lens, lens_shape)?;
    let inside = binary(ctx, "reversed part", E::Less, t, lens)?;
    let step = ctx.const_i64("one", &[1])?;
    let last = binary(ctx, "last step", E::Sub, lens, step)?;
    let mirrored = binary(ctx, "mirrored step", E::Sub, last, t)?;
    let index = ctx.add("index", LayerKind::Select, &[inside, mirrored, t])?;
    let shape = ctx.shape_of("shape", x)?;
    let index = ctx.add("index expanded", LayerKind::Expand, &[index, shape])?;
    one(ctx.add("", LayerKind::Gather { mode: GatherMode::Elements { axis: time_axis } }, &[x, index])?)
}

/// The block size and the fixed C, H, W of an N×C×H×W input.
fn block_and_dims(ctx: &NodeContext, x: TensorId) -> Result<(i64, [i64; 3]), ImportError> {
    let block = ctx.attrs.required_int("blocksize")?;
    if !(1..=i64::from(i32::MAX)).contains(&block) {
        return Err(ctx.invalid(format!("blocksize must be in 1..={}, got {block}", i32::MAX)));
    }
    let dims = ctx.dims(x);
    if dims.len() != 4 {
        return Err(ctx.invalid(format!("{} needs an N×C×H×W input, got rank {}", ctx.op_type(), dims.len())));
    }
    let fixed =
        |i: usize| dims[i].fixed().map(|d| d as i64).ok_or_else(|| ctx.unsupported(format!("a dynamic dim {i}")));
    Ok((block, [fixed(1)?, fixed(2)?, fixed(3)?]))
}

/// Reshape to `split`, transpose by `perm`, reshape to `merged` (`0` keeps N).
fn regroup(
    ctx: &mut NodeContext,
    x: TensorId,
    split: Vec<i64>,
    perm: Vec<usize>,
    merged: Vec<i64>,
) -> Result<Vec<TensorId>, ImportError> {
    let params =
        ShuffleParams { reshape: Some(split), second_transpose: perm, zero_is_placeholder: true, ..Default::default() };
    let moved = ctx.shuffle("regroup", x, params)?;
    one(ctx.reshape("", moved, merged)?)
}

fn space_to_depth(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let (b, [c, h, w]) = block_and_dims(ctx, x)?;
    if h % b != 0 || w % b != 0 {
        return Err(ctx.invalid(format!("H={h} and W={w} must be multiples of blocksize {b}")));
    }
    let split = vec![0, c, h / b, b, w / b, b];
    let deeper = c.checked_mul(b * b).ok_or_else(|| ctx.invalid(format!("C={c} × blocksize² overflows")))?;
    let out = vec![0, deeper, h / b, w / b];
    // Opset 28 added CRD, the inverse of DepthToSpace's CRD (channel-major blocks).
    let mode = if ctx.version >= 28 { ctx.attrs.string("mode", "DCR")? } else { "DCR" };
    match mode {
        "DCR" => regroup(ctx, x, split, vec![0, 3, 5, 1, 2, 4], out),
        "CRD" => regroup(ctx, x, split, vec![0, 1, 3, 5, 2, 4], out),
        other => Err(ctx.invalid(format!("mode must be DCR or CRD, got `{other}`"))),
    }
}

/// DCR (default) takes the block from the leading channels, CRD from the trailing ones.
fn depth_to_space(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let (b, [c, h, w]) = block_and_dims(ctx, x)?;
    if c % (b * b) != 0 {
        return Err(ctx.invalid(format!("C={c} must be a multiple of blocksize² = {}", b * b)));
    }
    let grown = |d: i64| d.checked_mul(b).ok_or_else(|| ctx.invalid(format!("{d} × blocksize {b} overflows")));
    let out = vec![0, c / (b * b), grown(h)?, grown(w)?];
    match ctx.attrs.string("mode", "DCR")? {
        "DCR" => regroup(ctx, x, vec![0, b, b, c / (b * b), h, w], vec![0, 3, 4, 1, 5, 2], out),
        "CRD" => regroup(ctx, x, vec![0, c / (b * b), b, b, h, w], vec![0, 1, 4, 2, 5, 3], out),
        other => Err(ctx.invalid(format!("mode must be DCR or CRD, got `{other}`"))),
    }
}

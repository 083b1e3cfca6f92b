//! CenterCropPad, decomposed onto Slice (axes to shrink) and Padding (axes to grow); the
//! target shape may be computed at run time, so the offsets are integer arithmetic layers
//! (they fold to constants when the shapes are known).

use super::build::{binary, with_scalar};
use super::{one, Registry};
use crate::context::NodeContext;
use crate::error::ImportError;
use kiln::{DataType, ElementwiseOp as Op, GatherMode, LayerKind, PaddingMode, TensorId};

pub(super) fn register(r: &mut Registry) {
    r.add("CenterCropPad", &[18], center_crop_pad);
}

/// Each listed axis becomes its target length, centered: a crop of `d` cells drops `⌊d/2⌋`
/// before and the rest after; a pad of `d` adds `⌊d/2⌋` zeros before and the rest after.
fn center_crop_pad(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let rank = ctx.rank(x);
    let axes = match ctx.attrs.ints("axes")? {
        Some(a) => ctx.axes(a, rank)?,
        None => (0..rank).collect(),
    };
    let axes_i64: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
    let target = ctx.input(1)?;
    let target = ctx.cast("target i64", target, DataType::I64)?;
    let shape = ctx.shape_of("input shape", x)?;
    let axes_t = ctx.const_i64("axes", &axes_i64)?;
    let lengths = ctx.add("lengths", LayerKind::Gather { mode: GatherMode::Default { axis: 0 } }, &[shape, axes_t])?;
    let zero = ctx.const_i64("zero", &[0])?;
    // Crop: start ⌊max(L − T, 0) / 2⌋, end start + min(L, T).
    let excess = binary(ctx, "excess", Op::Sub, lengths, target)?;
    let excess = binary(ctx, "crop", Op::Max, excess, zero)?;
    let starts = with_scalar(ctx, "crop starts", Op::FloorDiv, excess, 2.0)?;
    let kept = binary(ctx, "kept", Op::Min, lengths, target)?;
    let ends = binary(ctx, "crop ends", Op::Sum, starts, kept)?;
    let cropped = ctx.add("crop", LayerKind::Slice, &[x, starts, ends, axes_t])?;
    // Pad: before ⌊max(T − L, 0) / 2⌋, after the rest; other axes get 0 (the appended zero).
    let missing = binary(ctx, "missing", Op::Sub, target, lengths)?;
    let missing = binary(ctx, "pad", Op::Max, missing, zero)?;
    let before = with_scalar(ctx, "pads before", Op::FloorDiv, missing, 2.0)?;
    let after = binary(ctx, "pads after", Op::Sub, missing, before)?;
    let table = ctx.add("pads table", LayerKind::Concatenation { axis: 0 }, &[before, after, zero])?;
    let n = axes.len() as i64;
    let mut index = vec![2 * n; 2 * rank];
    for (k, &a) in axes.iter().enumerate() {
        index[a] = k as i64;
        index[rank + a] = n + k as i64;
    }
    let index = ctx.const_i64("pads index", &index)?;
    let pads = ctx.add("pads", LayerKind::Gather { mode: GatherMode::Default { axis: 0 } }, &[table, index])?;
    one(ctx.add("", LayerKind::Padding { mode: PaddingMode::Constant }, &[cropped, pads])?)
}

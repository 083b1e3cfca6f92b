//! CenterCropPad, decomposed onto Slice (axes to shrink) and Padding (axes to grow).

use super::{one, Registry};
use crate::context::NodeContext;
use crate::error::ImportError;
use kiln::{LayerKind, PaddingMode, TensorId};

pub(super) fn register(r: &mut Registry) {
    r.add("CenterCropPad", &[18], center_crop_pad);
}

/// Each listed axis becomes the target length, centered: a crop drops `⌊d/2⌋` cells before
/// and the rest after; a pad adds `⌊d/2⌋` zeros before and the rest after (the reference's
/// split). Needs the target shape as a constant and the affected input dims fixed.
fn center_crop_pad(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let rank = ctx.rank(x);
    let shape = ctx.required_const_ints(1, "target shape")?;
    let axes = match ctx.attrs.ints("axes")? {
        Some(a) => ctx.axes(a, rank)?,
        None => (0..rank).collect(),
    };
    if axes.len() != shape.len() {
        return Err(ctx.invalid(format!("{} target lengths for {} axes", shape.len(), axes.len())));
    }
    let (mut crop_axes, mut starts, mut ends) = (Vec::new(), Vec::new(), Vec::new());
    let mut pads = vec![0i64; 2 * rank];
    for (&axis, &target) in axes.iter().zip(&shape) {
        let Ok(target) = usize::try_from(target) else {
            return Err(ctx.invalid(format!("target length {target} of axis {axis} is negative")));
        };
        let dims = ctx.dims(x);
        let len = dims[axis].fixed().ok_or_else(|| ctx.unsupported(format!("a dynamic length on axis {axis}")))?;
        if target < len {
            let start = (len - target) / 2;
            crop_axes.push(axis as i64);
            starts.push(start as i64);
            ends.push((start + target) as i64);
        } else if target > len {
            let before = (target - len) / 2;
            pads[axis] = before as i64;
            pads[rank + axis] = (target - len - before) as i64;
        }
    }
    let mut y = x;
    if !crop_axes.is_empty() {
        let starts = ctx.const_i64("crop starts", &starts)?;
        let ends = ctx.const_i64("crop ends", &ends)?;
        let crop_axes = ctx.const_i64("crop axes", &crop_axes)?;
        y = ctx.add("crop", LayerKind::Slice, &[y, starts, ends, crop_axes])?;
    }
    if pads.iter().any(|&p| p != 0) {
        let pads = ctx.const_i64("pads", &pads)?;
        y = ctx.add("pad", LayerKind::Padding { mode: PaddingMode::Constant }, &[y, pads])?;
    }
    if y == x {
        y = ctx.add("", LayerKind::Identity, &[x])?;
    }
    one(y)
}

//! RoiAlign.

use super::{one, Registry};
use crate::context::NodeContext;
use crate::error::ImportError;
use kiln::{LayerKind, TensorId};

pub(super) fn register(r: &mut Registry) {
    r.add("RoiAlign", &[10, 16, 22], roi_align);
}

/// RoiAlign: opset 16 added `coordinate_transformation_mode`, whose default `half_pixel`
/// differs from the earlier (output_half_pixel) behaviour.
fn roi_align(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let (x, rois, batch_indices) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
    let max = match ctx.attrs.string("mode", "avg")? {
        "avg" => false,
        "max" => true,
        other => return Err(ctx.invalid(format!("unknown mode `{other}` (expected avg or max)"))),
    };
    let default_transform = if ctx.version >= 16 { "half_pixel" } else { "output_half_pixel" };
    let half_pixel = match ctx.attrs.string("coordinate_transformation_mode", default_transform)? {
        "half_pixel" => true,
        "output_half_pixel" => false,
        other => return Err(ctx.invalid(format!("unknown coordinate_transformation_mode `{other}`"))),
    };
    let positive = |ctx: &NodeContext, name: &str, default: i64, min: i64| -> Result<usize, ImportError> {
        let v = ctx.attrs.int(name, default)?;
        usize::try_from(v)
            .ok()
            .filter(|&v| v as i64 >= min)
            .ok_or_else(|| ctx.invalid(format!("`{name}` must be at least {min}, got {v}")))
    };
    let output_size = [positive(ctx, "output_height", 1, 1)?, positive(ctx, "output_width", 1, 1)?];
    let sampling_ratio = positive(ctx, "sampling_ratio", 0, 0)?;
    let spatial_scale = ctx.attrs.float("spatial_scale", 1.0)?;
    let kind = LayerKind::RoiAlign { max, output_size, sampling_ratio, spatial_scale, half_pixel };
    one(ctx.add("", kind, &[x, rois, batch_indices])?)
}

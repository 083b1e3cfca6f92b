//! GridSample, BitCast, NonMaxSuppression and Unique: ops with kernels of their own.

use super::{one, Registry};
use crate::context::NodeContext;
use crate::error::ImportError;
use crate::tensor::dtype_from_onnx;
use kiln::{GridSampleMode, GridSamplePadding, GridSampleParams, LayerKind, TensorId};

pub(super) fn register(r: &mut Registry) {
    r.add("GridSample", &[16, 20, 22], grid_sample);
    r.add("BitCast", &[26], bit_cast);
    r.add("NonMaxSuppression", &[10, 11], non_max_suppression);
    r.add("Unique", &[11, 28], unique);
}

fn grid_sample(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let (x, grid) = (ctx.input(0)?, ctx.input(1)?);
    // Opset 16 named the modes after the 2-D case it was limited to.
    let legacy = ctx.version < 20;
    let mode = match ctx.attrs.string("mode", if legacy { "bilinear" } else { "linear" })? {
        "nearest" => GridSampleMode::Nearest,
        "bilinear" if legacy => GridSampleMode::Linear,
        "bicubic" if legacy => GridSampleMode::Cubic,
        "linear" if !legacy => GridSampleMode::Linear,
        "cubic" if !legacy => GridSampleMode::Cubic,
        other => return Err(ctx.invalid(format!("unknown mode `{other}`"))),
    };
    let padding = match ctx.attrs.string("padding_mode", "zeros")? {
        "zeros" => GridSamplePadding::Zeros,
        "border" => GridSamplePadding::Border,
        "reflection" => GridSamplePadding::Reflection,
        other => return Err(ctx.invalid(format!("unknown padding_mode `{other}`"))),
    };
    let align_corners = ctx.attrs.flag("align_corners", false)?;
    let params = GridSampleParams { mode, padding, align_corners };
    one(ctx.add("", LayerKind::GridSample(params), &[x, grid])?)
}

fn bit_cast(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let code = ctx.attrs.required_int("to")?;
    let code = i32::try_from(code).map_err(|_| ctx.invalid(format!("unknown type code {code}")))?;
    let to = dtype_from_onnx(code).map_err(|e| ctx.invalid(e))?;
    one(ctx.add("", LayerKind::BitCast { to }, &[x])?)
}

fn non_max_suppression(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let center_point_box = ctx.attrs.flag("center_point_box", false)?;
    let inputs = (0..5).map(|i| ctx.opt_input(i)).collect();
    one(ctx.add_opt("", LayerKind::NonMaxSuppression { center_point_box }, inputs)?)
}

fn unique(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let axis = match ctx.attrs.opt_int("axis")? {
        Some(a) => Some(ctx.axis(a, ctx.rank(x))?),
        None => None,
    };
    let sorted = ctx.attrs.flag("sorted", true)?;
    ctx.add_layer_outputs("", LayerKind::Unique { axis, sorted }, vec![Some(x)])
}

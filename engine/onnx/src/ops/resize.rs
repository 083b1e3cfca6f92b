//! Resize (opsets 10, 11, 13, 18, 19) and its predecessor Upsample.

use super::{one, Registry};
use crate::context::NodeContext;
use crate::error::ImportError;
use kiln::{CoordinateTransformation, HostTensor, LayerKind, NearestRounding, ResizeMode, ResizeParams, TensorId};

pub(super) fn register(r: &mut Registry) {
    r.add("Resize", &[10, 11, 13, 18, 19], resize);
    r.add("Upsample", &[7, 9, 10], upsample);
}

fn mode(ctx: &NodeContext, allow_cubic: bool) -> Result<ResizeMode, ImportError> {
    match ctx.attrs.string("mode", "nearest")? {
        "nearest" => Ok(ResizeMode::Nearest),
        "linear" | "bilinear" => Ok(ResizeMode::Linear),
        "cubic" if allow_cubic => Ok(ResizeMode::Cubic),
        other => Err(ctx.invalid(format!("unknown mode `{other}`"))),
    }
}

/// Resize-10 and Upsample had no coordinate attributes: they index `out / scale` and take
/// the floor for nearest neighbours.
fn legacy_params(mode: ResizeMode) -> ResizeParams {
    ResizeParams {
        mode,
        coordinate_transformation: CoordinateTransformation::Asymmetric,
        nearest_rounding: NearestRounding::Floor,
        cubic_coeff_a: -0.75,
        exclude_outside: false,
        extrapolation_value: 0.0,
        axes: None,
    }
}

/// An optional parameter input; a constant with no elements counts as absent (opset 11
/// requires the scales input even when sizes are given, and passes an empty tensor).
fn present(ctx: &NodeContext, i: usize) -> Option<TensorId> {
    ctx.opt_input(i).filter(|&t| ctx.fixed_dims(t).is_none_or(|d| d.iter().product::<usize>() > 0))
}

fn resize(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    if ctx.version < 11 {
        let params = legacy_params(mode(ctx, false)?);
        let scales = ctx.input(1)?;
        return one(ctx.add_opt("", LayerKind::Resize(params), vec![Some(x), None, Some(scales), None])?);
    }
    let coordinate_transformation = match ctx.attrs.string("coordinate_transformation_mode", "half_pixel")? {
        "half_pixel" => CoordinateTransformation::HalfPixel,
        "half_pixel_symmetric" if ctx.version >= 19 => CoordinateTransformation::HalfPixelSymmetric,
        "pytorch_half_pixel" => CoordinateTransformation::PytorchHalfPixel,
        "align_corners" => CoordinateTransformation::AlignCorners,
        "asymmetric" => CoordinateTransformation::Asymmetric,
        "tf_crop_and_resize" => CoordinateTransformation::TfCropAndResize,
        "tf_half_pixel_for_nn" if ctx.version == 11 => {
            return Err(ctx.unsupported("coordinate_transformation_mode `tf_half_pixel_for_nn`"))
        }
        other => return Err(ctx.invalid(format!("unknown coordinate_transformation_mode `{other}`"))),
    };
    let nearest_rounding = match ctx.attrs.string("nearest_mode", "round_prefer_floor")? {
        "round_prefer_floor" => NearestRounding::RoundPreferFloor,
        "round_prefer_ceil" => NearestRounding::RoundPreferCeil,
        "floor" => NearestRounding::Floor,
        "ceil" => NearestRounding::Ceil,
        other => return Err(ctx.invalid(format!("unknown nearest_mode `{other}`"))),
    };
    let axes = if ctx.version >= 18 {
        if ctx.attrs.flag("antialias", false)? {
            return Err(ctx.unsupported("antialias=1"));
        }
        let policy = ctx.attrs.string("keep_aspect_ratio_policy", "stretch")?;
        if policy != "stretch" {
            return Err(ctx.unsupported(format!("keep_aspect_ratio_policy `{policy}`")));
        }
        match ctx.attrs.ints("axes")? {
            Some(a) => Some(ctx.axes(a, ctx.rank(x))?),
            None => None,
        }
    } else {
        None
    };
    let params = ResizeParams {
        mode: mode(ctx, true)?,
        coordinate_transformation,
        nearest_rounding,
        cubic_coeff_a: ctx.attrs.float("cubic_coeff_a", -0.75)?,
        exclude_outside: ctx.attrs.flag("exclude_outside", false)?,
        extrapolation_value: ctx.attrs.float("extrapolation_value", 0.0)?,
        axes,
    };
    let roi = present(ctx, 1).filter(|_| coordinate_transformation == CoordinateTransformation::TfCropAndResize);
    let (scales, sizes) = (present(ctx, 2), present(ctx, 3));
    if scales.is_some() == sizes.is_some() {
        return Err(ctx.invalid("Resize needs exactly one of scales and sizes"));
    }
    one(ctx.add_opt("", LayerKind::Resize(params), vec![Some(x), roi, scales, sizes])?)
}

/// Upsample: scales are an attribute in opset 7 and an input in 9; removed in 10.
fn upsample(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    if ctx.version >= 10 {
        return Err(ctx.invalid("Upsample is deprecated from opset 10; use Resize"));
    }
    let x = ctx.input(0)?;
    let params = legacy_params(mode(ctx, false)?);
    let scales = if ctx.version >= 9 {
        ctx.input(1)?
    } else {
        let values = ctx.attrs.floats("scales")?.ok_or_else(|| ctx.invalid("attribute `scales` is required"))?.to_vec();
        let value = HostTensor::from_f32(vec![values.len()], values).expect("1-D length matches");
        ctx.constant("scales", value)?
    };
    one(ctx.add_opt("", LayerKind::Resize(params), vec![Some(x), None, Some(scales), None])?)
}

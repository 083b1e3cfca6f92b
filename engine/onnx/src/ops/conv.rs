//! Conv and ConvTranspose, and the window attributes (strides, dilations, pads, auto_pad)
//! they share with pooling.

use super::{one, Registry};
use crate::context::NodeContext;
use crate::error::ImportError;
use kiln::{ConvolutionParams, DeconvolutionParams, LayerKind, TensorId};

pub(super) fn register(r: &mut Registry) {
    r.add("Conv", &[1, 11, 22], conv);
    r.add("ConvTranspose", &[1, 11, 22], conv_transpose);
}

/// A per-spatial-dim list attribute (`strides`, `dilations`, …): `default` when absent,
/// each entry at least `min`.
pub(super) fn spatial_list(
    ctx: &NodeContext,
    name: &str,
    spatial: usize,
    default: usize,
    min: i64,
) -> Result<Vec<usize>, ImportError> {
    let Some(values) = ctx.attrs.ints(name)? else {
        return Ok(vec![default; spatial]);
    };
    if values.len() != spatial {
        return Err(
            ctx.invalid(format!("`{name}` has {} entries but the input has {spatial} spatial dims", values.len()))
        );
    }
    values
        .iter()
        .map(|&v| {
            if v < min || v > MAX_WINDOW_VALUE {
                Err(ctx.invalid(format!("`{name}` entries must be in {min}..={MAX_WINDOW_VALUE}, got {values:?}")))
            } else {
                Ok(v as usize)
            }
        })
        .collect()
}

/// Bound on kernel sizes, strides, dilations and pads, so that window arithmetic cannot
/// overflow on hostile attribute values.
const MAX_WINDOW_VALUE: i64 = i32::MAX as i64;

/// The `N×C×spatial` input's spatial rank.
pub(super) fn spatial_rank(ctx: &NodeContext, x: TensorId) -> Result<usize, ImportError> {
    let rank = ctx.rank(x);
    if rank < 3 {
        return Err(ctx.invalid(format!("{} needs an N×C×spatial input, got rank {rank}", ctx.op_type())));
    }
    Ok(rank - 2)
}

/// The kernel's spatial size: from the weights' fixed dims, checked against `kernel_shape`.
pub(super) fn kernel_size(ctx: &NodeContext, w: TensorId, spatial: usize) -> Result<Vec<usize>, ImportError> {
    let from_attr =
        ctx.attrs.has("kernel_shape").then(|| spatial_list(ctx, "kernel_shape", spatial, 1, 1)).transpose()?;
    let weight_dims = ctx.dims(w);
    if weight_dims.len() != spatial + 2 {
        return Err(ctx
            .invalid(format!("the weights have rank {} but the input has {spatial} spatial dims", weight_dims.len())));
    }
    let from_weights: Option<Vec<usize>> = weight_dims.iter().skip(2).map(|d| d.fixed()).collect();
    if from_weights.as_ref().is_some_and(|k| k.contains(&0)) {
        return Err(ctx.invalid(format!("the weights have an empty kernel dim: {weight_dims:?}")));
    }
    match (from_attr, from_weights) {
        (Some(a), Some(w)) if a != w => {
            Err(ctx.invalid(format!("kernel_shape {a:?} disagrees with the weights' spatial dims {w:?}")))
        }
        (_, Some(w)) => Ok(w),
        (Some(a), None) => Ok(a),
        (None, None) => Err(ctx.invalid("the kernel size is unknown: give kernel_shape or fixed-size weights")),
    }
}

/// Fixed spatial dims of `x`, needed to place SAME padding.
fn fixed_spatial(ctx: &NodeContext, x: TensorId, why: &str) -> Result<Vec<usize>, ImportError> {
    ctx.dims(x)
        .iter()
        .skip(2)
        .map(|d| d.fixed())
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| ctx.unsupported(format!("{why} with dynamic spatial dims")))
}

/// Begin/end padding of a sliding window from `auto_pad` and `pads`.
pub(super) fn window_padding(
    ctx: &NodeContext,
    x: TensorId,
    kernel: &[usize],
    strides: &[usize],
    dilations: &[usize],
) -> Result<(Vec<usize>, Vec<usize>), ImportError> {
    let spatial = kernel.len();
    match ctx.attrs.string("auto_pad", "NOTSET")? {
        "NOTSET" => {
            let pads = spatial_list_pairs(ctx, "pads", spatial)?;
            Ok((pads[..spatial].to_vec(), pads[spatial..].to_vec()))
        }
        "VALID" => Ok((vec![0; spatial], vec![0; spatial])),
        mode @ ("SAME_UPPER" | "SAME_LOWER") => {
            let input = fixed_spatial(ctx, x, &format!("auto_pad {mode}"))?;
            let (mut pre, mut post) = (Vec::new(), Vec::new());
            for i in 0..spatial {
                let out = input[i].div_ceil(strides[i]);
                let span = dilations[i] * (kernel[i] - 1) + 1;
                let total = (out.max(1) - 1).saturating_mul(strides[i]).saturating_add(span).saturating_sub(input[i]);
                let small = total / 2;
                let (begin, end) = if mode == "SAME_UPPER" { (small, total - small) } else { (total - small, small) };
                pre.push(begin);
                post.push(end);
            }
            Ok((pre, post))
        }
        other => Err(ctx.invalid(format!("unknown auto_pad `{other}`"))),
    }
}

/// `pads`-style attribute: begins then ends, non-negative; zeros when absent.
fn spatial_list_pairs(ctx: &NodeContext, name: &str, spatial: usize) -> Result<Vec<usize>, ImportError> {
    let Some(values) = ctx.attrs.ints(name)? else {
        return Ok(vec![0; 2 * spatial]);
    };
    if values.len() != 2 * spatial {
        return Err(ctx.invalid(format!(
            "`{name}` has {} entries, expected {} (begins then ends)",
            values.len(),
            2 * spatial
        )));
    }
    values
        .iter()
        .map(|&v| {
            if (0..=MAX_WINDOW_VALUE).contains(&v) {
                Ok(v as usize)
            } else {
                Err(ctx.invalid(format!("`{name}` entries must be in 0..={MAX_WINDOW_VALUE}, got {values:?}")))
            }
        })
        .collect()
}

fn conv(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let w = ctx.input(1)?;
    let bias = ctx.opt_input(2);
    let spatial = spatial_rank(ctx, x)?;
    let kernel = kernel_size(ctx, w, spatial)?;
    let strides = spatial_list(ctx, "strides", spatial, 1, 1)?;
    let dilations = spatial_list(ctx, "dilations", spatial, 1, 1)?;
    let groups = group_count(ctx)?;
    let (pre_padding, post_padding) = window_padding(ctx, x, &kernel, &strides, &dilations)?;
    let params = ConvolutionParams { groups, strides, dilations, pre_padding, post_padding };
    one(ctx.add_opt("", LayerKind::Convolution(params), vec![Some(x), Some(w), bias])?)
}

fn group_count(ctx: &NodeContext) -> Result<usize, ImportError> {
    let group = ctx.attrs.int("group", 1)?;
    usize::try_from(group)
        .ok()
        .filter(|&g| g >= 1)
        .ok_or_else(|| ctx.invalid(format!("group must be at least 1, got {group}")))
}

/// ConvTranspose. Padding crops the full output; `output_shape` (or SAME auto_pad, whose
/// target is `input × stride`) determines it: the crop is split evenly, the odd cell going
/// to the end for SAME_UPPER and to the start otherwise (the ONNX reference rule).
fn conv_transpose(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let w = ctx.input(1)?;
    let bias = ctx.opt_input(2);
    let spatial = spatial_rank(ctx, x)?;
    let kernel = kernel_size(ctx, w, spatial)?;
    let strides = spatial_list(ctx, "strides", spatial, 1, 1)?;
    let dilations = spatial_list(ctx, "dilations", spatial, 1, 1)?;
    let mut output_padding = spatial_list(ctx, "output_padding", spatial, 0, 0)?;
    let groups = group_count(ctx)?;
    let auto_pad = ctx.attrs.string("auto_pad", "NOTSET")?;
    let output_shape = match ctx.attrs.ints("output_shape")? {
        None => None,
        Some(s) if s.len() == spatial || s.len() == spatial + 2 => Some(s[s.len() - spatial..].to_vec()),
        Some(s) => return Err(ctx.invalid(format!("output_shape {s:?} does not match {spatial} spatial dims"))),
    };
    let same = matches!(auto_pad, "SAME_UPPER" | "SAME_LOWER");
    let (pre_padding, post_padding) = if output_shape.is_some() || same {
        let input = fixed_spatial(ctx, x, "output_shape or SAME auto_pad")?;
        let (mut pre, mut post) = (Vec::new(), Vec::new());
        for i in 0..spatial {
            let target = match &output_shape {
                Some(s) => {
                    usize::try_from(s[i]).map_err(|_| ctx.invalid(format!("output_shape {s:?} has a negative dim")))?
                }
                None => input[i].saturating_mul(strides[i]),
            };
            let full = input[i]
                .saturating_sub(1)
                .saturating_mul(strides[i])
                .saturating_add(output_padding[i] + dilations[i] * (kernel[i] - 1) + 1);
            if target > full {
                // A target beyond the full output extends it at the end.
                output_padding[i] += target - full;
            }
            let total = full.saturating_sub(target);
            let small = total / 2;
            let (begin, end) = if auto_pad == "SAME_UPPER" { (small, total - small) } else { (total - small, small) };
            pre.push(begin);
            post.push(end);
        }
        (pre, post)
    } else {
        window_padding(ctx, x, &kernel, &strides, &dilations)?
    };
    let params = DeconvolutionParams { groups, strides, dilations, pre_padding, post_padding, output_padding };
    one(ctx.add_opt("", LayerKind::Deconvolution(params), vec![Some(x), Some(w), bias])?)
}

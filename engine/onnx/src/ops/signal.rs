//! DFT (STFT is a context-dependent body over it, see `context_function`), Col2Im and Det.

use super::{one, Registry};
use crate::context::NodeContext;
use crate::error::ImportError;
use kiln::{DataType, HostTensor, LayerKind, TensorId};

pub(super) fn register(r: &mut Registry) {
    r.add("DFT", &[17, 20], dft);
    r.add("Col2Im", &[18], col2im);
    r.add("Det", &[11, 22], determinant);
}

/// DFT: the axis is an attribute before opset 20 and an optional input (default -2) since.
fn dft(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let inverse = ctx.attrs.flag("inverse", false)?;
    let onesided = ctx.attrs.flag("onesided", false)?;
    let length = ctx.opt_input(1);
    let axis = match (ctx.version >= 20, ctx.opt_input(2)) {
        (true, Some(axis)) => axis,
        (true, None) => ctx.constant("axis", axis_scalar(-2))?,
        (false, _) => {
            let axis = ctx.attrs.int("axis", 1)?;
            ctx.constant("axis", axis_scalar(axis))?
        }
    };
    if !ctx.dtype(x).is_float() {
        return Err(ctx.invalid(format!("the signal must be a floating-point tensor, got {}", ctx.dtype(x))));
    }
    let length = match length {
        Some(t) => Some(ctx.cast("length i64", t, DataType::I64)?),
        None => None,
    };
    let axis = ctx.cast("axis i64", axis, DataType::I64)?;
    one(ctx.add_opt("", LayerKind::Dft { inverse, onesided }, vec![Some(x), Some(axis), length])?)
}

fn axis_scalar(axis: i64) -> HostTensor {
    HostTensor::from_i64(vec![], vec![axis]).expect("a 0-D tensor holds one value")
}

/// Col2Im: image and block shapes may be known only at run time; the attributes fix the
/// number of spatial dims.
fn col2im(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let image_shape = ctx.input(1)?;
    let block_shape = ctx.input(2)?;
    let spatial = match ctx.fixed_dims(image_shape).as_deref() {
        Some([n]) => *n,
        _ => return Err(ctx.invalid("image_shape must be a 1-D tensor of fixed length")),
    };
    let list = |ctx: &NodeContext, name: &str, len: usize, default: usize| -> Result<Vec<usize>, ImportError> {
        match ctx.attrs.ints(name)? {
            None => Ok(vec![default; len]),
            Some(v) if v.len() == len => v
                .iter()
                .map(|&d| usize::try_from(d).map_err(|_| ctx.invalid(format!("`{name}` holds the negative value {d}"))))
                .collect(),
            Some(v) => Err(ctx.invalid(format!("`{name}` must hold {len} values, got {}", v.len()))),
        }
    };
    let strides = list(ctx, "strides", spatial, 1)?;
    let dilations = list(ctx, "dilations", spatial, 1)?;
    let pads = list(ctx, "pads", 2 * spatial, 0)?;
    let image_shape = ctx.cast("image_shape i64", image_shape, DataType::I64)?;
    let block_shape = ctx.cast("block_shape i64", block_shape, DataType::I64)?;
    one(ctx.add("", LayerKind::Col2Im { strides, dilations, pads }, &[x, image_shape, block_shape])?)
}

fn determinant(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    one(ctx.add("", LayerKind::Determinant, &[x])?)
}

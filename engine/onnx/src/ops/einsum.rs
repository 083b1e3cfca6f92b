//! Einsum and OneHot, onto the kiln layers of the same names.

use super::{one, Registry};
use crate::context::NodeContext;
use crate::error::ImportError;
use kiln::{DataType, LayerKind, TensorId};

pub(super) fn register(r: &mut Registry) {
    r.add("Einsum", &[12, 28], einsum);
    r.add("OneHot", &[9, 11, 28], one_hot);
}

fn einsum(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let equation = ctx.attrs.opt_string("equation")?.ok_or_else(|| ctx.invalid("Einsum needs an equation"))?;
    let equation = equation.to_string();
    let inputs = ctx.present_inputs();
    if inputs.is_empty() {
        return Err(ctx.invalid("Einsum needs at least one input"));
    }
    one(ctx.add("", LayerKind::Einsum { equation }, &inputs)?)
}

/// ONNX order `[indices, depth, values]`; non-integer indices and depth are converted to
/// i64 (truncating), as the spec asks.
fn one_hot(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let mut indices = ctx.input(0)?;
    let mut depth = ctx.input(1)?;
    let values = ctx.input(2)?;
    if !ctx.dtype(indices).is_index() {
        indices = ctx.cast("indices as i64", indices, DataType::I64)?;
    }
    if !ctx.dtype(depth).is_index() {
        depth = ctx.cast("depth as i64", depth, DataType::I64)?;
    }
    let axis = ctx.attrs.int("axis", -1)?;
    one(ctx.add("", LayerKind::OneHot { axis }, &[indices, values, depth])?)
}

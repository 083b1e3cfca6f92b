//! BitShift, BitwiseAnd/Or/Xor and BitwiseNot, on integer tensors.

use super::build::{binary, unary};
use super::{one, Registry};
use crate::context::NodeContext;
use crate::error::ImportError;
use kiln::{ElementwiseOp, TensorId, UnaryOp};

pub(super) fn register(r: &mut Registry) {
    r.add("BitShift", &[11], bit_shift);
    for op in ["BitwiseAnd", "BitwiseOr", "BitwiseXor"] {
        r.add(op, &[18], bitwise);
    }
    r.add("BitwiseNot", &[18], bitwise_not);
}

fn integer_input(ctx: &NodeContext, i: usize) -> Result<TensorId, ImportError> {
    let t = ctx.input(i)?;
    let dtype = ctx.dtype(t);
    if !dtype.is_integer() {
        return Err(ctx.unsupported(format!("{} on {dtype} (integers only)", ctx.op_type())));
    }
    Ok(t)
}

fn bit_shift(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let (x, amount) = (integer_input(ctx, 0)?, integer_input(ctx, 1)?);
    let op = match ctx.attrs.opt_string("direction")? {
        Some("LEFT") => ElementwiseOp::ShiftLeft,
        Some("RIGHT") => ElementwiseOp::ShiftRight,
        other => return Err(ctx.invalid(format!("direction must be LEFT or RIGHT, got {other:?}"))),
    };
    one(binary(ctx, "", op, x, amount)?)
}

fn bitwise(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let (a, b) = (integer_input(ctx, 0)?, integer_input(ctx, 1)?);
    let op = match ctx.op_type() {
        "BitwiseAnd" => ElementwiseOp::BitAnd,
        "BitwiseOr" => ElementwiseOp::BitOr,
        _ => ElementwiseOp::BitXor,
    };
    one(binary(ctx, "", op, a, b)?)
}

/// kiln's Not is bitwise on integers.
fn bitwise_not(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = integer_input(ctx, 0)?;
    one(unary(ctx, "", UnaryOp::Not, x)?)
}

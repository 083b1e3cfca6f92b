//! Element-wise math functions that map to one kiln Unary layer.

use super::{one, Registry};
use crate::context::NodeContext;
use crate::error::ImportError;
use kiln::{LayerKind, TensorId, UnaryOp};

pub(super) fn register(r: &mut Registry) {
    for op in ["Neg", "Sqrt", "Exp", "Log", "Abs", "Reciprocal", "Floor", "Ceil"] {
        r.add(op, &[1, 6, 13], unary);
    }
    for op in ["Sin", "Cos", "Tan", "Asin", "Acos", "Atan"] {
        r.add(op, &[7, 22], unary);
    }
    for op in ["Sinh", "Cosh", "Asinh", "Acosh", "Atanh"] {
        r.add(op, &[9, 22], unary);
    }
    r.add("Erf", &[9, 13], unary);
    r.add("Sign", &[9, 13], unary);
    r.add("Round", &[11, 22], unary);
    r.add("Not", &[1], unary);
    r.add("IsNaN", &[9, 13, 20], unary);
    r.add("IsInf", &[10, 20], unary);
}

fn unary(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let op = match ctx.op_type() {
        "Neg" => UnaryOp::Neg,
        "Sqrt" => UnaryOp::Sqrt,
        "Exp" => UnaryOp::Exp,
        "Log" => UnaryOp::Log,
        "Abs" => UnaryOp::Abs,
        "Reciprocal" => UnaryOp::Recip,
        "Floor" => UnaryOp::Floor,
        "Ceil" => UnaryOp::Ceil,
        "Sin" => UnaryOp::Sin,
        "Cos" => UnaryOp::Cos,
        "Tan" => UnaryOp::Tan,
        "Asin" => UnaryOp::Asin,
        "Acos" => UnaryOp::Acos,
        "Atan" => UnaryOp::Atan,
        "Sinh" => UnaryOp::Sinh,
        "Cosh" => UnaryOp::Cosh,
        "Asinh" => UnaryOp::Asinh,
        "Acosh" => UnaryOp::Acosh,
        "Atanh" => UnaryOp::Atanh,
        "Erf" => UnaryOp::Erf,
        "Sign" => UnaryOp::Sign,
        "Round" => UnaryOp::Round,
        "Not" => UnaryOp::Not,
        "IsNaN" => UnaryOp::IsNan,
        "IsInf" => UnaryOp::IsInf {
            detect_positive: ctx.attrs.flag("detect_positive", true)?,
            detect_negative: ctx.attrs.flag("detect_negative", true)?,
        },
        other => return Err(ctx.invalid(format!("`{other}` is registered as a unary op but has no mapping"))),
    };
    let x = ctx.input(0)?;
    one(ctx.add("", LayerKind::Unary { op }, &[x])?)
}

//! Arithmetic, comparison and logic (binary and variadic), Gemm and MatMul.

use super::{one, Registry};
use crate::context::NodeContext;
use crate::error::ImportError;
use kiln::{ElementwiseOp, LayerKind, MatrixOp, TensorId};

pub(super) fn register(r: &mut Registry) {
    for op in ["Add", "Sub", "Mul", "Div"] {
        r.add(op, &[1, 6, 7, 13, 14], binary);
    }
    r.add("Pow", &[1, 7, 12, 13, 15], binary);
    r.add("Mod", &[10, 13, 28], binary);
    r.add("Equal", &[1, 7, 11, 13, 19], binary);
    r.add("Less", &[1, 7, 9, 13], binary);
    r.add("Greater", &[1, 7, 9, 13], binary);
    r.add("LessOrEqual", &[12, 16], binary);
    r.add("GreaterOrEqual", &[12, 16], binary);
    for op in ["And", "Or", "Xor"] {
        r.add(op, &[1, 7], binary);
    }
    r.add("Max", &[1, 6, 8, 12, 13], variadic);
    r.add("Min", &[1, 6, 8, 12, 13], variadic);
    r.add("Sum", &[1, 6, 8, 13], variadic);
    r.add("Mean", &[1, 6, 8, 13], variadic);
    r.add("Gemm", &[1, 6, 7, 9, 11, 13], gemm);
    r.add("MatMul", &[1, 9, 13], matmul);
}

fn binary_op(ctx: &NodeContext) -> Result<ElementwiseOp, ImportError> {
    Ok(match ctx.op_type() {
        "Add" | "Sum" | "Mean" => ElementwiseOp::Sum,
        "Sub" => ElementwiseOp::Sub,
        "Mul" => ElementwiseOp::Prod,
        "Div" => ElementwiseOp::Div,
        "Pow" => ElementwiseOp::Pow,
        "Mod" => {
            if ctx.attrs.flag("fmod", false)? {
                ElementwiseOp::Fmod
            } else {
                ElementwiseOp::Mod
            }
        }
        "Equal" => ElementwiseOp::Equal,
        "Less" => ElementwiseOp::Less,
        "Greater" => ElementwiseOp::Greater,
        "LessOrEqual" => ElementwiseOp::LessOrEqual,
        "GreaterOrEqual" => ElementwiseOp::GreaterOrEqual,
        "And" => ElementwiseOp::And,
        "Or" => ElementwiseOp::Or,
        "Xor" => ElementwiseOp::Xor,
        "Max" => ElementwiseOp::Max,
        "Min" => ElementwiseOp::Min,
        other => return Err(ctx.invalid(format!("`{other}` is registered as a binary op but has no mapping"))),
    })
}

/// Before opset 7, `broadcast=1` with `axis` aligned `b` to `a` starting at `axis`; numpy
/// rules align trailing dims, so `b` gets trailing 1s. Without `axis` the rules agree.
fn legacy_broadcast(ctx: &mut NodeContext, a: TensorId, b: TensorId) -> Result<TensorId, ImportError> {
    if ctx.version >= 7 || !ctx.attrs.flag("broadcast", false)? {
        return Ok(b);
    }
    let Some(axis) = ctx.attrs.opt_int("axis")? else {
        return Ok(b);
    };
    let (rank_a, rank_b) = (ctx.rank(a), ctx.rank(b));
    let axis = ctx.axis(axis, rank_a)?;
    if axis + rank_b > rank_a {
        return Err(ctx.invalid(format!("cannot broadcast rank {rank_b} into rank {rank_a} at axis {axis}")));
    }
    let trailing = rank_a - axis - rank_b;
    if trailing == 0 {
        return Ok(b);
    }
    let mut dims = vec![0; rank_b];
    dims.extend(std::iter::repeat_n(1, trailing));
    ctx.reshape("broadcast", b, dims)
}

fn binary(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let op = binary_op(ctx)?;
    let a = ctx.input(0)?;
    let b = ctx.input(1)?;
    let mut b = legacy_broadcast(ctx, a, b)?;
    if op == ElementwiseOp::Pow {
        // From opset 12 the exponent may have its own type; kiln computes in the base type.
        b = ctx.cast("exponent", b, ctx.dtype(a))?;
    }
    one(ctx.add("", LayerKind::Elementwise { op }, &[a, b])?)
}

/// Max, Min, Sum and Mean of any number of inputs, folded pairwise.
fn variadic(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let op = binary_op(ctx)?;
    let inputs = ctx.present_inputs();
    let Some((&first, rest)) = inputs.split_first() else {
        return Err(ctx.invalid(format!("{} needs at least one input", ctx.op_type())));
    };
    let mut acc = first;
    for (i, &x) in rest.iter().enumerate() {
        let part = if i + 1 == rest.len() && ctx.op_type() != "Mean" { String::new() } else { format!("step {i}") };
        acc = ctx.add(&part, LayerKind::Elementwise { op }, &[acc, x])?;
    }
    if ctx.op_type() == "Mean" && inputs.len() > 1 {
        let count = ctx.scalar("count", ctx.dtype(acc), inputs.len() as f64)?;
        acc = ctx.add("", LayerKind::Elementwise { op: ElementwiseOp::Div }, &[acc, count])?;
    }
    one(acc)
}

/// A 0-D factor of `t`'s type; integers accept only whole factors.
fn factor(ctx: &mut NodeContext, part: &str, like: TensorId, value: f32) -> Result<TensorId, ImportError> {
    let dtype = ctx.dtype(like);
    if !dtype.is_float() && value.fract() != 0.0 {
        return Err(ctx.unsupported(format!("a fractional {part} ({value}) on {dtype} tensors")));
    }
    ctx.scalar(part, dtype, value as f64)
}

/// `alpha * op(A) @ op(B) + beta * C`.
fn gemm(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let a = ctx.input(0)?;
    let b = ctx.input(1)?;
    let c = ctx.opt_input(2);
    if c.is_none() && ctx.version < 11 {
        return Err(ctx.invalid("Gemm before opset 11 needs input C"));
    }
    let alpha = ctx.attrs.float("alpha", 1.0)?;
    let beta = ctx.attrs.float("beta", 1.0)?;
    let op = |transposed: bool| if transposed { MatrixOp::Transpose } else { MatrixOp::None };
    let op_a = op(ctx.attrs.flag("transA", false)?);
    let op_b = op(ctx.attrs.flag("transB", false)?);
    for (slot, t) in [(0, a), (1, b)] {
        if ctx.rank(t) != 2 {
            return Err(ctx.invalid(format!("Gemm input #{slot} must be 2-D, got rank {}", ctx.rank(t))));
        }
    }
    let bias = c.filter(|_| beta != 0.0);
    let last = |more: bool| if more { "matmul" } else { "" };
    let mut y = ctx.add(last(alpha != 1.0 || bias.is_some()), LayerKind::MatrixMultiply { op_a, op_b }, &[a, b])?;
    if alpha != 1.0 {
        let alpha = factor(ctx, "alpha", y, alpha)?;
        y = ctx.add(last(bias.is_some()), LayerKind::Elementwise { op: ElementwiseOp::Prod }, &[y, alpha])?;
    }
    if let Some(mut c) = bias {
        if beta != 1.0 {
            let beta = factor(ctx, "beta", c, beta)?;
            c = ctx.add("beta C", LayerKind::Elementwise { op: ElementwiseOp::Prod }, &[c, beta])?;
        }
        y = ctx.add("", LayerKind::Elementwise { op: ElementwiseOp::Sum }, &[y, c])?;
    }
    one(y)
}

/// numpy matmul: 1-D operands are vectors whose unit dim is dropped from the result.
fn matmul(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let a = ctx.input(0)?;
    let b = ctx.input(1)?;
    let op = |t: TensorId| match ctx.rank(t) {
        0 => Err(ctx.invalid("MatMul operands must have rank 1 or more")),
        1 => Ok(MatrixOp::Vector),
        _ => Ok(MatrixOp::None),
    };
    let (op_a, op_b) = (op(a)?, op(b)?);
    one(ctx.add("", LayerKind::MatrixMultiply { op_a, op_b }, &[a, b])?)
}

//! Reduce* ops. Axes are an attribute until ReduceSum-13 / the others' opset 18, then an
//! optional input (a constant, or a tensor input of the Reduce layer); empty axes mean all axes unless
//! `noop_with_empty_axes` makes the op an identity.

use super::{one, Registry};
use crate::context::NodeContext;
use crate::error::ImportError;
use kiln::{LayerKind, ReduceOp, TensorId};

pub(super) fn register(r: &mut Registry) {
    r.add("ReduceSum", &[1, 11, 13], reduce);
    r.add("ReduceMax", &[1, 11, 12, 13, 18, 20], reduce);
    r.add("ReduceMin", &[1, 11, 12, 13, 18, 20], reduce);
    for op in ["ReduceMean", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare"] {
        r.add(op, &[1, 11, 13, 18], reduce);
    }
    r.add("ReduceLogSum", &[1, 11, 13, 18, 28], reduce);
    r.add("ReduceLogSumExp", &[1, 11, 13, 18, 28], reduce);
}

fn reduce_op(ctx: &NodeContext) -> Result<ReduceOp, ImportError> {
    Ok(match ctx.op_type() {
        "ReduceSum" => ReduceOp::Sum,
        "ReduceMean" => ReduceOp::Mean,
        "ReduceMax" => ReduceOp::Max,
        "ReduceMin" => ReduceOp::Min,
        "ReduceProd" => ReduceOp::Prod,
        "ReduceL1" => ReduceOp::L1,
        "ReduceL2" => ReduceOp::L2,
        "ReduceLogSum" => ReduceOp::LogSum,
        "ReduceLogSumExp" => ReduceOp::LogSumExp,
        "ReduceSumSquare" => ReduceOp::SumSquare,
        other => return Err(ctx.invalid(format!("`{other}` is registered as a reduction but has no mapping"))),
    })
}

fn reduce(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let op = reduce_op(ctx)?;
    let x = ctx.input(0)?;
    let rank = ctx.rank(x);
    let axes_are_input = ctx.version >= if op == ReduceOp::Sum { 13 } else { 18 };
    let keep_dims = ctx.attrs.flag("keepdims", true)?;
    let (axes, noop_when_empty) = if axes_are_input {
        let noop_when_empty = ctx.attrs.flag("noop_with_empty_axes", false)?;
        let axes = match ctx.opt_input(1) {
            Some(t) => match ctx.const_ints(t) {
                Some(axes) => axes,
                // Run-time axes whose declared length tells whether they are empty.
                None if noop_when_empty => match ctx.fixed_dims(t).as_deref() {
                    Some([0]) => Vec::new(),
                    Some([_]) => return one(ctx.add("", LayerKind::Reduce { op, axes: Vec::new(), keep_dims }, &[x, t])?),
                    _ => {
                        return Err(ctx.unsupported(
                            "noop_with_empty_axes=1 with a run-time axes input of unknown length",
                        ))
                    }
                },
                // Axes known only at run time: the Reduce layer reads them as an input.
                None => return one(ctx.add("", LayerKind::Reduce { op, axes: Vec::new(), keep_dims }, &[x, t])?),
            },
            None => Vec::new(),
        };
        (axes, noop_when_empty)
    } else {
        (ctx.attrs.ints("axes")?.unwrap_or_default().to_vec(), false)
    };
    let mut axes = if axes.is_empty() {
        if noop_when_empty {
            return one(x);
        }
        (0..rank).collect()
    } else {
        ctx.axes(&axes, rank)?
    };
    axes.sort_unstable();
    one(ctx.add("", LayerKind::Reduce { op, axes, keep_dims }, &[x])?)
}

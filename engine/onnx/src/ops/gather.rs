//! Gather, GatherElements, GatherND and their Scatter counterparts.

use super::{one, Registry};
use crate::context::NodeContext;
use crate::error::ImportError;
use kiln::{GatherMode, LayerKind, ScatterMode, ScatterReduction, TensorId};

pub(super) fn register(r: &mut Registry) {
    r.add("Gather", &[1, 11, 13], gather);
    r.add("GatherElements", &[11, 13], gather);
    r.add("GatherND", &[11, 12, 13], gather);
    r.add("ScatterElements", &[11, 13, 16, 18], scatter);
    r.add("ScatterND", &[11, 13, 16, 18], scatter);
    // Scatter (deprecated at opset 11) is ScatterElements without reductions.
    r.add("Scatter", &[9, 11], scatter);
    r.add("Compress", &[9, 11], compress);
}

/// Compress: the slices along `axis` (of the flattened input without one) where the 1-D
/// condition holds: NonZero of the condition, then a Gather. A condition shorter than the
/// axis selects among its first entries only.
fn compress(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let condition = ctx.input(1)?;
    if ctx.rank(condition) != 1 {
        return Err(ctx.invalid(format!("the condition must be 1-D, got {}", ctx.net.tensor(condition).shape)));
    }
    let (data, axis) = match ctx.attrs.opt_int("axis")? {
        Some(a) => (x, ctx.axis(a, ctx.rank(x))?),
        None => (ctx.reshape("flattened", x, vec![-1])?, 0),
    };
    let condition = ctx.cast("condition bool", condition, kiln::DataType::Bool)?;
    let positions = ctx.add("positions", LayerKind::NonZero, &[condition])?;
    let positions = ctx.reshape("indices", positions, vec![-1])?;
    one(ctx.add("", LayerKind::Gather { mode: GatherMode::Default { axis } }, &[data, positions])?)
}

fn gather(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let data = ctx.input(0)?;
    let indices = ctx.input(1)?;
    let rank = ctx.rank(data);
    let mode = match ctx.op_type() {
        "Gather" => GatherMode::Default { axis: ctx.axis(ctx.attrs.int("axis", 0)?, rank)? },
        "GatherElements" => GatherMode::Elements { axis: ctx.axis(ctx.attrs.int("axis", 0)?, rank)? },
        _ => {
            let batch_dims = ctx.attrs.int("batch_dims", 0)?;
            let batch_dims = usize::try_from(batch_dims)
                .map_err(|_| ctx.invalid(format!("batch_dims must not be negative, got {batch_dims}")))?;
            GatherMode::Nd { batch_dims }
        }
    };
    one(ctx.add("", LayerKind::Gather { mode }, &[data, indices])?)
}

fn scatter(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let data = ctx.input(0)?;
    let indices = ctx.input(1)?;
    let updates = ctx.input(2)?;
    let mode = if matches!(ctx.op_type(), "ScatterElements" | "Scatter") {
        ScatterMode::Elements { axis: ctx.axis(ctx.attrs.int("axis", 0)?, ctx.rank(data))? }
    } else {
        ScatterMode::Nd
    };
    let reduction = match ctx.attrs.string("reduction", "none")? {
        "none" => ScatterReduction::None,
        "add" if ctx.version >= 16 => ScatterReduction::Add,
        "mul" if ctx.version >= 16 => ScatterReduction::Mul,
        "max" if ctx.version >= 18 => ScatterReduction::Max,
        "min" if ctx.version >= 18 => ScatterReduction::Min,
        other => return Err(ctx.invalid(format!("reduction `{other}` does not exist at opset {}", ctx.opset))),
    };
    one(ctx.add("", LayerKind::Scatter { mode, reduction }, &[data, indices, updates])?)
}

//! Index-producing and index-driven ops: ArgMax, ArgMin, Hardmax, TopK, Trilu, CumSum,
//! Size, NonZero and EyeLike.

use super::build::{binary, fixed_dim, iota, squeeze_axis, with_scalar};
use super::{one, Registry};
use crate::context::NodeContext;
use crate::error::ImportError;
use crate::tensor::{self, dtype_from_onnx};
use kiln::{DataType, ElementwiseOp, HostTensor, LayerKind, ReduceOp, TensorId};

pub(super) fn register(r: &mut Registry) {
    r.add("ArgMax", &[1, 11, 12, 13], arg_extreme);
    r.add("ArgMin", &[1, 11, 12, 13], arg_extreme);
    r.add("Hardmax", &[1, 11, 13], hardmax);
    r.add("TopK", &[1, 10, 11, 24], top_k);
    r.add("Trilu", &[14], trilu);
    r.add("CumSum", &[11, 14], cum_sum);
    r.add("CumProd", &[26], cum_prod);
    r.add("Size", &[1, 13, 19, 21, 23, 24, 25], size);
    r.add("NonZero", &[9, 13], non_zero);
    r.add("EyeLike", &[9, 22], eye_like);
}

/// `x` reversed along `axis` (a Slice with step -1).
fn reversed(ctx: &mut NodeContext, x: TensorId, axis: usize) -> Result<TensorId, ImportError> {
    let starts = ctx.const_i64("reverse starts", &[-1])?;
    let ends = ctx.const_i64("reverse ends", &[i64::MIN])?;
    let axes = ctx.const_i64("reverse axes", &[axis as i64])?;
    let steps = ctx.const_i64("reverse steps", &[-1])?;
    ctx.add("reversed", LayerKind::Slice, &[x, starts, ends, axes, steps])
}

/// The (first, or with `last` the last) index of the extreme along `axis`, keeping the axis.
fn extreme_index(
    ctx: &mut NodeContext,
    x: TensorId,
    axis: usize,
    largest: bool,
    last: bool,
) -> Result<TensorId, ImportError> {
    let source = if last { reversed(ctx, x, axis)? } else { x };
    let k = ctx.const_i64("k", &[1])?;
    let kind = LayerKind::TopK { largest, axis, sorted: true };
    let outs = ctx.add_layer_outputs("top", kind, vec![Some(source), Some(k)])?;
    let index = *outs.get(1).ok_or_else(|| ctx.invalid("TopK produced no indices"))?;
    if !last {
        return Ok(index);
    }
    // An index into the reversed axis counts from the end.
    let length = ctx.dim_of("axis length", x, axis)?;
    let last_index = with_scalar(ctx, "last index", ElementwiseOp::Sub, length, 1.0)?;
    binary(ctx, "index", ElementwiseOp::Sub, last_index, index)
}

fn arg_extreme(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let axis = ctx.axis(ctx.attrs.int("axis", 0)?, ctx.rank(x))?;
    let last = ctx.version >= 12 && ctx.attrs.flag("select_last_index", false)?;
    let index = extreme_index(ctx, x, axis, ctx.op_type() == "ArgMax", last)?;
    if ctx.attrs.flag("keepdims", true)? {
        return one(index);
    }
    one(squeeze_axis(ctx, "", index, axis)?)
}

/// 1 at the first maximum along the axis, 0 elsewhere. Before opset 13 the input is
/// coerced to 2-D at `axis` (default 1) and the rows are normalized.
fn hardmax(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let rank = ctx.rank(x);
    let default_axis = if ctx.version >= 13 { -1 } else { 1 };
    let axis = ctx.axis(ctx.attrs.int("axis", default_axis)?, rank)?;
    let (rows, row_axis, original) = if ctx.version >= 13 || axis + 1 == rank {
        (x, axis, None)
    } else {
        let dims = ctx.fixed_dims(x).ok_or_else(|| ctx.unsupported("Hardmax before opset 13 on dynamic dims"))?;
        let mut flat = vec![0; axis];
        flat.push(-1);
        (ctx.reshape("rows", x, flat)?, axis, Some(dims))
    };
    let n = fixed_dim(ctx, rows, row_axis, "Hardmax")?;
    let index = extreme_index(ctx, rows, row_axis, true, false)?;
    let positions = iota(ctx, "positions", n, ctx.rank(rows), row_axis)?;
    let hit = binary(ctx, "is max", ElementwiseOp::Equal, positions, index)?;
    let y = ctx.cast("as values", hit, ctx.dtype(x))?;
    match original {
        Some(dims) => one(ctx.reshape("", y, dims.iter().map(|&d| d as i64).collect())?),
        None => one(y),
    }
}

fn top_k(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let axis = ctx.axis(ctx.attrs.int("axis", -1)?, ctx.rank(x))?;
    let k = if ctx.version < 10 {
        let k = ctx.attrs.required_int("k")?;
        ctx.const_i64("k", &[k])?
    } else {
        ctx.input(1)?
    };
    let (largest, sorted) = if ctx.version >= 11 {
        (ctx.attrs.flag("largest", true)?, ctx.attrs.flag("sorted", true)?)
    } else {
        (true, true)
    };
    ctx.add_layer_outputs("", LayerKind::TopK { largest, axis, sorted }, vec![Some(x), Some(k)])
}

/// Keeps the upper (`col - row >= k`) or lower (`col - row <= k`) triangle of the last two
/// axes, zeroing the rest.
fn trilu(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let rank = ctx.rank(x);
    if rank < 2 {
        return Err(ctx.invalid(format!("Trilu needs rank ≥ 2, got {rank}")));
    }
    let rows = fixed_dim(ctx, x, rank - 2, "Trilu")?;
    let cols = fixed_dim(ctx, x, rank - 1, "Trilu")?;
    let k = match ctx.opt_input(1) {
        Some(k) => ctx.cast("k", k, DataType::I64)?,
        None => ctx.const_i64("k", &[0])?,
    };
    let row = iota(ctx, "rows", rows, rank, rank - 2)?;
    let col = iota(ctx, "cols", cols, rank, rank - 1)?;
    let offset = binary(ctx, "diagonal offset", ElementwiseOp::Sub, col, row)?;
    let keep_op =
        if ctx.attrs.flag("upper", true)? { ElementwiseOp::GreaterOrEqual } else { ElementwiseOp::LessOrEqual };
    let keep = binary(ctx, "keep", keep_op, offset, k)?;
    let zero = ctx.scalar("zero", ctx.dtype(x), 0.0)?;
    one(ctx.add("", LayerKind::Select, &[keep, x, zero])?)
}

fn cum_sum(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let (x, axis) = (ctx.input(0)?, ctx.input(1)?);
    let exclusive = ctx.attrs.flag("exclusive", false)?;
    let reverse = ctx.attrs.flag("reverse", false)?;
    one(ctx.add("", LayerKind::CumulativeSum { exclusive, reverse }, &[x, axis])?)
}

fn cum_prod(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let (x, axis) = (ctx.input(0)?, ctx.input(1)?);
    let exclusive = ctx.attrs.flag("exclusive", false)?;
    let reverse = ctx.attrs.flag("reverse", false)?;
    one(ctx.add("", LayerKind::CumulativeProduct { exclusive, reverse }, &[x, axis])?)
}

/// The element count as a 0-D i64.
fn size(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    if let Some(dims) = ctx.fixed_dims(x) {
        let count = kiln::limits::element_count(&dims)
            .and_then(|n| i64::try_from(n).ok())
            .ok_or_else(|| ctx.invalid(format!("its input {dims:?} has more elements than an int64 can count")))?;
        let value = kiln::HostTensor::from_i64(vec![], vec![count]).map_err(|e| ctx.invalid(e.to_string()))?;
        return one(ctx.constant("", value)?);
    }
    let shape = ctx.add("shape", LayerKind::Shape, &[x])?;
    one(ctx.add("", LayerKind::Reduce { op: ReduceOp::Prod, axes: vec![0], keep_dims: false }, &[shape])?)
}

fn non_zero(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    one(ctx.add("", LayerKind::NonZero, &[x])?)
}

/// A 2-D constant with ones on the diagonal shifted by `k`, shaped like the input.
fn eye_like(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let dims = ctx.fixed_dims(x).ok_or_else(|| ctx.unsupported("EyeLike of an input with dynamic dims"))?;
    let [rows, cols] = dims[..] else {
        return Err(ctx.invalid(format!("EyeLike needs a 2-D input, got rank {}", dims.len())));
    };
    let dtype = match ctx.attrs.opt_int("dtype")? {
        Some(code) => dtype_from_onnx(code as i32).map_err(|e| ctx.unsupported(e))?,
        None => ctx.dtype(x),
    };
    let k = ctx.attrs.int("k", 0)?;
    // The eye is a constant: refuse sizes no model means (and that would not fit in memory).
    const MAX_EYE_ELEMENTS: usize = 1 << 26;
    let count = rows.checked_mul(cols).filter(|&n| n <= MAX_EYE_ELEMENTS).ok_or_else(|| {
        ctx.unsupported(format!("a {rows}×{cols} EyeLike (more than {MAX_EYE_ELEMENTS} elements)"))
    })?;
    let values: Vec<f64> =
        (0..count).map(|i| if (i % cols) as i64 - (i / cols) as i64 == k { 1.0 } else { 0.0 }).collect();
    if !dtype.is_float() {
        // Integer and bool eyes: an i64 constant cast to the type.
        let eye = HostTensor::from_i64(vec![rows, cols], values.iter().map(|&v| v as i64).collect())
            .map_err(|e| ctx.invalid(e.to_string()))?;
        let eye = ctx.constant("i64", eye)?;
        return one(ctx.add("", LayerKind::Cast { to: dtype }, &[eye])?);
    }
    let eye = tensor::from_f64(dtype, vec![rows, cols], &values).map_err(|e| ctx.invalid(e))?;
    one(ctx.constant("", eye)?)
}

//! Constant, Identity, Cast, CastLike, Dropout, Where, ConstantOfShape, Range and Pad.

use super::{one, Registry};
use crate::context::NodeContext;
use crate::error::ImportError;
use crate::proto::tensor_proto::DataType as OnnxType;
use crate::tensor::{self, dtype_from_onnx, host_tensor};
use kiln::{
    DataType, E8M0Rounding, ElementwiseOp, GatherMode, HostTensor, LayerKind, PaddingMode, TensorData, TensorId, UnaryOp,
};

pub(super) fn register(r: &mut Registry) {
    r.add("Constant", &[1, 9, 11, 12, 13, 19, 21, 23, 24, 25], constant);
    r.add("Identity", &[1, 13, 14, 16, 19, 21, 23, 24, 25], identity);
    r.add("Cast", &[1, 6, 9, 13, 19, 21, 23, 24, 25, 28], cast);
    r.add("CastLike", &[15, 19, 21, 23, 24, 25], cast_like);
    r.add("Dropout", &[1, 6, 7, 10, 12, 13, 22], dropout);
    r.add("Where", &[9, 16], select);
    r.add("ConstantOfShape", &[9, 20, 21, 23, 24, 25], constant_of_shape);
    r.add("Range", &[11, 27], range);
    r.add("Pad", &[1, 2, 11, 13, 18, 19, 21, 23, 24, 25], pad);
}

/// Constant: one of `value` (any opset), `sparse_value` (11) or the typed shorthands (12).
fn constant(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let a = ctx.attrs;
    let mut found = Vec::new();
    if let Some(t) = a.tensor("value")? {
        found.push(host_tensor(t, ctx.name, ctx.model_dir)?);
    }
    if a.has("sparse_value") {
        return Err(ctx.unsupported("a sparse_value (sparse tensors)"));
    }
    if a.has("value_string") || a.has("value_strings") {
        return Err(ctx.invalid("string constants are not supported by kiln"));
    }
    if let Some(v) = a.opt_float("value_float")? {
        found.push(HostTensor::scalar(TensorData::F32(vec![v])).expect("scalar"));
    }
    if let Some(v) = a.floats("value_floats")? {
        found.push(HostTensor::from_f32(vec![v.len()], v.to_vec()).expect("1-D"));
    }
    if let Some(v) = a.opt_int("value_int")? {
        found.push(HostTensor::scalar(TensorData::I64(vec![v])).expect("scalar"));
    }
    if let Some(v) = a.ints("value_ints")? {
        found.push(HostTensor::from_i64(vec![v.len()], v.to_vec()).expect("1-D"));
    }
    if found.len() != 1 {
        return Err(ctx.invalid(format!("Constant needs exactly one value attribute, got {}", found.len())));
    }
    let value = found.pop().expect("one value");
    one(ctx.constant("", value)?)
}

fn identity(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    one(ctx.add("", LayerKind::Identity, &[x])?)
}

/// Cast: `to` is a type name string in opset 1 and a type code after. `saturate` (opset
/// 19+) and `round_mode` (opset 25+, e8m0) only affect narrow float targets; their defaults
/// are plain Cast's semantics.
fn cast(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let code = if ctx.version < 6 {
        let name = ctx.attrs.opt_string("to")?.ok_or_else(|| ctx.invalid("attribute `to` is required"))?;
        OnnxType::from_str_name(&name.to_ascii_uppercase())
            .ok_or_else(|| ctx.invalid(format!("unknown type name `{name}`")))? as i32
    } else {
        let code = ctx.attrs.required_int("to")?;
        i32::try_from(code).map_err(|_| ctx.invalid(format!("unknown type code {code}")))?
    };
    let to = dtype_from_onnx(code).map_err(|e| ctx.invalid(e))?;
    cast_with_options(ctx, x, to)
}

/// A Cast to `to`, or a CastNarrow when `saturate` / `round_mode` differ from the defaults.
fn cast_with_options(ctx: &mut NodeContext, x: TensorId, to: DataType) -> Result<Vec<TensorId>, ImportError> {
    let saturate = ctx.attrs.int("saturate", 1)? != 0;
    let mode = ctx.attrs.opt_string("round_mode")?.unwrap_or("up");
    let e8m0_rounding = E8M0Rounding::from_onnx(mode)
        .ok_or_else(|| ctx.invalid(format!("round_mode `{mode}` is not one of up, down, nearest")))?;
    if to.is_narrow_float() && (!saturate || e8m0_rounding != E8M0Rounding::Up) {
        return one(ctx.add("", LayerKind::CastNarrow { to, saturate, e8m0_rounding }, &[x])?);
    }
    one(ctx.add("", LayerKind::Cast { to }, &[x])?)
}

/// Dropout at inference is the identity and its mask all true (a Fill of the input's
/// shape). Training mode is accepted only with a constant ratio of 0, which drops nothing.
fn dropout(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    if ctx.version >= 12 && ctx.opt_input(2).is_some() {
        let training = ctx.input(2)?;
        let ratio_is_zero = ctx.opt_input(1).and_then(|r| ctx.value(r)).is_some_and(|r| r.to_f64_vec() == [0.0]);
        match ctx.value(training).map(|v| v.to_f64_vec()) {
            Some(v) if v.iter().all(|&b| b == 0.0) || ratio_is_zero => {}
            Some(_) => return Err(ctx.unsupported("training_mode=true with a non-zero ratio (random masks)")),
            None if ratio_is_zero => {}
            None => assert_not_training(ctx, training)?,
        }
    }
    let x = ctx.input(0)?;
    let y = ctx.add("", LayerKind::Identity, &[x])?;
    if !ctx.output_wanted(1) {
        return one(y);
    }
    // The mask was of the input's type before opset 10.
    let mask_type = if ctx.version >= 10 { DataType::Bool } else { ctx.dtype(x) };
    let shape = ctx.shape_of("mask shape", x)?;
    let mask = ctx.add("mask", LayerKind::Fill { value: tensor::scalar(mask_type, 1.0) }, &[shape])?;
    Ok(vec![y, mask])
}

/// A training_mode known only at run time: Dropout is the identity unless training with a
/// non-zero ratio, which needs random masks kiln does not draw; an Assertion fails the run
/// then instead of returning an unmasked output.
fn assert_not_training(ctx: &mut NodeContext, training: TensorId) -> Result<(), ImportError> {
    let elementwise = |op| LayerKind::Elementwise { op };
    let training = ctx.cast("training bool", training, DataType::Bool)?;
    let mut allowed = ctx.add("not training", LayerKind::Unary { op: UnaryOp::Not }, &[training])?;
    if let Some(ratio) = ctx.opt_input(1) {
        let zero = ctx.scalar("zero ratio", ctx.dtype(ratio), 0.0)?;
        let ratio_is_zero = ctx.add("ratio is zero", elementwise(ElementwiseOp::Equal), &[ratio, zero])?;
        allowed = ctx.add("deterministic", elementwise(ElementwiseOp::Or), &[allowed, ratio_is_zero])?;
    }
    let message = format!(
        "Dropout `{}`: training_mode is true with a non-zero ratio, which needs random masks (kiln draws no random numbers)",
        ctx.name
    );
    ctx.add_layer_outputs("training check", LayerKind::Assertion { message }, vec![Some(allowed)])?;
    Ok(())
}

/// CastLike: Cast to the element type of input 1.
fn cast_like(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let (x, like) = (ctx.input(0)?, ctx.input(1)?);
    let to = ctx.dtype(like);
    cast_with_options(ctx, x, to)
}

fn select(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let (condition, a, b) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
    one(ctx.add("", LayerKind::Select, &[condition, a, b])?)
}

/// ConstantOfShape: a Fill whose value is the one-element `value` attribute (f32 0 by default).
fn constant_of_shape(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let shape = ctx.input(0)?;
    let value = match ctx.attrs.tensor("value")? {
        Some(t) => host_tensor(t, ctx.name, ctx.model_dir)?,
        None => tensor::scalar(DataType::F32, 0.0),
    };
    if value.len() != 1 {
        return Err(ctx.invalid(format!("the value attribute must hold one element, got {}", value.len())));
    }
    let value = value.reshaped(vec![]).expect("one element");
    one(ctx.add("", LayerKind::Fill { value }, &[shape])?)
}

/// Range: folded to a constant when its operands are constant; otherwise built as
/// `start + delta × [0, 1, …, n-1]`, the index vector being an exclusive running sum of
/// ones, with `n = max(ceil((limit - start) / delta), 0)`.
fn range(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let (start, limit, delta) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
    let dtype = ctx.dtype(start);
    if [limit, delta].iter().any(|&t| ctx.dtype(t) != dtype) {
        return Err(ctx.invalid("start, limit and delta must have the same type"));
    }
    let operands: Option<Vec<HostTensor>> = [start, limit, delta].iter().map(|&t| ctx.value(t)).collect();
    if let Some(operands) = operands {
        if let Some(value) = folded_range(ctx, dtype, &operands)? {
            return one(ctx.constant("", value)?);
        }
    }
    let op = |op| LayerKind::Elementwise { op };
    let span = ctx.add("span", op(ElementwiseOp::Sub), &[limit, start])?;
    let steps = if dtype.is_float() {
        let quotient = ctx.add("quotient", op(ElementwiseOp::Div), &[span, delta])?;
        ctx.add("steps", LayerKind::Unary { op: UnaryOp::Ceil }, &[quotient])?
    } else {
        // ceil(a / b) = -floor(-a / b) for integers.
        let negated = ctx.add("-span", LayerKind::Unary { op: UnaryOp::Neg }, &[span])?;
        let floor = ctx.add("floor", op(ElementwiseOp::FloorDiv), &[negated, delta])?;
        ctx.add("steps", LayerKind::Unary { op: UnaryOp::Neg }, &[floor])?
    };
    let zero = ctx.scalar("zero", dtype, 0.0)?;
    let count = ctx.add("count", op(ElementwiseOp::Max), &[steps, zero])?;
    let count = ctx.cast("count i64", count, DataType::I64)?;
    let count = ctx.reshape("count dims", count, vec![1])?;
    let ones = ctx.add("ones", LayerKind::Fill { value: tensor::scalar(dtype, 1.0) }, &[count])?;
    let axis = ctx.constant("axis", tensor::scalar(DataType::I64, 0.0))?;
    let index = ctx.add("index", LayerKind::CumulativeSum { exclusive: true, reverse: false }, &[ones, axis])?;
    let offsets = ctx.add("offsets", op(ElementwiseOp::Prod), &[index, delta])?;
    one(ctx.add("", op(ElementwiseOp::Sum), &[offsets, start])?)
}

/// Ranges up to this many elements become constants; longer ones are computed at run time.
const MAX_FOLDED_RANGE: usize = 1 << 16;

/// The values of a Range with constant operands, if short enough to fold.
fn folded_range(
    ctx: &NodeContext,
    dtype: DataType,
    operands: &[HostTensor],
) -> Result<Option<HostTensor>, ImportError> {
    if operands.iter().any(|o| o.len() != 1) {
        return Err(ctx.invalid("start, limit and delta must be scalars"));
    }
    if dtype.is_float() {
        let [s, l, d] = [0, 1, 2].map(|i| operands[i].to_f64_vec()[0]);
        if d == 0.0 {
            return Err(ctx.invalid("Range delta must not be 0"));
        }
        let n = ((l - s) / d).ceil().max(0.0);
        if n.is_nan() {
            return Err(ctx.invalid(format!("Range({s}, {l}, {d}) has no length")));
        }
        if n > MAX_FOLDED_RANGE as f64 {
            return Ok(None);
        }
        let values: Vec<f64> = (0..n as usize).map(|i| s + i as f64 * d).collect();
        return tensor::from_f64(dtype, vec![values.len()], &values).map(Some).map_err(|e| ctx.invalid(e));
    }
    let ints: Option<Vec<i64>> = operands.iter().map(|o| o.to_i64_vec().map(|v| v[0])).collect();
    let Some(&[s, l, d]) = ints.as_deref() else {
        return Err(ctx.invalid(format!("Range is not defined on {dtype}")));
    };
    if d == 0 {
        return Err(ctx.invalid("Range delta must not be 0"));
    }
    let span = l.checked_sub(s).ok_or_else(|| ctx.invalid("Range limit - start overflows"))?;
    // ceil(span / d): truncation rounds toward zero, so step up when the exact quotient
    // is positive and inexact.
    // (i64::MIN / -1 is the one quotient that overflows: a length no tensor can have.)
    let (Some(quotient), Some(rest)) = (span.checked_div(d), span.checked_rem(d)) else {
        return Err(ctx.invalid(format!("Range from {s} to {l} by {d} has more elements than an int64 can count")));
    };
    let n = quotient + i64::from(rest != 0 && (span < 0) == (d < 0));
    if n > MAX_FOLDED_RANGE as i64 {
        return Ok(None);
    }
    // Every value lies between start and limit, so none overflows.
    let values: Vec<i64> = (0..n.max(0)).map(|i| s + i * d).collect();
    let shape = vec![values.len()];
    let data = match dtype {
        DataType::I64 => TensorData::I64(values),
        DataType::I32 => TensorData::I32(values.iter().map(|&v| v as i32).collect()),
        DataType::I16 => TensorData::I16(values.iter().map(|&v| v as i16).collect()),
        other => return Err(ctx.invalid(format!("Range is not defined on {other}"))),
    };
    Ok(Some(HostTensor::new(shape, data).expect("1-D length matches")))
}

fn padding_mode(ctx: &NodeContext) -> Result<PaddingMode, ImportError> {
    match ctx.attrs.string("mode", "constant")? {
        "constant" => Ok(PaddingMode::Constant),
        "reflect" => Ok(PaddingMode::Reflect),
        "edge" => Ok(PaddingMode::Edge),
        "wrap" if ctx.version >= 19 => Ok(PaddingMode::Wrap),
        other => Err(ctx.invalid(format!("unknown pad mode `{other}` at opset {}", ctx.opset))),
    }
}

/// Pad: pads (`paddings` in opset 1) and the fill value are attributes before opset 11 and
/// inputs after; opset 18 adds `axes`, which name the axes the pads refer to.
fn pad(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let mode = LayerKind::Padding { mode: padding_mode(ctx)? };
    let x = ctx.input(0)?;
    let rank = ctx.rank(x);
    if ctx.version < 11 {
        let name = if ctx.version < 2 { "paddings" } else { "pads" };
        let pads =
            ctx.attrs.ints(name)?.ok_or_else(|| ctx.invalid(format!("attribute `{name}` is required")))?.to_vec();
        let pads = ctx.const_i64("pads", &pads)?;
        let value = ctx.attrs.float("value", 0.0)?;
        let value = if value != 0.0 { Some(ctx.scalar("value", ctx.dtype(x), value as f64)?) } else { None };
        return one(ctx.add_opt("", mode, vec![Some(x), Some(pads), value])?);
    }
    let mut pads = ctx.input(1)?;
    let value = ctx.opt_input(2);
    if let Some(axes_input) = ctx.opt_input(3).filter(|_| ctx.version >= 18) {
        let Some(axes) = ctx.const_ints(axes_input) else {
            pads = run_time_axes_pads(ctx, pads, axes_input, rank)?;
            return one(ctx.add_opt("", mode, vec![Some(x), Some(pads), value])?);
        };
        let axes = ctx.axes(&axes, rank)?;
        let n = axes.len();
        // Full-rank pads gather from the given ones, with index 2n reading an appended 0.
        let mut index = vec![2 * n as i64; 2 * rank];
        for (k, &a) in axes.iter().enumerate() {
            index[a] = k as i64;
            index[rank + a] = (n + k) as i64;
        }
        match ctx.const_ints(pads) {
            Some(given) if given.len() == 2 * n => {
                let full: Vec<i64> = index.iter().map(|&i| given.get(i as usize).copied().unwrap_or(0)).collect();
                pads = ctx.const_i64("pads", &full)?;
            }
            Some(given) => return Err(ctx.invalid(format!("{} pads for {n} axes", given.len()))),
            None => {
                let pads_i64 = ctx.cast("pads i64", pads, DataType::I64)?;
                let zero = ctx.const_i64("zero", &[0])?;
                let extended = ctx.add("pads and zero", LayerKind::Concatenation { axis: 0 }, &[pads_i64, zero])?;
                let index = ctx.const_i64("pads index", &index)?;
                pads =
                    ctx.add("pads", LayerKind::Gather { mode: GatherMode::Default { axis: 0 } }, &[extended, index])?;
            }
        }
    }
    one(ctx.add_opt("", mode, vec![Some(x), Some(pads), value])?)
}

/// Full-rank pads from pads given for `axes` known only at run time: the pads scattered
/// into zeros at `(axis + rank) mod rank` (begins) and that plus `rank` (ends).
fn run_time_axes_pads(ctx: &mut NodeContext, pads: TensorId, axes: TensorId, rank: usize) -> Result<TensorId, ImportError> {
    let elementwise = |op| LayerKind::Elementwise { op };
    let axes = ctx.cast("axes i64", axes, DataType::I64)?;
    let pads = ctx.cast("pads i64", pads, DataType::I64)?;
    let rank_t = ctx.const_i64("rank", &[rank as i64])?;
    let shifted = ctx.add("axes + rank", elementwise(ElementwiseOp::Sum), &[axes, rank_t])?;
    let begins = ctx.add("begin index", elementwise(ElementwiseOp::Mod), &[shifted, rank_t])?;
    let ends = ctx.add("end index", elementwise(ElementwiseOp::Sum), &[begins, rank_t])?;
    let index = ctx.add("pads index", LayerKind::Concatenation { axis: 0 }, &[begins, ends])?;
    let zeros = ctx.const_i64("zero pads", &vec![0; 2 * rank])?;
    let scatter = LayerKind::Scatter { mode: kiln::ScatterMode::Elements { axis: 0 }, reduction: kiln::ScatterReduction::None };
    ctx.add("pads", scatter, &[zeros, index, pads])
}

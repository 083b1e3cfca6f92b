//! QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear on kiln's Quantize and
//! Dequantize layers (per-tensor, per-axis, or blocked expanded to per-element), to and from
//! integers of 2 to 32 bits, float8 and float4.

use super::build::{binary, reduce, unary, with_scalar};
use super::{one, Registry};
use crate::context::NodeContext;
use crate::error::ImportError;
use crate::tensor::dtype_from_onnx;
use kiln::{DataType, ElementwiseOp as E, GatherMode, HostTensor, LayerKind, ReduceOp, TensorId, UnaryOp};

pub(super) fn register(r: &mut Registry) {
    r.add("QuantizeLinear", &[10, 13, 19, 21, 23, 24, 25], quantize_linear);
    r.add("DequantizeLinear", &[10, 13, 19, 21, 23, 24, 25], dequantize_linear);
    r.add("DynamicQuantizeLinear", &[11], dynamic_quantize_linear);
    r.add("QLinearMatMul", &[10, 21], qlinear_matmul);
}

/// QLinearMatMul: both operands dequantized to f32 (a per row, b per column when their
/// scales are vectors), multiplied, and quantized with the output's scale and zero point.
fn qlinear_matmul(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let mut dequantized = Vec::with_capacity(2);
    for (operand, first, matrix_axis) in [("a", 0, 2), ("b", 3, 1)] {
        let (x, scale, zero_point) = (ctx.input(first)?, ctx.input(first + 1)?, ctx.input(first + 2)?);
        if !ctx.dtype(x).is_integer() || ctx.rank(x) < 2 {
            return Err(ctx.invalid(format!("`{operand}` must be an integer matrix, got {}", ctx.net.tensor(x).shape)));
        }
        let per_tensor = ctx.rank(scale) == 0 || ctx.dims(scale)[0].fixed() == Some(1);
        let axis = (!per_tensor).then(|| ctx.rank(x) - matrix_axis);
        let scale = ctx.cast(&format!("{operand} scale f32"), scale, DataType::F32)?;
        let kind = LayerKind::Dequantize { axis, to: None };
        dequantized.push(ctx.add(&format!("{operand} dequantized"), kind, &[x, scale, zero_point])?);
    }
    let product = ctx.add("product", LayerKind::MatrixMultiply { op_a: kiln::MatrixOp::None, op_b: kiln::MatrixOp::None }, &dequantized)?;
    let (scale, zero_point) = (ctx.input(6)?, ctx.input(7)?);
    let scale = ctx.cast("y scale f32", scale, DataType::F32)?;
    let to = ctx.dtype(zero_point);
    one(ctx.add("", LayerKind::Quantize { axis: None, to }, &[product, scale, zero_point])?)
}

/// The quantization axis and the scale and zero point the layer takes: `None` for a
/// per-tensor scale (0-D or one element), else the normalized `axis`. Blocked quantization
/// (opset 21+) expands scale and zero point to x's shape, each block's parameter repeated
/// `block_size` times along the axis, with axis `None`.
fn quantization_params(
    ctx: &mut NodeContext,
    x: TensorId,
    scale: TensorId,
    zero_point: Option<TensorId>,
) -> Result<(Option<usize>, TensorId, Option<TensorId>), ImportError> {
    let block_size = if ctx.version >= 21 { ctx.attrs.int("block_size", 0)? } else { 0 };
    if block_size < 0 {
        return Err(ctx.invalid(format!("block_size must not be negative, got {block_size}")));
    }
    if block_size == 0 {
        return Ok((quantization_axis(ctx, x, scale)?, scale, zero_point));
    }
    let axis = ctx.axis(ctx.attrs.int("axis", 1)?, ctx.rank(x))?;
    let length = ctx.dims(x)[axis]
        .fixed()
        .ok_or_else(|| ctx.unsupported("blocked quantization along an axis of run-time length"))?;
    if ctx.rank(scale) != ctx.rank(x) || ctx.dims(scale)[axis].fixed() != Some(length.div_ceil(block_size as usize)) {
        return Err(ctx.invalid(format!(
            "a blocked scale must have x's rank and ceil({length} / {block_size}) elements along axis {axis}, got {}",
            ctx.net.tensor(scale).shape
        )));
    }
    let blocks: Vec<i64> = (0..length as i64).map(|i| i / block_size).collect();
    let blocks = ctx.constant("block indices", HostTensor::from_i64(vec![length], blocks).expect("1-D"))?;
    let gather = LayerKind::Gather { mode: GatherMode::Default { axis } };
    let scale = ctx.add("scale per element", gather.clone(), &[scale, blocks])?;
    let zero_point = match zero_point {
        Some(zp) => Some(ctx.add("zero point per element", gather, &[zp, blocks])?),
        None => None,
    };
    Ok((None, scale, zero_point))
}

/// `None` for a per-tensor scale (0-D or one element), else the normalized `axis`.
fn quantization_axis(ctx: &NodeContext, x: TensorId, scale: TensorId) -> Result<Option<usize>, ImportError> {
    let per_tensor = match ctx.rank(scale) {
        0 => true,
        1 => ctx.dims(scale)[0].fixed() == Some(1),
        r => return Err(ctx.unsupported(format!("a rank-{r} scale (blocked quantization)"))),
    };
    if per_tensor {
        return Ok(None);
    }
    // Per-axis quantization came with opset 13; axis defaults to 1.
    Ok(Some(ctx.axis(ctx.attrs.int("axis", 1)?, ctx.rank(x))?))
}

fn quantize_linear(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let (x, scale) = (ctx.input(0)?, ctx.input(1)?);
    let zero_point = ctx.opt_input(2);
    let to = match zero_point {
        Some(zp) => ctx.dtype(zp),
        None => match ctx.attrs.opt_int("output_dtype")?.filter(|&c| c != 0 && ctx.version >= 21) {
            Some(code) => dtype_from_onnx(code as i32).map_err(|e| ctx.unsupported(e))?,
            None => DataType::U8,
        },
    };
    if !(to.is_integer() || to.is_narrow_float()) || to == DataType::F8E8M0 {
        return Err(ctx.unsupported(format!("quantizing to {to}")));
    }
    if to.is_narrow_float() && ctx.attrs.int("saturate", 1)? == 0 {
        return Err(ctx.unsupported(format!("saturate=0 when quantizing to {to}")));
    }
    let (axis, scale, zero_point) = quantization_params(ctx, x, scale, zero_point)?;
    // The scale may be of another float type than x (opset 19+); the kernel divides in x's.
    let scale = ctx.cast("scale cast", scale, ctx.dtype(x))?;
    one(ctx.add_opt("", LayerKind::Quantize { axis, to }, vec![Some(x), Some(scale), zero_point])?)
}

fn dequantize_linear(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let (x, scale) = (ctx.input(0)?, ctx.input(1)?);
    if !(ctx.dtype(x).is_integer() || ctx.dtype(x).is_narrow_float()) {
        return Err(ctx.unsupported(format!("dequantizing {}", ctx.dtype(x))));
    }
    let (axis, scale, zero_point) = quantization_params(ctx, x, scale, ctx.opt_input(2))?;
    let y = ctx.add_opt("", LayerKind::Dequantize { axis, to: None }, vec![Some(x), Some(scale), zero_point])?;
    match ctx.attrs.opt_int("output_dtype")?.filter(|&c| c != 0 && ctx.version >= 23) {
        Some(code) => {
            let to = dtype_from_onnx(code as i32).map_err(|e| ctx.unsupported(e))?;
            one(ctx.cast("output cast", y, to)?)
        }
        None => one(y),
    }
}

/// u8 quantization with a scale and zero point that cover `[min(x, 0), max(x, 0)]`.
fn dynamic_quantize_linear(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    if ctx.dtype(x) != DataType::F32 {
        return Err(ctx.unsupported(format!("DynamicQuantizeLinear on {}", ctx.dtype(x))));
    }
    let all: Vec<usize> = (0..ctx.rank(x)).collect();
    let low = reduce(ctx, "min", ReduceOp::Min, x, all.clone(), false)?;
    let low = with_scalar(ctx, "min with 0", E::Min, low, 0.0)?;
    let high = reduce(ctx, "max", ReduceOp::Max, x, all, false)?;
    let high = with_scalar(ctx, "max with 0", E::Max, high, 0.0)?;
    let range = binary(ctx, "range", E::Sub, high, low)?;
    let scale = with_scalar(ctx, "scale", E::Div, range, 255.0)?;
    let zero = ctx.scalar("zero", DataType::F32, 0.0)?;
    let shifted = binary(ctx, "negated min", E::Sub, zero, low)?;
    let zp = binary(ctx, "zero point real", E::Div, shifted, scale)?;
    let zp = with_scalar(ctx, "zero point floor", E::Max, zp, 0.0)?;
    let zp = with_scalar(ctx, "zero point ceil", E::Min, zp, 255.0)?;
    let zp = unary(ctx, "zero point rounded", UnaryOp::Round, zp)?;
    let zp = ctx.cast("zero point", zp, DataType::U8)?;
    let y = ctx.add("", LayerKind::Quantize { axis: None, to: DataType::U8 }, &[x, scale, zp])?;
    Ok(vec![y, scale, zp])
}

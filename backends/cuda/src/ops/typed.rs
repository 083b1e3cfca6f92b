//! Every kiln element type on the device (`kernels/typed.cu`): Cast / CastNarrow between any two
//! types, Quantize, Dequantize, BitCast, and Elementwise / Unary / Reduce on the integer types
//! and f64. Storage-only types (float8, e8m0, float4, 4- and 2-bit integers) live one element
//! per byte, as kiln's host tensors hold them, so uploads and downloads convert nothing.

use kiln::{invalid, DataType, E8M0Rounding, ElementwiseOp, KernelError, ReduceOp, UnaryOp};
use crate::ops::KResult;
use super::{broadcast_layout, Ctx};
use crate::buffer::{strides_in_order, Arg, DeviceTensor, Layout};
use std::sync::Arc;
use crate::sources::Source;

/// The integer types and f64: the types the `typed_binary_*` family computes on.
const COMPUTE_TYPES: [DataType; 9] = [
    DataType::I8,
    DataType::I16,
    DataType::I32,
    DataType::I64,
    DataType::U8,
    DataType::U16,
    DataType::U32,
    DataType::U64,
    DataType::F64,
];

/// The run-time type code of `typed.cu` (`T_*`): the position in [`DataType::ALL`].
pub fn type_code(dtype: DataType) -> i32 {
    DataType::ALL.iter().position(|&t| t == dtype).map_or(-1, |p| p as i32)
}

/// Every kernel of `typed.cu`, for the NVRTC test.
pub fn kernel_names() -> Vec<String> {
    let mut names: Vec<String> = [
        "typed_cast_any",
        "quant_quantize_any",
        "quant_dequantize_any",
        "quant_quantize_8bit",
        "quant_dequantize_8bit",
        "quant_quantize_8bit_x4",
        "quant_quantize_8bit_x16",
        "quant_quantize_narrow_x4",
        "quant_dequantize_8bit_x4",
        "quant_dequantize_8bit_x16",
        "quant_dequantize_8bit_view_x8",
        "quant_dequantize_8bit_view_x16",
        "quant_quantize_8bit_view_x8",
        "quant_quantize_8bit_view_x16",
        "quant_requantize",
        "quant_requantize_rows_x4",
        "typed_classify_any",
        "typed_not_bool",
        "typed_reduce_bool",
    ]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for t in COMPUTE_TYPES {
        for op in ["typed_binary", "typed_compare", "typed_unary", "typed_reduce"] {
            names.push(format!("{op}_{}", t.name()));
        }
    }
    names
}

fn computes(dtype: DataType) -> bool {
    COMPUTE_TYPES.contains(&dtype)
}

/// Whether the device stores `dtype` (every kiln type: the narrow ones one per byte).
pub fn stores(dtype: DataType) -> bool {
    type_code(dtype) >= 0 && crate::buffer::storage_size(dtype).is_ok()
}

/// Converts with Cast semantics (`saturate` / `rounding` apply to narrow float targets).
pub fn cast(cx: &Ctx, x: &DeviceTensor, to: DataType, saturate: bool, rounding: E8M0Rounding) -> KResult<DeviceTensor> {
    if !stores(x.dtype) || !stores(to) {
        return Err(invalid!("no CUDA cast from {} to {to}", x.dtype));
    }
    let out = cx.gpu.empty(to, x.shape.clone()).map_err(KernelError::from)?;
    let rounding = match rounding {
        E8M0Rounding::Up => 0,
        E8M0Rounding::Down => 1,
        E8M0Rounding::Nearest => 2,
    };
    let n = x.len();
    let args = [
        Arg::I32(type_code(x.dtype)),
        Arg::I32(type_code(to)),
        Arg::I32(saturate as i32),
        Arg::I32(rounding),
        Arg::I64(n as i64),
        cx.arg(x),
        cx.arg(&out),
    ];
    cx.launch_elements(Source::Typed.kernel("typed_cast_any"), n, &args)?;
    Ok(out)
}

/// The same bytes seen as another type of the same width (ONNX BitCast); bool targets are
/// checked to hold only 0 and 1 by a cast round trip.
pub fn bit_cast(cx: &Ctx, x: &DeviceTensor, to: DataType) -> KResult<DeviceTensor> {
    if x.dtype.size_bytes() != to.size_bytes() || !stores(x.dtype) || !stores(to) {
        return Err(invalid!("BitCast from {} to {to} changes the element width", x.dtype));
    }
    if to == DataType::Bool && x.dtype != DataType::Bool {
        // Any byte other than 0/1 is an error on the cpu; re-check on the host (rare path).
        let host = cx.gpu.download(x).map_err(KernelError::from)?;
        if host.data().to_le_bytes().iter().any(|&b| b > 1) {
            return Err(invalid!("BitCast to {to}: a byte is neither 0 nor 1"));
        }
    }
    Ok(DeviceTensor::new(Arc::clone(&x.buf), to, x.shape.clone()))
}

/// `saturate(round_half_even(x / scale) + zero_point)` into `to`.
pub fn quantize(
    cx: &Ctx,
    x: &DeviceTensor,
    scale: &DeviceTensor,
    zero_point: Option<&DeviceTensor>,
    axis: Option<usize>,
    to: DataType,
) -> KResult<DeviceTensor> {
    if !matches!(x.dtype, DataType::F32 | DataType::F16 | DataType::BF16 | DataType::F64) {
        return Err(invalid!("Quantize takes a float input, not {}", x.dtype));
    }
    if !(to.is_narrow() || (to.is_integer() && stores(to))) {
        return Err(invalid!("Quantize cannot produce {to}"));
    }
    let kiln::plan::quant::ParamIndex { inner, len } = kiln::plan::quant::ParamIndex::new(&x.shape, &scale.shape, axis)?;
    kiln::plan::quant::check_zero_point(scale.len(), zero_point.map(DeviceTensor::len))?;
    let out = cx.gpu.empty(to, x.shape.clone()).map_err(KernelError::from)?;
    let n = x.len();
    let eight_bit = to.is_8bit_integer() && short_float(x.dtype) && short_float(scale.dtype) && zero_point.is_none_or(|z| z.dtype.is_8bit_integer());
    // The x4 kernel takes the same operands with one size where the general one takes three.
    let codes = [type_code(x.dtype), type_code(scale.dtype), zero_point.map_or(-1, |z| type_code(z.dtype)), type_code(to)].map(Arg::I32);
    let pointers = [cx.arg(x), cx.arg(scale), zero_point.map_or(Arg::NULL, |z| cx.arg(z)), cx.arg(&out)];
    let float8 = matches!(to, DataType::F8E4M3FN | DataType::F8E4M3FNUZ | DataType::F8E5M2 | DataType::F8E5M2FNUZ);
    let narrow_float = float8 && short_float(x.dtype) && short_float(scale.dtype);
    // float8 runs four elements a thread (16 fit wherever 4 do).
    let lanes = per_tensor_lanes(cx, scale, x, &out).filter(|_| eight_bit || narrow_float).map(|l| if eight_bit { l } else { 4 });
    if let Some(lanes) = lanes {
        let vector = [&codes[..], &[Arg::I64((n / lanes) as i64)], &pointers].concat();
        let kernel = match (eight_bit, lanes) {
            (true, 16) => "quant_quantize_8bit_x16",
            (true, _) => "quant_quantize_8bit_x4",
            (false, _) => "quant_quantize_narrow_x4",
        };
        cx.launch_elements(Source::Typed.kernel(kernel), n / lanes, &vector)?;
        return Ok(out);
    }
    let args = [&codes[..], &[inner, len, n].map(|d| Arg::I64(d as i64)), &pointers].concat();
    cx.launch_elements(Source::Typed.kernel(if eight_bit { "quant_quantize_8bit" } else { "quant_quantize_any" }), n, &args)?;
    Ok(out)
}

/// How many elements per thread a Q/DQ with one scale for every element may run (16, else 4):
/// a length divisible by that many and both buffers aligned to that many elements; `None` where
/// neither fits.
fn per_tensor_lanes(cx: &Ctx, scale: &DeviceTensor, x: &DeviceTensor, out: &DeviceTensor) -> Option<usize> {
    let fits = |lanes: usize| x.len().is_multiple_of(lanes) && super::lane_aligned(cx, x, lanes) && super::lane_aligned(cx, out, lanes);
    (scale.len() == 1).then(|| [16, 4].into_iter().find(|&l| fits(l))).flatten()
}

/// The order (outermost axis first) a per-element layer writes a view of `shape` packed in where
/// it reads the view through `strides`: the view's own axis order, except that the axis stored
/// contiguously becomes the innermost (a transposed key's head dim), so each run of the output
/// reads a contiguous run of the input.
pub fn inner_contiguous_order(shape: &[usize], strides: &[i64]) -> Option<Vec<usize>> {
    let inner = (0..shape.len()).rev().find(|&a| strides.get(a) == Some(&1) && shape[a] > 1)?;
    Some((0..shape.len()).filter(|&a| a != inner).chain([inner]).collect())
}

/// The view kernels' layout of `x` read in `order` (its last axis counted in runs of 16
/// elements a thread, else 8: `quant_*_8bit_view_x16` / `_x8`), and that run: `None` where they
/// do not apply (that axis not contiguous or not a multiple of the run, a run not aligned, a
/// negative stride, more dims than a Layout holds).
fn view_runs(cx: &Ctx, x: &DeviceTensor, order: &[usize]) -> Option<(Layout, usize)> {
    let strides = x.element_strides();
    let r = x.shape.len();
    let &inner = order.last()?;
    if strides[inner] != 1 || r > 8 || order.len() != r || x.is_empty() {
        return None;
    }
    let fits = |lanes: usize| {
        x.shape[inner].is_multiple_of(lanes)
            && order.iter().all(|&a| x.shape[a] == 1 || (strides[a] >= 0 && (a == inner || strides[a] % lanes as i64 == 0)))
            && super::lane_aligned(cx, x, lanes)
    };
    let lanes = [16, 8].into_iter().find(|&l| fits(l))?;
    let mut l = Layout { rank: r as i32, ..Layout::default() };
    for (d, &a) in order.iter().enumerate() {
        (l.shape[d], l.stride[0][d]) = (x.shape[a] as i64, strides[a]);
    }
    (l.shape[r - 1], l.stride[0][r - 1]) = (l.shape[r - 1] / lanes as i64, lanes as i64);
    Some((l, lanes))
}

/// A packed output of `x`'s shape in `order`, seen in `x`'s axis order.
fn empty_in_order(cx: &Ctx, dtype: DataType, x: &DeviceTensor, order: &[usize]) -> KResult<DeviceTensor> {
    let out = cx.gpu.empty(dtype, x.shape.clone()).map_err(KernelError::from)?;
    let row_major = order.iter().enumerate().all(|(i, &a)| i == a);
    Ok(DeviceTensor { strides: (!row_major).then(|| strides_in_order(&x.shape, order)), ..out })
}

/// Per-tensor 8-bit DequantizeLinear of the view `x`, read through its strides and written
/// packed in `order` ([`inner_contiguous_order`]): one pass where packing the bytes first
/// took two. `None` where the view kernel does not apply (the caller dequantizes as before).
pub fn dequantize_view(cx: &Ctx, x: &DeviceTensor, scale: &DeviceTensor, zero_point: Option<&DeviceTensor>, to: Option<DataType>, order: &[usize]) -> KResult<Option<DeviceTensor>> {
    let out_type = to.unwrap_or(scale.dtype);
    let applies = x.dtype.is_8bit_integer()
        && scale.len() == 1
        && scale.dtype == DataType::F32
        && short_float(out_type)
        && zero_point.is_none_or(|z| z.dtype == x.dtype && z.len() == 1);
    let codes = [x.dtype, scale.dtype, out_type].map(type_code);
    match applies {
        true => view_pass(cx, "quant_dequantize_8bit_view", &codes, (x, scale, zero_point), out_type, order),
        false => Ok(None),
    }
}

/// Per-tensor 8-bit QuantizeLinear of the view `x` (f32, f16 or bf16), read through its strides
/// and written packed in `order`; `None` where the view kernel does not apply.
pub fn quantize_view(cx: &Ctx, x: &DeviceTensor, scale: &DeviceTensor, zero_point: Option<&DeviceTensor>, to: DataType, order: &[usize]) -> KResult<Option<DeviceTensor>> {
    let applies = to.is_8bit_integer()
        && short_float(x.dtype)
        && scale.len() == 1
        && short_float(scale.dtype)
        && zero_point.is_none_or(|z| z.dtype.is_8bit_integer() && z.len() == 1);
    let codes = [type_code(x.dtype), type_code(scale.dtype), zero_point.map_or(-1, |z| type_code(z.dtype)), type_code(to)];
    match applies {
        true => view_pass(cx, "quant_quantize_8bit_view", &codes, (x, scale, zero_point), to, order),
        false => Ok(None),
    }
}

/// `{kernel}_x{lanes}(codes…, runs, layout, x, scale, zero point, out)` over the view `x`,
/// written packed in `order` as `out_type`; `None` where the view kernels do not apply.
fn view_pass(
    cx: &Ctx,
    kernel: &str,
    codes: &[i32],
    (x, scale, zero_point): (&DeviceTensor, &DeviceTensor, Option<&DeviceTensor>),
    out_type: DataType,
    order: &[usize],
) -> KResult<Option<DeviceTensor>> {
    let Some((l, lanes)) = view_runs(cx, x, order) else { return Ok(None) };
    let out = empty_in_order(cx, out_type, x, order)?;
    let runs = x.len() / lanes;
    let mut args: Vec<Arg> = codes.iter().map(|&c| Arg::I32(c)).collect();
    args.extend([Arg::I64(runs as i64), Arg::Layout(l), cx.arg(x), cx.arg(scale), zero_point.map_or(Arg::NULL, |z| cx.arg(z)), cx.arg(&out)]);
    cx.launch_elements(Source::Typed.kernel(format!("{kernel}_x{lanes}")), runs, &args)?;
    Ok(Some(out))
}

/// f32, f16 or bf16: the types whose Q/DQ arithmetic is f32 (the 8-bit kernels' float side).
fn short_float(t: DataType) -> bool {
    matches!(t, DataType::F32 | DataType::F16 | DataType::BF16)
}

/// `(x - zero_point) * scale` in the scale's type.
pub fn dequantize(
    cx: &Ctx,
    x: &DeviceTensor,
    scale: &DeviceTensor,
    zero_point: Option<&DeviceTensor>,
    axis: Option<usize>,
    to: Option<DataType>,
) -> KResult<DeviceTensor> {
    if !stores(x.dtype) || x.dtype.is_float() || x.dtype == DataType::Bool {
        return Err(invalid!("Dequantize takes an integer or narrow float input, not {}", x.dtype));
    }
    if !matches!(scale.dtype, DataType::F32 | DataType::F16 | DataType::BF16 | DataType::F64) {
        return Err(invalid!("Dequantize's scale must be a float type, not {}", scale.dtype));
    }
    let kiln::plan::quant::ParamIndex { inner, len } = kiln::plan::quant::ParamIndex::new(&x.shape, &scale.shape, axis)?;
    kiln::plan::quant::check_zero_point(scale.len(), zero_point.map(DeviceTensor::len))?;
    if let Some(z) = zero_point {
        if z.dtype != x.dtype {
            return Err(invalid!("zero point must be {} like the input, not {}", x.dtype, z.dtype));
        }
    }
    let eight_bit = x.dtype.is_8bit_integer() && short_float(scale.dtype);
    // Another output type: the 8-bit kernels store their f32 value in it, one rounding as a
    // Cast of the f32 output would make; elsewhere the scale's type is cast after.
    let out_type = match to {
        Some(t) if t != scale.dtype && !(eight_bit && scale.dtype == DataType::F32) => {
            let wide = dequantize(cx, x, scale, zero_point, axis, None)?;
            return super::pointwise::cast(cx, &wide, t);
        }
        t => t.unwrap_or(scale.dtype),
    };
    let out = cx.gpu.empty(out_type, x.shape.clone()).map_err(KernelError::from)?;
    let n = x.len();
    let codes = [type_code(x.dtype), type_code(scale.dtype), type_code(out_type)].map(Arg::I32);
    let pointers = [cx.arg(x), cx.arg(scale), zero_point.map_or(Arg::NULL, |z| cx.arg(z)), cx.arg(&out)];
    if let Some(lanes) = per_tensor_lanes(cx, scale, x, &out).filter(|_| eight_bit) {
        let vector = [&codes[..], &[Arg::I64((n / lanes) as i64)], &pointers].concat();
        let kernel = if lanes == 16 { "quant_dequantize_8bit_x16" } else { "quant_dequantize_8bit_x4" };
        cx.launch_elements(Source::Typed.kernel(kernel), n / lanes, &vector)?;
        return Ok(out);
    }
    let args = [&codes[..], &[inner, len, n].map(|d| Arg::I64(d as i64)), &pointers].concat();
    cx.launch_elements(Source::Typed.kernel(if eight_bit { "quant_dequantize_8bit" } else { "quant_dequantize_any" }), n, &args)?;
    Ok(out)
}

/// The `typed.cu` op code of an elementwise op (its `OP_*` defines).
fn binary_code(op: ElementwiseOp) -> i32 {
    use ElementwiseOp as E;
    match op {
        E::Sum => 0,
        E::Sub => 1,
        E::Prod => 2,
        E::Div => 3,
        E::Pow => 4,
        E::Max => 5,
        E::Min => 6,
        E::Equal => 7,
        E::Greater => 8,
        E::Less => 9,
        E::GreaterOrEqual => 10,
        E::LessOrEqual => 11,
        E::FloorDiv => 15,
        E::Mod => 16,
        E::Fmod => 17,
        E::BitAnd => 18,
        E::BitOr => 19,
        E::BitXor => 20,
        E::ShiftLeft => 21,
        E::ShiftRight => 22,
        E::And | E::Or | E::Xor => -1,
    }
}

/// Whether `op` on `dtype` runs here (integers: every arithmetic, bitwise and comparison op;
/// f64: arithmetic and comparisons).
pub fn binary_supported(op: ElementwiseOp, dtype: DataType) -> bool {
    if !computes(dtype) || op.is_logical() {
        return false;
    }
    !(dtype == DataType::F64 && op.is_bitwise())
}

/// `out = a op b` on integers or f64, broadcasting; integer division by zero is an error
/// (read back at the end of the run, as the cpu backend reports it).
pub fn binary(cx: &Ctx, op: ElementwiseOp, a: &DeviceTensor, b: &DeviceTensor, out_dtype: DataType, out_shape: &[usize]) -> KResult<DeviceTensor> {
    if !binary_supported(op, a.dtype) {
        return Err(invalid!("{op:?} on {} has no CUDA kernel", a.dtype));
    }
    let out = cx.gpu.empty(out_dtype, out_shape.to_vec()).map_err(KernelError::from)?;
    let layout = broadcast_layout(out_shape, &[&a.shape, &b.shape])?;
    let n = out.len();
    let suffix = a.dtype.name();
    let code = binary_code(op);
    if op.is_comparison() {
        let args = [Arg::I32(code), Arg::I64(n as i64), Arg::Layout(layout), cx.arg(a), cx.arg(b), cx.arg(&out)];
        cx.launch_elements(Source::Typed.kernel(format!("typed_compare_{suffix}")), n, &args)?;
        return Ok(out);
    }
    let divides = matches!(op, ElementwiseOp::Div | ElementwiseOp::FloorDiv | ElementwiseOp::Mod | ElementwiseOp::Fmod | ElementwiseOp::Pow);
    let flag = if divides && a.dtype != DataType::F64 { Some(super::zeros(cx, cx.gpu.empty(DataType::I32, vec![1]).map_err(KernelError::from)?)?) } else { None };
    let args = [
        Arg::I32(code),
        Arg::I64(n as i64),
        Arg::Layout(layout),
        cx.arg(a),
        cx.arg(b),
        cx.arg(&out),
        flag.as_ref().map_or(Arg::NULL, |f| cx.arg(f)),
    ];
    cx.launch_elements(Source::Typed.kernel(format!("typed_binary_{suffix}")), n, &args)?;
    if let Some(flag) = flag {
        cx.defer_check(flag, "integer division by zero".into());
    }
    Ok(out)
}

/// Whether Unary `op` on `dtype` runs here.
pub fn unary_supported(op: UnaryOp, dtype: DataType) -> bool {
    match op {
        UnaryOp::Not => dtype == DataType::Bool || (dtype.is_integer() && computes(dtype)),
        UnaryOp::IsNan | UnaryOp::IsInf { .. } => matches!(dtype, DataType::F32 | DataType::F16 | DataType::BF16 | DataType::F64),
        UnaryOp::Abs | UnaryOp::Neg | UnaryOp::Sign => computes(dtype),
        _ => dtype == DataType::F64 && super::pointwise::unary_code(op).is_some(),
    }
}

/// Unary `op` on integers, f64 or bool (Not), and IsNaN / IsInf on every float type.
pub fn unary(cx: &Ctx, op: UnaryOp, x: &DeviceTensor) -> KResult<DeviceTensor> {
    if !unary_supported(op, x.dtype) {
        return Err(invalid!("Unary {op:?} on {} has no CUDA kernel", x.dtype));
    }
    let n = x.len();
    let classify = match op {
        UnaryOp::IsNan => Some(0),
        UnaryOp::IsInf { detect_positive: true, detect_negative: true } => Some(1),
        UnaryOp::IsInf { detect_positive: true, detect_negative: false } => Some(2),
        UnaryOp::IsInf { detect_positive: false, detect_negative: true } => Some(3),
        UnaryOp::IsInf { .. } => Some(4),
        _ => None,
    };
    if let Some(code) = classify {
        let out = cx.gpu.empty(DataType::Bool, x.shape.clone()).map_err(KernelError::from)?;
        let args = [Arg::I32(type_code(x.dtype)), Arg::I32(code), Arg::I64(n as i64), cx.arg(x), cx.arg(&out)];
        cx.launch_elements(Source::Typed.kernel("typed_classify_any"), n, &args)?;
        return Ok(out);
    }
    let out = cx.gpu.empty(x.dtype, x.shape.clone()).map_err(KernelError::from)?;
    if x.dtype == DataType::Bool {
        cx.launch_elements(Source::Typed.kernel("typed_not_bool"), n, &[Arg::I64(n as i64), cx.arg(x), cx.arg(&out)])?;
        return Ok(out);
    }
    let code = if op == UnaryOp::Not { 60 } else { super::pointwise::unary_code(op).map_or(-1, |c| c.0) };
    let args = [Arg::I32(code), Arg::F32(0.0), Arg::F32(0.0), Arg::I64(n as i64), cx.arg(x), cx.arg(&out)];
    cx.launch_elements(Source::Typed.kernel(format!("typed_unary_{}", x.dtype.name())), n, &args)?;
    Ok(out)
}

/// Whether Reduce on `dtype` runs here (every op on the integer types and f64; Max and Min,
/// "any" and "all", on bool).
pub fn reduce_supported(dtype: DataType) -> bool {
    computes(dtype) || dtype == DataType::Bool
}

/// Reduce over the contiguous run `[outer, len, inner]` (the caller moves the axes there).
pub fn reduce_rows(cx: &Ctx, code: i32, op: ReduceOp, src: &DeviceTensor, (outer, len, inner): (usize, usize, usize), out_shape: &[usize]) -> KResult<DeviceTensor> {
    if !reduce_supported(src.dtype) {
        return Err(invalid!("Reduce on {} has no CUDA kernel", src.dtype));
    }
    if src.dtype == DataType::Bool && !matches!(op, ReduceOp::Max | ReduceOp::Min) {
        return Err(invalid!("Reduce {op:?} is not defined on bool"));
    }
    if op == ReduceOp::Mean && len == 0 && src.dtype.is_integer() {
        return Err("integer mean over zero elements divides by zero".into());
    }
    let out = cx.gpu.empty(src.dtype, out_shape.to_vec()).map_err(KernelError::from)?;
    let rows = outer * inner;
    let args = [Arg::I32(code), Arg::I64(outer as i64), Arg::I64(len as i64), Arg::I64(inner as i64), cx.arg(src), cx.arg(&out)];
    cx.launch_elements(Source::Typed.kernel(format!("typed_reduce_{}", src.dtype.name())), rows, &args)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::inner_contiguous_order;

    #[test]
    fn a_view_is_written_in_its_own_order_with_its_contiguous_axis_innermost() {
        // Queries [b, h, s, d] viewed in a [b, s, h, d] projection: their own order.
        assert_eq!(inner_contiguous_order(&[2, 3, 40, 16], &[1920, 16, 48, 1]), Some(vec![0, 1, 2, 3]));
        // Transposed keys [b, h, d, s] of the same projection: the head dim moves innermost, so
        // the keys come out as rows [b, h, s, d].
        assert_eq!(inner_contiguous_order(&[2, 3, 16, 40], &[1920, 16, 1, 48]), Some(vec![0, 1, 3, 2]));
        // An axis of one element is never the contiguous one; no contiguous axis, no order.
        assert_eq!(inner_contiguous_order(&[4, 1], &[2, 1]), None);
        assert_eq!(inner_contiguous_order(&[4, 6], &[12, 2]), None);
    }
}

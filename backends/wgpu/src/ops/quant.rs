//! ONNX QuantizeLinear / DequantizeLinear between floats and 8/16/32-bit integers, per
//! tensor, per axis or per element (blocked scales expanded by the importer). fp8 and
//! 4/2-bit types have no device storage yet and are refused before they get here.

use super::{count_word, output, KResult};
use crate::shaders::Instance;
use crate::value::{DeviceTensor, Packing, Recorder};
use kiln::{DataType, MatrixOp};

fn check_zero_point(scale: &DeviceTensor, zero_point: Option<&DeviceTensor>) -> KResult<()> {
    Ok(kiln::plan::quant::check_zero_point(scale.len(), zero_point.map(DeviceTensor::len))?)
}

/// The representable range of a quantized integer type, as i32 words.
fn range(to: DataType) -> KResult<(i32, i32)> {
    Ok(match to {
        DataType::I8 => (i8::MIN.into(), i8::MAX.into()),
        DataType::U8 => (0, u8::MAX.into()),
        DataType::I16 => (i16::MIN.into(), i16::MAX.into()),
        DataType::U16 => (0, u16::MAX.into()),
        DataType::I32 => (i32::MIN, i32::MAX),
        other => return Err(kiln::invalid!("Quantize to {other} has no WGSL kernel (8/16-bit integers and i32 only)")),
    })
}

/// `saturate(round_half_even(x / scale) + zero_point)` into the integer type `to`.
pub fn quantize(
    rec: &Recorder,
    x: &DeviceTensor,
    scale: &DeviceTensor,
    zero_point: Option<&DeviceTensor>,
    axis: Option<usize>,
    to: DataType,
) -> KResult<DeviceTensor> {
    let (qmin, qmax) = range(to)?;
    if !x.dtype.is_float() || !scale.dtype.is_float() {
        return Err(kiln::invalid!("Quantize of {} by a {} scale: both must be floats", x.dtype, scale.dtype));
    }
    check_zero_point(scale, zero_point)?;
    let kiln::plan::quant::ParamIndex { inner, len } = kiln::plan::quant::ParamIndex::new(&x.shape, &scale.shape, axis)?;
    let out = output(rec, to, &x.shape)?;
    let params = [
        count_word(out.len())?,
        count_word(inner)?,
        count_word(len)?,
        qmin as u32,
        qmax as u32,
        u32::from(zero_point.is_some()),
    ];
    // Without a zero point the binding still needs a buffer: the scale stands in, unread.
    let zp = zero_point.unwrap_or(scale);
    rec.dispatch_1d(
        &Instance::plain("quantize"),
        &params,
        &[&x.buffer, &scale.buffer, &zp.buffer, &out.buffer],
        out.len(),
    )
    .map_err(kiln::KernelError::from)?;
    Ok(out)
}

/// `(x - zero_point) * scale` in the scale's float type.
pub fn dequantize(
    rec: &Recorder,
    x: &DeviceTensor,
    scale: &DeviceTensor,
    zero_point: Option<&DeviceTensor>,
    axis: Option<usize>,
    out_dtype: DataType,
) -> KResult<DeviceTensor> {
    let unsigned = match x.dtype {
        DataType::I8 | DataType::I16 | DataType::I32 => false,
        DataType::U8 | DataType::U16 | DataType::U32 => true,
        other => return Err(kiln::invalid!("Dequantize of {other} has no WGSL kernel (8/16/32-bit integers only)")),
    };
    if !scale.dtype.is_float() {
        return Err(kiln::invalid!("Dequantize's scale must be a float, not {}", scale.dtype));
    }
    if let Some(z) = zero_point.filter(|z| z.dtype != x.dtype) {
        return Err(kiln::invalid!("zero point must be {} like the input, not {}", x.dtype, z.dtype));
    }
    check_zero_point(scale, zero_point)?;
    let kiln::plan::quant::ParamIndex { inner, len } = kiln::plan::quant::ParamIndex::new(&x.shape, &scale.shape, axis)?;
    let out = output(rec, out_dtype, &x.shape)?;
    let params = [
        count_word(out.len())?,
        count_word(inner)?,
        count_word(len)?,
        u32::from(unsigned),
        u32::from(zero_point.is_some()),
    ];
    let zp = zero_point.unwrap_or(scale);
    rec.dispatch_1d(
        &Instance::plain("dequantize"),
        &params,
        &[&x.buffer, &scale.buffer, &zp.buffer, &out.buffer],
        out.len(),
    )
    .map_err(kiln::KernelError::from)?;
    super::pointwise::narrow(rec, out)
}

/// Products run by [`packed_product`] in this process (what tests check the path ran by).
static PACKED_PRODUCTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many int8 products this process ran with `dot4I8Packed`.
pub fn packed_products() -> u64 {
    PACKED_PRODUCTS.load(std::sync::atomic::Ordering::Relaxed)
}

/// The int32 sums of a symmetric int8 product `x · op_b(w)` (x row-major `[.., m, k]`, w a
/// `[k, n]` or transposed `[n, k]` matrix, k a multiple of 4) with `dot4I8Packed`: both
/// operands packed four values to a word along k, then one pass of four-wide dot products.
/// None where the product is not of that form or the adapter lacks the built-in.
fn packed_product(rec: &Recorder, x: &DeviceTensor, op_a: MatrixOp, w: &DeviceTensor, op_b: MatrixOp, shape: &[usize], symmetric: bool) -> KResult<Option<DeviceTensor>> {
    let int8 = x.dtype == DataType::I8 && w.dtype == DataType::I8 && x.packing == Packing::Word && w.packing == Packing::Word;
    let (&[rows_w, cols_w], Some(&k)) = (&w.shape[..], x.shape.last()) else { return Ok(None) };
    let (n, w_strides) = match op_b {
        MatrixOp::None if rows_w == k => (cols_w, (1, cols_w)),
        MatrixOp::Transpose if cols_w == k => (rows_w, (k, 1)),
        _ => return Ok(None),
    };
    let m = x.len().checked_div(k).unwrap_or(0);
    let fits = shape.iter().product::<usize>() == m * n && m * n > 0;
    if !rec.gpu.packed_dot || !symmetric || !int8 || op_a != MatrixOp::None || !k.is_multiple_of(4) || !fits {
        return Ok(None);
    }
    let pack = |t: &DeviceTensor, rows: usize, (row_stride, col_stride): (usize, usize)| -> KResult<DeviceTensor> {
        let out = output(rec, DataType::I32, &[rows, k / 4])?;
        let params = [count_word(out.len())?, count_word(k / 4)?, count_word(row_stride)?, count_word(col_stride)?];
        rec.dispatch_1d(&Instance::plain("pack_i8x4"), &params, &[&t.buffer, &out.buffer], out.len()).map_err(kiln::KernelError::from)?;
        Ok(out)
    };
    let (xp, wp) = (pack(x, m, (k, 1))?, pack(w, n, w_strides)?);
    let out = output(rec, DataType::I32, shape)?;
    let params = [count_word(m * n)?, count_word(n)?, count_word(k / 4)?];
    rec.dispatch_1d(&Instance::plain("dot_i8x4"), &params, &[&xp.buffer, &wp.buffer, &out.buffer], m * n).map_err(kiln::KernelError::from)?;
    PACKED_PRODUCTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(Some(out))
}

/// The host-side values of an integer layer (kiln::QuantizedParams): its scales and the
/// zero points of x and y.
#[derive(Clone, Debug)]
pub struct QuantizedScales {
    pub x_scale: f32,
    pub x_zero: i64,
    pub w_scale: Vec<f32>,
    /// One output scale, or one per channel (sibling products side by side); empty: none.
    pub y_scale: Vec<f32>,
    pub y_zero: i64,
}

/// An integer layer: `x − x_zero` and `w − w_zero` as i32, their exact sum by the i32
/// convolution or product (an int32 bias added to it), then the f32 requantization of the
/// cpu backend (kiln's oracle), per output channel, with the f32 residual added where there is
/// one.
#[allow(clippy::too_many_arguments)]
pub fn quantized(
    rec: &Recorder,
    p: &kiln::QuantizedParams,
    x: &DeviceTensor,
    w: &DeviceTensor,
    bias: Option<&DeviceTensor>,
    w_zero: Option<&DeviceTensor>,
    residual: Option<&DeviceTensor>,
    scales: &QuantizedScales,
    shape: &[usize],
) -> KResult<DeviceTensor> {
    use super::pointwise;
    use crate::wgsl::CastMode;
    use kiln::{ElementwiseOp, QuantizedAnchor};
    let as_i32 = |t: &DeviceTensor| pointwise::cast(rec, t, DataType::I32, CastMode::default());
    let minus = |t: DeviceTensor, zero: DeviceTensor| pointwise::binary(rec, ElementwiseOp::Sub, &t, &zero, &t.shape.clone(), DataType::I32);
    // x and w as int32 less their zero points: the operands of every path but the packed one,
    // made only where it is needed.
    let centered = || -> KResult<(DeviceTensor, DeviceTensor)> {
        let mut xi = as_i32(x)?;
        if scales.x_zero != 0 {
            let zero = pointwise::fill(rec, DataType::I32, &[1], scales.x_zero as i32 as u32)?;
            xi = minus(xi, zero)?;
        }
        let mut wi = as_i32(w)?;
        if let Some(z) = w_zero {
            // One zero point per output channel, broadcast along the weights' channel axis.
            let axis = p.anchor.weight_channel_axis(w.shape.len());
            let mut zero = as_i32(z)?;
            if zero.len() > 1 {
                zero.shape = (0..w.shape.len()).map(|d| if d == axis { zero.len() } else { 1 }).collect();
            }
            wi = minus(wi, zero)?;
        }
        Ok((xi, wi))
    };
    let int_bias = bias.filter(|b| b.dtype == DataType::I32);
    let float_bias = bias.filter(|b| b.dtype != DataType::I32);
    let acc = match &p.anchor {
        QuantizedAnchor::Convolution(c) => {
            let (xi, wi) = centered()?;
            super::linalg::convolution(rec, c, &xi, &wi, int_bias, shape)?
        }
        QuantizedAnchor::MatrixMultiply { op_a, op_b } => {
            let symmetric = scales.x_zero == 0 && w_zero.is_none();
            let product = match packed_product(rec, x, *op_a, w, *op_b, shape, symmetric)? {
                Some(sums) => sums,
                None => {
                    let (xi, wi) = centered()?;
                    super::linalg::matmul(rec, &xi, *op_a, &wi, *op_b, shape, DataType::I32)?
                }
            };
            match int_bias {
                Some(b) => pointwise::binary(rec, ElementwiseOp::Sum, &product, b, shape, DataType::I32)?,
                None => product,
            }
        }
    };
    if p.sums_output() {
        return Ok(acc);
    }
    let kiln::plan::quant::ParamIndex { inner, len: channels } = kiln::plan::quant::ParamIndex::output_channels(p, shape);
    let quantized = p.quantized_output();
    // The same f32 operations as the cpu backend.
    let scale = p.channel_scales(scales.x_scale, &scales.w_scale, &scales.y_scale, float_bias.is_some() || residual.is_some()).map_err(|e| kiln::invalid!("{e}"))?;
    if let Some(r) = residual.filter(|r| r.dtype != DataType::F32 || r.len() != shape.iter().product::<usize>()) {
        return Err(kiln::invalid!("the residual must be f32 of the output's {shape:?}, not {} of {:?}", r.dtype, r.shape));
    }
    let (qmin, qmax) = if quantized { range(p.output)? } else { (0, 0) };
    let scale_t = rec.upload(&kiln::HostTensor::from_f32(vec![scale.len()], scale.to_vec()).map_err(kiln::KernelError::from)?)?;
    let float_bias = float_bias.map(|b| pointwise::cast(rec, b, DataType::F32, CastMode::default())).transpose()?;
    let out = output(rec, p.output, shape)?;
    let params = [
        count_word(out.len())?,
        count_word(inner)?,
        count_word(channels)?,
        u32::from(quantized),
        u32::from(p.relu),
        u32::from(float_bias.is_some()),
        scales.y_zero as i32 as u32,
        qmin as u32,
        qmax as u32,
        kiln::QuantizedParams::divided_output_scale(&scales.y_scale).to_bits(),
        u32::from(scale.len() > 1),
        u32::from(float_bias.as_ref().is_some_and(|b| b.len() > 1)),
        u32::from(residual.is_some()),
    ];
    // Absent operands bind the scale buffer, never read.
    let bias_buffer = float_bias.as_ref().map_or(&scale_t.buffer, |b| &b.buffer);
    let residual_buffer = residual.map_or(&scale_t.buffer, |r| &r.buffer);
    let buffers: [&crate::arena::Block; 5] = [&acc.buffer, &scale_t.buffer, bias_buffer, residual_buffer, &out.buffer];
    rec.dispatch_1d(&Instance::plain("requantize"), &params, &buffers, out.len())
        .map_err(kiln::KernelError::from)?;
    // An f16 / bf16 output: the f32 value rounded once, as the Cast it stands for.
    if quantized {
        return Ok(out);
    }
    pointwise::narrow(rec, out)
}

/// The levels `y` looked up in their output channel's row of `table` (`[channels, 256]` of
/// `to`), as kiln::QuantizedParams::lookup defines.
pub fn looked_up(rec: &Recorder, p: &kiln::QuantizedParams, y: &DeviceTensor, table: &DeviceTensor, to: DataType) -> KResult<DeviceTensor> {
    let kiln::plan::quant::ParamIndex { inner, len: channels } = kiln::plan::quant::ParamIndex::output_channels(p, &y.shape);
    if table.dtype != to || table.len() != channels * kiln::QuantizedParams::LOOKUP_ROW {
        return Err(kiln::invalid!("the lookup table is {}{:?}, not {to} of [{channels}, 256]", table.dtype, table.shape));
    }
    let out = output(rec, to, &y.shape)?;
    let params = [count_word(out.len())?, count_word(inner)?, count_word(channels)?];
    rec.dispatch_1d(&Instance::plain("lookup_levels"), &params, &[&y.buffer, &table.buffer, &out.buffer], out.len()).map_err(kiln::KernelError::from)?;
    Ok(out)
}

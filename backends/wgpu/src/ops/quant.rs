//! ONNX QuantizeLinear / DequantizeLinear between floats and 8/16/32-bit integers, per
//! tensor, per axis or per element (blocked scales expanded by the importer). fp8 and
//! 4/2-bit types have no device storage yet and are refused before they get here.

use super::{count_word, output, KResult};
use crate::shaders::Instance;
use crate::value::{DeviceTensor, Recorder};
use kiln::DataType;

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

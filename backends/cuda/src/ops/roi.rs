//! RoiAlign on the device (`kernels/roi_align.cu`), as kiln-cpu's `roi.rs`; the spec and the
//! input checks are `kiln::plan::roi`'s.

use kiln::plan::roi::RoiAlignSpec;
use kiln::{invalid, DataType, KernelError};
use crate::ops::KResult;
use super::Ctx;
use crate::buffer::{Arg, DeviceTensor};
use crate::sources::Source;

/// RoiAlign of `x` (N, C, H, W) over `rois` (R, 4) of images `batch_indices` (R):
/// (R, C, out_h, out_w). A batch index out of range is an error (read back at the end of the run).
pub fn roi_align(cx: &Ctx, x: &DeviceTensor, rois: &DeviceTensor, batch_indices: &DeviceTensor, spec: &RoiAlignSpec) -> KResult<DeviceTensor> {
    let suffix = super::float64_suffix(x.dtype, "RoiAlign")?;
    if !rois.dtype.is_float() || !batch_indices.dtype.is_integer() {
        return Err(invalid!(
            "RoiAlign takes float rois and integer batch indices, not {} and {}",
            rois.dtype, batch_indices.dtype
        ));
    }
    let count = batch_indices.len();
    let [batch, channels, height, width] = kiln::plan::roi::image(&x.shape, rois.len(), count)?;
    let RoiAlignSpec { max, output_size, sampling_ratio, spatial_scale, half_pixel } = *spec;
    let [out_h, out_w] = output_size;
    let out = cx.gpu.empty(x.dtype, vec![count, channels, out_h, out_w]).map_err(KernelError::from)?;
    let total = out.len();
    if total == 0 {
        return Ok(out);
    }
    // The cpu reads rois as f64 and indices as i64: exact conversions on the device.
    let rois = super::typed::cast(cx, rois, DataType::F64, true, kiln::E8M0Rounding::Up)?;
    let indices = if batch_indices.dtype == DataType::I64 {
        batch_indices.clone()
    } else {
        super::typed::cast(cx, batch_indices, DataType::I64, true, kiln::E8M0Rounding::Up)?
    };
    let flag = super::zeros(cx, cx.gpu.empty(DataType::I32, vec![1]).map_err(KernelError::from)?)?;
    let args = [
        Arg::I64(total as i64),
        Arg::I64(batch as i64),
        Arg::I64(channels as i64),
        Arg::I64(height as i64),
        Arg::I64(width as i64),
        Arg::I64(out_h as i64),
        Arg::I64(out_w as i64),
        Arg::I64(i64::try_from(sampling_ratio).map_err(|_| "RoiAlign sampling ratio is too large")?),
        Arg::I64((spatial_scale as f64).to_bits() as i64),
        Arg::I32(half_pixel as i32),
        Arg::I32(max as i32),
        cx.arg(x),
        cx.arg(&rois),
        cx.arg(&indices),
        cx.arg(&out),
        cx.arg(&flag),
    ];
    cx.launch_elements(Source::RoiAlign.kernel(format!("roi_align_{suffix}")), total, &args)?;
    cx.defer_check(flag, "RoiAlign batch index is out of range".into());
    Ok(out)
}

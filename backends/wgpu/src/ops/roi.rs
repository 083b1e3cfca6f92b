//! ONNX RoiAlign on the device. (NonMaxSuppression's output length depends on the data: it
//! runs on host copies of its inputs, in kiln core's `plan::nms`.)

use super::{count_word, output, KResult};
use crate::shaders::Instance;
use crate::value::{DeviceTensor, Recorder};
use kiln::plan::roi::{image, RoiAlignSpec};
use kiln::DataType;

/// Pools each region of `x` `(N, C, H, W)` named by `rois` `(R, 4)` and `batch_indices` `(R)`.
pub fn roi_align(
    rec: &Recorder,
    x: &DeviceTensor,
    rois: &DeviceTensor,
    batch_indices: &DeviceTensor,
    spec: &RoiAlignSpec,
) -> KResult<DeviceTensor> {
    let count = batch_indices.len();
    let [batch, channels, height, width] = image(&x.shape, rois.len(), count)?;
    if !x.dtype.is_float() || !rois.dtype.is_float() {
        return Err(kiln::invalid!("the WGSL RoiAlign kernel pools floats only, not {} at {} rois", x.dtype, rois.dtype));
    }
    if !matches!(batch_indices.dtype, DataType::I32 | DataType::I64) {
        return Err(kiln::invalid!("RoiAlign batch_indices must be i32 or i64, not {}", batch_indices.dtype));
    }
    let [out_h, out_w] = spec.output_size;
    let out = output(rec, x.dtype, &[count, channels, out_h, out_w])?;
    let params = [
        count_word(out.len())?,
        count_word(channels.max(1))?,
        count_word(height)?,
        count_word(width)?,
        count_word(out_h.max(1))?,
        count_word(out_w.max(1))?,
        count_word(spec.sampling_ratio)?,
        spec.spatial_scale.to_bits(),
        u32::from(spec.half_pixel),
        u32::from(spec.max),
        count_word(batch)?,
    ];
    rec.dispatch_1d(
        &Instance::plain("roi_align"),
        &params,
        &[&x.buffer, &rois.buffer, &batch_indices.buffer, &out.buffer],
        out.len(),
    )
    .map_err(kiln::KernelError::from)?;
    super::pointwise::narrow(rec, out)
}


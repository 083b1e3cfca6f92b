//! ONNX Resize, as the cpu backend computes it: kiln's shared plan gives every resized axis
//! (for each output coordinate, the clamped input taps and their weights, and whether it
//! falls outside a tf_crop_and_resize crop), then the device runs one pass per axis — a Gather
//! of raw words for nearest (any element type), a weighted sum of taps for linear and
//! cubic (floats) — and finally writes the extrapolation value outside the crop.

use super::{count_word, layout, output, words8, KResult};
use crate::shaders::Instance;
use crate::value::{to_words, DeviceTensor, Recorder};
use kiln::plan::resize::{axis_taps, AxisTaps};
use kiln::{DataType, HostTensor, ResizeMode, ResizeParams, TensorData};

/// One axis's taps as the shader reads them: `taps` (index, weight) pairs per output
/// coordinate, zero-weight pairs padding shorter lists (the shader skips them); `outside`
/// per output coordinate.
struct AxisPlan {
    taps: usize,
    index: Vec<i32>,
    weight: Vec<f32>,
    outside: Vec<bool>,
}

/// kiln's shared plan ([`kiln::plan::resize`]) in the shader's fixed-width form.
fn axis_plan(p: &ResizeParams, planned: &AxisTaps) -> KResult<AxisPlan> {
    let taps = match p.mode {
        ResizeMode::Nearest => 1,
        ResizeMode::Linear => 2,
        ResizeMode::Cubic => 4,
    };
    let coordinates = planned.taps.len();
    let mut plan = AxisPlan {
        taps,
        index: Vec::with_capacity(coordinates * taps),
        weight: Vec::with_capacity(coordinates * taps),
        outside: planned.outside.clone(),
    };
    for coordinate in &planned.taps {
        for k in 0..taps {
            let (i, w) = coordinate.get(k).copied().unwrap_or((0, 0.0));
            plan.index.push(i32::try_from(i).map_err(|_| kiln::invalid!("resize tap {i} exceeds the i32 a kernel indexes"))?);
            plan.weight.push(w as f32);
        }
    }
    Ok(plan)
}

fn upload(rec: &Recorder, shape: Vec<usize>, data: TensorData) -> KResult<DeviceTensor> {
    rec.upload(&HostTensor::new(shape, data).map_err(kiln::KernelError::from)?)
}

/// One interpolating pass along `axis` (f32 words).
fn interpolate_axis(rec: &Recorder, x: &DeviceTensor, axis: usize, plan: &AxisPlan) -> KResult<DeviceTensor> {
    let out_len = plan.outside.len();
    let mut shape = x.shape.clone();
    shape[axis] = out_len;
    let out = output(rec, x.dtype, &shape)?;
    let index = upload(rec, vec![plan.index.len()], TensorData::I32(plan.index.clone()))?;
    let weight = upload(rec, vec![plan.weight.len()], TensorData::F32(plan.weight.clone()))?;
    let inner: usize = x.shape[axis + 1..].iter().product();
    let params = [
        count_word(out.len())?,
        count_word(inner.max(1))?,
        count_word(x.shape[axis])?,
        count_word(out_len.max(1))?,
        plan.taps as u32,
    ];
    rec.dispatch_1d(
        &Instance::plain("resize_axis"),
        &params,
        &[&x.buffer, &index.buffer, &weight.buffer, &out.buffer],
        out.len(),
    )
    .map_err(kiln::KernelError::from)?;
    Ok(out)
}

/// Writes `extrapolation` wherever some axis's coordinate is outside the crop.
fn mask_outside(rec: &Recorder, t: &DeviceTensor, plans: &[Option<AxisPlan>], extrapolation: f32) -> KResult<()> {
    let mut flags = Vec::new();
    let mut offsets = vec![u32::MAX; t.shape.len()];
    for (d, plan) in plans.iter().enumerate() {
        if let Some(plan) = plan.as_ref().filter(|p| p.outside.contains(&true)) {
            offsets[d] = count_word(flags.len())?;
            flags.extend(plan.outside.iter().map(|&o| u32::from(o)));
        }
    }
    if flags.is_empty() {
        return Ok(());
    }
    let word = {
        let v = HostTensor::from_f32(vec![], vec![extrapolation]).map_err(kiln::KernelError::from)?;
        let v = if t.dtype.is_float() { v } else { cast_scalar(extrapolation, t.dtype)? };
        to_words(&v)?.first().copied().unwrap_or(0)
    };
    let flags = upload(rec, vec![flags.len()], TensorData::U32(flags))?;
    let mut params = vec![count_word(t.len())?, t.shape.len() as u32, word];
    params.extend(words8(&t.shape)?);
    let mut offs = [u32::MAX; 8];
    offs[..offsets.len()].copy_from_slice(&offsets);
    params.extend(offs);
    rec.dispatch_1d(&Instance::plain("resize_mask"), &params, &[&flags.buffer, &t.buffer], t.len())
        .map_err(kiln::KernelError::from)
}

/// The extrapolation value in an integer tensor's type (nearest resize of integers).
fn cast_scalar(v: f32, dtype: DataType) -> KResult<HostTensor> {
    let v = f64::from(v);
    let data = match dtype {
        DataType::I8 | DataType::I16 | DataType::I32 | DataType::I64 => TensorData::I32(vec![v as i32]),
        DataType::U8 | DataType::U16 | DataType::U32 => TensorData::U32(vec![v as u32]),
        DataType::Bool => TensorData::Bool(vec![v != 0.0]),
        other => return Err(kiln::invalid!("Resize extrapolation into {other} is not supported on the wgpu backend")),
    };
    HostTensor::new(vec![], data).map_err(kiln::KernelError::from)
}

/// ONNX Resize of `x` to `out_shape`; `roi`, `scales` and `sizes` are host values.
pub fn resize(
    rec: &Recorder,
    p: &ResizeParams,
    x: &DeviceTensor,
    roi: Option<&HostTensor>,
    scales: Option<&HostTensor>,
    sizes: Option<&HostTensor>,
    out_shape: &[usize],
) -> KResult<DeviceTensor> {
    if p.mode != ResizeMode::Nearest && !x.dtype.is_float() {
        return Err(kiln::invalid!(
            "{:?} Resize of {} on the wgpu backend: interpolation computes floats only",
            p.mode, x.dtype
        ));
    }
    let plans: Vec<Option<AxisPlan>> = axis_taps(p, &x.shape, roi, scales, sizes, out_shape)?
        .iter()
        .map(|t| t.as_ref().map(|t| axis_plan(p, t)).transpose())
        .collect::<KResult<_>>()?;
    let mut cur = x.clone();
    for (axis, plan) in plans.iter().enumerate() {
        let Some(plan) = plan else { continue };
        cur = if p.mode == ResizeMode::Nearest {
            let index = upload(rec, vec![plan.index.len()], TensorData::I32(plan.index.clone()))?;
            let mut shape = cur.shape.clone();
            shape[axis] = plan.outside.len();
            layout::gather(rec, &cur, &index, axis, &shape)?
        } else {
            interpolate_axis(rec, &cur, axis, plan)?
        };
    }
    if cur.shape != out_shape {
        return Err(kiln::invalid!("Resize planned {:?} but the output is {out_shape:?}", cur.shape));
    }
    // Every axis of a crop is planned, so `cur` is a new buffer whenever a flag is set.
    mask_outside(rec, &cur, &plans, p.extrapolation_value)?;
    if x.dtype.is_float() {
        super::pointwise::narrow(rec, cur)
    } else {
        Ok(cur)
    }
}

//! ONNX Resize, as the cpu backend computes it: the host plans every resized axis (for
//! each output coordinate, the clamped input taps and their weights, and whether it falls
//! outside a tf_crop_and_resize crop), then the device runs one pass per axis — a Gather
//! of raw words for nearest (any element type), a weighted sum of taps for linear and
//! cubic (floats) — and finally writes the extrapolation value outside the crop.

use super::{count_word, layout, output, words8, KResult};
use crate::shaders::Instance;
use crate::value::{to_words, DeviceTensor, Recorder};
use kiln::{CoordinateTransformation, DataType, HostTensor, NearestRounding, ResizeMode, ResizeParams, TensorData};

/// What one axis is resized with.
struct AxisSpec {
    input: usize,
    output: usize,
    scale: f64,
    /// `scale × input`: the target length before flooring (the output length when sizes
    /// are given), which align_corners and tf_crop_and_resize use as the reference does.
    width: f64,
    roi: (f64, f64),
}

/// The taps of one axis: `taps` (index, weight) pairs per output coordinate, zero-weight
/// pairs padding shorter lists; `outside` per output coordinate.
struct AxisPlan {
    taps: usize,
    index: Vec<i32>,
    weight: Vec<f32>,
    outside: Vec<bool>,
}

fn original_coordinate(ct: CoordinateTransformation, x: f64, s: &AxisSpec) -> f64 {
    let (len_in, width) = (s.input as f64, s.width);
    match ct {
        CoordinateTransformation::HalfPixel => (x + 0.5) / s.scale - 0.5,
        CoordinateTransformation::HalfPixelSymmetric => {
            let adjustment = s.output as f64 / width;
            let offset = len_in / 2.0 * (1.0 - adjustment);
            offset + (x + 0.5) / s.scale - 0.5
        }
        CoordinateTransformation::PytorchHalfPixel => {
            if s.output > 1 {
                (x + 0.5) / s.scale - 0.5
            } else {
                0.0
            }
        }
        CoordinateTransformation::AlignCorners => {
            if width == 1.0 {
                0.0
            } else {
                x * (len_in - 1.0) / (width - 1.0)
            }
        }
        CoordinateTransformation::Asymmetric => x / s.scale,
        CoordinateTransformation::TfCropAndResize => {
            let (start, end) = s.roi;
            if width != 1.0 {
                start * (len_in - 1.0) + x * (end - start) * (len_in - 1.0) / (width - 1.0)
            } else {
                0.5 * (start + end) * (len_in - 1.0)
            }
        }
    }
}

/// Keys' cubic convolution weights for taps `base-1 ..= base+2` at `ratio` in (0, 1].
fn cubic_weights(ratio: f64, a: f64) -> [f64; 4] {
    let near = |t: f64| ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0;
    let far = |t: f64| ((a * t - 5.0 * a) * t + 8.0 * a) * t - 4.0 * a;
    [far(ratio + 1.0), near(ratio), near(1.0 - ratio), far(2.0 - ratio)]
}

fn axis_plan(p: &ResizeParams, s: &AxisSpec) -> AxisPlan {
    let last = s.input as i64 - 1;
    let taps = match p.mode {
        ResizeMode::Nearest => 1,
        ResizeMode::Linear => 2,
        ResizeMode::Cubic => 4,
    };
    let mut plan = AxisPlan {
        taps,
        index: Vec::with_capacity(s.output * taps),
        weight: Vec::with_capacity(s.output * taps),
        outside: Vec::with_capacity(s.output),
    };
    for o in 0..s.output {
        let x = original_coordinate(p.coordinate_transformation, o as f64, s);
        plan.outside.push(
            p.coordinate_transformation == CoordinateTransformation::TfCropAndResize && (x < 0.0 || x > last as f64),
        );
        // The neighbour left of x, so that ratio lies in (0, 1] (the reference's choice).
        let base = x.ceil() as i64 - 1;
        let ratio = x - base as f64;
        let raw: Vec<(i64, f64)> = match p.mode {
            ResizeMode::Nearest => {
                let second = ratio == 1.0
                    || match p.nearest_rounding {
                        NearestRounding::RoundPreferFloor => ratio > 0.5,
                        NearestRounding::RoundPreferCeil => ratio >= 0.5,
                        NearestRounding::Floor => false,
                        NearestRounding::Ceil => true,
                    };
                vec![(base + i64::from(second), 1.0)]
            }
            ResizeMode::Linear => vec![(base, 1.0 - ratio), (base + 1, ratio)],
            ResizeMode::Cubic => {
                let w = cubic_weights(ratio, p.cubic_coeff_a as f64);
                let mut taps: Vec<(i64, f64)> = (0..4).map(|k| (base - 1 + k as i64, w[k])).collect();
                if p.exclude_outside {
                    taps.iter_mut().filter(|(i, _)| !(0..=last).contains(i)).for_each(|t| t.1 = 0.0);
                    let sum: f64 = taps.iter().map(|t| t.1).sum();
                    taps.iter_mut().for_each(|t| t.1 /= sum);
                }
                taps
            }
        };
        for (i, w) in raw {
            plan.index.push(i.clamp(0, last.max(0)) as i32);
            plan.weight.push(w as f32);
        }
    }
    plan
}

/// Per-axis specs: `None` for axes left as they are.
fn axis_specs(
    p: &ResizeParams,
    x_shape: &[usize],
    roi: Option<&HostTensor>,
    scales: Option<&HostTensor>,
    sizes: Option<&HostTensor>,
    out_shape: &[usize],
) -> KResult<Vec<Option<AxisSpec>>> {
    let rank = x_shape.len();
    let axes: Vec<usize> = p.axes.clone().unwrap_or_else(|| (0..rank).collect());
    if axes.iter().any(|&a| a >= rank) || out_shape.len() != rank {
        return Err(kiln::invalid!("resize axes {axes:?} do not fit rank {rank}"));
    }
    let scales = scales.filter(|s| !s.is_empty()).map(HostTensor::to_f64_vec);
    let roi = roi.filter(|r| !r.is_empty()).map(HostTensor::to_f64_vec);
    if let Some(r) = &roi {
        if r.len() != 2 * axes.len() {
            return Err(kiln::invalid!("roi has {} values for {} axes", r.len(), axes.len()));
        }
    }
    match (&scales, sizes.filter(|s| !s.is_empty())) {
        (Some(s), None) if s.len() == axes.len() => {}
        (None, Some(s)) if s.len() == axes.len() => {}
        _ => return Err("resize needs exactly one of scales and sizes (on the host), one value per axis".into()),
    }
    let mut specs: Vec<Option<AxisSpec>> = (0..rank).map(|_| None).collect();
    for (j, &a) in axes.iter().enumerate() {
        let (input, output) = (x_shape[a], out_shape[a]);
        let (scale, width) = match &scales {
            Some(s) => (s[j], s[j] * input as f64),
            None => (output as f64 / input as f64, output as f64),
        };
        let roi = roi.as_ref().map_or((0.0, 1.0), |r| (r[j], r[j + axes.len()]));
        let identity =
            input == output && scale == 1.0 && p.coordinate_transformation != CoordinateTransformation::TfCropAndResize;
        if output > 0 && input == 0 {
            return Err(kiln::invalid!("cannot resize an empty axis {a} to length {output}"));
        }
        if !identity {
            specs[a] = Some(AxisSpec { input, output, scale, width, roi });
        }
    }
    Ok(specs)
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
    let specs = axis_specs(p, &x.shape, roi, scales, sizes, out_shape)?;
    let plans: Vec<Option<AxisPlan>> = specs.iter().map(|s| s.as_ref().map(|s| axis_plan(p, s))).collect();
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

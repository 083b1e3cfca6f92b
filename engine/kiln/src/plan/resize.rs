//! Resize planning (ONNX Resize, following the reference implementation): for each resized
//! axis, the input taps and weights of every output coordinate under every coordinate
//! transformation, nearest rounding and cubic coefficient. Every backend interpolates
//! with these taps, so all of them agree with the cpu oracle.

use crate::ir::layer::{CoordinateTransformation, NearestRounding, ResizeMode, ResizeParams};
use crate::ir::tensor::HostTensor;

/// One resized axis: per output coordinate, the input taps `(index, weight)` (zero
/// weights dropped, so an infinite neighbour never becomes NaN; indices clamped, the
/// reference's edge padding) and whether it lies outside the tf_crop_and_resize crop
/// (the output there is the extrapolation value).
#[derive(Clone, Debug, PartialEq)]
pub struct AxisTaps {
    pub taps: Vec<Vec<(usize, f64)>>,
    pub outside: Vec<bool>,
}

/// What one axis is resized with.
struct AxisSpec {
    input: usize,
    output: usize,
    scale: f64,
    /// `scale × input`: the target length before flooring (the output length when sizes
    /// are given). The reference uses it for align_corners and tf_crop_and_resize, which
    /// the ONNX test data follow.
    width: f64,
    roi: (f64, f64),
}

fn original_coordinate(ct: CoordinateTransformation, x: f64, s: &AxisSpec) -> f64 {
    let (len_in, width) = (s.input as f64, s.width);
    match ct {
        CoordinateTransformation::HalfPixel => (x + 0.5) / s.scale - 0.5,
        CoordinateTransformation::HalfPixelSymmetric => {
            // Differs from half_pixel only when the scale gives a fractional output length.
            let adjustment = s.output as f64 / width;
            let offset = len_in / 2.0 * (1.0 - adjustment);
            offset + (x + 0.5) / s.scale - 0.5
        }
        // The spec's (and onnxruntime's) 0 for a single output, not the reference's -0.5.
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

fn axis_plan(p: &ResizeParams, s: &AxisSpec) -> AxisTaps {
    let last = s.input as i64 - 1;
    let clamp = |i: i64| i.clamp(0, last) as usize;
    let mut plan = AxisTaps { taps: Vec::with_capacity(s.output), outside: Vec::with_capacity(s.output) };
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
        // Zero-weight taps contribute nothing (and must not turn an infinite neighbour into NaN).
        plan.taps.push(raw.into_iter().filter(|&(_, w)| w != 0.0).map(|(i, w)| (clamp(i), w)).collect());
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
) -> Result<Vec<Option<AxisSpec>>, String> {
    let rank = x_shape.len();
    let axes: Vec<usize> = p.axes.clone().unwrap_or_else(|| (0..rank).collect());
    if axes.iter().any(|&a| a >= rank) || out_shape.len() != rank {
        return Err(format!("resize axes {axes:?} do not fit rank {rank}"));
    }
    let scales = scales.filter(|s| !s.is_empty()).map(HostTensor::to_f64_vec);
    let roi = roi.filter(|r| !r.is_empty()).map(HostTensor::to_f64_vec);
    if let Some(r) = &roi {
        if r.len() != 2 * axes.len() {
            return Err(format!("roi has {} values for {} axes", r.len(), axes.len()));
        }
    }
    match (&scales, sizes.filter(|s| !s.is_empty())) {
        (Some(s), None) if s.len() == axes.len() => {}
        (None, Some(s)) if s.len() == axes.len() => {}
        _ => return Err("resize needs exactly one of scales and sizes, one value per axis".into()),
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
            return Err(format!("cannot resize an empty axis {a} to length {output}"));
        }
        if !identity {
            specs[a] = Some(AxisSpec { input, output, scale, width, roi });
        }
    }
    Ok(specs)
}

/// The per-axis taps of a Resize (`None` for axes left as they are) of `x_shape` to
/// `out_shape`, from its roi, scales or sizes inputs.
pub fn axis_taps(
    p: &ResizeParams,
    x_shape: &[usize],
    roi: Option<&HostTensor>,
    scales: Option<&HostTensor>,
    sizes: Option<&HostTensor>,
    out_shape: &[usize],
) -> Result<Vec<Option<AxisTaps>>, String> {
    let specs = axis_specs(p, x_shape, roi, scales, sizes, out_shape)?;
    Ok(specs.iter().map(|s| s.as_ref().map(|s| axis_plan(p, s))).collect())
}

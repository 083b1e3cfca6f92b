//! ONNX Resize: nearest (four rounding modes), n-linear and n-cubic interpolation under
//! every coordinate transformation, following the ONNX reference implementation.
//!
//! Each resized axis gets its taps from [`kiln::plan::resize`] (shared with the device
//! backends); interpolation is separable, one axis after the other, in f64.

use crate::element::{numeric_data, pack, Elem, FloatElem, IntElem, Scalar};
use crate::layout::{strides, try_for_each_index, volume, Lanes};
use kiln::plan::resize::{axis_taps, AxisTaps};
use kiln::{dispatch_data, HostTensor, ResizeMode, ResizeParams, TensorData};

pub fn resize(
    p: &ResizeParams,
    x: &HostTensor,
    roi: Option<&HostTensor>,
    scales: Option<&HostTensor>,
    sizes: Option<&HostTensor>,
    out_shape: &[usize],
) -> Result<TensorData, String> {
    let plans = axis_taps(p, x.shape(), roi, scales, sizes, out_shape)?;
    let outside = outside_mask(&plans, out_shape);
    let extrapolation = Scalar::Float(p.extrapolation_value as f64);
    if p.mode == ResizeMode::Nearest {
        return Ok(dispatch_data!(x.data(), v => {
            nearest(v, x.shape(), &plans, &outside, Elem::from_scalar(extrapolation), out_shape)?
        }, string _s => return Err(format!("the cpu `{}` kernels do not take string tensors", module_path!().rsplit("::").next().unwrap_or("")))));
    }
    let values = separable(x.to_f64_vec(), x.shape(), &plans);
    let values: Vec<f64> =
        values.into_iter().zip(&outside).map(|(v, &out)| if out { p.extrapolation_value as f64 } else { v }).collect();
    fn to_float<T: FloatElem>(_: &[T], v: Vec<f64>) -> TensorData {
        pack(v.into_iter().map(T::from_f64).collect::<Vec<T>>())
    }
    fn to_int<T: IntElem>(_: &[T], v: Vec<f64>) -> TensorData {
        pack(v.into_iter().map(T::saturate_f64).collect::<Vec<T>>())
    }
    numeric_data!(x.data(), format!("{:?} resize", p.mode), v => float: to_float(v, values), int: to_int(v, values))
}

/// Whether each output element lies outside the tf_crop_and_resize crop on some axis.
fn outside_mask(plans: &[Option<AxisTaps>], out_shape: &[usize]) -> Vec<bool> {
    let mut mask = Vec::with_capacity(volume(out_shape));
    let _ = try_for_each_index(out_shape, |idx| {
        mask.push(idx.iter().zip(plans).any(|(&i, p)| p.as_ref().is_some_and(|p| p.outside[i])));
        Ok::<(), ()>(())
    });
    mask
}

/// Nearest: every output element copies one input element (no arithmetic, any type).
fn nearest<T: Elem>(
    x: &[T],
    x_shape: &[usize],
    plans: &[Option<AxisTaps>],
    outside: &[bool],
    extrapolation: T,
    out_shape: &[usize],
) -> Result<TensorData, String> {
    let st = strides(x_shape);
    let mut out = Vec::with_capacity(volume(out_shape));
    try_for_each_index(out_shape, |idx| {
        let mut offset = 0;
        for (d, &o) in idx.iter().enumerate() {
            let i = match &plans[d] {
                Some(p) => p.taps[o].first().map_or(0, |t| t.0),
                None => o,
            };
            offset += i * st[d];
        }
        out.push(if outside[out.len()] { extrapolation } else { x[offset] });
        Ok::<(), String>(())
    })?;
    Ok(pack(out))
}

/// Interpolates one planned axis after another.
fn separable(mut data: Vec<f64>, x_shape: &[usize], plans: &[Option<AxisTaps>]) -> Vec<f64> {
    let mut shape = x_shape.to_vec();
    for (d, plan) in plans.iter().enumerate() {
        let Some(plan) = plan else { continue };
        let src = Lanes::around(&shape, d);
        let dst = Lanes { len: plan.taps.len(), ..src };
        let mut next = vec![0.0; dst.outer * dst.len * dst.inner];
        for o in 0..src.outer {
            for (c, taps) in plan.taps.iter().enumerate() {
                for j in 0..src.inner {
                    next[dst.at(o, c, j)] = taps.iter().map(|&(i, w)| w * data[src.at(o, i, j)]).sum();
                }
            }
        }
        data = next;
        shape[d] = dst.len;
    }
    data
}


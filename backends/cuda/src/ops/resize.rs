//! ONNX Resize and Pad on the device (`kernels/resize.cu`): the host plans each axis's taps
//! with the planning the cpu oracle uses (`kiln::plan::resize`, `kiln::plan::pad`: every
//! Resize mode, rounding and coordinate transformation; every Pad mode), the kernel gathers
//! (nearest, Pad: any type) or interpolates (linear / cubic, float types).

use kiln::{invalid, DataType, HostTensor, KernelError, PaddingMode, ResizeMode, ResizeParams, TensorData};
use crate::ops::KResult;
use super::{contiguous_strides, pointwise, Ctx};
use crate::buffer::{float_suffix, width_suffix, Arg, DeviceTensor, Layout};
use crate::sources::Source;

/// Runs Resize of `x` onto `out_shape`; `roi`, `scales` and `sizes` are the layer's host inputs.
pub fn resize(
    cx: &Ctx,
    p: &ResizeParams,
    x: &DeviceTensor,
    roi: Option<&HostTensor>,
    scales: Option<&HostTensor>,
    sizes: Option<&HostTensor>,
    out_shape: &[usize],
) -> KResult<DeviceTensor> {
    let rank = x.shape.len();
    if rank > 8 || out_shape.len() != rank {
        return Err(invalid!("resize from {:?} to {out_shape:?}", x.shape));
    }
    let plans = kiln::plan::resize::axis_taps(p, &x.shape, roi, scales, sizes, out_shape)?;
    let interpolate = p.mode != ResizeMode::Nearest;
    let mut l = Layout { rank: rank as i32, ..Layout::default() };
    let (mut index, mut weight) = (Vec::<i64>::new(), Vec::<f64>::new());
    for (d, (st, plan)) in contiguous_strides(&x.shape).into_iter().zip(&plans).enumerate() {
        l.shape[d] = out_shape[d] as i64;
        l.stride[0][d] = st;
        l.stride[2][d] = index.len() as i64;
        let ntaps = plan.as_ref().map_or(1, |p| p.taps.iter().map(Vec::len).max().unwrap_or(1).max(1));
        l.stride[1][d] = ntaps as i64;
        for o in 0..out_shape[d] {
            let (taps, outside) = match plan {
                Some(p) => (p.taps[o].clone(), p.outside[o]),
                None => (vec![(o, 1.0)], false),
            };
            for k in 0..ntaps {
                let (i, w) = taps.get(k).copied().unwrap_or((0, 0.0));
                index.push(if outside && k == 0 { -1 } else { i as i64 });
                weight.push(w);
            }
        }
    }
    let upload = |t: HostTensor| cx.gpu.upload(&t).map_err(KernelError::from);
    let tap_index = upload(HostTensor::from_i64(vec![index.len()], index).map_err(KernelError::from)?)?;
    let out = cx.gpu.empty(x.dtype, out_shape.to_vec()).map_err(KernelError::from)?;
    let n = out.len();
    if interpolate {
        let suffix = float_suffix(x.dtype).map_err(KernelError::from)?;
        let tap_weight =
            upload(HostTensor::new(vec![weight.len()], TensorData::F64(weight)).map_err(KernelError::from)?)?;
        let args = [
            Arg::I64(n as i64),
            Arg::Layout(l),
            cx.arg(&tap_index),
            cx.arg(&tap_weight),
            Arg::F32(p.extrapolation_value),
            cx.arg(x),
            cx.arg(&out),
        ];
        cx.launch_elements(Source::Resize.kernel(format!("resize_interp_{suffix}")), n, &args)?;
    } else {
        let extrapolation =
            upload(HostTensor::from_f32(vec![], vec![p.extrapolation_value]).map_err(KernelError::from)?)?;
        let extrapolation = match x.dtype {
            DataType::F32 => extrapolation,
            other if pointwise::cast_kernel(DataType::F32, other).is_some() => {
                pointwise::cast(cx, &extrapolation, other)?
            }
            // Only tf_crop_and_resize reads it; other types get zero bytes there.
            other => super::zeros(cx, cx.gpu.empty(other, vec![]).map_err(KernelError::from)?)?,
        };
        let suffix = width_suffix(x.dtype).map_err(KernelError::from)?;
        let args =
            [Arg::I64(n as i64), Arg::Layout(l), cx.arg(&tap_index), cx.arg(&extrapolation), cx.arg(x), cx.arg(&out)];
        cx.launch_elements(Source::Resize.kernel(format!("resize_gather_{suffix}")), n, &args)?;
    }
    Ok(out)
}

/// Copies `x` onto `out_shape` through per-axis maps (output coordinate → input coordinate,
/// `None`: the one-element `fill`).
fn gather_through_maps(
    cx: &Ctx,
    x: &DeviceTensor,
    maps: &[Vec<Option<usize>>],
    fill: &DeviceTensor,
    out_shape: &[usize],
) -> KResult<DeviceTensor> {
    let rank = x.shape.len();
    if rank > 8 || maps.len() != rank || out_shape.len() != rank {
        return Err(invalid!("gather from {:?} onto {out_shape:?}", x.shape));
    }
    let mut l = Layout { rank: rank as i32, ..Layout::default() };
    let mut index = Vec::<i64>::new();
    for (d, st) in contiguous_strides(&x.shape).into_iter().enumerate() {
        l.shape[d] = out_shape[d] as i64;
        l.stride[0][d] = st;
        l.stride[1][d] = 1;
        l.stride[2][d] = index.len() as i64;
        index.extend(maps[d].iter().map(|m| m.map_or(-1, |i| i as i64)));
    }
    let tap_index = cx
        .gpu
        .upload(&HostTensor::from_i64(vec![index.len()], index).map_err(KernelError::from)?)
        .map_err(KernelError::from)?;
    let out = cx.gpu.empty(x.dtype, out_shape.to_vec()).map_err(KernelError::from)?;
    let n = out.len();
    let suffix = width_suffix(x.dtype).map_err(KernelError::from)?;
    let args = [Arg::I64(n as i64), Arg::Layout(l), cx.arg(&tap_index), cx.arg(fill), cx.arg(x), cx.arg(&out)];
    cx.launch_elements(Source::Resize.kernel(format!("resize_gather_{suffix}")), n, &args)?;
    Ok(out)
}

/// ONNX Pad (constant, reflect, edge, wrap; negative pads crop) with host-side `pads`;
/// `constant` (one element of x's type) defaults to zero.
pub fn padding(
    cx: &Ctx,
    mode: PaddingMode,
    x: &DeviceTensor,
    pads: &HostTensor,
    constant: Option<&DeviceTensor>,
    out_shape: &[usize],
) -> KResult<DeviceTensor> {
    let pads = pads.to_i64_vec().ok_or("pads must be integers")?;
    let maps = kiln::plan::pad::source_maps(mode, &x.shape, &pads, out_shape)?;
    let fill = match constant {
        Some(c) if c.len() != 1 => return Err(invalid!("the pad value must hold one element, got {}", c.len())),
        Some(c) if c.dtype != x.dtype => return Err(invalid!("the pad value is {}, the data {}", c.dtype, x.dtype)),
        Some(c) => c.clone(),
        None => super::zeros(cx, cx.gpu.empty(x.dtype, vec![]).map_err(KernelError::from)?)?,
    };
    gather_through_maps(cx, x, &maps, &fill, out_shape)
}

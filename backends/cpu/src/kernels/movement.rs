//! Layers that move elements without arithmetic: Shuffle, Concatenation, Slice, Shape,
//! Fill, Expand and Padding.

use super::{int_values, typed};
use crate::element::{pack, Elem};
use crate::layout::{broadcast_steps, gather_strided, strides, transpose, try_for_each_index, volume};
use kiln::ir::infer::{resolve_reshape, resolve_slice};
use kiln::{dispatch_data, Dim, HostTensor, PaddingMode, ShuffleParams, TensorData};

/// First transpose, reshape (the tensor input replaces the static dims), second transpose.
pub fn shuffle(p: &ShuffleParams, x: &HostTensor, reshape_dims: Option<&HostTensor>) -> Result<TensorData, String> {
    let dims = match reshape_dims {
        Some(t) => Some(int_values(t, "the reshape dims")?),
        None => p.reshape.clone(),
    };
    dispatch_data!(x.data(), v => {
        let (mut data, mut shape) = if p.first_transpose.is_empty() {
            (v.clone(), x.shape().to_vec())
        } else {
            transpose(v, x.shape(), &p.first_transpose)
        };
        if let Some(dims) = &dims {
            let current: Vec<Dim> = shape.iter().map(|&d| Dim::Fixed(d)).collect();
            let resolved = resolve_reshape(&current, dims, p.zero_is_placeholder)?;
            shape = resolved
                .iter()
                .map(Dim::fixed)
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| format!("reshape dims {dims:?} do not resolve"))?;
            if volume(&shape) != data.len() {
                return Err(format!("cannot reshape {} elements into {shape:?}", data.len()));
            }
        }
        if !p.second_transpose.is_empty() {
            if p.second_transpose.len() != shape.len() {
                return Err(format!("second transpose {:?} does not match rank {}", p.second_transpose, shape.len()));
            }
            data = transpose(&data, &shape, &p.second_transpose).0;
        }
        Ok(pack(data))
    }, string _s => return Err(format!("the cpu `{}` kernels do not take string tensors", module_path!().rsplit("::").next().unwrap_or(""))))
}

pub fn concatenation(parts: &[&HostTensor], axis: usize) -> Result<TensorData, String> {
    let first = parts.first().ok_or("concatenation needs at least one input")?;
    let outer = volume(&first.shape()[..axis]);
    dispatch_data!(first.data(), v0 => {
        let mut views = Vec::with_capacity(parts.len());
        for (i, p) in parts.iter().enumerate() {
            let v = if i == 0 { v0.as_slice() } else { typed(p, &format!("input {i}"))? };
            views.push((v, volume(&p.shape()[axis..])));
        }
        let mut out = Vec::with_capacity(views.iter().map(|(v, _)| v.len()).sum());
        for o in 0..outer {
            for (v, chunk) in &views {
                out.extend_from_slice(&v[o * chunk..(o + 1) * chunk]);
            }
        }
        Ok(pack(out))
    }, string _s => return Err(format!("the cpu `{}` kernels do not take string tensors", module_path!().rsplit("::").next().unwrap_or(""))))
}

/// ONNX Slice through [`resolve_slice`], so that bounds agree with inference.
pub fn slice(
    x: &HostTensor,
    starts: &HostTensor,
    ends: &HostTensor,
    axes: Option<&HostTensor>,
    steps: Option<&HostTensor>,
) -> Result<TensorData, String> {
    let axes = axes.map(|a| int_values(a, "axes")).transpose()?;
    let steps = steps.map(|s| int_values(s, "steps")).transpose()?;
    let plan = resolve_slice(
        x.shape(),
        &int_values(starts, "starts")?,
        &int_values(ends, "ends")?,
        axes.as_deref(),
        steps.as_deref(),
    )?;
    let st = strides(x.shape());
    let out_shape: Vec<usize> = plan.iter().map(|a| a.len).collect();
    // A step only moves along an axis that takes two or more elements, and then stays
    // inside the tensor; one taking fewer may have any step (an overflowing one too).
    let step: Vec<isize> =
        plan.iter().zip(&st).map(|(a, &s)| if a.len > 1 { a.step as isize * s as isize } else { 0 }).collect();
    // An empty output never reads its base, which may then lie past the end (and its
    // offset overflow): only a non-empty one computes it.
    let base: isize = if out_shape.contains(&0) {
        0
    } else {
        plan.iter().zip(&st).map(|(a, &s)| a.start as isize * s as isize).sum()
    };
    Ok(dispatch_data!(x.data(), v => pack(gather_strided(v, &out_shape, &step, base)), string _s => return Err(format!("the cpu `{}` kernels do not take string tensors", module_path!().rsplit("::").next().unwrap_or("")))))
}

pub fn shape_of(x: &HostTensor) -> TensorData {
    TensorData::I64(x.shape().iter().map(|&d| d as i64).collect())
}

/// A tensor of `shape` filled with the layer's value.
pub fn fill(value: &HostTensor, shape: &[usize]) -> Result<TensorData, String> {
    if value.len() != 1 {
        return Err(format!("the fill value must hold one element, got {}", value.len()));
    }
    Ok(dispatch_data!(value.data(), v => pack(vec![v[0]; volume(shape)]), string _s => return Err(format!("the cpu `{}` kernels do not take string tensors", module_path!().rsplit("::").next().unwrap_or("")))))
}

/// Numpy broadcast of x to the output shape.
pub fn expand(x: &HostTensor, out_shape: &[usize]) -> Result<TensorData, String> {
    let steps = broadcast_steps(x.shape(), out_shape)?;
    Ok(dispatch_data!(x.data(), v => pack(gather_strided(v, out_shape, &steps, 0)), string _s => return Err(format!("the cpu `{}` kernels do not take string tensors", module_path!().rsplit("::").next().unwrap_or("")))))
}

pub fn padding(
    mode: PaddingMode,
    x: &HostTensor,
    pads: &HostTensor,
    constant: Option<&HostTensor>,
    out_shape: &[usize],
) -> Result<TensorData, String> {
    let pads = int_values(pads, "pads")?;
    // Per axis, for each output coordinate: its input coordinate, or None for the constant.
    let maps = kiln::plan::pad::source_maps(mode, x.shape(), &pads, out_shape)?;
    let st = strides(x.shape());
    dispatch_data!(x.data(), v => {
        let fill = match constant {
            Some(c) if c.len() != 1 => return Err(format!("the pad value must hold one element, got {}", c.len())),
            Some(c) => typed(c, "the pad value")?[0],
            None => Elem::zero(),
        };
        let mut out = Vec::with_capacity(volume(out_shape));
        try_for_each_index(out_shape, |idx| {
            let mut offset = Some(0usize);
            for (d, &o) in idx.iter().enumerate() {
                offset = offset.zip(maps[d][o]).map(|(acc, i)| acc + i * st[d]);
            }
            out.push(offset.map_or(fill, |off| v[off]));
            Ok::<(), String>(())
        })?;
        Ok(pack(out))
    }, string _s => return Err(format!("the cpu `{}` kernels do not take string tensors", module_path!().rsplit("::").next().unwrap_or(""))))
}


//! Gather (ONNX Gather, GatherElements, GatherND) and Scatter (ScatterElements, ScatterND).

use super::elementwise::{nan_max, nan_min};
use super::{int_values, typed};
use crate::element::{pack, Elem, FloatElem, IntElem};
use crate::layout::{strides, try_for_each_index, volume, wrap_index, Lanes};
use kiln::{dispatch_data, GatherMode, HostTensor, ScatterMode, ScatterReduction, TensorData};

fn resolve(index: i64, len: usize, axis: usize) -> Result<usize, String> {
    wrap_index(index, len).ok_or_else(|| format!("index {index} is out of range for axis {axis} of length {len}"))
}

/// For GatherElements/ScatterElements: every axis but `axis` of the indices must fit in
/// the data, since those coordinates address the data directly.
fn check_element_shapes(data: &[usize], indices: &[usize], axis: usize) -> Result<(), String> {
    if data.len() != indices.len() {
        return Err(format!("indices rank {} differs from data rank {}", indices.len(), data.len()));
    }
    match (0..data.len()).find(|&d| d != axis && indices[d] > data[d]) {
        Some(d) => Err(format!("indices shape {indices:?} exceeds data shape {data:?} on axis {d}")),
        None => Ok(()),
    }
}

/// Data offsets that the indices of an Elements-mode gather or scatter address.
fn element_offsets(data: &[usize], indices_shape: &[usize], idx: &[i64], axis: usize) -> Result<Vec<usize>, String> {
    check_element_shapes(data, indices_shape, axis)?;
    let st = strides(data);
    let mut out = Vec::with_capacity(idx.len());
    let mut flat = 0;
    try_for_each_index(indices_shape, |p| {
        let mut offset = resolve(idx[flat], data[axis], axis)? * st[axis];
        for (d, &c) in p.iter().enumerate() {
            if d != axis {
                offset += c * st[d];
            }
        }
        out.push(offset);
        flat += 1;
        Ok::<(), String>(())
    })?;
    Ok(out)
}

/// Start offsets of the slices that ND-mode indices address, with the slice length.
/// `batch_dims` leading axes are shared by data and indices (GatherND only).
fn nd_offsets(
    data: &[usize],
    indices_shape: &[usize],
    idx: &[i64],
    batch_dims: usize,
) -> Result<(Vec<usize>, usize), String> {
    let q = indices_shape.len();
    let tuple = *indices_shape.last().ok_or("ND indices must have rank at least 1")?;
    if batch_dims >= q || batch_dims + tuple > data.len() {
        return Err(format!("{tuple} index components after {batch_dims} batch dims exceed data rank {}", data.len()));
    }
    if data[..batch_dims] != indices_shape[..batch_dims] {
        return Err(format!("batch dims of data {data:?} and indices {indices_shape:?} differ"));
    }
    let st = strides(data);
    let slice = volume(&data[batch_dims + tuple..]);
    let batch_stride = volume(&data[batch_dims..]);
    let per_batch = volume(&indices_shape[batch_dims..q - 1]);
    let count = volume(&indices_shape[..q - 1]);
    let mut out = Vec::with_capacity(count);
    for t in 0..count {
        let mut offset = (t / per_batch.max(1)) * batch_stride;
        for k in 0..tuple {
            let axis = batch_dims + k;
            offset += resolve(idx[t * tuple + k], data[axis], axis)? * st[axis];
        }
        out.push(offset);
    }
    Ok((out, slice))
}

pub fn gather(
    mode: GatherMode,
    data: &HostTensor,
    indices: &HostTensor,
    out_shape: &[usize],
) -> Result<TensorData, String> {
    let idx = int_values(indices, "indices")?;
    let shape = data.shape();
    let out_len = volume(out_shape);
    match mode {
        GatherMode::Default { axis } => {
            let lanes = Lanes::around(shape, axis);
            let rows = idx.iter().map(|&i| resolve(i, lanes.len, axis)).collect::<Result<Vec<_>, _>>()?;
            Ok(dispatch_data!(data.data(), v => {
                let mut out = Vec::with_capacity(out_len);
                for o in 0..lanes.outer {
                    for &r in &rows {
                        let start = lanes.at(o, r, 0);
                        out.extend_from_slice(&v[start..start + lanes.inner]);
                    }
                }
                pack(out)
            }, string _s => return Err(format!("the cpu `{}` kernels do not take string tensors", module_path!().rsplit("::").next().unwrap_or("")))))
        }
        GatherMode::Elements { axis } => {
            let offsets = element_offsets(shape, indices.shape(), &idx, axis)?;
            Ok(dispatch_data!(data.data(), v => pack(offsets.iter().map(|&o| v[o]).collect()), string _s => return Err(format!("the cpu `{}` kernels do not take string tensors", module_path!().rsplit("::").next().unwrap_or("")))))
        }
        GatherMode::Nd { batch_dims } => {
            let (starts, slice) = nd_offsets(shape, indices.shape(), &idx, batch_dims)?;
            Ok(dispatch_data!(data.data(), v => {
                let mut out = Vec::with_capacity(out_len);
                for &s in &starts {
                    out.extend_from_slice(&v[s..s + slice]);
                }
                pack(out)
            }, string _s => return Err(format!("the cpu `{}` kernels do not take string tensors", module_path!().rsplit("::").next().unwrap_or("")))))
        }
    }
}

fn float_combine<T: FloatElem>(r: ScatterReduction) -> fn(T, T) -> T {
    match r {
        ScatterReduction::None => |_, u| u,
        ScatterReduction::Add => |a, u| T::narrow(a.widen() + u.widen()),
        ScatterReduction::Mul => |a, u| T::narrow(a.widen() * u.widen()),
        ScatterReduction::Max => |a, u| T::narrow(nan_max(a.widen(), u.widen())),
        ScatterReduction::Min => |a, u| T::narrow(nan_min(a.widen(), u.widen())),
    }
}

fn int_combine<T: IntElem>(r: ScatterReduction) -> fn(T, T) -> T {
    match r {
        ScatterReduction::None => |_, u| u,
        ScatterReduction::Add => |a, u| a.wrapping_add(u),
        ScatterReduction::Mul => |a, u| a.wrapping_mul(u),
        ScatterReduction::Max => |a, u| a.max(u),
        ScatterReduction::Min => |a, u| a.min(u),
    }
}

/// Bool reductions as numpy's ufuncs on bool: add/max are `or`, mul/min are `and`.
fn bool_combine(r: ScatterReduction) -> fn(bool, bool) -> bool {
    match r {
        ScatterReduction::None => |_, u| u,
        ScatterReduction::Add | ScatterReduction::Max => |a, u| a || u,
        ScatterReduction::Mul | ScatterReduction::Min => |a, u| a && u,
    }
}

/// A copy of `data` with each update combined in order into the element it addresses.
fn scatter_typed<T: Elem>(
    data: &[T],
    updates: &HostTensor,
    targets: &[usize],
    slice: usize,
    combine: fn(T, T) -> T,
) -> Result<TensorData, String> {
    let upd: &[T] = typed(updates, "updates")?;
    if upd.len() != targets.len() * slice {
        return Err(format!("{} updates for {} target elements", upd.len(), targets.len() * slice));
    }
    let mut out = data.to_vec();
    for (t, &start) in targets.iter().enumerate() {
        for k in 0..slice {
            out[start + k] = combine(out[start + k], upd[t * slice + k]);
        }
    }
    Ok(pack(out))
}

pub fn scatter(
    mode: ScatterMode,
    reduction: ScatterReduction,
    data: &HostTensor,
    indices: &HostTensor,
    updates: &HostTensor,
) -> Result<TensorData, String> {
    let idx = int_values(indices, "indices")?;
    let (targets, slice) = match mode {
        ScatterMode::Elements { axis } => {
            if updates.shape() != indices.shape() {
                return Err(format!(
                    "updates shape {:?} differs from indices shape {:?}",
                    updates.shape(),
                    indices.shape()
                ));
            }
            (element_offsets(data.shape(), indices.shape(), &idx, axis)?, 1)
        }
        ScatterMode::Nd => {
            let (starts, slice) = nd_offsets(data.shape(), indices.shape(), &idx, 0)?;
            let q = indices.shape().len();
            let tuple = indices.shape()[q - 1];
            let mut expected = indices.shape()[..q - 1].to_vec();
            expected.extend_from_slice(&data.shape()[tuple..]);
            if updates.shape() != expected.as_slice() {
                return Err(format!("updates shape {:?} should be {expected:?}", updates.shape()));
            }
            (starts, slice)
        }
    };
    macro_rules! run {
        ($v:ident, $combine:expr) => {
            scatter_typed($v, updates, &targets, slice, $combine)
        };
    }
    match data.data() {
        TensorData::F32(v) => run!(v, float_combine(reduction)),
        TensorData::F16(v) => run!(v, float_combine(reduction)),
        TensorData::BF16(v) => run!(v, float_combine(reduction)),
        TensorData::F64(v) => run!(v, float_combine(reduction)),
        TensorData::I8(v) => run!(v, int_combine(reduction)),
        TensorData::I16(v) => run!(v, int_combine(reduction)),
        TensorData::I32(v) => run!(v, int_combine(reduction)),
        TensorData::I64(v) => run!(v, int_combine(reduction)),
        TensorData::U8(v) => run!(v, int_combine(reduction)),
        TensorData::U16(v) => run!(v, int_combine(reduction)),
        TensorData::U32(v) => run!(v, int_combine(reduction)),
        TensorData::U64(v) => run!(v, int_combine(reduction)),
        TensorData::Bool(v) => run!(v, bool_combine(reduction)),
        other => Err(format!("scatter is not defined on {}", other.dtype())),
    }
}

//! Layers whose output shape depends on the values: NonZero and Unique. Their sizes must
//! be known on the host before any later kernel is recorded, so the input is read back
//! (one of the places a host read is allowed, like a loop condition) and the result is
//! computed on the host over the device words, then uploaded. A device version would
//! still need that read of the count; for the small tensors these layers see in practice
//! the host pass is cheaper than the extra dispatches.

use super::KResult;
use crate::ops::Storage;
use crate::value::{from_words, to_words};
use kiln::{DataType, HostTensor};
use std::cmp::Ordering;

/// Word order of one storage: floats by value with NaN above every number (numpy, as the
/// cpu backend), i32 signed, u32 unsigned.
fn word_order(storage: Storage) -> impl Fn(u32, u32) -> Ordering {
    move |a, b| match storage {
        Storage::F32 => {
            let (x, y) = (f32::from_bits(a), f32::from_bits(b));
            match (x.is_nan(), y.is_nan()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
            }
        }
        Storage::I32 => (a as i32).cmp(&(b as i32)),
        Storage::U32 => a.cmp(&b),
    }
}

fn storage_of(dtype: DataType) -> KResult<Storage> {
    Storage::of(dtype).ok_or_else(|| kiln::invalid!("unsupported dtype {dtype} on the wgpu backend"))
}

fn i64_list(v: Vec<i64>) -> KResult<HostTensor> {
    HostTensor::from_i64(vec![v.len()], v).map_err(kiln::KernelError::from)
}

/// Coordinates of the non-zero elements of `x`: `[rank, count]` i64, row-major order.
pub fn non_zero(x: &HostTensor) -> KResult<HostTensor> {
    let storage = storage_of(x.dtype())?;
    let words = to_words(x)?;
    let nonzero = |w: u32| if storage == Storage::F32 { f32::from_bits(w) != 0.0 } else { w != 0 };
    let positions: Vec<usize> = words.iter().enumerate().filter(|(_, &w)| nonzero(w)).map(|(i, _)| i).collect();
    let (rank, count) = (x.shape().len(), positions.len());
    let st = super::strides(x.shape());
    let mut out = vec![0i64; rank * count];
    for (c, &p) in positions.iter().enumerate() {
        for d in 0..rank {
            out[d * count + c] = ((p / st[d]) % x.shape()[d]) as i64;
        }
    }
    HostTensor::from_i64(vec![rank, count], out).map_err(kiln::KernelError::from)
}

/// ONNX Unique: `[y, indices, inverse_indices, counts]` of the distinct elements of `x`
/// flattened (`axis: None`) or of its distinct slices along `axis`; ascending when
/// `sorted`, else in order of first occurrence.
pub fn unique(x: &HostTensor, axis: Option<usize>, sorted: bool) -> KResult<Vec<HostTensor>> {
    let order = word_order(storage_of(x.dtype())?);
    let words = &to_words(x)?;
    let flat = [x.len()];
    let (shape, axis) = match axis {
        None => (&flat[..], 0),
        Some(a) if a < x.shape().len() => (x.shape(), a),
        Some(a) => return Err(kiln::invalid!("Unique axis {a} is out of range for rank {}", x.shape().len())),
    };
    let (outer, len) = (shape[..axis].iter().product::<usize>(), shape[axis]);
    let inner: usize = shape[axis + 1..].iter().product();
    let at = |o: usize, i: usize, j: usize| (o * len + i) * inner + j;
    let keys: Vec<Vec<u32>> =
        (0..len).map(|i| (0..outer).flat_map(|o| (0..inner).map(move |j| words[at(o, i, j)])).collect()).collect();
    let compare = |a: &[u32], b: &[u32]| {
        a.iter().zip(b).map(|(&p, &q)| order(p, q)).find(|o| o.is_ne()).unwrap_or(Ordering::Equal)
    };
    // A stable sort puts each group's first occurrence first.
    let mut by_key: Vec<usize> = (0..len).collect();
    by_key.sort_by(|&a, &b| compare(&keys[a], &keys[b]));
    let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
    for &i in &by_key {
        match groups.last_mut() {
            Some((first, members)) if compare(&keys[*first], &keys[i]).is_eq() => members.push(i),
            _ => groups.push((i, vec![i])),
        }
    }
    if !sorted {
        groups.sort_by_key(|g| g.0);
    }
    let mut inverse = vec![0i64; len];
    for (g, (_, members)) in groups.iter().enumerate() {
        for &m in members {
            inverse[m] = g as i64;
        }
    }
    let picks: Vec<usize> = groups.iter().map(|g| g.0).collect();
    let mut y = Vec::with_capacity(outer * picks.len() * inner);
    for o in 0..outer {
        for &p in &picks {
            y.extend((0..inner).map(|j| words[at(o, p, j)]));
        }
    }
    let mut y_shape = shape.to_vec();
    y_shape[axis] = picks.len();
    Ok(vec![
        from_words(x.dtype(), y_shape, &y)?,
        i64_list(picks.iter().map(|&p| p as i64).collect())?,
        i64_list(inverse)?,
        i64_list(groups.iter().map(|g| g.1.len() as i64).collect())?,
    ])
}

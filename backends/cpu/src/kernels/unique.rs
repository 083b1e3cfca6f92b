//! Unique: distinct elements or slices, with first-occurrence indices, inverse indices and
//! counts (numpy's `unique`, as the ONNX reference implementation uses it).

use super::misc::order;
use super::tensor;
use crate::element::{pack, Elem, Scalar};
use crate::layout::{volume, Lanes};
use kiln::{dispatch_data, HostTensor, TensorData};
use std::cmp::Ordering;

/// Lexicographic order of two slices' keys.
fn compare(a: &[Scalar], b: &[Scalar]) -> Ordering {
    a.iter().zip(b).map(|(x, y)| order(x, y)).find(|o| o.is_ne()).unwrap_or(Ordering::Equal)
}

pub fn unique(x: &HostTensor, axis: Option<usize>, sorted: bool) -> Result<Vec<HostTensor>, String> {
    let flat = [x.len()];
    let (shape, axis) = match axis {
        None => (&flat[..], 0),
        Some(a) if a < x.shape().len() => (x.shape(), a),
        Some(a) => return Err(format!("Unique axis {a} is out of range for rank {}", x.shape().len())),
    };
    let lanes = Lanes::around(shape, axis);
    let keys: Vec<Vec<Scalar>> = dispatch_data!(x.data(), v => {
        (0..lanes.len)
            .map(|i| {
                (0..lanes.outer)
                    .flat_map(|o| (0..lanes.inner).map(move |j| v[lanes.at(o, i, j)].to_scalar()))
                    .collect()
            })
            .collect()
    }, string _s => return Err(format!("the cpu `{}` kernels do not take string tensors", module_path!().rsplit("::").next().unwrap_or(""))));
    // A stable sort puts each group's first occurrence first.
    let mut by_key: Vec<usize> = (0..lanes.len).collect();
    by_key.sort_by(|&a, &b| compare(&keys[a], &keys[b]));
    // Groups of equal slices, each as (first occurrence, members), ascending by key.
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
    let mut inverse = vec![0i64; lanes.len];
    for (g, (_, members)) in groups.iter().enumerate() {
        for &m in members {
            inverse[m] = g as i64;
        }
    }
    let picks: Vec<usize> = groups.iter().map(|g| g.0).collect();
    let out = Lanes { len: picks.len(), ..lanes };
    let y = dispatch_data!(x.data(), v => {
        let mut y = Vec::with_capacity(out.outer * out.len * out.inner);
        for o in 0..out.outer {
            for &p in &picks {
                y.extend((0..out.inner).map(|j| v[lanes.at(o, p, j)]));
            }
        }
        pack(y)
    }, string _s => return Err(format!("the cpu `{}` kernels do not take string tensors", module_path!().rsplit("::").next().unwrap_or(""))));
    let mut y_shape = shape.to_vec();
    y_shape[axis] = picks.len();
    debug_assert_eq!(volume(&y_shape), y.len());
    let list = |v: Vec<i64>| tensor(vec![v.len()], TensorData::I64(v));
    Ok(vec![
        tensor(y_shape, y)?,
        list(picks.iter().map(|&p| p as i64).collect())?,
        list(inverse)?,
        list(groups.iter().map(|g| g.1.len() as i64).collect())?,
    ])
}

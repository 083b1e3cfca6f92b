//! Layers computed on the host by every backend (a device backend reads the input back
//! first): NonZero and Unique, whose output shapes depend on the values, and Assertion.

use crate::ir::tensor::{HostTensor, TensorData};
use std::cmp::Ordering;

/// Coordinates of the non-zero elements: `[rank, count]` i64, in row-major order (NaN is
/// non-zero, -0 is zero).
pub fn non_zero(x: &HostTensor) -> Result<HostTensor, String> {
    if x.dtype().is_string() {
        return Err("NonZero does not take string tensors".into());
    }
    let positions: Vec<usize> = x.to_f64_vec().iter().enumerate().filter(|(_, &v)| v != 0.0).map(|(i, _)| i).collect();
    let (shape, count) = (x.shape(), positions.len());
    let mut out = vec![0i64; shape.len() * count];
    for (c, &p) in positions.iter().enumerate() {
        let mut rest = p;
        for d in (0..shape.len()).rev() {
            out[d * count + c] = (rest % shape[d]) as i64;
            rest /= shape[d];
        }
    }
    HostTensor::new(vec![shape.len(), count], TensorData::I64(out)).map_err(|e| e.to_string())
}

/// An element as Unique compares it: integers exactly, floats by value with NaN above
/// every number (numpy's order, as the ONNX reference uses it).
#[derive(Clone, Copy, Debug)]
enum Key {
    Int(i128),
    Float(f64),
}

fn keys(x: &HostTensor) -> Result<Vec<Key>, String> {
    Ok(match x.data() {
        TensorData::String(_) => return Err("Unique does not take string tensors".into()),
        TensorData::U64(v) => v.iter().map(|&e| Key::Int(e.into())).collect(),
        TensorData::Bool(v) => v.iter().map(|&e| Key::Int(e.into())).collect(),
        _ => match x.to_i64_vec() {
            Some(ints) => ints.into_iter().map(|e| Key::Int(e.into())).collect(),
            None => x.to_f64_vec().into_iter().map(Key::Float).collect(),
        },
    })
}

fn order(a: &Key, b: &Key) -> Ordering {
    match (a, b) {
        (Key::Int(x), Key::Int(y)) => x.cmp(y),
        (Key::Float(x), Key::Float(y)) => match (x.is_nan(), y.is_nan()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            (false, false) => x.partial_cmp(y).unwrap_or(Ordering::Equal),
        },
        // One tensor holds one type; mixed keys do not occur.
        (Key::Int(_), Key::Float(_)) => Ordering::Less,
        (Key::Float(_), Key::Int(_)) => Ordering::Greater,
    }
}

/// Unique: the distinct elements (`axis` None, x flattened) or slices along `axis`,
/// ascending when `sorted`, else in order of first occurrence; with the first-occurrence
/// indices, the inverse indices and the counts (numpy's `unique`, as the ONNX reference
/// implementation uses it). Outputs `[y, indices, inverse_indices, counts]`.
pub fn unique(x: &HostTensor, axis: Option<usize>, sorted: bool) -> Result<Vec<HostTensor>, String> {
    let flat = [x.len()];
    let (shape, axis) = match axis {
        None => (&flat[..], 0),
        Some(a) if a < x.shape().len() => (x.shape(), a),
        Some(a) => return Err(format!("Unique axis {a} is out of range for rank {}", x.shape().len())),
    };
    let (outer, len, inner) = (shape[..axis].iter().product::<usize>(), shape[axis], shape[axis + 1..].iter().product::<usize>());
    let at = |o: usize, i: usize, j: usize| (o * len + i) * inner + j;
    let elements = keys(x)?;
    let slice_keys: Vec<Vec<Key>> =
        (0..len).map(|i| (0..outer).flat_map(|o| (0..inner).map(move |j| at(o, i, j))).map(|e| elements[e]).collect()).collect();
    let compare =
        |a: usize, b: usize| slice_keys[a].iter().zip(&slice_keys[b]).map(|(x, y)| order(x, y)).find(|o| o.is_ne()).unwrap_or(Ordering::Equal);
    // A stable sort puts each group's first occurrence first.
    let mut by_key: Vec<usize> = (0..len).collect();
    by_key.sort_by(|&a, &b| compare(a, b));
    // Groups of equal slices, each as (first occurrence, members), ascending by key.
    let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
    for &i in &by_key {
        match groups.last_mut() {
            Some((first, members)) if compare(*first, i).is_eq() => members.push(i),
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
    let taken: Vec<usize> = (0..outer).flat_map(|o| picks.iter().flat_map(move |&p| (0..inner).map(move |j| at(o, p, j)))).collect();
    let mut y_shape = shape.to_vec();
    y_shape[axis] = picks.len();
    let list = |v: Vec<i64>| HostTensor::new(vec![v.len()], TensorData::I64(v)).map_err(|e| e.to_string());
    Ok(vec![
        HostTensor::new(y_shape, x.data().gather(&taken)).map_err(|e| e.to_string())?,
        list(picks.iter().map(|&p| p as i64).collect())?,
        list(inverse)?,
        list(groups.iter().map(|g| g.1.len() as i64).collect())?,
    ])
}

/// Assertion: fails with `message` when any element of the bool condition is false.
pub fn assertion(condition: &HostTensor, message: &str) -> Result<(), String> {
    let TensorData::Bool(cond) = condition.data() else {
        return Err(format!("the assertion condition must be bool, not {}", condition.dtype()));
    };
    match cond.iter().position(|&c| !c) {
        None => Ok(()),
        Some(i) => Err(format!("assertion failed: {message} (element {i} is false)")),
    }
}

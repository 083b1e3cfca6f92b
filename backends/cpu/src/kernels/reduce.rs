//! Reductions over axes (Reduce) and running sums (CumulativeSum).
//!
//! Float reductions accumulate in f64 and round once, so the oracle is as exact as a
//! straightforward sum can be.

use super::{int_scalar, int_values};
use crate::element::{numeric_data, pack, FloatElem, IntElem};
use crate::layout::{wrap_index, Lanes, Reduction};
use kiln::{HostTensor, ReduceOp, TensorData};

/// Axes given as a tensor: negative values count from the end, none means every axis.
pub fn axes_from_tensor(axes: &HostTensor, rank: usize) -> Result<Vec<usize>, String> {
    kiln::plan::reduce::run_time_axes(&int_values(axes, "the axes input")?, rank)
}

pub fn reduce(op: ReduceOp, x: &HostTensor, axes: &[usize]) -> Result<TensorData, String> {
    let rank = x.shape().len();
    let mut reduced = vec![false; rank];
    for &a in axes {
        *reduced.get_mut(a).ok_or_else(|| format!("axis {a} is out of range for rank {rank}"))? = true;
    }
    let plan = Reduction::new(x.shape(), &reduced);
    match x.data() {
        TensorData::Bool(v) => bool_reduce(op, v, &plan),
        data => {
            numeric_data!(data, format!("Reduce {op:?}"), v =>
                float: float_reduce(op, v, &plan),
                int: int_reduce(op, v, &plan)?)
        }
    }
}

/// Max (and Min) of f64 that propagates NaN.
fn nan_fold(acc: f64, v: f64, take: fn(f64, f64) -> bool) -> f64 {
    if acc.is_nan() || v.is_nan() {
        f64::NAN
    } else if take(v, acc) {
        v
    } else {
        acc
    }
}

fn float_reduce<T: FloatElem>(op: ReduceOp, x: &[T], plan: &Reduction) -> TensorData {
    let reduce_one = |base: usize| -> f64 {
        let values = plan.members.iter().map(|&m| x[base + m].to_f64());
        match op {
            ReduceOp::Sum => values.sum(),
            ReduceOp::Prod => values.product(),
            ReduceOp::Max => values.fold(f64::NEG_INFINITY, |a, v| nan_fold(a, v, |v, a| v > a)),
            ReduceOp::Min => values.fold(f64::INFINITY, |a, v| nan_fold(a, v, |v, a| v < a)),
            // An empty mean is 0/0 = NaN.
            ReduceOp::Mean => values.sum::<f64>() / plan.members.len() as f64,
            ReduceOp::L1 => values.map(f64::abs).sum(),
            ReduceOp::L2 => values.map(|v| v * v).sum::<f64>().sqrt(),
            ReduceOp::LogSum => values.sum::<f64>().ln(),
            ReduceOp::LogSumExp => {
                let max = values.clone().fold(f64::NEG_INFINITY, |a, v| nan_fold(a, v, |v, a| v > a));
                // ±inf (including an empty reduction's -inf) and NaN are their own result.
                if !max.is_finite() {
                    max
                } else {
                    max + values.map(|v| (v - max).exp()).sum::<f64>().ln()
                }
            }
            ReduceOp::SumSquare => values.map(|v| v * v).sum(),
        }
    };
    pack(plan.bases.iter().map(|&b| T::from_f64(reduce_one(b))).collect::<Vec<T>>())
}

/// Integer reductions wrap like the type's arithmetic; Mean truncates toward zero; the
/// ops that leave the integers (L2, LogSum, LogSumExp) compute in f64 and convert like
/// Cast (truncate, saturate).
fn int_reduce<T: IntElem>(op: ReduceOp, x: &[T], plan: &Reduction) -> Result<TensorData, String> {
    let count = plan.members.len();
    let mut out = Vec::with_capacity(plan.bases.len());
    for &base in &plan.bases {
        let values = plan.members.iter().map(|&m| x[base + m]);
        let as_f64 = values.clone().map(|v| v.to_f64());
        out.push(match op {
            ReduceOp::Sum => values.fold(T::zero(), T::wrapping_add),
            ReduceOp::Prod => values.fold(T::ONE, T::wrapping_mul),
            ReduceOp::Max => values.fold(T::MIN, Ord::max),
            ReduceOp::Min => values.fold(T::MAX, Ord::min),
            ReduceOp::Mean => {
                if count == 0 {
                    return Err("integer mean over zero elements divides by zero".into());
                }
                T::wrap_i128(values.map(|v| v.to_i128()).sum::<i128>() / count as i128)
            }
            ReduceOp::L1 => values.fold(T::zero(), |a, v| a.wrapping_add(v.wrapping_abs())),
            ReduceOp::SumSquare => values.fold(T::zero(), |a, v| a.wrapping_add(v.wrapping_mul(v))),
            ReduceOp::L2 => T::saturate_f64(as_f64.map(|v| v * v).sum::<f64>().sqrt()),
            ReduceOp::LogSum => T::saturate_f64(as_f64.sum::<f64>().ln()),
            ReduceOp::LogSumExp => {
                let max = as_f64.clone().fold(f64::NEG_INFINITY, f64::max);
                let lse = if max.is_finite() { max + as_f64.map(|v| (v - max).exp()).sum::<f64>().ln() } else { max };
                T::saturate_f64(lse)
            }
        });
    }
    Ok(pack(out))
}

/// Max is "any" and Min is "all"; arithmetic reductions are not defined on bool.
fn bool_reduce(op: ReduceOp, x: &[bool], plan: &Reduction) -> Result<TensorData, String> {
    let any = match op {
        ReduceOp::Max => true,
        ReduceOp::Min => false,
        _ => return Err(format!("Reduce {op:?} is not defined on bool")),
    };
    let out = plan.bases.iter().map(|&b| {
        let mut values = plan.members.iter().map(|&m| x[b + m]);
        if any {
            values.any(|v| v)
        } else {
            values.all(|v| v)
        }
    });
    Ok(TensorData::Bool(out.collect()))
}

/// Running sums along the axis given as a tensor (negative counts from the end).
pub fn cumulative_sum(x: &HostTensor, axis: &HostTensor, exclusive: bool, reverse: bool) -> Result<TensorData, String> {
    let rank = x.shape().len();
    let raw = int_scalar(axis, "the axis")?;
    let axis = wrap_index(raw, rank).ok_or_else(|| format!("axis {raw} is out of range for rank {rank}"))?;
    let lanes = Lanes::around(x.shape(), axis);
    numeric_data!(x.data(), "CumulativeSum", v => float: {
        let mut out = v.clone();
        let write = |i: usize, s: f64| out[i] = FloatElem::from_f64(s);
        running(&lanes, exclusive, reverse, |i| v[i].to_f64(), 0.0, |a, b| a + b, write);
        pack(out)
    }, int: {
        let mut out = v.clone();
        running(&lanes, exclusive, reverse, |i| v[i], IntElem::wrap_i128(0), IntElem::wrapping_add, |i, s| out[i] = s);
        pack(out)
    })
}

/// Running products along the axis given as a tensor (negative counts from the end).
pub fn cumulative_product(
    x: &HostTensor,
    axis: &HostTensor,
    exclusive: bool,
    reverse: bool,
) -> Result<TensorData, String> {
    let rank = x.shape().len();
    let raw = int_scalar(axis, "the axis")?;
    let axis = wrap_index(raw, rank).ok_or_else(|| format!("axis {raw} is out of range for rank {rank}"))?;
    let lanes = Lanes::around(x.shape(), axis);
    numeric_data!(x.data(), "CumulativeProduct", v => float: {
        let mut out = v.clone();
        let write = |i: usize, s: f64| out[i] = FloatElem::from_f64(s);
        running(&lanes, exclusive, reverse, |i| v[i].to_f64(), 1.0, |a, b| a * b, write);
        pack(out)
    }, int: {
        let mut out = v.clone();
        running(&lanes, exclusive, reverse, |i| v[i], IntElem::wrap_i128(1), IntElem::wrapping_mul, |i, s| out[i] = s);
        pack(out)
    })
}

/// Walks every lane in order (or reversed) writing inclusive or exclusive running sums.
fn running<S: Copy>(
    lanes: &Lanes,
    exclusive: bool,
    reverse: bool,
    read: impl Fn(usize) -> S,
    zero: S,
    add: impl Fn(S, S) -> S,
    mut write: impl FnMut(usize, S),
) {
    for o in 0..lanes.outer {
        for j in 0..lanes.inner {
            let mut sum = zero;
            for step in 0..lanes.len {
                let i = lanes.at(o, if reverse { lanes.len - 1 - step } else { step }, j);
                let next = add(sum, read(i));
                write(i, if exclusive { sum } else { next });
                sum = next;
            }
        }
    }
}

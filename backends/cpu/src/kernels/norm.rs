//! Normalizing layers: SoftMax, Normalization (layer/instance/group norm) and LRN.
//! Statistics and sums are computed in f64 and each output rounds once.

use super::typed;
use crate::element::{float_data, pack, FloatElem};
use crate::layout::{Broadcast, Lanes, Reduction};
use kiln::plan::norm::NormView;
use kiln::{HostTensor, TensorData};

/// `exp(x - max) / sum(exp(x - max))` along `axis`; subtracting the max keeps exp finite.
pub fn softmax(x: &HostTensor, axis: usize) -> Result<TensorData, String> {
    if axis >= x.shape().len() {
        return Err(format!("axis {axis} is out of range for rank {}", x.shape().len()));
    }
    let lanes = Lanes::around(x.shape(), axis);
    fn run<T: FloatElem>(x: &[T], lanes: &Lanes) -> TensorData {
        let mut out = x.to_vec();
        let mut exps = vec![0.0f64; lanes.len];
        for o in 0..lanes.outer {
            for j in 0..lanes.inner {
                let value = |i: usize| x[lanes.at(o, i, j)].to_f64();
                let max = (0..lanes.len).map(value).fold(f64::NEG_INFINITY, f64::max);
                for (i, e) in exps.iter_mut().enumerate() {
                    *e = (value(i) - max).exp();
                }
                let sum: f64 = exps.iter().sum();
                for (i, e) in exps.iter().enumerate() {
                    out[lanes.at(o, i, j)] = T::from_f64(e / sum);
                }
            }
        }
        pack(out)
    }
    float_data!(x.data(), "SoftMax", v => run(v, &lanes))
}

/// `(x - mean) / sqrt(var + epsilon) * scale + bias` with population statistics over
/// `axes`; with `num_groups > 1` axis 1 splits into groups that each add their channels to
/// the reduced set, so statistics are per (sample, group) for spatial `axes`.
pub fn normalization(
    x: &HostTensor,
    scale: &HostTensor,
    bias: &HostTensor,
    axes: &[usize],
    epsilon: f32,
    num_groups: usize,
) -> Result<TensorData, String> {
    let shape = x.shape();
    // The grouped view is a pure reshape: contiguous offsets into it are offsets into `x`.
    let norm = NormView::new(shape, axes, num_groups)?;
    let plan = Reduction::new(&norm.view, &norm.reduced);
    let (scale_at, bias_at) = (Broadcast::new(scale.shape(), shape)?, Broadcast::new(bias.shape(), shape)?);
    let eps = epsilon as f64;
    fn run<T: FloatElem>(
        x: &[T],
        s: &[T],
        b: &[T],
        plan: &Reduction,
        sa: &Broadcast,
        ba: &Broadcast,
        eps: f64,
    ) -> TensorData {
        let mut out = x.to_vec();
        let n = plan.members.len() as f64;
        for &base in &plan.bases {
            let value = |m: usize| x[base + m].to_f64();
            let mean = plan.members.iter().map(|&m| value(m)).sum::<f64>() / n;
            let var = plan.members.iter().map(|&m| (value(m) - mean).powi(2)).sum::<f64>() / n;
            let inv_std = 1.0 / (var + eps).sqrt();
            for &m in &plan.members {
                let i = base + m;
                let y = (value(m) - mean) * inv_std * s[sa.at(i)].to_f64() + b[ba.at(i)].to_f64();
                out[i] = T::from_f64(y);
            }
        }
        pack(out)
    }
    float_data!(x.data(), "Normalization", v => {
        run(v, typed(scale, "scale")?, typed(bias, "bias")?, &plan, &scale_at, &bias_at, eps)
    })
}

/// ONNX LRN: `x / (k + alpha / size * sum of x² over the channel window)^beta`, the window
/// spanning `[c - floor((size-1)/2), c + ceil((size-1)/2)]` clipped to the channels.
pub fn lrn(x: &HostTensor, size: usize, alpha: f32, beta: f32, k: f32) -> Result<TensorData, String> {
    if x.shape().len() < 2 || size == 0 {
        return Err("LRN needs a channel axis 1 and a window of at least 1".into());
    }
    let lanes = Lanes::around(x.shape(), 1);
    let (before, after) = ((size - 1) / 2, (size - 1).div_ceil(2));
    let (alpha, beta, k) = (alpha as f64, beta as f64, k as f64);
    fn run<T: FloatElem>(
        x: &[T],
        lanes: &Lanes,
        before: usize,
        after: usize,
        size: usize,
        coef: (f64, f64, f64),
    ) -> TensorData {
        let (alpha, beta, k) = coef;
        let mut out = x.to_vec();
        for o in 0..lanes.outer {
            for j in 0..lanes.inner {
                for c in 0..lanes.len {
                    let lo = c.saturating_sub(before);
                    let hi = (c + after).min(lanes.len - 1);
                    let square_sum: f64 = (lo..=hi).map(|i| x[lanes.at(o, i, j)].to_f64().powi(2)).sum();
                    let v = x[lanes.at(o, c, j)].to_f64();
                    out[lanes.at(o, c, j)] = T::from_f64(v / (k + alpha / size as f64 * square_sum).powf(beta));
                }
            }
        }
        pack(out)
    }
    float_data!(x.data(), "LRN", v => run(v, &lanes, before, after, size, (alpha, beta, k)))
}

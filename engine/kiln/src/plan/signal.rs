//! DFT and Col2Im planning: the signal a DFT transforms, its twiddles, and a Col2Im's
//! block sizes (shape inference keeps the rules for the output shapes).

use crate::ir::infer::{dft_axis, dft_length};

/// A DFT's signal read off its input shape (`[…, axis length, …, 1 or 2]`, the last axis real
/// or real/imaginary): every backend computes the transform from this.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DftSignal {
    pub axis: usize,
    /// Real (1) or complex (2) samples.
    pub parts: usize,
    /// The input's length along the axis.
    pub in_len: usize,
    /// The transform length.
    pub n: usize,
    /// The input samples that take part (an inverse onesided transform reads `n / 2 + 1`
    /// bins; the rest of a shorter input is zero padding).
    pub used: usize,
}

pub fn dft_signal(shape: &[usize], axis: i64, length: Option<i64>, inverse: bool, onesided: bool) -> Result<DftSignal, String> {
    let rank = shape.len();
    let axis = dft_axis(axis, rank)?;
    let parts = shape[rank - 1];
    if parts != 1 && parts != 2 {
        return Err(format!("the last axis of a DFT signal must be 1 or 2, got {parts}"));
    }
    let in_len = shape[axis];
    let n = dft_length(in_len, length, inverse, onesided)?;
    let used = if inverse && onesided { in_len.min(n / 2 + 1) } else { in_len.min(n) };
    Ok(DftSignal { axis, parts, in_len, n, used })
}

/// `cos` and `sin` of `2π·m / n` for every `m < n` (exact angles; the twiddles every backend's
/// DFT uses, so they agree bit for bit).
pub fn dft_twiddles(n: usize) -> (Vec<f64>, Vec<f64>) {
    (0..n).map(|m| (std::f64::consts::TAU * m as f64 / n as f64).sin_cos()).map(|(s, c)| (c, s)).unzip()
}

/// A Col2Im block shape given as the layer's i64 input, as sizes.
pub fn col2im_block_dims(block: &[i64]) -> Result<Vec<usize>, String> {
    block.iter().map(|&b| usize::try_from(b).map_err(|_| format!("Col2Im block dim {b} is negative"))).collect()
}

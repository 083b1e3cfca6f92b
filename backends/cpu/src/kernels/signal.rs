//! The discrete Fourier transform (ONNX DFT), computed directly in f64 with exact twiddle
//! angles (`j·k mod n`), which matches numpy's FFT to rounding at the sizes models use.

use crate::element::{float_data, pack, FloatElem};
use kiln::ir::infer::col2im_blocks;
use kiln::plan::signal::{col2im_block_dims, dft_signal, dft_twiddles, DftSignal};
use kiln::{HostTensor, TensorData};

pub fn dft(
    x: &HostTensor,
    length: Option<i64>,
    axis: i64,
    inverse: bool,
    onesided: bool,
    out_shape: &[usize],
) -> Result<TensorData, String> {
    let xs = x.shape();
    let rank = xs.len();
    let DftSignal { axis, parts, in_len, n, used } = dft_signal(xs, axis, length, inverse, onesided)?;
    let out_len = out_shape[axis];
    let out_parts = out_shape[rank - 1];
    let outer: usize = xs[..axis].iter().product();
    let inner: usize = xs[axis + 1..rank - 1].iter().product();
    let xv = x.to_f64_vec();
    let (cos, sin) = dft_twiddles(n);
    let sign = if inverse { 1.0 } else { -1.0 };
    let scale = if inverse { 1.0 / n as f64 } else { 1.0 };
    let mut out = vec![0f64; outer * out_len * inner * out_parts];
    let mut signal = vec![(0f64, 0f64); n];
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| ((o * in_len + j) * inner + i) * parts;
            signal.iter_mut().for_each(|s| *s = (0.0, 0.0));
            for (j, s) in signal.iter_mut().enumerate().take(used) {
                *s = (xv[at(j)], if parts == 2 { xv[at(j) + 1] } else { 0.0 });
            }
            if inverse && onesided {
                // The full spectrum of a real signal is Hermitian: X[n-k] = conj(X[k]).
                for k in (n / 2 + 1)..n {
                    let (re, im) = signal[n - k];
                    signal[k] = (re, -im);
                }
            }
            // Zero padding adds nothing to a sum: only the given samples are summed, so a
            // long dft_length over a short signal costs its samples, not length².
            let filled = if inverse && onesided { n } else { used.min(n) };
            for k in 0..out_len {
                let (mut re, mut im) = (0f64, 0f64);
                for (j, &(a, b)) in signal[..filled].iter().enumerate() {
                    let m = (j * k) % n;
                    let (c, s) = (cos[m], sign * sin[m]);
                    re += a * c - b * s;
                    im += a * s + b * c;
                }
                let base = ((o * out_len + k) * inner + i) * out_parts;
                out[base] = re * scale;
                if out_parts == 2 {
                    out[base + 1] = im * scale;
                }
            }
        }
    }
    fn to_float<T: FloatElem>(_: &[T], v: Vec<f64>) -> TensorData {
        pack(v.into_iter().map(T::from_f64).collect::<Vec<T>>())
    }
    float_data!(x.data(), "DFT", v => to_float(v, out))
}

/// Col2Im: every column `l` of `(N, C·∏block, L)` holds one block of the image (the block
/// positions in row-major order); its entries are summed into the padded image, and the
/// padding is dropped.
pub fn col2im(
    x: &HostTensor,
    block: &[i64],
    strides: &[usize],
    dilations: &[usize],
    pads: &[usize],
    out_shape: &[usize],
) -> Result<TensorData, String> {
    let spatial = out_shape.len().saturating_sub(2);
    let image = &out_shape[2..];
    let block = col2im_block_dims(block)?;
    let grid = col2im_blocks(image, &block, strides, dilations, pads)?;
    let xs = x.shape();
    let (batch, channels) = (out_shape[0], out_shape[1]);
    let product = |v: &[usize]| v.iter().try_fold(1usize, |p, &d| p.checked_mul(d));
    let (Some(per_channel), Some(columns)) = (product(&block), product(&grid)) else {
        return Err(format!("Col2Im block {block:?} or its grid {grid:?} overflows"));
    };
    if channels.checked_mul(per_channel).is_none_or(|rows| xs != [batch, rows, columns]) {
        return Err(format!("Col2Im input {xs:?} does not hold {channels}×{per_channel} rows of {columns} blocks"));
    }
    let pixels: usize = image.iter().product();
    let xv = x.to_f64_vec();
    let mut out = vec![0f64; batch * channels * pixels];
    let unravel = |mut index: usize, dims: &[usize]| -> Vec<usize> {
        let mut at = vec![0; dims.len()];
        for d in (0..dims.len()).rev() {
            at[d] = index % dims[d];
            index /= dims[d];
        }
        at
    };
    for row in 0..channels * per_channel {
        let (c, k) = (row / per_channel, row % per_channel);
        let offset = unravel(k, &block);
        for l in 0..columns {
            let position = unravel(l, &grid);
            // The pixel this entry lands on, if inside the image (not in the padding).
            let mut pixel = 0usize;
            let mut inside = true;
            for d in 0..spatial {
                let padded = position[d] * strides[d] + offset[d] * dilations[d];
                match padded.checked_sub(pads[d]).filter(|&p| p < image[d]) {
                    Some(p) => pixel = pixel * image[d] + p,
                    None => inside = false,
                }
            }
            if !inside {
                continue;
            }
            for n in 0..batch {
                out[(n * channels + c) * pixels + pixel] += xv[(n * channels * per_channel + row) * columns + l];
            }
        }
    }
    fn to_float<T: FloatElem>(_: &[T], v: Vec<f64>) -> TensorData {
        pack(v.into_iter().map(T::from_f64).collect::<Vec<T>>())
    }
    float_data!(x.data(), "Col2Im", v => to_float(v, out))
}

/// The determinant of each `n×n` matrix in the last two dims: LU decomposition with partial
/// pivoting in f64.
pub fn determinant(x: &HostTensor) -> Result<TensorData, String> {
    let xs = x.shape();
    let rank = xs.len();
    if rank < 2 || xs[rank - 1] != xs[rank - 2] {
        return Err(format!("Det needs square matrices in the last two dims, got {xs:?}"));
    }
    let n = xs[rank - 1];
    let xv = x.to_f64_vec();
    let count: usize = xs[..rank - 2].iter().product();
    let mut out = Vec::with_capacity(count);
    for m in 0..count {
        let mut a = xv[m * n * n..(m + 1) * n * n].to_vec();
        let mut det = 1f64;
        for col in 0..n {
            let pivot = (col..n).max_by(|&i, &j| a[i * n + col].abs().total_cmp(&a[j * n + col].abs())).unwrap_or(col);
            if a[pivot * n + col] == 0.0 {
                det = 0.0;
                break;
            }
            if pivot != col {
                for k in 0..n {
                    a.swap(pivot * n + k, col * n + k);
                }
                det = -det;
            }
            let p = a[col * n + col];
            det *= p;
            for row in col + 1..n {
                let factor = a[row * n + col] / p;
                for k in col..n {
                    a[row * n + k] -= factor * a[col * n + k];
                }
            }
        }
        out.push(det);
    }
    fn to_float<T: FloatElem>(_: &[T], v: Vec<f64>) -> TensorData {
        pack(v.into_iter().map(T::from_f64).collect::<Vec<T>>())
    }
    float_data!(x.data(), "Det", v => to_float(v, out))
}

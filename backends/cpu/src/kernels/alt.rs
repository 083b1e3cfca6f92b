//! The second implementation of convolution and of float matrix multiply, offered as
//! tactics next to the GEMM-based ones: different loop orders and memory traffic, the same
//! results up to float summation order.

use super::conv::{bias_filled, for_each_kernel_tap, for_each_tap, AxisTable};
use super::matmul::Plan;
use crate::element::{pack, FloatElem, Real};
use crate::layout::{strides, volume};
use kiln::{ConvolutionParams, TensorData};

/// Direct convolution: no im2col buffer; per input channel and kernel tap, the input
/// positions the tap reads are found once and accumulated into every output map.
pub(super) fn conv_direct_acc<R: Real>(
    p: &ConvolutionParams,
    x: &[R],
    xs: &[usize],
    w: &[R],
    ws: &[usize],
    bias: Option<&[R]>,
    out_shape: &[usize],
) -> Result<Vec<R>, String> {
    let (batch, channels, maps, groups) = (xs[0], xs[1], ws[0], p.groups);
    let (cg, kg) = (channels / groups, maps / groups);
    let (in_sp, kernel, out_sp) = (&xs[2..], &ws[2..], &out_shape[2..]);
    let (in_vol, k_vol, out_vol) = (volume(in_sp), volume(kernel), volume(out_sp));
    let mut y = bias_filled(batch, maps, out_vol, bias);
    let tables: Vec<AxisTable> = (0..in_sp.len())
        .map(|d| AxisTable::new(out_sp[d], kernel[d], p.strides[d], p.dilations[d], p.pre_padding[d], in_sp[d]))
        .collect();
    let in_strides = strides(in_sp);
    let mut reads: Vec<Option<usize>> = Vec::with_capacity(out_vol);
    for n in 0..batch {
        for g in 0..groups {
            for c in 0..cg {
                let x_offset = (n * channels + g * cg + c) * in_vol;
                let plane = x.get(x_offset..x_offset + in_vol).ok_or("input is shorter than its shape")?;
                for_each_kernel_tap(kernel, |t, tap| {
                    reads.clear();
                    for_each_tap(&tables, tap, &in_strides, |_, src| reads.push(src));
                    for m in g * kg..(g + 1) * kg {
                        let weight = w[(m * cg + c) * k_vol + t];
                        let out = &mut y[(n * maps + m) * out_vol..(n * maps + m + 1) * out_vol];
                        for (o, src) in out.iter_mut().zip(&reads) {
                            if let Some(s) = src {
                                *o = *o + weight * plane[*s];
                            }
                        }
                    }
                });
            }
        }
    }
    Ok(y)
}

/// Rows and inner-dimension blocks small enough that a block of `a` and the matching rows
/// of `b` stay in cache.
const BLOCK: usize = 64;

/// Blocked matrix multiply: `i`/`k` blocks, each row of the result updated along `j`.
pub(super) fn float_matmul_blocked<T: FloatElem>(plan: &Plan, a: &[T], b: &[T]) -> TensorData {
    let (a, b) = (T::widen_slice(a), T::widen_slice(b));
    let (m, k, n) = (plan.rows(), plan.a.cols, plan.cols());
    let mut c = vec![T::Acc::ZERO; plan.batch * m * n];
    for bi in 0..plan.batch {
        let (la, lb) = plan.layouts(bi);
        let base = bi * m * n;
        for i0 in (0..m).step_by(BLOCK) {
            for p0 in (0..k).step_by(BLOCK) {
                for i in i0..(i0 + BLOCK).min(m) {
                    let row = &mut c[base + i * n..base + (i + 1) * n];
                    for p in p0..(p0 + BLOCK).min(k) {
                        let x = a[la.offset + i * la.row_stride + p * la.col_stride];
                        let b_row = lb.offset + p * lb.row_stride;
                        for (j, out) in row.iter_mut().enumerate() {
                            *out = *out + x * b[b_row + j * lb.col_stride];
                        }
                    }
                }
            }
        }
    }
    pack(T::narrow_vec(c))
}

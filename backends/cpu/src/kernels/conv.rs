//! Convolution as im2col + GEMM and transposed convolution as GEMM + col2im, for any
//! number of spatial dims, groups, strides, dilations and asymmetric padding.

use super::{alt, typed, Variant};
use crate::element::{float_data, pack, FloatElem, Real};
use crate::layout::{strides, try_for_each_index, volume};
use kiln::{ConvolutionParams, DeconvolutionParams, HostTensor, TensorData};
use kiln_cpu_gemm::MatrixLayout;

/// For one spatial axis: which coordinate of the "mapped" grid each (kernel tap, iterated
/// coordinate) pair touches: `iter * stride + tap * dilation - pre`, if inside `[0, mapped)`.
///
/// Convolution iterates output coordinates and maps to input ones; transposed convolution
/// iterates input coordinates and maps to output ones, with the same formula.
pub(super) struct AxisTable {
    iter_len: usize,
    map: Vec<Option<usize>>,
}

impl AxisTable {
    pub(super) fn new(iter_len: usize, taps: usize, stride: usize, dilation: usize, pre: usize, mapped: usize) -> AxisTable {
        let mut map = Vec::with_capacity(taps * iter_len);
        for t in 0..taps {
            for i in 0..iter_len {
                let c = (i * stride + t * dilation) as i64 - pre as i64;
                map.push((0..mapped as i64).contains(&c).then_some(c as usize));
            }
        }
        AxisTable { iter_len, map }
    }

    #[inline]
    fn at(&self, tap: usize, i: usize) -> Option<usize> {
        self.map[tap * self.iter_len + i]
    }
}

/// Calls `f(iter_flat, mapped_offset)` for every position of the iterated grid under
/// kernel tap `tap` (one index per axis); the offset is `None` where the tap falls outside.
pub(super) fn for_each_tap(
    tables: &[AxisTable],
    tap: &[usize],
    mapped_strides: &[usize],
    mut f: impl FnMut(usize, Option<usize>),
) {
    let Some((last, outer_tables)) = tables.split_last() else {
        return;
    };
    let outer_dims: Vec<usize> = outer_tables.iter().map(|t| t.iter_len).collect();
    let last_axis = tables.len() - 1;
    let mut flat = 0;
    let _ = try_for_each_index(&outer_dims, |pos| {
        let mut base = Some(0usize);
        for (d, &i) in pos.iter().enumerate() {
            base = base.zip(outer_tables[d].at(tap[d], i)).map(|(acc, c)| acc + c * mapped_strides[d]);
        }
        for i in 0..last.iter_len {
            let offset = base.zip(last.at(tap[last_axis], i)).map(|(acc, c)| acc + c * mapped_strides[last_axis]);
            f(flat, offset);
            flat += 1;
        }
        Ok::<(), ()>(())
    });
}

/// Calls `f(tap_flat, tap)` for every kernel tap in row-major order.
pub(super) fn for_each_kernel_tap(kernel: &[usize], mut f: impl FnMut(usize, &[usize])) {
    let mut flat = 0;
    let _ = try_for_each_index(kernel, |tap| {
        f(flat, tap);
        flat += 1;
        Ok::<(), ()>(())
    });
}

fn check_spatial(what: &str, spatial: usize, lists: &[&[usize]]) -> Result<(), String> {
    if lists.iter().any(|l| l.len() != spatial) {
        return Err(format!("{what} parameters do not match {spatial} spatial dims"));
    }
    Ok(())
}

fn gemm_error(e: kiln_cpu_gemm::LayoutError) -> String {
    e.to_string()
}

pub fn convolution(
    p: &ConvolutionParams,
    x: &HostTensor,
    w: &HostTensor,
    bias: Option<&HostTensor>,
    out_shape: &[usize],
    variant: Variant,
) -> Result<TensorData, String> {
    let (xs, ws) = (x.shape(), w.shape());
    let rank = xs.len();
    if rank < 3 || ws.len() != rank || out_shape.len() != rank {
        return Err(format!("convolution needs N×C×spatial input and kernel of one rank, got {xs:?} and {ws:?}"));
    }
    check_spatial("convolution", rank - 2, &[&p.strides, &p.dilations, &p.pre_padding, &p.post_padding])?;
    let (maps, groups) = (ws[0], p.groups);
    if groups == 0 || xs[1] != ws[1] * groups || maps % groups != 0 || out_shape[..2] != [xs[0], maps] {
        return Err(format!("input {xs:?}, kernel {ws:?} and {groups} groups do not fit together"));
    }
    if let Some(b) = bias {
        if b.len() != maps {
            return Err(format!("bias has {} elements for {maps} output maps", b.len()));
        }
    }
    // The operands, their shapes and the tactic: bundling them would only rename them.
    #[allow(clippy::too_many_arguments)]
    fn run<T: FloatElem>(
        p: &ConvolutionParams,
        x: &[T],
        xs: &[usize],
        w: &[T],
        ws: &[usize],
        bias: Option<&[T]>,
        out_shape: &[usize],
        variant: Variant,
    ) -> Result<TensorData, String> {
        let bias = bias.map(T::widen_slice);
        let acc = if variant == Variant::Alternate { alt::conv_direct_acc } else { conv_acc };
        let y = acc(p, &T::widen_slice(x), xs, &T::widen_slice(w), ws, bias.as_deref(), out_shape)?;
        Ok(pack(T::narrow_vec(y)))
    }
    float_data!(x.data(), "Convolution", v => {
        run(p, v, xs, typed(w, "kernel")?, ws, bias.map(|b| typed(b, "bias")).transpose()?, out_shape, variant)?
    })
}

/// The `batch × maps × out_vol` output with each map's bias (zeros without one), which the
/// convolution kernels accumulate into.
pub(super) fn bias_filled<R: Real>(batch: usize, maps: usize, out_vol: usize, bias: Option<&[R]>) -> Vec<R> {
    let mut y = vec![R::ZERO; batch * maps * out_vol];
    if let Some(b) = bias {
        for (plane, chunk) in y.chunks_mut(out_vol.max(1)).enumerate() {
            chunk.fill(b[plane % maps]);
        }
    }
    y
}

fn conv_acc<R: Real>(
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
    let rows = cg * k_vol;
    let mut y = bias_filled(batch, maps, out_vol, bias);
    // A 1×1 kernel with unit stride and no padding reads the input as it lies.
    let direct = kernel.iter().all(|&k| k == 1)
        && p.strides.iter().all(|&s| s == 1)
        && p.pre_padding.iter().chain(&p.post_padding).all(|&q| q == 0);
    let tables: Vec<AxisTable> = (0..in_sp.len())
        .map(|d| AxisTable::new(out_sp[d], kernel[d], p.strides[d], p.dilations[d], p.pre_padding[d], in_sp[d]))
        .collect();
    let in_strides = strides(in_sp);
    let mut col = if direct { Vec::new() } else { vec![R::ZERO; rows * out_vol] };
    for n in 0..batch {
        for g in 0..groups {
            let x_offset = (n * channels + g * cg) * in_vol;
            if !direct {
                for c in 0..cg {
                    let plane = &x[x_offset + c * in_vol..x_offset + (c + 1) * in_vol];
                    for_each_kernel_tap(kernel, |t, tap| {
                        let dst = &mut col[(c * k_vol + t) * out_vol..(c * k_vol + t + 1) * out_vol];
                        for_each_tap(&tables, tap, &in_strides, |o, src| dst[o] = src.map_or(R::ZERO, |s| plane[s]));
                    });
                }
            }
            let (b, lb) = if direct {
                (x, MatrixLayout::row_major(x_offset, out_vol))
            } else {
                (&col[..], MatrixLayout::row_major(0, out_vol))
            };
            R::gemm(
                kg,
                rows,
                out_vol,
                w,
                MatrixLayout::row_major(g * kg * rows, rows),
                b,
                lb,
                &mut y,
                MatrixLayout::row_major((n * maps + g * kg) * out_vol, out_vol),
                bias.is_some(),
            )
            .map_err(gemm_error)?;
        }
    }
    Ok(y)
}

pub fn deconvolution(
    p: &DeconvolutionParams,
    x: &HostTensor,
    w: &HostTensor,
    bias: Option<&HostTensor>,
    out_shape: &[usize],
) -> Result<TensorData, String> {
    let (xs, ws) = (x.shape(), w.shape());
    let rank = xs.len();
    if rank < 3 || ws.len() != rank || out_shape.len() != rank {
        return Err(format!("deconvolution needs N×C×spatial input and kernel of one rank, got {xs:?} and {ws:?}"));
    }
    check_spatial(
        "deconvolution",
        rank - 2,
        &[&p.strides, &p.dilations, &p.pre_padding, &p.post_padding, &p.output_padding],
    )?;
    let groups = p.groups;
    let maps = ws[1] * groups;
    if groups == 0 || xs[1] != ws[0] || xs[1] % groups != 0 || out_shape[..2] != [xs[0], maps] {
        return Err(format!("input {xs:?}, kernel {ws:?} and {groups} groups do not fit together"));
    }
    if let Some(b) = bias {
        if b.len() != maps {
            return Err(format!("bias has {} elements for {maps} output maps", b.len()));
        }
    }
    fn run<T: FloatElem>(
        p: &DeconvolutionParams,
        x: &[T],
        xs: &[usize],
        w: &[T],
        ws: &[usize],
        bias: Option<&[T]>,
        out_shape: &[usize],
    ) -> Result<TensorData, String> {
        let bias = bias.map(T::widen_slice);
        let y = deconv_acc(p, &T::widen_slice(x), xs, &T::widen_slice(w), ws, bias.as_deref(), out_shape)?;
        Ok(pack(T::narrow_vec(y)))
    }
    float_data!(x.data(), "Deconvolution", v => {
        run(p, v, xs, typed(w, "kernel")?, ws, bias.map(|b| typed(b, "bias")).transpose()?, out_shape)?
    })
}

fn deconv_acc<R: Real>(
    p: &DeconvolutionParams,
    x: &[R],
    xs: &[usize],
    w: &[R],
    ws: &[usize],
    bias: Option<&[R]>,
    out_shape: &[usize],
) -> Result<Vec<R>, String> {
    let (batch, channels, groups) = (xs[0], xs[1], p.groups);
    let (cg, kg) = (channels / groups, ws[1]);
    let maps = kg * groups;
    let (in_sp, kernel, out_sp) = (&xs[2..], &ws[2..], &out_shape[2..]);
    let (in_vol, k_vol, out_vol) = (volume(in_sp), volume(kernel), volume(out_sp));
    let rows = kg * k_vol;
    let tables: Vec<AxisTable> = (0..in_sp.len())
        .map(|d| AxisTable::new(in_sp[d], kernel[d], p.strides[d], p.dilations[d], p.pre_padding[d], out_sp[d]))
        .collect();
    let out_strides = strides(out_sp);
    let mut y = vec![R::ZERO; batch * maps * out_vol];
    let mut col = vec![R::ZERO; rows * in_vol];
    for n in 0..batch {
        for g in 0..groups {
            // col (kg·taps × in) = W_gᵀ (kg·taps × cg) · X_g (cg × in)
            R::gemm(
                rows,
                cg,
                in_vol,
                w,
                MatrixLayout::transposed(g * cg * rows, rows),
                x,
                MatrixLayout::row_major((n * channels + g * cg) * in_vol, in_vol),
                &mut col,
                MatrixLayout::row_major(0, in_vol),
                false,
            )
            .map_err(gemm_error)?;
            for k in 0..kg {
                let plane_start = (n * maps + g * kg + k) * out_vol;
                let plane = &mut y[plane_start..plane_start + out_vol];
                for_each_kernel_tap(kernel, |t, tap| {
                    let src = &col[(k * k_vol + t) * in_vol..(k * k_vol + t + 1) * in_vol];
                    for_each_tap(&tables, tap, &out_strides, |i, dst| {
                        if let Some(d) = dst {
                            plane[d] = plane[d] + src[i];
                        }
                    });
                });
            }
        }
    }
    if let Some(b) = bias {
        for (plane, chunk) in y.chunks_mut(out_vol.max(1)).enumerate() {
            let v = b[plane % maps];
            chunk.iter_mut().for_each(|e| *e = *e + v);
        }
    }
    Ok(y)
}

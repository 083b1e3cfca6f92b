//! Max and average pooling over 1-D/2-D/3-D windows with padding, dilation and ceil mode.

use crate::element::{numeric_data, pack, FloatElem, IntElem};
use crate::layout::{strides, try_for_each_index, volume};
use kiln::plan::pool::axis_window;
use kiln::{HostTensor, PoolingKind, PoolingParams, TensorData};

/// The windows of one spatial axis, per output coordinate.
struct AxisWindows {
    /// Input coordinates inside the tensor (padding cells are skipped).
    cells: Vec<Vec<usize>>,
    /// Window cells inside the padded extent `[-pre, input + post)`: the divisor of average
    /// pooling that counts padding. Cells past it, which only ceil mode reaches, never count.
    padded_counts: Vec<usize>,
}

fn axis_windows(p: &PoolingParams, d: usize, input: usize, output: usize) -> AxisWindows {
    let mut w = AxisWindows { cells: Vec::with_capacity(output), padded_counts: Vec::with_capacity(output) };
    let dilation = p.dilations.get(d).copied().unwrap_or(1).max(1) as i128;
    for o in 0..output {
        let window = axis_window(p, d, input, o);
        w.cells.push(window.inside.map(|k| (window.start + k * dilation) as usize).collect());
        w.padded_counts.push(window.padded_count as usize);
    }
    w
}

/// Offsets (within one plane) of the cells of every output position's window.
struct Windows {
    offsets: Vec<Vec<usize>>,
    padded_counts: Vec<usize>,
}

fn windows(p: &PoolingParams, in_spatial: &[usize], out_spatial: &[usize]) -> Result<Windows, String> {
    let spatial = in_spatial.len();
    let lists = [&p.window, &p.strides, &p.dilations, &p.pre_padding, &p.post_padding];
    if lists.iter().any(|l| l.len() != spatial) {
        return Err(format!("pooling parameters do not match {spatial} spatial dims"));
    }
    let axes: Vec<AxisWindows> = (0..spatial).map(|d| axis_windows(p, d, in_spatial[d], out_spatial[d])).collect();
    let st = strides(in_spatial);
    let mut out = Windows { offsets: Vec::with_capacity(volume(out_spatial)), padded_counts: vec![] };
    try_for_each_index(out_spatial, |pos| {
        // Cartesian product of the per-axis cells.
        let mut offsets = vec![0usize];
        let mut padded = 1;
        for (d, &o) in pos.iter().enumerate() {
            let (cells, stride) = (&axes[d].cells[o], st[d]);
            offsets = offsets.iter().flat_map(|&base| cells.iter().map(move |&c| base + c * stride)).collect();
            padded = axes[d].padded_counts[o].saturating_mul(padded);
        }
        out.offsets.push(offsets);
        out.padded_counts.push(padded);
        Ok::<(), String>(())
    })?;
    Ok(out)
}

pub fn pooling(p: &PoolingParams, x: &HostTensor, out_shape: &[usize]) -> Result<TensorData, String> {
    let shape = x.shape();
    if shape.len() < 3 || out_shape.len() != shape.len() {
        return Err(format!("pooling needs N×C×spatial input, got {shape:?}"));
    }
    let w = windows(p, &shape[2..], &out_shape[2..])?;
    let planes = shape[0] * shape[1];
    let plane = volume(&shape[2..]);
    numeric_data!(x.data(), "Pooling", v =>
        float: float_pool(p, v, &w, planes, plane),
        int: int_pool(p, v, &w, planes, plane)?)
}

fn divisor(p: &PoolingParams, w: &Windows, o: usize) -> usize {
    if p.average_count_excludes_padding {
        w.offsets[o].len()
    } else {
        w.padded_counts[o]
    }
}

/// Max ignores padding (a window of padding only gives -inf) and propagates NaN; average
/// sums in f64 (a window without counted cells gives 0/0 = NaN).
fn float_pool<T: FloatElem>(p: &PoolingParams, x: &[T], w: &Windows, planes: usize, plane: usize) -> TensorData {
    let mut out = Vec::with_capacity(planes * w.offsets.len());
    for pl in 0..planes {
        let data = &x[pl * plane..(pl + 1) * plane];
        for (o, cells) in w.offsets.iter().enumerate() {
            let values = cells.iter().map(|&c| data[c].to_f64());
            let y = match p.kind {
                PoolingKind::Max => {
                    values.fold(
                        f64::NEG_INFINITY,
                        |acc, v| {
                            if acc.is_nan() || v.is_nan() {
                                f64::NAN
                            } else {
                                acc.max(v)
                            }
                        },
                    )
                }
                PoolingKind::Average => values.sum::<f64>() / divisor(p, w, o) as f64,
            };
            out.push(T::from_f64(y));
        }
    }
    pack(out)
}

/// Integer average truncates toward zero; a max window of padding only gives the type's
/// minimum, the integer analogue of -inf.
fn int_pool<T: IntElem>(
    p: &PoolingParams,
    x: &[T],
    w: &Windows,
    planes: usize,
    plane: usize,
) -> Result<TensorData, String> {
    let mut out = Vec::with_capacity(planes * w.offsets.len());
    for pl in 0..planes {
        let data = &x[pl * plane..(pl + 1) * plane];
        for (o, cells) in w.offsets.iter().enumerate() {
            let values = cells.iter().map(|&c| data[c]);
            out.push(match p.kind {
                PoolingKind::Max => values.fold(T::MIN, Ord::max),
                PoolingKind::Average => {
                    let count = divisor(p, w, o);
                    if count == 0 {
                        return Err("an average-pooling window covers no counted cell".into());
                    }
                    T::wrap_i128(values.map(|v| v.to_i128()).sum::<i128>() / count as i128)
                }
            });
        }
    }
    Ok(pack(out))
}

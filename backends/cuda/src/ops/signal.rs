//! DFT, Col2Im and Determinant on the device (`kernels/signal.cu`), bit for bit as kiln-cpu's
//! `signal.rs` computes them: in f64, summed in the cpu's order, rounded once.

use kiln::{invalid, DataType, HostTensor, KernelError, TensorData};
use crate::ops::KResult;
use super::Ctx;
use crate::buffer::{Arg, DeviceTensor};
use kiln::ir::infer::col2im_blocks;
use kiln::plan::signal::{col2im_block_dims, dft_signal, dft_twiddles, DftSignal};
use crate::sources::Source;

fn upload_f64(cx: &Ctx, v: Vec<f64>) -> KResult<DeviceTensor> {
    let t = HostTensor::new(vec![v.len()], TensorData::F64(v)).map_err(KernelError::from)?;
    cx.gpu.upload(&t).map_err(KernelError::from)
}

pub(crate) fn upload_i64(cx: &Ctx, v: Vec<i64>) -> KResult<DeviceTensor> {
    let t = HostTensor::new(vec![v.len()], TensorData::I64(v)).map_err(KernelError::from)?;
    cx.gpu.upload(&t).map_err(KernelError::from)
}

/// How a DFT runs: the signal seen as [outer, in_len, inner, parts], the transform length `n`,
/// the input samples that take part (`used`; the rest is zero padding) and whether the
/// spectrum is completed by Hermitian symmetry (inverse onesided).
#[derive(Debug, PartialEq)]
pub struct DftPlan {
    pub outer: usize,
    pub in_len: usize,
    pub inner: usize,
    pub parts: usize,
    pub n: usize,
    pub used: usize,
    pub hermitian: bool,
    pub out_len: usize,
    pub out_parts: usize,
}

pub fn dft_plan(
    x: &[usize],
    length: Option<i64>,
    axis: i64,
    inverse: bool,
    onesided: bool,
    out_shape: &[usize],
) -> KResult<DftPlan> {
    let rank = x.len();
    let DftSignal { axis, parts, in_len, n, used } = dft_signal(x, axis, length, inverse, onesided)?;
    if out_shape.len() != rank || !matches!(out_shape[rank - 1], 1 | 2) {
        return Err(invalid!("DFT output shape {out_shape:?} does not fit the signal {x:?}"));
    }
    let hermitian = inverse && onesided;
    Ok(DftPlan {
        outer: x[..axis].iter().product(),
        in_len,
        inner: x[axis + 1..rank - 1].iter().product(),
        parts,
        n,
        used,
        hermitian,
        out_len: out_shape[axis],
        out_parts: out_shape[rank - 1],
    })
}

/// ONNX DFT along `axis` (the last axis holds real / imaginary parts), directly: one thread per
/// output bin sums over the `n` samples.
pub fn dft(
    cx: &Ctx,
    x: &DeviceTensor,
    length: Option<i64>,
    axis: i64,
    inverse: bool,
    onesided: bool,
    out_shape: &[usize],
) -> KResult<DeviceTensor> {
    let suffix = super::float64_suffix(x.dtype, "DFT")?;
    let p = dft_plan(&x.shape, length, axis, inverse, onesided, out_shape)?;
    let out = cx.gpu.empty(x.dtype, out_shape.to_vec()).map_err(KernelError::from)?;
    let total = p.outer * p.out_len * p.inner;
    if total == 0 {
        return Ok(out);
    }
    // The twiddles as kiln-cpu computes them.
    let (cos, sin) = dft_twiddles(p.n);
    let (cos, sin) = (upload_f64(cx, cos)?, upload_f64(cx, sin)?);
    let scale = if inverse { 1.0 / p.n as f64 } else { 1.0 };
    let args = [
        Arg::I64(total as i64),
        Arg::I64(p.in_len as i64),
        Arg::I64(p.out_len as i64),
        Arg::I64(p.inner as i64),
        Arg::I32(p.parts as i32),
        Arg::I32(p.out_parts as i32),
        Arg::I64(p.n as i64),
        Arg::I64(p.used as i64),
        Arg::I32(p.hermitian as i32),
        Arg::I32(inverse as i32),
        Arg::I64(scale.to_bits() as i64),
        cx.arg(&cos),
        cx.arg(&sin),
        cx.arg(x),
        cx.arg(&out),
    ];
    cx.launch_elements(Source::Signal.kernel(format!("dft_{suffix}")), total, &args)?;
    Ok(out)
}

/// What `col2im_*` is told: per spatial axis image, block and grid lengths, stride, dilation
/// and leading pad (`Col2ImAxis` of kernels/signal.cu, flattened), and the rows per channel.
#[derive(Debug, PartialEq)]
pub struct Col2ImPlan {
    pub axes: Vec<i64>,
    pub per_channel: usize,
    pub columns: usize,
}

pub fn col2im_plan(
    x: &[usize],
    block: &[i64],
    strides: &[usize],
    dilations: &[usize],
    pads: &[usize],
    out_shape: &[usize],
) -> KResult<Col2ImPlan> {
    if out_shape.len() < 3 || out_shape.len() > 2 + 8 || x.len() != 3 {
        return Err(invalid!("Col2Im of {x:?} into {out_shape:?}: needs (N, C·∏block, L) into 1 to 8 spatial axes"));
    }
    let image = &out_shape[2..];
    let block = col2im_block_dims(block)?;
    let grid = col2im_blocks(image, &block, strides, dilations, pads)?;
    let product = |v: &[usize]| v.iter().try_fold(1usize, |p, &d| p.checked_mul(d));
    let (Some(per_channel), Some(columns)) = (product(&block), product(&grid)) else {
        return Err(invalid!("Col2Im block {block:?} or its grid {grid:?} overflows"));
    };
    let (batch, channels) = (out_shape[0], out_shape[1]);
    if channels.checked_mul(per_channel).is_none_or(|rows| x != [batch, rows, columns]) {
        return Err(invalid!("Col2Im input {x:?} does not hold {channels}×{per_channel} rows of {columns} blocks"));
    }
    let mut axes = Vec::with_capacity(6 * image.len());
    for d in 0..image.len() {
        for v in [image[d], block[d], grid[d], strides[d], dilations[d], pads[d]] {
            axes.push(i64::try_from(v).map_err(|_| invalid!("Col2Im parameter {v} is too large"))?);
        }
    }
    Ok(Col2ImPlan { axes, per_channel, columns })
}

/// Col2Im: the columns of `x` (N, C·∏block, L) summed back into the image `out_shape`.
pub fn col2im(
    cx: &Ctx,
    x: &DeviceTensor,
    block: &HostTensor,
    strides: &[usize],
    dilations: &[usize],
    pads: &[usize],
    out_shape: &[usize],
) -> KResult<DeviceTensor> {
    let suffix = super::float64_suffix(x.dtype, "Col2Im")?;
    let block = block.to_i64_vec().ok_or("Col2Im block_shape must be integers")?;
    let plan = col2im_plan(&x.shape, &block, strides, dilations, pads, out_shape)?;
    let out = cx.gpu.empty(x.dtype, out_shape.to_vec()).map_err(KernelError::from)?;
    let total = out.len();
    if total == 0 {
        return Ok(out);
    }
    let spatial = plan.axes.len() / 6;
    let table = upload_i64(cx, plan.axes)?;
    let args = [
        Arg::I64(total as i64),
        Arg::I32(spatial as i32),
        cx.arg(&table),
        Arg::I64(out_shape[1] as i64),
        Arg::I64(plan.per_channel as i64),
        Arg::I64(plan.columns as i64),
        cx.arg(x),
        cx.arg(&out),
    ];
    cx.launch_elements(Source::Signal.kernel(format!("col2im_{suffix}")), total, &args)?;
    Ok(out)
}

/// The determinant of each square matrix in the last two dims (LU with partial pivoting in
/// f64, one thread per matrix in a scratch copy).
pub fn determinant(cx: &Ctx, x: &DeviceTensor) -> KResult<DeviceTensor> {
    let suffix = super::float64_suffix(x.dtype, "Det")?;
    let rank = x.shape.len();
    if rank < 2 || x.shape[rank - 1] != x.shape[rank - 2] {
        return Err(invalid!("Det needs square matrices in the last two dims, got {:?}", x.shape));
    }
    let n = x.shape[rank - 1];
    let count: usize = x.shape[..rank - 2].iter().product();
    let out = cx.gpu.empty(x.dtype, x.shape[..rank - 2].to_vec()).map_err(KernelError::from)?;
    if count == 0 {
        return Ok(out);
    }
    let cells = count.checked_mul(n * n).ok_or("Det's scratch size overflows")?;
    let scratch = cx.gpu.empty(DataType::F64, vec![cells.max(1)]).map_err(KernelError::from)?;
    let args = [Arg::I64(count as i64), Arg::I64(n as i64), cx.arg(x), cx.arg(&scratch), cx.arg(&out)];
    cx.launch_elements(Source::Signal.kernel(format!("det_{suffix}")), count, &args)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dft_plans() {
        // rfft of 8 real samples along axis 1 of [2, 8, 3, 1]: 5 bins.
        let p = dft_plan(&[2, 8, 3, 1], None, 1, false, true, &[2, 5, 3, 2]).unwrap();
        assert_eq!(
            (p.outer, p.in_len, p.inner, p.parts, p.n, p.used, p.hermitian, p.out_len),
            (2, 8, 3, 1, 8, 8, false, 5)
        );
        // irfft of 5 bins: n = 8, the spectrum completed from the first 5.
        let p = dft_plan(&[1, 5, 2], None, 1, true, true, &[1, 8, 1]).unwrap();
        assert_eq!((p.n, p.used, p.hermitian, p.out_parts), (8, 5, true, 1));
        // A given length pads or truncates; the last axis must be re/im.
        assert_eq!(dft_plan(&[4, 2], Some(6), 0, false, false, &[6, 2]).unwrap().used, 4);
        assert_eq!(dft_plan(&[4, 2], Some(3), 0, false, false, &[3, 2]).unwrap().used, 3);
        assert!(dft_plan(&[4, 3], None, 0, false, false, &[4, 2]).is_err());
        assert!(dft_plan(&[4, 2], None, 1, false, false, &[4, 2]).is_err());
    }

    #[test]
    fn col2im_plans() {
        // ONNX's example: 1×5×5 image from 5 rows (1×5 blocks) of 5 columns.
        let p = col2im_plan(&[1, 5, 5], &[1, 5], &[1, 1], &[1, 1], &[0, 0, 0, 0], &[1, 1, 5, 5]).unwrap();
        assert_eq!((p.per_channel, p.columns), (5, 5));
        assert_eq!(p.axes, vec![5, 1, 5, 1, 1, 0, 5, 5, 1, 1, 1, 0]);
        assert!(col2im_plan(&[1, 4, 5], &[1, 5], &[1, 1], &[1, 1], &[0, 0, 0, 0], &[1, 1, 5, 5]).is_err());
        assert!(col2im_plan(&[1, 5, 5], &[-1, 5], &[1, 1], &[1, 1], &[0, 0, 0, 0], &[1, 1, 5, 5]).is_err());
    }
}

//! ONNX DFT (direct, exact twiddle angles), Col2Im (a gather over block offsets) and Det
//! (LU with partial pivoting per matrix), in f32 on the device.

use super::{count_word, output, KResult};
use crate::shaders::Instance;
use crate::value::{DeviceTensor, Recorder};
use kiln::ir::infer::col2im_blocks;
use kiln::plan::signal::{col2im_block_dims, dft_signal, DftSignal};

/// The most spatial dims the Col2Im kernel indexes.
pub const COL2IM_MAX_SPATIAL: usize = 3;

fn floats(what: &str, t: &DeviceTensor) -> KResult<()> {
    if t.dtype.is_float() {
        Ok(())
    } else {
        Err(kiln::invalid!("the WGSL {what} kernel computes floats only, not {}", t.dtype))
    }
}

/// The discrete Fourier transform of `x` along `axis` (see `LayerKind::Dft`).
pub fn dft(
    rec: &Recorder,
    x: &DeviceTensor,
    axis: i64,
    length: Option<i64>,
    inverse: bool,
    onesided: bool,
    out_shape: &[usize],
) -> KResult<DeviceTensor> {
    floats("DFT", x)?;
    let xs = &x.shape;
    let rank = xs.len();
    let DftSignal { axis, parts, in_len, n, used } = dft_signal(xs, axis, length, inverse, onesided)?;
    if out_shape.len() != rank {
        return Err(kiln::invalid!("DFT output {out_shape:?} does not have the input's rank {rank}"));
    }
    let (out_len, out_parts) = (out_shape[axis], out_shape[rank - 1]);
    let inner: usize = xs[axis + 1..rank - 1].iter().product();
    let out = output(rec, x.dtype, out_shape)?;
    let bins = out.len() / out_parts.max(1);
    let params = [
        count_word(bins)?,
        count_word(in_len)?,
        count_word(inner.max(1))?,
        parts as u32,
        count_word(n)?,
        count_word(out_len.max(1))?,
        out_parts as u32,
        count_word(used)?,
        u32::from(inverse),
        u32::from(onesided),
    ];
    // (j·k) mod n is computed in u32.
    if (n as u64).pow(2) > u64::from(u32::MAX) {
        return Err(kiln::invalid!("a DFT of length {n} exceeds the 65535 the WGSL kernel indexes"));
    }
    rec.dispatch_1d(&Instance::plain("dft"), &params, &[&x.buffer, &out.buffer], bins).map_err(kiln::KernelError::from)?;
    super::pointwise::narrow(rec, out)
}

/// Col2Im of `x` `(N, C·∏block, L)` into `out_shape` `(N, C, image…)`.
pub fn col2im(
    rec: &Recorder,
    x: &DeviceTensor,
    block: &[i64],
    strides: &[usize],
    dilations: &[usize],
    pads: &[usize],
    out_shape: &[usize],
) -> KResult<DeviceTensor> {
    floats("Col2Im", x)?;
    let spatial = out_shape.len().saturating_sub(2);
    if spatial == 0 || spatial > COL2IM_MAX_SPATIAL {
        return Err(kiln::invalid!("Col2Im over {spatial} spatial dims: the WGSL kernel handles 1 to {COL2IM_MAX_SPATIAL}"));
    }
    let image = &out_shape[2..];
    let block = col2im_block_dims(block)?;
    let grid = col2im_blocks(image, &block, strides, dilations, pads)?;
    let (batch, channels) = (out_shape[0], out_shape[1]);
    let per_channel: usize = block.iter().product();
    let columns: usize = grid.iter().product();
    if x.shape != [batch, channels * per_channel, columns] {
        return Err(kiln::invalid!(
            "Col2Im input {:?} does not hold {channels}×{per_channel} rows of {columns} blocks",
            x.shape
        ));
    }
    let out = output(rec, x.dtype, out_shape)?;
    let mut params = vec![
        count_word(out.len())?,
        spatial as u32,
        count_word(channels)?,
        count_word(per_channel)?,
        count_word(columns)?,
    ];
    for list in [image, block.as_slice(), grid.as_slice(), strides, dilations, &pads[..spatial]] {
        let mut words = [0u32; COL2IM_MAX_SPATIAL];
        for (w, &v) in words.iter_mut().zip(list) {
            *w = count_word(v)?;
        }
        params.extend(words);
    }
    rec.dispatch_1d(&Instance::plain("col2im"), &params, &[&x.buffer, &out.buffer], out.len())
        .map_err(kiln::KernelError::from)?;
    super::pointwise::narrow(rec, out)
}

/// The determinant of every square matrix in the last two dims of `x`.
pub fn determinant(rec: &Recorder, x: &DeviceTensor) -> KResult<DeviceTensor> {
    floats("Det", x)?;
    let xs = &x.shape;
    let rank = xs.len();
    if rank < 2 || xs[rank - 1] != xs[rank - 2] {
        return Err(kiln::invalid!("Det needs square matrices in the last two dims, got {xs:?}"));
    }
    let n = xs[rank - 1];
    let out = output(rec, x.dtype, &xs[..rank - 2])?;
    let scratch = output(rec, x.dtype, &[x.len().max(1)])?;
    let params = [count_word(out.len())?, count_word(n)?];
    rec.dispatch_1d(&Instance::plain("determinant"), &params, &[&x.buffer, &scratch.buffer, &out.buffer], out.len())
        .map_err(kiln::KernelError::from)?;
    super::pointwise::narrow(rec, out)
}

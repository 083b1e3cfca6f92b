//! kiln's INT8 convolution (kernels/int8_conv.cu): an implicit GEMM on INT8 tensor cores that
//! reads the NHWC input in place and writes the requantized (or float) NHWC output, the
//! epilogue fused. It takes 2-D, one-group convolutions of symmetric int8 operands; its 16-byte
//! copies stay within one filter tap, so channels are zero-padded to a multiple of 16 where
//! they are not (an RGB stem: zeros add nothing to the sums).

use super::quant::Epilogue;
use super::{layout, Ctx};
use crate::buffer::{Arg, DeviceTensor, Window};
use crate::ops::KResult;
use crate::sources::Source;
use kiln::{invalid, DataType, KernelError};

/// Pixels per block (`IC_BM`) and the kernel's block size.
const PIXELS_PER_BLOCK: usize = 128;
const THREADS: u32 = 256;

/// Whether the kernel takes the layer: shapes NCHW / KCRS as the layer sees them, int8 operands
/// with zero points 0 already checked by the caller.
pub fn applies(c: &kiln::ConvolutionParams, x: &[usize], w: &[usize], out_dtype: DataType) -> bool {
    x.len() == 4
        && w.len() == 4
        && c.groups <= 1
        && c.strides.len() == 2
        && x[1] == w[1]
        && x[1] > 0
        && matches!(out_dtype, DataType::I8 | DataType::U8 | DataType::F32)
}

/// The convolution with its epilogue, into a channels-last output of `out_shape`; None when an
/// operand is not 16-byte aligned (the kernel's copies are).
pub fn convolution(cx: &Ctx, c: &kiln::ConvolutionParams, x: &DeviceTensor, w: &DeviceTensor, epilogue: &Epilogue, out_shape: &[usize], out_dtype: DataType) -> KResult<Option<DeviceTensor>> {
    let x = channels_in_sixteens(cx, x)?;
    let w = match w.shape[1] % 16 {
        0 => cx.gpu.converted_weights(w, "krsc", |t| layout::to_channels_last(cx, t))?,
        _ => cx.gpu.converted_weights(w, "krsc_c16", |t| channels_in_sixteens(cx, t))?,
    };
    if !super::lane_aligned(cx, &x, 16) || !super::lane_aligned(cx, &w, 16) {
        return Ok(None);
    }
    let out = super::empty_in_layout(cx, out_dtype, out_shape, true)?;
    let [n, ch, h, wd] = <[usize; 4]>::try_from(x.shape.as_slice()).map_err(|_| invalid!("an INT8 convolution of a {}-D input", x.shape.len()))?;
    let (filters, depth) = (w.shape[0], w.shape[1] * w.shape[2] * w.shape[3]);
    if out_shape.len() != 4 || out_shape[0] != n || out_shape[1] != filters || w.shape[1] != ch {
        return Err(invalid!("an INT8 convolution of {:?} by {:?} into {out_shape:?}", x.shape, w.shape));
    }
    // Offsets into the tensors are 64-bit; the kernel's sizes and the filter's depth are 32-bit.
    if [n, ch, h, wd, filters, depth, out_shape[2] * out_shape[3]].iter().any(|&d| d > i32::MAX as usize) {
        return Err(invalid!("an INT8 convolution of {:?} is too large for the kernel's 32-bit sizes", x.shape));
    }
    if out.is_empty() {
        return Ok(Some(out));
    }
    let pair = |v: &[usize], default: usize| (v.first().copied().unwrap_or(default) as i64, v.get(1).copied().unwrap_or(default) as i64);
    let ((sh, sw), (dh, dw), (ph, pw)) = (pair(&c.strides, 1), pair(&c.dilations, 1), pair(&c.pre_padding, 0));
    let win = Window {
        n: n as i64,
        c: ch as i64,
        h: h as i64,
        w: wd as i64,
        oc: filters as i64,
        oh: out_shape[2] as i64,
        ow: out_shape[3] as i64,
        kh: w.shape[2] as i64,
        kw: w.shape[3] as i64,
        sh,
        sw,
        dh,
        dw,
        ph,
        pw,
        groups: 1,
        ..Window::default()
    };
    let pixels = n * out_shape[2] * out_shape[3];
    // A narrow layer (64 filters or fewer) wastes half of a 128-filter block.
    let (name, filters_per_block) = if filters <= 64 { ("int8_conv_bn64", 64) } else { ("int8_conv_bn128", 128) };
    let blocks = |len: usize, per: usize| u32::try_from(len.div_ceil(per)).map_err(|_| invalid!("an INT8 convolution over {len} rows is too many blocks"));
    let grid = (blocks(pixels, PIXELS_PER_BLOCK)?, blocks(filters, filters_per_block)?, 1);
    if grid.1 > 65_535 {
        return Err(invalid!("an INT8 convolution with {filters} filters is too many blocks"));
    }
    let mut args = vec![Arg::Window(win), cx.arg(&x), cx.arg(&w)];
    args.extend(epilogue.args.iter().copied());
    args.push(Arg::I32(super::typed::type_code(out_dtype)));
    args.push(cx.arg(&out));
    cx.gpu.launch_grid(&Source::Int8Conv.kernel(name), grid, (THREADS, 1, 1), &args).map_err(KernelError::from)?;
    Ok(Some(out))
}

/// A 4-D tensor in any layout as packed channels-last with its channels zero-padded to a
/// multiple of 16 (`int8_pad_channels`), or in place when they are one already.
fn channels_in_sixteens(cx: &Ctx, t: &DeviceTensor) -> KResult<DeviceTensor> {
    let [n, c, h, w] = <[usize; 4]>::try_from(t.shape.as_slice()).map_err(|_| invalid!("an INT8 convolution operand of rank {}", t.shape.len()))?;
    if c.is_multiple_of(16) {
        return layout::to_channels_last(cx, t);
    }
    let padded = c.next_multiple_of(16);
    let out = super::empty_in_layout(cx, t.dtype, &[n, padded, h, w], true)?;
    let pieces = n * h * w * (padded / 16);
    let strides = t.element_strides();
    let mut args: Vec<Arg> = [n, c, h, w, padded].iter().map(|&d| Arg::I64(d as i64)).collect();
    args.extend(strides.iter().map(|&s| Arg::I64(s)));
    args.extend([cx.arg(t), cx.arg(&out)]);
    cx.launch_elements(Source::Int8Conv.kernel("int8_pad_channels"), pieces, &args)?;
    Ok(out)
}

/// Every kernel of `int8_conv.cu`, for the NVRTC test.
pub fn kernel_names() -> [&'static str; 3] {
    ["int8_conv_bn64", "int8_conv_bn128", "int8_pad_channels"]
}

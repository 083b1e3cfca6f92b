//! kiln's INT8 depthwise convolution (kernels/int8_depthwise.cu): int8 NHWC in, a K×K filter of
//! K 3, 5 or 7 and stride 1 or 2 (the float row kernels' shapes, [`conv::depthwise_rows`]), the
//! exact sums of the levels' products. With the levels-only epilogue it writes the levels
//! (`_levels`); for any other it writes the int32 sums that quant.rs's epilogue kernel reads
//! (`_sums`). Depthwise layers have no tensor-core form and cuDNN's INT8 convolution takes one
//! group only: before this kernel they ran the exact f32 fallback.

use super::quant::Epilogue;
use super::{conv, layout, movement, pointwise, Ctx};
use crate::buffer::{Arg, DeviceTensor};
use crate::ops::KResult;
use crate::sources::Source;
use kiln::{invalid, DataType};

/// Channels a thread (`DW_CHANNELS`: one 8-byte load of levels) and output pixels of a row a
/// thread (`DW_PIXELS`).
const CHANNELS_PER_THREAD: usize = 8;
const PIXELS_PER_THREAD: usize = 4;

static DEPTHWISE_CONVOLUTIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many convolutions this process has enqueued on this kernel (tests prove with it that a
/// depthwise layer ran it, not the f32 fallback).
pub fn depthwise_convolutions_enqueued() -> u64 {
    DEPTHWISE_CONVOLUTIONS.load(std::sync::atomic::Ordering::Relaxed)
}

/// The kernel's `(K, S)` for a depthwise convolution of these shapes (NCHW / KCRS as the layer
/// sees them), or None; the caller checks the operands' form (int8, zero points 0).
pub fn applies(c: &kiln::ConvolutionParams, x: &[usize], w: &[usize]) -> Option<(usize, usize)> {
    conv::depthwise_rows(c, x, w, CHANNELS_PER_THREAD)
}

/// Every kernel of int8_depthwise.cu.
pub fn kernel_names() -> Vec<String> {
    let shapes = conv::ROW_KERNEL_SIZES.iter().flat_map(|k| conv::ROW_KERNEL_STRIDES.iter().map(move |s| (k, s)));
    shapes.flat_map(|(k, s)| ["levels", "sums"].map(|form| format!("int8_depthwise_k{k}s{s}_{form}"))).collect()
}

/// The convolution into int8 / uint8 levels, channels-last, of `out_shape`; None where the
/// kernel does not take the layer or the epilogue is not the levels-only one.
#[allow(clippy::too_many_arguments)]
pub fn levels(cx: &Ctx, c: &kiln::ConvolutionParams, x: &DeviceTensor, w: &DeviceTensor, epilogue: &Epilogue, out_shape: &[usize], out_dtype: DataType) -> KResult<Option<DeviceTensor>> {
    let Some((k, _)) = applies(c, &x.shape, &w.shape) else { return Ok(None) };
    if !epilogue.levels_exact(k * k) || !out_dtype.is_8bit_integer() {
        return Ok(None);
    }
    launch(cx, c, x, w, Some(epilogue), out_shape, out_dtype)
}

/// The int32 sums of the convolution (the bias not added), channels-last, of `out_shape`; None
/// where the kernel does not take the layer.
pub fn sums(cx: &Ctx, c: &kiln::ConvolutionParams, x: &DeviceTensor, w: &DeviceTensor, out_shape: &[usize]) -> KResult<Option<DeviceTensor>> {
    launch(cx, c, x, w, None, out_shape, DataType::I32)
}

/// `_levels` with `epilogue`'s arguments, else `_sums`.
fn launch(cx: &Ctx, c: &kiln::ConvolutionParams, x: &DeviceTensor, w: &DeviceTensor, epilogue: Option<&Epilogue>, out_shape: &[usize], out_dtype: DataType) -> KResult<Option<DeviceTensor>> {
    let Some((k, s)) = applies(c, &x.shape, &w.shape) else { return Ok(None) };
    if x.dtype != DataType::I8 || w.dtype != DataType::I8 || out_shape.len() != 4 || out_shape[0] != x.shape[0] || out_shape[1] != x.shape[1] {
        return Err(invalid!("an INT8 depthwise convolution of {} {:?} by {} {:?} into {out_shape:?}", x.dtype, x.shape, w.dtype, w.shape));
    }
    let x = layout::to_channels_last(cx, x)?;
    // The 8-byte loads of a thread's channels.
    if !super::lane_aligned(cx, &x, CHANNELS_PER_THREAD) {
        return Ok(None);
    }
    // [C, 1, K, K] → [1, K, K, C] in f32: each tap's channels contiguous, converted once.
    let w = cx.gpu.converted_weights(w, "depthwise_rsc_f32", |t| pointwise::cast(cx, &movement::transpose(cx, t, &[1, 2, 3, 0])?, DataType::F32))?;
    let out = super::empty_in_layout(cx, out_dtype, out_shape, true)?;
    if out.is_empty() {
        return Ok(Some(out));
    }
    let win = conv::depthwise_window(c, &x.shape, (k, k), out_shape, false)?;
    let threads = out_shape[0] * out_shape[2] * out_shape[3].div_ceil(PIXELS_PER_THREAD) * (x.shape[1] / CHANNELS_PER_THREAD);
    let form = if epilogue.is_some() { "levels" } else { "sums" };
    let mut args = vec![Arg::Window(win), cx.arg(&x), cx.arg(&w)];
    if let Some(e) = epilogue {
        args.extend(e.args.iter().copied());
        args.push(Arg::I32(super::typed::type_code(e.computed)));
    }
    args.push(cx.arg(&out));
    cx.launch_elements(Source::Int8Depthwise.kernel(format!("int8_depthwise_k{k}s{s}_{form}")), threads, &args)?;
    DEPTHWISE_CONVOLUTIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depthwise(channels: usize, k: usize, stride: usize, dilation: usize) -> (kiln::ConvolutionParams, [usize; 4], [usize; 4]) {
        let pad = k / 2;
        let p = kiln::ConvolutionParams { groups: channels, strides: vec![stride; 2], dilations: vec![dilation; 2], pre_padding: vec![pad; 2], post_padding: vec![pad; 2] };
        (p, [2, channels, 14, 14], [channels, 1, k, k])
    }

    #[test]
    fn the_kernel_takes_depthwise_filters_of_its_sizes_over_runs_of_eight_channels() {
        for (channels, k, stride, dilation, want) in [(32, 3, 1, 1, Some((3, 1))), (200, 5, 2, 1, Some((5, 2))), (768, 7, 1, 1, Some((7, 1))), (36, 3, 1, 1, None), (32, 9, 1, 1, None), (32, 3, 3, 1, None), (32, 3, 1, 2, None)] {
            let (p, x, w) = depthwise(channels, k, stride, dilation);
            assert_eq!(applies(&p, &x, &w), want, "{channels} channels, {k}x{k}, stride {stride}, dilation {dilation}");
        }
        // One group is not depthwise.
        let (mut p, x, _) = depthwise(32, 3, 1, 1);
        p.groups = 1;
        assert_eq!(applies(&p, &x, &[32, 32, 3, 3]), None);
    }

    #[test]
    fn every_shape_has_a_levels_and_a_sums_kernel() {
        let names = kernel_names();
        assert_eq!(names.len(), conv::ROW_KERNEL_SIZES.len() * conv::ROW_KERNEL_STRIDES.len() * 2);
        assert!(names.contains(&"int8_depthwise_k7s2_levels".to_string()) && names.contains(&"int8_depthwise_k3s1_sums".to_string()));
    }
}

//! kiln's INT8 convolution of inputs of at most 4 channels (kernels/int8_few_channels.cu): an
//! RGB or grayscale stem. Each block reads its tile's input window once into shared memory, one
//! word a pixel, where the implicit GEMM (`ops::int8_conv`) pads 3 channels to 16 or folds width
//! taps into a copy of the input first and re-reads every pixel once per tap that covers it.
//! It runs the levels-only epilogue alone; the caller falls back to the implicit GEMM elsewhere.

use super::quant::Epilogue;
use super::Ctx;
use super::int8_conv::Geometry;
use crate::buffer::{Arg, DeviceTensor};
use crate::ops::KResult;
use crate::sources::Source;
use kiln::{invalid, DataType, KernelError};

/// Output rows and columns of a block's tile (`FC_TH`, `FC_TW`), filters a block (`FC_BN`),
/// the block size and the output tile's row pitch (`FC_OUT_PITCH`).
const TILE_ROWS: usize = 8;
const TILE_COLUMNS: usize = 16;
const FILTERS_PER_BLOCK: usize = 64;
const THREADS: u32 = 128;
const OUT_PITCH: usize = FILTERS_PER_BLOCK + 16;
/// The most input channels a pixel's word holds.
pub const MAX_CHANNELS: usize = 4;
/// Taps come 8 to an MMA step (32 of depth at 4 channels a tap).
const TAPS_PER_STEP: usize = 8;
/// The most dynamic shared memory a block takes (every sm_80+ device grants it).
const MAX_SHARED_BYTES: usize = 96 << 10;

static FEW_CHANNEL_CONVOLUTIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many convolutions this process has enqueued on this kernel (tests prove with it that the
/// tactic ran it, not its fallback).
pub fn few_channel_convolutions_enqueued() -> u64 {
    FEW_CHANNEL_CONVOLUTIONS.load(std::sync::atomic::Ordering::Relaxed)
}

/// The filter's taps padded to a whole number of MMA steps.
fn padded_taps(w: &[usize]) -> usize {
    w[2].saturating_mul(w[3]).saturating_add(TAPS_PER_STEP - 1) / TAPS_PER_STEP * TAPS_PER_STEP
}

/// The filter block's shared bytes (the kernel's `filter_region_bytes`): rows of taps + 4 words
/// for mma.sync, or sm_90a's wgmma K-blocks of 128 bytes a filter, whichever is larger, and 1024
/// bytes to align the blocks for their swizzle.
fn filter_bytes(taps: usize) -> usize {
    let rows = taps.saturating_add(4).saturating_mul(4 * FILTERS_PER_BLOCK);
    let blocks = taps.saturating_mul(4).div_ceil(128).saturating_mul(128 * FILTERS_PER_BLOCK);
    rows.max(blocks).saturating_add(1024)
}

/// A block's dynamic shared bytes: the filter block, the input window (a word a pixel, rows of
/// whole groups of 4 with 3 more columns for its start rounded down to a multiple of 4), each
/// tap's offset and the output tile.
fn shared_bytes(c: &kiln::ConvolutionParams, w: &[usize]) -> usize {
    let Geometry { strides: (sh, sw), dilations: (dh, dw), .. } = Geometry::of(c);
    // Saturating: a model's strides and dilations are unbounded attributes (the sum then fails
    // `applies`' bound instead of overflowing).
    let span = |tiles: usize, stride: i64, taps: usize, dilation: i64| {
        let (stride, dilation) = (stride.max(0) as usize, dilation.max(0) as usize);
        (tiles - 1).saturating_mul(stride).saturating_add((taps.max(1) - 1).saturating_mul(dilation)).saturating_add(1)
    };
    let (rows, columns) = (span(TILE_ROWS, sh, w[2], dh), span(TILE_COLUMNS, sw, w[3], dw));
    let taps = padded_taps(w);
    let window = rows.saturating_mul(columns.saturating_add(6) / 4 * 4).saturating_mul(4);
    let filter = filter_bytes(taps).saturating_add(taps.saturating_mul(4));
    window.saturating_add(filter).saturating_add(TILE_ROWS * TILE_COLUMNS * OUT_PITCH)
}

/// Whether the kernel takes the layer's shapes (NCHW / KCRS as the layer sees them): a 2-D,
/// one-group convolution of 1 to 4 channels whose window fits the block's shared memory. The
/// caller checks the operands' form (int8, zero points 0) and the epilogue.
pub fn applies(c: &kiln::ConvolutionParams, x: &[usize], w: &[usize]) -> bool {
    x.len() == 4
        && w.len() == 4
        && c.groups <= 1
        && c.strides.len() == 2
        && x[1] == w[1]
        && (1..=MAX_CHANNELS).contains(&x[1])
        && w[2] > 0
        && w[3] > 0
        && shared_bytes(c, w) <= MAX_SHARED_BYTES
}

/// The convolution into int8 / uint8 levels, channels-last, of `out_shape`; None where the
/// epilogue is not the levels-only one (the log says why once), which the caller then runs.
pub fn convolution(cx: &Ctx, c: &kiln::ConvolutionParams, x: &DeviceTensor, w: &DeviceTensor, epilogue: &Epilogue, out_shape: &[usize], out_dtype: DataType) -> KResult<Option<DeviceTensor>> {
    let depth = MAX_CHANNELS.saturating_mul(padded_taps(&w.shape));
    // Why the implicit GEMM runs instead, if it does (the log says so once).
    let instead = |why: String| {
        if tracing::enabled!(target: "kiln::int8", tracing::Level::INFO) {
            super::quant::say_once(format!("int8_conv_few_channels over {:?} by {:?}: the implicit GEMM instead, for {why}", x.shape, w.shape));
        }
        Ok(None)
    };
    if !applies(c, &x.shape, &w.shape) {
        return instead("shapes it does not take".into());
    }
    if let Some(why) = epilogue.general_reason(depth) {
        return instead(why);
    }
    if epilogue.joins || !matches!(out_dtype, DataType::I8 | DataType::U8) {
        return instead("a join or a float output".into());
    }
    let [n, ch, h, wd] = <[usize; 4]>::try_from(x.shape.as_slice()).map_err(|_| invalid!("an INT8 convolution of a {}-D input", x.shape.len()))?;
    let (filters, taps) = (w.shape[0], padded_taps(&w.shape));
    if out_shape.len() != 4 || out_shape[0] != n || out_shape[1] != filters {
        return Err(invalid!("an INT8 convolution of {:?} by {:?} into {out_shape:?}", x.shape, w.shape));
    }
    if [n, ch, h, wd, filters, out_shape[2], out_shape[3]].iter().any(|&d| d > i32::MAX as usize) || h * wd > i32::MAX as usize {
        return Err(invalid!("an INT8 convolution of {:?} is too large for the kernel's 32-bit sizes", x.shape));
    }
    // The kernel counts tiles, and bytes within a tile's output rows, in 32 bits.
    let tiles = n * out_shape[2].div_ceil(TILE_ROWS) * out_shape[3].div_ceil(TILE_COLUMNS);
    if tiles > i32::MAX as usize || TILE_ROWS * out_shape[3] * filters > i32::MAX as usize {
        return instead("more tiles or output bytes a tile row than 32 bits count".into());
    }
    let out = super::empty_in_layout(cx, out_dtype, out_shape, true)?;
    if out.is_empty() {
        return Ok(Some(out));
    }
    let filter_blocks = filters.div_ceil(FILTERS_PER_BLOCK);
    let filter = cx.gpu.converted_weights(w, "few_channels_taps", |t| arranged_filter(cx, t, filter_blocks * FILTERS_PER_BLOCK, taps))?;
    let win = Geometry::of(c).window(&x.shape, &w.shape, out_shape);
    let kernel = Source::Int8FewChannels.kernel("int8_conv_few_channels");
    let shared = shared_bytes(c, &w.shape) as u32;
    // As many blocks as are resident at once, in a multiple of the filter blocks: each keeps its
    // filters in shared memory over the tiles it strides across.
    let resident = (cx.gpu.resident_blocks(&kernel, THREADS, shared)? * cx.gpu.multiprocessors()) as usize;
    let lanes = (resident / filter_blocks).clamp(1, tiles);
    let grid = u32::try_from(lanes * filter_blocks).map_err(|_| invalid!("an INT8 convolution of {filter_blocks} filter blocks is too many blocks"))?;
    // Rows of unit column stride, 4-byte aligned with their planes (NCHW of widths in fours):
    // the kernel reads 4 columns of a channel in one load.
    let strides = x.element_strides();
    let words = strides[3] == 1 && strides[..3].iter().all(|s| s % 4 == 0) && super::lane_aligned(cx, x, 4);
    let mut args = vec![Arg::Window(win)];
    args.extend(strides.iter().map(|&s| Arg::I64(s)));
    args.extend([Arg::I32(i32::from(words)), cx.arg(x), cx.arg(&filter), Arg::I32(taps as i32)]);
    args.extend(epilogue.args.iter().copied());
    args.push(Arg::I32(super::typed::type_code(epilogue.computed)));
    args.push(cx.arg(&out));
    cx.gpu.launch_with_shared(&kernel, (grid, 1, 1), (THREADS, 1, 1), shared, &args).map_err(KernelError::from)?;
    FEW_CHANNEL_CONVOLUTIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(Some(out))
}

/// The filter `[k, c, r, s]` (any layout) as `[rows, taps, 4]` int8: tap `r·s_len + s`'s channels
/// in one word, zeros past the filters, channels and taps.
fn arranged_filter(cx: &Ctx, w: &DeviceTensor, rows: usize, taps: usize) -> KResult<DeviceTensor> {
    let out = cx.gpu.empty(DataType::I8, vec![rows, taps, MAX_CHANNELS]).map_err(KernelError::from)?;
    let mut args: Vec<Arg> = [w.shape[0], w.shape[1], w.shape[2], w.shape[3], rows, taps].iter().map(|&d| Arg::I64(d as i64)).collect();
    args.extend(w.element_strides().iter().map(|&s| Arg::I64(s)));
    args.extend([cx.arg(w), cx.arg(&out)]);
    cx.launch_elements(Source::Int8FewChannels.kernel("int8_few_channels_filter"), rows * taps, &args)?;
    Ok(out)
}

/// Every kernel of `int8_few_channels.cu`, for the NVRTC test.
pub fn kernel_names() -> [&'static str; 2] {
    ["int8_conv_few_channels", "int8_few_channels_filter"]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv(strides: [usize; 2], dilations: [usize; 2]) -> kiln::ConvolutionParams {
        kiln::ConvolutionParams { groups: 1, strides: strides.to_vec(), dilations: dilations.to_vec(), pre_padding: vec![3, 3], post_padding: vec![3, 3] }
    }

    #[test]
    fn a_resnet_stem_fits_and_its_shared_memory_is_counted_as_the_kernel_lays_it_out() {
        let (x, w) = ([256, 3, 224, 224], [64, 3, 7, 7]);
        assert!(applies(&conv([2, 2], [1, 1]), &x, &w));
        // Window 21 rows × 40 words (37 columns + 3, in fours); the filter as wgmma's two K-blocks
        // of 64 × 128 bytes (more than mma.sync's 64 × (56 + 4) words) and 1024 bytes of
        // alignment; 56 tap offsets; 128 pixels × 80 bytes.
        assert_eq!(shared_bytes(&conv([2, 2], [1, 1]), &w), 4 * 21 * 40 + 2 * 64 * 128 + 1024 + 4 * 56 + 128 * 80);
        // A 5×5 filter (32 padded taps): mma.sync's rows are the larger; a 3×3 one (16) takes a
        // whole 128-byte K-block a filter.
        assert_eq!(filter_bytes(32), 4 * 64 * 36 + 1024);
        assert_eq!(filter_bytes(16), 64 * 128 + 1024);
    }

    #[test]
    fn other_channel_counts_groups_and_windows_past_shared_memory_are_refused_without_overflow() {
        let x = [1, 3, 224, 224];
        assert!(!applies(&conv([2, 2], [1, 1]), &[1, 5, 224, 224], &[64, 5, 7, 7]));
        assert!(!applies(&kiln::ConvolutionParams { groups: 3, ..conv([1, 1], [1, 1]) }, &x, &[3, 1, 3, 3]));
        for (strides, dilations) in [([usize::MAX, 1], [1, 1]), ([1, 1], [1, usize::MAX / 3]), ([1 << 40, 1 << 40], [1 << 40, 1 << 40])] {
            assert!(!applies(&conv(strides, dilations), &x, &[64, 3, 7, 7]), "{strides:?} {dilations:?}");
        }
        assert!(!applies(&conv([1, 1], [1, 1]), &x, &[64, 3, usize::MAX / 2, 3]));
        // A filter too wide for the block's filter rows in shared memory.
        assert!(!applies(&conv([1, 1], [1, 1]), &x, &[64, 3, 31, 31]));
    }
}

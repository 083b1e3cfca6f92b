//! kiln's INT8 convolution (kernels/int8_conv.cuh): an implicit GEMM on INT8 tensor cores that
//! reads the NHWC input in place and writes the requantized (or float) NHWC output, the
//! epilogue fused. It takes 2-D, one-group convolutions of symmetric int8 operands; its 16-byte
//! copies stay within one filter tap, so channels are zero-padded to a multiple of 16 where
//! they are not (an RGB stem: zeros add nothing to the sums). Its main loop is mma.sync on any
//! tensor-core GPU, or Hopper's wgmma ([`MainLoop`]).

use super::quant::Epilogue;
use super::{layout, Ctx};
use crate::buffer::{Arg, DeviceTensor, Window};
use crate::ops::KResult;
use crate::sources::{Kernel, Source};
use kiln::{invalid, DataType, KernelError};

/// Pixels per block (`IC_BM`) and the kernel's block size.
const PIXELS_PER_BLOCK: usize = 128;
const THREADS: u32 = 256;
/// The depth one pipeline stage holds (`IC_BK`), its shared rows' pitch (`IC_LD`) and the
/// stages in the ring (`IC_STAGES`, `IC_WG_STAGES`): a block's dynamic shared memory is
/// `min(stages, steps) · (IC_BM + BN) · pitch` bytes.
const DEPTH_PER_STAGE: usize = 64;
const ROW_PITCH: usize = DEPTH_PER_STAGE + 16;
const STAGES: usize = 4;
const WGMMA_STAGES: usize = 5;
/// The alignment of wgmma's tiles (`IC_WG_ALIGN`: its 64-byte swizzle repeats every 8 rows).
const WGMMA_ALIGN: usize = 512;

/// How the kernel multiplies its tiles: warp-level mma.sync (sm_80 on), or warpgroup wgmma
/// from shared memory (sm_90's arch-specific image, `Source::target`); `WarpSpecialized` hands
/// a pointwise layer to [`super::int8_gemm`]'s kernel (in its tiles) where it takes it, wgmma
/// otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MainLoop {
    MmaSync,
    Wgmma,
    WarpSpecialized(super::int8_gemm::Tile),
}

static WGMMA_CONVOLUTIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

static PERSISTENT_CONVOLUTIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many convolutions this process has enqueued on the wgmma main loop (tests prove with it
/// that a wgmma tactic ran its kernel, not a fallback).
pub fn wgmma_convolutions_enqueued() -> u64 {
    WGMMA_CONVOLUTIONS.load(std::sync::atomic::Ordering::Relaxed)
}

/// How many convolutions this process has enqueued as a persistent launch (see [`launch`]).
pub fn persistent_convolutions_enqueued() -> u64 {
    PERSISTENT_CONVOLUTIONS.load(std::sync::atomic::Ordering::Relaxed)
}

impl MainLoop {
    /// Whether the device runs this main loop.
    /// wgmma needs an arch-specific (`…a`) image, which [`crate::sources::Source::target`]
    /// alone decides.
    pub fn available(self, gpu: &crate::device::Gpu) -> bool {
        self == MainLoop::MmaSync || crate::sources::Source::Int8Conv.target(&gpu.arch).ends_with('a')
    }

    /// The stages of its ring and the depth pitch of a tile row in shared memory: ldmatrix's
    /// rows are padded against bank conflicts, wgmma's core matrices are not, and wgmma keeps
    /// one more stage for the step whose MMAs still run.
    fn ring(self) -> (usize, usize) {
        match self {
            MainLoop::MmaSync => (STAGES, ROW_PITCH),
            MainLoop::Wgmma | MainLoop::WarpSpecialized(_) => (WGMMA_STAGES, DEPTH_PER_STAGE),
        }
    }

    fn wgmma(self) -> bool {
        self != MainLoop::MmaSync
    }
}

/// Whether the kernel takes the layer: shapes NCHW / KCRS as the layer sees them, int8 operands
/// with zero points 0 already checked by the caller. It writes f32 or levels; the caller rounds
/// an f16 / bf16 output from the f32.
pub fn applies(c: &kiln::ConvolutionParams, x: &[usize], w: &[usize], out_dtype: DataType) -> bool {
    x.len() == 4
        && w.len() == 4
        && c.groups <= 1
        && c.strides.len() == 2
        && x[1] == w[1]
        && x[1] > 0
        && matches!(out_dtype, DataType::I8 | DataType::U8 | DataType::F32 | DataType::F16 | DataType::BF16)
}

/// The most groups a grouped convolution merges into one for the kernel (its filter then
/// block-diagonal, the arithmetic multiplied by the group count): RegNetY-800MF's widest stage
/// has 49 groups of 16. Twice the float merges' bound (`conv::MERGE_MAX_FACTOR`): INT8 tensor
/// cores run at twice the fp16 rate.
pub const MERGE_MAX_GROUPS: usize = 64;

/// A grouped 2-D convolution as the kernel runs it, its groups merged into one: the parameters
/// with one group and the filter's shape over every input channel, `[k, c, r, s]`. None for one
/// group, more than [`MERGE_MAX_GROUPS`], filters that do not split evenly, and depthwise layers
/// kiln's depthwise kernel takes.
pub fn merged(c: &kiln::ConvolutionParams, x: &[usize], w: &[usize]) -> Option<(kiln::ConvolutionParams, Vec<usize>)> {
    let groups = c.groups;
    let fits = groups > 1 && groups <= MERGE_MAX_GROUPS && x.len() == 4 && w.len() == 4 && w[0].is_multiple_of(groups) && x[1] == w[1] * groups;
    (fits && super::int8_depthwise::applies(c, x, w).is_none()).then(|| (kiln::ConvolutionParams { groups: 1, ..c.clone() }, vec![w[0], x[1], w[2], w[3]]))
}

/// The convolution with its epilogue, into a channels-last output of `out_shape`; None when an
/// operand is not 16-byte aligned (the kernel's copies are).
#[allow(clippy::too_many_arguments)]
pub fn convolution(cx: &Ctx, main_loop: MainLoop, c: &kiln::ConvolutionParams, x: &DeviceTensor, w: &DeviceTensor, epilogue: &Epilogue, out_shape: &[usize], out_dtype: DataType) -> KResult<Option<DeviceTensor>> {
    if !main_loop.available(cx.gpu) {
        return Ok(None);
    }
    let Geometry { strides: (sh, sw), dilations: (dh, dw), padding: (ph, pw) } = Geometry::of(c);
    let fold = Fold::of(x.shape.get(1).copied().unwrap_or(0), w.shape.get(3).copied().unwrap_or(1), dw);
    let (x, w, sw, dw, pw) = match &fold {
        Some(f) => {
            // Where the column stride divides the group, folded column f starts at original
            // column f·sw − pw and output column q reads folded columns q, q + group / sw, …
            // (stride 1): a stride-2 stem's folded input is half the size, its reads neighbours.
            let step = if sw > 0 && f.group as i64 % sw == 0 { sw as usize } else { 1 };
            let taps = w.shape[3].div_ceil(f.group);
            let width = match step {
                1 => x.shape[3] + pw as usize,
                _ => out_shape.get(3).copied().unwrap_or(1).max(1) + (taps - 1) * (f.group / step),
            };
            let filter = cx.gpu.converted_weights(w, &format!("krsc_fold{}", f.group), |t| f.filter(cx, t))?;
            // The input [n, c, h, w] as [n, 16, h, width]: folded column f holds original columns
            // f·step − pw .. f·step − pw + group.
            (f.columns(cx, x, width, step, pw as usize)?, filter, sw / step as i64, (f.group / step) as i64, 0)
        }
        None => {
            let x = channels_in_sixteens(cx, x)?;
            let w = match w.shape[1] % 16 {
                0 => cx.gpu.converted_weights(w, "krsc", |t| layout::to_channels_last(cx, t))?,
                _ => cx.gpu.converted_weights(w, "krsc_c16", |t| channels_in_sixteens(cx, t))?,
            };
            (x, w, sw, dw, pw)
        }
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
    let win = Geometry { strides: (sh, sw), dilations: (dh, dw), padding: (ph, pw) }.window(&x.shape, &w.shape, out_shape);
    let pixels = n * out_shape[2] * out_shape[3];
    let levels = epilogue.levels_exact(depth);
    // The kernel's pointwise main loop (its `POINTWISE`) is the one that can run persistent.
    let pointwise = levels && win.kh == 1 && win.kw == 1 && win.sh == 1 && win.sw == 1 && win.ph == 0 && win.pw == 0 && win.oh == win.h && win.ow == win.w;
    // A pointwise layer is a matrix product: the warp-specialized kernel's, where it takes it.
    if let MainLoop::WarpSpecialized(tile) = main_loop {
        if pointwise && super::lane_aligned(cx, &out, 16) && super::int8_gemm::applies(tile, epilogue, pixels, filters, depth, false) {
            super::int8_gemm::product(cx, tile, &x, &w, epilogue, &out, pixels, filters, depth)?;
            return Ok(Some(out));
        }
        // Any other convolution with the levels-only epilogue: its activations gathered there.
        if levels && !pointwise && super::int8_gemm::gathers(&win) && super::lane_aligned(cx, &out, 16) && super::int8_gemm::applies(tile, epilogue, pixels, filters, depth, true) {
            super::int8_gemm::convolution(cx, tile, &x, &w, win, epilogue, &out, pixels, filters, depth)?;
            return Ok(Some(out));
        }
    }
    // A narrow layer (64 filters or fewer) wastes half of a 128-filter block.
    let filters_per_block = if filters <= 64 { 64 } else { 128 };
    let kernel = conv_kernel(filters_per_block, levels, main_loop.wgmma());
    // The reason is formatted only where the log shows it: this runs on every enqueue.
    if !levels && tracing::enabled!(target: "kiln::int8", tracing::Level::INFO) {
        let why = epilogue.general_reason(depth).unwrap_or_default();
        super::quant::say_once(format!("{} over {:?} by {:?}: the general epilogue, for {why}", kernel.name, x.shape, w.shape));
    }
    let (grid, shared) = launch(cx, &kernel, main_loop, pixels, filters, filters_per_block, depth, epilogue.joins, pointwise, epilogue.looks_up)?;
    let mut args = vec![Arg::Window(win), cx.arg(&x), cx.arg(&w)];
    args.extend(epilogue.args.iter().copied());
    args.push(Arg::I32(super::typed::type_code(epilogue.computed)));
    args.push(cx.arg(&out));
    cx.gpu.launch_with_shared(&kernel, (grid, 1, 1), (THREADS, 1, 1), shared, &args).map_err(KernelError::from)?;
    if main_loop.wgmma() {
        WGMMA_CONVOLUTIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    Ok(Some(out))
}

/// A 2-D convolution's strides, dilations and leading padding, each (height, width).
#[derive(Clone, Copy, Debug)]
pub(super) struct Geometry {
    pub strides: (i64, i64),
    pub dilations: (i64, i64),
    pub padding: (i64, i64),
}

impl Geometry {
    pub fn of(c: &kiln::ConvolutionParams) -> Geometry {
        // Saturating, not wrapping: an attribute past i64 stays the largest, never negative.
        let at = |v: &[usize], i: usize, default: usize| i64::try_from(v.get(i).copied().unwrap_or(default)).unwrap_or(i64::MAX);
        let pair = |v: &[usize], default: usize| (at(v, 0, default), at(v, 1, default));
        Geometry { strides: pair(&c.strides, 1), dilations: pair(&c.dilations, 1), padding: pair(&c.pre_padding, 0) }
    }

    /// The kernels' window of a one-group convolution of `x` `[n, c, h, w]` by `w` `[k, c, r, s]`
    /// into `out` `[n, k, oh, ow]` (4-D each: the caller checked).
    pub fn window(&self, x: &[usize], w: &[usize], out: &[usize]) -> Window {
        let ((sh, sw), (dh, dw), (ph, pw)) = (self.strides, self.dilations, self.padding);
        let d = |v: usize| v as i64;
        Window { n: d(x[0]), c: d(x[1]), h: d(x[2]), w: d(x[3]), oc: d(w[0]), oh: d(out[2]), ow: d(out[3]), kh: d(w[2]), kw: d(w[3]), sh, sw, dh, dw, ph, pw, groups: 1, ..Window::default() }
    }
}

/// The grid (one dimension: the kernel takes its filter block from the fastest-varying part)
/// and dynamic shared bytes of a launch. A block's shared memory holds its stages and the
/// output tile of levels (`[pixels][filters + 16]` bytes, and as much again for a join's
/// bytes): over the stages, one tile a block, or after them for a persistent launch, whose
/// blocks (as many as fit at once, in a multiple of the filter blocks) each keep one filter
/// block and stride over the pixel tiles, loading the next tile while storing this one. It is
/// persistent where that costs no residency and there is more than one wave of tiles
/// (`KILN_CUDA_INT8_CONV_ONE_TILE=1` turns it off, for comparisons). Only a `pointwise` layer's
/// kernel can. A layer with a lookup (`looks_up`) runs one tile a block, its filters' rows of
/// the table staged beside the output tile in the ring's room.
#[allow(clippy::too_many_arguments)]
fn launch(cx: &Ctx, kernel: &crate::sources::Kernel, main_loop: MainLoop, pixels: usize, filters: usize, filters_per_block: usize, depth: usize, joins: bool, pointwise: bool, looks_up: bool) -> KResult<(u32, u32)> {
    let (pixel_tiles, filter_blocks) = (pixels.div_ceil(PIXELS_PER_BLOCK), filters.div_ceil(filters_per_block));
    let (ring, pitch) = main_loop.ring();
    let stages = ring.min(depth.div_ceil(DEPTH_PER_STAGE)) * (PIXELS_PER_BLOCK + filters_per_block) * pitch;
    // wgmma's tiles are aligned to its swizzle's 512 bytes within it.
    let slack = if main_loop.wgmma() { WGMMA_ALIGN } else { 0 };
    let tiles = if joins { 2 } else { 1 } * PIXELS_PER_BLOCK * (filters_per_block + 16) + if looks_up { filters_per_block * kiln::QuantizedParams::LOOKUP_ROW } else { 0 };
    let (one_tile, own_tile) = ((stages.max(tiles) + slack) as u32, (stages + tiles + slack) as u32);
    let blocks = pixel_tiles.checked_mul(filter_blocks).and_then(|b| u32::try_from(b).ok()).filter(|&b| b <= i32::MAX as u32);
    let blocks = blocks.ok_or_else(|| invalid!("an INT8 convolution of {pixels} pixels by {filters} filters is too many blocks"))?;
    if pointwise && !looks_up && !one_tile_only() {
        let resident = cx.gpu.resident_blocks(kernel, THREADS, own_tile)?;
        if resident > 0 && resident >= cx.gpu.resident_blocks(kernel, THREADS, one_tile)? {
            let lanes = (resident * cx.gpu.multiprocessors()) as usize / filter_blocks;
            if lanes > 0 && lanes < pixel_tiles {
                PERSISTENT_CONVOLUTIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                // A launch choice, not the builder's: the log shows it (formatted only where shown,
                // as this runs on every enqueue).
                if tracing::enabled!(target: "kiln::int8", tracing::Level::INFO) {
                    let blocks = lanes * filter_blocks;
                    super::quant::say_once(format!("{} over {pixels} pixels by {filters} filters: persistent, {blocks} blocks over {pixel_tiles} pixel tiles", kernel.name));
                }
                return Ok(((lanes * filter_blocks) as u32, own_tile));
            }
        }
    }
    Ok((blocks, one_tile))
}

/// `KILN_CUDA_INT8_CONV_ONE_TILE=1`: every INT8 convolution one tile a block (read once).
fn one_tile_only() -> bool {
    static ONE_TILE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ONE_TILE.get_or_init(|| std::env::var("KILN_CUDA_INT8_CONV_ONE_TILE").is_ok_and(|v| v == "1"))
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

/// Width taps folded into channels (`int8_fold_columns`) for an input of at most 8 channels and
/// a filter at least 2 wide without dilation: `group` columns of `padded` channels are one
/// 16-byte copy, and the filter reads every `group`-th folded column (every `group / stride`-th
/// where the input's columns are folded `stride` apart).
struct Fold {
    padded: usize,
    group: usize,
}

impl Fold {
    fn of(channels: usize, filter_width: usize, dilation_w: i64) -> Option<Fold> {
        let padded = match channels {
            1..=4 => 4,
            5..=8 => 8,
            _ => return None,
        };
        (filter_width >= 2 && dilation_w == 1).then_some(Fold { padded, group: 16 / padded })
    }

    /// The filter `[k, c, r, s]` as `[k, 16, r, ceil(s / group)]` channels-last (k r s' c').
    fn filter(&self, cx: &Ctx, w: &DeviceTensor) -> KResult<DeviceTensor> {
        let s = w.shape.get(3).copied().unwrap_or(0);
        self.columns(cx, w, s.div_ceil(self.group), self.group, 0)
    }

    /// `t` as `[n, 16, h, out_w]` channels-last: column f holds columns `f·step − shift + j`,
    /// j < group, of t's (zeros outside it).
    fn columns(&self, cx: &Ctx, t: &DeviceTensor, out_w: usize, step: usize, shift: usize) -> KResult<DeviceTensor> {
        let [n, c, h, w] = <[usize; 4]>::try_from(t.shape.as_slice()).map_err(|_| invalid!("an INT8 convolution operand of rank {}", t.shape.len()))?;
        let out = super::empty_in_layout(cx, t.dtype, &[n, 16, h, out_w], true)?;
        let mut args: Vec<Arg> = [n, c, h, w, out_w, self.padded, step, shift].iter().map(|&d| Arg::I64(d as i64)).collect();
        args.extend(t.element_strides().iter().map(|&s| Arg::I64(s)));
        args.extend([cx.arg(t), cx.arg(&out)]);
        cx.launch_elements(Source::Int8Conv.kernel("int8_fold_columns"), n * h * out_w, &args)?;
        Ok(out)
    }
}

/// The convolution kernel of `filters_per_block` filters (64 or 128) with the levels-only or the
/// general epilogue, on wgmma or mma.sync, in the source that defines it (int8_conv.cuh's
/// kernels are instantiated in three, compiled in parallel).
fn conv_kernel(filters_per_block: usize, levels: bool, wgmma: bool) -> Kernel {
    let source = match (levels, wgmma) {
        (true, _) => Source::Int8Conv,
        (false, false) => Source::Int8ConvGeneral,
        (false, true) => Source::Int8ConvWgGeneral,
    };
    let main = if wgmma { "wg_" } else { "" };
    source.kernel(format!("int8_conv_{main}bn{filters_per_block}{}", if levels { "_levels" } else { "" }))
}

/// Every convolution kernel of one main loop: both block widths, both epilogues.
fn conv_kernels(wgmma: bool) -> impl Iterator<Item = Kernel> {
    [64, 128].into_iter().flat_map(move |f| [false, true].map(|levels| conv_kernel(f, levels, wgmma)))
}

/// The kernels on mma.sync (every architecture's image), and the channel padding and folding,
/// each in its source: for the NVRTC test.
pub fn kernels() -> Vec<Kernel> {
    conv_kernels(false).chain(["int8_pad_channels", "int8_fold_columns"].map(|n| Source::Int8Conv.kernel(n))).collect()
}

/// The wgmma kernels, in sm_90's (`sm_90a`) images only.
pub fn wgmma_kernels() -> Vec<Kernel> {
    conv_kernels(true).collect()
}

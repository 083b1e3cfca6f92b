//! kiln's warp-specialized INT8 matrix product on Hopper (kernels/int8_gemm.cu): a persistent
//! kernel, one block a multiprocessor, whose producer warpgroup has the TMA copy operand tiles
//! into a ring while two consumer warpgroups take alternate 64 × 128 output tiles on wgmma, one's
//! requantizing epilogue running beside the other's MMAs. Its tactic (`…_implicit_gemm_tma`) is
//! offered for pointwise layers (1×1 convolutions over NHWC, matrix products) beside the
//! convolution kernel's; [`super::int8_conv`] runs a layer here where its epilogue is
//! levels-only with no lookup and no join, and on wgmma's main loop otherwise.

use super::quant::Epilogue;
use super::Ctx;
use crate::buffer::{Arg, DeviceTensor};
use crate::ops::KResult;
use crate::sources::Source;
use kiln::KernelError;
use std::sync::atomic::{AtomicU64, Ordering};

/// `IG_BM`, `IG_BN`, `IG_BK`, `IG_STAGES`, `IG_CONSUMERS` and the block size of int8_gemm.cu.
const ROWS_PER_TILE: usize = 64;
const COLUMNS_PER_TILE: usize = 128;
const DEPTH_PER_STAGE: usize = 128;
const STAGES: usize = 7;
const CONSUMERS: usize = 2;
const THREADS: u32 = 128 * (1 + CONSUMERS as u32);
/// `GemmShared`'s bytes (the stages, the consumers' output tiles with 16 bytes of row padding,
/// the barriers, the second quantization's table) plus the slack that aligns it to 1024.
const SHARED_BYTES: usize = STAGES * (ROWS_PER_TILE + COLUMNS_PER_TILE) * DEPTH_PER_STAGE + CONSUMERS * ROWS_PER_TILE * (COLUMNS_PER_TILE + 16) + (2 * STAGES + CONSUMERS) * 8 + 256 + 1024;

const KERNEL: &str = "int8_gemm_tma_levels";

static PRODUCTS: AtomicU64 = AtomicU64::new(0);

/// How many products this process has enqueued on this kernel (tests prove with it that a layer
/// ran here, not on the convolution kernel).
pub fn products_enqueued() -> u64 {
    PRODUCTS.load(Ordering::Relaxed)
}

/// Every kernel of int8_gemm.cu: in sm_90's arch-specific (`sm_90a`) image only.
pub fn kernel_names() -> [&'static str; 1] {
    [KERNEL]
}

/// Whether the kernel takes a pointwise layer of `filters` output channels over `depth` (the
/// caller checked that the epilogue is levels-only): no lookup or join, rows of 16-byte pieces
/// in and out, 32-bit tile counts.
pub fn applies(epilogue: &Epilogue, pixels: usize, filters: usize, depth: usize) -> bool {
    let tiles = pixels.div_ceil(ROWS_PER_TILE).saturating_mul(filters.div_ceil(COLUMNS_PER_TILE));
    !epilogue.looks_up && !epilogue.joins && filters.is_multiple_of(16) && depth.is_multiple_of(16) && depth > 0 && tiles <= i32::MAX as usize && pixels <= i32::MAX as usize
}

/// `out[pixels][filters]` = the epilogue's levels of `x[pixels][depth]` · `w[filters][depth]`ᵀ,
/// each operand packed row-major from its buffer's start and 16-byte aligned (the caller's).
#[allow(clippy::too_many_arguments)]
pub fn product(cx: &Ctx, x: &DeviceTensor, w: &DeviceTensor, epilogue: &Epilogue, out: &DeviceTensor, pixels: usize, filters: usize, depth: usize) -> KResult<()> {
    let x_map = cx.gpu.tensor_map_2d_u8(x, depth, pixels, depth, DEPTH_PER_STAGE as u32, ROWS_PER_TILE as u32)?;
    let w_map = cx.gpu.tensor_map_2d_u8(w, depth, filters, depth, DEPTH_PER_STAGE as u32, COLUMNS_PER_TILE as u32)?;
    let tiles = pixels.div_ceil(ROWS_PER_TILE) * filters.div_ceil(COLUMNS_PER_TILE);
    let grid = tiles.min(cx.gpu.multiprocessors() as usize) as u32;
    let kernel = Source::Int8Gemm.kernel(KERNEL);
    if tracing::enabled!(target: "kiln::int8", tracing::Level::INFO) {
        super::quant::say_once(format!("{KERNEL} over {pixels} rows by {filters} filters, depth {depth}: {tiles} tiles on {grid} blocks"));
    }
    let mut args = vec![Arg::TensorMap(x_map), Arg::TensorMap(w_map), Arg::I32(pixels as i32), Arg::I32(filters as i32), Arg::I32(depth as i32)];
    args.extend(epilogue.args.iter().copied());
    args.push(Arg::I32(super::typed::type_code(epilogue.computed)));
    args.push(cx.arg(out));
    cx.gpu.launch_with_shared(&kernel, (grid, 1, 1), (THREADS, 1, 1), SHARED_BYTES as u32, &args).map_err(KernelError::from)?;
    PRODUCTS.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

//! kiln's warp-specialized INT8 matrix product on Hopper (kernels/int8_gemm.cu): a persistent
//! kernel, one block a multiprocessor, whose producer warpgroup has the TMA copy operand tiles
//! into a ring while two consumer warpgroups take alternate 64 × 128 (or 128 × 128) output tiles
//! on wgmma, one's requantizing epilogue running beside the other's MMAs. Its tactics
//! (`…_implicit_gemm_tma`, `…_implicit_gemm_tma_m128`: one per [`TileRows`]) are offered for
//! pointwise layers (1×1 convolutions over NHWC, matrix products) beside the convolution
//! kernel's; [`super::int8_conv`] runs a layer here where its epilogue is levels-only with no
//! join (`int8_gemm_tma_lookup…` where the levels are looked up in a per-column table), and on
//! wgmma's main loop otherwise.

use super::quant::Epilogue;
use super::Ctx;
use crate::buffer::{Arg, DeviceTensor};
use crate::ops::KResult;
use crate::sources::Source;
use kiln::KernelError;
use std::sync::atomic::{AtomicU64, Ordering};

/// `IG_BM`, `IG_BN`, `IG_BK`, `IG_CONSUMERS` and the block size of int8_gemm.cu.
const ROWS_PER_MMA: usize = 64;
const COLUMNS_PER_TILE: usize = 128;
const DEPTH_PER_STAGE: usize = 128;
const CONSUMERS: usize = 2;
const THREADS: u32 = 128 * (1 + CONSUMERS as u32);

/// The rows of a consumer's tile: one wgmma m64 block, or two sharing each stage's filters (half
/// the filter bytes from L2 a product, half the tiles). Each is a tactic: which is faster
/// depends on the shape (tiles to spread over the multiprocessors, depth).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TileRows {
    R64,
    R128,
}

impl TileRows {
    const fn rows(self) -> usize {
        match self {
            TileRows::R64 => ROWS_PER_MMA,
            TileRows::R128 => 2 * ROWS_PER_MMA,
        }
    }
}

/// A kernel of int8_gemm.cu: its name, its tile's rows, its ring's stages and each consumer's
/// table bytes.
struct Variant {
    name: &'static str,
    rows: TileRows,
    stages: usize,
    table_bytes: usize,
}

/// Levels looked up in a per-column table take the tile's 128 rows of 256 bytes a consumer.
const TABLE_BYTES: usize = COLUMNS_PER_TILE * 256;
const VARIANTS: [Variant; 4] = [
    Variant { name: "int8_gemm_tma_levels", rows: TileRows::R64, stages: 7, table_bytes: 16 },
    Variant { name: "int8_gemm_tma_lookup", rows: TileRows::R64, stages: 5, table_bytes: TABLE_BYTES },
    Variant { name: "int8_gemm_tma_levels_m128", rows: TileRows::R128, stages: 6, table_bytes: 16 },
    Variant { name: "int8_gemm_tma_lookup_m128", rows: TileRows::R128, stages: 4, table_bytes: TABLE_BYTES },
];

impl Variant {
    fn of(rows: TileRows, looks_up: bool) -> &'static Variant {
        let found = VARIANTS.iter().find(|v| v.rows == rows && (v.table_bytes == TABLE_BYTES) == looks_up);
        found.expect("a variant for every tile and epilogue")
    }

    /// `GemmShared`'s bytes (the stages, the consumers' one-m64 output tiles with 16 bytes of row
    /// padding, tables and two tiles' column scales and biases, the barriers, the second
    /// quantization's table) plus the slack that aligns it to 1024.
    const fn shared_bytes(&self) -> usize {
        self.stages * (self.rows.rows() + COLUMNS_PER_TILE) * DEPTH_PER_STAGE
            + CONSUMERS * (ROWS_PER_MMA * (COLUMNS_PER_TILE + 16) + self.table_bytes + 2 * COLUMNS_PER_TILE * 8)
            + (2 * self.stages + 3 * CONSUMERS) * 8
            + 256
            + 1024
    }
}

static PRODUCTS: AtomicU64 = AtomicU64::new(0);

/// How many products this process has enqueued on this kernel (tests prove with it that a layer
/// ran here, not on the convolution kernel).
pub fn products_enqueued() -> u64 {
    PRODUCTS.load(Ordering::Relaxed)
}

/// Every kernel of int8_gemm.cu: in sm_90's arch-specific (`sm_90a`) image only.
pub fn kernel_names() -> [&'static str; 4] {
    VARIANTS.map(|v| v.name)
}

/// Whether the kernel takes a pointwise layer of `filters` output channels over `depth` (the
/// caller checked that the epilogue is levels-only): no join, rows of 16-byte pieces in and out,
/// 32-bit tile counts.
pub fn applies(epilogue: &Epilogue, pixels: usize, filters: usize, depth: usize) -> bool {
    let tiles = pixels.div_ceil(ROWS_PER_MMA).saturating_mul(filters.div_ceil(COLUMNS_PER_TILE));
    !epilogue.joins && filters.is_multiple_of(16) && depth.is_multiple_of(16) && depth > 0 && tiles <= i32::MAX as usize && pixels <= i32::MAX as usize
}

/// `out[pixels][filters]` = the epilogue's levels of `x[pixels][depth]` · `w[filters][depth]`ᵀ
/// in tiles of `rows`, each operand packed row-major from its buffer's start and 16-byte aligned
/// (the caller's).
#[allow(clippy::too_many_arguments)]
pub fn product(cx: &Ctx, rows: TileRows, x: &DeviceTensor, w: &DeviceTensor, epilogue: &Epilogue, out: &DeviceTensor, pixels: usize, filters: usize, depth: usize) -> KResult<()> {
    let variant = Variant::of(rows, epilogue.looks_up);
    let x_map = cx.gpu.tensor_map_2d_u8(x, depth, pixels, depth, DEPTH_PER_STAGE as u32, rows.rows() as u32)?;
    let w_map = cx.gpu.tensor_map_2d_u8(w, depth, filters, depth, DEPTH_PER_STAGE as u32, COLUMNS_PER_TILE as u32)?;
    let tiles = pixels.div_ceil(rows.rows()) * filters.div_ceil(COLUMNS_PER_TILE);
    let grid = tiles.min(cx.gpu.multiprocessors() as usize) as u32;
    let kernel = Source::Int8Gemm.kernel(variant.name);
    if tracing::enabled!(target: "kiln::int8", tracing::Level::INFO) {
        super::quant::say_once(format!("{} over {pixels} rows by {filters} filters, depth {depth}: {tiles} tiles on {grid} blocks", variant.name));
    }
    let mut args = vec![Arg::TensorMap(x_map), Arg::TensorMap(w_map), Arg::I32(pixels as i32), Arg::I32(filters as i32), Arg::I32(depth as i32)];
    args.extend(epilogue.args.iter().copied());
    args.push(Arg::I32(super::typed::type_code(epilogue.computed)));
    args.push(cx.arg(out));
    cx.gpu.launch_with_shared(&kernel, (grid, 1, 1), (THREADS, 1, 1), variant.shared_bytes() as u32, &args).map_err(KernelError::from)?;
    PRODUCTS.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{TileRows, Variant, VARIANTS};

    /// Every kernel's shared memory fits a Hopper multiprocessor's 227 KB of dynamic shared memory.
    #[test]
    fn every_variant_fits_in_shared_memory() {
        for v in VARIANTS {
            assert!(v.shared_bytes() <= 232_448, "{}: {} bytes", v.name, v.shared_bytes());
        }
    }

    /// Each tile and epilogue has its kernel.
    #[test]
    fn each_tile_and_epilogue_has_its_kernel() {
        assert_eq!(Variant::of(TileRows::R64, false).name, "int8_gemm_tma_levels");
        assert_eq!(Variant::of(TileRows::R64, true).name, "int8_gemm_tma_lookup");
        assert_eq!(Variant::of(TileRows::R128, false).name, "int8_gemm_tma_levels_m128");
        assert_eq!(Variant::of(TileRows::R128, true).name, "int8_gemm_tma_lookup_m128");
    }
}

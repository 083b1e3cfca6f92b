//! kiln's warp-specialized INT8 matrix product on Hopper (kernels/int8_gemm.cu): a persistent
//! kernel, one block a multiprocessor, whose producer warpgroup has the TMA copy operand tiles
//! into a ring while consumer warpgroups take output tiles in turn on wgmma (three of 64 × 128 or
//! 128 × 64, or two of 128 × 128 or 64 × 192), one's requantizing epilogue running beside the
//! others' MMAs, or both share each 256 × 128 tile. Its tactics (`…_implicit_gemm_tma`,
//! `…_tma_m128`, `…_tma_n192`, `…_tma_n64`, `…_tma_m256`: one per [`Tile`]) are offered for
//! pointwise layers (1×1 convolutions over NHWC, matrix products) beside the convolution
//! kernel's; [`super::int8_conv`] runs a layer here where its epilogue is levels-only
//! (`int8_gemm_tma_lookup…` where the levels are looked up in a per-column table,
//! `int8_gemm_tma_join` where a skip connection joins at the second quantization: 64 × 128 tiles
//! only), and on wgmma's main loop otherwise. Other convolutions with the levels-only epilogue
//! (no lookup or join) run here too (`int8_gemm_tma_conv…`, every tile but 64 × 192): the
//! producer warpgroup gathers the activations' taps, the filter tiles still come by TMA.

use super::quant::Epilogue;
use super::Ctx;
use crate::buffer::{Arg, DeviceTensor};
use crate::ops::KResult;
use crate::sources::Source;
use kiln::KernelError;
use std::sync::atomic::{AtomicU64, Ordering};

/// `IG_BM`, `IG_BN` and `IG_BK` of int8_gemm.cu.
const ROWS_PER_MMA: usize = 64;
const COLUMNS_PER_TILE: usize = 128;
const DEPTH_PER_STAGE: usize = 128;

/// A consumer's tile, rows × columns: one wgmma m64 block by 128 columns; two m64 blocks sharing
/// each stage's filters (half the filter bytes from L2 a product, half the tiles); one by 192
/// columns (a 768-column product in four column blocks: two tiles a multiprocessor at BERT's
/// 4,096 rows, where 128-column tiles leave three to some and two to others); or two m64 blocks
/// by 64 columns (a 64-filter layer, which 128-column tiles compute twice over); or 256 × 128,
/// both consumers on each tile, 128 rows apiece (each stage's filter tile serves 256 rows: a
/// third fewer bytes from L2 a product than 128 × 128; no turns, so the epilogues overlap only
/// the producer's next loads; ResNet-50's 3×3 layers of stages 2 and 3 ran 10% faster on it,
/// though Nsight Compute puts L2 at 27% of its peak there, not the bound). Each is a tactic:
/// which is faster depends on the shape (tiles to spread over the multiprocessors, depth).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tile {
    M64N128,
    M128N128,
    M64N192,
    M128N64,
    M256N128,
}

impl Tile {
    const fn rows(self) -> usize {
        match self {
            Tile::M64N128 | Tile::M64N192 => ROWS_PER_MMA,
            Tile::M128N128 | Tile::M128N64 => 2 * ROWS_PER_MMA,
            Tile::M256N128 => 4 * ROWS_PER_MMA,
        }
    }

    const fn columns(self) -> usize {
        match self {
            Tile::M64N128 | Tile::M128N128 | Tile::M256N128 => COLUMNS_PER_TILE,
            Tile::M64N192 => 192,
            Tile::M128N64 => 64,
        }
    }
}

/// A kernel of int8_gemm.cu: its name, its tile, its ring's stages, its consumer warpgroups
/// (`CONSUMERS`), each consumer's table bytes, whether it joins a skip connection (by its table
/// of levels, or on its line: `line`) and whether it is a convolution's (gathering its
/// activations).
struct Variant {
    name: &'static str,
    tile: Tile,
    stages: usize,
    consumers: usize,
    table_bytes: usize,
    joins: bool,
    line: bool,
    conv: bool,
}

/// Levels looked up in a per-column table take the tile's 128 rows of 256 bytes a consumer (no
/// 192-column kernel looks up: its tables would leave too little room for the ring).
const TABLE_BYTES: usize = COLUMNS_PER_TILE * 256;
const VARIANTS: [Variant; 13] = [
    Variant { name: "int8_gemm_tma_levels", tile: Tile::M64N128, stages: 7, consumers: 3, table_bytes: 16, joins: false, line: false, conv: false },
    Variant { name: "int8_gemm_tma_lookup", tile: Tile::M64N128, stages: 4, consumers: 3, table_bytes: TABLE_BYTES, joins: false, line: false, conv: false },
    Variant { name: "int8_gemm_tma_levels_m128", tile: Tile::M128N128, stages: 6, consumers: 2, table_bytes: 16, joins: false, line: false, conv: false },
    Variant { name: "int8_gemm_tma_lookup_m128", tile: Tile::M128N128, stages: 4, consumers: 2, table_bytes: TABLE_BYTES, joins: false, line: false, conv: false },
    Variant { name: "int8_gemm_tma_levels_n192", tile: Tile::M64N192, stages: 6, consumers: 2, table_bytes: 16, joins: false, line: false, conv: false },
    Variant { name: "int8_gemm_tma_join", tile: Tile::M64N128, stages: 4, consumers: 3, table_bytes: 16, joins: true, line: false, conv: false },
    Variant { name: "int8_gemm_tma_join_line", tile: Tile::M64N128, stages: 6, consumers: 3, table_bytes: 16, joins: true, line: true, conv: false },
    Variant { name: "int8_gemm_tma_conv", tile: Tile::M64N128, stages: 7, consumers: 3, table_bytes: 16, joins: false, line: false, conv: true },
    Variant { name: "int8_gemm_tma_conv_m128", tile: Tile::M128N128, stages: 6, consumers: 2, table_bytes: 16, joins: false, line: false, conv: true },
    Variant { name: "int8_gemm_tma_levels_n64", tile: Tile::M128N64, stages: 7, consumers: 3, table_bytes: 16, joins: false, line: false, conv: false },
    Variant { name: "int8_gemm_tma_conv_n64", tile: Tile::M128N64, stages: 7, consumers: 3, table_bytes: 16, joins: false, line: false, conv: true },
    Variant { name: "int8_gemm_tma_levels_m256", tile: Tile::M256N128, stages: 4, consumers: 2, table_bytes: 16, joins: false, line: false, conv: false },
    Variant { name: "int8_gemm_tma_conv_m256", tile: Tile::M256N128, stages: 4, consumers: 2, table_bytes: 16, joins: false, line: false, conv: true },
];

/// `IG_JOIN_TABLE_AT` of int8_gemm.cu: the shared address of a join kernel's 64 KiB table, the
/// stages 64 KiB after it.
const JOIN_TABLE_AT: usize = 65_536;
const JOIN_TABLE_BYTES: usize = 65_536;

impl Variant {
    /// The kernel for `tile` and the epilogue, a product's or a convolution's (`conv`), if there
    /// is one.
    fn of(tile: Tile, looks_up: bool, joins: bool, conv: bool) -> Option<&'static Variant> {
        VARIANTS.iter().find(|v| v.tile == tile && (v.table_bytes == TABLE_BYTES) == looks_up && v.joins == joins && !v.line && v.conv == conv)
    }

    /// A join kernel's form on a line (for a join whose line is known); any other kernel itself.
    fn on_line(&'static self) -> &'static Variant {
        let line = |v: &&Variant| v.joins && v.line && v.tile == self.tile && v.conv == self.conv;
        if self.joins { VARIANTS.iter().find(line).unwrap_or(self) } else { self }
    }

    /// `GemmShared`'s bytes (the stages, the consumers' one-m64 output tiles with 16 bytes of row
    /// padding, tables and two tiles' column scales and biases, the barriers, the second
    /// quantization's table) plus the slack that aligns it to 1024. A join kernel's
    /// (`JoinShared`) ends with its stages after the table: its shared memory reaches that far
    /// from any start below the table. A line's (`JoinLineShared`) is GemmShared's and the
    /// consumers' join tiles (rows of `columns + 16`).
    const fn shared_bytes(&self) -> usize {
        let columns = self.tile.columns();
        let stages = self.stages * (self.tile.rows() + columns) * DEPTH_PER_STAGE;
        if self.joins && !self.line {
            return JOIN_TABLE_AT + JOIN_TABLE_BYTES + stages;
        }
        let join_tiles = if self.line { self.consumers * ROWS_PER_MMA * (columns + 16) } else { 0 };
        join_tiles
            + stages
            + self.consumers * (ROWS_PER_MMA * (columns + 16) + self.table_bytes + 2 * columns * 8)
            + (2 * self.stages + 3 * self.consumers) * 8
            + 256
            + 1024
    }

    /// The block: the producer warpgroup and the consumers'.
    const fn threads(&self) -> u32 {
        128 * (1 + self.consumers as u32)
    }
}

static PRODUCTS: AtomicU64 = AtomicU64::new(0);

/// How many products and convolutions this process has enqueued on this kernel (tests prove
/// with it that a layer ran here, not on the convolution kernel).
pub fn products_enqueued() -> u64 {
    PRODUCTS.load(Ordering::Relaxed)
}

static JOIN_LINES: AtomicU64 = AtomicU64::new(0);

/// How many joins this process has enqueued on their lines (`int8_gemm_tma_join_line`), not
/// their tables: tests prove with it which form ran.
pub fn join_lines_enqueued() -> u64 {
    JOIN_LINES.load(Ordering::Relaxed)
}

/// Every kernel of int8_gemm.cu: in sm_90's arch-specific (`sm_90a`) image only.
pub fn kernel_names() -> [&'static str; 13] {
    VARIANTS.map(|v| v.name)
}

/// Whether int8_gemm.cu has a kernel for `tile` with (or without) a per-column lookup and a
/// join, for a pointwise layer or (`conv`) any other convolution.
pub fn has_kernel(tile: Tile, looks_up: bool, joins: bool, conv: bool) -> bool {
    Variant::of(tile, looks_up, joins, conv).is_some()
}

/// Whether the kernel takes a pointwise layer of `filters` output channels over `depth` in
/// `tile`s (the caller checked that the epilogue is levels-only): a kernel for the tile and
/// epilogue (a join with its table of levels), rows of 16-byte pieces in and out, 32-bit
/// tile counts (under 2^22: the kernels divide tile numbers by a float reciprocal),
/// and a tile's 256 rows of output within 32-bit offsets of its corner.
pub fn applies(tile: Tile, epilogue: &Epilogue, pixels: usize, filters: usize, depth: usize, conv: bool) -> bool {
    let tiles = pixels.div_ceil(ROWS_PER_MMA).saturating_mul(filters.div_ceil(COLUMNS_PER_TILE));
    has_kernel(tile, epilogue.looks_up, epilogue.joins, conv)
        && (!epilogue.joins || epilogue.join_table.is_some())
        && filters.is_multiple_of(16) && depth.is_multiple_of(16) && depth > 0 && tiles < 1 << 22 && pixels <= i32::MAX as usize
        && filters.saturating_mul(256) <= i32::MAX as usize
}

/// Whether the producer's gather takes a convolution of `win`'s geometry: it keeps each row's
/// window corner (its top row and left column, padding included) as two signed 16-bit halves
/// and marks rows past the pixels with a top row of -2^14, which no tap reaches from there.
pub fn gathers(win: &crate::buffer::Window) -> bool {
    const BOUND: i64 = 1 << 13;
    [win.h + win.ph, win.w + win.pw, (win.kh - 1) * win.dh, (win.kw - 1) * win.dw].iter().all(|&v| v < BOUND)
}

/// `out[pixels][filters]` = the epilogue's levels of `x[pixels][depth]` · `w[filters][depth]`ᵀ
/// in `tile`s (where [`applies`]), each operand packed row-major from its buffer's start and
/// 16-byte aligned (the caller's).
#[allow(clippy::too_many_arguments)]
pub fn product(cx: &Ctx, tile: Tile, x: &DeviceTensor, w: &DeviceTensor, epilogue: &Epilogue, out: &DeviceTensor, pixels: usize, filters: usize, depth: usize) -> KResult<()> {
    let x_map = cx.gpu.tensor_map_2d_u8(x, depth, pixels, depth, DEPTH_PER_STAGE as u32, tile.rows() as u32)?;
    launch(cx, tile, Some(x_map), w, epilogue, out, pixels, filters, depth, None)
}

/// `out[pixels][filters]` = the epilogue's levels of the convolution of the NHWC `x` (channels a
/// multiple of 16) by the KRSC filter `w` (`[filters][depth]`, depth r·s·c) of `win`'s geometry,
/// in `tile`s (where [`applies`] to a convolution); the operands 16-byte aligned (the caller's).
#[allow(clippy::too_many_arguments)]
pub fn convolution(cx: &Ctx, tile: Tile, x: &DeviceTensor, w: &DeviceTensor, win: crate::buffer::Window, epilogue: &Epilogue, out: &DeviceTensor, pixels: usize, filters: usize, depth: usize) -> KResult<()> {
    launch(cx, tile, None, w, epilogue, out, pixels, filters, depth, Some((win, cx.arg(x))))
}

/// The launch of a product (`x_map`, `conv` None) or a convolution (no `x_map`: the kernel
/// gathers the activations itself, and the slot takes the filter's map, unread; `conv` its
/// window and input).
#[allow(clippy::too_many_arguments)]
fn launch(cx: &Ctx, tile: Tile, x_map: Option<crate::buffer::TensorMap>, w: &DeviceTensor, epilogue: &Epilogue, out: &DeviceTensor, pixels: usize, filters: usize, depth: usize, conv: Option<(crate::buffer::Window, Arg)>) -> KResult<()> {
    let variant = Variant::of(tile, epilogue.looks_up, epilogue.joins, conv.is_some()).ok_or_else(|| KernelError::from(format!("no warp-specialized kernel for {tile:?} with this epilogue")))?;
    // A join whose line is known runs on it (the same bytes as the table's, by the host's check
    // of every pair), unless KILN_CUDA_INT8_JOIN_LINE=0 (for A/B timing).
    let line = epilogue.join_line.as_ref().filter(|_| variant.joins && lines_on());
    let variant = if line.is_some() { variant.on_line() } else { variant };
    let w_map = cx.gpu.tensor_map_2d_u8(w, depth, filters, depth, DEPTH_PER_STAGE as u32, tile.columns() as u32)?;
    let x_map = x_map.unwrap_or(w_map);
    let tiles = pixels.div_ceil(tile.rows()) * filters.div_ceil(tile.columns());
    let grid = tiles.min(cx.gpu.multiprocessors() as usize) as u32;
    let kernel = Source::Int8Gemm.kernel(variant.name);
    if tracing::enabled!(target: "kiln::int8", tracing::Level::INFO) {
        super::quant::say_once(format!("{} over {pixels} rows by {filters} filters, depth {depth}: {tiles} tiles on {grid} blocks", variant.name));
    }
    let mut args = vec![Arg::TensorMap(x_map), Arg::TensorMap(w_map), Arg::I32(pixels as i32), Arg::I32(filters as i32), Arg::I32(depth as i32)];
    match (variant.joins, line) {
        (true, Some(line)) => args.extend(epilogue.args_with_second(cx, line)),
        (true, None) => args.extend(epilogue.args_with_join_table(cx).ok_or_else(|| KernelError::from("a join without its table of levels"))?),
        (false, _) => args.extend(epilogue.args.iter().copied()),
    }
    args.push(Arg::I32(super::typed::type_code(epilogue.computed)));
    args.push(cx.arg(out));
    if let Some((win, x)) = conv {
        args.extend([Arg::Window(win), x]);
    }
    cx.gpu.launch_with_shared(&kernel, (grid, 1, 1), (variant.threads(), 1, 1), variant.shared_bytes() as u32, &args).map_err(KernelError::from)?;
    PRODUCTS.fetch_add(1, Ordering::Relaxed);
    if variant.line {
        JOIN_LINES.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

/// Whether joins run on their lines where known: unless `KILN_CUDA_INT8_JOIN_LINE=0` (read once a
/// process).
fn lines_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("KILN_CUDA_INT8_JOIN_LINE").as_deref() != Ok("0"))
}

#[cfg(test)]
mod tests {
    use super::{Tile, Variant, VARIANTS};

    /// int8_gemm.cu's `Schedule::quotient`: t / blocks as the
    /// truncated f32 product with the correctly rounded reciprocal (`__frcp_rn`), corrected by
    /// one. It is exact for every tile number below the 2^22 tiles `applies` allows: tried on
    /// every quotient boundary (k·d - 1, k·d) near the top of the range and near the bottom.
    #[test]
    fn tile_quotients_by_reciprocal_are_exact_below_the_tile_bound() {
        let quotient = |t: i32, d: i32| {
            let q = (t as f32 * (1.0f32 / d as f32)) as i32;
            let r = t - q * d;
            q + i32::from(r >= d) - i32::from(r < 0)
        };
        let bound = 1i32 << 22;
        for d in (1..=300).chain([511, 512, 513, 1000, 4095, 4096, 4097, 65_535, 1 << 20, bound - 1]) {
            let top = (bound - 1) / d;
            for k in (0..=top.min(2_000)).chain((top - 2_000).max(0)..=top) {
                for t in [k * d - 1, k * d, k * d + d - 1] {
                    if (0..bound).contains(&t) {
                        assert_eq!(quotient(t, d), t / d, "{t} / {d}");
                    }
                }
            }
        }
    }

    /// Every kernel's shared memory fits a Hopper multiprocessor's 227 KB of dynamic shared memory.
    #[test]
    fn every_variant_fits_in_shared_memory() {
        for v in VARIANTS {
            assert!(v.shared_bytes() <= 232_448, "{}: {} bytes", v.name, v.shared_bytes());
        }
    }

    /// The gather takes ResNet-50's and a large image's 3×3 windows, not one whose rows or
    /// padding reach 2^13 (its corners are 16-bit halves).
    #[test]
    fn the_gather_takes_windows_its_corners_hold() {
        let window = |h: i64, ph: i64, dilation: i64| crate::buffer::Window { h, w: h, ph, pw: ph, kh: 3, kw: 3, dh: dilation, dw: dilation, ..Default::default() };
        assert!(super::gathers(&window(56, 1, 1)) && super::gathers(&window(4000, 1, 2)));
        assert!(!super::gathers(&window(8191, 1, 1)) && !super::gathers(&window(100, 8192, 1)) && !super::gathers(&window(100, 1, 4096)));
    }

    /// Each tile and epilogue has its kernel, but a lookup on 192 columns and a join on other
    /// tiles than 64 × 128.
    #[test]
    fn each_tile_and_epilogue_has_its_kernel() {
        let name = |tile, looks_up, joins| Variant::of(tile, looks_up, joins, false).map(|v| v.name);
        assert_eq!(name(Tile::M64N128, false, false), Some("int8_gemm_tma_levels"));
        assert_eq!(name(Tile::M64N128, true, false), Some("int8_gemm_tma_lookup"));
        assert_eq!(name(Tile::M128N128, false, false), Some("int8_gemm_tma_levels_m128"));
        assert_eq!(name(Tile::M128N128, true, false), Some("int8_gemm_tma_lookup_m128"));
        assert_eq!(name(Tile::M64N192, false, false), Some("int8_gemm_tma_levels_n192"));
        assert_eq!(name(Tile::M64N192, true, false), None);
        assert_eq!(name(Tile::M64N128, false, true), Some("int8_gemm_tma_join"));
        assert_eq!(Variant::of(Tile::M64N128, false, true, false).map(|v| v.on_line().name), Some("int8_gemm_tma_join_line"));
        assert_eq!(Variant::of(Tile::M64N128, false, false, false).map(|v| v.on_line().name), Some("int8_gemm_tma_levels"));
        assert_eq!([name(Tile::M128N128, false, true), name(Tile::M64N192, false, true), name(Tile::M64N128, true, true)], [None; 3]);
        // Convolutions: levels (or a second quantization) in 64 × 128 and 128 × 128 tiles.
        let conv = |tile, looks_up, joins| Variant::of(tile, looks_up, joins, true).map(|v| v.name);
        assert_eq!([conv(Tile::M64N128, false, false), conv(Tile::M128N128, false, false)], [Some("int8_gemm_tma_conv"), Some("int8_gemm_tma_conv_m128")]);
        assert_eq!([conv(Tile::M64N192, false, false), conv(Tile::M64N128, true, false), conv(Tile::M64N128, false, true)], [None; 3]);
        // 64 columns: levels, a product's and a convolution's.
        assert_eq!([name(Tile::M128N64, false, false), conv(Tile::M128N64, false, false)], [Some("int8_gemm_tma_levels_n64"), Some("int8_gemm_tma_conv_n64")]);
        assert_eq!([name(Tile::M128N64, true, false), name(Tile::M128N64, false, true)], [None; 2]);
        // 256 rows, both consumers on a tile: levels, a product's and a convolution's.
        assert_eq!([name(Tile::M256N128, false, false), conv(Tile::M256N128, false, false)], [Some("int8_gemm_tma_levels_m256"), Some("int8_gemm_tma_conv_m256")]);
        assert_eq!([name(Tile::M256N128, true, false), name(Tile::M256N128, false, true)], [None; 2]);
    }
}

// INT8 2-D convolution of an input of at most 4 channels (an RGB or grayscale stem) on tensor
// cores, the levels-only requantizing epilogue fused: int8 in any layout, int8 / uint8 NHWC out.
//
// The implicit GEMM of int8_conv.cu reads 16 channels at a time, so a 3-channel stem either
// pads them to 16 (five in six products on zeros) or folds width taps into a copy of the input
// first, and still re-reads each input pixel from L2 once per filter tap that covers it. Here a
// block owns 8 output rows × 16 output columns of one image (128 pixels) and 64 filters: it reads
// that tile's input window once into shared memory as one word per pixel (its 4 channels,
// zero-padded), and the depth is ordered tap by tap, 4 channels a tap, so every 4-byte piece of
// mma.sync's A fragment is one input pixel's word, read from the window at the pixel's offset
// plus the tap's (taps come 8 to a step of m16n8k32). The filter, arranged once as
// [filters][taps padded to 8][4], stays in shared memory while the block strides over the tiles,
// the B fragments read by ldmatrix, and the next tile's window is loaded while this one
// computes. ResNet-50's 7×7/2 stem at batch 256 on an H100 (benches/gpu/QUANT.md, session 34):
// 0.54 ms with each window's loads waited out a channel at a time, 0.41 with these loads, 0.36
// with ldmatrix and byte offsets in the main loop; issue-bound (69% of issue slots busy), the
// MMAs a fifth of the instructions. Four warps of 2 output rows × 64 filters (not eight of 2 ×
// 32) read each step's A fragments once for 16 MMAs: the main loop takes 2.84 instructions an
// MMA (SASS, sm_90a), where it took 4.12; the H200's stem 0.370 → 0.32-0.33 ms (session 48).
// On sm_90a the block is one warpgroup and a step is two wgmmas with A in registers (the same
// window words) and the filter 128-byte swizzled: ResNet-50's stem 0.331 → 0.282 ms, 1,585 →
// 1,455 instructions a warp's tile (session 60).
//
// The epilogue is int8_conv.cu's levels-only one (level_of_sum): the host takes this kernel only
// where that is exact (levels out, no float bias, residual or join, an int32 bias the sums can
// start at), as kiln-cpu's integer layer computes it.
#include "common.cuh"
#include "mma.cuh"
#include "wgmma.cuh"

// Where the architecture has wgmma (sm_90a), a step's 16 MMAs a warp are two warpgroup MMAs with
// A in registers (the same window words) and the filter in shared memory, 128-byte swizzled.
#ifdef __CUDA_ARCH_FEAT_SM90_ALL
#define FC_WGMMA 1
#else
#define FC_WGMMA 0
#endif

#define FC_TH 8           // output rows a tile
#define FC_TW 16          // output columns a tile: one m16 row block of the MMA
#define FC_BN 64          // filters a block
#define FC_THREADS 128
#define FC_PREFETCH 2    // window groups a thread loads while the tile before computes
#define FC_OUT_PITCH (FC_BN + 16)  // the output tile's rows in shared memory, 16-byte aligned

// The epilogue's operands (the host's `quant::Epilogue` arguments, in that order); this kernel
// reads the levels-only ones.
struct FewRequant {
    const int* int_bias;
    const float* scale;
    i64 scale_len;
    float y_zero, lo, hi;
    int relu;
    const unsigned char* then;  // a second quantization's table of levels, or NULL
    const unsigned char* lookup;  // the levels' per-channel table (common.cuh's looked_up), or NULL
};

// n / d for n < 2^31 by a multiply-high and a shift (a 32-bit division is about 20 instructions,
// a 64-bit one about 80: per tile they were most of this kernel's instructions). 0 < d < 2^31.
struct Quotient {
    unsigned magic, shift;
    __device__ explicit Quotient(unsigned d) {
        shift = 0;
        while ((1u << shift) < d) ++shift;
        magic = (unsigned)(((1ull << 32) * ((1ull << shift) - d)) / d + 1);
    }
    __device__ __forceinline__ unsigned of(unsigned n) const { return (__umulhi(n, magic) + n) >> shift; }
};

// A tile's input window: `rows` rows of `pitch` words (a multiple of 4), one word a pixel, whose
// first column is the tile's first input column rounded down to a multiple of 4 (`shift`
// columns left of it). Threads copy it in groups of 4 columns: with `words` (unit column stride,
// 4-byte aligned rows and planes: NCHW) a group is one word load per channel, transposed into
// the 4 pixels' words; elsewhere, and where a group crosses the input's edge, byte loads.
struct Window4 {
    int rows, pitch, groups;
};

// The filter's shared bytes (the host's `filter_bytes`): rows of taps + 4 words for mma.sync's
// ldmatrix, or wgmma's K-blocks of 128 bytes a filter, whichever is larger, and 1024 bytes to
// align the swizzled blocks.
__device__ __forceinline__ int filter_region_bytes(int taps) {
    return max(FC_BN * (taps + 4) * 4, (taps * 4 + 127) / 128 * FC_BN * 128) + 1024;
}

// The loads of the group at window row `row`, column 4·`group` for the tile whose window starts
// at input row ih0, column col0 (a multiple of 4) of image `xi`: each channel's 4 bytes in one
// word, zeros outside the input.
__device__ __forceinline__ void fetch_group(const Window& win, i64 xs_c, i64 xs_h, i64 xs_w, bool words, const signed char* xi, int ih0, int col0,
                                            int row, int group, unsigned* pre) {
    const int c = (int)win.c, h = (int)win.h, w = (int)win.w;
    const int ih = ih0 + row, iw = col0 + 4 * group;
#pragma unroll
    for (int cc = 0; cc < 4; ++cc) pre[cc] = 0;
    if ((unsigned)ih >= (unsigned)h) return;
    const signed char* at = xi + ih * xs_h;
    if (words && iw >= 0 && iw + 4 <= w) {
#pragma unroll
        for (int cc = 0; cc < 4; ++cc)
            if (cc < c) pre[cc] = __ldg(reinterpret_cast<const unsigned*>(at + cc * xs_c + iw));
        return;
    }
#pragma unroll
    for (int b = 0; b < 4; ++b)
#pragma unroll
        for (int cc = 0; cc < 4; ++cc)
            if (cc < c && (unsigned)(iw + b) < (unsigned)w) pre[cc] |= (unsigned)(unsigned char)at[cc * xs_c + (i64)(iw + b) * xs_w] << (8 * b);
}

// Group `gi`'s 4 pixels into the window: pre[cc] holds channel cc of the 4 columns, each pixel's
// word its 4 channels (a 4×4 byte transpose).
__device__ __forceinline__ void put_group(unsigned* window, const Window4& wd, int gi, const unsigned* pre) {
    const unsigned lo01 = __byte_perm(pre[0], pre[1], 0x5140), hi01 = __byte_perm(pre[0], pre[1], 0x7362);
    const unsigned lo23 = __byte_perm(pre[2], pre[3], 0x5140), hi23 = __byte_perm(pre[2], pre[3], 0x7362);
    *reinterpret_cast<uint4*>(window + 4 * gi) =
        make_uint4(__byte_perm(lo01, lo23, 0x5410), __byte_perm(lo01, lo23, 0x7632), __byte_perm(hi01, hi23, 0x5410), __byte_perm(hi01, hi23, 0x7632));
}

// `win`: NCHW sizes (win.c <= 4); x read at element strides (xs_n, xs_c, xs_h, xs_w), by words
// where `words` (the host's check); `wt` the filter as [filter blocks · FC_BN][taps][4] (taps:
// win.kh · win.kw padded to a multiple of 8, zeros past the filters and taps); y is
// [n][oh][ow][oc]. The grid is a multiple of the filter blocks: block b keeps filter block
// b % blocks and strides over the pixel tiles.
__device__ __forceinline__ void few_channels(const Window& win, i64 xs_n, i64 xs_c, i64 xs_h, i64 xs_w, bool words, const signed char* __restrict__ x,
                                             const signed char* __restrict__ wt, int taps, const FewRequant& e, unsigned char* __restrict__ y) {
    // 4 warps, each 2 output rows × all 64 filters: a step's A fragments (one word load each)
    // serve 16 MMAs, where 2 rows × 32 filters gave them 8.
    constexpr int WARPS_M = 4, MT = 2, NT = 8;
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ unsigned char then_levels[256];
    const int k = (int)win.oc, p = (int)win.oh, q = (int)win.ow;
    const int kw = (int)win.kw, sh = (int)win.sh, sw = (int)win.sw, dh = (int)win.dh, dw = (int)win.dw;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, warp_m = warp % WARPS_M, warp_n = warp / WARPS_M;
    const int g = lane / 4, t = lane % 4;
    // The window's rows and columns (3 more for the shift to a multiple of 4).
    Window4 wd;
    wd.rows = (FC_TH - 1) * sh + ((int)win.kh - 1) * dh + 1;
    wd.pitch = ((FC_TW - 1) * sw + (kw - 1) * dw + 1 + 3 + 3) / 4 * 4;
    wd.groups = wd.rows * wd.pitch / 4;
    unsigned char* filter_region = smem;
    unsigned* window = reinterpret_cast<unsigned*>(smem + filter_region_bytes(taps));
    int* tap_offset = reinterpret_cast<int*>(window + wd.rows * wd.pitch);
    unsigned char* out_tile = reinterpret_cast<unsigned char*>(tap_offset + taps);
    // The block's channels' int32 biases and scales (the last channel's past the filters).
    __shared__ int2 bias_pairs[FC_BN / 2];
    __shared__ float2 scale_pairs[FC_BN / 2];

    const unsigned filter_blocks = (k + FC_BN - 1) / FC_BN;
    const int n0 = (int)(blockIdx.x % filter_blocks) * FC_BN;
    const unsigned tiles_w = (q + FC_TW - 1) / FC_TW, tiles_h = (p + FC_TH - 1) / FC_TH;
    // Fewer than 2^31 tiles (the host's check).
    const unsigned tiles = (unsigned)win.n * tiles_h * tiles_w, tile_stride = gridDim.x / filter_blocks;
    const Quotient by_w(tiles_w), by_h(tiles_h);

    // The block's filters and each tap's offset in the window, once.
    const unsigned* filter_words = reinterpret_cast<const unsigned*>(wt) + (i64)n0 * taps;
#if FC_WGMMA
    // K-major, 128-byte rows swizzled as the TMA's SWIZZLE_128B lays them (a row's 16-byte pieces
    // permuted by row % 8), a K-block of 128 bytes a filter after another.
    unsigned char* filter = filter_region + sw128_padding((unsigned)__cvta_generic_to_shared(filter_region));
    for (int i = tid; i < FC_BN * taps; i += FC_THREADS) {
        const int f = i / taps, depth = 4 * (i % taps), r = depth % 128;
        *reinterpret_cast<unsigned*>(filter + (depth / 128) * (FC_BN * 128) + sw128_offset(f, r / 16) + r % 16) = filter_words[i];
    }
    // wgmma reads shared memory through the async proxy (the tile loop's first barrier orders it).
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    const unsigned b_low = wgmma_descriptor_low(filter);
#else
    const int filter_pitch = taps + 4;  // words: the 8 filters one B load reads fall in different banks
    unsigned* filter = reinterpret_cast<unsigned*>(filter_region);
    for (int i = tid; i < FC_BN * taps; i += FC_THREADS) filter[(i / taps) * filter_pitch + i % taps] = filter_words[i];
#endif
    // In bytes: the main loop adds them to shared-space addresses.
    for (int i = tid; i < taps; i += FC_THREADS) tap_offset[i] = 4 * (i < (int)(win.kh * kw) ? (i / kw) * dh * wd.pitch + (i % kw) * dw : 0);
    for (int i = tid; i < FC_BN; i += FC_THREADS) {
        const int ch = min(n0 + i, k - 1);
        reinterpret_cast<int*>(bias_pairs)[i] = e.int_bias ? e.int_bias[ch] : 0;
        reinterpret_cast<float*>(scale_pairs)[i] = e.scale[e.scale_len == 1 ? 0 : ch];
    }
    if (e.then)
        for (int i = tid; i < 256; i += FC_THREADS) then_levels[i] = e.then[i];
    const int zero = (int)e.y_zero, high = (int)e.hi, low = e.relu ? max((int)e.lo, zero) : (int)e.lo;
    const float low_f = (float)(low - zero), high_f = (float)(high - zero);
    // This thread's channel pair of n-tile nt in the block (its bias and scale are read where
    // used: held across the main loop they cost 16 registers and spills).
    auto pair_of = [&](int nt) { return warp_n * NT * 4 + nt * 4 + t; };
#if !FC_WGMMA
    // ldmatrix's rows of the B fragments, n-tiles nt and nt + 1 from one x4 load (as int8_conv.cu
    // reads them): filter (lane % 8) + 8·(lane / 16), depth bytes 16·((lane / 8) % 2) on.
    const unsigned b_base = (unsigned)__cvta_generic_to_shared(filter) + (warp_n * NT * 8 + lane % 8 + (lane / 16) * 8) * filter_pitch * 4 + ((lane / 8) % 2) * 16;
#endif
    const unsigned char* window_bytes = reinterpret_cast<const unsigned char*>(window);
    auto window_word = [&](int at) { return *reinterpret_cast<const unsigned*>(window_bytes + at); };

    // A tile's image, first output row and column, and its window's first input row and column.
    struct Origin {
        int img, oh0, ow0, ih0, col0, shift;
    };
    auto origin = [&](unsigned tile) {
        Origin o;
        const unsigned row_of_tiles = by_w.of(tile);
        o.img = (int)by_h.of(row_of_tiles);
        o.oh0 = (int)(row_of_tiles - o.img * tiles_h) * FC_TH;
        o.ow0 = (int)(tile - row_of_tiles * tiles_w) * FC_TW;
        o.ih0 = o.oh0 * sh - (int)win.ph;
        const int iw0 = o.ow0 * sw - (int)win.pw;
        o.col0 = iw0 & ~3;  // rounded down, negative too
        o.shift = iw0 - o.col0;
        return o;
    };
    // A window of one pass (FC_PREFETCH groups a thread) is loaded while the tile before it
    // computes: the loads of the next tile's groups are issued before the main loop and stored
    // after the tile's output. Larger windows (long strides or dilations) load in passes,
    // between tiles.
    const bool prefetch = wd.groups <= FC_PREFETCH * FC_THREADS;
    const int groups_per_row = wd.pitch / 4;
    unsigned pre[FC_PREFETCH][4];
    // A thread's groups are the same window rows and columns in every tile: divided once.
    int my_row[FC_PREFETCH], my_group[FC_PREFETCH];
#pragma unroll
    for (int k = 0; k < FC_PREFETCH; ++k) {
        my_row[k] = (tid + k * FC_THREADS) / groups_per_row;
        my_group[k] = (tid + k * FC_THREADS) % groups_per_row;
    }
    auto fetch_mine = [&](unsigned at) {
        const Origin o = origin(at);
#pragma unroll
        for (int k = 0; k < FC_PREFETCH; ++k)
            if (tid + k * FC_THREADS < wd.groups) fetch_group(win, xs_c, xs_h, xs_w, words, x + o.img * xs_n, o.ih0, o.col0, my_row[k], my_group[k], pre[k]);
    };
    unsigned tile = blockIdx.x / filter_blocks;
    if (prefetch && tile < tiles) fetch_mine(tile);

#pragma unroll 1
    for (; tile < tiles; tile += tile_stride) {
        const Origin o = origin(tile);
        if (prefetch) {
#pragma unroll
            for (int k = 0; k < FC_PREFETCH; ++k)
                if (tid + k * FC_THREADS < wd.groups) put_group(window, wd, tid + k * FC_THREADS, pre[k]);
        } else {
            for (int gi = tid; gi < wd.groups; gi += FC_THREADS) {
                fetch_group(win, xs_c, xs_h, xs_w, words, x + o.img * xs_n, o.ih0, o.col0, gi / groups_per_row, gi % groups_per_row, pre[0]);
                put_group(window, wd, gi, pre[0]);
            }
        }
        __syncthreads();
        if (prefetch && tile + tile_stride < tiles) fetch_mine(tile + tile_stride);

        // The sums start at 0 and take the bias in the epilogue: preset, the compiler copied the
        // 64 accumulators into place for each entry of the unrolled loop (190 instructions a
        // warp's tile, a tenth of them; SASS, session 60).
        int acc[MT][NT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0;
        // A fragment rows g and g + 8 of m-tile mt are output row warp_m·MT + mt, columns g and
        // g + 8 (their byte offsets in the window); its words t and 4 + t of a step are taps
        // 8·step + t and 8·step + 4 + t.
        int pixel[MT][2];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int half = 0; half < 2; ++half) pixel[mt][half] = 4 * ((warp_m * MT + mt) * sh * wd.pitch + (g + 8 * half) * sw + o.shift);
        auto load_a = [&](int tap, unsigned (&a)[MT][4]) {
            const int lo_tap = tap_offset[tap + t], hi_tap = tap_offset[tap + 4 + t];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                a[mt][0] = window_word(pixel[mt][0] + lo_tap);
                a[mt][1] = window_word(pixel[mt][1] + lo_tap);
                a[mt][2] = window_word(pixel[mt][0] + hi_tap);
                a[mt][3] = window_word(pixel[mt][1] + hi_tap);
            }
        };
#if FC_WGMMA
        // The block is one warpgroup: its m-tile mt is warp w's rows of output row 2w + mt. A step
        // issues both m-tiles' MMAs on the filter's 32 bytes of depth at 4·tap, and loads the next
        // step's A words while they run (the registers alternate; each pair is kept live through
        // the wait, as the MMAs read them asynchronously).
        auto issue = [&](int tap, unsigned (&a)[MT][4]) {
            const unsigned depth = 4 * tap;
            const unsigned long long b = wgmma_sw128(b_low + (depth / 128) * (FC_BN * 128 / 16) + (depth % 128) / 16, 1024);
            asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) wgmma_s8_rs_n64(&acc[mt][0][0], a[mt], b, tap != 0);
            asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        };
        auto retire = [&](unsigned (&a)[MT][4]) {
            asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
            wgmma_fence_operands<MT * 4>(&a[0][0]);
        };
        unsigned a0[MT][4], a1[MT][4];
        load_a(0, a0);
#pragma unroll 1
        for (int tap = 0;;) {
            issue(tap, a0);
            if (tap + 8 < taps) load_a(tap + 8, a1);
            retire(a0);
            if ((tap += 8) >= taps) break;
            issue(tap, a1);
            if (tap + 8 < taps) load_a(tap + 8, a0);
            retire(a1);
            if ((tap += 8) >= taps) break;
        }
        wgmma_fence_operands<MT * NT * 4>(&acc[0][0][0]);
#else
#pragma unroll 2
        for (int tap = 0; tap < taps; tap += 8) {
            unsigned a[MT][4];
            load_a(tap, a);
#pragma unroll
            for (int nt = 0; nt < NT; nt += 2) {
                unsigned b[4];
                ldmatrix_x4_to(b_base + nt * 8 * filter_pitch * 4 + tap * 4, b);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma_s8(acc[mt][nt], a[mt], b[0], b[1]);
                    mma_s8(acc[mt][nt + 1], a[mt], b[2], b[3]);
                }
            }
        }
#endif

        // Levels into the output tile ([pixel][filter], 16-byte rows), then out in 16-byte pieces.
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const int col = warp_n * NT * 8 + nt * 8 + 2 * t;
            const float2 scale = scale_pairs[pair_of(nt)];
            const int2 bias = bias_pairs[pair_of(nt)];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    const int row = (warp_m * MT + mt) * FC_TW + g + 8 * half;
                    unsigned char b0 = level_of_sum(acc[mt][nt][2 * half] + bias.x, scale.x, low_f, high_f, zero);
                    unsigned char b1 = level_of_sum(acc[mt][nt][2 * half + 1] + bias.y, scale.y, low_f, high_f, zero);
                    if (e.then) {
                        b0 = then_levels[b0];
                        b1 = then_levels[b1];
                    }
                    *reinterpret_cast<uchar2*>(out_tile + row * FC_OUT_PITCH + col) = make_uchar2(b0, b1);
                }
        }
        __syncthreads();
        const bool vector = k % 16 == 0 && ((size_t)y % 16) == 0;
        // The tile's first output pixel; a row of the tile is q pixels on (under 2^31 bytes apart:
        // the host's check).
        unsigned char* tile_out = y + (((i64)o.img * p + o.oh0) * q + o.ow0) * k + n0;
        for (int piece = tid; piece < FC_TH * FC_TW * (FC_BN / 16); piece += FC_THREADS) {
            const int row = piece / (FC_BN / 16), col = (piece % (FC_BN / 16)) * 16;
            const int r = row / FC_TW, cl = row % FC_TW;
            if (o.oh0 + r >= p || o.ow0 + cl >= q || n0 + col >= k) continue;
            unsigned char* to = tile_out + (r * q + cl) * k + col;
            const unsigned char* from = out_tile + row * FC_OUT_PITCH + col;
            if (vector) {
                const uint4 piece = *reinterpret_cast<const uint4*>(from);
                *reinterpret_cast<uint4*>(to) = e.lookup ? looked_up16(e.lookup, n0 + col, piece) : piece;
            } else {
                for (int j = 0; j < 16 && n0 + col + j < k; ++j) to[j] = e.lookup ? looked_up(e.lookup, n0 + col + j, from[j]) : from[j];
            }
        }
        // The window and the tile are rewritten only after the next tile's first barrier, which
        // every thread reaches after its stores: no barrier here.
    }
}

// The epilogue's arguments are the INT8 convolution's (int8_conv.cu), the general ones unread.
extern "C" __global__ void __launch_bounds__(FC_THREADS, 4)
    int8_conv_few_channels(Window win, i64 xs_n, i64 xs_c, i64 xs_h, i64 xs_w, int words, const signed char* x, const signed char* wt, int taps,
                           const int* int_bias, const float* scale, i64 scale_len, const float* float_bias, i64 float_bias_len, float y_scale,
                           float y_zero, float lo, float hi, int relu, const void* residual, int residual_type, float residual_scale,
                           float residual_zero, const unsigned char* then, const unsigned char* lookup, const void* join,
                           const float* join_params, int out_type, void* y) {
    grid_dependency_wait();  // launched programmatically (Source::programmatic)
    const FewRequant e = {int_bias, scale, scale_len, y_zero, lo, hi, relu, then, lookup};
    few_channels(win, xs_n, xs_c, xs_h, xs_w, words != 0, x, wt, taps, e, (unsigned char*)y);
}

// The filter [k][c][r][s] (any strides, c <= 4) as [kp][taps][4] words: tap r·s_len + s's
// channels, zeros past k, c and r·s_len (one thread a word).
extern "C" __global__ void int8_few_channels_filter(i64 k, i64 c, i64 r_len, i64 s_len, i64 kp, i64 taps, i64 sk, i64 sc, i64 sr, i64 ss,
                                                    const signed char* w, unsigned* y) {
    grid_dependency_wait();  // launched programmatically (Source::programmatic)
    KILN_GRID_LOOP(i, kp * taps) {
        const i64 f = i / taps, tap = i % taps;
        unsigned word = 0;
        if (f < k && tap < r_len * s_len) {
            const signed char* px = w + f * sk + (tap / s_len) * sr + (tap % s_len) * ss;
            for (int cc = 0; cc < c; ++cc) word |= (unsigned)(unsigned char)px[cc * sc] << (8 * cc);
        }
        y[i] = word;
    }
}

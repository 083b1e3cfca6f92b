// INT8 2-D convolution as an implicit GEMM on tensor cores, with the requantizing epilogue of
// explicit quantization fused: int8 NHWC in, int8 / uint8 (or f32) NHWC out, no int32 sums in memory.
//
// The product is [pixels, r·s·c] · [k, r·s·c]ᵀ: row m of A is output pixel m's receptive field
// read straight from the NHWC input (zeros in the padding), B is the filter stored [k][r][s][c].
// A block of 8 warps owns 128 pixels × BN filters and walks r·s·c 64 at a time: both tiles
// arrive by cp.async into a ring of IC_STAGES shared buffers, three steps ahead of the one that
// feeds mma.sync m16n8k32 (s8 × s8 → s32) through ldmatrix. Channels are a multiple of 16 (the
// host pads them with int8_pad_channels below), so each 16-byte copy lies within one filter tap.
//
// The epilogue is quant_requantize's (typed.cu) operation for operation: the exact sum plus the
// int32 bias, rounded once to f32, times the channel's scale, plus a float bias, then the float
// output or the level (round half to even, ReLU at the zero point, saturation), then a second
// quantization where the layer has one (a table of levels, or a skip connection's join computed
// per byte as the levels leave: JoinFast below). kiln-cpu's integer layer is the oracle.
//
// On Hopper (compiled for sm_90a) the same kernel has a second main loop, `WG`: the tiles sit in
// shared memory as wgmma's 8-row × 16-byte core matrices and each warpgroup (4 warps) multiplies
// its 64 pixels by the block's BN filters with one wgmma m64nBNk32 per 32 of depth: no ldmatrix,
// and the tensor cores' full Hopper rate. Its accumulators are laid out as mma.sync's, so the
// epilogue is shared.
//
// The kernels are instantiated in three sources, compiled in parallel: int8_conv.cu (the levels
// epilogue's, and the channel padding and folding), int8_conv_general.cu (mma.sync's general
// epilogue) and int8_conv_wg_general.cu (wgmma's): the general epilogue's kernels took most of
// one source's NVRTC time (about 100 s of a machine's first run).
#pragma once
#include "common.cuh"
#include "mma.cuh"
#include "wgmma.cuh"

#define IC_BM 128
#define IC_BK 64             // int8 depth per stage
#define IC_LD (IC_BK + 16)   // 80-byte rows: the 8 rows one ldmatrix reads fall in different banks
#define IC_THREADS 256
#define IC_CHUNKS (IC_BK / 16)
#define IC_AHEAD 3           // steps whose copies are in flight while one feeds the MMAs
#define IC_STAGES 4          // mma.sync's ring: the steps ahead and the one computing
#define IC_WG_STAGES 5       // wgmma's: also the step whose MMAs still run while the next issue

// Output type codes: kiln-cuda's ops::typed::type_code.
#define IC_F32 0
#define IC_I8 4
#define IC_U8 8

// The epilogue's operands (the host's `quant::Epilogue` arguments, in this order).
struct Requant {
    const int* int_bias;
    const float* scale;
    i64 scale_len;
    const float* float_bias;
    i64 float_bias_len;
    float y_scale, y_zero, lo, hi;
    float y_inv;  // level_reciprocal(y_scale)
    int relu;
    const void* residual;  // in the output's NHWC order (residual_at)
    int residual_type;
    float residual_scale, residual_zero;
    int out_type;                // the levels' (IC_I8 / IC_U8) or IC_F32
    const unsigned char* then;  // a second quantization's table of levels (common.cuh), or NULL
    const unsigned char* lookup;  // the levels' per-channel table (common.cuh's looked_up), or NULL
    const void* join;            // a join's bytes (common.cuh's Join), or NULL
    const float* join_params;
};

// One output channel's epilogue operands, loaded once per thread.
struct Channel {
    float scale, float_bias;
    int int_bias;
};

__device__ __forceinline__ Channel channel(const Requant& e, int ch) {
    Channel c;
    c.scale = e.scale[e.scale_len == 1 ? 0 : ch];
    c.float_bias = e.float_bias ? e.float_bias[e.float_bias_len == 1 ? 0 : ch] : 0.0f;
    c.int_bias = e.int_bias ? e.int_bias[ch] : 0;
    return c;
}

// f32(acc + bias), rounded once, as the oracle's f64 sum converted. Below 2^22 in magnitude the
// sum added to the bit pattern of 1.5·2^23 (whose unit in the last place is 1) is that float plus
// the sum, exactly: no conversion, which issues at an eighth of the float rate.
__device__ __forceinline__ float sum_as_float(int acc, int bias) {
    const long long s = (long long)acc + bias, range = (long long)KILN_ROUNDING_RANGE;
    if (s > -range && s < range) return __fsub_rn(__int_as_float((int)s + KILN_ROUNDING_MAGIC_BITS), KILN_ROUNDING_MAGIC);
    return __ll2float_rn(s);
}

// The sum scaled, with the float bias and the residual at output element `at`: the float
// output before its ReLU.
__device__ __forceinline__ float scaled(const Requant& e, const Channel& c, int acc, i64 at) {
    float v = __fmul_rn(sum_as_float(acc, c.int_bias), c.scale);
    if (e.float_bias) v = __fadd_rn(v, c.float_bias);
    return e.residual ? __fadd_rn(v, residual_at(e.residual, e.residual_type, e.residual_scale, e.residual_zero, at)) : v;
}

// The requantized level's byte (int8 or uint8): round half to even, ReLU at the zero point,
// saturation (NaN goes to the low end, as the oracle's fmaxf sends it there too).
__device__ __forceinline__ unsigned char level_byte(const Requant& e, float v) {
    bool nan;
    int level = e.float_bias || e.residual ? rounded_ratio(v, e.y_scale, e.y_inv, nan) : round_half_even_clamped(v);
    if (e.relu) level = max(level, 0);
    level = min(max(level + (int)e.y_zero, (int)e.lo), (int)e.hi);
    return (unsigned char)level;
}

// A join (common.cuh) over a 16-byte row piece of the output tile: `levels` the first levels,
// `joins` the join's bytes, both as four words. Each byte becomes its f32 integer through the
// bits of 2^23 plus the byte (int8 bytes flipped to byte + 128 first) less an offset that holds
// the zero point, exactly; the sum is the layers' f32 Add. The quotient by the second scale is
// its product by RN(1/scale), within 2^-14 of the division's below 256 in magnitude (beyond,
// both saturate); the zero point is added in the same rounding (an FMA), the sum clamped to the
// second levels' bounds (ReLU's floor included, for a positive scale) and rounded by the
// rounding add, which leaves the level in the low byte. Where any of 16 such sums is within
// 2^-12 of a half-integer, or the scale has no usable reciprocal, each of the 16 is tested and
// the exact path (second_level) decides those near one.
//
// The `ratio` form skips the sum: with the scales' ratios ry = RN(y_scale / s), rv =
// RN(j_scale / s) (s the second scale, R = |ry| + |rv| ≤ 16), the level plus the zero point is
// approximated by fma(y, ry, fma(v, rv, zero)), two instructions for five. For |y|, |v| ≤ 255
// that is within 2^-24·(765R + 510) of the exact real (y·y_scale + v·j_scale) / s + zero, and
// the oracle's quotient within 2^-24·765R of it (four roundings of at most 2^-24 relative, each
// of a value below 255R + 255), so a value farther than `tie_edge` (a quarter more than both)
// from a half-integer rounds as the oracle's does, and one beyond the bounds saturates as it
// does. The exact path takes the others.
struct JoinFast {
    unsigned y_flip, j_flip;  // 0x80808080 for int8 bytes
    float y_off, y_scale, j_off, j_scale, inv, low, high, zero;
    float ry, rv, tie_edge;
    // The bits of 2^23 in a register the compiler cannot see through: as a constant it took the
    // byte permutes' one immediate, and each permute's selector then cost a move.
    unsigned exponent;
    bool fast, ratio;
};

__device__ __forceinline__ JoinFast join_fast(const Join& j, const Requant& e) {
    const bool y_signed = e.out_type == IC_I8, j_signed = j.type == 4;
    JoinFast f;
    f.y_flip = y_signed ? 0x80808080u : 0u;
    f.j_flip = j_signed ? 0x80808080u : 0u;
    f.y_off = 8388608.0f + (y_signed ? 128.0f : 0.0f) + e.y_zero;
    f.j_off = 8388608.0f + (j_signed ? 128.0f : 0.0f) + j.zero;
    f.y_scale = e.y_scale;
    f.j_scale = j.scale;
    f.inv = j.then_inv;
    f.low = j.relu ? fmaxf(j.then_lo, j.then_zero) : j.then_lo;
    f.high = j.then_hi;
    f.zero = j.then_zero;
    f.exponent = __float_as_uint(f.y_off) & 0xff800000u;
    f.fast = j.then_scale > 0.0f && j.then_inv == j.then_inv;
    f.ry = __fdiv_rn(e.y_scale, j.then_scale);
    f.rv = __fdiv_rn(j.scale, j.then_scale);
    const float r = fabsf(f.ry) + fabsf(f.rv);
    f.ratio = f.fast && r <= 16.0f;  // false for NaN and infinite ratios
    f.tie_edge = 0.5f - 1.25f * (1530.0f * fminf(r, 16.0f) + 510.0f) * 0x1p-24f;
    return f;
}

// The joined value u's quotient by the second scale plus the zero point, in one rounding
// (within 2^-16 of the sum below 512: the margin to a half-integer covers it), clamped to the
// bounds; and its distance from the integer the rounding add gives it.
__device__ __forceinline__ float joined_quotient(const JoinFast& f, float u) { return fminf(fmaxf(__fmaf_rn(u, f.inv, f.zero), f.low), f.high); }
__device__ __forceinline__ float off_integer(float c) { return __fsub_rn(c, __fsub_rn(__fadd_rn(c, KILN_ROUNDING_MAGIC), KILN_ROUNDING_MAGIC)); }

// Byte `sel` of the words `levels` and `joins` (flipped) as the integers y and v: level and
// join less their zero points, exactly.
__device__ __forceinline__ float2 joined_integers(const JoinFast& f, unsigned levels, unsigned joins, int sel) {
    return make_float2(__fsub_rn(__uint_as_float(__byte_perm(levels, f.exponent, 0x7540 | sel)), f.y_off),
                       __fsub_rn(__uint_as_float(__byte_perm(joins, f.exponent, 0x7540 | sel)), f.j_off));
}

// The ratio form's level plus zero point of byte `sel` (JoinFast), clamped to the bounds.
__device__ __forceinline__ float ratio_quotient(const JoinFast& f, unsigned levels, unsigned joins, int sel) {
    const float2 yv = joined_integers(f, levels, joins, sel);
    return fminf(fmaxf(__fmaf_rn(yv.x, f.ry, __fmaf_rn(yv.y, f.rv, f.zero)), f.low), f.high);
}

// The joined value u of byte `sel`, as the layers' f32 Add computes it.
__device__ __forceinline__ float joined_sum(const JoinFast& f, unsigned levels, unsigned joins, int sel) {
    const float2 yv = joined_integers(f, levels, joins, sel);
    return __fadd_rn(__fmul_rn(yv.x, f.y_scale), __fmul_rn(yv.y, f.j_scale));
}

// Byte `sel` of the words `levels` and `joins` (flipped): the joined value u and its second
// level by the fast path (the level itself in the low byte of the rounding add's bits); `off`,
// the quotient's distance from that level (the exact path decides within 2^-12 of a half).
__device__ __forceinline__ unsigned joined_fast(const JoinFast& f, unsigned levels, unsigned joins, int sel, float& u, float& off) {
    u = joined_sum(f, levels, joins, sel);
    const float c = joined_quotient(f, u);
    off = off_integer(c);
    return (unsigned)__float_as_int(__fadd_rn(c, KILN_ROUNDING_MAGIC));
}

// The exact path, out of line: ties are rare, and 16 inlined copies of a division kept the
// fast path's 16 independent chains from interleaving.
__device__ __noinline__ unsigned joined_exact(const Join& j, float u) { return second_level(j, u); }

// 16 bytes at once: every fast path first (independent, so they interleave), then the exact
// path for the ties. RATIO: the ratio form (JoinFast), which keeps no sums for the ties.
template <bool RATIO>
__device__ __forceinline__ uint4 joined16(const JoinFast& f, const Join& j, uint4 levels, uint4 joins) {
    const unsigned l[4] = {levels.x ^ f.y_flip, levels.y ^ f.y_flip, levels.z ^ f.y_flip, levels.w ^ f.y_flip};
    const unsigned v[4] = {joins.x ^ f.j_flip, joins.y ^ f.j_flip, joins.z ^ f.j_flip, joins.w ^ f.j_flip};
    unsigned out[4];
    float u[RATIO ? 1 : 16];
    // The 16 distances' largest, one compare for all (a tie is rare): each byte's own test only
    // where some byte may be one.
    float worst = 0.0f;
    const float edge = RATIO ? f.tie_edge : 0.5f - 0x1p-12f;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
        unsigned b[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            float off;
            if constexpr (RATIO) {
                const float c = ratio_quotient(f, l[w], v[w], i);
                off = off_integer(c);
                b[i] = (unsigned)__float_as_int(__fadd_rn(c, KILN_ROUNDING_MAGIC));
            } else {
                b[i] = joined_fast(f, l[w], v[w], i, u[4 * w + i], off);
            }
            worst = fmaxf(worst, fabsf(off));
        }
        // Packed as they come: four words live, not sixteen bytes (fewer spills at 80 registers).
        out[w] = packed_bytes(b[0], b[1], b[2], b[3]);
    }
    if (!(worst < edge) || !f.fast) {
        // Byte i of its word replaced by the exact path's level.
        const unsigned into[4] = {0x3214, 0x3240, 0x3410, 0x4210};
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            if constexpr (RATIO) {
                if (!(fabsf(off_integer(ratio_quotient(f, l[i / 4], v[i / 4], i % 4))) < edge))
                    out[i / 4] = __byte_perm(out[i / 4], joined_exact(j, joined_sum(f, l[i / 4], v[i / 4], i % 4)), into[i % 4]);
            } else if (!(fabsf(off_integer(joined_quotient(f, u[i]))) < edge) || !f.fast) {
                out[i / 4] = __byte_perm(out[i / 4], joined_exact(j, u[i]), into[i % 4]);
            }
        }
    }
    return make_uint4(out[0], out[1], out[2], out[3]);
}

// Whether a join's row pieces are staged and stored 16 bytes at a time: filters in sixteens and
// 16-byte aligned join and output.
__device__ __forceinline__ bool join_staged(const Requant& e, int k, const void* y) {
    return k % 16 == 0 && ((size_t)y % 16) == 0 && ((size_t)e.join % 16) == 0;
}

// The 16-byte row pieces of the output tile ([IC_BM][BN + 16]) each thread stores: PIECES a
// thread, piece `i` of thread `tid` numbered row-major (BN / 16 to a row). With wgmma a warp's
// accumulators hold 16 whole rows, so each warp stores those rows and its levels need only the
// warp's own sync before they leave (a block barrier there was time every warp waited for the
// slowest); with mma.sync a row's filters are spread over warps, and the block's pieces go to
// its threads in turn. The three walks over a thread's pieces (stage_join, store_joined, the
// plain store loop) each find the piece's row, column and output element themselves: one
// helper returning them made the joined layers 3% slower (benches/gpu/QUANT.md, session 37).
template <int BN> struct Pieces {
    static constexpr int PER_THREAD = IC_BM * (BN / 16) / IC_THREADS;
};
template <int BN, bool WG> __device__ __forceinline__ int piece_of(int tid, int i) {
    static_assert(IC_BM == 16 * (IC_THREADS / 32), "a warp's wgmma fragment: 16 rows");
    return WG ? (tid / 32) * BN + tid % 32 + 32 * i : tid + IC_THREADS * i;
}

// The block's join row pieces (the output tile's shape) into shared memory at `to`, each thread
// the pieces it later stores.
template <int BN, bool WG>
__device__ __forceinline__ void stage_join(const unsigned char* join, unsigned char* to, i64 m0, int n0, i64 pixels, int k, int tid) {
    const unsigned at = (unsigned)__cvta_generic_to_shared(to);
#pragma unroll 1
    for (int i = 0; i < Pieces<BN>::PER_THREAD; ++i) {
        const int piece = piece_of<BN, WG>(tid, i);
        const int row = piece / (BN / 16), col = (piece % (BN / 16)) * 16;
        const i64 m = m0 + row;
        const bool in = m < pixels && n0 + col < k;
        cp_async16_to(at + row * (BN + 16) + col, in ? join + m * k + n0 + col : join, in);
    }
    cp_async_commit();
}

template <bool B> struct Bool { static constexpr bool value = B; };

// The store loop of a layer with a join: each row piece of first levels (`tile`) joined with
// the staged join bytes after it (16 at a time), or byte by byte where they are not staged.
// Apart from the plain store loop, which a layer without a join runs as it did before (with
// the two loops in one, BERT-base's products were 2% slower).
template <int BN, bool WG>
__device__ __forceinline__ void store_joined(const Requant& e, const unsigned char* tile, unsigned char* out, bool staged, i64 m0, int n0, i64 pixels, int k, int tid,
                                             bool prefetched) {
    constexpr int PITCH = BN + 16;
    const unsigned char* join_tile = tile + IC_BM * PITCH;
    const Join join = join_of(e.join, e.join_params);
    const JoinFast fast = join_fast(join, e);
    // The join's group, committed before the next tile's IC_AHEAD steps (left in flight).
    if (prefetched)
        cp_async_wait<IC_AHEAD>();
    else
        cp_async_wait<0>();
    // The ratio form or not, decided once: each loop keeps only its own operands live.
    auto pieces = [&](auto ratio) {
#pragma unroll 1
        for (int i = 0; i < Pieces<BN>::PER_THREAD; ++i) {
            const int piece = piece_of<BN, WG>(tid, i);
            const int row = piece / (BN / 16), col = (piece % (BN / 16)) * 16;
            const i64 m = m0 + row, at = m * k + n0 + col;
            if (m >= pixels || n0 + col >= k) continue;
            if (staged) {
                const uint4 levels = *reinterpret_cast<const uint4*>(tile + row * PITCH + col);
                const uint4 joins = *reinterpret_cast<const uint4*>(join_tile + row * PITCH + col);
                *reinterpret_cast<uint4*>(out + at) = joined16<decltype(ratio)::value>(fast, join, levels, joins);
            } else {
                for (int j = 0; j < 16 && n0 + col + j < k; ++j) {
                    const unsigned char b = tile[row * PITCH + col + j];
                    const float level = e.out_type == IC_I8 ? (float)(signed char)b : (float)b;
                    out[at + j] = joined_level(join, level, e.y_scale, e.y_zero, at + j);
                }
            }
        }
    };
    if (fast.ratio)
        pieces(Bool<true>{});
    else
        pieces(Bool<false>{});
}

// Bytes of one pipeline stage: the A tile (IC_BM rows) then the B tile (BN rows). mma.sync's
// ldmatrix reads rows padded to IC_LD bytes; wgmma's core matrices need no padding.
template <int BN, bool WG> struct Stage {
    static constexpr int PITCH = WG ? IC_BK : IC_LD;
    static constexpr int A_BYTES = IC_BM * PITCH, BYTES = (IC_BM + BN) * PITCH;
};

// Where depth bytes [col, col + 16) of a tile's row live in its stage. wgmma's rows are IC_BK
// (64) bytes in its 64-byte swizzle: the 16-byte pieces of row r are permuted by (r / 2) % 4,
// so the 8 rows of a core matrix (and 8 threads copying one piece of 8 rows) hit every bank.
template <bool WG> __device__ __forceinline__ int tile_offset(int row, int col) {
    return WG ? row * IC_BK + (((col / 16) ^ ((row / 2) % 4)) * 16) : row * IC_LD + col;
}

// The alignment wgmma's 64-byte swizzle wants of a tile (its pattern repeats every 8 rows).
#define IC_WG_ALIGN 512

// `win` gives the sizes (NCHW names; the tensors are NHWC, the filter [k][r][s][c]). The block
// has min(STAGES, steps) stages of dynamic shared memory (the host's `shared_bytes`).
//
// LEVELS is the common case's epilogue, which the host picks where it is exact: levels out, no
// float bias, finite scales, and an int32 bias small enough to start the sums at (|bias| +
// 128·128·depth < 2^31, so the int32 sum is the exact one). Its per-element work is a
// conversion, a multiply, the rounding add and integer clamps; the general epilogue's branches
// and 64-bit sums cost three times the instructions, and a 1×1 layer is bound by them.
template <int BN, int WARPS_M, int WARPS_N, bool LEVELS, bool WG, bool POINTWISE>
__device__ __forceinline__ void int8_conv(const Window& win, const signed char* __restrict__ x, const signed char* __restrict__ wt,
                                          const Requant& e, void* __restrict__ y) {
    constexpr int WM = IC_BM / WARPS_M, WN = BN / WARPS_N, MT = WM / 16, NT = WN / 8;
    static_assert(WARPS_M * WARPS_N * 32 == IC_THREADS, "8 warps");
    static_assert(NT % 2 == 0, "B fragments load two n-tiles at a time");
    static_assert(!WG || (WARPS_M == 8 && WARPS_N == 1), "a warpgroup's fragment: 4 warps of 16 rows over all BN columns");
    typedef Stage<BN, WG> St;
    constexpr int A_CHUNKS = IC_BM * IC_CHUNKS / IC_THREADS, B_CHUNKS = BN * IC_CHUNKS / IC_THREADS;
    extern __shared__ __align__(16) signed char dynamic_smem[];
    // wgmma's tiles start on its swizzle's alignment (the host adds the slack).
    signed char* smem = dynamic_smem;
    if (WG) smem += (IC_WG_ALIGN - ((unsigned)__cvta_generic_to_shared(dynamic_smem) % IC_WG_ALIGN)) % IC_WG_ALIGN;

    const int n = (int)win.n, h = (int)win.h, w = (int)win.w, c = (int)win.c, k = (int)win.oc, r = (int)win.kh, s = (int)win.kw;
    const int p = (int)win.oh, q = (int)win.ow, stride_h = (int)win.sh, stride_w = (int)win.sw;
    const int pad_h = (int)win.ph, pad_w = (int)win.pw, dil_h = (int)win.dh, dil_w = (int)win.dw;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int warp_m = warp % WARPS_M, warp_n = warp / WARPS_M;
    const i64 pixels = (i64)n * p * q;
    const int depth = r * s * c;
    // Filter blocks vary fastest: the blocks reading one pixel tile run together and share it in L2.
    const unsigned filter_blocks = (k + BN - 1) / BN;
    const int n0 = (int)(blockIdx.x % filter_blocks) * BN;
    // A persistent launch (fewer blocks than tiles, in a multiple of filter_blocks: the host's
    // `launch`) keeps each block on its filter block and strides it over the pixel tiles, its
    // output tile in shared memory of its own: the next tile's first steps load while this
    // one's epilogue stores, where each block otherwise waited out its loads alone. POINTWISE
    // layers alone (short main loops, the memory-bound ones): in the others the state carried
    // across tiles cost registers the main loop needs.
    const bool persistent = POINTWISE && (i64)gridDim.x < (pixels + IC_BM - 1) / IC_BM * filter_blocks;
    const i64 tile_stride = (i64)(gridDim.x / filter_blocks) * IC_BM;
    i64 m0 = (i64)(blockIdx.x / filter_blocks) * IC_BM;

    // The second quantization's table of levels (and, for wgmma, the per-channel operands) read
    // into shared memory now: their loads wait out the main loop (the first __syncthreads
    // publishes them), and the epilogue's lookups of scattered bytes are not divergent global
    // loads. mma.sync's epilogue measured faster reading its channels straight from global memory.
    constexpr bool STAGED_CHANNELS = WG;
    __shared__ Channel channels[STAGED_CHANNELS ? BN : 1];
    __shared__ unsigned char then_levels[256];
    if (STAGED_CHANNELS)
        for (int i = tid; i < BN; i += IC_THREADS) channels[i] = channel(e, min(n0 + i, k - 1));
    if (e.then)
        for (int i = tid; i < 256; i += IC_THREADS) then_levels[i] = e.then[i];
    // Output channel `col` of the block's (in range: clamped to the last) epilogue operands.
    auto channel_at = [&](int col) { return STAGED_CHANNELS ? channels[col] : channel(e, min(n0 + col, k - 1)); };

    // This thread's copies: the same 16 channels of A_CHUNKS pixels and B_CHUNKS filters at
    // every step, so each pixel's origin is found once. For wgmma eight neighbouring threads
    // copy one core matrix (8 rows of one 16-byte column): 128 contiguous bytes, no bank conflict.
    const int col = (WG ? (tid / 8) % IC_CHUNKS : tid % IC_CHUNKS) * 16;
    auto row_of = [&](int i) { return WG ? tid % 8 + 8 * (tid / 32) + 64 * i : (tid + i * IC_THREADS) / IC_CHUNKS; };
    // Each A chunk's pixel: where its receptive field starts in x (the tap (0, 0), formed only
    // for pixels of the output), and that tap's input row and column for the padding test.
    // A POINTWISE layer (a 1×1 filter, unit strides, no padding, an output of the input's
    // size: most of a CNN's layers and every matrix product) reads input pixel m for output
    // pixel m: no division, no taps (its a_ih / a_iw are never read).
    const signed char* a_origin[A_CHUNKS];
    int a_ih[A_CHUNKS], a_iw[A_CHUNKS];
    bool a_in[A_CHUNKS];
    // The A chunks' pixels for the tile at pixel `tile_m0`.
    auto aim = [&](i64 tile_m0) {
#pragma unroll
        for (int i = 0; i < A_CHUNKS; ++i) {
            const i64 m = tile_m0 + row_of(i);
            const bool in = m < pixels;
            a_in[i] = in;
            if constexpr (POINTWISE) {
                a_origin[i] = in ? x + m * c : x;
                continue;
            }
            // p·q fits 32 bits (the host's check); m does where the output has under 2^31 pixels.
            const i64 img = !in ? 0 : pixels <= 0x7fffffff ? (i64)((unsigned)m / (unsigned)(p * q)) : m / ((i64)p * q);
            // Unsigned: the signed division's sign fix-ups were a tenth of a block's instructions.
            const unsigned pq = in ? (unsigned)(m - img * p * q) : 0;
            a_ih[i] = in ? (int)(pq / (unsigned)q) * stride_h - pad_h : -(1 << 30);
            a_iw[i] = (int)(pq % (unsigned)q) * stride_w - pad_w;
            a_origin[i] = in ? x + ((img * h + a_ih[i]) * w + a_iw[i]) * c : x;
        }
    };
    // Each B chunk's filter row, from depth 0; a row past the last filter is never read.
    const signed char* b_origin[B_CHUNKS];
    bool b_in[B_CHUNKS];
#pragma unroll
    for (int j = 0; j < B_CHUNKS; ++j) {
        b_in[j] = n0 + row_of(j) < k;
        b_origin[j] = wt + (i64)(b_in[j] ? n0 + row_of(j) : 0) * depth;
    }
    // The chunks' places in a stage, as shared-space addresses.
    const unsigned stage0 = (unsigned)__cvta_generic_to_shared(smem);
    unsigned a_to[A_CHUNKS], b_to[B_CHUNKS];
#pragma unroll
    for (int i = 0; i < A_CHUNKS; ++i) a_to[i] = tile_offset<WG>(row_of(i), col);
#pragma unroll
    for (int j = 0; j < B_CHUNKS; ++j) b_to[j] = St::A_BYTES + tile_offset<WG>(row_of(j), col);

    // Where this thread's column is in the filter at the next step to load: depth index kg,
    // channel cc of tap (tr, ts). Steps load in order, so each advances IC_BK without dividing.
    int kg, cc, tr, ts;
    auto normalize = [&]() {
        while (cc >= c) {
            cc -= c;
            if (++ts == s) {
                ts = 0;
                ++tr;
            }
        }
    };
    // Per step, one offset from every chunk's origin (the tap and channel), and two additions
    // and an unsigned compare per chunk for the padding: the index arithmetic, not the MMAs,
    // was most of a step's instructions.
    auto load = [&](int stage) {
        const unsigned at = stage0 + stage * St::BYTES;
        const bool k_in = kg < depth;
        if constexpr (POINTWISE) {
            // Depth is the channels: one offset for every chunk, kept inside the rows where the
            // last step's chunks past the depth copy nothing.
            const int from = min(kg, depth - 16);
#pragma unroll
            for (int i = 0; i < A_CHUNKS; ++i) cp_async16_to(at + a_to[i], a_origin[i] + from, k_in && a_in[i]);
#pragma unroll
            for (int j = 0; j < B_CHUNKS; ++j) cp_async16_to(at + b_to[j], b_origin[j] + from, k_in && b_in[j]);
            kg += IC_BK;
            return;
        }
        const int ih_off = tr * dil_h, iw_off = ts * dil_w;
        const i64 tap = ((i64)ih_off * w + iw_off) * c + cc;
#pragma unroll
        for (int i = 0; i < A_CHUNKS; ++i) {
            const bool valid = k_in && (unsigned)(a_ih[i] + ih_off) < (unsigned)h && (unsigned)(a_iw[i] + iw_off) < (unsigned)w;
            cp_async16_to(at + a_to[i], valid ? a_origin[i] + tap : x, valid);
        }
#pragma unroll
        for (int j = 0; j < B_CHUNKS; ++j) {
            const bool valid = k_in && b_in[j];
            cp_async16_to(at + b_to[j], valid ? b_origin[j] + kg : wt, valid);
        }
        kg += IC_BK;
        cc += IC_BK;
        normalize();
    };

    // Accumulator (mt, nt): elements 0, 1 at row lane/4, channels 2·(lane%4) + {0, 1}; 2, 3 eight
    // rows down. mma.sync's LEVELS sums start at the channel's int32 bias; wgmma's start at 0
    // and the epilogue adds it (ptxas serializes wgmma pipelines over accumulators set by loads).
    constexpr bool BIAS_FIRST = LEVELS && !WG;
    int acc[MT][NT][4];
    auto start_sums = [&]() {
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const int ch = n0 + warp_n * WN + j * 8 + (lane % 4) * 2;
            const int b0 = BIAS_FIRST && e.int_bias ? e.int_bias[min(ch, k - 1)] : 0;
            const int b1 = BIAS_FIRST && e.int_bias ? e.int_bias[min(ch + 1, k - 1)] : 0;
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                acc[i][j][0] = acc[i][j][2] = b0;
                acc[i][j][1] = acc[i][j][3] = b1;
            }
        }
    };

    // Step t lives in stage t % STAGES; with fewer steps than stages only the first `steps`
    // stages exist. One group is committed per step slot (empty past the last), so waiting for
    // all but IC_AHEAD - 1 groups always means "step t has arrived". The load at step t fills
    // step t + IC_AHEAD's stage, last read by step t + IC_AHEAD - STAGES: t − 1 for mma.sync,
    // finished by every warp at the barrier; t − 2 for wgmma, which each warpgroup waited for
    // at step t − 1 while step t − 1's MMAs were left running.
    constexpr int STAGES = WG ? IC_WG_STAGES : IC_STAGES;
    const int steps = (depth + IC_BK - 1) / IC_BK;
    // A tile's first IC_AHEAD steps (one group each), from stage 0: every stage is free.
    auto start_tile = [&](i64 tile_m0) {
        aim(tile_m0);
        kg = cc = col;
        tr = ts = 0;
        normalize();
#pragma unroll
        for (int t = 0; t < IC_AHEAD; ++t) {
            if (t < steps) load(t);
            cp_async_commit();
        }
    };
    start_tile(m0);
    // The stages read and written, counted round the ring (a division per step was a tenth of
    // a step's instructions; write_stage is always (read_stage + IC_AHEAD) % STAGES). wgmma's
    // descriptors are stage 0's plus the stage's offset >> 4: shared addresses stay below
    // 2^18, so the offset never carries out of the address field.
    const unsigned long long a_desc0 = WG ? wgmma_descriptor_sw64(smem + (warp / 4) * 64 * IC_BK, IC_BK * 8) : 0;
    const unsigned long long b_desc0 = WG ? wgmma_descriptor_sw64(smem + St::A_BYTES, IC_BK * 8) : 0;
#pragma unroll 1
    for (;; m0 += tile_stride) {
        start_sums();
        int read_stage = 0, write_stage = IC_AHEAD % STAGES;
#pragma unroll 1
        for (int step = 0; step < steps; ++step) {
            cp_async_wait<IC_AHEAD - 1>();
            // wgmma reads shared memory through the async proxy: this thread's copies must be
            // visible to it, not just to the other threads.
            if (WG) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
            // Also: every warp is done with the stage the load below overwrites.
            __syncthreads();
            if (step + IC_AHEAD < steps) load(write_stage);
            write_stage = write_stage + 1 == STAGES ? 0 : write_stage + 1;
            cp_async_commit();
            const signed char* as = smem + read_stage * St::BYTES;
            const signed char* bs = as + St::A_BYTES;
            if constexpr (WG) {
                // Warpgroup warp / 4 owns pixels [64 · (warp / 4), + 64). The second 32 of depth starts
                // 32 bytes into each row, before the swizzle (which the hardware applies).
                const unsigned stage_offset = (unsigned)(read_stage * St::BYTES) >> 4;
                asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
                for (int ks = 0; ks < IC_BK; ks += 32) wgmma_s8<BN>(&acc[0][0][0], a_desc0 + stage_offset + ks / 16, b_desc0 + stage_offset + ks / 16);
                asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
                // The previous step's MMAs are done (this step's run on): its stage is free.
                asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
            } else {
#pragma unroll
                for (int ks = 0; ks < IC_BK; ks += 32) {
                    unsigned af[MT][4], bf[NT][2];
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt)
                        ldmatrix_x4(as + (warp_m * WM + mt * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * IC_LD + ks + (lane / 16) * 16, af[mt]);
#pragma unroll
                    for (int nt = 0; nt < NT; nt += 2) {
                        unsigned b[4];
                        ldmatrix_x4(bs + (warp_n * WN + nt * 8 + (lane % 8) + (lane / 16) * 8) * IC_LD + ks + ((lane / 8) % 2) * 16, b);
                        bf[nt][0] = b[0];
                        bf[nt][1] = b[1];
                        bf[nt + 1][0] = b[2];
                        bf[nt + 1][1] = b[3];
                    }
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                        for (int nt = 0; nt < NT; ++nt) mma_s8(acc[mt][nt], af[mt], bf[nt][0], bf[nt][1]);
                }
            }
            read_stage = read_stage + 1 == STAGES ? 0 : read_stage + 1;
        }
        if constexpr (WG) {
            asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
            wgmma_fence_operands<MT * NT * 4>(&acc[0][0][0]);
        }
        cp_async_wait<0>();
        __syncthreads();  // the stages are free: for the output tile, or the next tile's steps

        typedef unsigned char OutRow[BN + 16];
        // The host gives the block room for it (`shared_bytes`): over the stages (where they are
        // smaller) or, when persistent, after them; the join's bytes after it where the layer has
        // a join.
        OutRow* tile = reinterpret_cast<OutRow*>(persistent ? smem + min(STAGES, steps) * St::BYTES : smem);
        // A join's bytes of this thread's row pieces, copied in beside the tile while the levels
        // are computed (committed before the next tile's steps, so waiting for it leaves those).
        if (e.join && join_staged(e, k, y)) stage_join<BN, WG>((const unsigned char*)e.join, (unsigned char*)(tile + IC_BM), m0, n0, pixels, k, tid);
        // The next tile's first steps start loading once the sums are spent (the pixels' origins
        // and the sums are not live at once: more registers spilled).
        const bool prefetched = persistent && m0 + tile_stride < pixels;
        if (!LEVELS && e.out_type == IC_F32) {
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const int col = warp_n * WN + nt * 8 + (lane % 4) * 2, ch = n0 + col;
                const Channel c[2] = {channel_at(col), channel_at(col + 1)};
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int half = 0; half < 2; ++half) {
                        const i64 m = m0 + warp_m * WM + mt * 16 + lane / 4 + half * 8;
#pragma unroll
                        for (int j = 0; j < 2; ++j) {
                            if (m >= pixels || ch + j >= k) continue;
                            const float v = scaled(e, c[j], acc[mt][nt][half * 2 + j], m * k + ch + j);
                            ((float*)y)[m * k + ch + j] = e.relu ? fmaxf(v, 0.0f) : v;
                        }
                    }
            }
            if (!prefetched) return;
            start_tile(m0 + tile_stride);
            continue;
        }
        // Levels: the block's [128 pixels][BN filters] bytes gather in shared memory (the operand
        // tiles are free), then leave in 16-byte row pieces: scattered byte stores were most of the
        // time of a convolution with few input channels. LEVELS: rint(v) + zero within [low, hi],
        // where the ReLU's floor (level 0, the zero point) joins the saturation's.
        const int zero = (int)e.y_zero, high = (int)e.hi, low = e.relu ? max((int)e.lo, zero) : (int)e.lo;
        const float low_f = (float)(low - zero), high_f = (float)(high - zero);
        // `at`: the output element (in range: the residual is read there).
        // The level's byte, then its second level where the layer has one.
        auto level = [&](const Channel& c, int acc, i64 at) -> unsigned char {
            unsigned char b;
            if (!LEVELS) {
                b = level_byte(e, scaled(e, c, acc, at));
            } else {
                b = level_of_sum(BIAS_FIRST ? acc : acc + c.int_bias, c.scale, low_f, high_f, zero);  // exact: the host's bound
            }
            return e.then ? then_levels[b] : b;
        };
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const int col = warp_n * WN + nt * 8 + (lane % 4) * 2, ch = n0 + col;
            const Channel c[2] = {channel_at(col), channel_at(col + 1)};
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    const int row = warp_m * WM + mt * 16 + lane / 4 + half * 8;
                    // Rows and filters past the output are computed but never stored: their
                    // residual reads go to element 0.
                    const i64 m = m0 + row, at = m < pixels ? m * k + ch : 0;
                    const i64 at1 = m < pixels && ch + 1 < k ? at + 1 : 0;
                    *reinterpret_cast<uchar2*>(&tile[row][col]) =
                        make_uchar2(level(c[0], acc[mt][nt][half * 2], ch < k ? at : 0), level(c[1], acc[mt][nt][half * 2 + 1], at1));
                }
        }
        if (prefetched) start_tile(m0 + tile_stride);
        // A lookup (kiln::QuantizedParams::lookup): the block's filters' rows of the table (256
        // bytes each) are staged beside the tile (the host launches such layers one tile a block,
        // with room for them), then the tile's levels are replaced by their entries, four bytes a
        // step. Scattered global lookups measured slower than the island they replace, and lookups
        // in the store loop below took registers the persistent kernels' next tile needs.
        if (e.lookup) {
            unsigned char* lookup_rows = reinterpret_cast<unsigned char*>(tile + IC_BM);
            for (int i = tid; i < min(BN, k - n0) * 16; i += IC_THREADS)
                reinterpret_cast<uint4*>(lookup_rows)[i] = __ldg(reinterpret_cast<const uint4*>(e.lookup + (i64)n0 * 256) + i);
            __syncthreads();
#pragma unroll 1
            for (int i = tid; i < IC_BM * BN / 4; i += IC_THREADS) {
                const int row = i / (BN / 4), col = (i % (BN / 4)) * 4;
                uchar4 b = *reinterpret_cast<const uchar4*>(&tile[row][col]);
                b = make_uchar4(lookup_rows[col * 256 + b.x], lookup_rows[(col + 1) * 256 + b.y], lookup_rows[(col + 2) * 256 + b.z], lookup_rows[(col + 3) * 256 + b.w]);
                *reinterpret_cast<uchar4*>(&tile[row][col]) = b;
            }
        }
        // Each warp stores the rows it computed (piece_of) with wgmma; a lookup's are every warp's.
        if (WG && !e.lookup)
            __syncwarp();
        else
            __syncthreads();
        unsigned char* out = (unsigned char*)y;
        const bool vector = k % 16 == 0 && ((size_t)out % 16) == 0;
        if (e.join) {
            store_joined<BN, WG>(e, (const unsigned char*)tile, out, join_staged(e, k, y), m0, n0, pixels, k, tid, prefetched);
            if (!prefetched) return;
            continue;
        }
#pragma unroll 1
        for (int i = 0; i < Pieces<BN>::PER_THREAD; ++i) {
            const int piece = piece_of<BN, WG>(tid, i);
            const int row = piece / (BN / 16), col = (piece % (BN / 16)) * 16;
            const i64 m = m0 + row, at = m * k + n0 + col;
            if (m >= pixels || n0 + col >= k) continue;
            if (vector) {
                *reinterpret_cast<uint4*>(out + at) = *reinterpret_cast<const uint4*>(&tile[row][col]);
            } else {
                for (int j = 0; j < 16 && n0 + col + j < k; ++j) out[at + j] = tile[row][col + j];
            }
        }
        if (!prefetched) return;
    }
}

#define INT8_CONV(NAME, BN, WARPS_M, WARPS_N, LEVELS, WG)                                                                    \
    extern "C" __global__ void __launch_bounds__(IC_THREADS, 128 / BN + 1)                                                  \
        NAME(Window win, const signed char* x, const signed char* wt, const int* int_bias, const float* scale,             \
             i64 scale_len, const float* float_bias, i64 float_bias_len, float y_scale, float y_zero, float lo, float hi,   \
             int relu, const void* residual, int residual_type, float residual_scale, float residual_zero,                 \
             const unsigned char* then, const unsigned char* lookup, const void* join, const float* join_params,           \
             int out_type, void* y) {                                                                                     \
        grid_dependency_wait(); /* launched programmatically (Source::programmatic) */                                       \
        const Requant e = {int_bias,  scale,         scale_len,      float_bias,     float_bias_len,                        \
                           y_scale,   y_zero,        lo,             hi,             level_reciprocal(y_scale), relu,       \
                           residual,  residual_type, residual_scale, residual_zero,  out_type, then, lookup, join,         \
                           join_params};                                                                            \
        const bool pointwise = win.kh == 1 && win.kw == 1 && win.sh == 1 && win.sw == 1 && win.ph == 0 && win.pw == 0 &&     \
                               win.oh == win.h && win.ow == win.w; /* no trailing padding either */                          \
        /* POINTWISE is instantiated for the LEVELS kernels alone (LEVELS stands for true in the first */                  \
        /* call): a second instance of the general epilogue's kernels doubled NVRTC's compile time. */                     \
        if (LEVELS && pointwise)                                                                                             \
            int8_conv<BN, WARPS_M, WARPS_N, LEVELS, WG, LEVELS>(win, x, wt, e, y);                                           \
        else                                                                                                                 \
            int8_conv<BN, WARPS_M, WARPS_N, LEVELS, WG, false>(win, x, wt, e, y);                                            \
    }

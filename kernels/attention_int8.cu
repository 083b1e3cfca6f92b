// Attention in a Q/DQ network on the integer tensor cores: Q, K and V given as int8 levels about
// zero, the probabilities quantized to an int8 grid about zero, so Q·Kᵀ and P·V are exact int32
// sums (mma.sync m16n8k32, s8 × s8). Each score then takes the steps of the unfused path
// (kiln-cuda compute::attention): the product times the grids' scales rounded to T, its level on
// the product's (or scores') grid, the value after the scores' grids, the mask, the exponential
// against the row's maximum, the probability (times the reciprocal of the row's sum) rounded to
// T, and its level; the output is each integer sum times the probabilities' and V's scales,
// rounded to T, and its level where the output's QuantizeLinear is folded in (the layer then
// writes levels, a quarter of f32's bytes). A level is looked up by the T value's bits in a
// table the host fills with the cpu oracle's quotient
// (kiln::plan::requantization::levels_of_16bit_floats), so each is the oracle's level of that
// value, ties included. Where this differs from the unfused graph is
// rounding: its products read Q, K, V and P dequantized to T, and its exponential is expf where
// this one's is MUFU.EX2 (as flash attention's), so a probability on a level's edge may flip.
//
// One block of four warps takes 64 query rows of one (outer, head) pair, each warp 16 of them.
// Up to 128 keys, every score stays in registers; beyond, two passes over the keys (the first
// finds each row's maximum and sum, the second the probabilities, which need both, and P·V).
// Q and K arrive by asynchronous copies; V passes through registers, transposed: P·V's B operand
// wants the keys of one column of V contiguous. Its keys are stored in the order a thread's
// score accumulators hold them (a thread's P fragment takes keys 2t, 2t+1, 8+2t and 9+2t of
// each 16, t its lane in the quad), so probabilities go from accumulators to A fragments with
// no shuffle.
//
// The host (kiln-cuda ops/flash.rs) passes the strides as for flash_attention (attention.cuh),
// in elements, which for levels are bytes, and checked every row of Q, K and V 16-byte aligned.
#include "attention.cuh"

#define IA_PITCH 80  // bytes of a shared row of 64 levels: the 8 rows ldmatrix reads in distinct banks
#define IA_BLOCKS 4  // blocks a multiprocessor keeps: 128 registers a thread, 45 KB of shared memory a block

// `rows` rows of `cols` levels (row stride `ld` bytes; `cols` a multiple of 16) into a 64-row
// tile by asynchronous 16-byte copies, zero beyond them.
__device__ __forceinline__ void load_levels(unsigned char (*tile)[IA_PITCH], const signed char* src, i64 ld, i64 rows, int cols) {
#pragma unroll 1
    for (int i = threadIdx.x; i < FA_BK * (FA_D / 16); i += FA_THREADS) {
        const int r = i / (FA_D / 16), c = (i % (FA_D / 16)) * 16;
        const bool in = r < rows && c < cols;
        cp_async16(&tile[r][c], in ? src + r * ld + c : src, in);
    }
}

// The byte offset in row `column` of `vt` of the 16-byte piece `piece` of its positions: the
// pieces swizzled by bits 3 and 4 of the column. Unswizzled, a warp's transposing stores (16
// columns 4 apart, one piece) met in 2 of each 16 banks (8-way conflicts: the pitch is 20 words, so
// rows 4 apart are 80 words apart); swizzled, 2-way, and ldmatrix's 8 consecutive rows still read
// distinct banks.
__device__ __forceinline__ int vt_piece(int column, int piece) {
    return 16 * (piece ^ (((column >> 4) & 1) | (((column >> 3) & 1) << 1)));
}

// V's keys from `src` (`rows` of them, `cols` levels each, row stride `ld` bytes) into TILES
// tiles of FA_BK keys, `vt[i]` as [column][key position], the position of key 16G + 8h + 2t + e
// of its tile being 16G + 4t + 2h + e (zero beyond them; piece G of a row at vt_piece): a thread
// reads four keys' words of 4 columns and stores, per column, the word of those keys' levels (a
// 4 × 4 byte transpose). Every word is read before the first is transposed, so the tiles' reads
// wait out one global latency, not one each.
template <int TILES>
__device__ __forceinline__ void load_values_transposed(unsigned char (*vt)[FA_D][IA_PITCH], const signed char* src, i64 ld, i64 rows, int cols) {
    constexpr int UNITS = FA_BK * (FA_D / 4) / 4 / FA_THREADS;  // a thread's 4 × 4 transposes a tile
    static_assert(UNITS * FA_THREADS == FA_BK * (FA_D / 4) / 4, "whole transposes a thread");
    // A thread's transpose n: 4 columns from 4c, keys of lane t in group G of 16.
    const auto unit = [](int n) -> int { return threadIdx.x + n * FA_THREADS; };
    const auto column = [&](int n) { return unit(n) % (FA_D / 4); };
    const auto lane = [&](int n) { return (unit(n) / (FA_D / 4)) % 4; };
    const auto group = [&](int n) { return unit(n) / (FA_D / 4) / 4; };
    unsigned w[TILES][UNITS][4];
#pragma unroll
    for (int i = 0; i < TILES; ++i)
#pragma unroll
        for (int n = 0; n < UNITS; ++n) {
            const int c = column(n), t = lane(n);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int key = i * FA_BK + group(n) * 16 + (e >> 1) * 8 + 2 * t + (e & 1);
                w[i][n][e] = key < rows && c * 4 < cols ? *reinterpret_cast<const unsigned*>(src + key * ld + c * 4) : 0u;
            }
        }
#pragma unroll
    for (int i = 0; i < TILES; ++i)
#pragma unroll
        for (int n = 0; n < UNITS; ++n) {
            const int c = column(n), t = lane(n);
            const unsigned* x = w[i][n];
            const unsigned lo01 = __byte_perm(x[0], x[1], 0x5140), hi01 = __byte_perm(x[0], x[1], 0x7362);
            const unsigned lo23 = __byte_perm(x[2], x[3], 0x5140), hi23 = __byte_perm(x[2], x[3], 0x7362);
            // Columns 4c to 4c + 3 share bits 3 and 4, so their piece's offset too.
            const int pos = vt_piece(c * 4, group(n)) + 4 * t;
            *reinterpret_cast<unsigned*>(&vt[i][c * 4][pos]) = __byte_perm(lo01, lo23, 0x5410);
            *reinterpret_cast<unsigned*>(&vt[i][c * 4 + 1][pos]) = __byte_perm(lo01, lo23, 0x7632);
            *reinterpret_cast<unsigned*>(&vt[i][c * 4 + 2][pos]) = __byte_perm(hi01, hi23, 0x5410);
            *reinterpret_cast<unsigned*>(&vt[i][c * 4 + 3][pos]) = __byte_perm(hi01, hi23, 0x7632);
        }
}

// This warp's 16 rows of Q·Kᵀ against the 64 keys of `kt` (8 key tiles of the accumulator), Q
// as A fragments of 32 levels of the head dim each.
__device__ __forceinline__ void qk_int8(int (*acc)[4], const unsigned (*qf)[4], unsigned char (*kt)[IA_PITCH]) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int j = 0; j < FA_BK / 8; ++j) {
        unsigned b[4];
        ldmatrix_x4(&kt[j * 8 + (lane % 8)][(lane / 8) * 16], b);
        acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0;
        mma_s8(acc[j], qf[0], b[0], b[1]);
        mma_s8(acc[j], qf[1], b[2], b[3]);
    }
}

template <typename T> __device__ __forceinline__ float from_bits(unsigned short bits);
template <> __device__ __forceinline__ float from_bits<__half>(unsigned short bits) { return __half2float(__ushort_as_half(bits)); }
template <> __device__ __forceinline__ float from_bits<__nv_bfloat16>(unsigned short bits) { return __bfloat162float(__ushort_as_bfloat16(bits)); }

// 2^x (MUFU.EX2): exp(x − m) as ex2(x·log2 e − m·log2 e), as flash attention takes it.
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// The scores of 64 keys from their integer sums `acc`, as the unfused path feeds its softmax:
// each sum times `factor` (the grids' scales and the product's scale) rounded to T, its first
// grid's level looked up by the T value's bits in `first` (level − lowest level, by the host's
// exact quantization), the value after every grid from `values`; then the mask, and -inf for
// keys at or beyond `keys`. Without a grid (GRID false: `first` null), the T value itself.
template <typename T, bool ROW_MASK, bool GRID>
__device__ __forceinline__ void scores_of_sums(float (*s)[4], const int (*acc)[4], T (*mt)[FA_LD], int keys, float factor, bool has_mask,
                                               const unsigned char* first, const float* values) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
#pragma unroll
    for (int j = 0; j < FA_BK / 8; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const unsigned bits = Mma<T>::pack((float)acc[j][2 * h] * factor, (float)acc[j][2 * h + 1] * factor);
            float x[2];
            if (GRID) {
                x[0] = values[__ldg(first + (bits & 0xffffu))];
                x[1] = values[__ldg(first + (bits >> 16))];
            } else {
                x[0] = from_bits<T>((unsigned short)(bits & 0xffffu));
                x[1] = from_bits<T>((unsigned short)(bits >> 16));
            }
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int col = j * 8 + 2 * t4 + e;
                if (ROW_MASK) {
                    s[j][2 * h + e] = x[e] + to_f(mt[0][col]);  // the row: the mask's entry, -inf past the keys
                } else {
                    if (has_mask) x[e] += to_f(mt[warp * 16 + g + h * 8][col]);
                    s[j][2 * h + e] = col < keys ? x[e] : -INFINITY;
                }
            }
        }
    }
}

// exp(s − the row's maximum) for rows g and g + 8, in place (`ml`: the maxima times log2 e),
// added to `sum`.
__device__ __forceinline__ void exponentials(float (*s)[4], const float* ml, float* sum) {
    const float log2e = 1.4426950408889634f;
#pragma unroll
    for (int j = 0; j < FA_BK / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            s[j][e] = ex2(fmaf(s[j][e], log2e, -ml[e / 2]));
            sum[e / 2] += s[j][e];
        }
    }
}

// The probabilities' levels of 64 keys from their exponentials `ex` (rows g and g + 8 of the
// warp's 16) as the A fragments of P·V's two steps of 32 keys: ex · inv rounded to T, its level
// looked up by its bits in `levels` (a NaN, a fully masked row's, is level 0 as a zero is).
template <typename T>
__device__ __forceinline__ void probability_levels(unsigned (*pf)[4], const float (*ex)[4], const float* inv, const unsigned char* levels) {
    unsigned level[FA_BK / 8][4];
#pragma unroll
    for (int j = 0; j < FA_BK / 8; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const unsigned bits = Mma<T>::pack(ex[j][2 * h] * inv[h], ex[j][2 * h + 1] * inv[h]);
            level[j][2 * h] = __ldg(levels + (bits & 0xffffu));
            level[j][2 * h + 1] = __ldg(levels + (bits >> 16));
        }
    }
    // Step c takes the key tiles 4c to 4c + 3: words 0 and 1 (rows g, g + 8) the first two,
    // words 2 and 3 the last two, each a thread's four keys in load_values_transposed's order.
#pragma unroll
    for (int c = 0; c < 2; ++c) {
#pragma unroll
        for (int w = 0; w < 4; ++w) {
            const int j = 4 * c + (w / 2) * 2, r = (w % 2) * 2;
            pf[c][w] = packed_bytes(level[j][r], level[j][r + 1], level[j + 1][r], level[j + 1][r + 1]);
        }
    }
}

// o += P·V over 64 keys: P as the A fragments of two steps of 32 key positions, V's columns
// from `vt` ([column][position]), 16 columns an ldmatrix.
__device__ __forceinline__ void pv_int8(int (*o)[4], const unsigned (*pf)[4], unsigned char (*vt)[IA_PITCH]) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int c = 0; c < 2; ++c) {
#pragma unroll
        for (int n = 0; n < FA_D / 16; ++n) {
            unsigned b[4];
            const int column = n * 16 + (lane % 8) + (lane / 16) * 8;
            ldmatrix_x4(&vt[column][vt_piece(column, c * 2 + (lane / 8) % 2)], b);
            mma_s8(o[2 * n], pf[c], b[0], b[1]);
            mma_s8(o[2 * n + 1], pf[c], b[2], b[3]);
        }
    }
}

// The grids' tables: `first` (the product's grid, else the scores'; null for neither) gives a
// T value's level − lowest level, `values` (shared, built per block) that level's value after
// every grid, `probs` a probability's int8 level.
struct IntegerGrids {
    const unsigned char* first;
    const unsigned char* probs;
    float product_factor, output_factor;
    // The output's level byte of every T value by its bits, where a QuantizeLinear of the output
    // is folded in (the layer then writes levels); null: the layer writes T.
    const unsigned char* out_levels;
};

// The output's levels (`table`: IntegerGrids::out_levels): each value rounded to T as the
// unfused graph stored it (as store_output rounds it), then its level looked up by its bits.
// Every lookup is issued before the first store: a store between them (the table and the output
// may alias, for all the compiler knows) made each wait for the previous one's latency.
template <typename T>
__device__ __forceinline__ void store_output_levels(unsigned char* ob, const float (*acc)[4], float scale, const i64* qi, i64 sq, int dv, i64 ors,
                                                    const unsigned char* __restrict__ table, bool vector) {
    const int t4 = threadIdx.x % 4;
    unsigned words[FA_D / 8][2];
#pragma unroll
    for (int j = 0; j < FA_D / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const unsigned bits = Mma<T>::pack(acc[j][2 * h] * scale, acc[j][2 * h + 1] * scale);
            words[j][h] = __ldg(table + (bits & 0xFFFFu)) | (unsigned)__ldg(table + (bits >> 16)) << 8;
        }
#pragma unroll
    for (int j = 0; j < FA_D / 8; ++j) {
        const int col = j * 8 + 2 * t4;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            if (qi[h] >= sq || col >= dv) continue;
            unsigned char* dst = ob + qi[h] * ors + col;
            if (vector) {
                *reinterpret_cast<unsigned short*>(dst) = (unsigned short)words[j][h];
            } else {
                dst[0] = (unsigned char)words[j][h];
                if (col + 1 < dv) dst[1] = (unsigned char)(words[j][h] >> 8);
            }
        }
    }
}

// LONG: more than 128 keys, in two passes; else every score in registers. LEVELS_OUT: the
// kernel writes the output's levels (grids.out_levels), instantiated apart so the float
// kernels keep their registers (the two-pass one is at the 128 limit, and the levels' store
// made it spill 32 bytes in its key loops). ROW_MASK: no mask, or one mask row for every query
// (the host's row stride 0), kept as one row a key tile, not FA_BQ copies of it.
template <typename T, bool LONG, bool LEVELS_OUT, bool ROW_MASK>
__device__ void attention_int8(i64 sq, i64 sk, int d, int dv, i64 heads, i64 q_tiles, const Layout& st, int flags, const IntegerGrids& grids,
                               const SoftmaxLevels& levels, const signed char* q, const signed char* k, const signed char* v, const T* mask,
                               void* o) {
    grid_dependency_wait();  // launched programmatically (Source::programmatic)
    __shared__ __align__(16) unsigned char qs[FA_BQ][IA_PITCH];
    __shared__ __align__(16) unsigned char ks[2][FA_BK][IA_PITCH];
    __shared__ __align__(16) unsigned char vt[2][FA_D][IA_PITCH];
    __shared__ __align__(16) T ms[2][ROW_MASK ? 1 : FA_BQ][FA_LD];
    __shared__ float score_table[256], prob_table[256];
    level_tables<T>(levels, score_table, prob_table);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
    const i64 tile = blockIdx.x % q_tiles, bh = blockIdx.x / q_tiles;
    const i64 outer = bh / heads, head = bh % heads, q0 = tile * FA_BQ;
    const signed char* qb = q + outer * st.stride[0][0] + head * st.stride[0][1];
    const signed char* kb = k + outer * st.stride[0][2] + head * st.stride[0][3];
    const signed char* vb = v + outer * st.stride[0][4] + head * st.stride[0][5];
    // The output's element offset (T values, or level bytes where grids.out_levels is set).
    const i64 o_at = outer * st.stride[0][6] + head * st.stride[0][7];
    const i64 qrs = st.stride[2][0], krs = st.stride[2][1], vrs = st.stride[2][2], ors = st.stride[2][3];
    const bool has_mask = flags & FA_HAS_MASK, vector_mask = flags & FA_VECTOR_MASK;
    const T* mb = has_mask ? mask + outer * st.stride[1][0] + head * st.stride[1][1] : mask;
    const i64 mrs = st.stride[1][2], mcs = st.stride[1][3];
    // The scores of keys k0… into `s` (K and the mask of that tile in buffer `b`).
    const auto scores = [&](float (*s)[4], const unsigned (*qf)[4], int b, i64 k0) {
        int acc[FA_BK / 8][4];
        qk_int8(acc, qf, ks[b]);
        // Whether there is a grid is the block's, so one form runs: the other's instructions
        // are not issued predicated off beside it.
        const int keys = (int)min(sk - k0, (i64)FA_BK);
        if (grids.first)
            scores_of_sums<T, ROW_MASK, true>(s, acc, ms[b], keys, grids.product_factor, has_mask, grids.first, score_table);
        else
            scores_of_sums<T, ROW_MASK, false>(s, acc, ms[b], keys, grids.product_factor, has_mask, grids.first, score_table);
    };
    // K (and the mask) of the keys from k0 into buffer `b`.
    const auto load_keys = [&](int b, i64 k0) {
        load_levels(ks[b], kb + k0 * krs, krs, sk - k0, d);
        if (ROW_MASK) load_mask_row(ms[b][0], has_mask ? mb + k0 * mcs : nullptr, mcs, sk - k0, vector_mask);
        if (has_mask && !ROW_MASK) load_mask_tile(ms[b], mb + q0 * mrs + k0 * mcs, mrs, mcs, sq - q0, sk - k0, vector_mask);
        cp_async_commit();
    };

    load_levels(qs, qb + q0 * qrs, qrs, sq - q0, d);
    load_keys(0, 0);
    if (!LONG && sk > FA_BK) load_keys(1, FA_BK);
    if (!LONG) load_values_transposed<2>(vt, vb, vrs, sk, dv);
    cp_async_wait<0>();
    __syncthreads();
    // This warp's 16 query rows as A fragments, one per 32 levels of the head dim.
    unsigned qf[2][4];
#pragma unroll
    for (int c = 0; c < 2; ++c) ldmatrix_x4(&qs[warp * 16 + (lane % 8) + ((lane / 8) % 2) * 8][c * 32 + (lane / 16) * 16], qf[c]);

    int acc[FA_D / 8][4];
#pragma unroll
    for (int j = 0; j < FA_D / 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0;
    const float log2e = 1.4426950408889634f;
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f}, inv[2], ml[2];
    unsigned pf[2][4];
    if (!LONG) {
        float s[2][FA_BK / 8][4];
        scores(s[0], qf, 0, 0);
        if (sk > FA_BK) {
            scores(s[1], qf, 1, FA_BK);
        } else {
#pragma unroll
            for (int j = 0; j < FA_BK / 8; ++j) s[1][j][0] = s[1][j][1] = s[1][j][2] = s[1][j][3] = -INFINITY;
        }
        rows_max(s[0], row_max);
        rows_max(s[1], row_max);
        ml[0] = row_max[0] * log2e, ml[1] = row_max[1] * log2e;
        exponentials(s[0], ml, row_sum);
        exponentials(s[1], ml, row_sum);
        reciprocal_sums(row_sum, row_max, inv);
        probability_levels<T>(pf, s[0], inv, grids.probs);
        pv_int8(acc, pf, vt[0]);
        if (sk > FA_BK) {
            probability_levels<T>(pf, s[1], inv, grids.probs);
            pv_int8(acc, pf, vt[1]);
        }
    } else {
        // Pass 1: each row's maximum and its sum of exponentials (rescaled as the maximum grows).
        float s[FA_BK / 8][4];
        for (i64 k0 = 0; k0 < sk; k0 += FA_BK) {
            if (k0 > 0) {
                __syncthreads();  // every warp is done with the previous keys
                load_keys(0, k0);
                cp_async_wait<0>();
                __syncthreads();
            }
            scores(s, qf, 0, k0);
            float m[2] = {row_max[0], row_max[1]};
            rows_max(s, m);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                if (m[h] != -INFINITY) {
                    float sum = row_max[h] == -INFINITY ? 0.0f : row_sum[h] * ex2((row_max[h] - m[h]) * log2e);
#pragma unroll
                    for (int j = 0; j < FA_BK / 8; ++j) sum += ex2(fmaf(s[j][2 * h], log2e, -m[h] * log2e)) + ex2(fmaf(s[j][2 * h + 1], log2e, -m[h] * log2e));
                    row_sum[h] = sum;
                }
                row_max[h] = m[h];
            }
        }
        reciprocal_sums(row_sum, row_max, inv);
        ml[0] = row_max[0] * log2e, ml[1] = row_max[1] * log2e;
        // Pass 2: the scores again, their probabilities' levels and P·V.
        for (i64 k0 = 0; k0 < sk; k0 += FA_BK) {
            __syncthreads();
            load_keys(0, k0);
            load_values_transposed<1>(vt, vb + k0 * vrs, vrs, sk - k0, dv);
            cp_async_wait<0>();
            __syncthreads();
            scores(s, qf, 0, k0);
            float unused[2] = {0.0f, 0.0f};
            exponentials(s, ml, unused);
            probability_levels<T>(pf, s, inv, grids.probs);
            pv_int8(acc, pf, vt[0]);
        }
    }
    float out[FA_D / 8][4];
#pragma unroll
    for (int j = 0; j < FA_D / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) out[j][e] = int_as_float(acc[j][e]);
    }
    const i64 qi[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
    if constexpr (LEVELS_OUT) {
        store_output_levels<T>(static_cast<unsigned char*>(o) + o_at, out, grids.output_factor, qi, sq, dv, ors, grids.out_levels, flags & FA_VECTOR_LOADS);
    } else {
        const float scale[2] = {grids.output_factor, grids.output_factor};
        store_output(static_cast<T*>(o) + o_at, out, scale, qi, sq, dv, ors, flags & FA_VECTOR_LOADS);
    }
}

#define IA_KERNEL(name, suffix, T, LONG, LEVELS_OUT, ROW_MASK) \
    extern "C" __global__ void __launch_bounds__(FA_THREADS, IA_BLOCKS) name##_##suffix(i64 sq, i64 sk, int d, int dv, i64 heads, \
        i64 q_tiles, Layout st, float product_factor, float output_factor, int flags, int on, float s0, float c0, int z0, int lo0, int hi0, \
        float s1, float c1, int z1, int lo1, int hi1, float s2, float c2, int z2, int lo2, int hi2, const unsigned char* first, \
        const unsigned char* probs, const unsigned char* out_levels, const signed char* q, const signed char* k, const signed char* v, \
        const T* mask, void* o) { \
        const SoftmaxLevels lv{on, {s0, s1, s2}, {c0, c1, c2}, {z0, z1, z2}, {lo0, lo1, lo2}, {hi0, hi1, hi2}}; \
        const IntegerGrids grids{first, probs, product_factor, output_factor, out_levels}; \
        attention_int8<T, LONG, LEVELS_OUT, ROW_MASK>(sq, sk, d, dv, heads, q_tiles, st, flags, grids, lv, q, k, v, mask, o); \
    }

// `_rows`: no mask or a row mask (ROW_MASK); without it, a mask of its own for every query.
#define IA_KERNELS(name, LONG, LEVELS_OUT) \
    IA_KERNEL(name, f16, __half, LONG, LEVELS_OUT, false) \
    IA_KERNEL(name, bf16, __nv_bfloat16, LONG, LEVELS_OUT, false) \
    IA_KERNEL(name##_rows, f16, __half, LONG, LEVELS_OUT, true) \
    IA_KERNEL(name##_rows, bf16, __nv_bfloat16, LONG, LEVELS_OUT, true)

IA_KERNELS(attention_int8, false, false)
IA_KERNELS(attention_int8_long, true, false)
IA_KERNELS(attention_int8_levels, false, true)
IA_KERNELS(attention_int8_long_levels, true, true)

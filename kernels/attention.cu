// Fused scaled-dot-product attention, flash-attention 2 style: softmax(scale · Q·Kᵀ + mask) · V
// without writing the scores to memory. One block of four warps takes 64 query rows of one
// (outer, head) pair; each warp owns 16 rows and walks the keys 64 at a time. Q·Kᵀ and P·V run
// on tensor cores (mma.sync m16n8k16, 16-bit inputs, f32 accumulation) with operands loaded by
// ldmatrix; the scores stay in registers, where an online softmax (running max and sum per row)
// turns them into P, whose accumulator layout is already P·V's A operand. The mask's tile is
// staged in shared memory beside K and V.
//
// Head dims up to 64 (Q and K zero-padded to 64 in shared memory, V likewise). The host
// (kiln-cuda ops/flash.rs) passes element strides in a Layout (common.cuh) used as a parameter
// block, so Q, K, V and O may be views into [batch, sequence, heads, dim] projections:
//   stride[0][0..8) = q, k, v, o per outer index and per head (0 where an operand broadcasts),
//   stride[1][0..4) = the mask's outer, head, row, column,
//   stride[2][0..4) = the row (sequence) stride of q, k, v and o; the innermost stride is 1.
#include "attention.cuh"

// S = Q·Kᵀ for a warp's 16 rows against the 64 keys of `kt` (8 key tiles of the mma
// accumulator), Q as A fragments per 16 columns of the head dim.
template <typename T>
__device__ __forceinline__ void qk_tile(float (*s)[4], const unsigned (*qf)[4], T (*kt)[FA_LD], int d_chunks) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int j = 0; j < FA_BK / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int c = 0; c < FA_D / 16; ++c) {
        if (c >= d_chunks) break;
#pragma unroll
        for (int j = 0; j < FA_BK / 16; ++j) {
            unsigned b[4];
            ldmatrix_x4(&kt[j * 16 + (lane % 8) + (lane / 16) * 8][c * 16 + ((lane / 8) % 2) * 8], b);
            Mma<T>::run(s[2 * j], qf[c], b[0], b[1]);
            Mma<T>::run(s[2 * j + 1], qf[c], b[2], b[3]);
        }
    }
}

// O += P·V: V's rows (the 64 keys of `vt`) read transposed into B fragments, 16 columns at a
// time; P as A fragments of 16 keys each.
template <typename T>
__device__ __forceinline__ void pv_tile(float (*acc)[4], const unsigned (*pf)[4], T (*vt)[FA_LD], int dv_chunks) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int c = 0; c < FA_BK / 16; ++c) {
#pragma unroll
        for (int j = 0; j < FA_D / 16; ++j) {
            if (j >= dv_chunks) break;
            unsigned b[4];
            ldmatrix_x4_trans(&vt[c * 16 + (lane % 8) + ((lane / 8) % 2) * 8][j * 16 + (lane / 16) * 8], b);
            Mma<T>::run(acc[2 * j], pf[c], b[0], b[1]);
            Mma<T>::run(acc[2 * j + 1], pf[c], b[2], b[3]);
        }
    }
}

template <typename T>
__device__ void flash_attention(i64 sq, i64 sk, int d, int dv, i64 heads, i64 q_tiles, const Layout& st, float scale, int flags,
                                const T* q, const T* k, const T* v, const T* mask, T* o) {
    // K and V double-buffered: the next keys load while these are used. Q passes through the
    // second K buffer on its way into registers (46 KB in all, under the 48 KB static limit).
    __shared__ __align__(16) T ks[2][FA_BK][FA_LD];
    __shared__ __align__(16) T vs[2][FA_BK][FA_LD];
    __shared__ __align__(16) T ms[FA_BQ][FA_LD];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t4 = lane % 4;  // a thread's row in an 8-row group, its column pair
    const i64 tile = blockIdx.x % q_tiles, bh = blockIdx.x / q_tiles;
    const i64 outer = bh / heads, head = bh % heads, q0 = tile * FA_BQ;
    const T* qb = q + outer * st.stride[0][0] + head * st.stride[0][1];
    const T* kb = k + outer * st.stride[0][2] + head * st.stride[0][3];
    const T* vb = v + outer * st.stride[0][4] + head * st.stride[0][5];
    T* ob = o + outer * st.stride[0][6] + head * st.stride[0][7];
    const i64 qrs = st.stride[2][0], krs = st.stride[2][1], vrs = st.stride[2][2], ors = st.stride[2][3];
    const bool has_mask = flags & FA_HAS_MASK, vector = flags & FA_VECTOR_LOADS, vector_mask = flags & FA_VECTOR_MASK;
    const T* mb = has_mask ? mask + outer * st.stride[1][0] + head * st.stride[1][1] : mask;
    const i64 mrs = st.stride[1][2], mcs = st.stride[1][3];
    const int d_chunks = (d + 15) / 16, dv_chunks = (dv + 15) / 16;
    const float log2e = 1.4426950408889634f, scale2 = scale * log2e;

    load_tile(ks[1], qb + q0 * qrs, qrs, sq - q0, d, vector);
    load_tile(ks[0], kb, krs, sk, d, vector);
    load_tile(vs[0], vb, vrs, sk, dv, vector);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    // This warp's 16 query rows as mma A fragments, one per 16 columns of the head dim.
    unsigned qf[FA_D / 16][4];
#pragma unroll
    for (int c = 0; c < FA_D / 16; ++c) ldmatrix_x4(&ks[1][warp * 16 + (lane % 16)][c * 16 + (lane / 16) * 8], qf[c]);

    float acc[FA_D / 8][4];  // O: 16 rows x 64 columns, 8 column tiles of the mma accumulator
#pragma unroll
    for (int j = 0; j < FA_D / 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};  // rows g and g + 8
    const i64 qi[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};

    for (i64 k0 = 0, step = 0; k0 < sk; k0 += FA_BK, ++step) {
        const int cur = step & 1;
        __syncthreads();  // every warp is done with the previous keys (and with Q in ks[1])
        // Groups: this step's mask, then the next step's K and V; waiting for all but the
        // newest leaves only the prefetch in flight.
        if (has_mask) load_mask_tile(ms, mb + q0 * mrs + k0 * mcs, mrs, mcs, sq - q0, sk - k0, vector_mask);
        cp_async_commit();
        const i64 k1 = k0 + FA_BK;
        if (k1 < sk) {
            load_tile(ks[cur ^ 1], kb + k1 * krs, krs, sk - k1, d, vector);
            load_tile(vs[cur ^ 1], vb + k1 * vrs, vrs, sk - k1, dv, vector);
        }
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        float s[FA_BK / 8][4];
        qk_tile(s, qf, ks[cur], d_chunks);
        // Scale, mask and the online softmax, in log2 units; a quad of lanes shares each row.
        float step_max[2] = {-INFINITY, -INFINITY};
        const int keys = (int)min(sk - k0, (i64)FA_BK);
#pragma unroll
        for (int j = 0; j < FA_BK / 8; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int half = e / 2, col = j * 8 + 2 * t4 + (e & 1);
                float x = s[j][e] * scale2;
                if (has_mask) x += to_f(ms[warp * 16 + g + half * 8][col]) * log2e;
                if (col >= keys) x = -INFINITY;
                s[j][e] = x;
                step_max[half] = fmaxf(step_max[half], x);
            }
        }
        float corr[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            step_max[h] = fmaxf(step_max[h], __shfl_xor_sync(0xffffffffu, step_max[h], 1));
            step_max[h] = fmaxf(step_max[h], __shfl_xor_sync(0xffffffffu, step_max[h], 2));
            const float m_new = fmaxf(row_max[h], step_max[h]);
            corr[h] = row_max[h] == -INFINITY ? 0.0f : exp2f(row_max[h] - m_new);
            row_max[h] = m_new;
            row_sum[h] *= corr[h];
        }
        // P (as 16-bit A fragments of P·V, 16 keys each) and the running sums.
        unsigned pf[FA_BK / 16][4];
#pragma unroll
        for (int j = 0; j < FA_BK / 8; ++j) {
            float p[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int half = e / 2;
                p[e] = row_max[half] == -INFINITY ? 0.0f : exp2f(s[j][e] - row_max[half]);
                row_sum[half] += p[e];
            }
            pf[j / 2][(j % 2) * 2] = Mma<T>::pack(p[0], p[1]);
            pf[j / 2][(j % 2) * 2 + 1] = Mma<T>::pack(p[2], p[3]);
        }
#pragma unroll
        for (int j = 0; j < FA_D / 8; ++j) {
            acc[j][0] *= corr[0];
            acc[j][1] *= corr[0];
            acc[j][2] *= corr[1];
            acc[j][3] *= corr[1];
        }
        pv_tile(acc, pf, vs[cur], dv_chunks);
    }
    // Each row's sum is spread over its quad. A row with every score masked (sum 0) or a NaN
    // score gives NaN, or 0 where the graph zeroed such rows.
    float inv[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float sum = row_sum[h];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        inv[h] = ((flags & FA_ZERO_NAN_ROWS) && !(sum > 0.0f)) ? 0.0f : 1.0f / sum;
    }
    store_output(ob, acc, inv, qi, sq, dv, ors, vector);
}

// ---- Attention in a Q/DQ network: inputs given as levels, and the grids on its scores ----
//
// One block takes 64 query rows of one (outer, head) pair as flash_attention does, in two passes
// over the keys: the first finds each row's maximum and sum of exponentials, the second the
// probabilities, which their grid quantizes only once known, and P·V. Each score is what the
// unfused path (compute::attention: the product stored as T, softmax_masked_levels, the product
// by V) computes from it: the product rounded to T, the scores' grids through their level
// tables, the mask, expf against the row's maximum, the probability times the reciprocal of the
// sum, rounded to T and through its grid.

// Where Q, K or V comes from: a T tensor, or 8-bit levels (int8 or uint8) dequantized as they
// load, `(level - zero) * scale` in f32 rounded once to T as a DequantizeLinear writes it.
// Blocks a multiprocessor keeps: the registers' cap (the scores of 128 keys stay in them).
#define FA_LEVELS_BLOCKS 3
#define FA_SOURCE_T 0
#define FA_SOURCE_I8 1
#define FA_SOURCE_U8 2
struct FaSource {
    int type;
    float scale;
    int zero;
};

template <typename T>
__device__ __forceinline__ T dequantized_level(int level, const FaSource& s) {
    return from_f<T>(__fmul_rn((float)(level - s.zero), s.scale));
}

// load_tile for an input that may be levels: 16 levels a thread (one 16-byte load where
// `vector`: the host checked every row start aligned and `cols` a multiple of 16), zero beyond
// `rows` x `cols`. Plain loads, not asynchronous copies: the values pass through registers.
template <typename T>
__device__ __forceinline__ void load_source_tile(T (*tile)[FA_LD], const void* src, const FaSource& s, i64 ld, i64 rows, int cols, bool vector) {
    if (s.type == FA_SOURCE_T) {
        load_tile(tile, (const T*)src, ld, rows, cols, vector);
        return;
    }
    const unsigned char* bytes = (const unsigned char*)src;
    const bool is_signed = s.type == FA_SOURCE_I8;
    const T zero = from_f<T>(0.0f);
    if (vector) {
        for (int i = threadIdx.x; i < FA_BK * (FA_D / 16); i += FA_THREADS) {
            const int r = i / (FA_D / 16), c = (i % (FA_D / 16)) * 16;
            const bool in = r < rows && c < cols;
            uint4 raw = make_uint4(0, 0, 0, 0);
            if (in) raw = *reinterpret_cast<const uint4*>(bytes + r * ld + c);
            const unsigned char* b = reinterpret_cast<const unsigned char*>(&raw);
            __align__(16) T vals[16];
#pragma unroll
            for (int j = 0; j < 16; ++j) vals[j] = in ? dequantized_level<T>(is_signed ? (int)(signed char)b[j] : (int)b[j], s) : zero;
            *reinterpret_cast<uint4*>(&tile[r][c]) = *reinterpret_cast<const uint4*>(vals);
            *reinterpret_cast<uint4*>(&tile[r][c + 8]) = *reinterpret_cast<const uint4*>(vals + 8);
        }
    } else {
        for (int i = threadIdx.x; i < FA_BK * FA_D; i += FA_THREADS) {
            const int r = i / FA_D, c = i % FA_D;
            const bool in = r < rows && c < cols;
            const unsigned char b = in ? bytes[r * ld + c] : 0;
            tile[r][c] = in ? dequantized_level<T>(is_signed ? (int)(signed char)b : (int)b, s) : zero;
        }
    }
}

// This warp's 16 rows of Q·Kᵀ against the 64 keys in `kt`, as the unfused path feeds its
// softmax (leveled_products).
template <typename T>
__device__ __forceinline__ void leveled_scores(float (*s)[4], const unsigned (*qf)[4], T (*kt)[FA_LD], T (*mt)[FA_LD], int d_chunks, int keys,
                                               float alpha, bool has_mask, const LeveledSoftmax& lv) {
    qk_tile(s, qf, kt, d_chunks);
    leveled_products(s, mt, keys, alpha, has_mask, lv);
}

// A probability from its exponential: ex · inv (NaN to 0 where the graph zeroes such rows),
// rounded to T and through its grid where the product by the reciprocal decides the level
// (`decided`; the caller takes the ties to `exactly`).
template <typename T>
__device__ __forceinline__ float leveled_probability_fast(float ex, float inv, bool zero_nan, const LeveledSoftmax& lv, bool& decided) {
    float x = ex * inv;
    if (zero_nan && x != x) x = 0.0f;
    decided = true;
    if (!(lv.on & 4)) return x;
    x = to_f(from_f<T>(x));
    const float v = lv.probs.fast(x, decided);
    return decided ? v : x;
}

// acc += P·V for one tile of 64 keys, from their exponentials `ex` (rows g and g + 8 of the
// warp's 16): the probabilities, packed straight into P·V's A fragments (no array of them
// holds registers), the ties packed again after the exact path.
template <typename T>
__device__ __forceinline__ void accumulate_pv(float (*acc)[4], const float (*ex)[4], const float* inv, bool zero_nan, const LeveledSoftmax& lv,
                                              T (*vt)[FA_LD], int dv_chunks) {
    unsigned pf[FA_BK / 16][4];
    unsigned ties = 0;
#pragma unroll
    for (int j = 0; j < FA_BK / 8; ++j) {
        float p[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            bool decided;
            p[e] = leveled_probability_fast<T>(ex[j][e], inv[e / 2], zero_nan, lv, decided);
            ties |= (unsigned)!decided << (4 * j + e);
        }
        pf[j / 2][(j % 2) * 2] = Mma<T>::pack(p[0], p[1]);
        pf[j / 2][(j % 2) * 2 + 1] = Mma<T>::pack(p[2], p[3]);
    }
    // The ties: their probabilities again, the grid's level by the division.
    if (ties) {
#pragma unroll
        for (int j = 0; j < FA_BK / 8; ++j) {
            if (!((ties >> (4 * j)) & 15)) continue;
            float p[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                bool decided;
                p[e] = leveled_probability_fast<T>(ex[j][e], inv[e / 2], zero_nan, lv, decided);
                if (!decided) p[e] = exactly(lv.probs, p[e]);
            }
            pf[j / 2][(j % 2) * 2] = Mma<T>::pack(p[0], p[1]);
            pf[j / 2][(j % 2) * 2 + 1] = Mma<T>::pack(p[2], p[3]);
        }
    }
    pv_tile(acc, pf, vt, dv_chunks);
}

template <typename T>
__device__ void flash_attention_levels(i64 sq, i64 sk, int d, int dv, i64 heads, i64 q_tiles, const Layout& st, float alpha, int flags,
                                       const FaSource* src, const SoftmaxLevels& levels, const void* q, const void* k, const void* v,
                                       const T* mask, T* o) {
    __shared__ __align__(16) T ks[FA_BK][FA_LD];
    __shared__ __align__(16) T vs[FA_BK][FA_LD];
    __shared__ __align__(16) T ms[FA_BQ][FA_LD];
    __shared__ float score_table[256], prob_table[256];
    const LeveledSoftmax lv = level_tables<T>(levels, score_table, prob_table);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4;
    const i64 tile = blockIdx.x % q_tiles, bh = blockIdx.x / q_tiles;
    const i64 outer = bh / heads, head = bh % heads, q0 = tile * FA_BQ;
    // Element offsets: the sources' element sizes differ.
    const i64 qoff = outer * st.stride[0][0] + head * st.stride[0][1];
    const i64 koff = outer * st.stride[0][2] + head * st.stride[0][3];
    const i64 voff = outer * st.stride[0][4] + head * st.stride[0][5];
    const auto at = [](const void* base, const FaSource& s, i64 off) -> const void* {
        return s.type == FA_SOURCE_T ? (const void*)((const T*)base + off) : (const void*)((const unsigned char*)base + off);
    };
    T* ob = o + outer * st.stride[0][6] + head * st.stride[0][7];
    const i64 qrs = st.stride[2][0], krs = st.stride[2][1], vrs = st.stride[2][2], ors = st.stride[2][3];
    const bool has_mask = flags & FA_HAS_MASK, vector = flags & FA_VECTOR_LOADS, vector_mask = flags & FA_VECTOR_MASK;
    const bool zero_nan = flags & FA_ZERO_NAN_ROWS;
    const T* mb = has_mask ? mask + outer * st.stride[1][0] + head * st.stride[1][1] : mask;
    const i64 mrs = st.stride[1][2], mcs = st.stride[1][3];
    const int d_chunks = (d + 15) / 16, dv_chunks = (dv + 15) / 16;
    // K (and the mask) of the keys from k0 into shared memory; V too where `with_values`.
    const auto load_keys = [&](i64 k0, bool with_values) {
        __syncthreads();  // every warp is done with the tiles there (and with Q in ks)
        load_source_tile(ks, at(k, src[1], koff + k0 * krs), src[1], krs, sk - k0, d, vector);
        if (with_values) load_source_tile(vs, at(v, src[2], voff + k0 * vrs), src[2], vrs, sk - k0, dv, vector);
        if (has_mask) load_mask_tile(ms, mb + q0 * mrs + k0 * mcs, mrs, mcs, sq - q0, sk - k0, vector_mask);
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
    };
    const auto load_values = [&](i64 k0) {
        __syncthreads();
        load_source_tile(vs, at(v, src[2], voff + k0 * vrs), src[2], vrs, sk - k0, dv, vector);
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
    };

    load_source_tile(ks, at(q, src[0], qoff + q0 * qrs), src[0], qrs, sq - q0, d, vector);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    unsigned qf[FA_D / 16][4];
#pragma unroll
    for (int c = 0; c < FA_D / 16; ++c) ldmatrix_x4(&ks[warp * 16 + (lane % 16)][c * 16 + (lane / 16) * 8], qf[c]);

    float acc[FA_D / 8][4];
#pragma unroll
    for (int j = 0; j < FA_D / 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f}, inv[2];
    if (sk <= 2 * FA_BK) {
        // Up to 128 keys: every score stays in registers, computed once.
        float s[2][FA_BK / 8][4];
        load_keys(0, false);
        leveled_scores(s[0], qf, ks, ms, d_chunks, (int)min(sk, (i64)FA_BK), alpha, has_mask, lv);
        if (sk > FA_BK) {
            load_keys(FA_BK, false);
            leveled_scores(s[1], qf, ks, ms, d_chunks, (int)(sk - FA_BK), alpha, has_mask, lv);
        } else {
#pragma unroll
            for (int j = 0; j < FA_BK / 8; ++j) s[1][j][0] = s[1][j][1] = s[1][j][2] = s[1][j][3] = -INFINITY;
        }
        rows_max(s[0], row_max);
        rows_max(s[1], row_max);
#pragma unroll
        for (int t = 0; t < 2; ++t) {
#pragma unroll
            for (int j = 0; j < FA_BK / 8; ++j) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    s[t][j][e] = expf(s[t][j][e] - row_max[e / 2]);
                    row_sum[e / 2] += s[t][j][e];
                }
            }
        }
        reciprocal_sums(row_sum, row_max, inv);
        load_values(0);
        accumulate_pv(acc, s[0], inv, zero_nan, lv, vs, dv_chunks);
        if (sk > FA_BK) {
            load_values(FA_BK);
            accumulate_pv(acc, s[1], inv, zero_nan, lv, vs, dv_chunks);
        }
    } else {
        // Pass 1: each row's maximum and its sum of exponentials (rescaled as the maximum
        // grows); pass 2 computes the scores again for the probabilities and P·V.
        float s[FA_BK / 8][4];
        for (i64 k0 = 0; k0 < sk; k0 += FA_BK) {
            load_keys(k0, false);
            leveled_scores(s, qf, ks, ms, d_chunks, (int)min(sk - k0, (i64)FA_BK), alpha, has_mask, lv);
            float m[2] = {row_max[0], row_max[1]};
            rows_max(s, m);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                if (m[h] != -INFINITY) {
                    float sum = row_max[h] == -INFINITY ? 0.0f : row_sum[h] * expf(row_max[h] - m[h]);
#pragma unroll
                    for (int j = 0; j < FA_BK / 8; ++j) sum += expf(s[j][2 * h] - m[h]) + expf(s[j][2 * h + 1] - m[h]);
                    row_sum[h] = sum;
                }
                row_max[h] = m[h];
            }
        }
        reciprocal_sums(row_sum, row_max, inv);
        for (i64 k0 = 0; k0 < sk; k0 += FA_BK) {
            load_keys(k0, true);
            leveled_scores(s, qf, ks, ms, d_chunks, (int)min(sk - k0, (i64)FA_BK), alpha, has_mask, lv);
#pragma unroll
            for (int j = 0; j < FA_BK / 8; ++j) {
#pragma unroll
                for (int e = 0; e < 4; ++e) s[j][e] = expf(s[j][e] - row_max[e / 2]);
            }
            accumulate_pv(acc, s, inv, zero_nan, lv, vs, dv_chunks);
        }
    }
    const i64 qi[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
    const float unscaled[2] = {1.0f, 1.0f};
    store_output(ob, acc, unscaled, qi, sq, dv, ors, vector);
}

#define FA_KERNEL(suffix, T) \
    extern "C" __global__ void __launch_bounds__(FA_THREADS, FA_LEVELS_BLOCKS) flash_attention_levels_##suffix(i64 sq, i64 sk, int d, int dv, i64 heads, \
        i64 q_tiles, Layout st, float alpha, int flags, int qt, float qs, int qz, int kt, float ks, int kz, int vt, float vs, int vz, \
        int on, float s0, float c0, int z0, int lo0, int hi0, float s1, float c1, int z1, int lo1, int hi1, float s2, float c2, int z2, \
        int lo2, int hi2, const void* q, const void* k, const void* v, const T* mask, T* o) { \
        const FaSource src[3] = {{qt, qs, qz}, {kt, ks, kz}, {vt, vs, vz}}; \
        const SoftmaxLevels lv{on, {s0, s1, s2}, {c0, c1, c2}, {z0, z1, z2}, {lo0, lo1, lo2}, {hi0, hi1, hi2}}; \
        flash_attention_levels<T>(sq, sk, d, dv, heads, q_tiles, st, alpha, flags, src, lv, q, k, v, mask, o); \
    } \
    extern "C" __global__ void __launch_bounds__(FA_THREADS) flash_attention_##suffix(i64 sq, i64 sk, int d, int dv, i64 heads, i64 q_tiles, \
        Layout st, float scale, int flags, const T* q, const T* k, const T* v, const T* mask, T* o) { \
        flash_attention<T>(sq, sk, d, dv, heads, q_tiles, st, scale, flags, q, k, v, mask, o); \
    }

FA_KERNEL(f16, __half)
FA_KERNEL(bf16, __nv_bfloat16)

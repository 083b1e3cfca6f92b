// Row reductions: softmax, Reduce, and the statistics step of Normalization. Data is viewed as
// [outer, len, inner]; one warp handles one (outer, inner) row of `len` elements, stride `inner`.
#include "common.cuh"
#include "levels.cuh"
#include "reduce.cuh"

#define ROW_SETUP \
    i64 warp = ((i64)blockIdx.x * blockDim.x + threadIdx.x) / 32; \
    int lane = threadIdx.x % 32; \
    if (warp >= outer * inner) return; \
    i64 base = (warp / inner) * len * inner + (warp % inner);

// softmax(x * scale) along the row; scale lets attention fold its 1/sqrt(d) in.
template <typename T>
__device__ void softmax(i64 outer, i64 len, i64 inner, float scale, const T* x, T* y) {
    ROW_SETUP
    float m = -INFINITY;
    for (i64 k = lane; k < len; k += 32) m = fmaxf(m, to_f(x[base + k * inner]) * scale);
    m = warp_max(m);
    float s = 0.0f;
    for (i64 k = lane; k < len; k += 32) s += expf(to_f(x[base + k * inner]) * scale - m);
    s = warp_sum(s);
    float inv = 1.0f / s;
    for (i64 k = lane; k < len; k += 32) y[base + k * inner] = from_f<T>(expf(to_f(x[base + k * inner]) * scale - m) * inv);
}

// One row of attention's masked softmax held in registers (len <= 32 * REGS), read and written
// in runs of RUN elements per lane: x, the mask (mask_stride 1, or 0 broadcasting one value
// along the row) and y at RUN-aligned offsets when RUN > 1.
#define SOFTMAX_REGS 8

template <typename T, int RUN, int REGS, int G, bool LEVELS>
__device__ __forceinline__ void softmax_masked_row(i64 base, i64 mbase, i64 len, int lane, bool active, i64 mask_stride, int zero_nan,
                                                   const T* x, const T* mask, T* y, const LeveledSoftmax& lv) {
    float v[REGS];
    float m = -INFINITY;
#pragma unroll
    for (int j = 0; j < REGS / RUN; ++j) {
        const i64 k = RUN * (lane + G * j);
        float xs[RUN], ms[RUN];
        if (active && k < len) {
            load_run<RUN>(x + base + k, xs);
            if (LEVELS) {
#pragma unroll
                for (int e = 0; e < RUN; ++e) xs[e] = leveled_score(lv, xs[e]);
            }
            if (!mask) {
#pragma unroll
                for (int e = 0; e < RUN; ++e) ms[e] = 0.0f;
            } else if (mask_stride == 0) {
#pragma unroll
                for (int e = 0; e < RUN; ++e) ms[e] = to_f(mask[mbase]);
            } else {
                load_run<RUN>(mask + mbase + k, ms);
            }
        }
#pragma unroll
        for (int e = 0; e < RUN; ++e) {
            v[RUN * j + e] = active && k < len ? xs[e] + ms[e] : -INFINITY;
            m = fmaxf(m, v[RUN * j + e]);
        }
    }
    m = lanes_max<G>(m);
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < REGS; ++j) {
        v[j] = RUN * (lane + G * (j / RUN)) < len ? expf(v[j] - m) : 0.0f;
        s += v[j];
    }
    const float inv = 1.0f / lanes_sum<G>(s);
#pragma unroll
    for (int j = 0; j < REGS / RUN; ++j) {
        const i64 k = RUN * (lane + G * j);
        if (!active || k >= len) continue;
        float p[RUN];
#pragma unroll
        for (int e = 0; e < RUN; ++e) {
            p[e] = v[RUN * j + e] * inv;
            if (zero_nan && p[e] != p[e]) p[e] = 0.0f;
            // The probabilities' grid reads them as stored (rounded to T).
            if (LEVELS) p[e] = leveled_probability<T>(lv, p[e]);
        }
        store_run<RUN>(y + base + k, p);
    }
}

// Every row with G lanes a row (32 / G rows a warp), the grid's warps striding over them. A
// lane past the last row computes on its warp's first row and stores nothing: the group
// reductions need every lane of the warp.
template <typename T, int RUN, int REGS, int G, bool LEVELS>
__device__ void softmax_masked_rows(i64 rows, i64 len, const Layout& ml, i64 mask_stride, int zero_nan, const T* x, const T* mask, T* y,
                                    const LeveledSoftmax& lv) {
    constexpr int PER_WARP = 32 / G;
    const i64 warp = ((i64)blockIdx.x * blockDim.x + threadIdx.x) / 32, warps = (i64)gridDim.x * blockDim.x / 32;
    for (i64 first = warp * PER_WARP; first < rows; first += warps * PER_WARP) {
        const i64 own = first + (threadIdx.x % 32) / G;
        const bool active = own < rows;
        const i64 row = active ? own : first;
        const i64 mbase = mask ? operand_offset(ml, 0, row) : 0;
        softmax_masked_row<T, RUN, REGS, G, LEVELS>(row * len, mbase, len, threadIdx.x % G, active, mask_stride, zero_nan, x, mask, y, lv);
    }
}

// Whether every row's mask offset (ml's operand 0) is a multiple of n elements.
__device__ __forceinline__ bool mask_rows_aligned(const Layout& ml, int n) {
    bool aligned = ml.offset[0] % n == 0;
#pragma unroll
    for (int d = 0; d < KILN_MAX_RANK; ++d) aligned &= d >= ml.rank || ml.stride[0][d] % n == 0;
    return aligned;
}

// Longer rows: a warp a row, three passes over x.
template <typename T, bool LEVELS>
__device__ void softmax_masked_long(i64 rows, i64 len, const Layout& ml, i64 mask_stride, int zero_nan, const T* x, const T* mask, T* y,
                                    const LeveledSoftmax& lv) {
    const int lane = threadIdx.x % 32;
    const i64 warps = (i64)gridDim.x * blockDim.x / 32;
    for (i64 row = ((i64)blockIdx.x * blockDim.x + threadIdx.x) / 32; row < rows; row += warps) {
        const i64 base = row * len;
        const i64 mbase = mask ? operand_offset(ml, 0, row) : 0;
        auto score = [&](i64 k) {
            float v = to_f(x[base + k]);
            if (LEVELS) v = leveled_score(lv, v);
            return mask ? v + to_f(mask[mbase + k * mask_stride]) : v;
        };
        float m = -INFINITY;
        for (i64 k = lane; k < len; k += 32) m = fmaxf(m, score(k));
        m = warp_max(m);
        float s = 0.0f;
        for (i64 k = lane; k < len; k += 32) s += expf(score(k) - m);
        s = warp_sum(s);
        const float inv = 1.0f / s;
        for (i64 k = lane; k < len; k += 32) {
            float p = expf(score(k) - m) * inv;
            if (zero_nan && p != p) p = 0.0f;
            if (LEVELS) p = leveled_probability<T>(lv, p);
            y[base + k] = from_f<T>(p);
        }
    }
}

// Attention's softmax over the last axis of dense scores [rows, len], with the additive mask
// (broadcast: row r's mask starts at ml's operand-0 offset of r, stride mask_stride along the
// row) and, when zero_nan is set, NaN probabilities (fully masked rows) written as 0: one pass
// instead of a mask add, a softmax and a NaN guard.
// With LEVELS, the level grids `lv` apply and the mask may be null.
template <typename T, bool LEVELS>
__device__ void softmax_masked(i64 rows, i64 len, Layout ml, i64 mask_stride, int zero_nan, const T* x, const T* mask, T* y,
                               const LeveledSoftmax& lv) {
    // Short rows (attention's usual case) stay in registers: one read of x and the mask, in runs
    // of 8 or 4 (up to 16-byte accesses) where rows, mask and addresses align; rows of up to 64
    // or 128 elements in runs of 8 share a warp (8 or 16 lanes a row).
    const unsigned long long addresses = (unsigned long long)x | (unsigned long long)y | (mask_stride ? (unsigned long long)mask : 0ull);
    const auto runs = [&](int n, unsigned long long bytes) {
        return len % n == 0 && addresses % bytes == 0 && (mask_stride == 0 || !mask || mask_rows_aligned(ml, n));
    };
    if (len <= 64 && runs(8, sizeof(Run<T, 8>))) {
        softmax_masked_rows<T, 8, 8, 8, LEVELS>(rows, len, ml, mask_stride, zero_nan, x, mask, y, lv);
    } else if (len <= 128 && runs(8, sizeof(Run<T, 8>))) {
        softmax_masked_rows<T, 8, 8, 16, LEVELS>(rows, len, ml, mask_stride, zero_nan, x, mask, y, lv);
    } else if (len <= 32 * SOFTMAX_REGS && runs(4, sizeof(Run<T, 4>))) {
        softmax_masked_rows<T, 4, SOFTMAX_REGS, 32, LEVELS>(rows, len, ml, mask_stride, zero_nan, x, mask, y, lv);
    } else if (len <= 32 * SOFTMAX_REGS) {
        softmax_masked_rows<T, 1, SOFTMAX_REGS, 32, LEVELS>(rows, len, ml, mask_stride, zero_nan, x, mask, y, lv);
    } else {
        softmax_masked_long<T, LEVELS>(rows, len, ml, mask_stride, zero_nan, x, mask, y, lv);
    }
}

// Reduce (reduce.cuh's op codes) of each (outer, inner) row, a warp a row.
template <typename T>
__device__ void reduce(int op, i64 outer, i64 len, i64 inner, const T* x, T* y) {
    ROW_SETUP
    const float acc = reduce_row(op, len, lane, [&](i64 k) { return to_f(x[base + k * inner]); });
    if (lane == 0) y[(warp / inner) * inner + (warp % inner)] = from_f<T>(acc);
}

// `reduce` over a middle axis with a wide inner extent (reduce.cuh's columns_reduce) of T into
// O. A long reduction over few columns (an early squeeze-excitation pooling: 32 images × 32
// channels over 112·112 pixels made 32 blocks for 51 MB) splits its rows into f32 partials
// [outer, splits, inner] (`PARTIAL`), and a second pass over them (`FROM_PARTIALS`) takes the
// result with the whole length's `result_len`.
template <typename T, typename O, int V, int ROWS, bool PARTIAL, bool FROM_PARTIALS>
__device__ void reduce_columns(int op, i64 outer, i64 len, i64 inner, i64 chunk, i64 result_len, const T* x, O* y) {
    columns_reduce<V, ROWS, PARTIAL, FROM_PARTIALS>(
        op, outer, len, inner, chunk, result_len, [&](i64 o, i64 k, i64 c, float* v) { load_run<V>(x + o * len * inner + c + k * inner, v); },
        [&](i64 at, const float* acc) { store_run<V>(y + at, acc); });
}

// The column kernels over T, into O: `PARTIAL` writes f32 partials of rows in chunks.
#define COLUMN_KERNEL(name, suffix, T, O, V, ROWS, PARTIAL) \
    extern "C" __global__ void name##_##suffix(int op, i64 outer, i64 len, i64 inner, i64 chunk, const T* x, O* y) { \
        reduce_columns<T, O, V, ROWS, PARTIAL, false>(op, outer, len, inner, chunk, len, x, y); \
    }

// (x - mean) / sqrt(var + eps) per row (inner = 1); scale and bias are applied after, as
// broadcast elementwise products. Two-pass statistics in float.
template <typename T>
__device__ void normalize(i64 outer, i64 len, float eps, const T* x, T* y) {
    const i64 inner = 1;
    ROW_SETUP
    float s = 0.0f;
    for (i64 k = lane; k < len; k += 32) s += to_f(x[base + k]);
    float mean = warp_sum(s) / (float)len;
    float v = 0.0f;
    for (i64 k = lane; k < len; k += 32) { float d = to_f(x[base + k]) - mean; v += d * d; }
    float rstd = rsqrtf(warp_sum(v) / (float)len + eps);
    for (i64 k = lane; k < len; k += 32) y[base + k] = from_f<T>((to_f(x[base + k]) - mean) * rstd);
}

// RMS normalization: x / sqrt(mean(x^2) + eps) per row.
template <typename T>
__device__ void rms_normalize(i64 outer, i64 len, float eps, const T* x, T* y) {
    const i64 inner = 1;
    ROW_SETUP
    float s = 0.0f;
    for (i64 k = lane; k < len; k += 32) { float a = to_f(x[base + k]); s += a * a; }
    float r = rsqrtf(warp_sum(s) / (float)len + eps);
    for (i64 k = lane; k < len; k += 32) y[base + k] = from_f<T>(to_f(x[base + k]) * r);
}

// Normalization with its affine step in the same pass: y = n * scale[k] + bias[k], where n is
// the normalized value (layer or RMS) and scale / bias (bias may be null) run along the row.
// Rows whose runs of 4 fit the lanes' registers are read once: ROWS rows per warp, RUNS runs of
// 4 per lane and row, every load issued before the first reduction (short rows, as ConvNeXt's
// and Swin's 96..768 channels, keep more bytes in flight that way). Two-pass statistics in
// float over the registers.
template <typename T, int RUNS, int ROWS>
__device__ __forceinline__ void normalize_affine_registers(i64 row0, i64 outer, i64 len, float eps, int rms, int lane, const T* x,
                                                           const T* scale, const T* bias, T* y) {
    float v[ROWS][4 * RUNS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
#pragma unroll
        for (int j = 0; j < RUNS; ++j) {
            const i64 k = 4 * (lane + 32 * j);
            if (row0 + r < outer && k < len) {
                load_run<4>(x + (row0 + r) * len + k, v[r] + 4 * j);
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e) v[r][4 * j + e] = 0.0f;
            }
        }
    }
    float mean[ROWS], rstd[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        float s = 0.0f;
#pragma unroll
        for (int e = 0; e < 4 * RUNS; ++e) s += v[r][e];
        mean[r] = rms ? 0.0f : warp_sum(s) / (float)len;
        float q = 0.0f;
#pragma unroll
        for (int j = 0; j < RUNS; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float d = 4 * (lane + 32 * j) < len ? v[r][4 * j + e] - mean[r] : 0.0f;
                q += d * d;
            }
        }
        rstd[r] = rsqrtf(warp_sum(q) / (float)len + eps);
    }
#pragma unroll
    for (int j = 0; j < RUNS; ++j) {
        const i64 k = 4 * (lane + 32 * j);
        if (k >= len) continue;
        float g[4], b[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        load_run<4>(scale + k, g);
        if (bias) load_run<4>(bias + k, b);
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            if (row0 + r >= outer) continue;
            float out[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) out[e] = (v[r][4 * j + e] - mean[r]) * rstd[r] * g[e] + b[e];
            store_run<4>(y + (row0 + r) * len + k, out);
        }
    }
}

// One row the general way: three passes over memory, any length and alignment.
template <typename T>
__device__ void normalize_affine_row(i64 base, i64 len, float eps, int rms, int lane, const T* x, const T* scale, const T* bias, T* y) {
    float mean = 0.0f;
    if (!rms) {
        float s = 0.0f;
        for (i64 k = lane; k < len; k += 32) s += to_f(x[base + k]);
        mean = warp_sum(s) / (float)len;
    }
    float v = 0.0f;
    for (i64 k = lane; k < len; k += 32) { float d = to_f(x[base + k]) - mean; v += d * d; }
    float rstd = rsqrtf(warp_sum(v) / (float)len + eps);
    for (i64 k = lane; k < len; k += 32) {
        float n = (to_f(x[base + k]) - mean) * rstd * to_f(scale[k]);
        y[base + k] = from_f<T>(bias ? n + to_f(bias[k]) : n);
    }
}

// Whether every row of `len` starts on a run of 4 (the register paths' vector loads).
template <typename T>
__device__ __forceinline__ bool runs_aligned(i64 len, const T* x, const T* scale, const T* bias, const T* y) {
    const unsigned long long addresses = (unsigned long long)x | (unsigned long long)y | (unsigned long long)scale | (unsigned long long)(bias ? bias : x);
    return len % 4 == 0 && addresses % (4 * sizeof(T)) == 0;
}

#define NORM_RUNS 8
// One warp per row; rows of up to 1024 in registers (BERT's 768).
template <typename T>
__device__ void normalize_affine(i64 outer, i64 len, float eps, int rms, const T* x, const T* scale, const T* bias, T* y) {
    const i64 inner = 1;
    ROW_SETUP
    if (len <= 32 * 4 * NORM_RUNS && runs_aligned(len, x, scale, bias, y)) {
        normalize_affine_registers<T, NORM_RUNS, 1>(warp, outer, len, eps, rms, lane, x, scale, bias, y);
        return;
    }
    normalize_affine_row(base, len, eps, rms, lane, x, scale, bias, y);
}

// `rows_per_warp` (8, 4 or 2) rows of at most 1024 / rows_per_warp per warp, kiln-cuda's choice
// for short rows: the same register budget as normalize_affine's, spent on more rows.
template <typename T>
__device__ void normalize_affine_short(i64 outer, i64 len, float eps, int rms, int rows_per_warp, const T* x, const T* scale, const T* bias,
                                       T* y) {
    const i64 warp = ((i64)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    const i64 row0 = warp * rows_per_warp;
    if (row0 >= outer) return;
    if (len * rows_per_warp > 32 * 4 * NORM_RUNS || !runs_aligned(len, x, scale, bias, y)) {
        for (i64 r = row0; r < row0 + rows_per_warp && r < outer; ++r) normalize_affine_row(r * len, len, eps, rms, lane, x, scale, bias, y);
    } else if (rows_per_warp == 8) {
        normalize_affine_registers<T, 1, 8>(row0, outer, len, eps, rms, lane, x, scale, bias, y);
    } else if (rows_per_warp == 4) {
        normalize_affine_registers<T, 2, 4>(row0, outer, len, eps, rms, lane, x, scale, bias, y);
    } else {
        normalize_affine_registers<T, 4, 2>(row0, outer, len, eps, rms, lane, x, scale, bias, y);
    }
}

// Long rows split over blocks: few rows, each far longer than one warp covers quickly (a
// GroupNorm of one group at batch 1 has a single row of C·H·W). Block (c, row) works on chunk c
// of its row. Step 1 writes each chunk's mean and sum of squared deviations (two passes over
// the chunk, which stays in cache; for RMS: the mean of squares and 0). Step 2 merges a row's
// partials (Chan's formula, one warp) in every block of the row, then normalizes its chunk.
__device__ __forceinline__ float block_sum(float v, float* shared) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    v = warp_sum(v);
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = warp_sum(lane < (int)(blockDim.x / 32) ? shared[lane] : 0.0f);
        if (lane == 0) shared[32] = v;
    }
    __syncthreads();
    v = shared[32];
    __syncthreads();
    return v;
}

template <typename T>
__device__ void row_chunk_stats(i64 len, i64 chunk, int rms, const T* x, float* partial) {
    __shared__ float shared[33];
    i64 row = blockIdx.y, begin = (i64)blockIdx.x * chunk, end = min(len, begin + chunk);
    const T* r = x + row * len;
    float n = (float)(end - begin), s = 0.0f;
    for (i64 k = begin + threadIdx.x; k < end; k += blockDim.x) {
        float a = to_f(r[k]);
        s += rms ? a * a : a;
    }
    float mean = block_sum(s, shared) / n, m2 = 0.0f;
    if (!rms) {
        for (i64 k = begin + threadIdx.x; k < end; k += blockDim.x) { float d = to_f(r[k]) - mean; m2 += d * d; }
        m2 = block_sum(m2, shared);
    }
    if (threadIdx.x == 0) {
        float* out = partial + (row * gridDim.x + blockIdx.x) * 2;
        out[0] = mean;
        out[1] = m2;
    }
}

// (n, mean, m2) of the union of two parts (Chan et al.).
__device__ __forceinline__ void merge_stats(float& n, float& mean, float& m2, float nb, float mb, float m2b) {
    float total = n + nb;
    if (total == 0.0f) return;
    float delta = mb - mean;
    mean += delta * nb / total;
    m2 += m2b + delta * delta * n * nb / total;
    n = total;
}

template <typename T>
__device__ void normalize_chunks(i64 len, i64 chunk, float eps, int rms, const T* x, const float* partial, T* y) {
    __shared__ float stats[2];
    i64 row = blockIdx.y, chunks = gridDim.x;
    if (threadIdx.x < 32) {
        float n = 0.0f, mean = 0.0f, m2 = 0.0f;
        for (i64 c = threadIdx.x; c < chunks; c += 32) {
            float nb = (float)(min(len, (c + 1) * chunk) - c * chunk);
            merge_stats(n, mean, m2, nb, partial[(row * chunks + c) * 2], partial[(row * chunks + c) * 2 + 1]);
        }
        for (int o = 16; o > 0; o >>= 1) {
            float nb = __shfl_xor_sync(0xffffffffu, n, o), mb = __shfl_xor_sync(0xffffffffu, mean, o), m2b = __shfl_xor_sync(0xffffffffu, m2, o);
            merge_stats(n, mean, m2, nb, mb, m2b);
        }
        if (threadIdx.x == 0) {
            // RMS: the merged "mean" is the mean of squares.
            stats[0] = rms ? 0.0f : mean;
            stats[1] = rsqrtf((rms ? mean : m2 / (float)len) + eps);
        }
    }
    __syncthreads();
    float mean = stats[0], rstd = stats[1];
    i64 begin = (i64)blockIdx.x * chunk, end = min(len, begin + chunk);
    const T* r = x + row * len;
    T* out = y + row * len;
    for (i64 k = begin + threadIdx.x; k < end; k += blockDim.x) out[k] = from_f<T>((to_f(r[k]) - mean) * rstd);
}

#define ROW_KERNELS(suffix, T) \
    extern "C" __global__ void row_chunk_stats_##suffix(i64 len, i64 chunk, int rms, const T* x, float* p) { row_chunk_stats(len, chunk, rms, x, p); } \
    extern "C" __global__ void normalize_chunks_##suffix(i64 len, i64 chunk, float eps, int rms, const T* x, const float* p, T* y) { \
        normalize_chunks(len, chunk, eps, rms, x, p, y); \
    } \
    extern "C" __global__ void normalize_affine_##suffix(i64 outer, i64 len, float eps, int rms, const T* x, const T* s, const T* b, T* y) { normalize_affine(outer, len, eps, rms, x, s, b, y); } \
    extern "C" __global__ void normalize_affine_short_##suffix(i64 outer, i64 len, float eps, int rms, int rpw, const T* x, const T* s, const T* b, T* y) { \
        normalize_affine_short(outer, len, eps, rms, rpw, x, s, b, y); \
    } \
    extern "C" __global__ void __launch_bounds__(256, 4) softmax_masked_##suffix(i64 rows, i64 len, Layout ml, i64 ms, int zn, const T* x, const T* m, T* y) { \
        softmax_masked<T, false>(rows, len, ml, ms, zn, x, m, y, LeveledSoftmax{}); \
    } \
    extern "C" __global__ void __launch_bounds__(256, 4) softmax_masked_levels_##suffix(i64 rows, i64 len, Layout ml, i64 ms, int zn, int on, float s0, float c0, int z0, int lo0, \
                                                              int hi0, float s1, float c1, int z1, int lo1, int hi1, float s2, float c2, int z2, \
                                                              int lo2, int hi2, const T* x, const T* m, T* y) { \
        const SoftmaxLevels lv{on, {s0, s1, s2}, {c0, c1, c2}, {z0, z1, z2}, {lo0, lo1, lo2}, {hi0, hi1, hi2}}; \
        __shared__ float scores[256], probs[256]; \
        softmax_masked<T, true>(rows, len, ml, ms, zn, x, m, y, level_tables<T>(lv, scores, probs)); \
    } \
    extern "C" __global__ void softmax_##suffix(i64 outer, i64 len, i64 inner, float scale, const T* x, T* y) { softmax(outer, len, inner, scale, x, y); } \
    extern "C" __global__ void reduce_##suffix(int op, i64 outer, i64 len, i64 inner, const T* x, T* y) { reduce(op, outer, len, inner, x, y); } \
    COLUMN_KERNEL(reduce_columns, suffix, T, T, 1, COLUMN_ROWS, false) \
    COLUMN_KERNEL(reduce_column_runs, suffix, T, T, Vec16<T>::N, COLUMN_RUN_ROWS, false) \
    COLUMN_KERNEL(reduce_column_partials, suffix, T, float, 1, COLUMN_ROWS, true) \
    COLUMN_KERNEL(reduce_column_run_partials, suffix, T, float, Vec16<T>::N, COLUMN_RUN_ROWS, true) \
    extern "C" __global__ void reduce_column_partials_finish_##suffix(int op, i64 outer, i64 splits, i64 inner, i64 result_len, const float* x, T* y) { \
        reduce_columns<float, T, 1, COLUMN_ROWS, false, true>(op, outer, splits, inner, splits, result_len, x, y); \
    } \
    extern "C" __global__ void normalize_##suffix(i64 outer, i64 len, float eps, const T* x, T* y) { normalize(outer, len, eps, x, y); } \
    extern "C" __global__ void rms_normalize_##suffix(i64 outer, i64 len, float eps, const T* x, T* y) { rms_normalize(outer, len, eps, x, y); }

ROW_KERNELS(f32, float)
ROW_KERNELS(f16, __half)
ROW_KERNELS(bf16, __nv_bfloat16)

// What the attention kernels share (attention.cu's 16-bit flash attention and attention on
// levels, attention_int8.cu's integer form): the tile geometry, the 16-bit MMA, tile loads, the
// output's store, the rows' maxima and sums, and the scores of a Q/DQ network's attention.
#pragma once
#include "common.cuh"
#include "levels.cuh"
#include "mma.cuh"

#define FA_BQ 64
#define FA_BK 64
#define FA_D 64
#define FA_THREADS 128
#define FA_LD (FA_D + 8)  // 144-byte rows: the 8 rows one ldmatrix reads fall in different banks
#define FA_HAS_MASK 1
#define FA_ZERO_NAN_ROWS 2
#define FA_VECTOR_LOADS 4
#define FA_VECTOR_MASK 8
static_assert(FA_BQ == FA_BK, "load_tile fills tiles of one height");

template <typename T> struct Mma;
template <> struct Mma<__half> {
    static __device__ __forceinline__ void run(float* c, const unsigned* a, unsigned b0, unsigned b1) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    static __device__ __forceinline__ unsigned pack(float lo, float hi) {
        __half2 h = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<unsigned*>(&h);
    }
};
template <> struct Mma<__nv_bfloat16> {
    static __device__ __forceinline__ void run(float* c, const unsigned* a, unsigned b0, unsigned b1) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    static __device__ __forceinline__ unsigned pack(float lo, float hi) {
        __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<unsigned*>(&h);
    }
};

// `rows` rows of `cols` elements (row stride `ld`) into a [FA_BQ or FA_BK][FA_LD] tile, zero
// beyond them: 16-byte asynchronous copies where the host found every row aligned (all of a
// thread's copies in flight at once), elements elsewhere.
template <typename T>
__device__ __forceinline__ void load_tile(T (*tile)[FA_LD], const T* src, i64 ld, i64 rows, int cols, bool vector) {
    if (vector) {
        // Not unrolled: an asynchronous copy holds no register, so the loop issues them all.
#pragma unroll 1
        for (int i = threadIdx.x; i < FA_BK * (FA_D / 8); i += FA_THREADS) {
            const int r = i / (FA_D / 8), c = (i % (FA_D / 8)) * 8;
            const bool in = r < rows && c < cols;
            cp_async16(&tile[r][c], in ? src + r * ld + c : src, in);
        }
    } else {
        const T zero = from_f<T>(0.0f);
        for (int i = threadIdx.x; i < FA_BK * FA_D; i += FA_THREADS) {
            const int r = i / FA_D, c = i % FA_D;
            tile[r][c] = (r < rows && c < cols) ? src[r * ld + c] : zero;
        }
    }
}

// The mask's [FA_BQ][FA_BK] tile at (q0, k0) (row and column strides `rs`, `cs`; 0 where it
// broadcasts), zero beyond `rows` x `cols`: 16-byte copies where the host found them aligned.
template <typename T>
__device__ __forceinline__ void load_mask_tile(T (*tile)[FA_LD], const T* src, i64 rs, i64 cs, i64 rows, i64 cols, bool vector) {
    if (vector) {
        load_tile(tile, src, rs, rows, (int)min(cols, (i64)FA_BK), true);
        return;
    }
    const T zero = from_f<T>(0.0f);
    for (int i = threadIdx.x; i < FA_BQ * FA_BK; i += FA_THREADS) {
        const int r = i / FA_BK, c = i % FA_BK;
        tile[r][c] = (r < rows && c < cols) ? src[r * rs + c * cs] : zero;
    }
}

// The keys [k0, k0 + FA_BK) of one mask row that every query row reads (its row stride is 0: a
// padding mask over the keys; `src` null: no mask, zeros), as row 0 of a tile (column stride
// `cs`), -inf beyond `cols`: a score plus its key's entry is then the masked score, -inf past
// the last key, with no bound check a score. 16-byte copies where the host found them aligned
// (whole pieces of keys: the host checked sk a multiple of 8). A whole tile would repeat this
// row FA_BQ times in shared memory, which the tables' lookups then lack as L1 cache.
template <typename T>
__device__ __forceinline__ void load_mask_row(T* row, const T* src, i64 cs, i64 cols, bool vector) {
    const T beyond = from_f<T>(-INFINITY), zero = from_f<T>(0.0f);
    if (src && vector) {
        if (threadIdx.x < FA_BK / 8) {
            const int c = threadIdx.x * 8;
            if (c < cols) {
                cp_async16(&row[c], src + c, true);
            } else {
#pragma unroll
                for (int e = 0; e < 8; ++e) row[c + e] = beyond;
            }
        }
        return;
    }
    for (int c = threadIdx.x; c < FA_BK; c += FA_THREADS) row[c] = c >= cols ? beyond : src ? src[c * cs] : zero;
}

// The warp's rows qi[0] and qi[1] of O (row stride `ors`, `dv` columns) from the accumulator,
// each row times its `scale`: pairs of columns as one 32-bit store where `vector`.
template <typename T>
__device__ __forceinline__ void store_output(T* ob, const float (*acc)[4], const float* scale, const i64* qi, i64 sq, int dv, i64 ors, bool vector) {
    const int t4 = threadIdx.x % 4;
#pragma unroll
    for (int j = 0; j < FA_D / 8; ++j) {
        const int col = j * 8 + 2 * t4;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            if (qi[h] >= sq || col >= dv) continue;
            T* dst = ob + qi[h] * ors + col;
            const float x0 = acc[j][2 * h] * scale[h], x1 = acc[j][2 * h + 1] * scale[h];
            if (vector) {
                *reinterpret_cast<unsigned*>(dst) = Mma<T>::pack(x0, x1);
            } else {
                dst[0] = from_f<T>(x0);
                if (col + 1 < dv) dst[1] = from_f<T>(x1);
            }
        }
    }
}

// The maximum of rows g and g + 8 over `s` and `m` (the quad's columns too).
__device__ __forceinline__ void rows_max(const float (*s)[4], float* m) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float x = m[h];
#pragma unroll
        for (int j = 0; j < FA_BK / 8; ++j) x = fmaxf(x, fmaxf(s[j][2 * h], s[j][2 * h + 1]));
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
        m[h] = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
    }
}

// 1 / the row's sum over its quad, NaN where every score is -inf (as expf(-inf - -inf) makes
// the unfused softmax's).
__device__ __forceinline__ void reciprocal_sums(const float* sum, const float* m, float* inv) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float x = sum[h];
        x += __shfl_xor_sync(0xffffffffu, x, 1);
        x += __shfl_xor_sync(0xffffffffu, x, 2);
        inv[h] = m[h] == -INFINITY ? __int_as_float(0x7fc00000) : 1.0f / x;
    }
}

// A warp's 16 rows of products against 64 keys (`s`, the mma accumulator's layout) as the
// unfused path feeds its softmax: each product times `alpha` rounded to T, through the scores'
// grids, plus the mask (`mt`, the keys' tile); keys at or beyond `keys` are -inf. The grids'
// ties take the exact path after the others.
template <typename T>
__device__ __forceinline__ void leveled_products(float (*s)[4], T (*mt)[FA_LD], int keys, float alpha, bool has_mask, const LeveledSoftmax& lv) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
    unsigned ties = 0;
#pragma unroll
    for (int j = 0; j < FA_BK / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            float x = to_f(from_f<T>(__fmul_rn(s[j][e], alpha)));
            if (lv.on & 3) {
                bool decided;
                const float v = lv.scores.fast(x, decided);
                ties |= (unsigned)!decided << (4 * j + e);
                x = decided ? v : x;
            }
            s[j][e] = x;
        }
    }
    if (ties) {
#pragma unroll
        for (int j = 0; j < FA_BK / 8; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                if (ties >> (4 * j + e) & 1) s[j][e] = exactly(lv.scores, s[j][e]);
            }
        }
    }
#pragma unroll
    for (int j = 0; j < FA_BK / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int col = j * 8 + 2 * t4 + (e & 1);
            float x = s[j][e];
            if (has_mask) x += to_f(mt[warp * 16 + g + (e / 2) * 8][col]);
            s[j][e] = col < keys ? x : -INFINITY;
        }
    }
}


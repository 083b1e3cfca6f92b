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
#include "common.cuh"
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
        // S = Q·Kᵀ: 16 rows x 64 keys, 8 key tiles.
        float s[FA_BK / 8][4];
#pragma unroll
        for (int j = 0; j < FA_BK / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
        for (int c = 0; c < FA_D / 16; ++c) {
            if (c >= d_chunks) break;
#pragma unroll
            for (int j = 0; j < FA_BK / 16; ++j) {
                unsigned b[4];
                ldmatrix_x4(&ks[cur][j * 16 + (lane % 8) + (lane / 16) * 8][c * 16 + ((lane / 8) % 2) * 8], b);
                Mma<T>::run(s[2 * j], qf[c], b[0], b[1]);
                Mma<T>::run(s[2 * j + 1], qf[c], b[2], b[3]);
            }
        }
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
        // O += P·V: V's rows are keys, read transposed into B fragments, 16 columns at a time.
#pragma unroll
        for (int c = 0; c < FA_BK / 16; ++c) {
#pragma unroll
            for (int j = 0; j < FA_D / 16; ++j) {
                if (j >= dv_chunks) break;
                unsigned b[4];
                ldmatrix_x4_trans(&vs[cur][c * 16 + (lane % 8) + ((lane / 8) % 2) * 8][j * 16 + (lane / 16) * 8], b);
                Mma<T>::run(acc[2 * j], pf[c], b[0], b[1]);
                Mma<T>::run(acc[2 * j + 1], pf[c], b[2], b[3]);
            }
        }
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
#pragma unroll
    for (int j = 0; j < FA_D / 8; ++j) {
        const int col = j * 8 + 2 * t4;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            if (qi[h] >= sq || col >= dv) continue;
            T* dst = ob + qi[h] * ors + col;
            const float x0 = acc[j][2 * h] * inv[h], x1 = acc[j][2 * h + 1] * inv[h];
            if (vector) {
                *reinterpret_cast<unsigned*>(dst) = Mma<T>::pack(x0, x1);
            } else {
                dst[0] = from_f<T>(x0);
                if (col + 1 < dv) dst[1] = from_f<T>(x1);
            }
        }
    }
}

#define FA_KERNEL(suffix, T) \
    extern "C" __global__ void __launch_bounds__(FA_THREADS) flash_attention_##suffix(i64 sq, i64 sk, int d, int dv, i64 heads, i64 q_tiles, \
        Layout st, float scale, int flags, const T* q, const T* k, const T* v, const T* mask, T* o) { \
        flash_attention<T>(sq, sk, d, dv, heads, q_tiles, st, scale, flags, q, k, v, mask, o); \
    }

FA_KERNEL(f16, __half)
FA_KERNEL(bf16, __nv_bfloat16)

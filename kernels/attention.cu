// Fused scaled-dot-product attention, flash-attention style: softmax(scale · Q·Kᵀ + mask) · V
// without writing the scores to memory. One block of four warps takes 64 query rows of one
// (outer, head) pair and walks the keys 32 at a time: Q·Kᵀ and P·V on tensor cores (wmma, 16-bit
// inputs, f32 accumulation), an online softmax (running max and sum per row) in f32 between them.
// Head dims up to 64. The host (kiln-cuda ops/attention.rs) passes the element strides in a
// Layout (common.cuh) used as a parameter block: stride[0] = q, k, v, o per outer index and per
// head (0 where an operand broadcasts), stride[1][0..4) = the mask's outer, head, row, column.
#include "common.cuh"
#include <mma.h>
using namespace nvcuda;

#define FA_BQ 64
#define FA_BK 32
#define FA_DMAX 64
#define FA_WARPS 4
// Row strides of the per-warp tiles, padded so the rows of one column fall in different banks.
#define FA_SS_LD (FA_BK + 4)
#define FA_PS_LD (FA_BK + 8)
#define FA_OS_LD (FA_DMAX + 4)

template <typename T>
__device__ void flash_attention(i64 sq, i64 sk, int d, int dv, i64 heads, i64 q_tiles, const Layout& st, float scale,
                                int has_mask, int key_transposed, int zero_nan_rows, const T* q, const T* k, const T* v, const T* mask, T* o) {
    __shared__ __align__(32) T qs[FA_BQ][FA_DMAX];
    __shared__ __align__(32) T ks[FA_BK][FA_DMAX];
    __shared__ __align__(32) T vs[FA_BK][FA_DMAX];
    __shared__ __align__(32) float ss[FA_WARPS][16][FA_SS_LD];
    __shared__ __align__(32) T ps[FA_WARPS][16][FA_PS_LD];
    __shared__ __align__(32) float os[FA_WARPS][16][FA_OS_LD];
    __shared__ float row_max[FA_BQ], row_sum[FA_BQ];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const i64 tile = blockIdx.x % q_tiles, bh = blockIdx.x / q_tiles;
    const i64 outer = bh / heads, head = bh % heads, q0 = tile * FA_BQ;
    const int d16 = (d + 15) / 16 * 16, dv16 = (dv + 15) / 16 * 16;
    const T* qb = q + outer * st.stride[0][0] + head * st.stride[0][1];
    const T* kb = k + outer * st.stride[0][2] + head * st.stride[0][3];
    const T* vb = v + outer * st.stride[0][4] + head * st.stride[0][5];
    T* ob = o + outer * st.stride[0][6] + head * st.stride[0][7];
    const T* mb = has_mask ? mask + outer * st.stride[1][0] + head * st.stride[1][1] : mask;
    const T zero = from_f<T>(0.0f);

    for (int i = threadIdx.x; i < FA_BQ * FA_DMAX; i += blockDim.x) {
        int r = i / FA_DMAX, c = i % FA_DMAX;
        qs[r][c] = (q0 + r < sq && c < d) ? qb[(q0 + r) * d + c] : zero;
    }
    for (int i = threadIdx.x; i < FA_WARPS * 16 * FA_OS_LD; i += blockDim.x) (&os[0][0][0])[i] = 0.0f;
    for (int i = threadIdx.x; i < FA_BQ; i += blockDim.x) { row_max[i] = -INFINITY; row_sum[i] = 0.0f; }

    for (i64 k0 = 0; k0 < sk; k0 += FA_BK) {
        __syncthreads();  // the previous step is done with ks / vs (and the first step sees qs)
        for (int i = threadIdx.x; i < FA_BK * FA_DMAX; i += blockDim.x) {
            int r = i / FA_DMAX, c = i % FA_DMAX;
            bool in = k0 + r < sk;
            ks[r][c] = (in && c < d) ? (key_transposed ? kb[(i64)c * sk + k0 + r] : kb[(k0 + r) * d + c]) : zero;
            vs[r][c] = (in && c < dv) ? vb[(k0 + r) * dv + c] : zero;
        }
        __syncthreads();
        // S (16 x 32 per warp) = Q rows of this warp · K block ᵀ.
        for (int j = 0; j < FA_BK / 16; ++j) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.0f);
            for (int kk = 0; kk < d16; kk += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b;
                wmma::load_matrix_sync(a, &qs[warp * 16][kk], FA_DMAX);
                wmma::load_matrix_sync(b, &ks[j * 16][kk], FA_DMAX);
                wmma::mma_sync(acc, a, b, acc);
            }
            wmma::store_matrix_sync(&ss[warp][0][j * 16], acc, FA_SS_LD, wmma::mem_row_major);
        }
        __syncwarp();
        // Online softmax, two lanes per row (16 of the 32 keys each): every row at once.
        {
            const int r = lane >> 1, half = lane & 1, row = warp * 16 + r;
            const i64 qi = q0 + row;
            float s[16];
            float local_max = -INFINITY;
#pragma unroll
            for (int j = 0; j < 16; ++j) {
                const int c = half * 16 + j;
                const i64 kj = k0 + c;
                float x = -INFINITY;
                if (kj < sk) {
                    x = ss[warp][r][c] * scale;
                    if (has_mask && qi < sq) x += to_f(mb[qi * st.stride[1][2] + kj * st.stride[1][3]]);
                }
                s[j] = x;
                local_max = fmaxf(local_max, x);
            }
            const float m_old = row_max[row];
            const float m_new = fmaxf(m_old, fmaxf(local_max, __shfl_xor_sync(0xffffffffu, local_max, 1)));
            float local_sum = 0.0f;
#pragma unroll
            for (int j = 0; j < 16; ++j) {
                const float e = (m_new == -INFINITY) ? 0.0f : __expf(s[j] - m_new);
                ps[warp][r][half * 16 + j] = from_f<T>(e);
                local_sum += e;
            }
            const float sum = local_sum + __shfl_xor_sync(0xffffffffu, local_sum, 1);
            const float corr = (m_old == -INFINITY) ? 0.0f : __expf(m_old - m_new);
            for (int c = half; c < dv16; c += 2) os[warp][r][c] *= corr;
            __syncwarp();
            if (half == 0) {
                row_max[row] = m_new;
                row_sum[row] = row_sum[row] * corr + sum;
            }
        }
        __syncwarp();
        // O (16 x dv per warp) += P · V block.
        for (int j = 0; j < dv16 / 16; ++j) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::load_matrix_sync(acc, &os[warp][0][j * 16], FA_OS_LD, wmma::mem_row_major);
            for (int kk = 0; kk < FA_BK; kk += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b;
                wmma::load_matrix_sync(a, &ps[warp][0][kk], FA_PS_LD);
                wmma::load_matrix_sync(b, &vs[kk][j * 16], FA_DMAX);
                wmma::mma_sync(acc, a, b, acc);
            }
            wmma::store_matrix_sync(&os[warp][0][j * 16], acc, FA_OS_LD, wmma::mem_row_major);
        }
        __syncwarp();
    }
    for (int i = lane; i < 16 * dv; i += 32) {
        const int r = i / dv, c = i % dv;
        const i64 qi = q0 + warp * 16 + r;
        const float sum = row_sum[warp * 16 + r];
        // A row with every score masked (sum 0) or a NaN score: NaN, or 0 when the graph zeroed it.
        const float value = (zero_nan_rows && !(sum > 0.0f)) ? 0.0f : os[warp][r][c] / sum;
        if (qi < sq) ob[qi * dv + c] = from_f<T>(value);
    }
}

#define FA_KERNEL(suffix, T) \
    extern "C" __global__ void __launch_bounds__(128) flash_attention_##suffix(i64 sq, i64 sk, int d, int dv, i64 heads, i64 q_tiles, \
        Layout st, float scale, int has_mask, int key_transposed, int zero_nan_rows, const T* q, const T* k, const T* v, \
        const T* mask, T* o) { \
        flash_attention<T>(sq, sk, d, dv, heads, q_tiles, st, scale, has_mask, key_transposed, zero_nan_rows, q, k, v, mask, o); \
    }

FA_KERNEL(f16, __half)
FA_KERNEL(bf16, __nv_bfloat16)

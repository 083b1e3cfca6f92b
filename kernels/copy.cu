// Data movement by element width (u8/u16/u32/u64 = 1/2/4/8 bytes): strided copies (transpose,
// slice, expand, concatenation), gathers, nearest resize; and dtype casts.
#include "common.cuh"

// out[layout operand 1 offset of i] = in[layout operand 0 offset of i] for every index i of shape.
template <typename T>
__device__ void strided_copy(i64 n, Layout l, const T* in, T* out) {
    KILN_GRID_LOOP(i, n) { out[operand_offset(l, 1, i)] = in[operand_offset(l, 0, i)]; }
}

// A batched 2-D transpose through shared memory: dim a (contiguous in the output) and dim b
// (contiguous in the input) in 32 x 32 tiles, so both the reads and the writes of a warp are
// contiguous. l holds the other (batch) dims: operand 0 the input, 1 the output.
template <typename T>
__device__ void transpose_tiled(i64 batch, Layout l, int len_a, int len_b, i64 in_stride_a, i64 out_stride_b, const T* in, T* out) {
    __shared__ T tile[32][33];
    const int tiles_a = (len_a + 31) / 32, tiles = tiles_a * ((len_b + 31) / 32);
    const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
    for (i64 w = blockIdx.x; w < batch * tiles; w += gridDim.x) {
        const int t = (int)(w % tiles);
        const i64 z = w / tiles;
        const int a0 = (t % tiles_a) * 32, b0 = (t / tiles_a) * 32;
        const i64 in_base = operand_offset(l, 0, z), out_base = operand_offset(l, 1, z);
        for (int j = ty; j < 32; j += blockDim.x / 32) {
            const int a = a0 + j, b = b0 + tx;
            if (a < len_a && b < len_b) tile[j][tx] = in[in_base + (i64)a * in_stride_a + b];
        }
        __syncthreads();
        for (int j = ty; j < 32; j += blockDim.x / 32) {
            const int b = b0 + j, a = a0 + tx;
            if (a < len_a && b < len_b) out[out_base + (i64)b * out_stride_b + a] = tile[tx][j];
        }
        __syncthreads();
    }
}

// ONNX Gather on one axis: data viewed as [outer, axis_len, inner], indices (i64, may be
// negative) of count n_idx; out is [outer, n_idx, inner]. An index out of range writes 0 and
// raises *error (checked by the host after the layer).
template <typename T>
__device__ void gather(i64 outer, i64 axis_len, i64 n_idx, i64 inner, const T* data, const i64* idx, T* out, int* error) {
    i64 n = outer * n_idx * inner;
    KILN_GRID_LOOP(i, n) {
        i64 c = i % inner;
        i64 j = (i / inner) % n_idx;
        i64 o = i / (inner * n_idx);
        i64 k = idx[j];
        if (k < 0) k += axis_len;
        if (k < 0 || k >= axis_len) { out[i] = T(0); atomicExch(error, 1); continue; }
        out[i] = data[(o * axis_len + k) * inner + c];
    }
}

// Gather of whole rows of 16-byte words (the host checks a row of `inner` elements is a whole
// number of words and the pointers 16-byte aligned): a warp a row, each lane copying words, where
// `gather` divided its element index three times per element (an embedding lookup of BERT-base
// at b32 took 41 µs on an H200 for 6.3 MB). Out-of-range indices write zeros and set `error`, as
// `gather` does.
extern "C" __global__ void gather_rows_v16(i64 rows, i64 n_idx, i64 axis_len, i64 words, const uint4* data, const i64* idx, uint4* out, int* error) {
    const unsigned lane = threadIdx.x % 32, warps = blockDim.x / 32;
    for (i64 r = (i64)blockIdx.x * warps + threadIdx.x / 32; r < rows; r += (i64)gridDim.x * warps) {
        const i64 outer = r / n_idx;
        i64 k = idx[r - outer * n_idx];
        if (k < 0) k += axis_len;
        uint4* dst = out + r * words;
        if (k < 0 || k >= axis_len) {
            for (i64 c = lane; c < words; c += 32) dst[c] = make_uint4(0, 0, 0, 0);
            if (lane == 0) atomicExch(error, 1);
            continue;
        }
        const uint4* src = data + (outer * axis_len + k) * words;
        for (i64 c = lane; c < words; c += 32) dst[c] = src[c];
    }
}

// Nearest resize, asymmetric coordinates, floor rounding: in_d = min(floor(out_d / scale_d), in_len_d - 1).
// Layout: shape = output shape, stride[0] = input strides, stride[1][d] = input dim length.
template <typename T>
__device__ void resize_nearest(i64 n, Layout l, const float* scales, const T* in, T* out) {
    KILN_GRID_LOOP(i, n) {
        i64 rem = i, off = 0;
        for (int d = l.rank - 1; d >= 0; --d) {
            i64 o = rem % l.shape[d];
            rem /= l.shape[d];
            i64 s = (i64)floorf((float)o / scales[d]);
            if (s > l.stride[1][d] - 1) s = l.stride[1][d] - 1;
            off += s * l.stride[0][d];
        }
        out[i] = in[off];
    }
}

#define MOVE_KERNELS(suffix, T) \
    extern "C" __global__ void transpose_tiled_##suffix(i64 batch, Layout l, int la, int lb, i64 sa, i64 sb, const T* in, T* out) { transpose_tiled(batch, l, la, lb, sa, sb, in, out); } \
    extern "C" __global__ void strided_copy_##suffix(i64 n, Layout l, const T* in, T* out) { strided_copy(n, l, in, out); } \
    extern "C" __global__ void gather_##suffix(i64 outer, i64 axis_len, i64 n_idx, i64 inner, const T* d, const i64* idx, T* o, int* e) { gather(outer, axis_len, n_idx, inner, d, idx, o, e); } \
    extern "C" __global__ void resize_nearest_##suffix(i64 n, Layout l, const float* s, const T* in, T* out) { resize_nearest(n, l, s, in, out); }

MOVE_KERNELS(u8, unsigned char)
MOVE_KERNELS(u16, unsigned short)
MOVE_KERNELS(u32, unsigned int)
MOVE_KERNELS(u64, u64)
// 16-byte units: the host widens copies whose innermost dim is contiguous on both sides.
extern "C" __global__ void strided_copy_u128(i64 n, Layout l, const uint4* in, uint4* out) { strided_copy(n, l, in, out); }

// Casts go through double for integers (exact for i32, and i64 up to 2^53) and float for floats.
__device__ __forceinline__ double load_d(float x) { return x; }
__device__ __forceinline__ double load_d(__half x) { return __half2float(x); }
__device__ __forceinline__ double load_d(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ double load_d(int x) { return x; }
__device__ __forceinline__ double load_d(i64 x) { return (double)x; }
__device__ __forceinline__ double load_d(signed char x) { return x; }
__device__ __forceinline__ double load_d(unsigned char x) { return x; }

template <typename T> __device__ __forceinline__ T store_d(double x);
template <> __device__ __forceinline__ float store_d<float>(double x) { return (float)x; }
template <> __device__ __forceinline__ __half store_d<__half>(double x) { return __float2half_rn((float)x); }
template <> __device__ __forceinline__ __nv_bfloat16 store_d<__nv_bfloat16>(double x) { return __float2bfloat16_rn((float)x); }
// Float to integer truncates toward zero and saturates; NaN gives 0.
template <> __device__ __forceinline__ int store_d<int>(double x) { return x != x ? 0 : x >= 2147483647.0 ? 2147483647 : x <= -2147483648.0 ? (-2147483647 - 1) : (int)x; }
template <> __device__ __forceinline__ i64 store_d<i64>(double x) { return x != x ? 0 : x >= 9.2233720368547758e18 ? 0x7fffffffffffffffLL : x <= -9.2233720368547758e18 ? (-0x7fffffffffffffffLL - 1) : (i64)x; }
template <> __device__ __forceinline__ signed char store_d<signed char>(double x) { return x != x ? 0 : x >= 127.0 ? 127 : x <= -128.0 ? -128 : (signed char)x; }
template <> __device__ __forceinline__ unsigned char store_d<unsigned char>(double x) { return x != x ? 0 : x >= 255.0 ? 255 : x <= 0.0 ? 0 : (unsigned char)x; }

template <typename A, typename B>
__device__ void cast(i64 n, const A* x, B* y) {
    KILN_GRID_LOOP(i, n) { y[i] = store_d<B>(load_d(x[i])); }
}
// To bool: nonzero is true (NaN too).
template <typename A>
__device__ void cast_to_bool(i64 n, const A* x, unsigned char* y) {
    KILN_GRID_LOOP(i, n) { double v = load_d(x[i]); y[i] = v != 0.0; }
}
// i64 to i32 wraps (two's complement), as the cpu oracle does.
extern "C" __global__ void cast_i64_i32(i64 n, const i64* x, int* y) { KILN_GRID_LOOP(i, n) { y[i] = (int)(unsigned int)(u64)x[i]; } }
extern "C" __global__ void cast_i32_i64(i64 n, const int* x, i64* y) { KILN_GRID_LOOP(i, n) { y[i] = x[i]; } }

// Between f32 and the 16-bit floats four elements per access (the host checks n % 4 == 0 and
// the alignment): the same conversions with a quarter of the memory instructions. An FP16
// build's Casts around f32 islands (Q/DQ, normalizations) are bandwidth-bound.
template <typename A, typename B>
__device__ void cast_x4(i64 n4, const A* x, B* y) {
    KILN_GRID_LOOP(i, n4) {
        const Run<A, 4> a = reinterpret_cast<const Run<A, 4>*>(x)[i];
        Run<B, 4> b;
#pragma unroll
        for (int j = 0; j < 4; ++j) b.v[j] = store_d<B>(load_d(a.v[j]));
        reinterpret_cast<Run<B, 4>*>(y)[i] = b;
    }
}
#define CAST_X4(a, A, b, B) extern "C" __global__ void cast_##a##_##b##_x4(i64 n4, const A* x, B* y) { cast_x4(n4, x, y); }
CAST_X4(f32, float, f16, __half) CAST_X4(f16, __half, f32, float)
CAST_X4(f32, float, bf16, __nv_bfloat16) CAST_X4(bf16, __nv_bfloat16, f32, float)

#define CAST(a, A, b, B) extern "C" __global__ void cast_##a##_##b(i64 n, const A* x, B* y) { cast(n, x, y); }
#define CAST_FROM(a, A) \
    CAST(a, A, f32, float) CAST(a, A, f16, __half) CAST(a, A, bf16, __nv_bfloat16) \
    extern "C" __global__ void cast_##a##_bool(i64 n, const A* x, unsigned char* y) { cast_to_bool(n, x, y); }
#define CAST_TO_INT(a, A) CAST(a, A, i32, int) CAST(a, A, i64, i64) CAST(a, A, i8, signed char) CAST(a, A, u8, unsigned char)

CAST_FROM(f32, float) CAST_FROM(f16, __half) CAST_FROM(bf16, __nv_bfloat16)
CAST_FROM(i32, int) CAST_FROM(i64, i64) CAST_FROM(i8, signed char) CAST_FROM(u8, unsigned char) CAST_FROM(bool, unsigned char)
CAST_TO_INT(f32, float) CAST_TO_INT(f16, __half) CAST_TO_INT(bf16, __nv_bfloat16)
CAST_TO_INT(bool, unsigned char)

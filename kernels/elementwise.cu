// Elementwise binary ops with numpy broadcasting, unary ops and activations. The op is a
// run-time code (kiln-cuda's ops::elementwise numbers them) so one kernel per dtype serves all.
#include "common.cuh"
#include "unary.cuh"
#include "binary.cuh"

__device__ __forceinline__ bool compare_float(int op, float a, float b) {
    switch (op) {
    case OP_EQ: return a == b;
    case OP_GT: return a > b;
    case OP_LT: return a < b;
    case OP_GE: return a >= b;
    case OP_LE: return a <= b;
    default: return false;
    }
}

template <typename T>
__device__ void binary(int op, i64 n, Layout l, const T* a, const T* b, T* out) {
    KILN_GRID_LOOP(i, n) {
        float x = to_f(a[operand_offset(l, 0, i)]);
        float y = to_f(b[operand_offset(l, 1, i)]);
        out[i] = from_f<T>(binary_float(op, x, y));
    }
}

// `binary` on 16-byte vectors: n_vec vectors of Vec16<T>::N elements (see load_operand16).
template <typename T>
__device__ void binary_vec(int op, i64 n_vec, Layout l, const T* a, const T* b, T* out) {
    const int N = Vec16<T>::N;
    KILN_GRID_LOOP(v, n_vec) {
        float x[N], y[N];
        load_operand16(l, 0, v * N, a, x);
        load_operand16(l, 1, v * N, b, y);
#pragma unroll
        for (int k = 0; k < N; ++k) x[k] = binary_float(op, x[k], y[k]);
        store16(out + v * N, x);
    }
}

template <typename T>
__device__ void compare(int op, i64 n, Layout l, const T* a, const T* b, unsigned char* out) {
    KILN_GRID_LOOP(i, n) {
        float x = to_f(a[operand_offset(l, 0, i)]);
        float y = to_f(b[operand_offset(l, 1, i)]);
        out[i] = compare_float(op, x, y);
    }
}

// Integer arithmetic wraps (two's complement), as kiln's cpu oracle does.
template <typename T>
__device__ __forceinline__ T binary_int(int op, T a, T b) {
    typedef unsigned long long U;
    switch (op) {
    case OP_ADD: return (T)((U)a + (U)b);
    case OP_SUB: return (T)((U)a - (U)b);
    case OP_MUL: return (T)((U)a * (U)b);
    case OP_MAX: return a > b ? a : b;
    case OP_MIN: return a < b ? a : b;
    default: return 0;
    }
}

template <typename T>
__device__ void binary_integer(int op, i64 n, Layout l, const T* a, const T* b, T* out) {
    KILN_GRID_LOOP(i, n) {
        out[i] = binary_int<T>(op, a[operand_offset(l, 0, i)], b[operand_offset(l, 1, i)]);
    }
}

template <typename T>
__device__ void compare_integer(int op, i64 n, Layout l, const T* a, const T* b, unsigned char* out) {
    KILN_GRID_LOOP(i, n) {
        T x = a[operand_offset(l, 0, i)], y = b[operand_offset(l, 1, i)];
        bool r = op == OP_EQ ? x == y : op == OP_GT ? x > y : op == OP_LT ? x < y : op == OP_GE ? x >= y : x <= y;
        out[i] = r;
    }
}

extern "C" __global__ void binary_f32(int op, i64 n, Layout l, const float* a, const float* b, float* o) { binary(op, n, l, a, b, o); }
extern "C" __global__ void binary_f16(int op, i64 n, Layout l, const __half* a, const __half* b, __half* o) { binary(op, n, l, a, b, o); }
extern "C" __global__ void binary_bf16(int op, i64 n, Layout l, const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* o) { binary(op, n, l, a, b, o); }
extern "C" __global__ void binary_vec_f32(int op, i64 n, Layout l, const float* a, const float* b, float* o) { binary_vec(op, n, l, a, b, o); }
extern "C" __global__ void binary_vec_f16(int op, i64 n, Layout l, const __half* a, const __half* b, __half* o) { binary_vec(op, n, l, a, b, o); }
extern "C" __global__ void binary_vec_bf16(int op, i64 n, Layout l, const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* o) { binary_vec(op, n, l, a, b, o); }
extern "C" __global__ void binary_i32(int op, i64 n, Layout l, const int* a, const int* b, int* o) { binary_integer(op, n, l, a, b, o); }
extern "C" __global__ void binary_i64(int op, i64 n, Layout l, const i64* a, const i64* b, i64* o) { binary_integer(op, n, l, a, b, o); }
extern "C" __global__ void compare_f32(int op, i64 n, Layout l, const float* a, const float* b, unsigned char* o) { compare(op, n, l, a, b, o); }
extern "C" __global__ void compare_f16(int op, i64 n, Layout l, const __half* a, const __half* b, unsigned char* o) { compare(op, n, l, a, b, o); }
extern "C" __global__ void compare_bf16(int op, i64 n, Layout l, const __nv_bfloat16* a, const __nv_bfloat16* b, unsigned char* o) { compare(op, n, l, a, b, o); }
extern "C" __global__ void compare_i32(int op, i64 n, Layout l, const int* a, const int* b, unsigned char* o) { compare_integer(op, n, l, a, b, o); }
extern "C" __global__ void compare_i64(int op, i64 n, Layout l, const i64* a, const i64* b, unsigned char* o) { compare_integer(op, n, l, a, b, o); }

extern "C" __global__ void logic_bool(int op, i64 n, Layout l, const unsigned char* a, const unsigned char* b, unsigned char* o) {
    KILN_GRID_LOOP(i, n) {
        bool x = a[operand_offset(l, 0, i)] != 0, y = b[operand_offset(l, 1, i)] != 0;
        o[i] = op == OP_AND ? (x && y) : op == OP_OR ? (x || y) : (x != y);
    }
}

template <typename T>
__device__ void unary(int op, float alpha, float beta, i64 n, const T* x, T* y) {
    KILN_GRID_LOOP(i, n) { y[i] = from_f<T>(unary_float(op, to_f(x[i]), alpha, beta)); }
}

// `unary` on 16-byte vectors (n_vec of them; both tensors dense and 16-byte aligned). OP < 0
// reads the op at run time; the common activations are instantiated with OP fixed, so the op's
// switch folds away instead of running per element.
template <typename T, int OP>
__device__ void unary_vec_loop(int op, float alpha, float beta, i64 n_vec, const T* x, T* y) {
    const int N = Vec16<T>::N;
    const int code = OP < 0 ? op : OP;
    KILN_GRID_LOOP(v, n_vec) {
        float f[N];
        load16(x + v * N, f);
#pragma unroll
        for (int k = 0; k < N; ++k) f[k] = unary_float(code, f[k], alpha, beta);
        store16(y + v * N, f);
    }
}

template <typename T>
__device__ void unary_vec(int op, float alpha, float beta, i64 n_vec, const T* x, T* y) {
    switch (op) {
    case 0: unary_vec_loop<T, 0>(op, alpha, beta, n_vec, x, y); return;    // relu
    case 1: unary_vec_loop<T, 1>(op, alpha, beta, n_vec, x, y); return;    // sigmoid
    case 2: unary_vec_loop<T, 2>(op, alpha, beta, n_vec, x, y); return;    // tanh
    case 13: unary_vec_loop<T, 13>(op, alpha, beta, n_vec, x, y); return;  // gelu (erf)
    case 14: unary_vec_loop<T, 14>(op, alpha, beta, n_vec, x, y); return;  // gelu (tanh)
    case 17: unary_vec_loop<T, 17>(op, alpha, beta, n_vec, x, y); return;  // swish
    default: unary_vec_loop<T, -1>(op, alpha, beta, n_vec, x, y); return;
    }
}

extern "C" __global__ void unary_vec_f32(int op, float a, float b, i64 n, const float* x, float* y) { unary_vec(op, a, b, n, x, y); }
extern "C" __global__ void unary_vec_f16(int op, float a, float b, i64 n, const __half* x, __half* y) { unary_vec(op, a, b, n, x, y); }
extern "C" __global__ void unary_vec_bf16(int op, float a, float b, i64 n, const __nv_bfloat16* x, __nv_bfloat16* y) { unary_vec(op, a, b, n, x, y); }
extern "C" __global__ void unary_f32(int op, float a, float b, i64 n, const float* x, float* y) { unary(op, a, b, n, x, y); }
extern "C" __global__ void unary_f16(int op, float a, float b, i64 n, const __half* x, __half* y) { unary(op, a, b, n, x, y); }
extern "C" __global__ void unary_bf16(int op, float a, float b, i64 n, const __nv_bfloat16* x, __nv_bfloat16* y) { unary(op, a, b, n, x, y); }


// Arithmetic that reproduces kiln-cpu's f64 oracle bit for bit: storage types widened to
// double, results rounded once to the storage type (f16 / bf16 through an f32 rounded to odd,
// as kiln-cpu's FloatElem::from_f64 does), and products that NVRTC must not fuse with a
// following add (it contracts `a * b + c` into an FMA by default; Rust never does).
#pragma once
#include "common.cuh"

__device__ __forceinline__ double to_d(float x) { return (double)x; }
__device__ __forceinline__ double to_d(double x) { return x; }
__device__ __forceinline__ double to_d(__half x) { return (double)__half2float(x); }
__device__ __forceinline__ double to_d(__nv_bfloat16 x) { return (double)__bfloat162float(x); }

// The f32 nearest to v rounded to odd: truncate, then set the last bit where inexact. Rounding
// that once more to f16 or bf16 gives the correctly rounded result.
__device__ __forceinline__ float f32_round_to_odd(double v) {
    float r = __double2float_rz(v);
    if (r == r && (double)r != v) r = __int_as_float(__float_as_int(r) | 1);
    return r;
}

template <typename T> __device__ __forceinline__ T from_d(double x);
template <> __device__ __forceinline__ float from_d<float>(double x) { return __double2float_rn(x); }
template <> __device__ __forceinline__ double from_d<double>(double x) { return x; }
template <> __device__ __forceinline__ __half from_d<__half>(double x) { return __float2half_rn(f32_round_to_odd(x)); }
template <> __device__ __forceinline__ __nv_bfloat16 from_d<__nv_bfloat16>(double x) { return __float2bfloat16_rn(f32_round_to_odd(x)); }
// 8-bit levels (max pooling between quantized layers): exact in double; out of range saturates,
// so a window of padding only (-inf) gives the type's minimum, as pool.cu's pool_int does.
__device__ __forceinline__ double to_d(signed char x) { return (double)x; }
__device__ __forceinline__ double to_d(unsigned char x) { return (double)x; }
template <> __device__ __forceinline__ signed char from_d<signed char>(double x) { return (signed char)fmin(fmax(x, -128.0), 127.0); }
template <> __device__ __forceinline__ unsigned char from_d<unsigned char>(double x) { return (unsigned char)fmin(fmax(x, 0.0), 255.0); }

// An unfused product (never contracted into an FMA with the add that consumes it).
__device__ __forceinline__ double mul_d(double a, double b) { return __dmul_rn(a, b); }

// Rust's saturating `f64 as i64`: truncation toward zero, NaN gives 0.
__device__ __forceinline__ i64 saturating_i64(double x) {
    if (x != x) return 0;
    if (x >= 9223372036854775807.0) return 0x7fffffffffffffffLL;
    if (x <= -9223372036854775808.0) return (i64)0x8000000000000000ULL;
    return (i64)x;
}

__device__ __forceinline__ i64 saturating_add(i64 a, i64 b) {
    i64 s = (i64)((u64)a + (u64)b);
    // Overflow only when both have one sign and the sum the other.
    if (((a ^ s) & (b ^ s)) < 0) return a < 0 ? (i64)0x8000000000000000ULL : 0x7fffffffffffffffLL;
    return s;
}

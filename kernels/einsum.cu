// Einsum of up to three operands, as kiln-cpu evaluates it (kernels/einsum.rs): in double, the
// product of the operands (in order) summed over the contracted labels' index space in label
// order, the last label fastest, then rounded once to the storage type. One thread per output
// element; the host resolves the equation into two strided index spaces:
//   out: shape = the output's dims, stride[k] = operand k's strides along them;
//   red: shape = the contracted labels' lengths, stride[k] = operand k's strides along them
// (0 where an operand lacks the label or broadcasts it; a repeated label's strides add up: a
// diagonal).
#include "exact.cuh"

__device__ __forceinline__ double to_d(int x) { return (double)x; }
__device__ __forceinline__ double to_d(i64 x) { return (double)x; }
// Rust's saturating float → integer `as`: truncation, NaN gives 0.
template <> __device__ __forceinline__ int from_d<int>(double x) {
    if (x != x) return 0;
    if (x >= 2147483647.0) return 2147483647;
    if (x <= -2147483648.0) return (int)0x80000000u;
    return (int)x;
}
template <> __device__ __forceinline__ i64 from_d<i64>(double x) { return saturating_i64(x); }

template <typename T>
__device__ void einsum(i64 n, i64 terms, Layout out, Layout red, int operands, const T* a, const T* b, const T* c, T* y) {
    const T* ops[3] = {a, b, c};
    KILN_GRID_LOOP(i, n) {
        const T* base[3];
        for (int k = 0; k < operands; ++k) base[k] = ops[k] + operand_offset(out, k, i);
        double sum = 0.0;
        for (i64 j = 0; j < terms; ++j) {
            double product = 1.0;
            for (int k = 0; k < operands; ++k) product = mul_d(product, to_d(base[k][operand_offset(red, k, j)]));
            sum += product;
        }
        y[i] = from_d<T>(sum);
    }
}

#define EINSUM(suffix, T) \
    extern "C" __global__ void einsum_##suffix(i64 n, i64 terms, Layout out, Layout red, int operands, const T* a, const T* b, const T* c, T* y) { \
        einsum(n, terms, out, red, operands, a, b, c, y); \
    }

EINSUM(f32, float)
EINSUM(f16, __half)
EINSUM(bf16, __nv_bfloat16)
EINSUM(f64, double)
EINSUM(i32, int)
EINSUM(i64, i64)

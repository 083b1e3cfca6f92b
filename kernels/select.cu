// Select (ONNX Where): out = cond ? a : b, the three operands broadcast onto the output
// through one Layout (operand 0: cond as bool bytes, 1: a, 2: b). By element width, so every
// storage type shares four kernels.
#include "common.cuh"

template <typename T>
__device__ void select(i64 n, Layout l, const unsigned char* cond, const T* a, const T* b, T* out) {
    KILN_GRID_LOOP(i, n) {
        out[i] = cond[operand_offset(l, 0, i)] ? a[operand_offset(l, 1, i)] : b[operand_offset(l, 2, i)];
    }
}

#define SELECT_KERNEL(suffix, T) \
    extern "C" __global__ void select_##suffix(i64 n, Layout l, const unsigned char* c, const T* a, const T* b, T* out) { select(n, l, c, a, b, out); }

SELECT_KERNEL(u8, unsigned char)
SELECT_KERNEL(u16, unsigned short)
SELECT_KERNEL(u32, unsigned int)
SELECT_KERNEL(u64, u64)

// ParametricReLU: out = x < 0 ? x * slope : x, x and slope broadcast (operands 0 and 1).
template <typename T>
__device__ void prelu(i64 n, Layout l, const T* x, const T* slope, T* out) {
    KILN_GRID_LOOP(i, n) {
        float v = to_f(x[operand_offset(l, 0, i)]);
        out[i] = from_f<T>(v < 0.0f ? v * to_f(slope[operand_offset(l, 1, i)]) : v);
    }
}

#define PRELU_KERNEL(suffix, T) \
    extern "C" __global__ void prelu_##suffix(i64 n, Layout l, const T* x, const T* s, T* out) { prelu(n, l, x, s, out); }

PRELU_KERNEL(f32, float)
PRELU_KERNEL(f16, __half)
PRELU_KERNEL(bf16, __nv_bfloat16)

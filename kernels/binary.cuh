// Binary op codes and the float ops by code, in f32: shared by the elementwise kernels
// (elementwise.cu), the integer and f64 ones (typed.cu, which adds the bitwise codes) and the
// generated pointwise chains (chain.cuh), which fix the code so the switch folds away.
#pragma once

// Binary op codes: must match kiln-cuda's BinaryCode.
#define OP_ADD 0
#define OP_SUB 1
#define OP_MUL 2
#define OP_DIV 3
#define OP_POW 4
#define OP_MAX 5
#define OP_MIN 6
#define OP_EQ 7
#define OP_GT 8
#define OP_LT 9
#define OP_GE 10
#define OP_LE 11
#define OP_AND 12
#define OP_OR 13
#define OP_XOR 14
#define OP_FLOORDIV 15
#define OP_MOD 16
#define OP_FMOD 17

__device__ __forceinline__ float binary_float(int op, float a, float b) {
    switch (op) {
    case OP_ADD: return a + b;
    case OP_SUB: return a - b;
    case OP_MUL: return a * b;
    case OP_DIV: return a / b;
    case OP_POW: return powf(a, b);
    case OP_MAX: return (a != a || b != b) ? __int_as_float(0x7fc00000) : fmaxf(a, b);
    case OP_MIN: return (a != a || b != b) ? __int_as_float(0x7fc00000) : fminf(a, b);
    case OP_FLOORDIV: return floorf(a / b);
    case OP_MOD: { float r = fmodf(a, b); return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r; }
    case OP_FMOD: return fmodf(a, b);
    default: return 0.0f;
    }
}

// Float unary ops and activations by run-time code, in f32: shared by the pointwise kernels
// (elementwise.cu) and the epilogues fused into other kernels (spatial.cu).
#pragma once

// Unary op codes: must match kiln-cuda's UnaryCode.
// The ops models rarely run, out of line: one copy per module. Inlining every case into every
// vectorized epilogue made NVRTC several times slower (a depthwise kernel: 6.8 s -> 1.9 s).
__device__ __noinline__ float unary_float_rare(int op, float x, float alpha, float beta) {
    switch (op) {
    case 4: return x >= 0.0f ? x : alpha * (expf(x) - 1.0f);       // elu
    case 5: return x > 0.0f ? beta * x : beta * alpha * (expf(x) - 1.0f);  // selu (alpha, gamma)
    case 6: return x / (1.0f + fabsf(x));                          // softsign
    case 7: return x > 20.0f ? x : log1pf(expf(x));                // softplus
    case 11: return alpha * tanhf(beta * x);                       // scaled tanh
    case 12: return x > alpha ? x : 0.0f;                          // thresholded relu
    case 15: return fmaxf(0.0f, x) + fminf(0.0f, alpha * (expf(x / alpha) - 1.0f));  // celu
    case 16: return x * tanhf(x > 20.0f ? x : log1pf(expf(x)));   // mish
    case 38: return sinf(x);
    case 39: return cosf(x);
    case 40: return tanf(x);
    case 41: return sinhf(x);
    case 42: return coshf(x);
    case 43: return asinf(x);
    case 44: return acosf(x);
    case 45: return atanf(x);
    case 46: return asinhf(x);
    case 47: return acoshf(x);
    case 48: return atanhf(x);
    default: return __int_as_float(0x7fc00000);
    }
}

// The activations and cheap math that fused epilogues and pointwise chains run, inline.
__device__ __forceinline__ float unary_float(int op, float x, float alpha, float beta) {
    switch (op) {
    case 0: return fmaxf(x, 0.0f) + (x != x ? x : 0.0f);           // relu (NaN propagates)
    case 1: return 1.0f / (1.0f + expf(-x));                       // sigmoid
    case 2: return tanhf(x);
    case 3: return x >= 0.0f ? x : alpha * x;                      // leaky relu
    case 8: return fminf(fmaxf(x, alpha), beta);                   // clip
    case 9: return fminf(fmaxf(alpha * x + beta, 0.0f), 1.0f);     // hard sigmoid
    case 10: return x * fminf(fmaxf(x / 6.0f + 0.5f, 0.0f), 1.0f); // hard swish
    case 13: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));  // gelu (erf)
    case 14: return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));  // gelu (tanh)
    case 17: return x / (1.0f + expf(-x));                         // swish / silu
    case 32: return expf(x);
    case 33: return logf(x);
    case 34: return sqrtf(x);
    case 35: return 1.0f / x;
    case 36: return fabsf(x);
    case 37: return -x;
    case 49: return ceilf(x);
    case 50: return floorf(x);
    case 51: return rintf(x);                                      // round half to even
    case 52: return erff(x);
    case 53: return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : x;        // sign (NaN stays NaN)
    case 54: return x != x ? 0.0f : x;                             // NaN to zero (kiln-internal)
    default: return unary_float_rare(op, x, alpha, beta);
    }
}

// An activation on a run of V lanes: the op's switch taken once per run, with the common ones
// (ReLU, clip / ReLU6, SiLU, hard swish, GELU, sigmoid) inlined with their code fixed, instead of
// once per lane.
template <int V>
__device__ __forceinline__ void activate_run(int act, float alpha, float beta, float* a) {
#define KILN_ACTIVATE(code) \
    for (int k = 0; k < V; ++k) a[k] = unary_float(code, a[k], alpha, beta); \
    return;
    switch (act) {
    case -1: return;
    case 0: KILN_ACTIVATE(0)
    case 1: KILN_ACTIVATE(1)
    case 8: KILN_ACTIVATE(8)
    case 10: KILN_ACTIVATE(10)
    case 13: KILN_ACTIVATE(13)
    case 17: KILN_ACTIVATE(17)
    default: KILN_ACTIVATE(act)
    }
#undef KILN_ACTIVATE
}

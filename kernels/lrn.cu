// LRN across channels (axis 1) as kiln-cpu's norm::lrn: per element the sum of squares over the
// window [c - before, c + after] clipped to the channels, then x / (k + alpha / size * sum)^beta,
// all in double (unfused products), rounded once to the storage type.
#include "exact.cuh"

template <typename T>
__device__ void lrn(i64 n, i64 channels, i64 inner, i64 before, i64 after, i64 size, i64 alpha_bits, i64 beta_bits, i64 k_bits, const T* x, T* y) {
    // Doubles travel as their bits (the launcher passes integers and f32 only).
    const double alpha = __longlong_as_double(alpha_bits), beta = __longlong_as_double(beta_bits), k = __longlong_as_double(k_bits);
    KILN_GRID_LOOP(e, n) {
        const i64 c = (e / inner) % channels;
        const T* lane = x + (e - c * inner);  // channel 0 of this (o, j)
        const i64 lo = c > before ? c - before : 0;
        const i64 hi = c + after < channels - 1 ? c + after : channels - 1;
        double sum = 0.0;
        for (i64 ch = lo; ch <= hi; ++ch) {
            const double v = to_d(lane[ch * inner]);
            sum = __dadd_rn(sum, mul_d(v, v));
        }
        const double base = __dadd_rn(k, mul_d(alpha / (double)size, sum));
        y[e] = from_d<T>(to_d(x[e]) / pow(base, beta));
    }
}

#define LRN(suffix, T) \
    extern "C" __global__ void lrn_##suffix(i64 n, i64 channels, i64 inner, i64 before, i64 after, i64 size, i64 alpha, i64 beta, i64 k, const T* x, T* y) { \
        lrn(n, channels, inner, before, after, size, alpha, beta, k, x, y); \
    }

LRN(f32, float)
LRN(f16, __half)
LRN(bf16, __nv_bfloat16)
LRN(f64, double)

// 2-D convolution on NCHW (1-D runs as H = 1): one thread per output element (pooling is
// kernels/pool.cu's, over any number of axes); depthwise convolution on NHWC with its epilogue.
// Plain direct loops in float: the correct baseline that GEMM/cuDNN tactics are checked against.
#include "common.cuh"
#include "unary.cuh"
#include "depthwise.cuh"

// The accumulator's view of an element: f32 for the float types, the f64 itself for f64 (the
// exact convolution of integers that ONNX's QLinearConv / ConvInteger expansions run).
template <typename Acc, typename T> __device__ __forceinline__ Acc widen(T v) { return to_f(v); }
template <> __device__ __forceinline__ double widen<double, double>(double v) { return v; }
template <typename T> __device__ __forceinline__ T narrow_to(float v) { return from_f<T>(v); }
template <typename T> __device__ __forceinline__ T narrow_to(double v) { return v; }

template <typename T, typename Acc>
__device__ void conv2d(Window p, const T* x, const T* w, const T* bias, T* y) {
    i64 n = p.n * p.oc * p.oh * p.ow;
    i64 cg = p.c / p.groups, ocg = p.oc / p.groups;
    KILN_GRID_LOOP(i, n) {
        i64 ox = i % p.ow, oy = (i / p.ow) % p.oh, co = (i / (p.ow * p.oh)) % p.oc, b = i / (p.ow * p.oh * p.oc);
        i64 g = co / ocg;
        Acc acc = p.kind ? widen<Acc>(bias[co]) : Acc(0);
        for (i64 ci = 0; ci < cg; ++ci) {
            const T* xc = x + ((b * p.c) + g * cg + ci) * p.h * p.w;
            const T* wc = w + (co * cg + ci) * p.kh * p.kw;
            for (i64 ky = 0; ky < p.kh; ++ky) {
                i64 iy = oy * p.sh - p.ph + ky * p.dh;
                if (iy < 0 || iy >= p.h) continue;
                for (i64 kx = 0; kx < p.kw; ++kx) {
                    i64 ix = ox * p.sw - p.pw + kx * p.dw;
                    if (ix < 0 || ix >= p.w) continue;
                    acc += widen<Acc>(xc[iy * p.w + ix]) * widen<Acc>(wc[ky * p.kw + kx]);
                }
            }
        }
        y[i] = narrow_to<T>(acc);
    }
}

// The epilogue of one NHWC run of V channels at `at`: activation, residual, activation.
template <typename T, int V, typename I>
__device__ __forceinline__ void depthwise_store(float* acc, I at, int act1, float alpha1, float beta1, int act2, float alpha2,
                                                float beta2, const T* z, T* y) {
    activate_run<V>(act1, alpha1, beta1, acc);
    if (z) {
        float zv[V];
        load_run<V>(z + at, zv);
#pragma unroll
        for (int k = 0; k < V; ++k) acc[k] += zv[k];
    }
    activate_run<V>(act2, alpha2, beta2, acc);
    store_run<V>(y + at, acc);
}

// Depthwise convolution (groups = input = output channels) on NHWC tensors. Each thread makes
// one output pixel's run of V channels: with V = one 16-byte vector, neighbouring threads
// read neighbouring vectors, and the filter, re-laid [kh][kw][C] (kiln-cuda's
// `depthwise_rsc`), loads its taps as vectors too. Accumulated in f32, then the epilogue in
// one store: bias (p.kind), activation `act1`, residual `z` (NHWC, the output's shape), and
// activation `act2`, each optional (a code < 0 is none, a null pointer no residual).
// (Four pixels per thread with runtime filter sizes measured 2x slower on H100; the row
// kernel below fixes the sizes at compile time and is timed as a tactic of its own.)
template <typename T, int V>
__device__ void depthwise_nhwc(Window p, int act1, float alpha1, float beta1, int act2, float alpha2, float beta2,
                               const T* x, const T* w, const T* bias, const T* z, T* y) {
    const i64 runs = p.c / V;
    const i64 n = p.n * p.oh * p.ow * runs;
    KILN_GRID_LOOP(i, n) {
        const i64 c0 = (i % runs) * V, pixel = i / runs;
        const i64 ox = pixel % p.ow, oy = (pixel / p.ow) % p.oh, b = pixel / (p.ow * p.oh);
        float acc[V];
        if (p.kind) {
            load_run<V>(bias + c0, acc);
        } else {
#pragma unroll
            for (int k = 0; k < V; ++k) acc[k] = 0.0f;
        }
        for (i64 ky = 0; ky < p.kh; ++ky) {
            const i64 iy = oy * p.sh - p.ph + ky * p.dh;
            if (iy < 0 || iy >= p.h) continue;
            for (i64 kx = 0; kx < p.kw; ++kx) {
                const i64 ix = ox * p.sw - p.pw + kx * p.dw;
                if (ix < 0 || ix >= p.w) continue;
                float xv[V], wv[V];
                load_run<V>(x + ((b * p.h + iy) * p.w + ix) * p.c + c0, xv);
                load_run<V>(w + (ky * p.kw + kx) * p.c + c0, wv);
#pragma unroll
                for (int k = 0; k < V; ++k) acc[k] = fmaf(xv[k], wv[k], acc[k]);
            }
        }
        depthwise_store<T, V>(acc, pixel * p.c + c0, act1, alpha1, beta1, act2, alpha2, beta2, z, y);
    }
}

// Depthwise NHWC with a square K×K filter, stride S and dilation 1 fixed at compile time:
// depthwise.cuh's row loop over the filter pre-converted to f32, with the same layouts and
// epilogue as depthwise_nhwc (the activations' switch once per run).
template <typename T, int V, int K, int S, int R>
__device__ __forceinline__ void depthwise_nhwc_rows(Window p, int act1, float alpha1, float beta1, int act2, float alpha2, float beta2,
                                                    const T* x, const float* w, const T* bias, const T* z, T* y) {
    auto start = [&](int c0, float* init) {
        if (p.kind) {
            load_run<V>(bias + c0, init);
        } else {
#pragma unroll
            for (int k = 0; k < V; ++k) init[k] = 0.0f;
        }
    };
    auto finish = [&](float* acc, unsigned at, int) { depthwise_store<T, V>(acc, at, act1, alpha1, beta1, act2, alpha2, beta2, z, y); };
    depthwise_rows<T, V, K, S, R>(p, x, w, start, finish);
}

// The row kernels kiln-cuda launches: `depthwise_nhwc_k{K}s{S}_{suffix}`.
#define DEPTHWISE_ROWS(suffix, T, K, S) \
    extern "C" __global__ void __launch_bounds__(256, K < 7 ? 3 : 2) \
    depthwise_nhwc_k##K##s##S##_##suffix(Window p, int a1, float x1, float y1, int a2, float x2, float y2, \
                                         const T* x, const float* w, const T* b, const T* z, T* y) { \
        depthwise_nhwc_rows<T, Vec16<T>::N, K, S, 4>(p, a1, x1, y1, a2, x2, y2, x, w, b, z, y); \
    }
#define DEPTHWISE_ROW_KERNELS(suffix, T) \
    DEPTHWISE_ROWS(suffix, T, 3, 1) DEPTHWISE_ROWS(suffix, T, 3, 2) DEPTHWISE_ROWS(suffix, T, 5, 1) \
    DEPTHWISE_ROWS(suffix, T, 5, 2) DEPTHWISE_ROWS(suffix, T, 7, 1) DEPTHWISE_ROWS(suffix, T, 7, 2)

#define SPATIAL_KERNELS(suffix, T) \
    extern "C" __global__ void conv2d_##suffix(Window p, const T* x, const T* w, const T* b, T* y) { conv2d<T, float>(p, x, w, b, y); } \
    extern "C" __global__ void depthwise_nhwc_##suffix(Window p, int a1, float x1, float y1, int a2, float x2, float y2, \
                                                      const T* x, const T* w, const T* b, const T* z, T* y) { \
        depthwise_nhwc<T, Vec16<T>::N>(p, a1, x1, y1, a2, x2, y2, x, w, b, z, y); \
    } \
    extern "C" __global__ void depthwise_nhwc1_##suffix(Window p, int a1, float x1, float y1, int a2, float x2, float y2, \
                                                       const T* x, const T* w, const T* b, const T* z, T* y) { \
        depthwise_nhwc<T, 1>(p, a1, x1, y1, a2, x2, y2, x, w, b, z, y); \
    } \
    DEPTHWISE_ROW_KERNELS(suffix, T)

SPATIAL_KERNELS(f32, float)
SPATIAL_KERNELS(f16, __half)
SPATIAL_KERNELS(bf16, __nv_bfloat16)
extern "C" __global__ void conv2d_f64(Window p, const double* x, const double* w, const double* b, double* y) { conv2d<double, double>(p, x, w, b, y); }

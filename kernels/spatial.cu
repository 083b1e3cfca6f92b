// 2-D convolution on NCHW (1-D runs as H = 1): one thread per output element (pooling is
// kernels/pool.cu's, over any number of axes).
// Plain direct loops in float: the correct baseline that GEMM/cuDNN tactics are checked against.
#include "common.cuh"

struct Window {
    i64 n, c, h, w;        // input
    i64 oc, oh, ow;        // output channels and spatial size
    i64 kh, kw;            // window
    i64 sh, sw, dh, dw;    // strides, dilations
    i64 ph, pw;            // leading padding
    i64 groups;
    int kind;              // pooling: 0 max, 1 average; conv: has bias
    int count_excludes_padding;
    i64 pad_end_h, pad_end_w;  // trailing padding (average pooling's divisor counts it)
};

template <typename T>
__device__ void conv2d(Window p, const T* x, const T* w, const T* bias, T* y) {
    i64 n = p.n * p.oc * p.oh * p.ow;
    i64 cg = p.c / p.groups, ocg = p.oc / p.groups;
    KILN_GRID_LOOP(i, n) {
        i64 ox = i % p.ow, oy = (i / p.ow) % p.oh, co = (i / (p.ow * p.oh)) % p.oc, b = i / (p.ow * p.oh * p.oc);
        i64 g = co / ocg;
        float acc = p.kind ? to_f(bias[co]) : 0.0f;
        for (i64 ci = 0; ci < cg; ++ci) {
            const T* xc = x + ((b * p.c) + g * cg + ci) * p.h * p.w;
            const T* wc = w + (co * cg + ci) * p.kh * p.kw;
            for (i64 ky = 0; ky < p.kh; ++ky) {
                i64 iy = oy * p.sh - p.ph + ky * p.dh;
                if (iy < 0 || iy >= p.h) continue;
                for (i64 kx = 0; kx < p.kw; ++kx) {
                    i64 ix = ox * p.sw - p.pw + kx * p.dw;
                    if (ix < 0 || ix >= p.w) continue;
                    acc += to_f(xc[iy * p.w + ix]) * to_f(wc[ky * p.kw + kx]);
                }
            }
        }
        y[i] = from_f<T>(acc);
    }
}

#define SPATIAL_KERNELS(suffix, T) \
    extern "C" __global__ void conv2d_##suffix(Window p, const T* x, const T* w, const T* b, T* y) { conv2d(p, x, w, b, y); }

SPATIAL_KERNELS(f32, float)
SPATIAL_KERNELS(f16, __half)
SPATIAL_KERNELS(bf16, __nv_bfloat16)

// The row loop of kiln's depthwise NHWC kernels (spatial.cu's float ones, int8_depthwise.cu's):
// a square K×K filter, stride S and dilation 1 fixed at compile time; each thread makes R
// neighbouring output pixels of a row for one run of V channels, so an input vector loaded once
// serves every tap that reads it ((R-1)·S + K loads per filter row instead of R·K), and the
// unrolled loops let the loads of a row issue together. Lean by construction, as the kernel is
// issue-bound rather than memory-bound (Nsight Compute on H100: 2,600 instructions per thread
// for 288 FMAs, 25% occupancy at 90 registers): 32-bit indices (the host checks every offset
// fits), the filter pre-converted to f32 ([kh][kw][C], kiln-cuda's `depthwise_rsc_f32`).
//
// The caller's two steps, inlined: `start(c0, v)` writes the V sums' starting values (a bias,
// or zeros), `finish(acc, at, c0)` takes one pixel's V sums, `at` the element offset of its run
// in the NHWC output (pixel · C + c0). Products are f32 FMAs of the inputs as `load_run` widens
// them: exact for 8-bit integers while the sums stay below 2^24.
#pragma once
#include "common.cuh"

template <typename T, int V, int K, int S, int R, typename Start, typename Finish>
__device__ __forceinline__ void depthwise_rows(const Window& p, const T* x, const float* w, Start start, Finish finish) {
    const int c = (int)p.c, h = (int)p.h, wd = (int)p.w, oh = (int)p.oh, ow = (int)p.ow;
    const int runs = c / V, strips = (ow + R - 1) / R;
    const unsigned n = (unsigned)p.n * oh * strips * runs;
    constexpr int COLUMNS = (R - 1) * S + K;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const int c0 = (int)(i % runs) * V;
        const unsigned rest = i / runs;
        const int ox0 = (int)(rest % strips) * R;
        const unsigned row = rest / strips;
        const int oy = (int)(row % oh), b = (int)(row / oh);
        float acc[R][V];
        float init[V];
        start(c0, init);
#pragma unroll
        for (int r = 0; r < R; ++r) {
#pragma unroll
            for (int k = 0; k < V; ++k) acc[r][k] = init[k];
        }
        const int ix0 = ox0 * S - (int)p.pw;
#pragma unroll 1
        for (int ky = 0; ky < K; ++ky) {
            const int iy = oy * S - (int)p.ph + ky;
            if (iy < 0 || iy >= h) continue;
            const T* xrow = x + ((unsigned)(b * h + iy) * wd) * c + c0;
            float wf[K][V];
#pragma unroll
            for (int kx = 0; kx < K; ++kx) load_run<V>(w + (ky * K + kx) * c + c0, wf[kx]);
#pragma unroll
            for (int j = 0; j < COLUMNS; ++j) {
                const int ix = ix0 + j;
                if (ix < 0 || ix >= wd) continue;
                float xv[V];
                load_run<V>(xrow + (unsigned)ix * c, xv);
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const int kx = j - r * S;
                    if (kx < 0 || kx >= K) continue;
#pragma unroll
                    for (int k = 0; k < V; ++k) acc[r][k] = fmaf(xv[k], wf[kx][k], acc[r][k]);
                }
            }
        }
        // One epilogue for the R pixels, not R inlined copies (NVRTC took 6x longer over the
        // file): finish acc[0], then shift the others down a place.
        const unsigned out0 = (row * ow + ox0) * c + c0;
#pragma unroll 1
        for (int r = 0; r < R && ox0 + r < ow; ++r) {
            finish(acc[0], out0 + (unsigned)r * c, c0);
#pragma unroll
            for (int q = 0; q + 1 < R; ++q) {
#pragma unroll
                for (int k = 0; k < V; ++k) acc[q][k] = acc[q + 1][k];
            }
        }
    }
}

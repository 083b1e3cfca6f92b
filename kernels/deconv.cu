// Transposed convolution (ONNX ConvTranspose) over any number of spatial axes, direct: one
// thread per output element gathers every (kernel tap, input cell) pair that lands on it —
// input coordinate i reaches output i * stride + tap * dilation - pre — with groups and an
// optional bias. As kiln-cpu (kernels/conv.rs) accumulates: per tap (first axis slowest) the
// sum over the group's input channels, added to the running value; the bias last; in f32 for
// f32 / f16 / bf16, in double for f64.
// Weights are [C_in, maps / groups, kernel…]; x is [N, C_in, in…]; y is [N, maps, out…].
#include "exact.cuh"

// One spatial axis: input, output and kernel lengths, stride, dilation and leading crop
// (6 i64s per axis, uploaded by the host).
struct DeconvAxis {
    i64 in, out, kernel, stride, dilation, pre;
};

// The type kiln-cpu accumulates in: f32, or f64 for f64 data.
template <typename T> struct Acc { typedef float type; };
template <> struct Acc<double> { typedef double type; };

template <typename T>
__device__ void deconv(i64 n, int spatial, const DeconvAxis* axes, i64 channels, i64 maps, i64 groups, const T* x, const T* w, const T* bias, T* y) {
    typedef typename Acc<T>::type A;
    i64 in_vol = 1, out_vol = 1, k_vol = 1;
    for (int d = 0; d < spatial; ++d) {
        in_vol *= axes[d].in;
        out_vol *= axes[d].out;
        k_vol *= axes[d].kernel;
    }
    const i64 cg = channels / groups, kg = maps / groups;
    KILN_GRID_LOOP(i, n) {
        i64 o[KILN_MAX_RANK];
        i64 rem = i;
        for (int d = spatial - 1; d >= 0; --d) {
            o[d] = rem % axes[d].out;
            rem /= axes[d].out;
        }
        const i64 m = rem % maps, b = rem / maps;
        const i64 g = m / kg, k = m % kg;
        const T* xg = x + (b * channels + g * cg) * in_vol;
        const T* wg = w + (g * cg * kg + k) * k_vol;
        A acc = 0;
        for (i64 t = 0; t < k_vol; ++t) {
            // The tap's coordinates (last axis fastest) and the input cell it reads, if any.
            i64 tr = t, at = 0, scale = 1;
            bool lands = true;
            for (int d = spatial - 1; d >= 0; --d) {
                const DeconvAxis a = axes[d];
                const i64 tap = tr % a.kernel;
                tr /= a.kernel;
                const i64 num = o[d] + a.pre - tap * a.dilation;
                if (num < 0 || num % a.stride != 0 || num / a.stride >= a.in) { lands = false; break; }
                at += (num / a.stride) * scale;
                scale *= a.in;
            }
            if (!lands) continue;
            A s = 0;
            for (i64 ci = 0; ci < cg; ++ci) s += (A)to_d(wg[ci * kg * k_vol + t]) * (A)to_d(xg[ci * in_vol + at]);
            acc += s;
        }
        if (bias) acc += (A)to_d(bias[m]);
        y[i] = from_d<T>((double)acc);
    }
}

#define DECONV(suffix, T) \
    extern "C" __global__ void deconv_##suffix(i64 n, int spatial, const DeconvAxis* axes, i64 channels, i64 maps, i64 groups, const T* x, const T* w, const T* bias, T* y) { \
        deconv(n, spatial, axes, channels, maps, groups, x, w, bias, y); \
    }

DECONV(f32, float)
DECONV(f16, __half)
DECONV(bf16, __nv_bfloat16)
DECONV(f64, double)

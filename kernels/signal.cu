// DFT, Col2Im and Determinant, as kiln-cpu computes them (backends/cpu/src/kernels/signal.rs):
// in double, summed in the cpu's order with unfused products, rounded once to the storage type.
#include "exact.cuh"

// ---- DFT: one thread per output bin (o, k, i), a direct O(n) sum over the signal ----
// The signal is [outer, in_len, inner, parts]; the output [outer, out_len, inner, out_parts].
// `cos_t` / `sin_t` hold the n twiddles the host computed as kiln-cpu does (exact angles).
// Samples past `used` are zero padding; an inverse onesided transform completes the spectrum
// by Hermitian symmetry (X[n-j] = conj(X[j])) for j > n / 2.
template <typename T>
__device__ __forceinline__ void dft_sample(const T* x, i64 base, i64 stride, int parts, i64 used, i64 j, double* re, double* im) {
    if (j < used) {
        *re = to_d(x[base + j * stride]);
        *im = parts == 2 ? to_d(x[base + j * stride + 1]) : 0.0;
    } else {
        *re = 0.0;
        *im = 0.0;
    }
}

template <typename T>
__device__ void dft(i64 total, i64 in_len, i64 out_len, i64 inner, int parts, int out_parts, i64 n, i64 used, int hermitian,
                    double sign, i64 scale_bits, const double* cos_t, const double* sin_t, const T* x, T* y) {
    const double scale = __longlong_as_double(scale_bits);  // a double as its bits (see the launcher)
    KILN_GRID_LOOP(e, total) {
        const i64 i = e % inner;
        const i64 k = (e / inner) % out_len;
        const i64 o = e / (inner * out_len);
        const i64 stride = inner * parts;
        const i64 base = (o * in_len * inner + i) * parts;
        double re = 0.0, im = 0.0;
        for (i64 j = 0; j < n; ++j) {
            double a, b;
            if (hermitian && j >= n / 2 + 1) {
                dft_sample(x, base, stride, parts, used, n - j, &a, &b);
                b = -b;
            } else {
                dft_sample(x, base, stride, parts, used, j, &a, &b);
            }
            const i64 m = (i64)(((u64)j * (u64)k) % (u64)n);
            const double c = cos_t[m], s = mul_d(sign, sin_t[m]);
            re = __dadd_rn(re, __dsub_rn(mul_d(a, c), mul_d(b, s)));
            im = __dadd_rn(im, __dadd_rn(mul_d(a, s), mul_d(b, c)));
        }
        const i64 out = ((o * out_len + k) * inner + i) * out_parts;
        y[out] = from_d<T>(mul_d(re, scale));
        if (out_parts == 2) y[out + 1] = from_d<T>(mul_d(im, scale));
    }
}

// ---- Col2Im: one thread per image pixel (n, c, pixel) gathers, block offset by block offset
// (the cpu's order of additions), the one column whose block lands on it ----
// `axes` holds per spatial axis: image length, block length, block-grid length, stride,
// dilation, leading pad (6 i64s each).
struct Col2ImAxis {
    i64 image, block, grid, stride, dilation, pad;
};

template <typename T>
__device__ void col2im(i64 total, int spatial, const Col2ImAxis* axes, i64 channels, i64 per_channel, i64 columns, const T* x, T* y) {
    i64 pixels = 1;
    for (int d = 0; d < spatial; ++d) pixels *= axes[d].image;
    KILN_GRID_LOOP(e, total) {
        const i64 nc = e / pixels;
        i64 p[KILN_MAX_RANK];
        i64 rem = e % pixels;
        for (int d = spatial - 1; d >= 0; --d) {
            p[d] = rem % axes[d].image;
            rem /= axes[d].image;
        }
        const T* rows = x + nc * per_channel * columns;  // (n * C + c) * per_channel rows of columns
        double acc = 0.0;
        for (i64 k = 0; k < per_channel; ++k) {
            i64 kr = k, l = 0, scale = 1;
            bool lands = true;
            for (int d = spatial - 1; d >= 0; --d) {
                const Col2ImAxis a = axes[d];
                const i64 offset = kr % a.block;
                kr /= a.block;
                const i64 num = p[d] + a.pad - offset * a.dilation;
                if (num < 0 || num % a.stride != 0 || num / a.stride >= a.grid) { lands = false; break; }
                l += (num / a.stride) * scale;
                scale *= a.grid;
            }
            if (lands) acc = __dadd_rn(acc, to_d(rows[k * columns + l]));
        }
        y[e] = from_d<T>(acc);
    }
}

// ---- Determinant: one thread per matrix, LU with partial pivoting in a double scratch copy
// (the pivot is the last row of largest |a| in total order, as Rust's max_by) ----
template <typename T>
__device__ void determinant(i64 count, i64 n, const T* x, double* scratch, T* y) {
    KILN_GRID_LOOP(mi, count) {
        double* a = scratch + mi * n * n;
        for (i64 q = 0; q < n * n; ++q) a[q] = to_d(x[mi * n * n + q]);
        double det = 1.0;
        for (i64 col = 0; col < n; ++col) {
            i64 pivot = col;
            // |v| as bits: total order of non-negative doubles (a NaN above every number).
            i64 best = __double_as_longlong(fabs(a[col * n + col]));
            for (i64 r = col + 1; r < n; ++r) {
                const i64 v = __double_as_longlong(fabs(a[r * n + col]));
                if (v >= best) { best = v; pivot = r; }
            }
            if (a[pivot * n + col] == 0.0) { det = 0.0; break; }
            if (pivot != col) {
                for (i64 k = 0; k < n; ++k) {
                    const double t = a[pivot * n + k];
                    a[pivot * n + k] = a[col * n + k];
                    a[col * n + k] = t;
                }
                det = -det;
            }
            const double pv = a[col * n + col];
            det = mul_d(det, pv);
            for (i64 row = col + 1; row < n; ++row) {
                const double factor = a[row * n + col] / pv;
                for (i64 k = col; k < n; ++k) a[row * n + k] = __dsub_rn(a[row * n + k], mul_d(factor, a[col * n + k]));
            }
        }
        y[mi] = from_d<T>(det);
    }
}

#define SIGNAL(suffix, T) \
    extern "C" __global__ void dft_##suffix(i64 total, i64 in_len, i64 out_len, i64 inner, int parts, int out_parts, i64 n, i64 used, \
                                            int hermitian, int inverse, i64 scale_bits, const double* cos_t, const double* sin_t, const T* x, T* y) { \
        dft(total, in_len, out_len, inner, parts, out_parts, n, used, hermitian, inverse ? 1.0 : -1.0, scale_bits, cos_t, sin_t, x, y); \
    } \
    extern "C" __global__ void col2im_##suffix(i64 total, int spatial, const Col2ImAxis* axes, i64 channels, i64 per_channel, i64 columns, const T* x, T* y) { \
        col2im(total, spatial, axes, channels, per_channel, columns, x, y); \
    } \
    extern "C" __global__ void det_##suffix(i64 count, i64 n, const T* x, double* scratch, T* y) { determinant(count, n, x, scratch, y); }

SIGNAL(f32, float)
SIGNAL(f16, __half)
SIGNAL(bf16, __nv_bfloat16)
SIGNAL(f64, double)

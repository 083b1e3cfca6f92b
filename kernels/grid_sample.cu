// ONNX GridSample over any number of spatial axes, in double exactly as kiln-cpu's oracle
// (kernels/sampling.rs): the same coordinate arithmetic, reflection fold, tap order and sum.
// One thread per output element (n, c, point); the grid arrives as double.
// Layout: rank = spatial axes, shape[d] = the input's length along spatial axis d.
#include "exact.cuh"

#define GS_NEAREST 0
#define GS_LINEAR 1
#define GS_CUBIC 2
#define GS_ZEROS 0
#define GS_BORDER 1
#define GS_REFLECTION 2

// One spatial axis of the input and the coordinates that the grid's -1 and 1 map onto.
struct SampledAxis {
    i64 len;
    double min, max;
};

__device__ __forceinline__ double clamp_d(double x, double lo, double hi) { return x < lo ? lo : (x > hi ? hi : x); }
__device__ __forceinline__ i64 clamp_i(i64 x, i64 lo, i64 hi) { return x < lo ? lo : (x > hi ? hi : x); }

// Folds x into [min, max] by mirroring at the borders.
__device__ double reflect(const SampledAxis& a, double x) {
    const double range = a.max - a.min;
    if (range <= 0.0 || !isfinite(x)) return a.min > 0.0 ? a.min : 0.0;
    double dx, near, far, toward;
    if (x < a.min) {
        dx = a.min - x; near = a.min; far = a.max; toward = 1.0;
    } else if (x > a.max) {
        dx = x - a.max; near = a.max; far = a.min; toward = -1.0;
    } else {
        return x;
    }
    const double n = trunc(dx / range);
    const double r = dx - mul_d(n, range);
    return fmod(n, 2.0) == 0.0 ? near + mul_d(toward, r) : far - mul_d(toward, r);
}

// The cell a tap at integer position i reads; -1 reads zero.
__device__ i64 cell(const SampledAxis& a, i64 i, int padding) {
    if (a.len == 0) return -1;
    const i64 last = a.len - 1;
    switch (padding) {
        case GS_ZEROS: return (i >= 0 && i <= last) ? i : -1;
        case GS_BORDER: return clamp_i(i, 0, last);
        default: return clamp_i(saturating_i64(reflect(a, (double)i)), 0, last);
    }
}

// Keys' cubic convolution weight (a = -0.75) for distances below and above 1.
__device__ __forceinline__ double cubic_near(double x) {
    const double A = -0.75;
    return mul_d(mul_d(mul_d(A + 2.0, x) - (A + 3.0), x), x) + 1.0;
}
__device__ __forceinline__ double cubic_far(double x) {
    const double A = -0.75;
    return mul_d(mul_d(mul_d(A, x) - 5.0 * A, x) + 8.0 * A, x) - 4.0 * A;
}

// The taps (cell, weight) of normalized coordinate g along one axis; returns their count.
__device__ int axis_taps(const SampledAxis& a, double g, int mode, int padding, int align_corners, i64* cells, double* weights) {
    const double len_f = (double)a.len;
    double x = align_corners ? mul_d((g + 1.0) / 2.0, len_f - 1.0) : (mul_d(g + 1.0, len_f) - 1.0) / 2.0;
    if (mode == GS_NEAREST) x = rint(x);
    if (x < a.min || x > a.max) {
        if (padding == GS_BORDER) x = clamp_d(x, 0.0, len_f - 1.0 > 0.0 ? len_f - 1.0 : 0.0);
        else if (padding == GS_REFLECTION) x = reflect(a, x);
    }
    const double fl = floor(x);
    const i64 base = saturating_i64(fl);
    const double t = x - fl;
    if (mode == GS_NEAREST) {
        cells[0] = cell(a, saturating_i64(x), padding);
        weights[0] = 1.0;
        return 1;
    }
    if (mode == GS_LINEAR) {
        cells[0] = cell(a, base, padding);
        weights[0] = 1.0 - t;
        cells[1] = cell(a, saturating_add(base, 1), padding);
        weights[1] = t;
        return 2;
    }
    const double w[4] = {cubic_far(t + 1.0), cubic_near(t), cubic_near(1.0 - t), cubic_far(2.0 - t)};
    for (int k = 0; k < 4; ++k) {
        cells[k] = cell(a, saturating_add(base, (i64)(k - 1)), padding);
        weights[k] = w[k];
    }
    return 4;
}

template <typename T>
__device__ void grid_sample(i64 n, i64 channels, i64 points, Layout l, int mode, int padding, int align_corners, const double* grid, const T* x, T* y) {
    const int spatial = l.rank;
    i64 cells_per_plane = 1;
    for (int d = 0; d < spatial; ++d) cells_per_plane *= l.shape[d];
    KILN_GRID_LOOP(i, n) {
        const i64 pt = i % points, plane = i / points, b = plane / channels;
        const double* coords = grid + (b * points + pt) * spatial;
        i64 cells[KILN_MAX_RANK][4];
        double weights[KILN_MAX_RANK][4];
        i64 stride[KILN_MAX_RANK];
        int ntaps = 1;
        i64 combos = 1, inner = 1;
        for (int d = spatial - 1; d >= 0; --d) {
            SampledAxis a;
            a.len = l.shape[d];
            a.min = align_corners ? 0.0 : -0.5;
            a.max = align_corners ? (double)a.len - 1.0 : (double)a.len - 0.5;
            // The grid lists the innermost axis first.
            ntaps = axis_taps(a, coords[spatial - 1 - d], mode, padding, align_corners, cells[d], weights[d]);
            stride[d] = inner;
            inner *= a.len;
            combos *= ntaps;
        }
        // Every combination of the axes' taps, the first axis slowest (kiln-cpu's order).
        const T* src = x + plane * cells_per_plane;
        double sum = 0.0;
        for (i64 c = 0; c < combos; ++c) {
            i64 rem = c, off = 0;
            int k[KILN_MAX_RANK];
            for (int d = spatial - 1; d >= 0; --d) {
                k[d] = (int)(rem % ntaps);
                rem /= ntaps;
            }
            double w = 1.0;
            bool inside = true;
            for (int d = 0; d < spatial; ++d) {
                const i64 at = cells[d][k[d]];
                if (at < 0) { inside = false; break; }
                off += at * stride[d];
                w *= weights[d][k[d]];
            }
            if (inside) sum += mul_d(to_d(src[off]), w);
        }
        y[i] = from_d<T>(sum);
    }
}

#define GRID_SAMPLE(suffix, T) \
    extern "C" __global__ void grid_sample_##suffix(i64 n, i64 channels, i64 points, Layout l, int mode, int padding, int align, const double* grid, const T* x, T* y) { \
        grid_sample(n, channels, points, l, mode, padding, align, grid, x, y); \
    }

GRID_SAMPLE(f32, float)
GRID_SAMPLE(f16, __half)
GRID_SAMPLE(bf16, __nv_bfloat16)
GRID_SAMPLE(f64, double)

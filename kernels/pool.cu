// Max and average pooling over any number of spatial axes (1-D, 2-D, 3-D …) on N×C×spatial,
// with strides, dilations, asymmetric padding and ceil mode's overhang, as kiln-cpu pools
// (kernels/pool.rs): window cells visited first axis slowest, floats summed in double, max
// propagating NaN, integer max starting from the type's minimum. One thread per output element.
#include "exact.cuh"

// One spatial axis: lengths, window, stride, dilation and leading / trailing padding (7 i64s
// per axis, uploaded by the host).
struct PoolAxis {
    i64 in, out, window, stride, dilation, pre, post;
};

#define POOL_MAX_AXES KILN_MAX_RANK

// The output element's window: per axis its first position and the cells the divisor that
// counts padding includes (positions before the end padding's end; ceil mode's overhang never
// counts). Returns the plane (n·C + c) the element belongs to.
__device__ i64 window_of(i64 i, int spatial, const PoolAxis* axes, i64* start, i64* padded) {
    i64 rem = i;
    *padded = 1;
    for (int d = spatial - 1; d >= 0; --d) {
        const PoolAxis a = axes[d];
        const i64 o = rem % a.out;
        rem /= a.out;
        start[d] = o * a.stride - a.pre;
        i64 counted = 0;
        for (i64 k = 0; k < a.window; ++k) counted += (start[d] + k * a.dilation < a.in + a.post);
        *padded *= counted;
    }
    return rem;
}

// Calls f(offset within the plane) for every window cell inside the input, first axis slowest.
template <typename F>
__device__ void for_each_cell(int spatial, const PoolAxis* axes, const i64* start, F f) {
    i64 k[POOL_MAX_AXES];
    i64 total = 1;
    for (int d = 0; d < spatial; ++d) { k[d] = 0; total *= axes[d].window; }
    for (i64 t = 0; t < total; ++t) {
        i64 off = 0;
        bool inside = true;
        for (int d = 0; d < spatial; ++d) {
            const i64 pos = start[d] + k[d] * axes[d].dilation;
            if (pos < 0 || pos >= axes[d].in) { inside = false; break; }
            off = off * axes[d].in + pos;
        }
        if (inside) f(off);
        // The odometer: the last axis fastest.
        for (int d = spatial - 1; d >= 0; --d) {
            if (++k[d] < axes[d].window) break;
            k[d] = 0;
        }
    }
}

// Floats: max (NaN wins; a window of padding only gives -inf) or the average in double,
// divided by the inside cells or by every cell of the padded extent.
template <typename T>
__device__ void pool_float(i64 n, int spatial, const PoolAxis* axes, int average, int count_excludes_padding, const T* x, T* y) {
    i64 plane_len = 1;
    for (int d = 0; d < spatial; ++d) plane_len *= axes[d].in;
    KILN_GRID_LOOP(i, n) {
        i64 start[POOL_MAX_AXES], padded;
        const T* plane = x + window_of(i, spatial, axes, start, &padded) * plane_len;
        double acc = average ? 0.0 : -INFINITY;
        i64 count = 0;
        for_each_cell(spatial, axes, start, [&](i64 off) {
            const double v = to_d(plane[off]);
            if (average) acc += v;
            else acc = acc != acc ? acc : (v != v || v > acc ? v : acc);
            ++count;
        });
        if (average) acc /= (double)(count_excludes_padding ? count : padded);
        y[i] = from_d<T>(acc);
    }
}

template <typename T> __device__ __forceinline__ T lowest();
template <> __device__ __forceinline__ signed char lowest<signed char>() { return -128; }
template <> __device__ __forceinline__ unsigned char lowest<unsigned char>() { return 0; }
template <> __device__ __forceinline__ short lowest<short>() { return -32768; }
template <> __device__ __forceinline__ unsigned short lowest<unsigned short>() { return 0; }
template <> __device__ __forceinline__ int lowest<int>() { return (int)0x80000000u; }
template <> __device__ __forceinline__ unsigned int lowest<unsigned int>() { return 0; }
template <> __device__ __forceinline__ i64 lowest<i64>() { return (i64)0x8000000000000000ULL; }
template <> __device__ __forceinline__ u64 lowest<u64>() { return 0; }

// Integers: max only (the host rejects integer averages); a window of padding only gives the
// type's minimum, the integer analogue of -inf.
template <typename T>
__device__ void pool_int(i64 n, int spatial, const PoolAxis* axes, const T* x, T* y) {
    i64 plane_len = 1;
    for (int d = 0; d < spatial; ++d) plane_len *= axes[d].in;
    KILN_GRID_LOOP(i, n) {
        i64 start[POOL_MAX_AXES], padded;
        const T* plane = x + window_of(i, spatial, axes, start, &padded) * plane_len;
        T acc = lowest<T>();
        for_each_cell(spatial, axes, start, [&](i64 off) { acc = plane[off] > acc ? plane[off] : acc; });
        y[i] = acc;
    }
}

#define POOL_FLOAT(suffix, T) \
    extern "C" __global__ void pool_##suffix(i64 n, int spatial, const PoolAxis* axes, int average, int excl, const T* x, T* y) { \
        pool_float(n, spatial, axes, average, excl, x, y); \
    }
#define POOL_INT(suffix, T) \
    extern "C" __global__ void pool_##suffix(i64 n, int spatial, const PoolAxis* axes, int average, int excl, const T* x, T* y) { \
        pool_int(n, spatial, axes, x, y); \
    }

POOL_FLOAT(f32, float)
POOL_FLOAT(f16, __half)
POOL_FLOAT(bf16, __nv_bfloat16)
POOL_FLOAT(f64, double)
POOL_INT(i8, signed char)
POOL_INT(u8, unsigned char)
POOL_INT(i16, short)
POOL_INT(u16, unsigned short)
POOL_INT(i32, int)
POOL_INT(u32, unsigned int)
POOL_INT(i64, i64)
POOL_INT(u64, u64)

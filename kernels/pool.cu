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

// The window indices k in [0, window) whose position start + k·dilation lies in [lo, hi),
// as [*first, *end): found by division, so a window of 2^31 cells over a 4-cell axis costs
// 4 steps (kiln::plan::pool::cells_within; the host checks every extent fits in i64/4).
__device__ void cells_within(i64 start, i64 window, i64 dilation, i64 lo, i64 hi, i64* first, i64* end) {
    const i64 f = lo > start ? (lo - start + dilation - 1) / dilation : 0;
    i64 e = hi > start ? (hi - 1 - start) / dilation + 1 : 0;
    e = e < window ? e : window;
    *first = f;
    *end = e > f ? e : f;
}

// The output element's window: per axis the window indices inside the input, [first, end),
// and the product of the cells the divisor that counts padding includes (positions before
// the end padding's end; ceil mode's overhang never counts). Returns the plane (n·C + c).
__device__ i64 window_of(i64 i, int spatial, const PoolAxis* axes, i64* start, i64* first, i64* end, double* padded) {
    i64 rem = i;
    *padded = 1.0;
    for (int d = spatial - 1; d >= 0; --d) {
        const PoolAxis a = axes[d];
        const i64 o = rem % a.out;
        rem /= a.out;
        start[d] = o * a.stride - a.pre;
        cells_within(start[d], a.window, a.dilation, 0, a.in, &first[d], &end[d]);
        i64 pf, pe;
        cells_within(start[d], a.window, a.dilation, start[d], a.in + a.post, &pf, &pe);
        *padded *= (double)(pe - pf);
    }
    return rem;
}

// Calls f(offset within the plane) for every window cell inside the input, first axis slowest.
template <typename F>
__device__ void for_each_cell(int spatial, const PoolAxis* axes, const i64* start, const i64* first, const i64* end, F f) {
    i64 k[POOL_MAX_AXES];
    for (int d = 0; d < spatial; ++d) {
        if (first[d] == end[d]) return;
        k[d] = first[d];
    }
    for (;;) {
        i64 off = 0;
        for (int d = 0; d < spatial; ++d) off = off * axes[d].in + start[d] + k[d] * axes[d].dilation;
        f(off);
        // The odometer: the last axis fastest.
        int d = spatial - 1;
        for (; d >= 0; --d) {
            if (++k[d] < end[d]) break;
            k[d] = first[d];
        }
        if (d < 0) return;
    }
}

// Floats: max (NaN wins; a window of padding only gives -inf) or the average in double,
// divided by the inside cells or by every cell of the padded extent.
template <typename T>
__device__ void pool_float(i64 n, int spatial, const PoolAxis* axes, int average, int count_excludes_padding, const T* x, T* y) {
    i64 plane_len = 1;
    for (int d = 0; d < spatial; ++d) plane_len *= axes[d].in;
    KILN_GRID_LOOP(i, n) {
        i64 start[POOL_MAX_AXES], first[POOL_MAX_AXES], end[POOL_MAX_AXES];
        double padded;
        const T* plane = x + window_of(i, spatial, axes, start, first, end, &padded) * plane_len;
        double acc = average ? 0.0 : -INFINITY;
        i64 count = 0;
        for_each_cell(spatial, axes, start, first, end, [&](i64 off) {
            const double v = to_d(plane[off]);
            if (average) acc += v;
            else acc = acc != acc ? acc : (v != v || v > acc ? v : acc);
            ++count;
        });
        if (average) acc /= count_excludes_padding ? (double)count : padded;
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
        i64 start[POOL_MAX_AXES], first[POOL_MAX_AXES], end[POOL_MAX_AXES];
        double padded;
        const T* plane = x + window_of(i, spatial, axes, start, first, end, &padded) * plane_len;
        T acc = lowest<T>();
        for_each_cell(spatial, axes, start, first, end, [&](i64 off) { acc = plane[off] > acc ? plane[off] : acc; });
        y[i] = acc;
    }
}

#if __CUDA_ARCH__ >= 900
// The lane-wise max of two pairs of 16-bit integers (Hopper's DPX: one instruction).
__device__ __forceinline__ unsigned max_s16x2(unsigned a, unsigned b) {
    unsigned d;
    asm("max.s16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
#endif

// Two bytes of `w` as a pair of 16-bit lanes, by `prmt` selector `s` (a nibble with its top bit
// set replicates the sign of the byte it names: PTX's default mode, which __byte_perm leaves out).
__device__ __forceinline__ unsigned widened_pair(unsigned w, unsigned s) {
    unsigned d;
    asm("prmt.b32 %0, %1, 0, %2;" : "=r"(d) : "r"(w), "r"(s));
    return d;
}

// 2-D float (and 8-bit max) pooling on channels-last N×H×W×C, the layout convolutions leave, with
// ceil mode's overhang, asymmetric padding and dilation, and no conversion to N×C×H×W and
// back. One thread per output pixel and V consecutive channels (the host picks
// V dividing C, and keeps the thread count in int range), so neighbouring threads read
// neighbouring channels and each thread's index arithmetic serves V outputs. Window, padding,
// divisor and results as pool_float: max in float (exact for these types, NaN winning), the
// average summed in double.
// `map` (8-bit max pooling, 16 channels a thread; NULL elsewhere): a table of 256 bytes in
// shared memory that each maximum's byte is looked up in before it is stored, a level map after
// the pooling (the epilogue of a layer headed by it: dequantize, ReLU, quantize) in the same pass.
template <typename T, int V>
__device__ void pool2d_nhwc(int n, int c, int ih, int iw, int oh, int ow, int kh, int kw, int sh, int sw, int dh, int dw,
                            int pad_top, int pad_left, int pad_bottom, int pad_right, int average, int count_excludes_padding,
                            const T* x, T* y, const unsigned char* map = nullptr) {
    const int groups = c / V;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        int rem = i;
        const int group = rem % groups;
        rem /= groups;
        const int ox = rem % ow;
        rem /= ow;
        const int oy = rem % oh;
        const int image = rem / oh;
        const i64 ys = (i64)oy * sh - pad_top, xs = (i64)ox * sw - pad_left;
        i64 yf, ye, xf, xe;
        cells_within(ys, kh, dh, 0, ih, &yf, &ye);
        cells_within(xs, kw, dw, 0, iw, &xf, &xe);
        const T* plane = x + (i64)image * ih * iw * c + group * V;
        T* out = y + (i64)i * V;
        if (average) {
            double acc[V];
#pragma unroll
            for (int v = 0; v < V; ++v) acc[v] = 0.0;
            for (i64 ky = yf; ky < ye; ++ky) {
                const T* row = plane + (ys + ky * dh) * iw * c;
                for (i64 kx = xf; kx < xe; ++kx) {
                    const T* cell = row + (xs + kx * dw) * c;
#pragma unroll
                    for (int v = 0; v < V; ++v) acc[v] += to_d(cell[v]);
                }
            }
            i64 pyf, pye, pxf, pxe;
            cells_within(ys, kh, dh, ys, ih + pad_bottom, &pyf, &pye);
            cells_within(xs, kw, dw, xs, iw + pad_right, &pxf, &pxe);
            const double count = count_excludes_padding ? (double)((ye - yf) * (xe - xf)) : (double)((pye - pyf) * (pxe - pxf));
#pragma unroll
            for (int v = 0; v < V; ++v) out[v] = from_d<T>(acc[v] / count);
        } else if constexpr (sizeof(T) == 1 && V == 16) {
            // 8-bit levels: the byte-wise max of 16 channels, four in a word (exact: integers have
            // no NaN). Converting each byte to float and back made this pass instruction-bound.
            const bool is_signed = (T)(-1) < (T)0;
#if __CUDA_ARCH__ >= 900
            // Hopper's DPX max of 16-bit pairs: each word's even and odd bytes widened to two
            // pairs (sign-extended for int8) by one permute each, maxed, then packed back; the
            // byte-wise __vmaxs4 is emulated in about 7 instructions a word.
            const unsigned lowest = is_signed ? 0xff80ff80u : 0u;
            unsigned acc[8] = {lowest, lowest, lowest, lowest, lowest, lowest, lowest, lowest};
            auto take = [&](const uint4 a) {
                const unsigned w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    acc[2 * j] = max_s16x2(acc[2 * j], widened_pair(w[j], is_signed ? 0xa280u : 0x4240u));
                    acc[2 * j + 1] = max_s16x2(acc[2 * j + 1], widened_pair(w[j], is_signed ? 0xb391u : 0x4341u));
                }
            };
            auto result = [&](int j) { return __byte_perm(acc[2 * j], acc[2 * j + 1], 0x6240); };
#else
            const unsigned lowest = is_signed ? 0x80808080u : 0u;
            unsigned acc[4] = {lowest, lowest, lowest, lowest};
            auto take = [&](const uint4 a) {
                const unsigned w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[j] = is_signed ? __vmaxs4(acc[j], w[j]) : __vmaxu4(acc[j], w[j]);
            };
            auto result = [&](int j) { return acc[j]; };
#endif
            auto cell = [&](i64 ky, i64 kx) { return *reinterpret_cast<const uint4*>(plane + ((ys + ky * dh) * iw + xs + kx * dw) * c); };
            if (kh <= 3 && kw <= 3) {
                // Windows of up to 3×3 (a CNN's max pooling): every cell's load issued before
                // the first max, where the loop waited out each load in turn (2.5 times the
                // memory's time for ResNet-50's).
                const unsigned lowest_bytes = is_signed ? 0x80808080u : 0u;
                const uint4 none = make_uint4(lowest_bytes, lowest_bytes, lowest_bytes, lowest_bytes);
                uint4 cells[3][3];
#pragma unroll
                for (int a = 0; a < 3; ++a)
#pragma unroll
                    for (int b = 0; b < 3; ++b) cells[a][b] = yf + a < ye && xf + b < xe ? cell(yf + a, xf + b) : none;
#pragma unroll
                for (int a = 0; a < 3; ++a)
#pragma unroll
                    for (int b = 0; b < 3; ++b) take(cells[a][b]);
            } else {
                for (i64 ky = yf; ky < ye; ++ky)
                    for (i64 kx = xf; kx < xe; ++kx) take(cell(ky, kx));
            }
            unsigned words[4] = {result(0), result(1), result(2), result(3)};
            if (map) {
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const unsigned w = words[j];
                    const unsigned lo = __byte_perm(map[w & 0xff], map[(w >> 8) & 0xff], 0x0040);
                    const unsigned hi = __byte_perm(map[(w >> 16) & 0xff], map[w >> 24], 0x0040);
                    words[j] = __byte_perm(lo, hi, 0x5410);
                }
            }
            *reinterpret_cast<uint4*>(out) = make_uint4(words[0], words[1], words[2], words[3]);
        } else {
            float acc[V];
#pragma unroll
            for (int v = 0; v < V; ++v) acc[v] = -INFINITY;
            for (i64 ky = yf; ky < ye; ++ky) {
                const T* row = plane + (ys + ky * dh) * iw * c;
                for (i64 kx = xf; kx < xe; ++kx) {
                    // V channels in one access (the host checks the alignment).
                    float a[V];
                    load_run<V>(row + (xs + kx * dw) * c, a);
#pragma unroll
                    for (int v = 0; v < V; ++v) acc[v] = acc[v] != acc[v] ? acc[v] : (a[v] != a[v] || a[v] > acc[v] ? a[v] : acc[v]);
                }
            }
#pragma unroll
            for (int v = 0; v < V; ++v) out[v] = from_d<T>((double)acc[v]);
        }
    }
}

#define POOL2D_NHWC(suffix, T, V) \
    extern "C" __global__ void pool2d_nhwc_##suffix(int n, int c, int ih, int iw, int oh, int ow, int kh, int kw, int sh, int sw, \
                                                    int dh, int dw, int pt, int pl, int pb, int pr, int average, int excl, const T* x, T* y) { \
        grid_dependency_wait(); \
        pool2d_nhwc<T, V>(n, c, ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, average, excl, x, y); \
    }

POOL2D_NHWC(f32, float, 1)
POOL2D_NHWC(f16, __half, 1)
POOL2D_NHWC(bf16, __nv_bfloat16, 1)
POOL2D_NHWC(f32_x4, float, 4)
POOL2D_NHWC(f16_x8, __half, 8)
POOL2D_NHWC(bf16_x8, __nv_bfloat16, 8)
POOL2D_NHWC(i8, signed char, 1)
POOL2D_NHWC(u8, unsigned char, 1)
POOL2D_NHWC(i8_x16, signed char, 16)
POOL2D_NHWC(u8_x16, unsigned char, 16)

// The 8-bit max pooling with its levels mapped through `map` (256 bytes) after the maximum.
#define POOL2D_NHWC_MAPPED(suffix, T) \
    extern "C" __global__ void pool2d_nhwc_##suffix##_x16_mapped(int n, int c, int ih, int iw, int oh, int ow, int kh, int kw, int sh, \
                                                                 int sw, int dh, int dw, int pt, int pl, int pb, int pr, int average, int excl, \
                                                                 const T* x, T* y, const unsigned char* map) { \
        grid_dependency_wait(); \
        __shared__ unsigned map_words[64]; \
        if (threadIdx.x < 64) map_words[threadIdx.x] = reinterpret_cast<const unsigned*>(map)[threadIdx.x]; \
        __syncthreads(); \
        pool2d_nhwc<T, 16>(n, c, ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, 0, excl, x, y, reinterpret_cast<const unsigned char*>(map_words)); \
    }

POOL2D_NHWC_MAPPED(i8, signed char)
POOL2D_NHWC_MAPPED(u8, unsigned char)

#define POOL_FLOAT(suffix, T) \
    extern "C" __global__ void pool_##suffix(i64 n, int spatial, const PoolAxis* axes, int average, int excl, const T* x, T* y) { \
        grid_dependency_wait(); \
        pool_float(n, spatial, axes, average, excl, x, y); \
    }
#define POOL_INT(suffix, T) \
    extern "C" __global__ void pool_##suffix(i64 n, int spatial, const PoolAxis* axes, int average, int excl, const T* x, T* y) { \
        grid_dependency_wait(); \
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

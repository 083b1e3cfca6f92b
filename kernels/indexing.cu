// Element-wise indexing: GatherElements and GatherND (by element width), ScatterElements and
// ScatterND with their reductions (by type). Indices arrive as i64 and may be negative (counted
// from the end); one out of range sets *error, which the host reads after the run.
#include "common.cuh"

__device__ __forceinline__ bool wrap_index(i64& k, i64 len) {
    if (k < 0) k += len;
    return k >= 0 && k < len;
}

// GatherElements: out (the indices' shape, l.shape) takes data at the output's coordinates,
// with coordinate `axis` replaced by the index. l.stride[0]: data strides.
template <typename T>
__device__ void gather_elements(i64 n, Layout l, int axis, i64 axis_len, const T* data, const i64* idx, T* out, int* error) {
    KILN_GRID_LOOP(i, n) {
        i64 k = idx[i];
        if (!wrap_index(k, axis_len)) { out[i] = T(0); atomicExch(error, 1); continue; }
        i64 rem = i, off = 0;
        for (int d = l.rank - 1; d >= 0; --d) {
            i64 c = rem % l.shape[d];
            rem /= l.shape[d];
            off += (d == axis ? k : c) * l.stride[0][d];
        }
        out[i] = data[off];
    }
}

// GatherND: per batch (`batches` of them, each `batch_stride` data elements), `tuples` index
// tuples of l.rank coordinates into dims l.shape (strides l.stride[0]) each select a slice of
// `slice` contiguous elements. out is [batches, tuples, slice].
template <typename T>
__device__ void gather_nd(i64 batches, i64 tuples, i64 slice, i64 batch_stride, Layout l, const T* data, const i64* idx, T* out, int* error) {
    i64 n = batches * tuples * slice;
    KILN_GRID_LOOP(i, n) {
        i64 s = i % slice;
        i64 t = (i / slice) % tuples;
        i64 b = i / (slice * tuples);
        const i64* tuple = idx + (b * tuples + t) * l.rank;
        i64 off = b * batch_stride + s;
        bool ok = true;
        for (int d = 0; d < l.rank; ++d) {
            i64 k = tuple[d];
            ok = ok && wrap_index(k, l.shape[d]);
            off += k * l.stride[0][d];
        }
        if (!ok) { out[i] = T(0); atomicExch(error, 1); continue; }
        out[i] = data[off];
    }
}

#define GATHER_KERNELS(suffix, T) \
    extern "C" __global__ void gather_elements_##suffix(i64 n, Layout l, int axis, i64 axis_len, const T* d, const i64* idx, T* o, int* e) { gather_elements(n, l, axis, axis_len, d, idx, o, e); } \
    extern "C" __global__ void gather_nd_##suffix(i64 batches, i64 tuples, i64 slice, i64 bs, Layout l, const T* d, const i64* idx, T* o, int* e) { gather_nd(batches, tuples, slice, bs, l, d, idx, o, e); }

GATHER_KERNELS(u8, unsigned char)
GATHER_KERNELS(u16, unsigned short)
GATHER_KERNELS(u32, unsigned int)
GATHER_KERNELS(u64, u64)

// Scatter reductions: 0 none (replace), 1 add, 2 mul, 3 max, 4 min.
template <typename T>
__device__ __forceinline__ T combine(T a, T b, int op) {
    switch (op) {
        case 1: return a + b;
        case 2: return a * b;
        case 3: return a > b ? a : b;
        case 4: return a < b ? a : b;
        default: return b;
    }
}
template <> __device__ __forceinline__ __half combine(__half a, __half b, int op) { return from_f<__half>(combine(to_f(a), to_f(b), op)); }
template <> __device__ __forceinline__ __nv_bfloat16 combine(__nv_bfloat16 a, __nv_bfloat16 b, int op) {
    return from_f<__nv_bfloat16>(combine(to_f(a), to_f(b), op));
}
// Bool: add is or, mul is and (as the cpu oracle).
template <> __device__ __forceinline__ bool combine(bool a, bool b, int op) {
    switch (op) {
        case 1: case 3: return a || b;
        case 2: case 4: return a && b;
        default: return b;
    }
}

// ScatterElements on `out` (already a copy of data): one thread per line of the indices along
// `axis` (lines never write the same element, so reductions need no atomics), in index order
// along the line so duplicates combine as the cpu oracle does. l.shape: the indices' shape,
// l.stride[0]: out (data) strides, l.stride[1]: contiguous indices/updates strides.
template <typename T>
__device__ void scatter_elements(i64 lines, Layout l, int axis, i64 axis_len, int op, const i64* idx, const T* upd, T* out, int* error) {
    KILN_GRID_LOOP(line, lines) {
        i64 rem = line, base_out = 0, base_idx = 0;
        for (int d = l.rank - 1; d >= 0; --d) {
            if (d == axis) continue;
            i64 c = rem % l.shape[d];
            rem /= l.shape[d];
            base_out += c * l.stride[0][d];
            base_idx += c * l.stride[1][d];
        }
        for (i64 j = 0; j < l.shape[axis]; ++j) {
            i64 at = base_idx + j * l.stride[1][axis];
            i64 k = idx[at];
            if (!wrap_index(k, axis_len)) { atomicExch(error, 1); continue; }
            T* dst = out + base_out + k * l.stride[0][axis];
            *dst = combine(*dst, upd[at], op);
        }
    }
}

// ScatterND on `out` (a copy of data): one thread per element of the slice, walking the
// `tuples` index tuples in order (duplicates combine in index order). Tuples hold l.rank
// coordinates into dims l.shape with strides l.stride[0]; updates are [tuples, slice].
template <typename T>
__device__ void scatter_nd(i64 tuples, i64 slice, Layout l, int op, const i64* idx, const T* upd, T* out, int* error) {
    KILN_GRID_LOOP(s, slice) {
        for (i64 t = 0; t < tuples; ++t) {
            const i64* tuple = idx + t * l.rank;
            i64 off = s;
            bool ok = true;
            for (int d = 0; d < l.rank; ++d) {
                i64 k = tuple[d];
                ok = ok && wrap_index(k, l.shape[d]);
                off += k * l.stride[0][d];
            }
            if (!ok) { atomicExch(error, 1); continue; }
            out[off] = combine(out[off], upd[t * slice + s], op);
        }
    }
}

#define SCATTER_KERNELS(suffix, T) \
    extern "C" __global__ void scatter_elements_##suffix(i64 lines, Layout l, int axis, i64 axis_len, int op, const i64* idx, const T* u, T* o, int* e) { scatter_elements(lines, l, axis, axis_len, op, idx, u, o, e); } \
    extern "C" __global__ void scatter_nd_##suffix(i64 tuples, i64 slice, Layout l, int op, const i64* idx, const T* u, T* o, int* e) { scatter_nd(tuples, slice, l, op, idx, u, o, e); }

SCATTER_KERNELS(f32, float)
SCATTER_KERNELS(f16, __half)
SCATTER_KERNELS(bf16, __nv_bfloat16)
SCATTER_KERNELS(f64, double)
SCATTER_KERNELS(i8, signed char)
SCATTER_KERNELS(i16, short)
SCATTER_KERNELS(i32, int)
SCATTER_KERNELS(i64, i64)
SCATTER_KERNELS(u8, unsigned char)
SCATTER_KERNELS(u16, unsigned short)
SCATTER_KERNELS(u32, unsigned int)
SCATTER_KERNELS(u64, u64)
SCATTER_KERNELS(bool, bool)

// ONNX Resize from per-axis tap tables the host plans (kiln-cpu's arithmetic): every output
// coordinate o of axis d reads taps [tap_base_d + o * ntaps_d, +ntaps_d) of `tap_index` (input
// index along d; -1 marks a coordinate outside the tf_crop_and_resize crop) and `tap_weight`.
// Layout: shape = output shape, stride[0] = input strides, stride[1] = ntaps per axis,
// stride[2] = tap_base per axis.
#include "common.cuh"

// Nearest: one tap per axis, a copy (any storage type, by width).
template <typename T>
__device__ void resize_gather(i64 n, Layout l, const i64* tap_index, const T* extrapolation, const T* in, T* out) {
    KILN_GRID_LOOP(i, n) {
        i64 rem = i, off = 0;
        bool outside = false;
        for (int d = l.rank - 1; d >= 0; --d) {
            i64 o = rem % l.shape[d];
            rem /= l.shape[d];
            i64 k = tap_index[l.stride[2][d] + o * l.stride[1][d]];
            outside = outside || k < 0;
            off += k * l.stride[0][d];
        }
        out[i] = outside ? *extrapolation : in[off];
    }
}

// Linear / cubic: the weighted sum over every combination of the axes' taps, in double.
template <typename T>
__device__ void resize_interp(i64 n, Layout l, const i64* tap_index, const double* tap_weight, float extrapolation, const T* in, T* out) {
    KILN_GRID_LOOP(i, n) {
        i64 first[KILN_MAX_RANK];
        i64 rem = i, combos = 1;
        bool outside = false;
        for (int d = l.rank - 1; d >= 0; --d) {
            i64 o = rem % l.shape[d];
            rem /= l.shape[d];
            first[d] = l.stride[2][d] + o * l.stride[1][d];
            outside = outside || tap_index[first[d]] < 0;
            combos *= l.stride[1][d];
        }
        if (outside) { out[i] = from_f<T>(extrapolation); continue; }
        double sum = 0.0;
        for (i64 c = 0; c < combos; ++c) {
            i64 r = c, off = 0;
            double w = 1.0;
            for (int d = l.rank - 1; d >= 0 && w != 0.0; --d) {
                i64 t = first[d] + r % l.stride[1][d];
                r /= l.stride[1][d];
                w *= tap_weight[t];
                off += tap_index[t] * l.stride[0][d];
            }
            if (w != 0.0) sum += w * (double)to_f(in[off]);
        }
        out[i] = from_f<T>((float)sum);
    }
}

#define RESIZE_GATHER(suffix, T) \
    extern "C" __global__ void resize_gather_##suffix(i64 n, Layout l, const i64* ti, const T* e, const T* in, T* out) { resize_gather(n, l, ti, e, in, out); }
#define RESIZE_INTERP(suffix, T) \
    extern "C" __global__ void resize_interp_##suffix(i64 n, Layout l, const i64* ti, const double* tw, float e, const T* in, T* out) { resize_interp(n, l, ti, tw, e, in, out); }

RESIZE_GATHER(u8, unsigned char)
RESIZE_GATHER(u16, unsigned short)
RESIZE_GATHER(u32, unsigned int)
RESIZE_GATHER(u64, u64)
RESIZE_INTERP(f32, float)
RESIZE_INTERP(f16, __half)
RESIZE_INTERP(bf16, __nv_bfloat16)

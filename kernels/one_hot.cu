// OneHot: out[o, d, i] = values[1] where the index at [o, i] (negative ones counted from
// `depth`) equals d, else values[0] (kiln-cpu's einsum::one_hot). The values are copied as raw
// bytes, so one kernel per element width serves every type.
#include "common.cuh"

template <typename W>
__device__ void one_hot(i64 n, i64 depth_len, i64 inner, i64 depth, const i64* indices, const W* values, W* y) {
    KILN_GRID_LOOP(e, n) {
        const i64 i = e % inner;
        const i64 d = (e / inner) % depth_len;
        const i64 o = e / (inner * depth_len);
        const i64 raw = indices[o * inner + i];
        const i64 wrapped = raw < 0 ? raw + depth : raw;
        y[e] = values[wrapped == d ? 1 : 0];
    }
}

#define ONE_HOT(suffix, W) \
    extern "C" __global__ void one_hot_##suffix(i64 n, i64 depth_len, i64 inner, i64 depth, const i64* indices, const W* values, W* y) { \
        one_hot(n, depth_len, inner, depth, indices, values, y); \
    }

ONE_HOT(u8, unsigned char)
ONE_HOT(u16, unsigned short)
ONE_HOT(u32, unsigned int)
ONE_HOT(u64, u64)

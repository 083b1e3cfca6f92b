// NonZero in two passes (its output size depends on the data): `nonzero_count_*` counts the
// nonzero elements per chunk in one block and scans the counts (the host reads the total back
// and allocates [rank, total]), then `nonzero_fill_*` writes each chunk's coordinates from its
// offset, in element order as kiln-cpu's misc::non_zero. Elements are raw bits: nonzero where
// `bits & mask` is (the mask drops a float's sign bit, so -0.0 is zero and NaN is not).
#include "common.cuh"

#define NONZERO_THREADS 1024

template <typename W>
__device__ void nonzero_count(i64 n, u64 mask, const W* x, i64* offsets) {
    __shared__ i64 counts[NONZERO_THREADS];
    const int t = threadIdx.x;
    const i64 chunk = (n + NONZERO_THREADS - 1) / NONZERO_THREADS;
    const i64 lo = t * chunk, hi = lo + chunk < n ? lo + chunk : n;
    i64 c = 0;
    for (i64 i = lo; i < hi; ++i) c += ((u64)x[i] & mask) != 0;
    counts[t] = c;
    __syncthreads();
    if (t == 0) {
        i64 run = 0;
        for (int k = 0; k < NONZERO_THREADS; ++k) {
            offsets[k] = run;
            run += counts[k];
        }
        offsets[NONZERO_THREADS] = run;
    }
}

template <typename W>
__device__ void nonzero_fill(i64 n, u64 mask, int rank, const i64* shape, i64 total, const W* x, const i64* offsets, i64* y) {
    const int t = threadIdx.x;
    const i64 chunk = (n + NONZERO_THREADS - 1) / NONZERO_THREADS;
    const i64 lo = t * chunk, hi = lo + chunk < n ? lo + chunk : n;
    i64 at = offsets[t];
    for (i64 i = lo; i < hi; ++i) {
        if (((u64)x[i] & mask) == 0) continue;
        i64 rem = i;
        for (int d = rank - 1; d >= 0; --d) {
            y[d * total + at] = rem % shape[d];
            rem /= shape[d];
        }
        ++at;
    }
}

#define NONZERO(suffix, W) \
    extern "C" __global__ void nonzero_count_##suffix(i64 n, u64 mask, const W* x, i64* offsets) { nonzero_count(n, mask, x, offsets); } \
    extern "C" __global__ void nonzero_fill_##suffix(i64 n, u64 mask, int rank, const i64* shape, i64 total, const W* x, const i64* offsets, i64* y) { \
        nonzero_fill(n, mask, rank, shape, total, x, offsets, y); \
    }

NONZERO(u8, unsigned char)
NONZERO(u16, unsigned short)
NONZERO(u32, unsigned int)
NONZERO(u64, u64)

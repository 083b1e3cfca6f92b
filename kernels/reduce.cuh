// The Reduce arithmetic both reduce.cu's kernels and the generated chains that end in a
// reduction (ops/chain_source.rs: an island's values reduced as they are computed) run: a warp
// per row, and a block of columns with row-strided partials. Each takes its values through a
// functor, so a chain computes them where reduce.cu loads them.
//
// Reduce op codes (kiln-cuda's reduce_code): 0 sum, 1 prod, 2 max, 3 min, 4 mean, 5 L1, 6 L2,
// 7 log-sum, 8 log-sum-exp, 9 sum of squares.
#pragma once
#include "common.cuh"

// The maximum over each group of G aligned lanes, as lanes_sum.
template <int G = 32>
__device__ __forceinline__ float lanes_max(float v) {
#pragma unroll
    for (int o = G / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float warp_max(float v) { return lanes_max<32>(v); }

// One row of `len` values x(k), reduced by the warp (every op), in every lane.
template <class X>
__device__ __forceinline__ float reduce_row(int op, i64 len, int lane, X x) {
    float acc;
    if (op == 2) {  // max
        acc = -INFINITY;
        for (i64 k = lane; k < len; k += 32) acc = fmaxf(acc, x(k));
        acc = warp_max(acc);
    } else if (op == 3) {  // min
        acc = INFINITY;
        for (i64 k = lane; k < len; k += 32) acc = fminf(acc, x(k));
        acc = -warp_max(-acc);
    } else if (op == 1) {  // prod: shuffle-multiply
        acc = 1.0f;
        for (i64 k = lane; k < len; k += 32) acc *= x(k);
        for (int o = 16; o > 0; o >>= 1) acc *= __shfl_xor_sync(0xffffffffu, acc, o);
    } else if (op == 8) {  // log-sum-exp
        float m = -INFINITY;
        for (i64 k = lane; k < len; k += 32) m = fmaxf(m, x(k));
        m = warp_max(m);
        acc = 0.0f;
        for (i64 k = lane; k < len; k += 32) acc += expf(x(k) - m);
        acc = warp_sum(acc);
        acc = (m == -INFINITY) ? m : m + logf(acc);
    } else {  // sums: 0 sum, 4 mean, 5 L1, 6 L2, 7 log-sum, 9 sum of squares
        acc = 0.0f;
        for (i64 k = lane; k < len; k += 32) {
            float v = x(k);
            acc += (op == 5) ? fabsf(v) : (op == 6 || op == 9) ? v * v : v;
        }
        acc = warp_sum(acc);
        if (op == 4) acc /= (float)len;
        if (op == 6) acc = sqrtf(acc);
        if (op == 7) acc = logf(acc);
    }
    return acc;
}

// The column form (columns_reduce) takes the sum family, max and min.
#define COLUMN_ROWS 32
#define COLUMN_RUN_ROWS 8
__device__ __forceinline__ float column_term(int op, float acc, float v) {
    return op == 2 ? fmaxf(acc, v) : op == 3 ? fminf(acc, v) : acc + ((op == 5) ? fabsf(v) : (op == 6 || op == 9) ? v * v : v);
}
__device__ __forceinline__ float column_partials(int op, float acc, float v) { return op == 2 ? fmaxf(acc, v) : op == 3 ? fminf(acc, v) : acc + v; }
__device__ __forceinline__ float column_result(int op, float acc, i64 len) {
    if (op == 4) acc /= (float)len;
    if (op == 6) acc = sqrtf(acc);
    if (op == 7) acc = logf(acc);
    return acc;
}

// [outer, len, inner] reduced over len with a wide inner extent (an NHWC global pooling: [n,
// h·w, c] over h·w): a block of 32 × V columns × ROWS row-strided partials, so each warp reads
// 32 neighbouring runs of V values (a row-per-warp walk would read one element per sector),
// then the partials meet in shared memory. Grid: (ceil(inner / (32·V)), outer, splits).
// load(o, k, c, v) gives the V values of row k at columns c…c+V-1; store(at, acc) writes V
// results at `at`, (o · splits + split) · inner + c. Block z of `splits` takes rows [z·chunk,
// (z+1)·chunk): with PARTIAL its f32 partials, no result step; FROM_PARTIALS combines values as
// partials, not terms, and takes the result over `result_len`.
template <int V, int ROWS, bool PARTIAL, bool FROM_PARTIALS, class Load, class Store>
__device__ __forceinline__ void columns_reduce(int op, i64 outer, i64 len, i64 inner, i64 chunk, i64 result_len, Load load, Store store) {
    __shared__ float part[ROWS][V][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const i64 c = ((i64)blockIdx.x * 32 + tx) * V, o = blockIdx.y;
    const bool live = c < inner && o < outer;
    float acc[V];
#pragma unroll
    for (int e = 0; e < V; ++e) acc[e] = op == 2 ? -INFINITY : op == 3 ? INFINITY : 0.0f;
    if (live) {
        const i64 end = min(len, ((i64)blockIdx.z + 1) * chunk);
        for (i64 k = (i64)blockIdx.z * chunk + ty; k < end; k += ROWS) {
            float v[V];
            load(o, k, c, v);
#pragma unroll
            for (int e = 0; e < V; ++e) acc[e] = FROM_PARTIALS ? column_partials(op, acc[e], v[e]) : column_term(op, acc[e], v[e]);
        }
    }
#pragma unroll
    for (int e = 0; e < V; ++e) part[ty][e][tx] = acc[e];
    __syncthreads();
    if (ty != 0 || !live) return;
    for (int r = 1; r < ROWS; ++r)
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] = column_partials(op, acc[e], part[r][e][tx]);
    if (!PARTIAL) {
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] = column_result(op, acc[e], result_len);
    }
    store((o * gridDim.z + blockIdx.z) * inner + c, acc);
}

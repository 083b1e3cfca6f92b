// Pointwise chains (the epilogues of kiln's Fused layers), generated per chain by kiln-cuda
// (ops/chain_source.rs): each step's op is fixed in the generated kernel, so the compiler sees
// straight-line code and issues every operand's load up front. What the generated kernels
// share is here: how a slot (slot 0 the running input, slot 1 + w operand w) is addressed over
// the output's shape, at most CHAIN_RANK dims after coalescing, in 32-bit offsets (the host
// checks they fit).
#pragma once
#include "common.cuh"
#include "unary.cuh"
#include "binary.cuh"

#define CHAIN_OPERANDS 8
#define CHAIN_RANK 4
// Runs of 4 a lane holds of a `chain_rows` row: rows of up to 1024 (kiln-cuda's CHAIN_ROW_MAX).
#define CHAIN_ROW_RUNS 8


struct ChainLayout {
    int rank;
    int dense;  // bit s: slot s is stored as the output (offset 0, the output's strides)
    int shape[CHAIN_RANK];
    int offset[CHAIN_OPERANDS + 1];
    int stride[CHAIN_OPERANDS + 1][CHAIN_RANK];
};

// The coordinates of output element `i`.
__device__ __forceinline__ void chain_coords(const ChainLayout& l, unsigned i, unsigned* c) {
#pragma unroll
    for (int d = CHAIN_RANK - 1; d > 0; --d) {
        if (d < l.rank) {
            c[d] = i % (unsigned)l.shape[d];
            i /= (unsigned)l.shape[d];
        } else {
            c[d] = 0;
        }
    }
    c[0] = i;
}

// V lanes of slot `s` for output element `i` at coordinates `c`: read at `i` where the slot is
// stored as the output, else through its strides, a V-wide load where its innermost stride is
// 1 and the one element broadcast where it is 0 (the host allows no other stride for V > 1).
template <int V, typename T>
__device__ __forceinline__ void chain_load(const ChainLayout& l, int s, unsigned i, const unsigned* c, const T* p, float* f) {
    if (l.dense >> s & 1) {
        load_run<V>(p + i, f);
        return;
    }
    unsigned off = l.offset[s];
#pragma unroll
    for (int d = 0; d < CHAIN_RANK; ++d) {
        if (d < l.rank) off += c[d] * l.stride[s][d];
    }
    if (V == 1 || l.stride[s][l.rank - 1] == 1) {
        load_run<V>(p + off, f);
    } else {
        const float v = to_f(p[off]);
#pragma unroll
        for (int k = 0; k < V; ++k) f[k] = v;
    }
}

// V stored bytes of an 8-bit slot `s`, addressed as chain_load does (the table kernels look
// them up instead of converting them).
template <int V>
__device__ __forceinline__ void chain_load_bytes(const ChainLayout& l, int s, unsigned i, const unsigned* c, const unsigned char* p, unsigned char* b) {
    unsigned off = i;
    if (!(l.dense >> s & 1)) {
        off = l.offset[s];
#pragma unroll
        for (int d = 0; d < CHAIN_RANK; ++d) {
            if (d < l.rank) off += c[d] * l.stride[s][d];
        }
    }
    if (V == 1 || (l.dense >> s & 1) || l.stride[s][l.rank - 1] == 1) {
        const Run<unsigned char, V> r = *reinterpret_cast<const Run<unsigned char, V>*>(p + off);
#pragma unroll
        for (int k = 0; k < V; ++k) b[k] = r.v[k];
    } else {
#pragma unroll
        for (int k = 0; k < V; ++k) b[k] = p[off];
    }
}

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

struct ChainLayout {
    int rank;
    int dense;  // bit s: slot s is stored as the output (offset 0, the output's strides)
    int row;    // bit s: slot s repeats one run of the innermost dim (stride 1 there, 0 elsewhere)
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

// V lanes of slot `s` at [o, k, c] of a reduction's [outer, len, inner] view (rank 3: the
// generated `chain_reduce_*`): a V-wide load where the slot's inner stride is 1, its one element
// broadcast where it is 0 (the host allows no other inner stride for V > 1).
template <int V, typename T>
__device__ __forceinline__ void chain_reduce_load(const ChainLayout& l, int s, i64 o, i64 k, i64 c, const T* p, float* f) {
    const i64 off = l.offset[s] + o * l.stride[s][0] + k * l.stride[s][1] + c * l.stride[s][2];
    if (V == 1 || l.stride[s][2] == 1) {
        load_run<V>(p + off, f);
    } else {
        const float v = to_f(p[off]);
#pragma unroll
        for (int e = 0; e < V; ++e) f[e] = v;
    }
}

// V lanes of slot `s` for element `i`, at `k` in its row (`chain_rows`, whose host sets `row`
// bits only where the row is the innermost dim). Dense and repeated-row slots need no element
// coordinates `c` (three divisions, more instructions than the row's arithmetic): the kernel
// finds them only where a slot it reads is neither (`chain_rows_need_coords`).
template <int V, typename T>
__device__ __forceinline__ void chain_row_load(const ChainLayout& l, int s, unsigned i, unsigned k, const unsigned* c, const T* p, float* f) {
    if (l.row >> s & 1) {
        load_run<V>(p + l.offset[s] + k, f);
        return;
    }
    chain_load<V>(l, s, i, c, p, f);
}

// A `chain_rows` row's 8-bit levels on grid g (the program's last step, a QuantizeLinear), from
// `r`, the values before it: run j of 4 at 4·(lane + 32j). Where a run's four values round as
// the quotient does (grid_rounds), each level's byte is the low byte of its rounding add's bits
// plus the zero point, packed by byte permutes (packed_bytes); else each value takes level_on, the division
// out of line. Per value, the branch around each division and the conversion to an integer (at
// an eighth of the float rate) were a third of the row's instructions.
template <int RUNS, typename T>
__device__ __forceinline__ void store_row_levels(T* out, unsigned lane, unsigned len, const float* r, const Grid& g) {
    const unsigned zero = (unsigned)(int)g.z;
#pragma unroll
    for (int j = 0; j < RUNS; ++j) {
        const unsigned k = 4 * (lane + 32 * j);
        if (k >= len) continue;
        bool exact = true;
        unsigned b[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            float t;
            exact &= grid_rounds(g, r[4 * j + e], t);
            b[e] = __float_as_uint(t) + zero;
        }
        if (exact) {
            *reinterpret_cast<unsigned*>(out + k) = packed_bytes(b[0], b[1], b[2], b[3]);
        } else {
            float o[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) o[e] = level_on(g, r[4 * j + e]);
            store_run<4>(out + k, o);
        }
    }
}

// Whether any of the slots in `mask` needs an element's coordinates.
__device__ __forceinline__ bool chain_rows_need_coords(const ChainLayout& l, int mask) {
    return ((l.dense | l.row) & mask) != mask;
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

// The lookup of a column table (kiln-cuda's chain_columns): block b takes columns
// [TILE·(b % tiles), +TILE) of rows [rows_per_block·(b / tiles), +rows_per_block) of the
// row-major [rows, columns] levels `x` (columns a multiple of 16, 16-byte aligned rows), copies
// those columns' tables (256 bytes each, column-major in `table`) into shared memory and
// writes out[i] = table[column][x[i]], 16 bytes a thread.
template <int TILE>
__device__ __forceinline__ void chain_column_lookup(unsigned rows, unsigned columns, unsigned rows_per_block, const unsigned char* x,
                                                    unsigned char* out, const unsigned char* table) {
    __shared__ uint4 words[TILE * 256 / 16];
    const unsigned tiles = (columns + TILE - 1) / TILE, tile = blockIdx.x % tiles;
    const unsigned c0 = tile * TILE, width = min((unsigned)TILE, columns - c0);
    const uint4* src = reinterpret_cast<const uint4*>(table + (size_t)c0 * 256);
    for (unsigned w = threadIdx.x; w < width * 16; w += blockDim.x) words[w] = src[w];
    __syncthreads();
    const unsigned char* t = reinterpret_cast<const unsigned char*>(words);
    constexpr unsigned GROUPS = TILE / 16;
    const unsigned col = (threadIdx.x % GROUPS) * 16;
    if (col >= width) return;
    const unsigned first = (blockIdx.x / tiles) * rows_per_block, end = min(rows, first + rows_per_block);
#pragma unroll 4
    for (unsigned r = first + threadIdx.x / GROUPS; r < end; r += blockDim.x / GROUPS) {
        const unsigned i = r * columns + c0 + col;
        const Run<unsigned char, 16> b = *reinterpret_cast<const Run<unsigned char, 16>*>(x + i);
        Run<unsigned char, 16> o;
#pragma unroll
        for (int k = 0; k < 16; ++k) o.v[k] = t[(col + k) * 256 + b.v[k]];
        *reinterpret_cast<Run<unsigned char, 16>*>(out + i) = o;
    }
}

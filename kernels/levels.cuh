// The level grids of attention in a Q/DQ network, shared by the masked softmax (reduce.cu)
// and the fused attention (attention.cu).
#pragma once
#include "common.cuh"

// The level grids of attention in a Q/DQ network (kiln::AttentionParams' product, scores and
// probabilities grids): bit g of `on` set where grid g applies. Grid g maps a value through
// DequantizeLinear(QuantizeLinear(.)) with `scale[g]`, zero point `zero[g]` and levels
// [lo[g], hi[g]], the dequantized level multiplied by `scaled[g]` (the scale times any factor
// after it, as the host folds it).
struct SoftmaxLevels {
    int on;
    float scale[3], scaled[3];
    int zero[3], lo[3], hi[3];
};

// Grid g on x, as kernels/typed.cu's quant_quantize_8bit_x4 then quant_dequantize_8bit_x4
// compute it (the f32 ratio, round half to even, NaN to level 0), the result rounded to T as
// the unfused graph stores it.
template <typename T>
__device__ __forceinline__ float through_levels(const SoftmaxLevels& l, int g, float x) {
    const float ratio = __fdiv_rn(x, l.scale[g]);
    const int level = ratio != ratio ? 0 : min(max(round_half_even_clamped(ratio) + l.zero[g], l.lo[g]), l.hi[g]);
    return to_f(from_f<T>(__fmul_rn((float)(level - l.zero[g]), l.scaled[g])));
}

// One grid that quantizes, read through a table of its levels' values (8-bit levels: 256):
// a value then costs one quantization and a lookup where through_levels costs a division and
// a rounding per grid.
struct Quantizer {
    float scale, inv;  // inv: level_reciprocal(scale)
    int zero, lo, hi;
    const float* table;  // the value level lo + i stands for, in shared memory

    // through_levels' result (with every grid the table folds in), exactly.
    __device__ __forceinline__ float operator()(float x) const {
        bool nan;
        const int level = min(max(rounded_ratio(x, scale, inv, nan) + zero, lo), hi);
        return table[(nan ? 0 : level) - lo];
    }

    // operator()'s result where the product by the reciprocal decides the level (`decided`);
    // elsewhere the caller asks `exactly`, out of line, so the common path stays branch-free
    // across a thread's many values.
    __device__ __forceinline__ float fast(float x, bool& decided) const {
        const int level = min(max(rounded_product(x, inv, decided) + zero, lo), hi);
        return table[level - lo];
    }
};

__device__ __noinline__ float exactly(Quantizer q, float x) { return q(x); }

// The grids of a leveled softmax as quantizers: `scores` quantizes a score as loaded with the
// product's grid (else the scores'), its table giving the value after both; `probs` quantizes
// a probability rounded to T. `on` as SoftmaxLevels'.
struct LeveledSoftmax {
    int on;
    Quantizer scores, probs;
};

// The tables a block builds once for every row it takes (256 entries each, in `scores` and
// `probs`), and the quantizers reading them.
template <typename T>
__device__ LeveledSoftmax level_tables(const SoftmaxLevels& l, float* scores, float* probs) {
    const bool product = l.on & 1;
    const float first_scale = product ? l.scale[0] : l.scale[1];
    const Quantizer first{first_scale, level_reciprocal(first_scale), product ? l.zero[0] : l.zero[1], product ? l.lo[0] : l.lo[1],
                          product ? l.hi[0] : l.hi[1], scores};
    const float first_scaled = product ? l.scaled[0] : l.scaled[1];
    for (int i = threadIdx.x; i < 256; i += blockDim.x) {
        float v = to_f(from_f<T>(__fmul_rn((float)(first.lo + i - first.zero), first_scaled)));
        if (product && (l.on & 2)) v = through_levels<T>(l, 1, v);
        scores[i] = v;
        probs[i] = to_f(from_f<T>(__fmul_rn((float)(l.lo[2] + i - l.zero[2]), l.scaled[2])));
    }
    __syncthreads();
    return LeveledSoftmax{l.on, first, {l.scale[2], level_reciprocal(l.scale[2]), l.zero[2], l.lo[2], l.hi[2], probs}};
}

// A score as loaded (T, widened) after the scores grids.
__device__ __forceinline__ float leveled_score(const LeveledSoftmax& q, float x) { return (q.on & 3) ? q.scores(x) : x; }
// A probability after the probabilities' grid, which reads it as stored (rounded to T).
template <typename T>
__device__ __forceinline__ float leveled_probability(const LeveledSoftmax& q, float p) {
    return (q.on & 4) ? q.probs(to_f(from_f<T>(p))) : p;
}


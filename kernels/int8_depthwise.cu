// INT8 depthwise convolution (groups = input = output channels) on int8 NHWC tensors: a K×K
// filter (3, 5 or 7) of stride 1 or 2, depthwise.cuh's row loop. Depthwise layers have no
// tensor-core form (each output channel sums K·K products of one input channel), so each thread
// makes 4 neighbouring output pixels of a row for 8 channels, one 8-byte load a pixel, the
// products f32 FMAs of the levels (exact: 49 products of at most 2^14 stay below 2^22) by the
// filter pre-converted to f32 ([kh][kw][C]). Half the bytes of the f16 kernel, which is the
// point: before this kernel a Q/DQ EfficientNet-B0 or ConvNeXt-T spent most of its time in
// the exact f32 fallback (QUANT.md, session 54).
//
// Two forms: `_levels` requantizes in the kernel, the levels-only epilogue of the INT8
// convolutions (level_of_sum: int32 bias, the channel's scale, a second quantization's table
// or the per-channel lookup), as kiln-cpu's integer layer computes it; `_sums` writes the int32
// sums (the bias not added) for quant.rs's epilogue kernel, for any other epilogue.
#include "common.cuh"
#include "depthwise.cuh"

#define DW_CHANNELS 8  // channels a thread: one 8-byte load of levels
#define DW_PIXELS 4    // output pixels of a row a thread

// The levels-only epilogue's operands (the host's `quant::Epilogue` arguments it reads).
struct DepthwiseLevels {
    const int* int_bias;  // or NULL
    const float* scale;
    i64 scale_len;
    float y_zero, lo, hi;
    int relu;
    const unsigned char* then;    // a second quantization's table of levels, or NULL
    const unsigned char* lookup;  // the levels' per-channel table, or NULL
};

// A sum of levels' products (an integer below 2^22 in f32) as an int, by the rounding add.
__device__ __forceinline__ int exact_sum(float acc) {
    return __float_as_int(__fadd_rn(acc, KILN_ROUNDING_MAGIC)) - KILN_ROUNDING_MAGIC_BITS;
}

// `levels` null: the int32 sums into `sums`; else the levels into `y`.
template <int K, int S>
__device__ __forceinline__ void int8_depthwise(const Window& p, const signed char* x, const float* w, const DepthwiseLevels* levels,
                                               unsigned char* y, int* sums) {
    constexpr int V = DW_CHANNELS;
    auto start = [](int, float* init) {
#pragma unroll
        for (int k = 0; k < V; ++k) init[k] = 0.0f;
    };
    if (!levels) {
        auto finish = [&](float* acc, unsigned at, int) {
            int s[V];
#pragma unroll
            for (int k = 0; k < V; ++k) s[k] = exact_sum(acc[k]);
            *reinterpret_cast<int4*>(sums + at) = make_int4(s[0], s[1], s[2], s[3]);
            *reinterpret_cast<int4*>(sums + at + 4) = make_int4(s[4], s[5], s[6], s[7]);
        };
        depthwise_rows<signed char, V, K, S, DW_PIXELS>(p, x, w, start, finish);
        return;
    }
    const DepthwiseLevels e = *levels;
    const int zero = (int)e.y_zero, high = (int)e.hi, low = e.relu ? max((int)e.lo, zero) : (int)e.lo;
    const float low_f = (float)(low - zero), high_f = (float)(high - zero);
    auto finish = [&](float* acc, unsigned at, int c0) {
        unsigned b[V];
#pragma unroll
        for (int k = 0; k < V; ++k) {
            const int ch = c0 + k;
            const int sum = exact_sum(acc[k]) + (e.int_bias ? __ldg(e.int_bias + ch) : 0);
            unsigned char level = level_of_sum(sum, __ldg(e.scale + (e.scale_len == 1 ? 0 : ch)), low_f, high_f, zero);
            if (e.then) level = __ldg(e.then + level);
            if (e.lookup) level = looked_up(e.lookup, ch, level);
            b[k] = level;
        }
        *reinterpret_cast<uint2*>(y + at) = make_uint2(packed_bytes(b[0], b[1], b[2], b[3]), packed_bytes(b[4], b[5], b[6], b[7]));
    };
    depthwise_rows<signed char, V, K, S, DW_PIXELS>(p, x, w, start, finish);
}

// `int8_depthwise_k{K}s{S}_levels` takes the INT8 convolutions' epilogue arguments (the general
// ones unread); `int8_depthwise_k{K}s{S}_sums` writes int32 sums.
#define INT8_DEPTHWISE(K, S) \
    extern "C" __global__ void __launch_bounds__(256, K < 5 ? 3 : 2) int8_depthwise_k##K##s##S##_levels( \
        Window p, const signed char* x, const float* w, const int* int_bias, const float* scale, i64 scale_len, const float* float_bias, \
        i64 float_bias_len, float y_scale, float y_zero, float lo, float hi, int relu, const void* residual, int residual_type, \
        float residual_scale, float residual_zero, const unsigned char* then, const unsigned char* lookup, const void* join, \
        const float* join_params, int out_type, unsigned char* y) { \
        grid_dependency_wait(); /* launched programmatically (Source::programmatic) */ \
        const DepthwiseLevels e = {int_bias, scale, scale_len, y_zero, lo, hi, relu, then, lookup}; \
        int8_depthwise<K, S>(p, x, w, &e, y, nullptr); \
    } \
    extern "C" __global__ void __launch_bounds__(256, K < 5 ? 3 : 2) int8_depthwise_k##K##s##S##_sums(Window p, const signed char* x, const float* w, int* sums) { \
        grid_dependency_wait(); \
        int8_depthwise<K, S>(p, x, w, nullptr, nullptr, sums); \
    }

INT8_DEPTHWISE(3, 1)
INT8_DEPTHWISE(3, 2)
INT8_DEPTHWISE(5, 1)
INT8_DEPTHWISE(5, 2)
INT8_DEPTHWISE(7, 1)
INT8_DEPTHWISE(7, 2)

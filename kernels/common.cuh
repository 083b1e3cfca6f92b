// Shared helpers for kiln's NVRTC-compiled kernels: float conversion of the storage types and
// the strided-index layout every data-movement kernel takes by value.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#define KILN_MAX_RANK 8
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

typedef long long i64;
typedef unsigned long long u64;

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
// 8-bit integer levels (pointwise chains between quantized layers).
__device__ __forceinline__ float to_f(signed char x) { return (float)x; }
__device__ __forceinline__ float to_f(unsigned char x) { return (float)x; }

template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
// A level already rounded and saturated into the type's range (a chain's QuantizeLinear).
template <> __device__ __forceinline__ signed char from_f<signed char>(float x) { return (signed char)(int)x; }
template <> __device__ __forceinline__ unsigned char from_f<unsigned char>(float x) { return (unsigned char)(int)x; }

// Output shape and, per operand, element strides (0 on broadcast axes); rank <= KILN_MAX_RANK.
struct Layout {
    i64 shape[KILN_MAX_RANK];
    i64 stride[3][KILN_MAX_RANK];
    i64 offset[3];
    int rank;
};

// A convolution or pooling window (kiln-cuda buffer::Window): NCHW sizes, whatever the layout.
struct Window {
    i64 n, c, h, w;        // input
    i64 oc, oh, ow;        // output channels and spatial size
    i64 kh, kw;            // window
    i64 sh, sw, dh, dw;    // strides, dilations
    i64 ph, pw;            // leading padding
    i64 groups;
    int kind;              // pooling: 0 max, 1 average; conv: has bias
    int count_excludes_padding;
    i64 pad_end_h, pad_end_w;  // trailing padding (average pooling's divisor counts it)
};

// The element offset of output element `i` in operand `which`.
// Indices and dims that fit 32 bits divide in 32 bits (64-bit division is emulated: several
// times slower, and it dominated the broadcasting kernels). The loop is unrolled over the
// maximum rank so every field index is a constant (a dynamically indexed kernel parameter may
// be copied to local memory by every thread).
__device__ __forceinline__ i64 operand_offset(const Layout& l, int which, i64 i) {
    i64 off = l.offset[which];
#pragma unroll
    for (int d = KILN_MAX_RANK - 1; d >= 0; --d) {
        if (d >= l.rank) continue;
        i64 n = l.shape[d];
        i64 idx;
        if (i <= 0xffffffffLL && n <= 0xffffffffLL) {
            unsigned u = (unsigned)i, m = (unsigned)n;
            idx = u % m;
            i = u / m;
        } else {
            idx = i % n;
            i /= n;
        }
        off += idx * l.stride[which][d];
    }
    return off;
}

// The sum of `v` over each group of G aligned lanes (G a power of two up to 32), in every lane
// of the group (row reductions: kernels/reduce.cu, the generated `chain_rows`).
template <int G = 32>
__device__ __forceinline__ float lanes_sum(float v) {
#pragma unroll
    for (int o = G / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_sum(float v) { return lanes_sum<32>(v); }

// Programmatic dependent launch (sm_90 and later). The host launches the kernels of some
// sources (kiln-cuda's Source::programmatic) so that they may be scheduled before the kernel
// before them in the stream has finished: such a kernel calls this before it reads or writes
// global memory, and it returns once the kernels it depends on have completed, their memory
// visible. Every such kernel waits before touching memory, so each one's completion implies its
// predecessors'. No kernel triggers its dependents early (griddepcontrol.launch_dependents):
// they launch as its blocks exit. Triggering at every kernel's entry measured 3.4% slower on a
// Q/DQ BERT (H200) than plain launches, waiting alone 0.6% faster. After a plain launch this
// returns at once.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

#define KILN_GRID_LOOP(i, n) for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)gridDim.x * blockDim.x)

// Runs of N elements of a storage type at N-element-aligned addresses (the host or the kernel
// checked), loaded and stored in one access and converted to and from f32 lanes.
template <typename T, int N> struct alignas(N * sizeof(T)) Run { T v[N]; };
template <int N, typename T>
__device__ __forceinline__ void load_run(const T* p, float* f) {
    const Run<T, N> r = *reinterpret_cast<const Run<T, N>*>(p);
#pragma unroll
    for (int e = 0; e < N; ++e) f[e] = to_f(r.v[e]);
}

// 1.5·2^23, whose unit in the last place is 1: a float below 2^22 in magnitude added to it is
// rounded half to even by the adder, the integer left in the low mantissa bits. It replaces
// rintf, conversions of floats to integers (F2I) and of 8-bit integers to floats (I2F.S8),
// which issue at an eighth of the float rate.
#define KILN_ROUNDING_RANGE 4194304.0f
#define KILN_ROUNDING_MAGIC 12582912.0f
#define KILN_ROUNDING_MAGIC_BITS 0x4B400000

// Runs of 8-bit levels, a multiple of 4: each byte permuted under the rounding constant's high
// bytes (KILN_ROUNDING_MAGIC + the byte, exactly) and the constant taken away, two instructions
// at the integer and float rates where the conversion took one at an eighth; signed bytes are
// offset by 128 first, one XOR a word. The floats are exact, as the conversion's.
template <int N, bool SIGNED>
__device__ __forceinline__ void load_byte_run(const void* p, float* f) {
    if constexpr (N % 4 != 0) {
#pragma unroll
        for (int e = 0; e < N; ++e) f[e] = SIGNED ? (float)((const signed char*)p)[e] : (float)((const unsigned char*)p)[e];
    } else {
        const Run<unsigned, N / 4> r = *reinterpret_cast<const Run<unsigned, N / 4>*>(p);
        const float base = SIGNED ? KILN_ROUNDING_MAGIC + 128.0f : KILN_ROUNDING_MAGIC;
#pragma unroll
        for (int w = 0; w < N / 4; ++w) {
            const unsigned word = SIGNED ? r.v[w] ^ 0x80808080u : r.v[w];
#pragma unroll
            for (int e = 0; e < 4; ++e) f[4 * w + e] = __fsub_rn(__int_as_float(__byte_perm(word, KILN_ROUNDING_MAGIC_BITS, 0x7650 | e)), base);
        }
    }
}
template <int N>
__device__ __forceinline__ void load_run(const signed char* p, float* f) { load_byte_run<N, true>(p, f); }
template <int N>
__device__ __forceinline__ void load_run(const unsigned char* p, float* f) { load_byte_run<N, false>(p, f); }

template <int N, typename T>
__device__ __forceinline__ void store_run(T* p, const float* f) {
    Run<T, N> r;
#pragma unroll
    for (int e = 0; e < N; ++e) r.v[e] = from_f<T>(f[e]);
    *reinterpret_cast<Run<T, N>*>(p) = r;
}

// 16-byte vectors: VEC<T>::N elements per load and store.
template <typename T> struct Vec16 { static const int N = 16 / sizeof(T); };
template <typename T>
__device__ __forceinline__ void load16(const T* p, float* f) { load_run<Vec16<T>::N>(p, f); }
template <typename T>
__device__ __forceinline__ void store16(T* p, const float* f) { store_run<Vec16<T>::N>(p, f); }
// One vector of an operand read through a layout: a 16-byte load where its innermost stride is
// 1, the one element broadcast where it is 0 (the host allows no other stride).
template <typename T>
__device__ __forceinline__ void load_operand16(const Layout& l, int which, i64 i, const T* p, float* f) {
    const i64 off = operand_offset(l, which, i);
    if (l.rank > 0 && l.stride[which][l.rank - 1] == 1) {
        load16(p + off, f);
    } else {
        const float v = to_f(p[off]);
#pragma unroll
        for (int k = 0; k < Vec16<T>::N; ++k) f[k] = v;
    }
}

// x rounded half to even, as an int, after clamping to ±2^22 (which changes no 8-bit saturated
// result; NaN goes to the low end): adding KILN_ROUNDING_MAGIC rounds in the adder (above).
__device__ __forceinline__ int round_half_even_clamped(float x) {
    x = fminf(fmaxf(x, -KILN_ROUNDING_RANGE), KILN_ROUNDING_RANGE);
    return __float_as_int(__fadd_rn(x, KILN_ROUNDING_MAGIC)) - KILN_ROUNDING_MAGIC_BITS;
}

// An int32 as the nearest f32. Hopper converts at the float rate (I2FP); before it, the
// conversion issued at an eighth of it, so below 2^22 in magnitude (a sum of few products) the
// rounding constant's bits, an integer add and a float subtract, do it there.
__device__ __forceinline__ float int_as_float(int s) {
#if __CUDA_ARCH__ < 900
    if (s > -(int)KILN_ROUNDING_RANGE && s < (int)KILN_ROUNDING_RANGE) return __fsub_rn(__int_as_float(s + KILN_ROUNDING_MAGIC_BITS), KILN_ROUNDING_MAGIC);
#endif
    return __int2float_rn(s);
}

// An integer layer's level from its exact int32 sum (the int32 bias included): the sum in
// f32 times the channel's scale, clamped to [low, high] (the levels' bounds less the zero point,
// ReLU's floor included) before rounding, which gives the same integer as clamping after (the
// bounds are integers, the rounding monotone; NaN goes to the low end). The rounding add leaves
// level − zero in the low bits and the constant's low byte is 0, so the byte is theirs plus the
// zero point's: the level is the low byte of the word returned, whose other bits are not the
// level's (levels packed by byte permutes need no mask). The INT8 layers' levels-only epilogue
// (int8_conv.cu, int8_few_channels.cu, int8_gemm.cu).
__device__ __forceinline__ unsigned level_word_of_sum(int sum, float scale, float low, float high, int zero) {
    const float v = fminf(fmaxf(__fmul_rn(int_as_float(sum), scale), low), high);
    return (unsigned)(__float_as_int(__fadd_rn(v, KILN_ROUNDING_MAGIC)) + zero);
}

// level_word_of_sum's level byte.
__device__ __forceinline__ unsigned char level_of_sum(int sum, float scale, float low, float high, int zero) {
    return (unsigned char)level_word_of_sum(sum, scale, low, high, zero);
}

// Whether a scale s and its reciprocal inv = RN(1/s) are both normal floats: the product by inv
// then stands in for the division (rounded_product's and grid_rounds' argument). `&`, not `&&`:
// a short circuit is a branch, which the compiler copied each unrolled use of a Grid into.
__device__ __forceinline__ bool normal_reciprocal(float s, float inv) {
    return (fabsf(s) >= 1.17549435e-38f) & (fabsf(inv) >= 1.17549435e-38f) & (fabsf(inv) <= 3.40282347e38f);
}

// What rounded_ratio multiplies by for a grid of scale s: RN(1/s) where s and it are normal
// floats, else NaN (every ratio then takes the division).
__device__ __forceinline__ float level_reciprocal(float s) {
    const float inv = __frcp_rn(s);
    return normal_reciprocal(s, inv) ? inv : __int_as_float(0x7fc00000);
}

// round_half_even_clamped(__fdiv_rn(x, s)), and whether that ratio is NaN, where `inv` is
// level_reciprocal(s), without the division's dozen instructions but where it decides.
// q = RN(x·inv) is within 1.5·2^-23·|q| of RN(x / s) (two roundings of 2^-24 in the product,
// one in the quotient), so where q is farther than |q|·2^-21 from a half-integer both round to
// the same integer. Near a half-integer, and where q is not finite or beyond the clamp, the
// division decides.
// rounded_ratio's fast path: RN(x·inv) rounded half to even, and whether that is the quotient's
// level (`decided`: false near a half-integer, and where the product is not finite).
__device__ __forceinline__ int rounded_product(float x, float inv, bool& decided) {
    const float q = __fmul_rn(x, inv);
    const float c = fminf(fmaxf(q, -KILN_ROUNDING_RANGE), KILN_ROUNDING_RANGE);
    const float t = __fadd_rn(c, KILN_ROUNDING_MAGIC);
    // |c - round(c)| <= 0.5, exact (Sterbenz).
    const float off = fabsf(__fsub_rn(c, __fsub_rn(t, KILN_ROUNDING_MAGIC)));
    decided = __fsub_rn(0.5f, off) > __fmul_rn(fabsf(q), 0x1p-21f);
    return __float_as_int(t) - KILN_ROUNDING_MAGIC_BITS;
}

__device__ __forceinline__ int rounded_ratio(float x, float s, float inv, bool& nan) {
    bool decided;
    const int level = rounded_product(x, inv, decided);
    if (decided) {
        nan = false;
        return level;
    }
    const float ratio = __fdiv_rn(x, s);
    nan = ratio != ratio;
    return round_half_even_clamped(ratio);
}

// x clamped to [a, b], a NaN kept (FMNMX.NAN from sm_80, where fminf and fmaxf drop it).
__device__ __forceinline__ float clamp_keeping_nan(float x, float a, float b) {
#if __CUDA_ARCH__ >= 800
    float y;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(y) : "f"(x), "f"(a));
    asm("min.NaN.f32 %0, %0, %1;" : "+f"(y) : "f"(b));
    return y;
#else
    return x != x ? x : fminf(fmaxf(x, a), b);
#endif
}

// QuantizeLinear onto one grid: scale s, zero point z and levels [lo, hi] (integers in f32).
// Its levels are saturated before rounding, at low = lo − z and high = hi − z (the same level as
// clamping after: the bounds are integers, the rounding monotone), so a level costs a product,
// a clamp and the rounding add, with no zero point or bounds after it. `tolerance` is how far
// from a half-integer a clamped product must be for it to round as the quotient does.
struct Grid {
    float s, inv, z, low, high, tolerance;
};

// q = RN(x·inv) is within 1.5·2^-23·|q| of RN(x / s) (rounded_product's argument), and within
// the bounds |q| ≤ m = max(|low|, |high|): where the clamped q is farther than m·2^-21 from a
// half-integer both round alike. Beyond a bound the quotient is too (within m·2^-21 < 0.5 of
// it, m < 2^20), and the clamp leaves an integer. From m = 2^20, and where s or its reciprocal
// is not a normal float, the tolerance is not positive: every level is divided. (A NaN
// reciprocal, as level_reciprocal gives, let the compiler copy every unrolled use into a
// version for it.)
__device__ __forceinline__ Grid grid_of(float s, float z, float lo, float hi) {
    const float low = __fsub_rn(lo, z), high = __fsub_rn(hi, z), m = fmaxf(fabsf(low), fabsf(high));
    const float inv = __frcp_rn(s);
    const float tolerance = __fsub_rn(0.5f, __fmul_rn(m, 0x1p-21f)) - (normal_reciprocal(s, inv) ? 0.0f : 1.0f);
    return Grid{s, inv, z, low, high, tolerance};
}

// The level's rounding add: t = clamp(RN(x·inv)) + KILN_ROUNDING_MAGIC (level − z in its low
// bits), and whether it is the quotient's level (false near a half-integer, for a NaN, which
// survives the clamp, and for every value of an abnormal scale, whose tolerance is negative).
__device__ __forceinline__ bool grid_rounds(const Grid& g, float x, float& t) {
    const float c = clamp_keeping_nan(__fmul_rn(x, g.inv), g.low, g.high);
    t = __fadd_rn(c, KILN_ROUNDING_MAGIC);
    return fabsf(__fsub_rn(c, __fsub_rn(t, KILN_ROUNDING_MAGIC))) < g.tolerance;
}

// The division's level, out of line (kernels quantize many values a thread, unrolled: an
// inlined division at each made most of their code): clamp(rne(x / s) + z) into [lo, hi] as
// a float, NaN to 0.
__device__ __noinline__ float divided_level_of(Grid g, float x) {
    const float ratio = __fdiv_rn(x, g.s);
    if (ratio != ratio) return 0.0f;
    return __fadd_rn((float)round_half_even_clamped(fminf(fmaxf(ratio, g.low), g.high)), g.z);
}

// QuantizeLinear's level of x on grid g as a float: clamp(rne(x / s) + z, lo, hi), NaN to 0.
__device__ __forceinline__ float level_on(const Grid& g, float x) {
    float t;
    if (grid_rounds(g, x, t)) return __fadd_rn(__fsub_rn(t, KILN_ROUNDING_MAGIC), g.z);
    return divided_level_of(g, x);
}

// An integer layer's residual (kiln::QuantizedParams: a skip connection's operand, added in the
// epilogue) at element i: a float widened to f32 (exact), or an 8-bit level dequantized as
// DequantizeLinear does, f32(level − zero)·scale. `type` is ops::typed::type_code's: 0 f32,
// 1 f16, 2 bf16, 4 int8, 8 uint8.
__device__ __forceinline__ float residual_at(const void* residual, int type, float scale, float zero, long long i) {
    if (type == 0) return ((const float*)residual)[i];
    if (type == 1) return __half2float(((const __half*)residual)[i]);
    if (type == 2) return __bfloat162float(((const __nv_bfloat16*)residual)[i]);
    const float level = type == 4 ? (float)((const signed char*)residual)[i] : (float)((const unsigned char*)residual)[i];
    return __fmul_rn(__fsub_rn(level, zero), scale);
}

// A skip connection joined at an integer layer's second quantization (kiln::QuantizedParams'
// join): `u = DQ(level) + DQ(join)`, its ReLU and QuantizeLinear. kiln-cuda's
// quant::Epilogue writes `params`: the join's type code (4 int8, 8 uint8), scale and zero
// point, then the second quantization's scale, zero point, bounds and ReLU (0 or 1).
struct Join {
    const void* bytes;  // NULL: the layer has no join
    int type;
    float scale, zero, then_scale, then_inv, then_zero, then_lo, then_hi;
    bool relu;
};

__device__ __forceinline__ Join join_of(const void* bytes, const float* params) {
    Join j = {bytes, 0, 1.0f, 0.0f, 1.0f, 1.0f, 0.0f, 0.0f, 0.0f, false};
    if (!bytes) return j;
    j.type = (int)params[0];
    j.scale = params[1];
    j.zero = params[2];
    j.then_scale = params[3];
    j.then_inv = level_reciprocal(params[3]);
    j.then_zero = params[4];
    j.then_lo = params[5];
    j.then_hi = params[6];
    j.relu = params[7] != 0.0f;
    return j;
}

// The second level's byte of the joined value `u` (the f32 Add's result): ReLU, then
// QuantizeLinear's rounding of the quotient, zero point and saturation.
__device__ __forceinline__ unsigned char second_level(const Join& j, float u) {
    if (j.relu) u = fmaxf(u, 0.0f);
    bool nan;
    float level = (float)rounded_ratio(u, j.then_scale, j.then_inv, nan);
    level = fminf(fmaxf(level + j.then_zero, j.then_lo), j.then_hi);
    return j.then_lo < 0.0f ? (unsigned char)(signed char)(int)level : (unsigned char)(int)level;
}

// The second level of first level `level` (its integer, zero point included, of scale and
// zero point `y_scale`, `y_zero`) joined with the join's element i.
__device__ __forceinline__ unsigned char joined_level(const Join& j, float level, float y_scale, float y_zero, long long i) {
    const float y = __fmul_rn(__fsub_rn(level, y_zero), y_scale);
    return second_level(j, __fadd_rn(y, residual_at(j.bytes, j.type, j.scale, j.zero, i)));
}

// An integer layer's levels looked up in their output channel's row of `lookup`
// (kiln::QuantizedParams::lookup: 256 entries a channel, by the level's byte; global or shared
// memory). Applied where the levels are stored, after the sums are spent: the accumulating loops
// keep their registers.
__device__ __forceinline__ unsigned char looked_up(const unsigned char* lookup, long long channel, unsigned char level) {
    return lookup[channel * 256 + level];
}

// The low bytes of four words as one word, a's lowest.
__device__ __forceinline__ unsigned packed_bytes(unsigned a, unsigned b, unsigned c, unsigned d) {
    return __byte_perm(__byte_perm(a, b, 0x0040), __byte_perm(c, d, 0x0040), 0x5410);
}

// looked_up for the 16 bytes of `piece`, channels c0 to c0 + 15: each byte taken out of its
// word by one permute (zero-extended) as the offset into its channel's row, which is a constant
// 256 · j past the first; four loaded bytes packed back by three.
__device__ __forceinline__ uint4 looked_up16(const unsigned char* lookup, long long c0, uint4 piece) {
    const unsigned char* rows = lookup + c0 * 256;
    const unsigned in[4] = {piece.x, piece.y, piece.z, piece.w};
    unsigned out[4];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
        unsigned b[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) b[i] = rows[256 * (4 * w + i) + __byte_perm(in[w], 0, 0x4440 + i)];
        out[w] = packed_bytes(b[0], b[1], b[2], b[3]);
    }
    return make_uint4(out[0], out[1], out[2], out[3]);
}

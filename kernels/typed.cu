// Every kiln element type on the device: conversions between any two types (Cast, CastNarrow,
// Quantize, Dequantize) through a run-time type code, and elementwise / unary / reduce kernels
// on the integer types and f64. Semantics follow kiln-cpu (backends/cpu/src/element*.rs) bit for
// bit: the pivot of a conversion is an exact f64 or a 64-bit integer, never a rounded value.
//
// Storage: one byte per element for the 8-bit floats and the 4-/2-bit types (the low bits of
// the byte, as kiln's host tensors hold them), so no packing happens on the device.
#include "common.cuh"
#include "binary.cuh"

// Type codes: DataType::ALL's order in kiln (kiln-cuda's ops::typed::type_code).
#define T_F32 0
#define T_F16 1
#define T_BF16 2
#define T_F64 3
#define T_I8 4
#define T_I16 5
#define T_I32 6
#define T_I64 7
#define T_U8 8
#define T_U16 9
#define T_U32 10
#define T_U64 11
#define T_BOOL 12
#define T_E4M3FN 13
#define T_E4M3FNUZ 14
#define T_E5M2 15
#define T_E5M2FNUZ 16
#define T_E8M0 17
#define T_E2M1 18
#define T_I4 19
#define T_U4 20
#define T_I2 21
#define T_U2 22

typedef unsigned int u32;
typedef unsigned char u8;

// A widened element: an exact double for float types, the integer's 64-bit two's complement
// bits (with its signedness) for integer types.
struct Scalar {
    bool is_float;
    bool is_unsigned;
    double f;
    u64 bits;
};

__device__ __forceinline__ Scalar float_scalar(double f) { Scalar s; s.is_float = true; s.is_unsigned = false; s.f = f; s.bits = 0; return s; }
__device__ __forceinline__ Scalar int_scalar(i64 v) { Scalar s; s.is_float = false; s.is_unsigned = false; s.f = 0.0; s.bits = (u64)v; return s; }
__device__ __forceinline__ Scalar uint_scalar(u64 v) { Scalar s; s.is_float = false; s.is_unsigned = true; s.f = 0.0; s.bits = v; return s; }

__device__ __forceinline__ double pow2d(int e) { return __longlong_as_double((i64)(e + 1023) << 52); }

// ---- small float formats (engine/kiln/src/ir/narrow.rs) ----
#define SP_IEEE 0
#define SP_FINITE 1
#define SP_FNUZ 2
#define SP_NONE 3

struct Format { int exp_bits, man_bits, bias, specials, max_code; };

__device__ __forceinline__ Format format_of(int code) {
    switch (code) {
    case T_E4M3FN: return Format{4, 3, 7, SP_FINITE, 0x7E};
    case T_E4M3FNUZ: return Format{4, 3, 8, SP_FNUZ, 0x7F};
    case T_E5M2: return Format{5, 2, 15, SP_IEEE, 0x7B};
    case T_E5M2FNUZ: return Format{5, 2, 16, SP_FNUZ, 0x7F};
    default: return Format{2, 1, 1, SP_NONE, 0x7};  // e2m1
    }
}

__device__ u32 fmt_nan(Format f, bool negative) {
    u32 sign_bit = 1u << (f.exp_bits + f.man_bits);
    u32 mask = sign_bit - 1;
    u32 sign = negative ? sign_bit : 0;
    switch (f.specials) {
    case SP_IEEE: return sign | (mask - 1);
    case SP_FINITE: return sign | mask;
    case SP_FNUZ: return 0x80;
    default: return negative ? 0 : sign_bit;  // ml_dtypes: NaN becomes the opposite-sign zero
    }
}

__device__ float fmt_decode(Format f, u32 bits) {
    u32 sign_bit = 1u << (f.exp_bits + f.man_bits);
    bool negative = (bits & sign_bit) != 0;
    u32 magnitude = bits & (sign_bit - 1);
    u32 exp_max = (1u << f.exp_bits) - 1;
    u32 exponent = magnitude >> f.man_bits;
    u32 mantissa = magnitude & ((1u << f.man_bits) - 1);
    const float nan = __int_as_float(0x7fc00000);
    if (f.specials == SP_FNUZ && bits == 0x80) return nan;
    if (f.specials == SP_FINITE && magnitude == sign_bit - 1) return nan;
    if (f.specials == SP_IEEE && exponent == exp_max) return mantissa != 0 ? nan : negative ? -INFINITY : INFINITY;
    double value = exponent == 0 ? (double)mantissa * pow2d(1 - f.bias - f.man_bits)
                                 : ((double)mantissa / (double)(1u << f.man_bits) + 1.0) * pow2d((int)exponent - f.bias);
    float v = (float)value;
    return negative ? -v : v;
}

__device__ u32 fmt_encode(Format f, double x, bool saturate) {
    u32 sign_bit = 1u << (f.exp_bits + f.man_bits);
    bool negative = signbit(x) != 0;
    u32 sign = negative ? sign_bit : 0;
    u32 overflow;
    if (saturate || f.specials == SP_NONE) overflow = sign | (u32)f.max_code;
    else if (f.specials == SP_IEEE) overflow = sign | (((1u << f.exp_bits) - 1) << f.man_bits);
    else overflow = fmt_nan(f, negative);
    if (isnan(x)) return fmt_nan(f, negative);
    if (isinf(x)) return overflow;
    u32 zero = f.specials == SP_FNUZ ? 0 : sign;
    double a = fabs(x);
    int min_exp = 1 - f.bias;
    if (a <= pow2d(min_exp - f.man_bits - 1)) return zero;
    int biased = (int)((__double_as_longlong(a) >> 52) & 0x7FF);
    int exp = biased == 0 ? -1074 : biased - 1023;
    if (exp < min_exp) exp = min_exp;
    double quantum = pow2d(exp - f.man_bits);
    u32 steps = (u32)rint(a / quantum);  // a / quantum is exact (a power-of-two divisor)
    u32 implicit = 1u << f.man_bits;
    if (steps == 2 * implicit) { steps = implicit; exp += 1; }
    u32 code = steps >= implicit ? ((u32)(exp + f.bias) << f.man_bits) | (steps - implicit) : steps;
    if (code > (u32)f.max_code) return overflow;
    if (code == 0) return zero;
    return sign | code;
}

// e8m0 from f32, as onnx.numpy_helper.to_float8e8m0 (rounding: 0 up, 1 down, 2 nearest).
__device__ u32 e8m0_from_f32(float x, bool saturate, int rounding) {
    u32 bits = __float_as_uint(x);
    u32 exponent = (bits >> 23) & 0xFF;
    if (exponent == 0xFF) return 0xFF;
    bool up;
    if (rounding == 1) up = false;
    else if (rounding == 0) up = (bits & 0x7FFFFF) != 0;
    else up = (bits & 0x400000) != 0 && ((bits & 0x3FFFFF) != 0 || exponent > 0);
    up = up && !(saturate && exponent == 0xFE);
    return exponent + (up ? 1 : 0);
}

// ---- rounding helpers of kiln-cpu's element.rs ----
// The f32 nearest `v` in round-to-odd, so that rounding once more to f16/bf16 is correct.
__device__ float f32_round_to_odd(double v) {
    if (isnan(v) || isinf(v)) return (float)v;
    float r = __double2float_rz(v);
    if ((double)r == v) return r;
    u32 b = __float_as_uint(r);
    return (b & 1) ? r : __uint_as_float(b + 1);  // one step away from zero, toward v
}

// Same for an integer of magnitude `m` (sign `neg`): truncate to 24 bits, set the sticky bit.
__device__ float f32_round_to_odd_int(u64 m, bool neg) {
    float r;
    if (m < (1ull << 24)) {
        r = (float)m;
    } else {
        int shift = 64 - __clzll((i64)m) - 24;
        u64 t = m >> shift;
        if ((m & ((1ull << shift) - 1)) != 0) t |= 1;
        r = ldexpf((float)t, shift);
    }
    return neg ? -r : r;
}

__device__ __forceinline__ double scalar_f64(Scalar s) {
    if (s.is_float) return s.f;
    return s.is_unsigned ? __ull2double_rn(s.bits) : __ll2double_rn((i64)s.bits);
}

// Float to integer: truncate toward zero, saturate, NaN gives 0 (Rust's `as`).
__device__ __forceinline__ i64 sat_signed(double v, double lo, double hi_excl, i64 lo_i, i64 hi_i) {
    if (v != v) return 0;
    if (v >= hi_excl) return hi_i;
    if (v <= lo) return lo_i;
    return (i64)trunc(v);
}
__device__ __forceinline__ u64 sat_unsigned(double v, double hi_excl, u64 hi_i) {
    if (v != v || v <= 0.0) return 0;
    if (v >= hi_excl) return hi_i;
    return (u64)trunc(v);
}

// The low bits of an integer-valued float (kiln's 4/2-bit `wrapping(trunc as i128)`).
__device__ __forceinline__ u64 float_low_bits(double v) {
    if (!isfinite(v)) return 0;
    double t = trunc(v);
    if (fabs(t) < 9.2233720368547758e18) return (u64)(i64)t;
    if (t >= 1.7014118346046923e38) return ~0ull;  // saturates at i128::MAX: all ones
    return 0;  // a multiple of 2^11 or more (or i128::MIN): low bits are zero
}

// ---- load / store of any type ----
// f16 -> f32 keeping a NaN's sign (the hardware conversion gives the positive canonical NaN,
// and the sign of a NaN decides the fp4 code ml_dtypes and kiln-cpu produce).
__device__ __forceinline__ float half_to_float_exact(__half h) {
    unsigned short bits = __half_as_ushort(h);
    if ((bits & 0x7c00u) == 0x7c00u && (bits & 0x03ffu) != 0u)
        return __int_as_float((int)(((unsigned)(bits & 0x8000u) << 16) | 0x7fc00000u | ((unsigned)(bits & 0x03ffu) << 13)));
    return __half2float(h);
}

__device__ Scalar load_any(int code, const void* p, i64 i) {
    switch (code) {
    case T_F32: return float_scalar(((const float*)p)[i]);
    case T_F16: return float_scalar(half_to_float_exact(((const __half*)p)[i]));
    case T_BF16: return float_scalar(__bfloat162float(((const __nv_bfloat16*)p)[i]));
    case T_F64: return float_scalar(((const double*)p)[i]);
    case T_I8: return int_scalar(((const signed char*)p)[i]);
    case T_I16: return int_scalar(((const short*)p)[i]);
    case T_I32: return int_scalar(((const int*)p)[i]);
    case T_I64: return int_scalar(((const i64*)p)[i]);
    case T_U8: return uint_scalar(((const u8*)p)[i]);
    case T_U16: return uint_scalar(((const unsigned short*)p)[i]);
    case T_U32: return uint_scalar(((const u32*)p)[i]);
    case T_U64: return uint_scalar(((const u64*)p)[i]);
    case T_BOOL: return uint_scalar(((const u8*)p)[i] != 0);
    case T_E8M0: { u32 b = ((const u8*)p)[i]; return float_scalar(b == 0xFF ? (double)__int_as_float(0x7fc00000) : (double)(float)pow2d((int)b - 127)); }
    case T_E4M3FN: case T_E4M3FNUZ: case T_E5M2: case T_E5M2FNUZ: case T_E2M1:
        return float_scalar(fmt_decode(format_of(code), ((const u8*)p)[i]));
    case T_I4: { int b = ((const u8*)p)[i] & 0xF; return int_scalar(b >= 8 ? b - 16 : b); }
    case T_U4: return uint_scalar(((const u8*)p)[i] & 0xF);
    case T_I2: { int b = ((const u8*)p)[i] & 0x3; return int_scalar(b >= 2 ? b - 4 : b); }
    case T_U2: return uint_scalar(((const u8*)p)[i] & 0x3);
    default: return int_scalar(0);
    }
}

// Cast semantics of kiln-cpu's `Elem::from_scalar`; `saturate` and `rounding` matter for the
// narrow float targets only (plain Cast: saturate, e8m0 rounds up).
__device__ void store_any(int code, void* p, i64 i, Scalar s, bool saturate, int rounding) {
    const bool neg = !s.is_float && !s.is_unsigned && (i64)s.bits < 0;
    switch (code) {
    case T_F32: ((float*)p)[i] = s.is_float ? __double2float_rn(s.f) : s.is_unsigned ? __ull2float_rn(s.bits) : __ll2float_rn((i64)s.bits); return;
    case T_F64: ((double*)p)[i] = scalar_f64(s); return;
    case T_F16: case T_BF16: {
        float r = s.is_float ? f32_round_to_odd(s.f) : f32_round_to_odd_int(neg ? (u64)0 - s.bits : s.bits, neg);
        if (code == T_F16) ((__half*)p)[i] = __float2half_rn(r); else ((__nv_bfloat16*)p)[i] = __float2bfloat16_rn(r);
        return;
    }
    case T_BOOL: ((u8*)p)[i] = s.is_float ? (s.f != 0.0) : (s.bits != 0); return;
    case T_E8M0: ((u8*)p)[i] = (u8)e8m0_from_f32((float)scalar_f64(s), saturate, rounding); return;
    case T_E4M3FN: case T_E4M3FNUZ: case T_E5M2: case T_E5M2FNUZ: case T_E2M1:
        ((u8*)p)[i] = (u8)fmt_encode(format_of(code), scalar_f64(s), saturate); return;
    default: break;
    }
    // Integer targets: from a float truncate and saturate (narrow 4/2-bit types wrap), from an
    // integer keep the low bits.
    if (code == T_I4 || code == T_U4 || code == T_I2 || code == T_U2) {
        u64 low = s.is_float ? float_low_bits(s.f) : s.bits;
        ((u8*)p)[i] = (u8)(low & ((code == T_I4 || code == T_U4) ? 0xF : 0x3));
        return;
    }
    if (!s.is_float) {
        switch (code) {
        case T_I8: case T_U8: ((u8*)p)[i] = (u8)s.bits; return;
        case T_I16: case T_U16: ((unsigned short*)p)[i] = (unsigned short)s.bits; return;
        case T_I32: case T_U32: ((u32*)p)[i] = (u32)s.bits; return;
        default: ((u64*)p)[i] = s.bits; return;
        }
    }
    double v = s.f;
    switch (code) {
    case T_I8: ((signed char*)p)[i] = (signed char)sat_signed(v, -128.0, 127.0, -128, 127); return;
    case T_I16: ((short*)p)[i] = (short)sat_signed(v, -32768.0, 32767.0, -32768, 32767); return;
    case T_I32: ((int*)p)[i] = (int)sat_signed(v, -2147483648.0, 2147483647.0, -2147483647LL - 1, 2147483647LL); return;
    case T_I64: ((i64*)p)[i] = sat_signed(v, -9.2233720368547758e18, 9.2233720368547758e18, (i64)0x8000000000000000ull, 0x7fffffffffffffffLL); return;
    case T_U8: ((u8*)p)[i] = (u8)sat_unsigned(v, 255.0, 255); return;
    case T_U16: ((unsigned short*)p)[i] = (unsigned short)sat_unsigned(v, 65535.0, 65535); return;
    case T_U32: ((u32*)p)[i] = (u32)sat_unsigned(v, 4294967295.0, 4294967295ull); return;
    case T_U64: ((u64*)p)[i] = sat_unsigned(v, 1.8446744073709552e19, ~0ull); return;
    default: return;
    }
}

// y = x converted from type `from` to type `to` (Cast, CastNarrow).
extern "C" __global__ void typed_cast_any(int from, int to, int saturate, int rounding, i64 n, const void* x, void* y) {
    KILN_GRID_LOOP(i, n) { store_any(to, y, i, load_any(from, x, i), saturate != 0, rounding); }
}

// Copies an i32 flag to 1 when a kernel meets bad input (division by zero).
__device__ __forceinline__ void raise_flag(int* flag) { if (flag) atomicExch(flag, 1); }

// ---- Quantize / Dequantize ----
// The parameter index of element i: (i / inner) % len (per tensor: len 1; per element: inner 1).
// Without 64-bit divisions where it can: they are emulated in software, and two of them per
// element made these memory-bound kernels several times slower than their traffic.
__device__ __forceinline__ i64 param_index(i64 i, i64 inner, i64 len) {
    if (len == 1) return 0;
    if (i <= 0x7fffffff && inner <= 0x7fffffff && len <= 0x7fffffff) return (i64)(((u32)i / (u32)inner) % (u32)len);
    return (i / inner) % len;
}
// Quantize: saturate(round_half_even(x / scale) + zp) into `to` (narrow floats: x / scale + zp
// rounded and saturated; 4/2-bit integers clamp). The ratio is computed in the input's compute
// type (f32 for f32/f16/bf16, f64 for f64), as kiln-cpu does.
extern "C" __global__ void quant_quantize_any(int x_type, int scale_type, int zp_type, int to, i64 inner, i64 len, i64 n,
                                              const void* x, const void* scale, const void* zp, void* y) {
    KILN_GRID_LOOP(i, n) {
        i64 p = param_index(i, inner, len);
        double sc = scalar_f64(load_any(scale_type, scale, p));
        double xv = scalar_f64(load_any(x_type, x, i));
        double ratio = x_type == T_F64 ? xv / sc : (double)((float)xv / (float)sc);
        double z = zp ? scalar_f64(load_any(zp_type, zp, p)) : 0.0;
        if (to >= T_E4M3FN && to <= T_E2M1) {
            store_any(to, y, i, float_scalar(ratio + z), true, 0);
        } else if (to >= T_I4) {
            double v = rint(ratio) + z;
            i64 lo = to == T_I4 ? -8 : to == T_I2 ? -2 : 0;
            i64 hi = to == T_I4 ? 7 : to == T_U4 ? 15 : to == T_I2 ? 1 : 3;
            i64 q = v != v ? 0 : v <= (double)lo ? lo : v >= (double)hi ? hi : (i64)v;
            ((u8*)y)[i] = (u8)((u64)q & (to == T_I4 || to == T_U4 ? 0xF : 0x3));
        } else {
            // Integer zero points are exact in f64 up to 2^53: kiln-cpu adds them as f64 too.
            store_any(to, y, i, float_scalar(rint(ratio) + z), true, 0);
        }
    }
}

// The 8-bit fast paths of Quantize and Dequantize: f32 / f16 / bf16 values, int8 / uint8
// levels. The same operations as the _any kernels (their ratio and product are f32 too; rint of
// an f32 is exact in f32; levels, zero points and the saturation bounds are small integers)
// and the same final store, without widening every element to a 64-bit Scalar.
__device__ __forceinline__ float load_float(int type, const void* p, i64 i) {
    switch (type) {
    case T_F16: return half_to_float_exact(((const __half*)p)[i]);
    case T_BF16: return __bfloat162float(((const __nv_bfloat16*)p)[i]);
    default: return ((const float*)p)[i];
    }
}

__device__ __forceinline__ int load_level(int type, const void* p, i64 i) {
    return type == T_I8 ? (int)((const signed char*)p)[i] : (int)((const u8*)p)[i];
}

extern "C" __global__ void quant_quantize_8bit(int x_type, int scale_type, int zp_type, int to, i64 inner, i64 len, i64 n,
                                               const void* x, const void* scale, const void* zp, void* y) {
    KILN_GRID_LOOP(i, n) {
        i64 p = param_index(i, inner, len);
        float ratio = __fdiv_rn(load_float(x_type, x, i), load_float(scale_type, scale, p));
        float level = __fadd_rn(rintf(ratio), zp ? (float)load_level(zp_type, zp, p) : 0.0f);
        store_any(to, y, i, float_scalar((double)level), true, 0);
    }
}

extern "C" __global__ void quant_dequantize_8bit(int x_type, int scale_type, int out_type, i64 inner, i64 len, i64 n,
                                                 const void* x, const void* scale, const void* zp, void* y) {
    KILN_GRID_LOOP(i, n) {
        i64 p = param_index(i, inner, len);
        int shifted = load_level(x_type, x, i) - (zp ? load_level(x_type, zp, p) : 0);
        float v = __fmul_rn((float)shifted, load_float(scale_type, scale, p));
        store_any(out_type, y, i, float_scalar((double)v), true, 0);
    }
}

// Four f32 / f16 / bf16 values in one access (float8's quantization below).
__device__ __forceinline__ void load_float4(int type, const void* p, i64 i, float* v) {
    if (type == T_F32) {
        const float4 f = ((const float4*)p)[i];
        v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
        return;
    }
    const uint2 raw = ((const uint2*)p)[i];
    for (int j = 0; j < 4; ++j)
        v[j] = type == T_F16 ? half_to_float_exact(((const __half*)&raw)[j]) : __bfloat162float(((const __nv_bfloat16*)&raw)[j]);
}

// quant_quantize_8bit's result in f32 and int32 operations, without its f64 saturation (NaN
// saturates to 0, as store_any does): the levels of one run of L values.
// `g` is the grid of the zero point `zi`.
template <int L>
__device__ __forceinline__ Run<u8, L> quantized_run(const float* v, const Grid& g, int zi) {
    Run<u8, L> q;
#pragma unroll
    for (int j = 0; j < L; ++j) {
        float t;
        q.v[j] = grid_rounds(g, v[j], t) ? (u8)(__float_as_int(t) - KILN_ROUNDING_MAGIC_BITS + zi) : (u8)(int)divided_level_of(g, v[j]);
    }
    return q;
}

// (level - zero) * scale in f32: the values of the run of L levels at p (L-aligned), read as
// words. Read as a Run through a reference, it compiled to L byte loads: the Dequantize views
// of a BERT's heads waited out 16 loads a thread (12 µs for 3 MB).
template <int L, typename L8>
__device__ __forceinline__ void dequantized_run(const L8* p, float s, int z, float* v) {
    static_assert(L % 4 == 0, "runs of whole words");
    const Run<unsigned, L / 4> w = *reinterpret_cast<const Run<unsigned, L / 4>*>(p);
    constexpr bool is_signed = (L8)(-1) < (L8)0;
#pragma unroll
    for (int j = 0; j < L; ++j) {
        const unsigned b = w.v[j / 4] >> (8 * (j % 4)) & 0xffu;
        v[j] = __fmul_rn((float)((is_signed ? (int)(signed char)b : (int)b) - z), s);
    }
}

// L elements a thread: one L-element run of x and of y.
template <int L, typename T>
__device__ __forceinline__ void quantize_levels(i64 runs, const T* x, const Grid& g, int zi, u8* y) {
    KILN_GRID_LOOP(i, runs) {
        float v[L];
        load_run<L>(x + i * L, v);
        *reinterpret_cast<Run<u8, L>*>(y + i * L) = quantized_run<L>(v, g, zi);
    }
}

template <int L>
__device__ __forceinline__ void quantize_8bit_runs(int x_type, int scale_type, int zp_type, int to, i64 runs, const void* x,
                                                   const void* scale, const void* zp, void* y) {
    const float s = load_float(scale_type, scale, 0);
    const int zi = zp ? load_level(zp_type, zp, 0) : 0, lo = to == T_I8 ? -128 : 0, hi = to == T_I8 ? 127 : 255;
    const Grid g = grid_of(s, (float)zi, (float)lo, (float)hi);
    switch (x_type) {
    case T_F16: quantize_levels<L>(runs, (const __half*)x, g, zi, (u8*)y); break;
    case T_BF16: quantize_levels<L>(runs, (const __nv_bfloat16*)x, g, zi, (u8*)y); break;
    default: quantize_levels<L>(runs, (const float*)x, g, zi, (u8*)y); break;
    }
}

// One scale (and zero point) for every element, 4 or 16 elements per thread: vector loads and
// stores (the host checks the length and the buffers' alignment). The usual form of
// activations, whose Q/DQ layers are bandwidth-bound: 16 levels make one 16-byte access.
extern "C" __global__ void quant_quantize_8bit_x4(int x_type, int scale_type, int zp_type, int to, i64 n4, const void* x,
                                                  const void* scale, const void* zp, void* y) {
    quantize_8bit_runs<4>(x_type, scale_type, zp_type, to, n4, x, scale, zp, y);
}
extern "C" __global__ void quant_quantize_8bit_x16(int x_type, int scale_type, int zp_type, int to, i64 n16, const void* x,
                                                   const void* scale, const void* zp, void* y) {
    quantize_8bit_runs<16>(x_type, scale_type, zp_type, to, n16, x, scale, zp, y);
}

// The float8 fast path of Quantize with one scale, from f32 / f16 / bf16:
// quant_quantize_any's operations (the f32 ratio, the zero point added in f64, the saturating
// encode), four elements per thread.
extern "C" __global__ void quant_quantize_narrow_x4(int x_type, int scale_type, int zp_type, int to, i64 n4, const void* x,
                                                    const void* scale, const void* zp, void* y) {
    // The scale and the decoded zero point once per block: decoding a float8 costs a thread
    // more than its four conversions.
    __shared__ float shared_scale;
    __shared__ double shared_zero;
    if (threadIdx.x == 0) {
        shared_scale = load_float(scale_type, scale, 0);
        shared_zero = zp ? scalar_f64(load_any(zp_type, zp, 0)) : 0.0;
    }
    __syncthreads();
    const float s = shared_scale;
    const double z = shared_zero;
    const Format f = format_of(to);
#if __CUDA_ARCH__ >= 890
    // Ada and Hopper convert f32 to e4m3 / e5m2 in one instruction, rounding to nearest even
    // and saturating to the largest finite value as fmt_encode does. Adding the zero point 0
    // turns -0 into +0, and NaN keeps its sign here: both are set apart below.
    const bool hardware = z == 0.0 && !signbit(z) && (to == T_E4M3FN || to == T_E5M2);
#else
    const bool hardware = false;
#endif
    KILN_GRID_LOOP(i, n4) {
        float v[4];
        load_float4(x_type, x, i, v);
        u8 q[4];
        for (int j = 0; j < 4; ++j) v[j] = __fdiv_rn(v[j], s);
        if (hardware) {
#if __CUDA_ARCH__ >= 890
            unsigned short lo, hi;
            if (to == T_E4M3FN) {
                asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(v[1]), "f"(v[0]));
                asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(v[3]), "f"(v[2]));
            } else {
                asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(v[1]), "f"(v[0]));
                asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(v[3]), "f"(v[2]));
            }
            const u8 raw[4] = {(u8)(lo & 0xFF), (u8)(lo >> 8), (u8)(hi & 0xFF), (u8)(hi >> 8)};
            for (int j = 0; j < 4; ++j) q[j] = v[j] != v[j] ? (u8)fmt_nan(f, signbit(v[j]) != 0) : v[j] == 0.0f ? 0 : raw[j];
#endif
        } else {
            for (int j = 0; j < 4; ++j) q[j] = (u8)fmt_encode(f, (double)v[j] + z, true);
        }
        ((uchar4*)y)[i] = make_uchar4(q[0], q[1], q[2], q[3]);
    }
}

// (level - zero) * scale in f32, L elements a thread, stored in T (one rounding).
template <int L, typename L8, typename T>
__device__ __forceinline__ void dequantize_levels(i64 runs, const L8* x, float s, int z, T* y) {
    KILN_GRID_LOOP(i, runs) {
        float v[L];
        dequantized_run<L>(x + i * L, s, z, v);
        store_run<L>(y + i * L, v);
    }
}

template <int L, typename L8>
__device__ __forceinline__ void dequantize_8bit_runs(int out_type, i64 runs, const L8* x, float s, int z, void* y) {
    switch (out_type) {
    case T_F16: dequantize_levels<L>(runs, x, s, z, (__half*)y); break;
    case T_BF16: dequantize_levels<L>(runs, x, s, z, (__nv_bfloat16*)y); break;
    default: dequantize_levels<L>(runs, x, s, z, (float*)y); break;
    }
}

template <int L>
__device__ __forceinline__ void dequantize_8bit(int x_type, int scale_type, int out_type, i64 runs, const void* x, const void* scale,
                                                const void* zp, void* y) {
    const float s = load_float(scale_type, scale, 0);
    const int z = zp ? load_level(x_type, zp, 0) : 0;
    if (x_type == T_I8) dequantize_8bit_runs<L>(out_type, runs, (const signed char*)x, s, z, y);
    else dequantize_8bit_runs<L>(out_type, runs, (const u8*)x, s, z, y);
}

extern "C" __global__ void quant_dequantize_8bit_x4(int x_type, int scale_type, int out_type, i64 n4, const void* x,
                                                    const void* scale, const void* zp, void* y) {
    dequantize_8bit<4>(x_type, scale_type, out_type, n4, x, scale, zp, y);
}
extern "C" __global__ void quant_dequantize_8bit_x16(int x_type, int scale_type, int out_type, i64 n16, const void* x,
                                                     const void* scale, const void* zp, void* y) {
    dequantize_8bit<16>(x_type, scale_type, out_type, n16, x, scale, zp, y);
}

// Per-tensor 8-bit Q/DQ of a strided view into a packed output (a head split's or head merge's
// transpose carried out by the layer itself instead of a copy before or after it): run r of L
// elements starts at operand_offset(l, 0, r) in x (l.shape counts the last axis in runs, whose
// elements are contiguous and L-aligned) and at r * L in y, with the packed kernels' runs.
template <int L, typename T, typename L8>
__device__ __forceinline__ void dequantize_view_runs(i64 runs, const Layout& l, const L8* x, float s, int z, T* y) {
    KILN_GRID_LOOP(r, runs) {
        float v[L];
        dequantized_run<L>(x + operand_offset(l, 0, r), s, z, v);
        store_run<L>(y + r * L, v);
    }
}

template <int L, typename L8>
__device__ __forceinline__ void dequantize_view_typed(int out_type, i64 runs, const Layout& l, const L8* x, float s, int z, void* y) {
    switch (out_type) {
    case T_F16: dequantize_view_runs<L>(runs, l, x, s, z, (__half*)y); break;
    case T_BF16: dequantize_view_runs<L>(runs, l, x, s, z, (__nv_bfloat16*)y); break;
    default: dequantize_view_runs<L>(runs, l, x, s, z, (float*)y); break;
    }
}

template <int L>
__device__ __forceinline__ void dequantize_view(int x_type, int scale_type, int out_type, i64 runs, const Layout& l, const void* x,
                                                const void* scale, const void* zp, void* y) {
    const float s = load_float(scale_type, scale, 0);
    const int z = zp ? load_level(x_type, zp, 0) : 0;
    if (x_type == T_I8) dequantize_view_typed<L>(out_type, runs, l, (const signed char*)x, s, z, y);
    else dequantize_view_typed<L>(out_type, runs, l, (const u8*)x, s, z, y);
}

extern "C" __global__ void quant_dequantize_8bit_view_x8(int x_type, int scale_type, int out_type, i64 runs, Layout l, const void* x,
                                                         const void* scale, const void* zp, void* y) {
    dequantize_view<8>(x_type, scale_type, out_type, runs, l, x, scale, zp, y);
}
extern "C" __global__ void quant_dequantize_8bit_view_x16(int x_type, int scale_type, int out_type, i64 runs, Layout l, const void* x,
                                                          const void* scale, const void* zp, void* y) {
    dequantize_view<16>(x_type, scale_type, out_type, runs, l, x, scale, zp, y);
}

template <int L, typename T>
__device__ __forceinline__ void quantize_view_runs(i64 runs, const Layout& l, const T* x, const Grid& g, int zi, u8* y) {
    KILN_GRID_LOOP(r, runs) {
        float v[L];
        load_run<L>(x + operand_offset(l, 0, r), v);
        *reinterpret_cast<Run<u8, L>*>(y + r * L) = quantized_run<L>(v, g, zi);
    }
}

template <int L>
__device__ __forceinline__ void quantize_view(int x_type, int scale_type, int zp_type, int to, i64 runs, const Layout& l, const void* x,
                                              const void* scale, const void* zp, void* y) {
    const float s = load_float(scale_type, scale, 0);
    const int zi = zp ? load_level(zp_type, zp, 0) : 0, lo = to == T_I8 ? -128 : 0, hi = to == T_I8 ? 127 : 255;
    const Grid g = grid_of(s, (float)zi, (float)lo, (float)hi);
    switch (x_type) {
    case T_F16: quantize_view_runs<L>(runs, l, (const __half*)x, g, zi, (u8*)y); break;
    case T_BF16: quantize_view_runs<L>(runs, l, (const __nv_bfloat16*)x, g, zi, (u8*)y); break;
    default: quantize_view_runs<L>(runs, l, (const float*)x, g, zi, (u8*)y); break;
    }
}

extern "C" __global__ void quant_quantize_8bit_view_x8(int x_type, int scale_type, int zp_type, int to, i64 runs, Layout l, const void* x,
                                                       const void* scale, const void* zp, void* y) {
    quantize_view<8>(x_type, scale_type, zp_type, to, runs, l, x, scale, zp, y);
}
extern "C" __global__ void quant_quantize_8bit_view_x16(int x_type, int scale_type, int zp_type, int to, i64 runs, Layout l, const void* x,
                                                        const void* scale, const void* zp, void* y) {
    quantize_view<16>(x_type, scale_type, zp_type, to, runs, l, x, scale, zp, y);
}

// Dequantize: (x - zp) * scale in the scale's compute type; x - zp is exact (integers through
// 64-bit arithmetic, narrow floats in f64).
extern "C" __global__ void quant_dequantize_any(int x_type, int scale_type, int out_type, i64 inner, i64 len, i64 n,
                                                const void* x, const void* scale, const void* zp, void* y) {
    KILN_GRID_LOOP(i, n) {
        i64 p = param_index(i, inner, len);
        Scalar xs = load_any(x_type, x, i);
        double shifted;
        if (xs.is_float) {
            shifted = xs.f - (zp ? scalar_f64(load_any(x_type, zp, p)) : 0.0);
        } else {
            Scalar zs = zp ? load_any(x_type, zp, p) : int_scalar(0);
            // Exact as i128 on the cpu; in 64 bits the difference of two u64 may not fit, so
            // take the sign apart.
            if (xs.is_unsigned) shifted = xs.bits >= zs.bits ? __ull2double_rn(xs.bits - zs.bits) : -__ull2double_rn(zs.bits - xs.bits);
            else {
                i64 a = (i64)xs.bits, b = (i64)zs.bits;
                i64 d = (i64)((u64)a - (u64)b);
                bool overflow = ((a ^ b) & (a ^ d)) < 0;
                shifted = overflow ? (double)a - (double)b : __ll2double_rn(d);
            }
        }
        double sc = scalar_f64(load_any(scale_type, scale, p));
        Scalar out = out_type == T_F64 ? float_scalar(shifted * sc) : float_scalar((double)((float)shifted * (float)sc));
        store_any(out_type, y, i, out, true, 0);
    }
}

// ---- the integer layer's epilogue (kiln::QuantizedParams) ----
// acc: the exact sum of 8-bit products, as i32 (cuBLASLt) or as the f32 that holds it (cuDNN's
// float-output INT8 convolution, or the float fallback). Per element, with k its output channel
// ((i / inner) % channels): a = f32(acc + int_bias[k]); v = a * scale[k] (+ float_bias[k])
// (+ residual[i], in the sums' layout); then either the float output (ReLU clamps at 0) or the
// level round_half_even(v [/ y_scale, with a float term]) (ReLU clamps at 0) + y_zero,
// saturated to [lo, hi], then its second level where the layer has a second quantization (`then`:
// its table of levels by the first level's byte; or, with a join, the level dequantized, the
// join's element added, common.cuh's Join). Every f32 step is rounded on its
// own (no fused multiply-add), the operations kiln-cpu's oracle performs. out_type is the levels'
// type (a second quantization's is a byte too).
extern "C" __global__ void quant_requantize(int acc_type, int out_type, i64 inner, i64 channels, i64 n, const void* acc,
                                            const int* int_bias, const float* scale, i64 scale_len,
                                            const float* float_bias, i64 float_bias_len, float y_scale, float y_zero,
                                            float lo, float hi, int relu, const void* residual, int residual_type,
                                            float residual_scale, float residual_zero, const u8* then, const u8* lookup,
                                            const void* join_bytes, const float* join_params, void* y) {
    const float y_inv = level_reciprocal(y_scale);
    const Join join = join_of(join_bytes, join_params);
    KILN_GRID_LOOP(i, n) {
        i64 k = param_index(i, inner, channels);
        double exact = acc_type == T_I32 ? (double)((const int*)acc)[i] : (double)((const float*)acc)[i];
        if (int_bias) exact += (double)int_bias[k];
        float v = __fmul_rn(__double2float_rn(exact), scale[scale_len == 1 ? 0 : k]);
        if (float_bias) v = __fadd_rn(v, float_bias[float_bias_len == 1 ? 0 : k]);
        if (residual) v = __fadd_rn(v, residual_at(residual, residual_type, residual_scale, residual_zero, i));
        if (out_type != T_I8 && out_type != T_U8) {
            store_any(out_type, y, i, float_scalar(relu ? fmaxf(v, 0.0f) : v), false, 0);
            continue;
        }
        bool nan;
        float level = float_bias || residual ? (float)rounded_ratio(v, y_scale, y_inv, nan) : rintf(v);
        if (relu) level = fmaxf(level, 0.0f);
        level = fminf(fmaxf(level + y_zero, lo), hi);
        const u8 byte = out_type == T_I8 ? (u8)(signed char)(int)level : (u8)(int)level;
        ((u8*)y)[i] = join.bytes ? joined_level(join, level, y_scale, y_zero, i) : then ? __ldg(then + byte) : lookup ? looked_up(lookup, k, byte) : byte;
    }
}

// quant_requantize where the channels are innermost (a product's row-major sums, a convolution's
// NHWC ones) and their count is a multiple of 4: four sums per thread with vector loads and
// stores, 32-bit indexing (n4 < 2^29). The same f32 operations: a sum plus its int32 bias is an
// exact 64-bit integer, rounded once to f32 as the f64 pivot rounds it.
template <typename T> struct VecOf;
template <> struct VecOf<int> { typedef int4 T; };
template <> struct VecOf<float> { typedef float4 T; };
// The sum plus the int32 bias, rounded once to f32: exact in 64-bit integers (int32 sums) or
// in f64 (f32 sums of integers, exact below 2^24).
__device__ __forceinline__ float exact_sum(int s, int b) { return __ll2float_rn((i64)s + b); }
__device__ __forceinline__ float exact_sum(float s, int b) { return __double2float_rn((double)s + b); }

template <typename Acc>
__device__ __forceinline__ void requantize_rows_x4(int out_type, int channels, int n4, const Acc* acc, const int* int_bias,
                                                   const float* scale, int scale_len, const float* float_bias,
                                                   int float_bias_len, float y_scale, float y_zero, float lo, float hi,
                                                   int relu, const void* residual, int residual_type, float residual_scale,
                                                   float residual_zero, const u8* then, const u8* lookup, const Join& join, void* y) {
    const float y_inv = level_reciprocal(y_scale);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += gridDim.x * blockDim.x) {
        const int c = (i * 4) % channels;
        const typename VecOf<Acc>::T a = ((const typename VecOf<Acc>::T*)acc)[i];
        const Acc sums[4] = {a.x, a.y, a.z, a.w};
        float v[4];
        for (int j = 0; j < 4; ++j) {
            float f = exact_sum(sums[j], int_bias ? int_bias[c + j] : 0);
            v[j] = __fmul_rn(f, scale[scale_len == 1 ? 0 : c + j]);
            if (float_bias) v[j] = __fadd_rn(v[j], float_bias[float_bias_len == 1 ? 0 : c + j]);
            if (residual) v[j] = __fadd_rn(v[j], residual_at(residual, residual_type, residual_scale, residual_zero, (i64)i * 4 + j));
        }
        if (out_type == T_I8 || out_type == T_U8) {
            u8 q[4];
            for (int j = 0; j < 4; ++j) {
                bool nan;
                float level = float_bias || residual ? (float)rounded_ratio(v[j], y_scale, y_inv, nan) : rintf(v[j]);
                if (relu) level = fmaxf(level, 0.0f);
                level = fminf(fmaxf(level + y_zero, lo), hi);
                q[j] = out_type == T_I8 ? (u8)(signed char)(int)level : (u8)(int)level;
                if (join.bytes) q[j] = joined_level(join, level, y_scale, y_zero, (i64)i * 4 + j);
                else if (then) q[j] = __ldg(then + q[j]);
                else if (lookup) q[j] = looked_up(lookup, c + j, q[j]);
            }
            ((uchar4*)y)[i] = make_uchar4(q[0], q[1], q[2], q[3]);
            continue;
        }
        for (int j = 0; j < 4; ++j) v[j] = relu ? fmaxf(v[j], 0.0f) : v[j];
        if (out_type == T_F32) {
            ((float4*)y)[i] = make_float4(v[0], v[1], v[2], v[3]);
        } else if (out_type == T_F16) {
            __half2 h[2] = {__floats2half2_rn(v[0], v[1]), __floats2half2_rn(v[2], v[3])};
            ((uint2*)y)[i] = *(uint2*)h;
        } else {
            __nv_bfloat162 h[2] = {__floats2bfloat162_rn(v[0], v[1]), __floats2bfloat162_rn(v[2], v[3])};
            ((uint2*)y)[i] = *(uint2*)h;
        }
    }
}

// acc_type: T_I32 or T_F32; out_type: T_I8, T_U8, T_F32, T_F16 or T_BF16.
extern "C" __global__ void quant_requantize_rows_x4(int acc_type, int out_type, int channels, int n4, const void* acc,
                                                    const int* int_bias, const float* scale, i64 scale_len,
                                                    const float* float_bias, i64 float_bias_len, float y_scale,
                                                    float y_zero, float lo, float hi, int relu, const void* residual,
                                                    int residual_type, float residual_scale, float residual_zero,
                                                    const u8* then, const u8* lookup, const void* join_bytes, const float* join_params,
                                                    void* y) {
    const Join join = join_of(join_bytes, join_params);
    if (acc_type == T_I32) {
        requantize_rows_x4(out_type, channels, n4, (const int*)acc, int_bias, scale, (int)scale_len, float_bias,
                           (int)float_bias_len, y_scale, y_zero, lo, hi, relu, residual, residual_type, residual_scale,
                           residual_zero, then, lookup, join, y);
    } else {
        requantize_rows_x4(out_type, channels, n4, (const float*)acc, int_bias, scale, (int)scale_len, float_bias,
                           (int)float_bias_len, y_scale, y_zero, lo, hi, relu, residual, residual_type, residual_scale,
                           residual_zero, then, lookup, join, y);
    }
}

// ---- elementwise on integer types and f64 ----
// Op codes: kiln-cuda's pointwise::binary_code (OP_* of binary.cuh), plus the bitwise ops.
#define OP_BITAND 18
#define OP_BITOR 19
#define OP_BITXOR 20
#define OP_SHL 21
#define OP_SHR 22

template <typename T> struct IntTraits;
#define INT_TRAITS(T, U, BITS, SIGNED) template <> struct IntTraits<T> { typedef U Unsigned; static const int bits = BITS; static const bool is_signed = SIGNED; };
INT_TRAITS(signed char, unsigned char, 8, true)
INT_TRAITS(short, unsigned short, 16, true)
INT_TRAITS(int, unsigned int, 32, true)
INT_TRAITS(i64, u64, 64, true)
INT_TRAITS(unsigned char, unsigned char, 8, false)
INT_TRAITS(unsigned short, unsigned short, 16, false)
INT_TRAITS(unsigned int, unsigned int, 32, false)
INT_TRAITS(u64, u64, 64, false)

// `x < 0` that unsigned types answer without a (warned) pointless comparison.
template <typename T> __device__ __forceinline__ bool negative(T x) { return IntTraits<T>::is_signed && (i64)x < 0; }

// Wrapping arithmetic through the unsigned type; division truncates (C), MIN / -1 wraps.
template <typename T>
__device__ T int_op(int op, T a, T b, int* flag) {
    typedef typename IntTraits<T>::Unsigned U;
    const int bits = IntTraits<T>::bits;
    const T zero = 0;
    switch (op) {
    case OP_ADD: return (T)(U)((U)a + (U)b);
    case OP_SUB: return (T)(U)((U)a - (U)b);
    case OP_MUL: return (T)(U)((u64)(U)a * (u64)(U)b);
    case OP_MAX: return a > b ? a : b;
    case OP_MIN: return a < b ? a : b;
    case OP_BITAND: return a & b;
    case OP_BITOR: return a | b;
    case OP_BITXOR: return a ^ b;
    // Shifts by a negative amount or not below the width: numpy's results.
    case OP_SHL: return (negative(b) || (u64)b >= (u64)bits) ? zero : (T)(U)((U)a << (int)b);
    case OP_SHR: return (negative(b) || (u64)b >= (u64)bits) ? (negative(a) ? (T)-1 : zero) : (T)(a >> (int)b);
    case OP_POW: {
        if (negative(b)) {
            if (a == zero) { raise_flag(flag); return zero; }
            if (a == (T)1) return (T)1;
            if (IntTraits<T>::is_signed && a == (T)-1) return ((u64)b & 1) ? a : (T)1;
            return zero;
        }
        U result = 1, square = (U)a;
        for (u64 e = (u64)b; e > 0; e >>= 1) {
            if (e & 1) result = (U)((u64)result * (u64)square);
            square = (U)((u64)square * (u64)square);
        }
        return (T)result;
    }
    default: break;
    }
    // Division family: b == 0 is an error; MIN / -1 wraps (MIN), MIN % -1 is 0.
    if (b == zero) { raise_flag(flag); return zero; }
    bool min_by_minus_one = IntTraits<T>::is_signed && b == (T)-1 && (U)a == ((U)1 << (bits - 1));
    T q = min_by_minus_one ? a : a / b;
    T r = min_by_minus_one ? zero : a % b;
    bool adjust = r != zero && (negative(r) != negative(b));
    switch (op) {
    case OP_DIV: return q;
    case OP_FLOORDIV: return adjust ? (T)(U)((U)q - (U)1) : q;
    case OP_MOD: return adjust ? (T)(U)((U)r + (U)b) : r;
    case OP_FMOD: return r;
    default: return zero;
    }
}

// f64 arithmetic as kiln-cpu (NaN-propagating min/max, Python-style Mod).
__device__ double f64_op(int op, double a, double b) {
    switch (op) {
    case OP_ADD: return a + b;
    case OP_SUB: return a - b;
    case OP_MUL: return a * b;
    case OP_DIV: return a / b;
    case OP_POW: return pow(a, b);
    case OP_MAX: return (a != a || b != b) ? __longlong_as_double(0x7ff8000000000000LL) : (b > a ? b : a);
    case OP_MIN: return (a != a || b != b) ? __longlong_as_double(0x7ff8000000000000LL) : (b < a ? b : a);
    case OP_FLOORDIV: return floor(a / b);
    case OP_MOD: { double r = fmod(a, b); return r == 0.0 ? copysign(0.0, b) : ((r < 0.0) != (b < 0.0)) ? r + b : r; }
    case OP_FMOD: return fmod(a, b);
    default: return 0.0;
    }
}

template <typename T> __device__ __forceinline__ T typed_op(int op, T a, T b, int* flag) { return int_op<T>(op, a, b, flag); }
template <> __device__ __forceinline__ double typed_op<double>(int op, double a, double b, int*) { return f64_op(op, a, b); }

template <typename T>
__device__ __forceinline__ bool typed_compare(int op, T x, T y) {
    return op == OP_EQ ? x == y : op == OP_GT ? x > y : op == OP_LT ? x < y : op == OP_GE ? x >= y : x <= y;
}

// ---- unary ----
// Codes: kiln-cuda's pointwise::unary_code / activation_code (unary_float of elementwise.cu),
// evaluated in double for f64; on integers Abs (36), Neg (37), Sign (53) and Not (60: bitwise).
__device__ double unary_double(int op, double x, double alpha, double beta) {
    switch (op) {
    case 0: return x != x ? x : fmax(x, 0.0);
    case 1: return 1.0 / (1.0 + exp(-x));
    case 2: return tanh(x);
    case 3: return x >= 0.0 ? x : alpha * x;
    case 4: return x >= 0.0 ? x : alpha * expm1(x);
    case 5: return x > 0.0 ? beta * x : beta * alpha * expm1(x);
    case 6: return x / (1.0 + fabs(x));
    case 7: return x > 20.0 ? x : log1p(exp(x));
    case 8: return fmin(fmax(x, alpha), beta);
    case 9: return fmin(fmax(alpha * x + beta, 0.0), 1.0);
    case 10: return x * fmin(fmax(x / 6.0 + 0.5, 0.0), 1.0);
    case 11: return alpha * tanh(beta * x);
    case 12: return x > alpha ? x : 0.0;
    case 13: return 0.5 * x * (1.0 + erf(x * 0.70710678118654752));
    case 14: return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    case 15: return fmax(0.0, x) + fmin(0.0, alpha * expm1(x / alpha));
    case 16: return x * tanh(x > 20.0 ? x : log1p(exp(x)));
    case 17: return x / (1.0 + exp(-x));
    case 32: return exp(x);
    case 33: return log(x);
    case 34: return sqrt(x);
    case 35: return 1.0 / x;
    case 36: return fabs(x);
    case 37: return -x;
    case 38: return sin(x);
    case 39: return cos(x);
    case 40: return tan(x);
    case 41: return sinh(x);
    case 42: return cosh(x);
    case 43: return asin(x);
    case 44: return acos(x);
    case 45: return atan(x);
    case 46: return asinh(x);
    case 47: return acosh(x);
    case 48: return atanh(x);
    case 49: return ceil(x);
    case 50: return floor(x);
    case 51: return rint(x);
    case 52: return erf(x);
    case 53: return x > 0.0 ? 1.0 : x < 0.0 ? -1.0 : x;
    default: return __longlong_as_double(0x7ff8000000000000LL);
    }
}

template <typename T>
__device__ __forceinline__ T int_unary(int op, T x) {
    typedef typename IntTraits<T>::Unsigned U;
    const T zero = 0;
    switch (op) {
    case 36: return negative(x) ? (T)(U)((U)0 - (U)x) : x;
    case 37: return (T)(U)((U)0 - (U)x);
    case 53: return negative(x) ? (T)-1 : x == zero ? zero : (T)1;
    case 60: return (T)~x;
    default: return zero;
    }
}

template <typename T> __device__ __forceinline__ T typed_unary_one(int op, T x, double, double) { return int_unary<T>(op, x); }
template <> __device__ __forceinline__ double typed_unary_one<double>(int op, double x, double a, double b) { return unary_double(op, x, a, b); }

// ---- reductions on integer types and f64 ----
// The low 64 bits of the 128-bit (hi:lo) / d, truncated toward zero (NVRTC has no __int128
// without --device-int128).
__device__ u64 div128_trunc(u64 lo, i64 hi, u64 d) {
    bool neg = hi < 0;
    u64 h = (u64)hi;
    if (neg) { lo = ~lo + 1; h = ~h + (lo == 0 ? 1 : 0); }
    u64 q = 0, rem = 0;
    for (int bit = 127; bit >= 0; --bit) {
        u64 b = bit >= 64 ? (h >> (bit - 64)) & 1 : (lo >> bit) & 1;
        rem = (rem << 1) | b;
        q <<= 1;  // only the low 64 quotient bits are kept
        if (rem >= d) { rem -= d; q |= 1; }
    }
    return neg ? (u64)0 - q : q;
}
// Codes: kiln-cuda's compute::reduce_code. Data viewed as [outer, len, inner]; one thread per
// output element, accumulating sequentially in the element type (integers wrap), as kiln-cpu.
template <typename T>
__device__ void typed_reduce(int op, i64 outer, i64 len, i64 inner, const T* x, T* y, int out_code) {
    typedef typename IntTraits<T>::Unsigned U;
    const bool sgn = IntTraits<T>::is_signed;
    const int bits = IntTraits<T>::bits;
    const T tmin = sgn ? (T)((U)1 << (bits - 1)) : (T)0;
    const T tmax = (T)(sgn ? (U)(((U)1 << (bits - 1)) - 1) : (U)~(U)0);
    KILN_GRID_LOOP(o, outer * inner) {
        const T* row = x + (o / inner) * len * inner + (o % inner);
        if (op == 4) {  // mean: exact 128-bit sum, division truncating toward zero, then wrap
            u64 lo = 0;
            i64 hi = 0;
            for (i64 k = 0; k < len; ++k) {
                T v = row[k * inner];
                u64 add = sgn ? (u64)(i64)v : (u64)v;
                u64 next = lo + add;
                hi += (negative(v) ? -1 : 0) + (next < lo ? 1 : 0);
                lo = next;
            }
            y[o] = len > 0 ? (T)(U)div128_trunc(lo, hi, (u64)len) : (T)0;
            continue;
        }
        if (op == 6 || op == 7 || op == 8) {  // leave the integers: f64, then Cast semantics
            double acc;
            if (op == 8) {
                double m = -INFINITY;
                for (i64 k = 0; k < len; ++k) m = fmax(m, (double)row[k * inner]);
                double s = 0.0;
                for (i64 k = 0; k < len; ++k) s += exp((double)row[k * inner] - m);
                acc = isfinite(m) ? m + log(s) : m;
            } else {
                acc = 0.0;
                for (i64 k = 0; k < len; ++k) { double v = (double)row[k * inner]; acc += op == 6 ? v * v : v; }
                acc = op == 6 ? sqrt(acc) : log(acc);
            }
            store_any(out_code, y, o, float_scalar(acc), true, 0);
            continue;
        }
        T acc = op == 1 ? (T)1 : op == 2 ? tmin : op == 3 ? tmax : (T)0;
        for (i64 k = 0; k < len; ++k) {
            T v = row[k * inner];
            switch (op) {
            case 1: acc = int_op<T>(OP_MUL, acc, v, nullptr); break;
            case 2: acc = v > acc ? v : acc; break;
            case 3: acc = v < acc ? v : acc; break;
            case 5: acc = int_op<T>(OP_ADD, acc, int_unary<T>(36, v), nullptr); break;
            case 9: acc = int_op<T>(OP_ADD, acc, int_op<T>(OP_MUL, v, v, nullptr), nullptr); break;
            default: acc = int_op<T>(OP_ADD, acc, v, nullptr); break;
            }
        }
        y[o] = acc;
    }
}

// Every Reduce op on f64, in double and in element order, as kiln-cpu folds them.
__device__ void reduce_double(int op, i64 outer, i64 len, i64 inner, const double* x, double* y) {
    KILN_GRID_LOOP(o, outer * inner) {
        const double* row = x + (o / inner) * len * inner + (o % inner);
        double acc;
        if (op == 2 || op == 3 || op == 1) {
            acc = op == 1 ? 1.0 : op == 2 ? -INFINITY : INFINITY;
            for (i64 k = 0; k < len; ++k) acc = f64_op(op == 2 ? OP_MAX : op == 3 ? OP_MIN : OP_MUL, acc, row[k * inner]);
        } else if (op == 8) {
            double m = -INFINITY;
            for (i64 k = 0; k < len; ++k) m = f64_op(OP_MAX, m, row[k * inner]);
            double s = 0.0;
            for (i64 k = 0; k < len; ++k) s += exp(row[k * inner] - m);
            acc = isfinite(m) ? m + log(s) : m;
        } else {
            acc = 0.0;
            for (i64 k = 0; k < len; ++k) {
                double v = row[k * inner];
                acc += op == 5 ? fabs(v) : (op == 6 || op == 9) ? v * v : v;
            }
            if (op == 4) acc /= (double)len;
            if (op == 6) acc = sqrt(acc);
            if (op == 7) acc = log(acc);
        }
        y[o] = acc;
    }
}

#define TYPED_KERNELS(suffix, T) \
    extern "C" __global__ void typed_binary_##suffix(int op, i64 n, Layout l, const T* a, const T* b, T* o, int* flag) { \
        KILN_GRID_LOOP(i, n) { o[i] = typed_op<T>(op, a[operand_offset(l, 0, i)], b[operand_offset(l, 1, i)], flag); } } \
    extern "C" __global__ void typed_compare_##suffix(int op, i64 n, Layout l, const T* a, const T* b, unsigned char* o) { \
        KILN_GRID_LOOP(i, n) { o[i] = typed_compare<T>(op, a[operand_offset(l, 0, i)], b[operand_offset(l, 1, i)]); } } \
    extern "C" __global__ void typed_unary_##suffix(int op, float alpha, float beta, i64 n, const T* x, T* y) { \
        KILN_GRID_LOOP(i, n) { y[i] = typed_unary_one<T>(op, x[i], alpha, beta); } }

TYPED_KERNELS(i8, signed char)
TYPED_KERNELS(i16, short)
TYPED_KERNELS(i32, int)
TYPED_KERNELS(i64, i64)
TYPED_KERNELS(u8, unsigned char)
TYPED_KERNELS(u16, unsigned short)
TYPED_KERNELS(u32, unsigned int)
TYPED_KERNELS(u64, u64)
TYPED_KERNELS(f64, double)

#define TYPED_REDUCE(suffix, T, CODE) \
    extern "C" __global__ void typed_reduce_##suffix(int op, i64 outer, i64 len, i64 inner, const T* x, T* y) { typed_reduce<T>(op, outer, len, inner, x, y, CODE); }
TYPED_REDUCE(i8, signed char, T_I8)
TYPED_REDUCE(i16, short, T_I16)
TYPED_REDUCE(i32, int, T_I32)
TYPED_REDUCE(i64, i64, T_I64)
TYPED_REDUCE(u8, unsigned char, T_U8)
TYPED_REDUCE(u16, unsigned short, T_U16)
TYPED_REDUCE(u32, unsigned int, T_U32)
TYPED_REDUCE(u64, u64, T_U64)
extern "C" __global__ void typed_reduce_f64(int op, i64 outer, i64 len, i64 inner, const double* x, double* y) { reduce_double(op, outer, len, inner, x, y); }

// IsNaN / IsInf on any float type `code` (op 0: NaN; 1, 2, 3: infinity of either sign, +, -),
// and Not on bool.
extern "C" __global__ void typed_classify_any(int code, int op, i64 n, const void* x, unsigned char* y) {
    KILN_GRID_LOOP(i, n) {
        double v = scalar_f64(load_any(code, x, i));
        y[i] = op == 0 ? (v != v) : isinf(v) && (op == 1 || (op == 2 ? v > 0.0 : v < 0.0));
    }
}
extern "C" __global__ void typed_not_bool(i64 n, const unsigned char* x, unsigned char* y) {
    KILN_GRID_LOOP(i, n) { y[i] = x[i] == 0; }
}
// ReduceMax / ReduceMin on bool (codes 2 and 3): "any" and "all", so an empty Min is true
// (kiln-cpu's bool_reduce); the host refuses every other op.
extern "C" __global__ void typed_reduce_bool(int op, i64 outer, i64 len, i64 inner, const unsigned char* x, unsigned char* y) {
    KILN_GRID_LOOP(o, outer * inner) {
        const unsigned char* row = x + (o / inner) * len * inner + (o % inner);
        const bool any = op == 2;
        bool acc = !any;
        for (i64 k = 0; k < len && acc != any; ++k) acc = row[k * inner] != 0;
        y[o] = acc;
    }
}

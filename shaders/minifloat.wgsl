// Rounding of f32 values to kiln's storage-only float types (float8 e4m3fn, e4m3fnuz,
// e5m2, e5m2fnuz, e8m0; float4 e2m1), bit-exact with kiln::ir::narrow (the cpu backend):
// round to nearest even on the mantissa by integer arithmetic on the f32 bits, subnormals
// kept, overflow saturating or giving the type's infinity / NaN. Values of these types live
// on the device as their decoded f32 value; a NaN keeps its sign and carries its code in the
// low mantissa bits so that moving a tensor and reading it back gives the same codes.
//
// Kernels call `round_to_<type>(x)` (ONNX's defaults: saturate, e8m0 rounds up) or
// `round_to_<type>_mode(x, saturate)` / `round_to_f8e8m0_mode(x, saturate, rounding)`.

// How a format encodes specials (kiln::ir::narrow::Specials).
const MF_IEEE: u32 = 0u; // all-ones exponent: infinity or NaN
const MF_FINITE: u32 = 1u; // no infinity; the all-ones code per sign is NaN
const MF_FNUZ: u32 = 2u; // no infinity, no -0; 0x80 is the only NaN
const MF_NONE: u32 = 3u; // no infinity, no NaN (float4)

struct MiniFloat {
    exp_bits: u32,
    man_bits: u32,
    bias: i32,
    specials: u32,
    max_code: u32, // magnitude code of the largest finite value
}

const F8E4M3FN: MiniFloat = MiniFloat(4u, 3u, 7, MF_FINITE, 0x7eu);
const F8E4M3FNUZ: MiniFloat = MiniFloat(4u, 3u, 8, MF_FNUZ, 0x7fu);
const F8E5M2: MiniFloat = MiniFloat(5u, 2u, 15, MF_IEEE, 0x7bu);
const F8E5M2FNUZ: MiniFloat = MiniFloat(5u, 2u, 16, MF_FNUZ, 0x7fu);
const F4E2M1: MiniFloat = MiniFloat(2u, 1u, 1, MF_NONE, 0x7u);

fn mf_nan(f: MiniFloat, negative: bool) -> u32 {
    let sign_bit = 1u << (f.exp_bits + f.man_bits);
    let sign = select(0u, sign_bit, negative);
    switch f.specials {
        case MF_IEEE: {
            return sign | (sign_bit - 2u);
        }
        case MF_FINITE: {
            return sign | (sign_bit - 1u);
        }
        case MF_FNUZ: {
            return 0x80u;
        }
        default: {
            // ml_dtypes maps NaN to the zero of the opposite sign.
            return select(sign_bit, 0u, negative);
        }
    }
}

// The code of the f32 with bits `bits`, rounded to nearest even.
fn mf_encode(f: MiniFloat, bits: u32, saturate: bool) -> u32 {
    let sign_bit = 1u << (f.exp_bits + f.man_bits);
    let negative = (bits >> 31u) != 0u;
    let sign = select(0u, sign_bit, negative);
    let a = bits & 0x7fffffffu;
    if (a > F32_INF) {
        return mf_nan(f, negative);
    }
    var overflow = mf_nan(f, negative);
    if (saturate || f.specials == MF_NONE) {
        overflow = sign | f.max_code;
    } else if (f.specials == MF_IEEE) {
        overflow = sign | (((1u << f.exp_bits) - 1u) << f.man_bits);
    }
    if (a == F32_INF) {
        return overflow;
    }
    let zero = select(sign, 0u, f.specials == MF_FNUZ);
    let min_exp = 1 - f.bias;
    // Half the smallest subnormal or less rounds to the (even) zero; this also covers
    // every f32 subnormal, so `a` is normal below.
    let threshold = u32(min_exp - i32(f.man_bits) - 1 + 127) << 23u;
    if (a <= threshold) {
        return zero;
    }
    let e = i32(a >> 23u) - 127;
    var ex = max(e, min_exp);
    let significand = (a & 0x7fffffu) | 0x800000u;
    // steps = significand * 2^(e - 23) / 2^(ex - man_bits), rounded to nearest even.
    let shift = u32(23 + ex - i32(f.man_bits) - e); // in [23 - man_bits, 24]
    var steps = significand >> shift;
    let rest = significand & ((1u << shift) - 1u);
    let half = 1u << (shift - 1u);
    if (rest > half || (rest == half && (steps & 1u) == 1u)) {
        steps += 1u;
    }
    let implicit = 1u << f.man_bits;
    if (steps == 2u * implicit) {
        steps = implicit;
        ex += 1;
    }
    var code = steps;
    if (steps >= implicit) {
        code = (u32(ex + f.bias) << f.man_bits) | (steps - implicit);
    }
    if (code > f.max_code) {
        return overflow;
    }
    if (code == 0u) {
        return zero;
    }
    return sign | code;
}

// A NaN with `sign` that carries `code` (see the top of this file).
fn mf_nan_word(sign: u32, code: u32) -> u32 {
    return sign | 0x7fc00000u | code;
}

// The f32 bits of a code.
fn mf_decode(f: MiniFloat, code: u32) -> u32 {
    let sign_bit = 1u << (f.exp_bits + f.man_bits);
    let magnitude = code & (sign_bit - 1u);
    let sign = select(0u, 0x80000000u, (code & sign_bit) != 0u);
    let exponent = magnitude >> f.man_bits;
    let mantissa = magnitude & ((1u << f.man_bits) - 1u);
    if (f.specials == MF_FNUZ && code == 0x80u) {
        return mf_nan_word(0u, code);
    }
    if (f.specials == MF_FINITE && magnitude == sign_bit - 1u) {
        return mf_nan_word(sign, code);
    }
    if (f.specials == MF_IEEE && exponent == (1u << f.exp_bits) - 1u) {
        return select(mf_nan_word(sign, code), sign | F32_INF, mantissa == 0u);
    }
    if (exponent == 0u) {
        if (mantissa == 0u) {
            return sign;
        }
        // mantissa * 2^(1 - bias - man_bits), normalised (always an f32 normal).
        let top = firstLeadingBit(mantissa);
        let e = i32(top) + 1 - f.bias - i32(f.man_bits);
        return sign | (u32(e + 127) << 23u) | ((mantissa ^ (1u << top)) << (23u - top));
    }
    return sign | (u32(i32(exponent) - f.bias + 127) << 23u) | (mantissa << (23u - f.man_bits));
}

fn mf_round(f: MiniFloat, x: f32, saturate: bool) -> f32 {
    return bitcast<f32>(mf_decode(f, mf_encode(f, bitcast<u32>(x), saturate)));
}

// e8m0 rounding modes (kiln::E8M0Rounding).
const E8M0_UP: u32 = 0u;
const E8M0_DOWN: u32 = 1u;
const E8M0_NEAREST: u32 = 2u;

// f32 -> e8m0 code as onnx.numpy_helper.to_float8e8m0: sign dropped, NaN and infinity to
// 0xff, the exponent rounded per `rounding`; with `saturate` 2^127 never rounds into NaN.
fn e8m0_encode(bits: u32, saturate: bool, rounding: u32) -> u32 {
    let exponent = (bits >> 23u) & 0xffu;
    if (exponent == 0xffu) {
        return 0xffu;
    }
    var up = false;
    if (rounding == E8M0_UP) {
        up = (bits & 0x7fffffu) != 0u;
    } else if (rounding == E8M0_NEAREST) {
        up = (bits & 0x400000u) != 0u && ((bits & 0x3fffffu) != 0u || exponent > 0u);
    }
    up = up && !(saturate && exponent == 0xfeu);
    return exponent + select(0u, 1u, up);
}

// 2^(code - 127) as f32 bits (2^-127 is an f32 subnormal); 0xff is NaN.
fn e8m0_decode(code: u32) -> u32 {
    if (code == 0xffu) {
        return mf_nan_word(0u, code);
    }
    if (code == 0u) {
        return 0x400000u;
    }
    return code << 23u;
}

fn round_to_f8e4m3fn_mode(x: f32, saturate: bool) -> f32 {
    return mf_round(F8E4M3FN, x, saturate);
}
fn round_to_f8e4m3fnuz_mode(x: f32, saturate: bool) -> f32 {
    return mf_round(F8E4M3FNUZ, x, saturate);
}
fn round_to_f8e5m2_mode(x: f32, saturate: bool) -> f32 {
    return mf_round(F8E5M2, x, saturate);
}
fn round_to_f8e5m2fnuz_mode(x: f32, saturate: bool) -> f32 {
    return mf_round(F8E5M2FNUZ, x, saturate);
}
fn round_to_f4e2m1_mode(x: f32, saturate: bool) -> f32 {
    return mf_round(F4E2M1, x, saturate);
}
fn round_to_f8e8m0_mode(x: f32, saturate: bool, rounding: u32) -> f32 {
    return bitcast<f32>(e8m0_decode(e8m0_encode(bitcast<u32>(x), saturate, rounding)));
}

fn round_to_f8e4m3fn(x: f32) -> f32 {
    return round_to_f8e4m3fn_mode(x, true);
}
fn round_to_f8e4m3fnuz(x: f32) -> f32 {
    return round_to_f8e4m3fnuz_mode(x, true);
}
fn round_to_f8e5m2(x: f32) -> f32 {
    return round_to_f8e5m2_mode(x, true);
}
fn round_to_f8e5m2fnuz(x: f32) -> f32 {
    return round_to_f8e5m2fnuz_mode(x, true);
}
fn round_to_f4e2m1(x: f32) -> f32 {
    return round_to_f4e2m1_mode(x, true);
}
fn round_to_f8e8m0(x: f32) -> f32 {
    return round_to_f8e8m0_mode(x, true, E8M0_UP);
}

// The value a Cast out of a storage-only float type starts from: the cpu backend decodes
// every NaN code to the positive f32 NaN.
fn mf_canonical_nan(x: f32) -> f32 {
    let bits = bitcast<u32>(x);
    return bitcast<f32>(select(bits, 0x7fc00000u, (bits & 0x7fffffffu) > F32_INF));
}

// The low 32 bits of trunc(x) as the cpu backend's i128 (saturating; NaN and infinities
// give 0), for the wrapping casts to 4- and 2-bit integers.
fn low_bits_of_trunc(x: f32) -> u32 {
    let bits = bitcast<u32>(x);
    let a = bits & 0x7fffffffu;
    if (a >= F32_INF) {
        return 0u;
    }
    if (a < 0x4f000000u) {
        return bitcast<u32>(i32(x)); // |x| < 2^31: truncates toward zero
    }
    // |x| >= 2^31 is a multiple of 2^8 (low bits zero), except that x >= 2^127
    // saturates to i128::MAX (all low bits set).
    return select(0u, 0xffffffffu, bits >= 0x7f000000u && bits < 0x80000000u);
}

// Prepended to every kiln shader. `params` carries shapes, strides and scalars as u32
// words (i32 and f32 values bit-cast); every kernel reads its element count from params[0].
@group(0) @binding(0) var<storage, read> params: array<u32>;

const WG: u32 = 256u;

// The flat invocation index of a 1-D kernel dispatched as a 2-D grid of workgroups
// (a grid dimension holds at most 65535 workgroups).
fn flat_id(wid: vec3<u32>, nwg: vec3<u32>, lid: vec3<u32>) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid.x;
}

fn param_i(i: u32) -> i32 {
    return bitcast<i32>(params[i]);
}

fn param_f(i: u32) -> f32 {
    return bitcast<f32>(params[i]);
}

const F32_INF: u32 = 0x7f800000u;

fn neg_inf() -> f32 {
    return bitcast<f32>(0xff800000u);
}

fn pos_inf() -> f32 {
    return bitcast<f32>(F32_INF);
}

// f32 bits rounded to the nearest f16 value (ties to even), still as f32 bits. Bit
// arithmetic rather than pack2x16float, which is undefined out of the f16 range and needs
// an extra capability.
fn round_f16(v: u32) -> u32 {
    let sign = v & 0x80000000u;
    let a = v & 0x7fffffffu;
    if (a > F32_INF) {
        return v;
    }
    if (a >= 0x477ff000u) {
        return sign | F32_INF; // 65520 and above round to infinity
    }
    if (a < 0x38800000u) {
        // Below 2^-14: f16 subnormals, multiples of 2^-24 (exact in f32).
        let q = round(bitcast<f32>(a) * 16777216.0) / 16777216.0;
        return sign | bitcast<u32>(q);
    }
    let r = (a + 0xfffu + ((a >> 13u) & 1u)) & 0xffffe000u;
    return sign | r;
}

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

// f32 words of an f16 tensor stored as halves, two per invocation (one u32 of halves out):
// rounded to nearest even first (round_f16, infinity beyond the f16 range), then converted on
// the bits, so the result does not depend on the driver's f32 -> f16 conversion (its rounding,
// or NaNs canonicalized without their sign). The output side of the executor's widen/narrow path.
// params: [count] (elements; the last word's upper half is padding when it is odd)
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;

fn half_bits(w: u32) -> u32 {
    let v = round_f16(w);
    let sign = (v >> 16u) & 0x8000u;
    let a = v & 0x7fffffffu;
    if (a > F32_INF) {
        return sign | 0x7e00u | ((a >> 13u) & 0x3ffu); // NaN: quiet, top payload bits kept
    }
    if (a == F32_INF) {
        return sign | 0x7c00u;
    }
    if (a < 0x38800000u) {
        return sign | u32(bitcast<f32>(a) * 16777216.0); // zero or subnormal: a multiple of 2^-24
    }
    return sign | (((a >> 23u) - 112u) << 10u) | ((a >> 13u) & 0x3ffu);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let p = flat_id(wid, nwg, lid);
    let i = 2u * p;
    if (i >= params[0]) {
        return;
    }
    var word = half_bits(src[i]);
    if (i + 1u < params[0]) {
        word = word | (half_bits(src[i + 1u]) << 16u);
    }
    dst[p] = word;
}

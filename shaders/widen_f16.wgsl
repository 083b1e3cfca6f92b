// f16 tensors stored as halves widened to f32 words (exact): the input side of the
// executor's generic widen/narrow path for kernels without an f16 instantiation. Converted on
// the bits (the halves read as u32 pairs): a driver's own f16 -> f32 -> f16 may canonicalize
// NaNs (NVIDIA's drops their sign), and moved values must keep theirs.
// params: [count]
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = flat_id(wid, nwg, lid);
    if (i >= params[0]) {
        return;
    }
    let h = (src[i >> 1u] >> (16u * (i & 1u))) & 0xffffu;
    let sign = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    var bits: u32;
    if (e == 0x1fu) {
        bits = sign | F32_INF | (m << 13u); // infinity or NaN, payload kept
    } else if (e == 0u) {
        bits = sign | bitcast<u32>(f32(m) * 5.9604644775390625e-8); // zero or subnormal: m * 2^-24
    } else {
        bits = sign | ((e + 112u) << 23u) | (m << 13u);
    }
    dst[i] = bits;
}

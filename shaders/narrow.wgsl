// Rounds or wraps values stored widened to 32 bits into their logical type, in place:
// kind 0: f16 (round to nearest even), 1: bf16, 2: i8, 3: i16, 4: u8, 5: u16.
// params: [count, kind]. (round_f16 is in common.wgsl.)
@group(0) @binding(1) var<storage, read_write> x: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = flat_id(wid, nwg, lid);
    if (i >= params[0]) {
        return;
    }
    let v = x[i];
    switch params[1] {
        case 0u: {
            x[i] = round_f16(v);
        }
        case 1u: {
            if ((v & 0x7fffffffu) > F32_INF) {
                x[i] = v | 0x00400000u; // NaN stays NaN
            } else {
                x[i] = (v + 0x7fffu + ((v >> 16u) & 1u)) & 0xffff0000u;
            }
        }
        case 2u: {
            x[i] = bitcast<u32>(bitcast<i32>(v << 24u) >> 24u);
        }
        case 3u: {
            x[i] = bitcast<u32>(bitcast<i32>(v << 16u) >> 16u);
        }
        case 4u: {
            x[i] = v & 0xffu;
        }
        default: {
            x[i] = v & 0xffffu;
        }
    }
}

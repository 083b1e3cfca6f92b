// Four int8 values (held one per i32 word) packed into one u32, the first in the low byte:
// word (r, j) of a [rows, k / 4] result packs elements (r, 4j .. 4j + 3) of a matrix read at
// src[r·row_stride + kk·col_stride], so that dot4I8Packed multiplies along k.
// params: [words, k / 4, row_stride, col_stride]
@group(0) @binding(1) var<storage, read> src: array<i32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = flat_id(wid, nwg, lid);
    if (i >= params[0]) {
        return;
    }
    let r = i / params[1];
    let j = i % params[1];
    let base = r * params[2] + 4u * j * params[3];
    var word = 0u;
    for (var t = 0u; t < 4u; t = t + 1u) {
        word = word | ((bitcast<u32>(src[base + t * params[3]]) & 0xffu) << (8u * t));
    }
    out[i] = word;
}

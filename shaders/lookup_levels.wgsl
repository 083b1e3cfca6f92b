// An integer layer's levels looked up in its per-channel table (kiln::QuantizedParams::lookup):
// out[i] = table[k·256 + byte(levels[i])], k = (i / inner) % channels. 8-bit values are one
// word each, so the byte is the word's low eight bits and the table's words are stored as is.
// params: [count, inner, channels]
@group(0) @binding(1) var<storage, read> levels: array<u32>;
@group(0) @binding(2) var<storage, read> table: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = flat_id(wid, nwg, lid);
    if (i >= params[0]) {
        return;
    }
    let k = (i / params[1]) % params[2];
    out[i] = table[k * 256u + (levels[i] & 255u)];
}

// OneHot on raw 32-bit words: out[o, d, i] = values[1] (on) where the index at (o, i),
// wrapped once by depth when negative, equals d, else values[0] (off).
// params: [count, depth_len, inner, depth]
@group(0) @binding(1) var<storage, read> indices: array<i32>;
@group(0) @binding(2) var<storage, read> values: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let e = flat_id(wid, nwg, lid);
    if (e >= params[0]) {
        return;
    }
    let depth_len = params[1];
    let inner = params[2];
    let i = e % inner;
    let t = e / inner;
    let d = t % depth_len;
    let o = t / depth_len;
    var raw = indices[o * inner + i];
    if (raw < 0) {
        raw += param_i(3u);
    }
    out[e] = values[select(0u, 1u, raw == i32(d))];
}

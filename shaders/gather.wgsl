// ONNX Gather along one axis on raw 32-bit words: out[o, j, r] = data[o, idx[j], r]
// with negative indices counted from the end; an index out of range yields 0.
// params: [count, inner, axis_len, idx_count]
@group(0) @binding(1) var<storage, read> data: array<u32>;
@group(0) @binding(2) var<storage, read> indices: array<i32>;
@group(0) @binding(3) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = flat_id(wid, nwg, lid);
    if (i >= params[0]) {
        return;
    }
    let inner = params[1];
    let len = params[2];
    let count = params[3];
    let r = i % inner;
    let t = i / inner;
    let j = t % count;
    let o = t / count;
    var idx = indices[j];
    if (idx < 0) {
        idx += i32(len);
    }
    if (idx < 0 || idx >= i32(len)) {
        out[i] = 0u;
        return;
    }
    out[i] = data[(o * len + u32(idx)) * inner + r];
}

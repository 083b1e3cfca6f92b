// ONNX GatherElements on raw 32-bit words: out[c] = data[c with c[axis] = idx[c]].
// params: [count, rank, axis, axis_len, shape[8] (of indices/out), data_strides[8]]
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
    let rank = params[1];
    let axis = params[2];
    let len = params[3];
    var idx = indices[i];
    if (idx < 0) {
        idx += i32(len);
    }
    if (idx < 0 || idx >= i32(len)) {
        out[i] = 0u;
        return;
    }
    var rem = i;
    var off = 0u;
    for (var d = 0u; d < rank; d++) {
        let k = rank - 1u - d;
        let n = params[4u + k];
        var c = rem % n;
        rem = rem / n;
        if (k == axis) {
            c = u32(idx);
        }
        off += c * params[12u + k];
    }
    out[i] = data[off];
}

// ONNX GatherND on raw 32-bit words: output element e is element e % slice of the slice
// that index tuple e / slice addresses (after `batch_dims` leading axes shared with the
// data). Negative indices count from the end; a tuple out of range yields 0.
// params: [count, slice, tuple_len, per_batch, batch_stride, dims[8] @5, strides[8] @13]
@group(0) @binding(1) var<storage, read> data: array<u32>;
@group(0) @binding(2) var<storage, read> indices: array<i32>;
@group(0) @binding(3) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let e = flat_id(wid, nwg, lid);
    if (e >= params[0]) {
        return;
    }
    let slice = params[1];
    let tuple_len = params[2];
    let t = e / slice;
    var off = (t / params[3]) * params[4];
    for (var k = 0u; k < tuple_len; k++) {
        let n = i32(params[5u + k]);
        var idx = indices[t * tuple_len + k];
        if (idx < 0) {
            idx += n;
        }
        if (idx < 0 || idx >= n) {
            out[e] = 0u;
            return;
        }
        off += u32(idx) * params[13u + k];
    }
    out[e] = data[off + e % slice];
}

// A strided copy of 32-bit words: for every coordinate c of `shape`,
// dst[dst_off + sum(c * dst_strides)] = src[src_off + sum(c * src_strides)].
// Covers transpose, slice (negative steps: negative strides), expand (zero strides),
// concatenation and padding (a window of a larger destination).
// params: [count, rank, src_off, dst_off, shape[8], src_strides[8] (i32), dst_strides[8] (i32)]
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = flat_id(wid, nwg, lid);
    if (i >= params[0]) {
        return;
    }
    let rank = params[1];
    var rem = i;
    var so = param_i(2u);
    var dof = param_i(3u);
    for (var d = 0u; d < rank; d++) {
        let k = rank - 1u - d;
        let n = params[4u + k];
        let c = i32(rem % n);
        rem = rem / n;
        so += c * param_i(12u + k);
        dof += c * param_i(20u + k);
    }
    dst[u32(dof)] = src[u32(so)];
}

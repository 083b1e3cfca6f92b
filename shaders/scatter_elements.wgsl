// ScatterElements into `out` (a copy of the data made before): one invocation per line of
// the indices along `axis` applies that line's updates in order. Lines differ in a
// coordinate off the axis, so they never address the same element; within a line the
// order is the cpu backend's (duplicates combine in index order). Out-of-range indices are
// skipped (inference and the importer reject constant ones).
// params: [lines, rank, axis, axis_len, idx_shape[8] @4, idx_strides[8] @12, out_strides[8] @20]
// Instantiated with `alias A` and `fn combine(a: A, u: A) -> A`.
@group(0) @binding(1) var<storage, read> indices: array<i32>;
@group(0) @binding(2) var<storage, read> updates: array<A>;
@group(0) @binding(3) var<storage, read_write> out: array<A>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let l = flat_id(wid, nwg, lid);
    if (l >= params[0]) {
        return;
    }
    let rank = params[1];
    let axis = params[2];
    let axis_len = params[3];
    var rem = l;
    var ibase = 0u;
    var obase = 0u;
    for (var d = 0u; d < rank; d++) {
        let k = rank - 1u - d;
        if (k == axis) {
            continue;
        }
        let n = params[4u + k];
        let c = rem % n;
        rem = rem / n;
        ibase += c * params[12u + k];
        obase += c * params[20u + k];
    }
    let n = params[4u + axis];
    for (var q = 0u; q < n; q++) {
        let at = ibase + q * params[12u + axis];
        var idx = indices[at];
        if (idx < 0) {
            idx += i32(axis_len);
        }
        if (idx < 0 || idx >= i32(axis_len)) {
            continue;
        }
        let tgt = obase + u32(idx) * params[20u + axis];
        out[tgt] = combine(out[tgt], updates[at]);
    }
}

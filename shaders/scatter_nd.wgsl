// ScatterND into `out` (a copy of the data made before): one invocation per element of the
// addressed slices walks every index tuple in order, so duplicate tuples combine in the cpu
// backend's order. Out-of-range tuples are skipped.
// params: [slice, tuples, tuple_len, dims[8] @3, strides[8] @11]
// Instantiated with `alias A` and `fn combine(a: A, u: A) -> A`.
@group(0) @binding(1) var<storage, read> indices: array<i32>;
@group(0) @binding(2) var<storage, read> updates: array<A>;
@group(0) @binding(3) var<storage, read_write> out: array<A>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let r = flat_id(wid, nwg, lid);
    let slice = params[0];
    if (r >= slice) {
        return;
    }
    let tuples = params[1];
    let tuple_len = params[2];
    for (var t = 0u; t < tuples; t++) {
        var off = 0u;
        var inside = true;
        for (var k = 0u; k < tuple_len; k++) {
            let n = i32(params[3u + k]);
            var idx = indices[t * tuple_len + k];
            if (idx < 0) {
                idx += n;
            }
            if (idx < 0 || idx >= n) {
                inside = false;
            }
            off += u32(max(idx, 0)) * params[11u + k];
        }
        if (inside) {
            let tgt = off + r;
            out[tgt] = combine(out[tgt], updates[t * slice + r]);
        }
    }
}

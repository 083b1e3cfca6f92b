// Running sum / product along one axis: one invocation per lane walks it in order (or
// reversed), writing inclusive or exclusive partial results.
// params: [lanes, len, inner, exclusive, reverse]
// Instantiated with `alias A`, `fn identity() -> A` and `fn combine(a: A, b: A) -> A`.
@group(0) @binding(1) var<storage, read> x: array<A>;
@group(0) @binding(2) var<storage, read_write> out: array<A>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let l = flat_id(wid, nwg, lid);
    if (l >= params[0]) {
        return;
    }
    let len = params[1];
    let inner = params[2];
    let exclusive = params[3] != 0u;
    let reverse = params[4] != 0u;
    let base = (l / inner) * len * inner + l % inner;
    var acc = identity();
    for (var s = 0u; s < len; s++) {
        let at = base + select(s, len - 1u - s, reverse) * inner;
        let next = combine(acc, x[at]);
        out[at] = select(next, acc, exclusive);
        acc = next;
    }
}

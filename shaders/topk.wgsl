// TopK by ranking: one invocation per input element counts the elements of its row that
// rank ahead of it (`before(a, b)`: a ranks ahead by value; equal values rank by lower
// index, as the cpu backend's stable sort) and, when that rank is below k, writes itself
// to that place. The output is always sorted; ties keep index order.
// params: [count, len, inner, k]
// Instantiated with `alias A` and `fn before(a: A, b: A) -> bool`.
@group(0) @binding(1) var<storage, read> x: array<A>;
@group(0) @binding(2) var<storage, read_write> values: array<A>;
@group(0) @binding(3) var<storage, read_write> indices: array<i32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = flat_id(wid, nwg, lid);
    if (i >= params[0]) {
        return;
    }
    let len = params[1];
    let inner = params[2];
    let k = params[3];
    let j = i % inner;
    let t = i / inner;
    let p = t % len;
    let o = t / len;
    let base = o * len * inner + j;
    let v = x[i];
    var rank = 0u;
    for (var q = 0u; q < len && rank < k; q++) {
        let w = x[base + q * inner];
        if (before(w, v) || (q < p && !before(v, w))) {
            rank += 1u;
        }
    }
    if (rank < k) {
        let dst = (o * k + rank) * inner + j;
        values[dst] = v;
        indices[dst] = i32(p);
    }
}

// Reduces the axes where `kept` has size 1 and `reduced` has the input's size: one
// invocation per output element walks its `rcount` reduced elements.
// params: [count, rank, rcount, kept[8], reduced[8], x_strides[8]]
// Instantiated with `alias A`, `alias ACC`, `alias O`, `fn init() -> ACC`,
// `fn step(ACC, A) -> ACC` and `fn finish(ACC, u32) -> O`.
@group(0) @binding(1) var<storage, read> x: array<A>;
@group(0) @binding(2) var<storage, read_write> out: array<O>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = flat_id(wid, nwg, lid);
    if (i >= params[0]) {
        return;
    }
    let rank = params[1];
    let rcount = params[2];
    var rem = i;
    var base = 0u;
    for (var d = 0u; d < rank; d++) {
        let k = rank - 1u - d;
        let n = params[3u + k];
        base += (rem % n) * params[19u + k];
        rem = rem / n;
    }
    var acc = init();
    for (var j = 0u; j < rcount; j++) {
        var r = j;
        var off = base;
        for (var d = 0u; d < rank; d++) {
            let k = rank - 1u - d;
            let n = params[11u + k];
            off += (r % n) * params[19u + k];
            r = r / n;
        }
        acc = step(acc, x[off]);
    }
    out[i] = finish(acc, rcount);
}

// Reflect / edge / wrap padding on raw 32-bit words: each output coordinate maps, axis by
// axis, to an input coordinate of the cropped input range (negative pads crop first).
// params: [count, rank, mode (0 reflect, 1 edge, 2 wrap), out_shape[8] @3,
//          pad_begin[8] @11 (positive part), lo[8] @19, kept[8] @27, in_strides[8] @35]
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

fn source(mode: u32, j: i32, n: i32) -> i32 {
    if (j >= 0 && j < n) {
        return j;
    }
    if (mode == 1u) {
        return clamp(j, 0, n - 1);
    }
    if (mode == 2u) {
        return ((j % n) + n) % n;
    }
    if (n == 1) {
        return 0;
    }
    let period = 2 * (n - 1);
    let r = ((j % period) + period) % period;
    return select(period - r, r, r < n);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = flat_id(wid, nwg, lid);
    if (i >= params[0]) {
        return;
    }
    let rank = params[1];
    let mode = params[2];
    var rem = i;
    var off = 0u;
    for (var d = 0u; d < rank; d++) {
        let k = rank - 1u - d;
        let n = params[3u + k];
        let o = rem % n;
        rem = rem / n;
        let j = i32(o) - i32(params[11u + k]);
        let c = params[19u + k] + u32(source(mode, j, i32(params[27u + k])));
        off += c * params[35u + k];
    }
    out[i] = x[off];
}

// Max / average pooling over up to three spatial dims: one invocation per output element
// (plane, od, oh, ow), plane = n * C + c.
// params: [count, planes, D, H, W, OD, OH, OW, KD, KH, KW, stride[3], dilation[3],
//          pre_pad[3], post_pad[3], average, count_excludes_padding]
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = flat_id(wid, nwg, lid);
    if (i >= params[0]) {
        return;
    }
    let size = vec3<i32>(i32(params[2]), i32(params[3]), i32(params[4]));
    let osz = vec3<u32>(params[5], params[6], params[7]);
    let win = vec3<u32>(params[8], params[9], params[10]);
    let stride = vec3<i32>(i32(params[11]), i32(params[12]), i32(params[13]));
    let dil = vec3<i32>(i32(params[14]), i32(params[15]), i32(params[16]));
    let pre = vec3<i32>(param_i(17u), param_i(18u), param_i(19u));
    let post = vec3<i32>(param_i(20u), param_i(21u), param_i(22u));
    let average = params[23] != 0u;
    var rem = i;
    let o3 = rem % osz.z; rem /= osz.z;
    let o2 = rem % osz.y; rem /= osz.y;
    let o1 = rem % osz.x;
    let plane = rem / osz.x;
    let start = vec3<i32>(i32(o1), i32(o2), i32(o3)) * stride - pre;
    // Per axis, the window indices inside the input [first, end) and the cells inside the
    // padded input (the divisor when padding counts), found by division so a huge window
    // costs only its inside cells (the host checks every extent fits in i32/4).
    var first = vec3<i32>(0);
    var end = vec3<i32>(0);
    var padded = vec3<u32>(0u);
    for (var t = 0u; t < 3u; t++) {
        let w = i32(win[t]);
        if (start[t] < 0) { first[t] = (dil[t] - 1 - start[t]) / dil[t]; }
        end[t] = max(first[t], min(w, select(0, (size[t] - 1 - start[t]) / dil[t] + 1, size[t] > start[t])));
        let hi = size[t] + post[t];
        padded[t] = u32(min(w, select(0, (hi - 1 - start[t]) / dil[t] + 1, hi > start[t])));
    }
    let base = plane * u32(size.x * size.y * size.z);
    var acc = 0.0;
    var best = neg_inf();
    var nan = false;
    for (var a = first.x; a < end.x; a++) {
        let p = start.x + a * dil.x;
        for (var b = first.y; b < end.y; b++) {
            let q = start.y + b * dil.y;
            for (var c = first.z; c < end.z; c++) {
                let r = start.z + c * dil.z;
                let v = x[base + u32((p * size.y + q) * size.z + r)];
                if ((bitcast<u32>(v) & 0x7fffffffu) > F32_INF) { nan = true; }
                acc += v;
                best = max(best, v);
            }
        }
    }
    let inside = vec3<f32>(end - first);
    if (average) {
        // In f32: a product of three padded extents can pass u32.
        var count = inside.x * inside.y * inside.z;
        if (params[24] == 0u) {
            count = f32(padded.x) * f32(padded.y) * f32(padded.z);
        }
        out[i] = acc / count;
    } else if (nan) {
        out[i] = bitcast<f32>(0x7fc00000u);
    } else {
        out[i] = best;
    }
}

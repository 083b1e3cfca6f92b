// Direct transposed convolution (gather form) over up to three spatial dims: output
// element (n, k, o) sums x[n, c, i] * w[c, k % kpg, t] over every i, t with
// i * stride + t * dilation = o + pre_pad.
// params: [count, N, C, K, groups, D, H, W, OD, OH, OW, KD, KH, KW,
//          stride[3], dilation[3], pre_pad[3], has_bias]
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

// The input position feeding output position `o` through kernel tap `t`, or -1.
fn source(o: u32, t: u32, stride: u32, dil: u32, pad: u32, size: u32) -> i32 {
    let v = i32(o + pad) - i32(t * dil);
    if (v < 0 || v % i32(stride) != 0) {
        return -1;
    }
    let s = v / i32(stride);
    if (s >= i32(size)) {
        return -1;
    }
    return s;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = flat_id(wid, nwg, lid);
    if (i >= params[0]) {
        return;
    }
    let c_all = params[2];
    let k_all = params[3];
    let groups = params[4];
    let d = params[5]; let h = params[6]; let wd = params[7];
    let od = params[8]; let oh = params[9]; let ow = params[10];
    let kd = params[11]; let kh = params[12]; let kw = params[13];
    var rem = i;
    let x3 = rem % ow; rem /= ow;
    let x2 = rem % oh; rem /= oh;
    let x1 = rem % od; rem /= od;
    let ko = rem % k_all;
    let n = rem / k_all;
    let cpg = c_all / groups;
    let kpg = k_all / groups;
    let g = ko / kpg;
    var acc = 0.0;
    if (params[23] != 0u) {
        acc = bias[ko];
    }
    for (var c = 0u; c < cpg; c++) {
        let cg = g * cpg + c;
        for (var a = 0u; a < kd; a++) {
            let p = source(x1, a, params[14], params[17], params[20], d);
            if (p < 0) { continue; }
            for (var bb = 0u; bb < kh; bb++) {
                let q = source(x2, bb, params[15], params[18], params[21], h);
                if (q < 0) { continue; }
                for (var e = 0u; e < kw; e++) {
                    let r = source(x3, e, params[16], params[19], params[22], wd);
                    if (r < 0) { continue; }
                    let xv = x[(((n * c_all + cg) * d + u32(p)) * h + u32(q)) * wd + u32(r)];
                    let wv = w[(((cg * kpg + ko % kpg) * kd + a) * kh + bb) * kw + e];
                    acc += xv * wv;
                }
            }
        }
    }
    out[i] = acc;
}

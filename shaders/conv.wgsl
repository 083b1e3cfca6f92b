// Direct convolution over up to three spatial dims (fewer are padded with size-1 dims):
// one invocation per output element (n, k, od, oh, ow).
// params: [count, N, C, K, groups, D, H, W, OD, OH, OW, KD, KH, KW,
//          stride[3], dilation[3], pre_pad[3], has_bias]
// Instantiated with `alias T` (f32, or i32: the exact sums of integer layers).
@group(0) @binding(1) var<storage, read> x: array<T>;
@group(0) @binding(2) var<storage, read> w: array<T>;
@group(0) @binding(3) var<storage, read> bias: array<T>;
@group(0) @binding(4) var<storage, read_write> out: array<T>;

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
    var acc = T(0);
    if (params[23] != 0u) {
        acc = bias[ko];
    }
    for (var c = 0u; c < cpg; c++) {
        let x_base = (n * c_all + g * cpg + c) * d;
        let w_base = (ko * cpg + c) * kd;
        for (var a = 0u; a < kd; a++) {
            let p = i32(x1 * params[14] + a * params[17]) - param_i(20u);
            if (p < 0 || p >= i32(d)) { continue; }
            for (var bb = 0u; bb < kh; bb++) {
                let q = i32(x2 * params[15] + bb * params[18]) - param_i(21u);
                if (q < 0 || q >= i32(h)) { continue; }
                let x_row = ((x_base + u32(p)) * h + u32(q)) * wd;
                let w_row = ((w_base + a) * kh + bb) * kw;
                for (var e = 0u; e < kw; e++) {
                    let r = i32(x3 * params[16] + e * params[19]) - param_i(22u);
                    if (r < 0 || r >= i32(wd)) { continue; }
                    acc += x[x_row + u32(r)] * w[w_row + e];
                }
            }
        }
    }
    out[i] = acc;
}

// One axis of a separable n-linear / n-cubic Resize (f32): for output (o, c, j),
// out = Σ_k w[c·taps + k] · x[o, idx[c·taps + k], j]. The host plans the taps (clamped
// indices, Keys weights, exclude_outside renormalized); zero-weight taps are skipped so an
// infinite neighbour does not turn into NaN.
// params: [count, inner, in_len, out_len, taps]
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> idx: array<i32>;
@group(0) @binding(3) var<storage, read> w: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = flat_id(wid, nwg, lid);
    if (i >= params[0]) {
        return;
    }
    let inner = params[1];
    let in_len = params[2];
    let out_len = params[3];
    let taps = params[4];
    let j = i % inner;
    let t = i / inner;
    let c = t % out_len;
    let o = t / out_len;
    var acc = 0.0;
    for (var k = 0u; k < taps; k++) {
        let wk = w[c * taps + k];
        if (wk != 0.0) {
            acc += wk * x[(o * in_len + u32(idx[c * taps + k])) * inner + j];
        }
    }
    out[i] = acc;
}

// ONNX QuantizeLinear into an integer type: q = clamp(round_half_even(x / scale) + zp,
// qmin, qmax), scale and zero point indexed (i / inner) % len (per tensor: 1, 1; per
// axis: the axis's inner size and length; per element: 1, count). The word written is the
// integer's i32 bits (u8/u16 are non-negative, so they read the same as u32).
// params: [count, inner, len, qmin (i32), qmax (i32), has zero point]
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> scale: array<f32>;
@group(0) @binding(3) var<storage, read> zero_point: array<i32>;
@group(0) @binding(4) var<storage, read_write> out: array<i32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = flat_id(wid, nwg, lid);
    if (i >= params[0]) {
        return;
    }
    let p = (i / params[1]) % params[2];
    let qmin = param_i(3u);
    let qmax = param_i(4u);
    var zp = 0;
    if (params[5] != 0u) {
        zp = zero_point[p];
    }
    let r = round(x[i] / scale[p]);
    // Clamp before converting so the integer add cannot overflow.
    let lo = f32(qmin) - f32(zp);
    let hi = f32(qmax) - f32(zp);
    if (r != r) {
        out[i] = clamp(zp, qmin, qmax);
        return;
    }
    out[i] = clamp(i32(clamp(r, lo, hi)) + zp, qmin, qmax);
}

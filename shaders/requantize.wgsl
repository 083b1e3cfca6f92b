// The end of an integer layer (kiln::QuantizedParams): the exact i32 accumulator scaled per
// output channel k = (i / inner) % channels, as the cpu backend computes it. `scale` holds
// x_scale·w_scale[k], or for a quantized output without a float bias the whole multiplier
// x_scale·w_scale[k] / y_scale, both computed on the host in f32.
//   quantized: q = clamp(round_half_even(v) (max 0 with ReLU) + y_zero, qmin, qmax), with
//              v = f32(acc)·scale[k], or with float terms
//              (f32(acc)·scale[k] (+ bias[k]) (+ residual[i])) / y_scale
//   float:     v = f32(acc)·scale[k] (+ bias[k]) (+ residual[i]), max 0 with ReLU, as f32 bits
// params: [count, inner, channels, quantized, relu, has float bias, y_zero (i32), qmin (i32),
//          qmax (i32), y_scale (f32), per-channel scale, per-channel bias, has residual]
@group(0) @binding(1) var<storage, read> acc: array<i32>;
@group(0) @binding(2) var<storage, read> scale: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read> residual: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = flat_id(wid, nwg, lid);
    if (i >= params[0]) {
        return;
    }
    let k = (i / params[1]) % params[2];
    var v = f32(acc[i]) * scale[select(0u, k, params[10] != 0u)];
    if (params[5] != 0u) {
        v = v + bias[select(0u, k, params[11] != 0u)];
    }
    if (params[12] != 0u) {
        v = v + residual[i];
    }
    if (params[3] == 0u) {
        if (params[4] != 0u) {
            v = max(v, 0.0);
        }
        out[i] = bitcast<u32>(v);
        return;
    }
    if (params[5] != 0u || params[12] != 0u) {
        v = v / param_f(9u);
    }
    var r = round(v);
    if (params[4] != 0u) {
        r = max(r, 0.0);
    }
    let zero = param_i(6u);
    // Clamp before converting so the integer add cannot overflow.
    let q = i32(clamp(r, f32(param_i(7u) - zero), f32(param_i(8u) - zero))) + zero;
    out[i] = bitcast<u32>(q);
}

// ONNX LRN: x / (k + alpha / size * sum of x² over the channel window)^beta, the window
// [c - before, c + after] clipped to the channels; one invocation per element.
// params: [count, channels, inner, before, after, size, alpha (f32), beta (f32), k (f32)]
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = flat_id(wid, nwg, lid);
    if (i >= params[0]) {
        return;
    }
    let channels = params[1];
    let inner = params[2];
    let c = (i / inner) % channels;
    let base = i - c * inner;
    let lo = select(0u, c - params[3], c >= params[3]);
    let hi = min(c + params[4], channels - 1u);
    var sum = 0.0;
    for (var q = lo; q <= hi; q++) {
        let v = x[base + q * inner];
        sum += v * v;
    }
    let scale = param_f(8u) + param_f(6u) / f32(params[5]) * sum;
    out[i] = x[i] / pow(scale, param_f(7u));
}

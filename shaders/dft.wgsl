// ONNX DFT, direct: one invocation per output bin (o, k, i) sums the n samples with exact
// twiddle angles ((j·k) mod n). Samples past `used` are the zero padding; an inverse
// onesided transform rebuilds the upper half as the conjugate mirror (Hermitian).
// params: [count, in_len, inner, parts, n, out_len, out_parts, used, inverse, onesided]
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

const TAU: f32 = 6.283185307179586;

fn signal_at(o: u32, j: u32, i: u32) -> vec2<f32> {
    let in_len = params[1];
    let inner = params[2];
    let parts = params[3];
    if (j >= params[7]) {
        return vec2<f32>(0.0, 0.0);
    }
    let first = ((o * in_len + j) * inner + i) * parts;
    if (parts == 2u) {
        return vec2<f32>(x[first], x[first + 1u]);
    }
    return vec2<f32>(x[first], 0.0);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let t = flat_id(wid, nwg, lid);
    if (t >= params[0]) {
        return;
    }
    let inner = params[2];
    let n = params[4];
    let out_len = params[5];
    let out_parts = params[6];
    let inverse = params[8] != 0u;
    let hermitian = inverse && params[9] != 0u;
    let i = t % inner;
    let k = (t / inner) % out_len;
    let o = t / inner / out_len;
    var sign = -1.0;
    if (inverse) {
        sign = 1.0;
    }
    var re = 0.0;
    var im = 0.0;
    for (var j = 0u; j < n; j++) {
        var v: vec2<f32>;
        if (hermitian && j >= n / 2u + 1u) {
            let m = signal_at(o, n - j, i);
            v = vec2<f32>(m.x, -m.y);
        } else {
            v = signal_at(o, j, i);
        }
        let angle = TAU * f32((j * k) % n) / f32(n);
        let c = cos(angle);
        let s = sign * sin(angle);
        re += v.x * c - v.y * s;
        im += v.x * s + v.y * c;
    }
    var scale = 1.0;
    if (inverse) {
        scale = 1.0 / f32(n);
    }
    let base = ((o * out_len + k) * inner + i) * out_parts;
    out[base] = re * scale;
    if (out_parts == 2u) {
        out[base + 1u] = im * scale;
    }
}

// Normalization (mode 0: (x - mean) / sqrt(var + eps) * scale + bias) and RMS
// normalization (mode 1: x / sqrt(mean(x²) + eps) * scale): one invocation per
// statistics group, walking its `rcount` elements.
// params: [count, rank, rcount, kept[8], reduced[8], x_strides[8], scale_strides[8],
//          bias_strides[8], epsilon, mode]
// Instantiated with the bindings' element types `AS` / `OS` and `load_a` / `store_o` (f32
// words, or f16 halves computing in f32; see binary.wgsl).
@group(0) @binding(1) var<storage, read> x: array<AS>;
@group(0) @binding(2) var<storage, read> scale: array<AS>;
@group(0) @binding(3) var<storage, read> bias: array<AS>;
@group(0) @binding(4) var<storage, read_write> out: array<OS>;

struct Offsets {
    x: u32,
    s: u32,
    b: u32,
}

fn offsets(index: u32, shape_at: u32, rank: u32) -> Offsets {
    var o = Offsets(0u, 0u, 0u);
    var rem = index;
    for (var d = 0u; d < rank; d++) {
        let k = rank - 1u - d;
        let n = params[shape_at + k];
        let c = rem % n;
        rem = rem / n;
        o.x += c * params[19u + k];
        o.s += c * params[27u + k];
        o.b += c * params[35u + k];
    }
    return o;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = flat_id(wid, nwg, lid);
    if (g >= params[0]) {
        return;
    }
    let rank = params[1];
    let rcount = params[2];
    let eps = param_f(43u);
    let rms = params[44] == 1u;
    let base = offsets(g, 3u, rank);
    var mean = 0.0;
    if (!rms) {
        var sum = 0.0;
        for (var j = 0u; j < rcount; j++) {
            sum += load_a(x[base.x + offsets(j, 11u, rank).x]);
        }
        mean = sum / f32(rcount);
    }
    var sq = 0.0;
    for (var j = 0u; j < rcount; j++) {
        let v = load_a(x[base.x + offsets(j, 11u, rank).x]) - mean;
        sq += v * v;
    }
    let inv = 1.0 / sqrt(sq / f32(rcount) + eps);
    for (var j = 0u; j < rcount; j++) {
        let o = offsets(j, 11u, rank);
        var y = (load_a(x[base.x + o.x]) - mean) * inv * load_a(scale[base.s + o.s]);
        if (!rms) {
            y += load_a(bias[base.b + o.b]);
        }
        out[base.x + o.x] = store_o(y);
    }
}

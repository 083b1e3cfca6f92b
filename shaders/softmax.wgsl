// Softmax along one axis: one invocation per row (outer, inner).
// params: [rows, axis_len, inner]
// Instantiated with the bindings' element types `AS` / `OS` and `load_a` / `store_o` (f32
// words, or f16 halves computing in f32; see binary.wgsl).
@group(0) @binding(1) var<storage, read> x: array<AS>;
@group(0) @binding(2) var<storage, read_write> out: array<OS>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let row = flat_id(wid, nwg, lid);
    if (row >= params[0]) {
        return;
    }
    let len = params[1];
    let inner = params[2];
    let base = (row / inner) * len * inner + row % inner;
    var m = neg_inf();
    for (var j = 0u; j < len; j++) {
        m = max(m, load_a(x[base + j * inner]));
    }
    var sum = 0.0;
    for (var j = 0u; j < len; j++) {
        sum += exp(load_a(x[base + j * inner]) - m);
    }
    for (var j = 0u; j < len; j++) {
        out[base + j * inner] = store_o(exp(load_a(x[base + j * inner]) - m) / sum);
    }
}

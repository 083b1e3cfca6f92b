// out = op(a, b) with numpy broadcasting (a zero stride repeats an element).
// params: [count, rank, shape[8], a_strides[8], b_strides[8]]
// Instantiated with `alias A` (input storage type), `alias O` (output) and `fn op(A, A) -> O`,
// and the bindings' element types `AS` / `OS` with `load_a` / `store_o` (f16 halves
// computing in f32; identities otherwise).
@group(0) @binding(1) var<storage, read> a: array<AS>;
@group(0) @binding(2) var<storage, read> b: array<AS>;
@group(0) @binding(3) var<storage, read_write> out: array<OS>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = flat_id(wid, nwg, lid);
    if (i >= params[0]) {
        return;
    }
    let rank = params[1];
    var rem = i;
    var ao = 0u;
    var bo = 0u;
    for (var d = 0u; d < rank; d++) {
        let k = rank - 1u - d;
        let n = params[2u + k];
        let c = rem % n;
        rem = rem / n;
        ao += c * params[10u + k];
        bo += c * params[18u + k];
    }
    out[i] = store_o(op(load_a(a[ao]), load_a(b[bo])));
}

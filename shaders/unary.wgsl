// out[i] = op(x[i]) on contiguous tensors (unary ops, activations, casts).
// params: [count, p0, p1, p2] (p* are the op's f32 parameters, e.g. an activation's alpha)
// Instantiated with `alias A`, `alias O` and `fn op(A) -> O`, and the bindings' element
// types `AS` / `OS` with `load_a` / `store_o` (see binary.wgsl).
@group(0) @binding(1) var<storage, read> x: array<AS>;
@group(0) @binding(2) var<storage, read_write> out: array<OS>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = flat_id(wid, nwg, lid);
    if (i >= params[0]) {
        return;
    }
    out[i] = store_o(op(load_a(x[i])));
}

// out = cond ? a : b with numpy broadcasting, on raw 32-bit words.
// params: [count, rank, shape[8], cond_strides[8], a_strides[8], b_strides[8]]
@group(0) @binding(1) var<storage, read> cond: array<u32>;
@group(0) @binding(2) var<storage, read> a: array<u32>;
@group(0) @binding(3) var<storage, read> b: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = flat_id(wid, nwg, lid);
    if (i >= params[0]) {
        return;
    }
    let rank = params[1];
    var rem = i;
    var co = 0u;
    var ao = 0u;
    var bo = 0u;
    for (var d = 0u; d < rank; d++) {
        let k = rank - 1u - d;
        let n = params[2u + k];
        let c = rem % n;
        rem = rem / n;
        co += c * params[10u + k];
        ao += c * params[18u + k];
        bo += c * params[26u + k];
    }
    out[i] = select(b[bo], a[ao], cond[co] != 0u);
}

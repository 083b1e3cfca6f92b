// The exact int32 sums of an int8 product from packed operands (see pack_i8x4.wgsl):
// out[r, c] = Σ_j dot4I8Packed(x[r, j], w[c, j]) over the k / 4 words of a row, four
// multiply-adds per call (one instruction where the adapter has integer dot products).
// params: [count (rows·n), n, k / 4]
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read> w: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<i32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = flat_id(wid, nwg, lid);
    if (i >= params[0]) {
        return;
    }
    let words = params[2];
    let xr = (i / params[1]) * words;
    let wr = (i % params[1]) * words;
    var acc = 0;
    for (var j = 0u; j < words; j = j + 1u) {
        acc = acc + dot4I8Packed(x[xr + j], w[wr + j]);
    }
    out[i] = acc;
}

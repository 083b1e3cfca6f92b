// tf_crop_and_resize: an output element whose coordinate falls outside the crop on some
// axis becomes the extrapolation value (raw word). `flags` concatenates one word per output
// coordinate of every cropped axis; an axis without flags has offset 0xffffffff.
// params: [count, rank, extrapolation word, shape[8], flag offsets[8]]
@group(0) @binding(1) var<storage, read> flags: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = flat_id(wid, nwg, lid);
    if (i >= params[0]) {
        return;
    }
    let rank = params[1];
    var rest = i;
    var outside = false;
    for (var d = 0u; d < rank; d++) {
        let axis = rank - 1u - d;
        let len = params[3u + axis];
        let c = rest % len;
        rest = rest / len;
        let off = params[11u + axis];
        if (off != 0xffffffffu && flags[off + c] != 0u) {
            outside = true;
        }
    }
    if (outside) {
        out[i] = params[2];
    }
}

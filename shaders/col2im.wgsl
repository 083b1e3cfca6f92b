// ONNX Col2Im as a gather: each output pixel (n, c, p…) sums the column entries whose block
// offset k and block position l land on it: l·stride + k·dilation − pad_begin = p, per
// spatial dim (at most 3).
// params: [count, spatial, channels, per_channel (∏block), columns (∏grid),
//          image[3], block[3], grid[3], strides[3], dilations[3], pads_begin[3]]
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = flat_id(wid, nwg, lid);
    if (i >= params[0]) {
        return;
    }
    let spatial = params[1];
    let channels = params[2];
    let per_channel = params[3];
    let columns = params[4];
    var pixels = 1u;
    for (var d = 0u; d < spatial; d++) {
        pixels *= params[5u + d];
    }
    let nc = i / pixels;
    let c = nc % channels;
    let b = nc / channels;
    // The pixel's coordinates in the padded image.
    var pos: array<u32, 3>;
    var rest = i % pixels;
    for (var e = 0u; e < spatial; e++) {
        let d = spatial - 1u - e;
        pos[d] = rest % params[5u + d] + params[20u + d];
        rest = rest / params[5u + d];
    }
    var acc = 0.0;
    for (var k = 0u; k < per_channel; k++) {
        var krest = k;
        var col = 0u;
        var hit = true;
        var offs: array<u32, 3>;
        for (var e = 0u; e < spatial; e++) {
            let d = spatial - 1u - e;
            offs[d] = krest % params[8u + d];
            krest = krest / params[8u + d];
        }
        for (var d = 0u; d < spatial; d++) {
            let reach = offs[d] * params[17u + d];
            let stride = params[14u + d];
            if (pos[d] < reach || (pos[d] - reach) % stride != 0u || (pos[d] - reach) / stride >= params[11u + d]) {
                hit = false;
            } else {
                col = col * params[11u + d] + (pos[d] - reach) / stride;
            }
        }
        if (hit) {
            acc += x[((b * channels + c) * per_channel + k) * columns + col];
        }
    }
    out[i] = acc;
}

// ONNX DequantizeLinear from an integer type: y = (x - zp) * scale, the difference exact
// in i32 for types up to 16 bits (as the cpu backend's i128), then rounded to f32.
// params: [count, inner, len, unsigned, has zero point]
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read> scale: array<f32>;
@group(0) @binding(3) var<storage, read> zero_point: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = flat_id(wid, nwg, lid);
    if (i >= params[0]) {
        return;
    }
    let p = (i / params[1]) % params[2];
    var zp = 0u;
    if (params[4] != 0u) {
        zp = zero_point[p];
    }
    var d: f32;
    if (params[3] != 0u) {
        // Unsigned: exact when both fit in i32, else through f32.
        if (x[i] < 0x80000000u && zp < 0x80000000u) {
            d = f32(i32(x[i]) - i32(zp));
        } else {
            d = f32(x[i]) - f32(zp);
        }
    } else {
        let a = bitcast<i32>(x[i]);
        let b = bitcast<i32>(zp);
        let diff = a - b;
        // Overflowed i32 (int32 extremes): fall back to f32.
        if ((b < 0 && diff < a) || (b > 0 && diff > a)) {
            d = f32(a) - f32(b);
        } else {
            d = f32(diff);
        }
    }
    out[i] = d * scale[p];
}

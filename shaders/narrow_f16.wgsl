// f32 words of an f16 tensor stored as halves: rounded to nearest even first (round_f16,
// infinity beyond the f16 range), so the conversion itself is exact whatever rounding the
// driver's f32 -> f16 conversion does. The output side of the executor's widen/narrow path.
// params: [count]
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f16>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = flat_id(wid, nwg, lid);
    if (i >= params[0]) {
        return;
    }
    dst[i] = f16(bitcast<f32>(round_f16(src[i])));
}

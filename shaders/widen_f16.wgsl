// f16 tensors stored as halves widened to f32 words (exact): the input side of the
// executor's generic widen/narrow path for kernels without an f16 instantiation.
// params: [count]
@group(0) @binding(1) var<storage, read> src: array<f16>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = flat_id(wid, nwg, lid);
    if (i >= params[0]) {
        return;
    }
    dst[i] = f32(src[i]);
}

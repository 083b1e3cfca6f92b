// ONNX Det: one invocation per n×n matrix, LU decomposition with partial pivoting (f32)
// in that matrix's slice of a scratch buffer.
// params: [count (matrices), n]
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> a: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let m = flat_id(wid, nwg, lid);
    if (m >= params[0]) {
        return;
    }
    let n = params[1];
    let base = m * n * n;
    for (var k = 0u; k < n * n; k++) {
        a[base + k] = x[base + k];
    }
    var det = 1.0;
    for (var col = 0u; col < n; col++) {
        var pivot = col;
        var best = abs(a[base + col * n + col]);
        for (var r = col + 1u; r < n; r++) {
            let v = abs(a[base + r * n + col]);
            if (v > best) {
                best = v;
                pivot = r;
            }
        }
        if (a[base + pivot * n + col] == 0.0) {
            det = 0.0;
            break;
        }
        if (pivot != col) {
            for (var k = 0u; k < n; k++) {
                let t = a[base + pivot * n + k];
                a[base + pivot * n + k] = a[base + col * n + k];
                a[base + col * n + k] = t;
            }
            det = -det;
        }
        let p = a[base + col * n + col];
        det *= p;
        for (var r = col + 1u; r < n; r++) {
            let f = a[base + r * n + col] / p;
            for (var k = col; k < n; k++) {
                a[base + r * n + k] -= f * a[base + col * n + k];
            }
        }
    }
    out[m] = det;
}

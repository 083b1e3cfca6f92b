// Einsum of one or two operands: one invocation per output element sums, over every
// combination of the summed labels, the product of the operands' elements. Repeated
// labels of one operand (diagonals) have their strides added; broadcast dims stride 0.
// params: [count, operands, n_out, n_sum, sum_total,
//          out_size[8] @5, out_stride_a[8] @13, out_stride_b[8] @21,
//          sum_size[8] @29, sum_stride_a[8] @37, sum_stride_b[8] @45]
// Instantiated with `alias A` (the accumulator and element type).
@group(0) @binding(1) var<storage, read> a: array<A>;
@group(0) @binding(2) var<storage, read> b: array<A>;
@group(0) @binding(3) var<storage, read_write> out: array<A>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let e = flat_id(wid, nwg, lid);
    if (e >= params[0]) {
        return;
    }
    let two = params[1] == 2u;
    let n_out = params[2];
    let n_sum = params[3];
    var rem = e;
    var base_a = 0u;
    var base_b = 0u;
    for (var d = 0u; d < n_out; d++) {
        let k = n_out - 1u - d;
        let n = params[5u + k];
        let c = rem % n;
        rem = rem / n;
        base_a += c * params[13u + k];
        base_b += c * params[21u + k];
    }
    var acc = A(0);
    for (var s = 0u; s < params[4]; s++) {
        var r = s;
        var off_a = base_a;
        var off_b = base_b;
        for (var d = 0u; d < n_sum; d++) {
            let k = n_sum - 1u - d;
            let n = params[29u + k];
            let c = r % n;
            r = r / n;
            off_a += c * params[37u + k];
            off_b += c * params[45u + k];
        }
        var p = a[off_a];
        if (two) {
            p = p * b[off_b];
        }
        acc += p;
    }
    out[e] = acc;
}

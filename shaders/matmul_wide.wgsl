// Batched f32 C = A·B for large products: a 16×16 workgroup computes a 128×128 block of C,
// each invocation an 8×8 sub-block (rows lid.y + 16i, columns lid.x + 16j, so neighbours
// read neighbouring words of workgroup memory), staging 8-deep slices of A and B.
// Same params and bindings as matmul.wgsl:
// params: [M, N, K, batches, a_rs, a_cs, b_rs, b_cs, then (a_off, b_off) per batch]
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;

const TILE: u32 = 128u;
const DEPTH: u32 = 8u;

var<workgroup> tile_a: array<array<f32, 128>, 8>;
var<workgroup> tile_b: array<array<f32, 128>, 8>;

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let m = params[0];
    let n = params[1];
    let k = params[2];
    let batch = wid.z;
    let a_rs = params[4];
    let a_cs = params[5];
    let b_rs = params[6];
    let b_cs = params[7];
    let a_off = params[8u + 2u * batch];
    let b_off = params[9u + 2u * batch];
    let row0 = wid.y * TILE;
    let col0 = wid.x * TILE;
    var acc: array<array<f32, 8>, 8>;
    for (var k0 = 0u; k0 < k; k0 += DEPTH) {
        for (var l = 0u; l < 4u; l++) {
            let e = li + l * 256u;
            // A: 128 rows × 8 depth, depth fastest.
            let ar = e / DEPTH;
            let ak = e % DEPTH;
            var va = 0.0;
            if (row0 + ar < m && k0 + ak < k) {
                va = a[a_off + (row0 + ar) * a_rs + (k0 + ak) * a_cs];
            }
            tile_a[ak][ar] = va;
            // B: 8 depth × 128 columns, columns fastest.
            let bk = e / TILE;
            let bc = e % TILE;
            var vb = 0.0;
            if (col0 + bc < n && k0 + bk < k) {
                vb = b[b_off + (k0 + bk) * b_rs + (col0 + bc) * b_cs];
            }
            tile_b[bk][bc] = vb;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < DEPTH; kk++) {
            var av: array<f32, 8>;
            var bv: array<f32, 8>;
            for (var t = 0u; t < 8u; t++) {
                av[t] = tile_a[kk][lid.y + 16u * t];
                bv[t] = tile_b[kk][lid.x + 16u * t];
            }
            for (var i = 0u; i < 8u; i++) {
                for (var j = 0u; j < 8u; j++) {
                    acc[i][j] = fma(av[i], bv[j], acc[i][j]);
                }
            }
        }
        workgroupBarrier();
    }
    let c_off = batch * m * n;
    for (var i = 0u; i < 8u; i++) {
        let r = row0 + lid.y + 16u * i;
        for (var j = 0u; j < 8u; j++) {
            let col = col0 + lid.x + 16u * j;
            if (r < m && col < n) {
                c[c_off + r * n + col] = acc[i][j];
            }
        }
    }
}

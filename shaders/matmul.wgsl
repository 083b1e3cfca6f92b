// Batched C = A·B, tiled: a 16×16 workgroup computes a 64×64 block of C, each invocation
// a 4×4 sub-block, staging 16-deep slices of A and B in workgroup memory.
// A element (batch, r, k) is a[a_off(batch) + r*a_rs + k*a_cs] (strides express op_a
// transposes and vectors), likewise B; C is contiguous (batch, M, N).
// params: [M, N, K, batches, a_rs, a_cs, b_rs, b_cs, then (a_off, b_off) per batch]
// Instantiated with `alias T` (f32, i32 or u32).
@group(0) @binding(1) var<storage, read> a: array<T>;
@group(0) @binding(2) var<storage, read> b: array<T>;
@group(0) @binding(3) var<storage, read_write> c: array<T>;

const TILE: u32 = 64u;
const DEPTH: u32 = 16u;

var<workgroup> tile_a: array<array<T, 64>, 16>;
var<workgroup> tile_b: array<array<T, 64>, 16>;

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
    var acc: array<array<T, 4>, 4>;
    for (var k0 = 0u; k0 < k; k0 += DEPTH) {
        for (var l = 0u; l < 4u; l++) {
            let e = li + l * 256u;
            // A: 64 rows × 16 depth, depth fastest.
            let ar = e / DEPTH;
            let ak = e % DEPTH;
            var va = T(0);
            if (row0 + ar < m && k0 + ak < k) {
                va = a[a_off + (row0 + ar) * a_rs + (k0 + ak) * a_cs];
            }
            tile_a[ak][ar] = va;
            // B: 16 depth × 64 columns, columns fastest.
            let bk = e / TILE;
            let bc = e % TILE;
            var vb = T(0);
            if (col0 + bc < n && k0 + bk < k) {
                vb = b[b_off + (k0 + bk) * b_rs + (col0 + bc) * b_cs];
            }
            tile_b[bk][bc] = vb;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < DEPTH; kk++) {
            var av: array<T, 4>;
            var bv: array<T, 4>;
            for (var t = 0u; t < 4u; t++) {
                av[t] = tile_a[kk][lid.y + 16u * t];
                bv[t] = tile_b[kk][lid.x + 16u * t];
            }
            for (var i = 0u; i < 4u; i++) {
                for (var j = 0u; j < 4u; j++) {
                    acc[i][j] += av[i] * bv[j];
                }
            }
        }
        workgroupBarrier();
    }
    let c_off = batch * m * n;
    for (var i = 0u; i < 4u; i++) {
        let r = row0 + lid.y + 16u * i;
        for (var j = 0u; j < 4u; j++) {
            let col = col0 + lid.x + 16u * j;
            if (r < m && col < n) {
                c[c_off + r * n + col] = acc[i][j];
            }
        }
    }
}

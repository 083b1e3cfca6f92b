// ONNX GridSample over 1–3 spatial dims (f32), as the cpu backend computes it: per spatial
// axis up to 4 taps (nearest 1, linear 2, cubic 4 with Keys a = -0.75), each a cell index
// (-1 reads zero) and a weight; the output sums every tap combination.
// params: [count, spatial, channels, points, mode (0 nearest, 1 linear, 2 cubic),
//          padding (0 zeros, 1 border, 2 reflection), align_corners, cells, len[3]]
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> grid: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

// Folds `v` into [lo, hi] by mirroring at the borders.
fn fold_reflect(v: f32, lo: f32, hi: f32) -> f32 {
    let range = hi - lo;
    if (range <= 0.0 || !(abs(v) <= 3.4028235e38)) {
        return max(lo, 0.0);
    }
    if (v < lo) {
        let dx = lo - v;
        let n = trunc(dx / range);
        let r = dx - n * range;
        if (n % 2.0 == 0.0) {
            return lo + r;
        }
        return hi - r;
    }
    if (v > hi) {
        let dx = v - hi;
        let n = trunc(dx / range);
        let r = dx - n * range;
        if (n % 2.0 == 0.0) {
            return hi - r;
        }
        return lo + r;
    }
    return v;
}

fn cell(i: i32, len: u32, padding: u32, lo: f32, hi: f32) -> i32 {
    let last = i32(len) - 1;
    if (len == 0u) {
        return -1;
    }
    if (padding == 0u) {
        if (i < 0 || i > last) {
            return -1;
        }
        return i;
    }
    if (padding == 1u) {
        return clamp(i, 0, last);
    }
    return clamp(i32(fold_reflect(f32(i), lo, hi)), 0, last);
}

fn cubic_near(t: f32) -> f32 {
    let a = -0.75;
    return ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0;
}

fn cubic_far(t: f32) -> f32 {
    let a = -0.75;
    return ((a * t - 5.0 * a) * t + 8.0 * a) * t - 4.0 * a;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = flat_id(wid, nwg, lid);
    if (i >= params[0]) {
        return;
    }
    let spatial = params[1];
    let channels = params[2];
    let points = params[3];
    let mode = params[4];
    let padding = params[5];
    let align = params[6] != 0u;
    let cells = params[7];
    let pt = i % points;
    let bc = i / points;
    let b = bc / channels;

    var idx: array<array<i32, 4>, 3>;
    var wt: array<array<f32, 4>, 3>;
    var ntaps = 1u;
    var stride: array<u32, 3>;
    var s = 1u;
    for (var d = 0u; d < spatial; d++) {
        let a = spatial - 1u - d;
        stride[a] = s;
        s *= params[8u + a];
    }
    for (var a = 0u; a < spatial; a++) {
        let len = params[8u + a];
        let lenf = f32(len);
        // The grid lists the innermost axis first.
        let g = grid[(b * points + pt) * spatial + (spatial - 1u - a)];
        var lo = -0.5;
        var hi = lenf - 0.5;
        var xc = ((g + 1.0) * lenf - 1.0) / 2.0;
        if (align) {
            lo = 0.0;
            hi = lenf - 1.0;
            xc = (g + 1.0) / 2.0 * (lenf - 1.0);
        }
        if (mode == 0u) {
            xc = round(xc);
        }
        if (xc < lo || xc > hi) {
            if (padding == 1u) {
                xc = clamp(xc, 0.0, max(lenf - 1.0, 0.0));
            } else if (padding == 2u) {
                xc = fold_reflect(xc, lo, hi);
            }
        }
        let base = floor(xc);
        let t = xc - base;
        let bi = i32(base);
        if (mode == 0u) {
            ntaps = 1u;
            idx[a][0] = cell(i32(xc), len, padding, lo, hi);
            wt[a][0] = 1.0;
        } else if (mode == 1u) {
            ntaps = 2u;
            idx[a][0] = cell(bi, len, padding, lo, hi);
            idx[a][1] = cell(bi + 1, len, padding, lo, hi);
            wt[a][0] = 1.0 - t;
            wt[a][1] = t;
        } else {
            ntaps = 4u;
            for (var k = 0; k < 4; k++) {
                idx[a][k] = cell(bi - 1 + k, len, padding, lo, hi);
            }
            wt[a][0] = cubic_far(t + 1.0);
            wt[a][1] = cubic_near(t);
            wt[a][2] = cubic_near(1.0 - t);
            wt[a][3] = cubic_far(2.0 - t);
        }
    }
    var combos = 1u;
    for (var a = 0u; a < spatial; a++) {
        combos *= ntaps;
    }
    let plane = bc * cells;
    var acc = 0.0;
    for (var c = 0u; c < combos; c++) {
        var rest = c;
        var off = 0u;
        var w = 1.0;
        var inside = true;
        for (var a = 0u; a < spatial; a++) {
            let k = rest % ntaps;
            rest = rest / ntaps;
            let cell_at = idx[a][k];
            if (cell_at < 0) {
                inside = false;
            } else {
                off += u32(cell_at) * stride[a];
                w *= wt[a][k];
            }
        }
        if (inside) {
            acc += x[plane + off] * w;
        }
    }
    out[i] = acc;
}

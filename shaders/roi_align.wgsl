// ONNX RoiAlign (as the reference): one invocation per output (r, c, ph, pw) averages (or,
// `max`, takes the largest weighted corner of) bilinear samples on a regular grid in its
// bin; samples more than a pixel outside the image read zero. A batch index out of range
// yields zeros.
// params: [count, channels, height, width, out_h, out_w, sampling_ratio, spatial_scale (f32),
//          half_pixel, max, batch]
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> rois: array<f32>;
@group(0) @binding(3) var<storage, read> batch_index: array<i32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

struct Axis {
    low: u32,
    high: u32,
    frac: f32,
}

fn axis(v: f32, len: u32) -> Axis {
    let w = max(v, 0.0);
    let low = u32(w);
    if (low >= len - 1u) {
        return Axis(len - 1u, len - 1u, 0.0);
    }
    return Axis(low, low + 1u, w - f32(low));
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = flat_id(wid, nwg, lid);
    if (i >= params[0]) {
        return;
    }
    let channels = params[1];
    let height = params[2];
    let width = params[3];
    let out_h = params[4];
    let out_w = params[5];
    let ratio = params[6];
    let scale = param_f(7u);
    let half_pixel = params[8] != 0u;
    let use_max = params[9] != 0u;
    let pw = i % out_w;
    let ph = (i / out_w) % out_h;
    let c = (i / (out_w * out_h)) % channels;
    let r = i / (out_w * out_h * channels);
    let b = batch_index[r];
    if (b < 0 || u32(b) >= params[10]) {
        out[i] = 0.0;
        return;
    }
    var offset = 0.0;
    if (half_pixel) {
        offset = 0.5;
    }
    let start_w = rois[4u * r] * scale - offset;
    let start_h = rois[4u * r + 1u] * scale - offset;
    var roi_w = rois[4u * r + 2u] * scale - offset - start_w;
    var roi_h = rois[4u * r + 3u] * scale - offset - start_h;
    if (!half_pixel) {
        roi_w = max(roi_w, 1.0);
        roi_h = max(roi_h, 1.0);
    }
    let bin_h = roi_h / f32(out_h);
    let bin_w = roi_w / f32(out_w);
    var grid_h = ratio;
    var grid_w = ratio;
    if (ratio == 0u) {
        grid_h = u32(max(ceil(roi_h / f32(out_h)), 0.0));
        grid_w = u32(max(ceil(roi_w / f32(out_w)), 0.0));
    }
    let plane = (u32(b) * channels + c) * height * width;
    var acc = 0.0;
    var best = neg_inf();
    var sampled = false;
    for (var iy = 0u; iy < grid_h; iy++) {
        let y = start_h + f32(ph) * bin_h + (f32(iy) + 0.5) * bin_h / f32(grid_h);
        for (var ix = 0u; ix < grid_w; ix++) {
            let xx = start_w + f32(pw) * bin_w + (f32(ix) + 0.5) * bin_w / f32(grid_w);
            sampled = true;
            var v = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
            if (!(y < -1.0 || y > f32(height) || xx < -1.0 || xx > f32(width))) {
                let ay = axis(y, height);
                let ax = axis(xx, width);
                let hy = 1.0 - ay.frac;
                let hx = 1.0 - ax.frac;
                v[0] = hy * hx * x[plane + ay.low * width + ax.low];
                v[1] = hy * ax.frac * x[plane + ay.low * width + ax.high];
                v[2] = ay.frac * hx * x[plane + ay.high * width + ax.low];
                v[3] = ay.frac * ax.frac * x[plane + ay.high * width + ax.high];
            }
            acc += v[0] + v[1] + v[2] + v[3];
            best = max(best, max(max(v[0], v[1]), max(v[2], v[3])));
        }
    }
    if (use_max) {
        if (sampled) {
            out[i] = best;
        } else {
            out[i] = 0.0;
        }
    } else {
        out[i] = acc / f32(max(grid_h * grid_w, 1u));
    }
}

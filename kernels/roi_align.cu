// RoiAlign as kiln-cpu's roi.rs (the ONNX reference): one thread per output element
// (roi, channel, bin row, bin column) averages (or takes the max of) bilinear samples on a
// regular grid in its bin, in double with unfused products, rounded once to the storage type.
// Samples more than a pixel outside the image count as zero. An out-of-range batch index sets
// `flag` (the host reports it as kiln-cpu does).
#include "exact.cuh"

// `(low, high, fraction)` of one sample coordinate along an axis of length `len` (> 0).
__device__ __forceinline__ void roi_axis(double v, i64 len, i64* low, i64* high, double* frac) {
    v = fmax(v, 0.0);
    const i64 l = (i64)v;  // v <= len here, so the truncation fits
    if (l >= len - 1) {
        *low = len - 1;
        *high = len - 1;
        *frac = 0.0;
    } else {
        *low = l;
        *high = l + 1;
        *frac = v - (double)l;
    }
}

// The grid of samples per bin along one axis: the given ratio, or ceil(extent / bins) (a NaN
// or negative extent gives none; a huge one saturates as Rust's `as usize`).
__device__ __forceinline__ u64 roi_grid(i64 ratio, double extent, i64 bins) {
    if (ratio > 0) return (u64)ratio;
    const double g = fmax(ceil(extent / (double)bins), 0.0);
    return g >= 18446744073709551616.0 ? ~0ull : (u64)g;
}

template <typename T>
__device__ void roi_align(i64 total, i64 batch, i64 channels, i64 height, i64 width, i64 out_h, i64 out_w, i64 ratio, i64 scale_bits,
                          int half_pixel, int take_max, const T* x, const double* rois, const i64* batch_indices, T* y, int* flag) {
    const double scale = __longlong_as_double(scale_bits);  // a double as its bits (see the launcher)
    KILN_GRID_LOOP(e, total) {
        const i64 pw = e % out_w;
        const i64 ph = (e / out_w) % out_h;
        const i64 c = (e / (out_w * out_h)) % channels;
        const i64 r = e / (out_w * out_h * channels);
        const i64 b = batch_indices[r];
        if (b < 0 || b >= batch) {
            *flag = 1;
            y[e] = from_d<T>(0.0);
            continue;
        }
        const double* roi = rois + 4 * r;
        const double offset = half_pixel ? 0.5 : 0.0;
        const double start_w = __dsub_rn(mul_d(roi[0], scale), offset), start_h = __dsub_rn(mul_d(roi[1], scale), offset);
        double roi_w = __dsub_rn(__dsub_rn(mul_d(roi[2], scale), offset), start_w);
        double roi_h = __dsub_rn(__dsub_rn(mul_d(roi[3], scale), offset), start_h);
        if (!half_pixel) {
            roi_w = fmax(roi_w, 1.0);
            roi_h = fmax(roi_h, 1.0);
        }
        const double bin_h = roi_h / (double)out_h, bin_w = roi_w / (double)out_w;
        const u64 grid_h = roi_grid(ratio, roi_h, out_h), grid_w = roi_grid(ratio, roi_w, out_w);
        const u64 samples = grid_h * grid_w;
        const double count = (double)(samples > 0 ? samples : 1);
        const T* data = x + (b * channels + c) * height * width;
        double acc = -0.0, best = 0.0;  // the bins' sum starts at -0.0 too
        bool any = false;
        for (u64 iy = 0; iy < grid_h; ++iy) {
            const double sy = __dadd_rn(__dadd_rn(start_h, mul_d((double)ph, bin_h)), mul_d((double)iy + 0.5, bin_h) / (double)grid_h);
            for (u64 ix = 0; ix < grid_w; ++ix) {
                const double sx = __dadd_rn(__dadd_rn(start_w, mul_d((double)pw, bin_w)), mul_d((double)ix + 0.5, bin_w) / (double)grid_w);
                i64 corner[4] = {0, 0, 0, 0};
                double weight[4] = {0.0, 0.0, 0.0, 0.0};
                if (!(sy < -1.0 || sy > (double)height || sx < -1.0 || sx > (double)width)) {
                    i64 y0, y1, x0, x1;
                    double ly, lx;
                    roi_axis(sy, height, &y0, &y1, &ly);
                    roi_axis(sx, width, &x0, &x1, &lx);
                    const double hy = 1.0 - ly, hx = 1.0 - lx;
                    corner[0] = y0 * width + x0;
                    corner[1] = y0 * width + x1;
                    corner[2] = y1 * width + x0;
                    corner[3] = y1 * width + x1;
                    weight[0] = mul_d(hy, hx);
                    weight[1] = mul_d(hy, lx);
                    weight[2] = mul_d(ly, hx);
                    weight[3] = mul_d(ly, lx);
                }
                if (take_max) {
                    double m = -INFINITY;
                    for (int q = 0; q < 4; ++q) m = fmax(m, mul_d(weight[q], to_d(data[corner[q]])));
                    best = any ? fmax(best, m) : m;
                    any = true;
                } else {
                    double s = -0.0;  // Rust's f64 `sum` starts at -0.0
                    for (int q = 0; q < 4; ++q) s = __dadd_rn(s, mul_d(weight[q], to_d(data[corner[q]])));
                    acc = __dadd_rn(acc, s);
                }
            }
        }
        y[e] = from_d<T>(take_max ? (any ? best : 0.0) : acc / count);
    }
}

#define ROI_ALIGN(suffix, T) \
    extern "C" __global__ void roi_align_##suffix(i64 total, i64 batch, i64 channels, i64 height, i64 width, i64 out_h, i64 out_w, i64 ratio, \
                                                  i64 scale, int half_pixel, int take_max, const T* x, const double* rois, \
                                                  const i64* batch_indices, T* y, int* flag) { \
        roi_align(total, batch, channels, height, width, out_h, out_w, ratio, scale, half_pixel, take_max, x, rois, batch_indices, y, flag); \
    }

ROI_ALIGN(f32, float)
ROI_ALIGN(f16, __half)
ROI_ALIGN(bf16, __nv_bfloat16)
ROI_ALIGN(f64, double)

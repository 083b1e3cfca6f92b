//! RoiAlign, following the ONNX reference implementation (bilinear samples on a regular
//! grid in each output bin; samples more than a pixel outside the image count as zero).

use crate::element::{float_data, pack, FloatElem};
use kiln::plan::roi::{image, RoiAlignSpec};
use kiln::{HostTensor, TensorData};

/// One bilinear sample: the four corner offsets within a channel plane and their weights.
struct Sample {
    corners: [usize; 4],
    weights: [f64; 4],
}

fn sample(y: f64, x: f64, height: usize, width: usize) -> Sample {
    if y < -1.0 || y > height as f64 || x < -1.0 || x > width as f64 {
        return Sample { corners: [0; 4], weights: [0.0; 4] };
    }
    let axis = |v: f64, len: usize| -> (usize, usize, f64) {
        let v = v.max(0.0);
        let low = v as usize;
        if low >= len - 1 {
            (len - 1, len - 1, 0.0)
        } else {
            (low, low + 1, v - low as f64)
        }
    };
    let (y0, y1, ly) = axis(y, height);
    let (x0, x1, lx) = axis(x, width);
    let (hy, hx) = (1.0 - ly, 1.0 - lx);
    Sample {
        corners: [y0 * width + x0, y0 * width + x1, y1 * width + x0, y1 * width + x1],
        weights: [hy * hx, hy * lx, ly * hx, ly * lx],
    }
}

pub fn roi_align(
    x: &HostTensor,
    rois: &HostTensor,
    batch_indices: &HostTensor,
    spec: &RoiAlignSpec,
) -> Result<TensorData, String> {
    let RoiAlignSpec { max, output_size, sampling_ratio, spatial_scale, half_pixel } = *spec;
    let [batch, channels, height, width] = image(x.shape(), rois.len(), batch_indices.len())?;
    let [out_h, out_w] = output_size;
    let boxes = rois.to_f64_vec();
    let indices = batch_indices.to_i64_vec().ok_or("RoiAlign batch_indices must be integers")?;
    let xv = x.to_f64_vec();
    let plane = height * width;
    let scale = spatial_scale as f64;
    let offset = if half_pixel { 0.5 } else { 0.0 };
    let mut out = Vec::with_capacity(indices.len() * channels * out_h * out_w);
    for (r, &b) in indices.iter().enumerate() {
        let b = usize::try_from(b)
            .ok()
            .filter(|&b| b < batch)
            .ok_or(format!("RoiAlign batch index {b} is out of range"))?;
        let roi = &boxes[4 * r..4 * r + 4];
        let (start_w, start_h) = (roi[0] * scale - offset, roi[1] * scale - offset);
        let (mut roi_w, mut roi_h) = (roi[2] * scale - offset - start_w, roi[3] * scale - offset - start_h);
        if !half_pixel {
            roi_w = roi_w.max(1.0);
            roi_h = roi_h.max(1.0);
        }
        let (bin_h, bin_w) = (roi_h / out_h as f64, roi_w / out_w as f64);
        let grid = |extent: f64, bins: usize| {
            if sampling_ratio > 0 {
                sampling_ratio
            } else {
                (extent / bins as f64).ceil().max(0.0) as usize
            }
        };
        let (grid_h, grid_w) = (grid(roi_h, out_h), grid(roi_w, out_w));
        let count = (grid_h * grid_w).max(1) as f64;
        // The samples of every bin, row-major over bins, shared by all channels.
        let mut samples = Vec::with_capacity(out_h * out_w * grid_h * grid_w);
        for ph in 0..out_h {
            for pw in 0..out_w {
                for iy in 0..grid_h {
                    let y = start_h + ph as f64 * bin_h + (iy as f64 + 0.5) * bin_h / grid_h as f64;
                    for ix in 0..grid_w {
                        let x = start_w + pw as f64 * bin_w + (ix as f64 + 0.5) * bin_w / grid_w as f64;
                        samples.push(sample(y, x, height, width));
                    }
                }
            }
        }
        let per_bin = grid_h * grid_w;
        for c in 0..channels {
            let data = &xv[(b * channels + c) * plane..][..plane];
            for bin in 0..out_h * out_w {
                let bin_samples = &samples[bin * per_bin..(bin + 1) * per_bin];
                let weighted = |s: &Sample| -> [f64; 4] { std::array::from_fn(|k| s.weights[k] * data[s.corners[k]]) };
                let value = if max {
                    bin_samples
                        .iter()
                        .map(|s| weighted(s).into_iter().fold(f64::NEG_INFINITY, f64::max))
                        .reduce(f64::max)
                        .unwrap_or(0.0)
                } else {
                    bin_samples.iter().map(|s| weighted(s).iter().sum::<f64>()).sum::<f64>() / count
                };
                out.push(value);
            }
        }
    }
    fn to_float<T: FloatElem>(_: &[T], v: Vec<f64>) -> TensorData {
        pack(v.into_iter().map(T::from_f64).collect::<Vec<T>>())
    }
    float_data!(x.data(), "RoiAlign", v => to_float(v, out))
}

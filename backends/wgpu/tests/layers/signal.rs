//! DFT, Col2Im, Det, RoiAlign and NonMaxSuppression (read back, computed on the host).

use crate::common::*;
use kiln::{HostTensor, LayerKind};

fn scalar_i64(v: i64) -> HostTensor {
    HostTensor::from_i64(vec![], vec![v]).expect("scalar")
}

#[test]
fn dft_forward_inverse_onesided_and_lengths() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(70);
    let real = rand_f32(&mut r, &[2, 7, 3, 1], -1.0, 1.0);
    let complex = rand_f32(&mut r, &[2, 6, 3, 2], -1.0, 1.0);
    for (x, name) in [(&real, "real"), (&complex, "complex")] {
        for inverse in [false, true] {
            for onesided in [false, true] {
                if inverse && onesided && name == "real" {
                    continue; // an inverse onesided transform takes complex bins
                }
                for axis in [1, -3, 2] {
                    for length in [None, Some(5), Some(9)] {
                        let mut ins = vec![In::Run(x.clone()), In::Const(scalar_i64(axis))];
                        if let Some(n) = length {
                            ins.push(In::Const(scalar_i64(n)));
                        }
                        let what = format!("DFT {name} inverse={inverse} onesided={onesided} axis={axis} n={length:?}");
                        check_tol(&gpu, LayerKind::Dft { inverse, onesided }, ins, 1e-4, 2e-5, &what);
                    }
                }
            }
        }
    }
}

#[test]
fn col2im_with_strides_dilations_and_pads() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(71);
    // 2-D: image 5×6, block 2×3, stride (1, 2), dilation (2, 1), pads (1, 0, 1, 2).
    let (strides, dilations, pads) = (vec![1, 2], vec![2, 1], vec![1, 0, 1, 2]);
    let grid = kiln::ir::infer::col2im_blocks(&[5, 6], &[2, 3], &strides, &dilations, &pads).expect("grid");
    let columns: usize = grid.iter().product();
    let x = rand_f32(&mut r, &[2, 3 * 6, columns], -1.0, 1.0);
    let ins = vec![In::Run(x), In::Const(i64s(&[2], &[5, 6])), In::Const(i64s(&[2], &[2, 3]))];
    check(&gpu, LayerKind::Col2Im { strides, dilations, pads }, ins, "Col2Im 2-D");
    // 1-D and 3-D.
    let x = rand_f32(&mut r, &[1, 2 * 3, 8], -1.0, 1.0);
    let ins = vec![In::Run(x), In::Const(i64s(&[1], &[10])), In::Const(i64s(&[1], &[3]))];
    check(&gpu, LayerKind::Col2Im { strides: vec![1], dilations: vec![1], pads: vec![0, 0] }, ins, "Col2Im 1-D");
    let x = rand_f32(&mut r, &[1, 8, 27], -1.0, 1.0);
    let ins = vec![In::Run(x), In::Const(i64s(&[3], &[4, 4, 4])), In::Const(i64s(&[3], &[2, 2, 2]))];
    let kind = LayerKind::Col2Im { strides: vec![1; 3], dilations: vec![1; 3], pads: vec![0; 6] };
    check(&gpu, kind, ins, "Col2Im 3-D");
}

#[test]
fn determinant_of_batches_and_singular_matrices() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(72);
    for n in [1, 2, 3, 5] {
        let x = rand_f32(&mut r, &[2, 3, n, n], -2.0, 2.0);
        check_tol(&gpu, LayerKind::Determinant, vec![In::Run(x)], 1e-4, 1e-5, &format!("Det {n}×{n}"));
    }
    let singular = HostTensor::from_f32(vec![3, 3], vec![1.0, 2.0, 3.0, 2.0, 4.0, 6.0, 0.5, 1.0, 7.0]).expect("x");
    check(&gpu, LayerKind::Determinant, vec![In::Run(singular)], "Det of a singular matrix");
}

#[test]
fn roi_align_average_and_max() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(73);
    let x = rand_f32(&mut r, &[2, 3, 10, 12], -1.0, 1.0);
    let rois = HostTensor::from_f32(
        vec![4, 4],
        vec![0.0, 0.0, 9.0, 9.0, 2.5, 1.0, 7.0, 8.5, -2.0, -1.0, 14.0, 11.0, 3.0, 3.0, 3.2, 3.1],
    )
    .expect("rois");
    let batch = i64s(&[4], &[0, 1, 1, 0]);
    for max in [false, true] {
        for half_pixel in [false, true] {
            for sampling_ratio in [0, 2] {
                let kind =
                    LayerKind::RoiAlign { max, output_size: [3, 4], sampling_ratio, spatial_scale: 0.75, half_pixel };
                let ins = vec![In::Run(x.clone()), In::Run(rois.clone()), In::Run(batch.clone())];
                let what = format!("RoiAlign max={max} half_pixel={half_pixel} ratio={sampling_ratio}");
                check_tol(&gpu, kind, ins, 1e-4, 1e-5, &what);
            }
        }
    }
}

#[test]
fn non_max_suppression_reads_back_and_selects() {
    let Some(gpu) = gpu() else { return };
    let mut r = rng(74);
    let boxes = rand_f32(&mut r, &[2, 12, 4], 0.0, 10.0);
    let scores = rand_f32(&mut r, &[2, 3, 12], 0.0, 1.0);
    for center_point_box in [false, true] {
        let ins = vec![
            In::Run(boxes.clone()),
            In::Run(scores.clone()),
            In::Const(scalar_i64(4)),
            In::Const(HostTensor::from_f32(vec![], vec![0.3]).expect("iou")),
            In::Const(HostTensor::from_f32(vec![], vec![0.2]).expect("score")),
        ];
        check(&gpu, LayerKind::NonMaxSuppression { center_point_box }, ins, &format!("NMS center={center_point_box}"));
    }
}

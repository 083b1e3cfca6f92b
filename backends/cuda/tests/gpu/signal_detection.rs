//! Reduce on bool, OneHot, LRN, Col2Im, RoiAlign, Determinant, DFT, NonZero and
//! NonMaxSuppression against the
//! cpu oracle. The float layers compute as kiln-cpu does (in double, in its order, rounded
//! once), so their tolerances only allow a last-place difference (libm's sin / pow may differ
//! from CUDA's by an ulp of a double).

use crate::common::{backend, check, i64s, one_layer, random, rng, worst_error, In};
use kiln::*;
use rand::Rng;

fn last_place(dtype: DataType) -> f64 {
    match dtype {
        DataType::F16 => 1e-3,
        DataType::BF16 => 8e-3,
        DataType::F64 => 1e-12,
        _ => 1e-6,
    }
}

const FLOATS: [DataType; 3] = [DataType::F32, DataType::F16, DataType::BF16];

fn f64s(shape: &[usize], v: Vec<f64>) -> HostTensor {
    HostTensor::new(shape.to_vec(), TensorData::F64(v)).unwrap()
}

/// `t`'s values (exact in every float type here) as `dtype`.
fn as_float(t: &HostTensor, dtype: DataType) -> HostTensor {
    let v = t.to_f64_vec();
    let data = match dtype {
        DataType::F32 => TensorData::F32(v.iter().map(|&x| x as f32).collect()),
        DataType::F16 => TensorData::F16(v.iter().map(|&x| half::f16::from_f64(x)).collect()),
        DataType::BF16 => TensorData::BF16(v.iter().map(|&x| half::bf16::from_f64(x)).collect()),
        _ => TensorData::F64(v),
    };
    HostTensor::new(t.shape().to_vec(), data).unwrap()
}

#[test]
fn reduce_max_and_min_on_bool_match() {
    let mut r = rng(200);
    let x = random(&mut r, DataType::Bool, &[3, 4, 5]);
    let empty = HostTensor::new(vec![2, 0, 3], TensorData::Bool(vec![])).unwrap();
    for op in [ReduceOp::Max, ReduceOp::Min] {
        for (axes, keep) in [(vec![1], true), (vec![0, 2], false), (vec![0, 1, 2], true), (vec![2], false)] {
            let kind = LayerKind::Reduce { op, axes: axes.clone(), keep_dims: keep };
            check(&format!("reduce {op:?} bool {axes:?}"), kind.clone(), vec![In::Run(x.clone())], 0.0);
            check(&format!("reduce {op:?} empty bool {axes:?}"), kind, vec![In::Run(empty.clone())], 0.0);
        }
    }
}

#[test]
fn one_hot_every_axis_and_wrapped_indices_match() {
    let indices = i64s(&[2, 3], vec![0, -1, 5, 2, -4, 9]);
    let indices_i32 = HostTensor::new(vec![2, 3], TensorData::I32(vec![1, 3, -2, 0, 4, -5])).unwrap();
    let values = HostTensor::new(vec![2], TensorData::F32(vec![-2.5, 7.0])).unwrap();
    let values_i64 = i64s(&[2], vec![3, -9]);
    let depth = i64s(&[], vec![5]);
    for axis in [-1, 0, 1, 2, -3] {
        for (name, idx, vals) in [("i64→f32", &indices, &values), ("i32→i64", &indices_i32, &values_i64)] {
            for depth_in in [In::Const(depth.clone()), In::Run(depth.clone())] {
                check(
                    &format!("one hot axis {axis} {name}"),
                    LayerKind::OneHot { axis },
                    vec![In::Run(idx.clone()), In::Run(vals.clone()), depth_in],
                    0.0,
                );
            }
        }
    }
}

#[test]
fn lrn_windows_match() {
    let mut r = rng(201);
    for dtype in FLOATS {
        for (shape, window) in [(vec![2, 5, 3, 4], 3), (vec![1, 7, 6], 4), (vec![3, 2], 5), (vec![1, 6, 2, 2, 2], 1)] {
            let x = random(&mut r, dtype, &shape);
            let kind = LayerKind::Lrn { window, alpha: 0.002, beta: 0.75, k: 1.5 };
            check(&format!("lrn {shape:?} window {window} {dtype}"), kind, vec![In::Run(x)], last_place(dtype));
        }
    }
}

#[test]
fn col2im_with_strides_dilations_and_pads_matches() {
    let mut r = rng(202);
    // (image, block, strides, dilations, pads)
    type Case = (Vec<i64>, Vec<i64>, Vec<usize>, Vec<usize>, Vec<usize>);
    let cases: [Case; 4] = [
        (vec![5, 5], vec![1, 5], vec![1, 1], vec![1, 1], vec![0, 0, 0, 0]),
        (vec![5, 5], vec![2, 2], vec![2, 2], vec![1, 1], vec![1, 0, 1, 0]),
        (vec![6, 7], vec![2, 3], vec![1, 2], vec![2, 1], vec![1, 2, 0, 1]),
        (vec![3, 4, 5], vec![2, 2, 2], vec![1, 1, 2], vec![1, 2, 1], vec![0, 1, 0, 0, 1, 1]),
    ];
    for dtype in FLOATS {
        for (image, block, strides, dilations, pads) in &cases {
            let spatial = image.len();
            let grid = kiln::ir::infer::col2im_blocks(
                &image.iter().map(|&d| d as usize).collect::<Vec<_>>(),
                &block.iter().map(|&d| d as usize).collect::<Vec<_>>(),
                strides,
                dilations,
                pads,
            )
            .unwrap();
            let per_channel: i64 = block.iter().product();
            let x = random(&mut r, dtype, &[2, 3 * per_channel as usize, grid.iter().product()]);
            let kind = LayerKind::Col2Im { strides: strides.clone(), dilations: dilations.clone(), pads: pads.clone() };
            let what = format!("col2im {image:?} block {block:?} {dtype}");
            let image_t = i64s(&[spatial], image.clone());
            let block_t = i64s(&[spatial], block.clone());
            check(
                &what,
                kind.clone(),
                vec![In::Run(x.clone()), In::Const(image_t.clone()), In::Const(block_t.clone())],
                last_place(dtype),
            );
            // Shape inputs computed on the device are read back.
            check(
                &format!("{what} (device shapes)"),
                kind,
                vec![In::Run(x), In::Run(image_t), In::Run(block_t)],
                last_place(dtype),
            );
        }
    }
}

#[test]
fn roi_align_average_and_max_match() {
    let mut r = rng(203);
    let rois =
        f64s(&[4, 4], vec![0.0, 0.0, 9.0, 9.0, 1.25, 2.5, 5.875, 7.125, -3.0, -2.0, 4.0, 3.0, 6.0, 1.0, 6.5, 12.0]);
    let batch = i64s(&[4], vec![0, 1, 1, 0]);
    for dtype in FLOATS {
        let x = random(&mut r, dtype, &[2, 3, 10, 8]);
        let rois = as_float(&rois, dtype);
        for max in [false, true] {
            for (output_size, sampling_ratio, spatial_scale, half_pixel) in
                [([3, 3], 2, 1.0, false), ([2, 4], 0, 0.5, true), ([5, 2], 0, 1.0, false), ([1, 1], 3, 0.25, true)]
            {
                let kind = LayerKind::RoiAlign { max, output_size, sampling_ratio, spatial_scale, half_pixel };
                check(
                    &format!("roi align max={max} {output_size:?} ratio {sampling_ratio} {dtype}"),
                    kind,
                    vec![In::Run(x.clone()), In::Run(rois.clone()), In::Run(batch.clone())],
                    last_place(dtype),
                );
            }
        }
    }
}

#[test]
fn determinant_matches_including_singular_and_batched() {
    let mut r = rng(204);
    for dtype in FLOATS {
        for shape in [vec![3, 3], vec![2, 4, 5, 5], vec![1, 1], vec![6, 2, 2]] {
            let x = random(&mut r, dtype, &shape);
            check(&format!("det {shape:?} {dtype}"), LayerKind::Determinant, vec![In::Run(x)], 4.0 * last_place(dtype));
        }
    }
    let singular = f64s(
        &[2, 3, 3],
        vec![1.0, 2.0, 3.0, 2.0, 4.0, 6.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 2.0, 0.0, 3.0, 0.0, 0.0],
    );
    check("det singular and permuted f64", LayerKind::Determinant, vec![In::Run(singular)], 0.0);
}

/// (signal shape, axis, length, inverse, onesided)
type DftCase = (Vec<usize>, i64, Option<i64>, bool, bool);

#[test]
fn dft_forward_inverse_onesided_and_lengths_match() {
    let mut r = rng(205);
    for dtype in [DataType::F32, DataType::F16] {
        let cases: [DftCase; 8] = [
            (vec![2, 8, 1], 1, None, false, false),
            (vec![2, 8, 2], 1, None, true, false),
            (vec![3, 10, 1], 1, None, false, true),
            (vec![3, 6, 2], 1, None, true, true),
            (vec![2, 5, 4, 2], 2, Some(7), false, false),
            (vec![4, 3, 2], 0, Some(2), false, false),
            (vec![2, 9, 3, 1], -3, Some(12), false, true),
            (vec![1, 5, 2], 1, Some(9), true, true),
        ];
        for (shape, axis, length, inverse, onesided) in cases {
            let x = random(&mut r, dtype, &shape);
            let length_in = length.map_or(In::Absent, |n| In::Const(i64s(&[], vec![n])));
            check(
                &format!("dft {shape:?} axis {axis} length {length:?} inverse={inverse} onesided={onesided} {dtype}"),
                LayerKind::Dft { inverse, onesided },
                vec![In::Run(x), In::Const(i64s(&[], vec![axis])), length_in],
                4.0 * last_place(dtype),
            );
        }
    }
}

#[test]
fn nonzero_of_every_type_matches() {
    let mut r = rng(206);
    for dtype in [DataType::F32, DataType::F16, DataType::BF16, DataType::I32, DataType::I64, DataType::Bool] {
        for shape in [vec![7], vec![3, 4, 5], vec![2, 0, 3], vec![40, 50]] {
            let x = random(&mut r, dtype, &shape);
            check(&format!("nonzero {shape:?} {dtype}"), LayerKind::NonZero, vec![In::Run(x)], 0.0);
        }
    }
    let signed_zeros = HostTensor::new(vec![5], TensorData::F32(vec![-0.0, 0.0, f32::NAN, 1e-40, -3.0])).unwrap();
    check("nonzero of signed zeros, NaN and a subnormal", LayerKind::NonZero, vec![In::Run(signed_zeros)], 0.0);
    let all = random(&mut r, DataType::F32, &[3000]);
    check("nonzero over more elements than threads", LayerKind::NonZero, vec![In::Run(all)], 0.0);
}

#[test]
fn nonzero_counts_change_between_executions() {
    let Some(cuda) = backend() else { return };
    let mut r = rng(207);
    let shape = [6, 9];
    let (net, _) = one_layer(LayerKind::NonZero, vec![In::Run(random(&mut r, DataType::I64, &shape))]);
    let exe = cuda.prepare(&net).unwrap();
    let cpu = kiln_cpu::CpuBackend::new().prepare(&net).unwrap();
    for step in 0..5 {
        // Ever sparser inputs of one shape: the arena replanned, never a stale graph.
        let v: Vec<i64> = (0..54).map(|_| if r.gen_range(0..5) > step { r.gen_range(1..9) } else { 0 }).collect();
        let feeds = [i64s(&shape, v)];
        let (got, want) = (exe.execute(&feeds).unwrap(), cpu.execute(&feeds).unwrap());
        assert_eq!(got[0].shape(), want[0].shape(), "step {step}");
        assert_eq!(worst_error(&got[0], &want[0]), 0.0, "step {step}");
    }
}

#[test]
fn non_max_suppression_matches_with_limits_and_thresholds() {
    let mut r = rng(208);
    for center_point_box in [false, true] {
        for dtype in FLOATS {
            // Two batches, three classes, 40 boxes around a few clusters so that many overlap.
            let boxes: Vec<f64> = (0..2 * 40)
                .flat_map(|i| {
                    let (x, y) = ((i % 5) as f64 * 0.2 + r.gen_range(0.0..0.05), (i % 3) as f64 * 0.3 + r.gen_range(0.0..0.05));
                    [x, y, x + r.gen_range(0.1..0.4), y + r.gen_range(0.1..0.4)]
                })
                .collect();
            let scores: Vec<f64> = (0..2 * 3 * 40).map(|_| r.gen_range(0.0..1.0)).collect();
            let inputs = vec![
                In::Run(as_float(&f64s(&[2, 40, 4], boxes), dtype)),
                In::Run(as_float(&f64s(&[2, 3, 40], scores), dtype)),
                In::Const(i64s(&[1], vec![7])),
                In::Const(as_float(&f64s(&[1], vec![0.5]), DataType::F32)),
                In::Const(as_float(&f64s(&[1], vec![0.25]), DataType::F32)),
            ];
            check(&format!("nms {dtype} center {center_point_box}"), LayerKind::NonMaxSuppression { center_point_box }, inputs, 0.0);
        }
    }
}

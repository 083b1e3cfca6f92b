//! GridSample, BitCast and NonMaxSuppression on small hand-computed cases.

use crate::common::*;
use kiln::{DataType, GridSampleMode as Mode, GridSamplePadding as Pad, GridSampleParams, HostTensor, LayerKind};

fn sample(mode: Mode, padding: Pad, align_corners: bool, x: HostTensor, grid: HostTensor) -> HostTensor {
    let kind = LayerKind::GridSample(GridSampleParams { mode, padding, align_corners });
    run1(kind, vec![In::Run(x), In::Run(grid)])
}

#[test]
fn grid_sample_bilinear_reads_x_from_the_innermost_axis() {
    let x = f32s(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
    // (x, y) points: the corners, the center, and the top-right corner.
    let grid = f32s(&[1, 1, 4, 2], &[-1.0, -1.0, 1.0, 1.0, 0.0, 0.0, 1.0, -1.0]);
    let y = sample(Mode::Linear, Pad::Zeros, true, x, grid);
    assert_close(&y, DataType::F32, &[1, 1, 1, 4], &[1.0, 4.0, 2.5, 2.0], 1e-6);
}

#[test]
fn grid_sample_padding_modes_outside_the_input() {
    // W = 2 without align_corners: g = -2 maps to x = -1.5, borders at -0.5 and 1.5.
    let x = || f32s(&[1, 1, 1, 2], &[10.0, 20.0]);
    let grid = || f32s(&[1, 1, 1, 2], &[-2.0, 0.0]);
    let at = |pad| sample(Mode::Linear, pad, false, x(), grid());
    assert_close(&at(Pad::Zeros), DataType::F32, &[1, 1, 1, 1], &[0.0], 0.0);
    // Clamped to cell 0.
    assert_close(&at(Pad::Border), DataType::F32, &[1, 1, 1, 1], &[10.0], 0.0);
    // Mirrored at -0.5 to 0.5: halfway between the two cells.
    assert_close(&at(Pad::Reflection), DataType::F32, &[1, 1, 1, 1], &[15.0], 1e-6);
}

#[test]
fn grid_sample_nearest_rounds_ties_to_even() {
    let x = f32s(&[1, 1, 1, 4], &[1.0, 2.0, 3.0, 4.0]);
    // x = ((g + 1) * 4 - 1) / 2: 0.5, 1.5, 2.5 round to 0, 2, 2.
    let grid = f32s(&[1, 1, 3, 2], &[-0.5, 0.0, 0.0, 0.0, 0.5, 0.0]);
    let y = sample(Mode::Nearest, Pad::Zeros, false, x, grid);
    assert_close(&y, DataType::F32, &[1, 1, 1, 3], &[1.0, 3.0, 3.0], 0.0);
}

#[test]
fn grid_sample_cubic_between_cells() {
    let x = f32s(&[1, 1, 1, 4], &[1.0, 2.0, 4.0, 8.0]);
    // align_corners: g = 0 is x = 1.5; Keys weights at t = 0.5 are -3/32, 19/32, 19/32, -3/32.
    let y = sample(Mode::Cubic, Pad::Zeros, true, x, f32s(&[1, 1, 1, 2], &[0.0, 0.0]));
    assert_close(&y, DataType::F32, &[1, 1, 1, 1], &[2.71875], 1e-6);
}

#[test]
fn grid_sample_volumetric_nearest() {
    let x = f32s(&[1, 1, 2, 2, 2], &(0..8).map(|v| v as f32).collect::<Vec<_>>());
    // (x, y, z) = (1, -1, 1): depth 1, row 0, column 1.
    let y = sample(Mode::Nearest, Pad::Zeros, true, x, f32s(&[1, 1, 1, 1, 3], &[1.0, -1.0, 1.0]));
    assert_close(&y, DataType::F32, &[1, 1, 1, 1, 1], &[5.0], 0.0);
}

#[test]
fn grid_sample_rejects_a_grid_of_the_wrong_width() {
    let kind =
        LayerKind::GridSample(GridSampleParams { mode: Mode::Linear, padding: Pad::Zeros, align_corners: false });
    let x = f32s(&[1, 1, 2, 2], &[0.0; 4]);
    let grid = f32s(&[1, 1, 1, 3], &[0.0; 3]);
    let err = format!("{:?}", try_run(kind, vec![In::Run(x), In::Run(grid)]).unwrap_err());
    assert!(err.contains("coordinates per point"), "{err}");
}

#[test]
fn bit_cast_reinterprets_bits() {
    let y = run1(LayerKind::BitCast { to: DataType::I32 }, vec![In::Run(f32s(&[2], &[1.0, -0.0]))]);
    assert_exact(&y, &i32s(&[2], &[0x3F80_0000, i32::MIN]));
    let y = run1(LayerKind::BitCast { to: DataType::Bool }, vec![In::Run(u8s(&[2], &[0, 1]))]);
    assert_exact(&y, &bools(&[2], &[false, true]));
}

#[test]
fn bit_cast_rejects_bad_input() {
    let err = run_err(LayerKind::BitCast { to: DataType::Bool }, vec![In::Run(u8s(&[1], &[2]))]);
    assert!(err.contains("neither 0 nor 1"), "{err}");
    let widen = try_run(LayerKind::BitCast { to: DataType::I64 }, vec![In::Run(f32s(&[1], &[1.0]))]);
    let err = format!("{:?}", widen.unwrap_err());
    assert!(err.contains("one width"), "{err}");
}

fn nms(center: bool, boxes: &[f32], max: Option<i64>, score_threshold: Option<f32>) -> HostTensor {
    let scores = f32s(&[1, 1, 3], &[0.9, 0.95, 0.5]);
    let inputs = vec![
        In::Run(f32s(&[1, 3, 4], boxes)),
        In::Run(scores),
        max.map_or(In::Absent, |m| In::Const(i64s(&[1], &[m]))),
        In::Const(f32s(&[1], &[0.5])),
        score_threshold.map_or(In::Absent, |s| In::Const(f32s(&[1], &[s]))),
    ];
    run1(LayerKind::NonMaxSuppression { center_point_box: center }, inputs)
}

// Boxes A and B overlap with IoU 0.9 / 1.1; C is apart. B scores highest and suppresses A.
const CORNERS: [f32; 12] = [0.0, 0.0, 1.0, 1.0, 0.0, 0.1, 1.0, 1.1, 0.0, 2.0, 1.0, 3.0];
const CENTERS: [f32; 12] = [0.5, 0.5, 1.0, 1.0, 0.6, 0.5, 1.0, 1.0, 2.5, 0.5, 1.0, 1.0];

#[test]
fn non_max_suppression_keeps_the_best_of_overlapping_boxes() {
    assert_exact(&nms(false, &CORNERS, Some(10), None), &i64s(&[2, 3], &[0, 0, 1, 0, 0, 2]));
    assert_exact(&nms(true, &CENTERS, Some(10), None), &i64s(&[2, 3], &[0, 0, 1, 0, 0, 2]));
}

#[test]
fn non_max_suppression_limits_and_thresholds() {
    assert_exact(&nms(false, &CORNERS, Some(1), None), &i64s(&[1, 3], &[0, 0, 1]));
    assert_exact(&nms(false, &CORNERS, Some(10), Some(0.6)), &i64s(&[1, 3], &[0, 0, 1]));
    // No max_output_boxes_per_class selects nothing (its default is 0).
    assert_exact(&nms(false, &CORNERS, None, None), &i64s(&[0, 3], &[]));
}

#[test]
fn unique_flattened_sorted_and_in_first_occurrence_order() {
    let x = || f32s(&[2, 3], &[2.0, 1.0, 1.0, 3.0, 4.0, 3.0]);
    let out = run(LayerKind::Unique { axis: None, sorted: true }, vec![In::Run(x())]);
    assert_close(&out[0], DataType::F32, &[4], &[1.0, 2.0, 3.0, 4.0], 0.0);
    assert_exact(&out[1], &i64s(&[4], &[1, 0, 3, 4]));
    assert_exact(&out[2], &i64s(&[6], &[1, 0, 0, 2, 3, 2]));
    assert_exact(&out[3], &i64s(&[4], &[2, 1, 2, 1]));
    let out = run(LayerKind::Unique { axis: None, sorted: false }, vec![In::Run(x())]);
    assert_close(&out[0], DataType::F32, &[4], &[2.0, 1.0, 3.0, 4.0], 0.0);
    assert_exact(&out[1], &i64s(&[4], &[0, 1, 3, 4]));
    assert_exact(&out[2], &i64s(&[6], &[0, 1, 1, 2, 3, 2]));
    assert_exact(&out[3], &i64s(&[4], &[1, 2, 2, 1]));
}

#[test]
fn unique_slices_along_an_axis() {
    // Columns (axis 1) of [[1, 0, 1], [2, 5, 2]]: (1,2), (0,5), (1,2).
    let x = i64s(&[2, 3], &[1, 0, 1, 2, 5, 2]);
    let out = run(LayerKind::Unique { axis: Some(1), sorted: true }, vec![In::Run(x)]);
    assert_exact(&out[0], &i64s(&[2, 2], &[0, 1, 5, 2]));
    assert_exact(&out[1], &i64s(&[2], &[1, 0]));
    assert_exact(&out[2], &i64s(&[3], &[1, 0, 1]));
    assert_exact(&out[3], &i64s(&[2], &[1, 2]));
}

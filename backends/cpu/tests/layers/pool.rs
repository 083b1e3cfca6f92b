//! Max and average pooling.

use crate::common::*;
use kiln::{DataType, HostTensor, LayerKind, PoolingKind, PoolingParams};

fn params(kind: PoolingKind, window: &[usize]) -> PoolingParams {
    let n = window.len();
    PoolingParams {
        kind,
        window: window.to_vec(),
        strides: window.to_vec(),
        dilations: vec![1; n],
        pre_padding: vec![0; n],
        post_padding: vec![0; n],
        ceil_mode: false,
        average_count_excludes_padding: true,
    }
}

fn pool(p: PoolingParams, x: HostTensor) -> HostTensor {
    run1(LayerKind::Pooling(p), vec![In::Run(x)])
}

#[test]
fn max_and_average_2x2() {
    let x: Vec<f32> = (1..=16).map(|v| v as f32).collect();
    let y = pool(params(PoolingKind::Max, &[2, 2]), f32s(&[1, 1, 4, 4], &x));
    assert_close(&y, DataType::F32, &[1, 1, 2, 2], &[6.0, 8.0, 14.0, 16.0], 0.0);
    let y = pool(params(PoolingKind::Average, &[2, 2]), f16s(&[1, 1, 4, 4], &x));
    assert_close(&y, DataType::F16, &[1, 1, 2, 2], &[3.5, 5.5, 11.5, 13.5], 0.0);
}

#[test]
fn max_pooling_ignores_padding() {
    let p = PoolingParams {
        strides: vec![1],
        pre_padding: vec![1],
        post_padding: vec![1],
        ..params(PoolingKind::Max, &[3])
    };
    let y = pool(p, f32s(&[1, 1, 3], &[-5.0, -7.0, -6.0]));
    assert_close(&y, DataType::F32, &[1, 1, 3], &[-5.0, -5.0, -6.0], 0.0);
}

#[test]
fn average_divisor_counts_padding_but_not_ceil_overhang() {
    // Input 1..6, window 2, stride 2, one pad cell in front, ceil mode: four windows
    // [pad,1] [2,3] [4,5] [6,beyond]; the last cell lies past the padded extent.
    let base = PoolingParams { pre_padding: vec![1], ceil_mode: true, ..params(PoolingKind::Average, &[2]) };
    let x = f32s(&[1, 1, 6], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let y = pool(base.clone(), x.clone());
    assert_close(&y, DataType::F32, &[1, 1, 4], &[1.0, 2.5, 4.5, 6.0], 0.0);
    let include = PoolingParams { average_count_excludes_padding: false, ..base.clone() };
    let y = pool(include, x.clone());
    assert_close(&y, DataType::F32, &[1, 1, 4], &[0.5, 2.5, 4.5, 6.0], 0.0);
    // Without ceil mode the last window is dropped.
    let y = pool(PoolingParams { ceil_mode: false, ..base }, x);
    assert_close(&y, DataType::F32, &[1, 1, 3], &[1.0, 2.5, 4.5], 0.0);
}

#[test]
fn average_counts_end_padding_inside_the_padded_extent() {
    // Window 3, stride 2, pads 1/1 over 4 cells: windows [p,1,2] [2,3,4] [4,p?]: the last
    // window [3..6) covers cell 3 (=4), pad cell 4 and overhang 5 under ceil mode.
    let p = PoolingParams {
        strides: vec![2],
        pre_padding: vec![1],
        post_padding: vec![1],
        ceil_mode: true,
        average_count_excludes_padding: false,
        ..params(PoolingKind::Average, &[3])
    };
    let y = pool(p, f64s(&[1, 1, 4], &[1.0, 2.0, 3.0, 4.0]));
    assert_close(&y, DataType::F64, &[1, 1, 3], &[1.0, 3.0, 2.0], 1e-15);
}

#[test]
fn dilated_3d_pooling_and_integer_types() {
    let p = PoolingParams { strides: vec![1, 1, 1], dilations: vec![1, 1, 2], ..params(PoolingKind::Max, &[1, 1, 2]) };
    let y = pool(p, i32s(&[1, 1, 1, 1, 4], &[3, -1, 7, 2]));
    assert_exact(&y, &i32s(&[1, 1, 1, 1, 2], &[7, 2]));
    // Integer averages truncate toward zero.
    let y = pool(params(PoolingKind::Average, &[2]), i32s(&[1, 2, 2], &[1, 2, -1, -2]));
    assert_exact(&y, &i32s(&[1, 2, 1], &[1, -1]));
}

#[test]
fn pooling_over_channels_and_batches() {
    let x: Vec<f32> = (0..8).map(|v| v as f32).collect();
    let y = pool(params(PoolingKind::Max, &[2]), f32s(&[2, 2, 2], &x));
    assert_close(&y, DataType::F32, &[2, 2, 1], &[1.0, 3.0, 5.0, 7.0], 0.0);
}

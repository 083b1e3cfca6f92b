//! SoftMax, Normalization and LRN.

use crate::common::*;
use kiln::{DataType, HostTensor, LayerKind};

#[test]
fn softmax_along_an_axis_is_stable() {
    let e = |v: f64| v.exp();
    let y = run1(LayerKind::SoftMax { axis: 1 }, vec![In::Run(f32s(&[1, 3], &[1.0, 2.0, 3.0]))]);
    let s = e(1.0) + e(2.0) + e(3.0);
    assert_close(&y, DataType::F32, &[1, 3], &[e(1.0) / s, e(2.0) / s, e(3.0) / s], 1e-6);
    let y = run1(LayerKind::SoftMax { axis: 0 }, vec![In::Run(f64s(&[2, 2], &[1000.0, 0.0, 1000.0, f64::ln(3.0)]))]);
    assert_close(&y, DataType::F64, &[2, 2], &[0.5, 0.25, 0.5, 0.75], 1e-15);
    let y = run1(LayerKind::SoftMax { axis: 0 }, vec![In::Run(bf16s(&[0, 2], &[]))]);
    assert_close(&y, DataType::BF16, &[0, 2], &[], 0.0);
}

fn normalization(
    x: HostTensor,
    scale: HostTensor,
    bias: HostTensor,
    axes: &[usize],
    groups: usize,
    epsilon: f32,
) -> HostTensor {
    let kind = LayerKind::Normalization { axes: axes.to_vec(), epsilon, num_groups: groups };
    run1(kind, vec![In::Run(x), In::Const(scale), In::Const(bias)])
}

#[test]
fn layer_normalization_over_the_last_axis() {
    let x = f32s(&[2, 4], &[1.0, 2.0, 3.0, 4.0, 2.0, 2.0, 2.0, 6.0]);
    let y = normalization(x, f32s(&[4], &[1.0, 1.0, 2.0, 2.0]), f32s(&[4], &[0.0, 0.0, 0.0, 1.0]), &[1], 1, 0.0);
    // Row 1: mean 2.5, variance 1.25. Row 2: mean 3, variance 3.
    let a = 1.0 / 1.25f64.sqrt();
    let b = 1.0 / 3f64.sqrt();
    let expected = [-1.5 * a, -0.5 * a, 2.0 * 0.5 * a, 2.0 * 1.5 * a + 1.0, -b, -b, -2.0 * b, 2.0 * 3.0 * b + 1.0];
    assert_close(&y, DataType::F32, &[2, 4], &expected, 1e-6);
}

#[test]
fn group_normalization_uses_per_group_statistics() {
    // N=1, C=4, L=1, two groups: channels {0,1} and {2,3}.
    let x = f64s(&[1, 4, 1], &[1.0, 3.0, 10.0, 20.0]);
    let y = normalization(x, f64s(&[1, 4, 1], &[1.0; 4]), f64s(&[1, 4, 1], &[0.0; 4]), &[2], 2, 0.0);
    assert_close(&y, DataType::F64, &[1, 4, 1], &[-1.0, 1.0, -1.0, 1.0], 1e-12);
    // Instance normalization (one group, spatial axes) keeps channels apart; epsilon keeps
    // the constant channel finite.
    let x = f16s(&[1, 2, 2], &[1.0, 3.0, 5.0, 5.0]);
    let y = normalization(x, f16s(&[2, 1], &[2.0, 1.0]), f16s(&[2, 1], &[0.5, 0.0]), &[2], 1, 1e-5);
    assert_close(&y, DataType::F16, &[1, 2, 2], &[-1.5, 2.5, 0.0, 0.0], 0.0);
}

#[test]
fn lrn_normalizes_across_a_channel_window() {
    // C=3, size 2: window [c - 0, c + 1].
    let x = f32s(&[1, 3, 1], &[1.0, 2.0, 3.0]);
    let y = run1(LayerKind::Lrn { window: 2, alpha: 2.0, beta: 0.5, k: 1.0 }, vec![In::Run(x)]);
    let f = |v: f64, sq: f64| v / (1.0 + 2.0 / 2.0 * sq).powf(0.5);
    assert_close(&y, DataType::F32, &[1, 3, 1], &[f(1.0, 5.0), f(2.0, 13.0), f(3.0, 9.0)], 1e-6);
    // size 3: window [c - 1, c + 1].
    let x = f64s(&[1, 3], &[1.0, 2.0, 3.0]);
    let y = run1(LayerKind::Lrn { window: 3, alpha: 3.0, beta: 1.0, k: 2.0 }, vec![In::Run(x)]);
    let g = |v: f64, sq: f64| v / (2.0 + sq);
    assert_close(&y, DataType::F64, &[1, 3], &[g(1.0, 5.0), g(2.0, 14.0), g(3.0, 13.0)], 1e-15);
}

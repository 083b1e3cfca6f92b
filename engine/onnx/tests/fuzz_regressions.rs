//! Inputs the `onnx_attributes` fuzz target found (fuzz/README.md), each reduced to the
//! node that broke: every one must import, build and run, or fail with an error.

mod common;

use common::*;
use kiln::HostTensor;

/// Grouped convolution: kernel channels × groups overflowed in shape inference.
#[test]
fn a_group_count_whose_product_overflows_is_a_shape_error() {
    let model = Graph::new()
        .input("x", F32, "1,4,2,2")
        .init(tensor_f32("w", &[2, 2, 1, 1], &[1.0; 4]))
        .node(node("Conv", &["x", "w"], &["y"]).int("group", 1 << 62))
        .output("y")
        .model(17);
    let e = kiln_onnx::import_bytes(&prost::Message::encode_to_vec(&model), None).unwrap_err().to_string();
    assert!(e.contains("input has 4 channels but the kernel expects 2 × 4611686018427387904 groups"), "{e}");
}

/// A long dft_length over a short signal: the zero padding used to cost length² steps.
#[test]
fn a_long_dft_over_a_short_signal_sums_only_its_samples() {
    let model = Graph::new()
        .input("x", F32, "1,3,1")
        .init(tensor_i64("len", &[], &[1 << 16]))
        .node(node("DFT", &["x", "len"], &["y"]))
        .output("y")
        .model(17);
    let y = run(&model, vec![("x", f32s(&[1, 3, 1], &[1.0, 2.0, 3.0]))], "y");
    assert_eq!(y.shape(), &[1, 1 << 16, 2]);
    let v = y.to_f64_vec();
    // X[0] is the sum of the samples; X[k] = Σ x_j e^{-2πijk/n}.
    assert_eq!((v[0], v[1]), (6.0, 0.0));
    let angle = -2.0 * std::f64::consts::PI / (1 << 16) as f64;
    let (re, im) = (1.0 + 2.0 * angle.cos() + 3.0 * (2.0 * angle).cos(), 2.0 * angle.sin() + 3.0 * (2.0 * angle).sin());
    assert!((v[2] - re).abs() < 1e-5 && (v[3] - im).abs() < 1e-7, "X[1] (f32) = ({}, {}), want ({re}, {im})", v[2], v[3]);
}

/// Pad of an empty tensor by 2^40 along another axis: the output is empty, but the
/// per-axis gather maps were built at full length (16 TiB).
#[test]
fn padding_an_empty_tensor_by_a_huge_amount_makes_an_empty_tensor() {
    let model = Graph::new()
        .input("x", F32, "0,4")
        .init(tensor_i64("pads", &[4], &[0, 1 << 40, 0, 0]))
        .node(node("Pad", &["x", "pads"], &["y"]))
        .output("y")
        .model(17);
    let y = run(&model, vec![("x", HostTensor::zeros(kiln::DataType::F32, vec![0, 4]))], "y");
    assert_eq!(y.shape(), &[0, (1 << 40) + 4]);
    let crop = Graph::new()
        .input("x", F32, "2,4")
        .init(tensor_i64("pads", &[4], &[i64::MIN, 0, 0, 0]))
        .node(node("Pad", &["x", "pads"], &["y"]))
        .output("y")
        .model(17);
    let e = kiln_onnx::import_bytes(&prost::Message::encode_to_vec(&crop), None).map(|_| ()).unwrap_err().to_string();
    assert!(!e.is_empty());
}

/// Range whose span is i64::MIN and delta -1: its length divided with overflow.
#[test]
fn a_range_whose_length_overflows_is_an_error() {
    let model = Graph::new()
        .input("x", F32, "1")
        .init(tensor_i64("start", &[], &[0]))
        .init(tensor_i64("limit", &[], &[i64::MIN]))
        .init(tensor_i64("delta", &[], &[-1]))
        .node(node("Range", &["start", "limit", "delta"], &["y"]))
        .output("y")
        .model(17);
    let e = kiln_onnx::import_bytes(&prost::Message::encode_to_vec(&model), None).map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("more elements than an int64 can count"), "{e}");
}

/// Pooling windows of 2^31 cells, almost all padding: kernels visited every window cell
/// (hours on cpu); they now visit only the cells inside the input.
#[test]
fn a_window_of_two_billion_cells_pools_only_the_cells_inside() {
    let pool = |op: &str| {
        Graph::new()
            .input("x", F32, "1,1,4,4")
            .node(
                node(op, &["x"], &["y"])
                    .ints("kernel_shape", &[7, i32::MAX as i64])
                    .ints("pads", &[7, i32::MAX as i64, 7, 7]),
            )
            .output("y")
            .model(17)
    };
    let x = f32s(&[1, 1, 4, 4], &(1..=16).map(|v| v as f32).collect::<Vec<_>>());
    let at = |y: &HostTensor, h: usize, w: usize| y.to_f64_vec()[h * 12 + w];
    let avg = run(&pool("AveragePool"), vec![("x", x.clone())], "y");
    assert_eq!(avg.shape(), &[1, 1, 12, 12]);
    // Output (h, w) covers rows h-7..=h-1 and columns ..=w-1 of the input.
    assert_eq!(at(&avg, 4, 4), 8.5, "every cell");
    assert_eq!(at(&avg, 1, 1), 1.0, "the corner cell");
    assert_eq!(at(&avg, 2, 3), 4.0, "rows 0-1, columns 0-2");
    assert!(at(&avg, 11, 11).is_nan(), "no cell inside: 0/0");
    let max = run(&pool("MaxPool"), vec![("x", x)], "y");
    assert_eq!((at(&max, 4, 4), at(&max, 2, 3)), (16.0, 7.0));
}

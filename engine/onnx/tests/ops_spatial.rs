//! Conv, ConvTranspose, pooling and Resize built in Rust, checked against hand-computed
//! values and kiln's layer parameters.

mod common;

use common::*;
use kiln::{Dim, LayerKind, PoolingKind};
use kiln_onnx::ImportError;

fn layer_kinds(net: &kiln::Network) -> Vec<&LayerKind> {
    net.layers().iter().map(|l| &l.kind).collect()
}

#[test]
fn conv_with_pads_and_bias() {
    // 3×3 ones kernel over a 3×3 input padded by 1: each output sums its neighbourhood.
    let model = Graph::new()
        .input("x", F32, "1,1,3,3")
        .init(tensor_f32("w", &[1, 1, 3, 3], &[1.0; 9]))
        .init(tensor_f32("b", &[1], &[100.0]))
        .node(node("Conv", &["x", "w", "b"], &["y"]).ints("pads", &[1, 1, 1, 1]))
        .output("y")
        .model(11);
    let y = run(&model, vec![("x", iota(&[1, 1, 3, 3]))], "y");
    assert_close(&y, &[1, 1, 3, 3], &[108., 115., 112., 121., 136., 127., 120., 133., 124.], 0.0);
}

#[test]
fn conv_auto_pad_same_places_the_odd_cell() {
    let model = |mode: &str| {
        Graph::new()
            .input("x", F32, "1,1,4,4")
            .init(tensor_f32("w", &[1, 1, 2, 2], &[1.0; 4]))
            .node(node("Conv", &["x", "w"], &["y"]).string("auto_pad", mode))
            .output("y")
            .model(11)
    };
    for (mode, pre, post) in [("SAME_UPPER", 0, 1), ("SAME_LOWER", 1, 0)] {
        let net = import(&model(mode));
        let LayerKind::Convolution(p) = &net.layers().last().expect("conv").kind else { panic!("not a conv") };
        assert_eq!((p.pre_padding.clone(), p.post_padding.clone()), (vec![pre; 2], vec![post; 2]), "{mode}");
        assert_eq!(net.tensor(net.outputs()[0]).shape, kiln::Shape::fixed(&[1, 1, 4, 4]));
    }
    let y = run(&model("SAME_LOWER"), vec![("x", iota(&[1, 1, 4, 4]))], "y");
    // The first output sees only x[0][0] (the rest is padding).
    assert_eq!(y.to_f64_vec()[0], 0.0);
    assert_eq!(y.to_f64_vec()[5], 0. + 1. + 4. + 5.);
}

#[test]
fn conv_same_on_dynamic_spatial_dims_is_unsupported() {
    let model = Graph::new()
        .input("x", F32, "1,1,H,W")
        .init(tensor_f32("w", &[1, 1, 2, 2], &[1.0; 4]))
        .node(node("Conv", &["x", "w"], &["y"]).string("auto_pad", "SAME_UPPER").named("c"))
        .output("y")
        .model(11);
    let err = import_err(&model);
    assert!(matches!(&err, ImportError::UnsupportedFeature { node, .. } if node == "c"), "{err}");
}

#[test]
fn conv_keeps_a_dynamic_batch() {
    let model = Graph::new()
        .input("x", F32, "N,2,5,5")
        .init(tensor_f32("w", &[4, 1, 3, 3], &[0.5; 36]))
        .node(node("Conv", &["x", "w"], &["y"]).int("group", 2).ints("strides", &[2, 2]))
        .output("y")
        .model(1);
    let net = import(&model);
    let y = net.tensor(net.outputs()[0]);
    assert_eq!(y.shape.dims(), &[Dim::Named("N".into()), Dim::Fixed(4), Dim::Fixed(2), Dim::Fixed(2)]);
}

#[test]
fn conv_transpose_stride_two() {
    // 1-D: x = [1, 2], kernel [1, 1, 1], stride 2 → full output [1, 1, 3, 2, 2].
    let model = Graph::new()
        .input("x", F32, "1,1,2")
        .init(tensor_f32("w", &[1, 1, 3], &[1., 1., 1.]))
        .node(node("ConvTranspose", &["x", "w"], &["y"]).ints("strides", &[2]))
        .output("y")
        .model(11);
    let y = run(&model, vec![("x", f32s(&[1, 1, 2], &[1., 2.]))], "y");
    assert_close(&y, &[1, 1, 5], &[1., 1., 3., 2., 2.], 0.0);
}

#[test]
fn conv_transpose_output_shape_sets_padding() {
    // Full length 5; output_shape 4 crops one cell: at the start (NOTSET), at the end (SAME_UPPER).
    for (auto_pad, expected) in [("NOTSET", [1., 3., 2., 2.]), ("SAME_UPPER", [1., 1., 3., 2.])] {
        let model = Graph::new()
            .input("x", F32, "1,1,2")
            .init(tensor_f32("w", &[1, 1, 3], &[1., 1., 1.]))
            .node(
                node("ConvTranspose", &["x", "w"], &["y"])
                    .ints("strides", &[2])
                    .ints("output_shape", &[4])
                    .string("auto_pad", auto_pad),
            )
            .output("y")
            .model(11);
        let y = run(&model, vec![("x", f32s(&[1, 1, 2], &[1., 2.]))], "y");
        assert_close(&y, &[1, 1, 4], &expected, 0.0);
    }
}

#[test]
fn conv_transpose_output_padding_extends_the_end() {
    let model = Graph::new()
        .input("x", F32, "1,1,2")
        .init(tensor_f32("w", &[1, 1, 3], &[1., 1., 1.]))
        .node(node("ConvTranspose", &["x", "w"], &["y"]).ints("strides", &[2]).ints("output_padding", &[1]))
        .output("y")
        .model(22);
    let y = run(&model, vec![("x", f32s(&[1, 1, 2], &[1., 2.]))], "y");
    assert_close(&y, &[1, 1, 6], &[1., 1., 3., 2., 2., 0.], 0.0);
}

fn pool_model(
    op: &str,
    configure: impl Fn(kiln_onnx::proto::NodeProto) -> kiln_onnx::proto::NodeProto,
    opset: i64,
) -> kiln_onnx::proto::ModelProto {
    Graph::new()
        .input("x", F32, "1,1,4,4")
        .node(configure(node(op, &["x"], &["y"]).ints("kernel_shape", &[2, 2])))
        .output("y")
        .model(opset)
}

#[test]
fn max_pool_strides_and_ceil_mode() {
    let x = iota(&[1, 1, 4, 4]);
    let y = run(&pool_model("MaxPool", |n| n.ints("strides", &[2, 2]), 8), vec![("x", x.clone())], "y");
    assert_close(&y, &[1, 1, 2, 2], &[5., 7., 13., 15.], 0.0);
    let ceil = pool_model("MaxPool", |n| n.ints("strides", &[3, 3]).int("ceil_mode", 1), 10);
    let y = run(&ceil, vec![("x", x)], "y");
    assert_close(&y, &[1, 1, 2, 2], &[5., 7., 13., 15.], 0.0);
}

#[test]
fn max_pool_indices_output_is_refused() {
    let model = Graph::new()
        .input("x", F32, "1,1,4,4")
        .node(node("MaxPool", &["x"], &["y", "idx"]).ints("kernel_shape", &[2, 2]).named("mp"))
        .output("y")
        .output("idx")
        .model(12);
    let err = import_err(&model);
    assert!(
        matches!(&err, ImportError::UnsupportedFeature { node, feature, .. } if node == "mp" && feature.contains("Indices")),
        "{err}"
    );
    // An empty name for the optional output is fine.
    let model = Graph::new()
        .input("x", F32, "1,1,4,4")
        .node(node("MaxPool", &["x"], &["y", ""]).ints("kernel_shape", &[2, 2]))
        .output("y")
        .model(12);
    import(&model);
}

#[test]
fn average_pool_count_include_pad() {
    let x = f32s(&[1, 1, 2, 2], &[4., 4., 4., 4.]);
    let model = |include: i64| {
        Graph::new()
            .input("x", F32, "1,1,2,2")
            .node(
                node("AveragePool", &["x"], &["y"])
                    .ints("kernel_shape", &[2, 2])
                    .ints("pads", &[1, 1, 0, 0])
                    .int("count_include_pad", include),
            )
            .output("y")
            .model(11)
    };
    // The top-left window holds one real cell and three padding cells.
    let y = run(&model(0), vec![("x", x.clone())], "y");
    assert_close(&y, &[1, 1, 2, 2], &[4., 4., 4., 4.], 0.0);
    let y = run(&model(1), vec![("x", x)], "y");
    assert_close(&y, &[1, 1, 2, 2], &[1., 2., 2., 4.], 0.0);
}

#[test]
fn global_pools_reduce_spatial_axes() {
    let model = Graph::new()
        .input("x", F32, "N,2,2,2")
        .node(node("GlobalAveragePool", &["x"], &["avg"]))
        .node(node("GlobalMaxPool", &["x"], &["max"]))
        .output("avg")
        .output("max")
        .model(1);
    let net = import(&model);
    assert!(layer_kinds(&net)
        .iter()
        .all(|k| matches!(k, LayerKind::Reduce { axes, keep_dims: true, .. } if axes == &[2, 3])));
    let out = run_network(&net, vec![("x", iota(&[1, 2, 2, 2]))]);
    assert_close(&out["avg"], &[1, 2, 1, 1], &[1.5, 5.5], 0.0);
    assert_close(&out["max"], &[1, 2, 1, 1], &[3., 7.], 0.0);
}

#[test]
fn pooling_kind_follows_the_op() {
    let net = import(&pool_model("AveragePool", |n| n, 19));
    assert!(
        matches!(&net.layers()[0].kind, LayerKind::Pooling(p) if p.kind == PoolingKind::Average && p.average_count_excludes_padding)
    );
}

fn resize_model(
    inputs: &[&str],
    configure: impl Fn(kiln_onnx::proto::NodeProto) -> kiln_onnx::proto::NodeProto,
) -> Graph {
    Graph::new().input("x", F32, "1,1,2,2").node(configure(node("Resize", inputs, &["y"]))).output("y")
}

#[test]
fn resize_10_nearest_uses_floor_of_asymmetric_coordinates() {
    let model = resize_model(&["x", "s"], |n| n).init(tensor_f32("s", &[4], &[1., 1., 2., 3.])).model(10);
    let y = run(&model, vec![("x", f32s(&[1, 1, 2, 2], &[1., 2., 3., 4.]))], "y");
    assert_close(
        &y,
        &[1, 1, 4, 6],
        &[1., 1., 1., 2., 2., 2., 1., 1., 1., 2., 2., 2., 3., 3., 3., 4., 4., 4., 3., 3., 3., 4., 4., 4.],
        0.0,
    );
}

#[test]
fn resize_11_sizes_with_empty_scales_and_align_corners() {
    let model = resize_model(&["x", "roi", "scales", "sizes"], |n| {
        n.string("mode", "linear").string("coordinate_transformation_mode", "align_corners")
    })
    .init(tensor_f32("roi", &[0], &[]))
    .init(tensor_f32("scales", &[0], &[]))
    .init(tensor_i64("sizes", &[4], &[1, 1, 3, 3]))
    .model(11);
    let y = run(&model, vec![("x", f32s(&[1, 1, 2, 2], &[0., 2., 4., 6.]))], "y");
    assert_close(&y, &[1, 1, 3, 3], &[0., 1., 2., 2., 3., 4., 4., 5., 6.], 1e-6);
}

#[test]
fn resize_unsupported_options_are_refused() {
    let base = |opset: i64, configure: fn(kiln_onnx::proto::NodeProto) -> kiln_onnx::proto::NodeProto| {
        resize_model(&["x", "", "s"], configure).init(tensor_f32("s", &[4], &[1., 1., 2., 2.])).model(opset)
    };
    for model in [base(18, |n| n.int("antialias", 1)), base(18, |n| n.string("keep_aspect_ratio_policy", "not_larger"))]
    {
        assert!(matches!(import_err(&model), ImportError::UnsupportedFeature { .. }));
    }
    let mut tf =
        resize_model(&["x", "roi", "s"], |n| n.string("coordinate_transformation_mode", "tf_half_pixel_for_nn"))
            .init(tensor_f32("roi", &[0], &[]))
            .init(tensor_f32("s", &[4], &[1., 1., 2., 2.]))
            .model(11);
    assert!(matches!(import_err(&tf), ImportError::UnsupportedFeature { .. }));
    // The mode disappeared in opset 13.
    tf.opset_import[0].version = Some(13);
    assert!(matches!(import_err(&tf), ImportError::InvalidModel { .. }));
    let neither = resize_model(&["x"], |n| n).model(13);
    assert!(matches!(import_err(&neither), ImportError::InvalidModel { .. }));
}

#[test]
fn resize_18_axes_are_normalized() {
    let model = resize_model(&["x", "", "s"], |n| n.ints("axes", &[-1])).init(tensor_f32("s", &[1], &[2.])).model(18);
    let net = import(&model);
    let LayerKind::Resize(p) = &net.layers().last().expect("resize").kind else { panic!("not a resize") };
    assert_eq!(p.axes, Some(vec![3]));
    assert_eq!(net.tensor(net.outputs()[0]).shape, kiln::Shape::fixed(&[1, 1, 2, 4]));
}

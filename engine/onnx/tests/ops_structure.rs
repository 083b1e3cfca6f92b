//! Shape manipulation, gathers, casts, constants, fills and padding built in Rust, across
//! the opset versions whose conventions differ.

mod common;

use common::*;
use kiln::{DataType, Dim, LayerKind, TensorData, F8E4M3FN};
use kiln_onnx::proto::{AttributeProto, ModelProto, NodeProto};
use kiln_onnx::ImportError;

fn one_op(op: NodeProto, dims: &str, opset: i64) -> ModelProto {
    Graph::new().input("x", F32, dims).node(op).output("y").model(opset)
}

fn output_dims(model: &ModelProto) -> Vec<Dim> {
    let net = import(model);
    net.tensor(net.outputs()[0]).shape.dims().to_vec()
}

fn named(n: &str) -> Dim {
    Dim::Named(n.into())
}

#[test]
fn reshape_attribute_then_input_and_allowzero() {
    let attr = one_op(node("Reshape", &["x"], &["y"]).ints("shape", &[0, -1]), "2,3,2", 1);
    assert_eq!(output_dims(&attr), [Dim::Fixed(2), Dim::Fixed(6)]);
    let input = Graph::new()
        .input("x", F32, "N,3,2")
        .init(tensor_i64("s", &[2], &[0, -1]))
        .node(node("Reshape", &["x", "s"], &["y"]))
        .output("y")
        .model(13);
    assert_eq!(output_dims(&input), [named("N"), Dim::Fixed(6)]);
    let y = run(&input, vec![("x", iota(&[2, 3, 2]))], "y");
    assert_close(&y, &[2, 6], &(0..12).map(f64::from).collect::<Vec<_>>(), 0.0);
    // allowzero=1 makes 0 a literal empty dim.
    let zero = Graph::new()
        .input("x", F32, "0,3")
        .init(tensor_i64("s", &[2], &[3, 0]))
        .node(node("Reshape", &["x", "s"], &["y"]).int("allowzero", 1))
        .output("y")
        .model(14);
    assert_eq!(output_dims(&zero), [Dim::Fixed(3), Dim::Fixed(0)]);
}

#[test]
fn reshape_with_computed_dims() {
    let model = Graph::new()
        .input("x", F32, "N,4")
        .node(node("Shape", &["x"], &["s"]))
        .node(node("Reshape", &["x", "s"], &["y"]))
        .output("y")
        .model(13);
    let y = run(&model, vec![("x", iota(&[2, 4]))], "y");
    assert_eq!(y.shape(), &[2, 4]);
}

#[test]
fn transpose_defaults_to_reversing_axes() {
    let model = one_op(node("Transpose", &["x"], &["y"]), "2,3,N", 13);
    assert_eq!(output_dims(&model), [named("N"), Dim::Fixed(3), Dim::Fixed(2)]);
    let y = run(&one_op(node("Transpose", &["x"], &["y"]), "2,3", 13), vec![("x", iota(&[2, 3]))], "y");
    assert_close(&y, &[3, 2], &[0., 3., 1., 4., 2., 5.], 0.0);
}

#[test]
fn flatten_with_fixed_and_dynamic_dims() {
    assert_eq!(output_dims(&one_op(node("Flatten", &["x"], &["y"]), "N,3,4", 13)), [named("N"), Dim::Fixed(12)]);
    assert_eq!(
        output_dims(&one_op(node("Flatten", &["x"], &["y"]).int("axis", 0), "2,3", 13)),
        [Dim::Fixed(1), Dim::Fixed(6)]
    );
    let dynamic = one_op(node("Flatten", &["x"], &["y"]).int("axis", 2), "A,B,C", 13);
    let y = run(&dynamic, vec![("x", iota(&[2, 3, 2]))], "y");
    assert_eq!(y.shape(), &[6, 2]);
}

#[test]
fn squeeze_axes_attribute_then_input_keeps_symbolic_dims() {
    let attr = one_op(node("Squeeze", &["x"], &["y"]).ints("axes", &[1]), "N,1,T", 11);
    assert_eq!(output_dims(&attr), [named("N"), named("T")]);
    let input = Graph::new()
        .input("x", F32, "N,1,T,1")
        .init(tensor_i64("axes", &[2], &[-1, 1]))
        .node(node("Squeeze", &["x", "axes"], &["y"]))
        .output("y")
        .model(13);
    assert_eq!(output_dims(&input), [named("N"), named("T")]);
    let y = run(&input, vec![("x", iota(&[2, 1, 3, 1]))], "y");
    assert_close(&y, &[2, 3], &[0., 1., 2., 3., 4., 5.], 0.0);
    let wrong = one_op(node("Squeeze", &["x"], &["y"]).ints("axes", &[0]), "2,3", 11);
    assert!(matches!(import_err(&wrong), ImportError::InvalidModel { .. }));
    let all = one_op(node("Squeeze", &["x"], &["y"]), "1,3,1", 13);
    assert_eq!(output_dims(&all), [Dim::Fixed(3)]);
    let empty_axes = Graph::new()
        .input("x", F32, "1,3,1")
        .init(tensor_i64("axes", &[0], &[]))
        .node(node("Squeeze", &["x", "axes"], &["y"]))
        .output("y")
        .model(13);
    assert_eq!(output_dims(&empty_axes), [Dim::Fixed(3)]);
}

#[test]
fn unsqueeze_axes_attribute_then_input() {
    let attr = one_op(node("Unsqueeze", &["x"], &["y"]).ints("axes", &[0, -1]), "N,3", 11);
    assert_eq!(output_dims(&attr), [Dim::Fixed(1), named("N"), Dim::Fixed(3), Dim::Fixed(1)]);
    let input = Graph::new()
        .input("x", F32, "2,3")
        .init(tensor_i64("axes", &[1], &[1]))
        .node(node("Unsqueeze", &["x", "axes"], &["y"]))
        .output("y")
        .model(13);
    let y = run(&input, vec![("x", iota(&[2, 3]))], "y");
    assert_close(&y, &[2, 1, 3], &[0., 1., 2., 3., 4., 5.], 0.0);
    // At opset 13 the attribute form is gone: axes must come as an input.
    let stale = one_op(node("Unsqueeze", &["x"], &["y"]).ints("axes", &[0]), "2", 13);
    assert!(matches!(import_err(&stale), ImportError::InvalidModel { .. }));
}

#[test]
fn concat_normalizes_negative_axes() {
    let model = Graph::new()
        .input("a", F32, "2,1")
        .input("b", F32, "2,2")
        .node(node("Concat", &["a", "b"], &["y"]).int("axis", -1))
        .output("y")
        .model(13);
    let y = run(&model, vec![("a", f32s(&[2, 1], &[9., 8.])), ("b", iota(&[2, 2]))], "y");
    assert_close(&y, &[2, 3], &[9., 0., 1., 8., 2., 3.], 0.0);
}

fn split_outputs(model: &ModelProto, x: kiln::HostTensor) -> Vec<kiln::HostTensor> {
    let out = run_network(&import(model), vec![("x", x)]);
    ["a", "b", "c"].iter().filter_map(|n| out.get(*n).cloned()).collect()
}

#[test]
fn split_attribute_then_input_then_num_outputs() {
    let x = iota(&[5]);
    let attr = Graph::new()
        .input("x", F32, "5")
        .node(node("Split", &["x"], &["a", "b"]).ints("split", &[2, 3]))
        .output("a")
        .output("b")
        .model(11);
    let parts = split_outputs(&attr, x.clone());
    assert_close(&parts[0], &[2], &[0., 1.], 0.0);
    assert_close(&parts[1], &[3], &[2., 3., 4.], 0.0);

    let input = Graph::new()
        .input("x", F32, "5")
        .init(tensor_i64("s", &[2], &[4, 1]))
        .node(node("Split", &["x", "s"], &["a", "b"]))
        .output("a")
        .output("b")
        .model(13);
    let parts = split_outputs(&input, x.clone());
    assert_close(&parts[0], &[4], &[0., 1., 2., 3.], 0.0);
    assert_close(&parts[1], &[1], &[4.], 0.0);

    let uneven = Graph::new()
        .input("x", F32, "5")
        .node(node("Split", &["x"], &["a", "b", "c"]).int("num_outputs", 3))
        .output("a")
        .output("b")
        .output("c")
        .model(18);
    let parts = split_outputs(&uneven, x.clone());
    let lens: Vec<usize> = parts.iter().map(|p| p.shape()[0]).collect();
    assert_eq!(lens, [2, 2, 1]);

    let not_even =
        Graph::new().input("x", F32, "5").node(node("Split", &["x"], &["a", "b"])).output("a").output("b").model(13);
    assert!(matches!(import_err(&not_even), ImportError::InvalidModel { .. }));
    let missing =
        Graph::new().input("x", F32, "4").node(node("Split", &["x"], &["a", "b"])).output("a").output("b").model(18);
    assert!(matches!(import_err(&missing), ImportError::InvalidModel { .. }), "opset 18 needs split or num_outputs");
}

#[test]
fn split_of_a_dynamic_axis_computes_bounds_at_run_time() {
    let model =
        Graph::new().input("x", F32, "N").node(node("Split", &["x"], &["a", "b"])).output("a").output("b").model(13);
    let parts = split_outputs(&model, iota(&[6]));
    assert_close(&parts[0], &[3], &[0., 1., 2.], 0.0);
    assert_close(&parts[1], &[3], &[3., 4., 5.], 0.0);
}

#[test]
fn slice_attributes_then_inputs() {
    let attr = one_op(
        node("Slice", &["x"], &["y"]).ints("starts", &[1]).ints("ends", &[i64::MAX]).ints("axes", &[1]),
        "2,4",
        9,
    );
    let y = run(&attr, vec![("x", iota(&[2, 4]))], "y");
    assert_close(&y, &[2, 3], &[1., 2., 3., 5., 6., 7.], 0.0);
    let inputs = Graph::new()
        .input("x", F32, "2,4")
        .init(tensor_i64("starts", &[1], &[-1]))
        .init(tensor_i64("ends", &[1], &[i64::MIN]))
        .init(tensor_i64("axes", &[1], &[1]))
        .init(tensor_i64("steps", &[1], &[-2]))
        .node(node("Slice", &["x", "starts", "ends", "axes", "steps"], &["y"]))
        .output("y")
        .model(13);
    let y = run(&inputs, vec![("x", iota(&[2, 4]))], "y");
    assert_close(&y, &[2, 2], &[3., 1., 7., 5.], 0.0);
}

#[test]
fn shape_start_and_end_from_opset_15() {
    let model = |opset| one_op(node("Shape", &["x"], &["y"]).int("start", 1).int("end", -1), "2,3,4,5", opset);
    let net = import(&model(15));
    let y = net.tensor(net.outputs()[0]);
    assert_eq!(y.value.as_deref().and_then(kiln::HostTensor::to_i64_vec), Some(vec![3, 4]));
    // Before 15 the attributes do not exist: the whole shape.
    let y = run(&model(13), vec![("x", iota(&[2, 3, 4, 5]))], "y");
    assert_i64(&y, &[4], &[2, 3, 4, 5]);
    let dynamic = one_op(node("Shape", &["x"], &["y"]).int("start", -2), "N,T,4", 15);
    let y = run(&dynamic, vec![("x", iota(&[1, 2, 4]))], "y");
    assert_i64(&y, &[2], &[2, 4]);
}

#[test]
fn expand_and_tile() {
    let expand = Graph::new()
        .input("x", F32, "2,1")
        .init(tensor_i64("s", &[2], &[2, 3]))
        .node(node("Expand", &["x", "s"], &["y"]))
        .output("y")
        .model(13);
    let y = run(&expand, vec![("x", f32s(&[2, 1], &[1., 2.]))], "y");
    assert_close(&y, &[2, 3], &[1., 1., 1., 2., 2., 2.], 0.0);
    let tile = Graph::new()
        .input("x", F32, "2,2")
        .init(tensor_i64("r", &[2], &[2, 1]))
        .node(node("Tile", &["x", "r"], &["y"]))
        .output("y")
        .model(13);
    let y = run(&tile, vec![("x", iota(&[2, 2]))], "y");
    assert_close(&y, &[4, 2], &[0., 1., 2., 3., 0., 1., 2., 3.], 0.0);
    let dynamic = Graph::new()
        .input("x", F32, "N,2")
        .input("r", I64, "2")
        .node(node("Tile", &["x", "r"], &["y"]))
        .output("y")
        .model(13);
    let y = run(&dynamic, vec![("x", iota(&[1, 2])), ("r", i64s(&[2], &[2, 2]))], "y");
    assert_close(&y, &[2, 4], &[0., 1., 0., 1., 0., 1., 0., 1.], 0.0);
}

#[test]
fn gathers() {
    let gather = Graph::new()
        .input("x", F32, "3,2")
        .init(tensor_i64("i", &[2], &[-1, 0]))
        .node(node("Gather", &["x", "i"], &["y"]))
        .output("y")
        .model(13);
    assert_close(&run(&gather, vec![("x", iota(&[3, 2]))], "y"), &[2, 2], &[4., 5., 0., 1.], 0.0);
    let elements = Graph::new()
        .input("x", F32, "2,2")
        .init(tensor_i64("i", &[2, 2], &[1, 0, 0, 0]))
        .node(node("GatherElements", &["x", "i"], &["y"]).int("axis", 1))
        .output("y")
        .model(13);
    assert_close(&run(&elements, vec![("x", iota(&[2, 2]))], "y"), &[2, 2], &[1., 0., 2., 2.], 0.0);
    let nd = Graph::new()
        .input("x", F32, "2,2")
        .init(tensor_i64("i", &[2, 2], &[1, 1, 0, 1]))
        .node(node("GatherND", &["x", "i"], &["y"]))
        .output("y")
        .model(11);
    assert_close(&run(&nd, vec![("x", iota(&[2, 2]))], "y"), &[2], &[3., 1.], 0.0);
}

#[test]
fn cast_attribute_forms() {
    let x = f32s(&[3], &[-1.7, 0.0, 2.9]);
    let string_to = one_op(node("Cast", &["x"], &["y"]).string("to", "INT32"), "3", 1);
    assert_eq!(run(&string_to, vec![("x", x.clone())], "y").data(), &TensorData::I32(vec![-1, 0, 2]));
    let code_to = one_op(node("Cast", &["x"], &["y"]).int("to", BOOL as i64).int("saturate", 0), "3", 19);
    assert_eq!(run(&code_to, vec![("x", x.clone())], "y").data(), &TensorData::Bool(vec![true, false, true]));
    // FLOAT8E4M3FN (17) saturates by default; saturate=0 imports as CastNarrow.
    let fp8 = one_op(node("Cast", &["x"], &["y"]).int("to", 17), "3", 19);
    let codes = [F8E4M3FN::from_f32(-1.7, true), F8E4M3FN(0), F8E4M3FN::from_f32(2.9, true)];
    assert_eq!(run(&fp8, vec![("x", x.clone())], "y").data(), &TensorData::F8E4M3FN(codes.to_vec()));
    let no_saturate = one_op(node("Cast", &["x"], &["y"]).int("to", 17).int("saturate", 0), "3", 19);
    let net = import(&no_saturate);
    assert!(net.layers().iter().any(|l| matches!(l.kind, LayerKind::CastNarrow { saturate: false, .. })));
    let string = one_op(node("Cast", &["x"], &["y"]).int("to", 8), "3", 19);
    let err = import_err(&string).to_string();
    assert!(err.contains("Cast") && err.to_lowercase().contains("string"), "{err}");
}

#[test]
fn where_selects_with_broadcast() {
    let model = Graph::new()
        .input("c", BOOL, "2")
        .input("a", F32, "2,2")
        .input("b", F32, "")
        .node(node("Where", &["c", "a", "b"], &["y"]))
        .output("y")
        .model(16);
    let c = kiln::HostTensor::new(vec![2], TensorData::Bool(vec![true, false])).expect("bool");
    let y = run(&model, vec![("c", c), ("a", iota(&[2, 2])), ("b", f32s(&[], &[-1.]))], "y");
    assert_close(&y, &[2, 2], &[0., -1., 2., -1.], 0.0);
}

fn constant_model(attr: AttributeProto, opset: i64) -> ModelProto {
    Graph::new().node(node("Constant", &[], &["y"]).attr(attr)).output("y").model(opset)
}

#[test]
fn constant_value_kinds() {
    let ints = node("Constant", &[], &["y"]).ints("value_ints", &[3, 4]).attribute.remove(0);
    let net = import(&constant_model(ints, 12));
    let y = net.tensor(net.outputs()[0]);
    assert_eq!((y.dtype, y.shape.dims().to_vec()), (DataType::I64, vec![Dim::Fixed(2)]));
    let float = node("Constant", &[], &["y"]).float("value_float", 1.5).attribute.remove(0);
    let net = import(&constant_model(float, 13));
    assert_eq!(net.tensor(net.outputs()[0]).shape.rank(), 0);
    let tensor = node("Constant", &[], &["y"]).tensor("value", tensor_f32("", &[2], &[1., 2.])).attribute.remove(0);
    let out = run_network(&import(&constant_model(tensor, 1)), vec![]);
    assert_close(&out["y"], &[2], &[1., 2.], 0.0);
    let sparse = AttributeProto {
        name: Some("sparse_value".into()),
        r#type: Some(kiln_onnx::proto::attribute_proto::AttributeType::SparseTensor as i32),
        sparse_tensor: Some(Default::default()),
        ..Default::default()
    };
    assert!(matches!(import_err(&constant_model(sparse, 11)), ImportError::UnsupportedFeature { .. }));
    let none = Graph::new().node(node("Constant", &[], &["y"])).output("y").model(13);
    assert!(matches!(import_err(&none), ImportError::InvalidModel { .. }));
}

#[test]
fn constant_of_shape_fills_with_the_value_attribute() {
    let model = Graph::new()
        .input("s", I64, "2")
        .node(node("ConstantOfShape", &["s"], &["y"]).tensor("value", tensor_i64("", &[1], &[7])))
        .output("y")
        .model(9);
    let y = run(&model, vec![("s", i64s(&[2], &[2, 1]))], "y");
    assert_i64(&y, &[2, 1], &[7, 7]);
}

#[test]
fn range_folds_constants_and_computes_at_run_time() {
    let constant = Graph::new()
        .init(tensor_i64("a", &[], &[5]))
        .init(tensor_i64("b", &[], &[-1]))
        .init(tensor_i64("d", &[], &[-2]))
        .node(node("Range", &["a", "b", "d"], &["y"]))
        .output("y")
        .model(11);
    let net = import(&constant);
    assert!(net.tensor(net.outputs()[0]).shape.as_fixed() == Some(vec![3]));
    assert_i64(&run_network(&net, vec![])["y"], &[3], &[5, 3, 1]);
    let dynamic = Graph::new()
        .input("a", F32, "")
        .input("b", F32, "")
        .input("d", F32, "")
        .node(node("Range", &["a", "b", "d"], &["y"]))
        .output("y")
        .model(11);
    let y = run(&dynamic, vec![("a", f32s(&[], &[1.])), ("b", f32s(&[], &[2.])), ("d", f32s(&[], &[0.25]))], "y");
    assert_close(&y, &[4], &[1., 1.25, 1.5, 1.75], 0.0);
    let y = run(&dynamic, vec![("a", f32s(&[], &[1.])), ("b", f32s(&[], &[0.])), ("d", f32s(&[], &[1.]))], "y");
    assert_eq!(y.shape(), &[0]);
}

#[test]
fn dropout_is_identity_with_an_all_true_mask_and_no_training() {
    let plain = one_op(node("Dropout", &["x"], &["y"]).float("ratio", 0.5), "2", 7);
    assert_close(&run(&plain, vec![("x", f32s(&[2], &[1., 2.]))], "y"), &[2], &[1., 2.], 0.0);
    let mask =
        Graph::new().input("x", F32, "2").node(node("Dropout", &["x"], &["y", "m"])).output("y").output("m").model(13);
    let outputs = run_network(&import(&mask), vec![("x", f32s(&[2], &[1., 2.]))]);
    assert_eq!(outputs["m"].data(), &TensorData::Bool(vec![true, true]));
    let training = Graph::new()
        .input("x", F32, "2")
        .init(tensor_f32("r", &[], &[0.5]))
        .init(tensor_raw("t", &[], BOOL, vec![1]))
        .node(node("Dropout", &["x", "r", "t"], &["y"]))
        .output("y")
        .model(13);
    assert!(matches!(import_err(&training), ImportError::UnsupportedFeature { .. }));
}

#[test]
fn pad_attributes_then_inputs_then_axes() {
    let x = f32s(&[1, 2], &[1., 2.]);
    let v2 = one_op(node("Pad", &["x"], &["y"]).ints("pads", &[0, 1, 0, 2]).float("value", 9.), "1,2", 2);
    assert_close(&run(&v2, vec![("x", x.clone())], "y"), &[1, 5], &[9., 1., 2., 9., 9.], 0.0);
    let v1 = one_op(node("Pad", &["x"], &["y"]).ints("paddings", &[0, 1, 0, 0]).string("mode", "edge"), "1,2", 1);
    assert_close(&run(&v1, vec![("x", x.clone())], "y"), &[1, 3], &[1., 1., 2.], 0.0);
    let v11 = Graph::new()
        .input("x", F32, "1,3")
        .init(tensor_i64("p", &[4], &[0, 0, 0, 2]))
        .node(node("Pad", &["x", "p"], &["y"]).string("mode", "reflect"))
        .output("y")
        .model(11);
    let x3 = f32s(&[1, 3], &[1., 2., 3.]);
    assert_close(&run(&v11, vec![("x", x3)], "y"), &[1, 5], &[1., 2., 3., 2., 1.], 0.0);
    let axes = Graph::new()
        .input("x", F32, "1,2")
        .init(tensor_i64("p", &[2], &[1, 0]))
        .init(tensor_f32("v", &[], &[7.]))
        .init(tensor_i64("a", &[1], &[-1]))
        .node(node("Pad", &["x", "p", "v", "a"], &["y"]))
        .output("y")
        .model(18);
    assert_close(&run(&axes, vec![("x", x.clone())], "y"), &[1, 3], &[7., 1., 2.], 0.0);
    let wrap17 = Graph::new()
        .input("x", F32, "1,2")
        .init(tensor_i64("p", &[4], &[0; 4]))
        .node(node("Pad", &["x", "p"], &["y"]).string("mode", "wrap"))
        .output("y")
        .model(17);
    assert!(matches!(import_err(&wrap17), ImportError::InvalidModel { .. }), "wrap arrived in opset 19");
}

//! Graph-level import: names, inputs, initializers, tensor encodings, external data and
//! the errors for broken models.

mod common;

use common::*;
use half::{bf16, f16};
use kiln::{DataType, Dim, LayerKind, TensorData};
use kiln_onnx::proto::tensor_proto::DataLocation;
use kiln_onnx::proto::{ModelProto, OperatorSetIdProto, StringStringEntryProto, TensorProto};
use kiln_onnx::ImportError;
use prost::Message;

fn add_model() -> ModelProto {
    Graph::new()
        .input("a", F32, "N,3")
        .input("b", F32, "N,3")
        .node(node("Add", &["a", "b"], &["sum"]).named("adder"))
        .node(node("Relu", &["sum"], &["y"]))
        .output("y")
        .model(13)
}

#[test]
fn values_keep_onnx_names_and_dims() {
    let net = import(&add_model());
    let inputs: Vec<_> = net.inputs().iter().map(|&t| net.tensor(t)).collect();
    assert_eq!(inputs.len(), 2);
    assert_eq!(inputs[0].name, "a");
    assert_eq!(inputs[0].shape.dims(), &[Dim::Named("N".into()), Dim::Fixed(3)]);
    let sum = net.find_tensor("sum").expect("intermediate value keeps its ONNX name");
    assert_eq!(net.tensor(sum).dtype, DataType::F32);
    let y = net.outputs()[0];
    assert_eq!(net.tensor(y).name, "y");
    assert_eq!(net.tensor(y).shape.dims(), &[Dim::Named("N".into()), Dim::Fixed(3)]);
    // Layers are named after their nodes; unnamed nodes get op type + index.
    let names: Vec<&str> = net.layers().iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["adder", "Relu1"]);
}

#[test]
fn unknown_dims_and_rank_zero_inputs() {
    let model = Graph::new()
        .input("x", F32, "?,2")
        .input("s", F32, "")
        .node(node("Mul", &["x", "s"], &["y"]))
        .output("y")
        .model(14);
    let net = import(&model);
    let x = net.tensor(net.inputs()[0]);
    assert_eq!(x.shape.dims(), &[Dim::Unknown, Dim::Fixed(2)]);
    assert_eq!(net.tensor(net.inputs()[1]).shape.rank(), 0);
    let y = run(&model, vec![("x", f32s(&[3, 2], &[1., 2., 3., 4., 5., 6.])), ("s", f32s(&[], &[2.]))], "y");
    assert_close(&y, &[3, 2], &[2., 4., 6., 8., 10., 12.], 0.0);
}

#[test]
fn runs_end_to_end() {
    let y = run(
        &add_model(),
        vec![("a", f32s(&[2, 3], &[1., -2., 3., -4., 5., -6.])), ("b", f32s(&[2, 3], &[1.; 6]))],
        "y",
    );
    assert_close(&y, &[2, 3], &[2., 0., 4., 0., 6., 0.], 0.0);
}

#[test]
fn ir3_initializers_listed_as_inputs_are_constants() {
    let mut model = Graph::new()
        .input("x", F32, "2")
        .input("w", F32, "2")
        .init(tensor_f32("w", &[2], &[10., 20.]))
        .node(node("Add", &["x", "w"], &["y"]))
        .output("y")
        .model(7);
    model.ir_version = Some(3);
    let net = import(&model);
    assert_eq!(net.inputs().len(), 1, "the initializer is not a network input");
    let w = net.find_tensor("w").expect("initializer keeps its name");
    assert!(net.tensor(w).value.is_some());
    let y = run(&model, vec![("x", f32s(&[2], &[1., 2.]))], "y");
    assert_close(&y, &[2], &[11., 22.], 0.0);
}

#[test]
fn graph_outputs_that_are_inputs_or_initializers_get_identity_layers() {
    let model =
        Graph::new().input("x", F32, "2").init(tensor_f32("c", &[2], &[5., 6.])).output("x").output("c").model(13);
    let net = import(&model);
    assert_eq!(net.outputs().len(), 2);
    for &t in net.outputs() {
        let (layer, _) = net.tensor(t).producer.expect("outputs are computed");
        assert_eq!(net.layer(layer).kind, LayerKind::Identity);
    }
    assert_eq!(net.tensor(net.outputs()[1]).name, "c");
    let outputs = run_network(&net, vec![("x", f32s(&[2], &[1., 2.]))]);
    assert_close(&outputs["c"], &[2], &[5., 6.], 0.0);
    assert_close(&outputs["x (output)"], &[2], &[1., 2.], 0.0);
}

#[test]
fn pass_through_ops_get_their_own_tensor() {
    // Reduce with noop_with_empty_axes returns its input: the output still gets a name.
    let model = Graph::new()
        .input("x", F32, "2")
        .node(node("ReduceSum", &["x"], &["y"]).int("noop_with_empty_axes", 1))
        .output("y")
        .model(13);
    let net = import(&model);
    assert!(net.find_tensor("x").is_some() && net.find_tensor("y").is_some());
    let y = run(&model, vec![("x", f32s(&[2], &[3., 4.]))], "y");
    assert_close(&y, &[2], &[3., 4.], 0.0);
}

#[test]
fn unsorted_nodes_are_imported_in_dependency_order() {
    let model = Graph::new()
        .input("x", F32, "2")
        .node(node("Neg", &["t"], &["y"]))
        .node(node("Abs", &["x"], &["t"]))
        .output("y")
        .model(13);
    let y = run(&model, vec![("x", f32s(&[2], &[-1., 2.]))], "y");
    assert_close(&y, &[2], &[-1., -2.], 0.0);
}

#[test]
fn onnx_names_that_clash_with_helper_tensor_names_win() {
    // The Gemm's helper layer `g/matmul` produces a tensor called `g/matmul output`; a
    // later ONNX value of that name takes it over.
    let model = Graph::new()
        .input("a", F32, "1,2")
        .init(tensor_f32("b", &[2, 1], &[1., 1.]))
        .node(node("Gemm", &["a", "b"], &["g/matmul output"]).float("alpha", 2.0).named("g"))
        .node(node("Neg", &["g/matmul output"], &["y"]))
        .output("y")
        .model(13);
    let y = run(&model, vec![("a", f32s(&[1, 2], &[1., 2.]))], "y");
    assert_close(&y, &[1, 1], &[-6.], 0.0);
}

fn single_initializer_model(t: TensorProto) -> ModelProto {
    Graph::new().init(t).node(node("Identity", &["w"], &["y"])).output("y").model(13)
}

fn initializer_value(t: TensorProto) -> kiln::HostTensor {
    let net = import(&single_initializer_model(t));
    let w = net.find_tensor("w").expect("initializer");
    net.tensor(w).value.as_deref().cloned().expect("constant value")
}

#[test]
fn initializers_from_every_typed_field() {
    let mut t = TensorProto { name: Some("w".into()), dims: vec![2], ..Default::default() };
    type Fill = fn(&mut TensorProto);
    let cases: Vec<(i32, Fill, TensorData)> = vec![
        (F32, (|t| t.float_data = vec![1.5, -2.0]), TensorData::F32(vec![1.5, -2.0])),
        (F64, (|t| t.double_data = vec![0.25, 8.0]), TensorData::F64(vec![0.25, 8.0])),
        (I32, (|t| t.int32_data = vec![-7, 9]), TensorData::I32(vec![-7, 9])),
        (I64, (|t| t.int64_data = vec![1 << 40, -3]), TensorData::I64(vec![1 << 40, -3])),
        (3, (|t| t.int32_data = vec![-128, 127]), TensorData::I8(vec![-128, 127])),
        (5, (|t| t.int32_data = vec![-300, 300]), TensorData::I16(vec![-300, 300])),
        (2, (|t| t.int32_data = vec![0, 255]), TensorData::U8(vec![0, 255])),
        (4, (|t| t.int32_data = vec![1, 65535]), TensorData::U16(vec![1, 65535])),
        (BOOL, (|t| t.int32_data = vec![1, 0]), TensorData::Bool(vec![true, false])),
        (12, (|t| t.uint64_data = vec![7, 4_000_000_000]), TensorData::U32(vec![7, 4_000_000_000])),
        (13, (|t| t.uint64_data = vec![u64::MAX, 1]), TensorData::U64(vec![u64::MAX, 1])),
        (
            F16,
            (|t| t.int32_data = vec![f16::from_f32(1.5).to_bits() as i32, f16::from_f32(-0.5).to_bits() as i32]),
            TensorData::F16(vec![f16::from_f32(1.5), f16::from_f32(-0.5)]),
        ),
        (
            16,
            (|t| t.int32_data = vec![bf16::from_f32(3.0).to_bits() as i32, bf16::from_f32(-2.0).to_bits() as i32]),
            TensorData::BF16(vec![bf16::from_f32(3.0), bf16::from_f32(-2.0)]),
        ),
    ];
    for (data_type, fill, expected) in cases {
        t.data_type = Some(data_type);
        fill(&mut t);
        let value = initializer_value(t.clone());
        assert_eq!(value.data(), &expected, "data type {data_type}");
        assert_eq!(value.shape(), &[2]);
        t = TensorProto { name: Some("w".into()), dims: vec![2], ..Default::default() };
    }
}

#[test]
fn initializers_from_raw_data() {
    let raw: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    let value = initializer_value(tensor_raw("w", &[2, 3], F32, raw));
    assert_eq!(value.shape(), &[2, 3]);
    assert_eq!(value.as_f32().expect("f32"), &[1., 2., 3., 4., 5., 6.]);
    let value = initializer_value(tensor_raw("w", &[3], BOOL, vec![1, 0, 1]));
    assert_eq!(value.data(), &TensorData::Bool(vec![true, false, true]));
    let halves: Vec<u8> = [f16::from_f32(0.5), f16::from_f32(2.0)].iter().flat_map(|v| v.to_le_bytes()).collect();
    let value = initializer_value(tensor_raw("w", &[2], F16, halves));
    assert_eq!(value.data(), &TensorData::F16(vec![f16::from_f32(0.5), f16::from_f32(2.0)]));
}

#[test]
fn initializer_with_wrong_element_count_is_invalid() {
    let err = import_err(&single_initializer_model(tensor_f32("w", &[2, 2], &[1., 2., 3.])));
    assert!(
        matches!(&err, ImportError::InvalidModel { reason, .. } if reason.contains("`w`") && reason.contains("3")),
        "{err}"
    );
    let err = import_err(&single_initializer_model(tensor_raw("w", &[2], F32, vec![0; 7])));
    assert!(matches!(err, ImportError::InvalidModel { .. }), "{err}");
    let mut t = tensor_i64("w", &[1], &[0]);
    t.data_type = Some(8); // STRING, but the values sit in int64_data
    let err = import_err(&single_initializer_model(t));
    assert!(err.to_string().contains("0 string values"), "{err}");
}

fn external_tensor(location: &str, offset: Option<u64>, length: Option<u64>) -> TensorProto {
    let mut entries = vec![("location", location.to_string())];
    entries.extend(offset.map(|o| ("offset", o.to_string())));
    entries.extend(length.map(|l| ("length", l.to_string())));
    TensorProto {
        name: Some("w".into()),
        dims: vec![3],
        data_type: Some(F32),
        data_location: Some(DataLocation::External as i32),
        external_data: entries
            .into_iter()
            .map(|(k, v)| StringStringEntryProto { key: Some(k.into()), value: Some(v) })
            .collect(),
        ..Default::default()
    }
}

#[test]
fn external_data_is_read_relative_to_the_model() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(dir.path().join("weights")).expect("subdir");
    let mut bytes = vec![0xAAu8; 8]; // data starts at offset 8
    bytes.extend([1.0f32, 2.0, 3.0].iter().flat_map(|v| v.to_le_bytes()));
    std::fs::write(dir.path().join("weights/w.bin"), &bytes).expect("write data");
    let model = Graph::new()
        .input("x", F32, "3")
        .init(external_tensor("weights/w.bin", Some(8), Some(12)))
        .node(node("Add", &["x", "w"], &["y"]))
        .output("y")
        .model(13);
    let path = dir.path().join("model.onnx");
    std::fs::write(&path, model.encode_to_vec()).expect("write model");
    let net = kiln_onnx::import_file(&path).expect("import");
    let y = run_network(&net, vec![("x", f32s(&[3], &[1., 1., 1.]))]);
    assert_close(&y["y"], &[3], &[2., 3., 4.], 0.0);

    // Without a model directory, external data cannot be resolved.
    let err = kiln_onnx::import_bytes(&model.encode_to_vec(), None).expect_err("no dir");
    assert!(matches!(err, ImportError::ExternalData { .. }), "{err}");
    // A length that disagrees with the tensor's size.
    let short = single_initializer_model(external_tensor("weights/w.bin", Some(8), Some(8)));
    let err = kiln_onnx::import_bytes(&short.encode_to_vec(), Some(dir.path())).expect_err("short");
    assert!(matches!(&err, ImportError::ExternalData { reason, .. } if reason.contains("8 bytes")), "{err}");
}

#[test]
fn external_data_must_stay_inside_the_model_directory() {
    let dir = tempfile::tempdir().expect("temp dir");
    for location in ["../secret.bin", "/etc/passwd", "weights/../../x.bin"] {
        let model = single_initializer_model(external_tensor(location, None, None));
        let err = kiln_onnx::import_bytes(&model.encode_to_vec(), Some(dir.path())).expect_err(location);
        match &err {
            ImportError::ExternalData { tensor, reason } => {
                assert_eq!(tensor, "w");
                assert!(reason.contains(location), "{err}");
            }
            other => panic!("{location}: wrong error {other}"),
        }
    }
    let missing = single_initializer_model(external_tensor("absent.bin", None, None));
    let err = kiln_onnx::import_bytes(&missing.encode_to_vec(), Some(dir.path())).expect_err("missing");
    assert!(matches!(err, ImportError::ExternalData { .. }), "{err}");
}

#[test]
fn malformed_bytes_are_a_decode_error() {
    for bytes in [&b"\xff\xff\xff\xff"[..], b"not an onnx model at all", &[0x0a, 0x05, 0x01]] {
        let err = kiln_onnx::import_bytes(bytes, None).expect_err("garbage");
        assert!(matches!(err, ImportError::Decode(_)), "{err}");
        assert!(err.to_string().starts_with("malformed ONNX model"), "{err}");
    }
    // Every truncation of a valid model either decodes or fails cleanly.
    let bytes = add_model().encode_to_vec();
    for len in 0..bytes.len() {
        let _ = kiln_onnx::import_bytes(&bytes[..len], None);
    }
    let err = kiln_onnx::import_bytes(&[], None).expect_err("empty");
    assert!(matches!(err, ImportError::InvalidModel { .. }), "{err}");
}

#[test]
fn missing_file_is_an_io_error() {
    let err = kiln_onnx::import_file(std::path::Path::new("/nonexistent/model.onnx")).expect_err("missing");
    assert!(matches!(err, ImportError::Io { .. }), "{err}");
}

#[test]
fn unsupported_op_names_type_domain_opset_and_node() {
    let model =
        Graph::new().input("x", F32, "2").node(node("FancyOp", &["x"], &["y"]).named("fancy_1")).output("y").model(13);
    let err = import_err(&model);
    assert_eq!(err.to_string(), "unsupported ONNX op `FancyOp` (domain `ai.onnx`, opset 13) at node `fancy_1`");
    assert!(matches!(err, ImportError::UnsupportedOp { ref op_type, opset: 13, .. } if op_type == "FancyOp"));
}

#[test]
fn ops_newer_than_the_model_opset_are_unsupported() {
    // Gelu exists from opset 20.
    let model = Graph::new().input("x", F32, "2").node(node("Gelu", &["x"], &["y"])).output("y").model(18);
    let err = import_err(&model);
    assert!(matches!(err, ImportError::UnsupportedOp { opset: 18, .. }), "{err}");
}

#[test]
fn opsets_newer_than_the_known_definitions_are_unsupported() {
    let model = Graph::new().input("x", F32, "2").node(node("Relu", &["x"], &["y"])).output("y").model(29);
    assert!(matches!(import_err(&model), ImportError::UnsupportedOp { opset: 29, .. }));
    let mut model = model;
    model.opset_import[0].version = Some(28);
    import(&model);
}

#[test]
fn custom_domains_are_unsupported() {
    let mut model = Graph::new()
        .input("x", F32, "2")
        .node(kiln_onnx::proto::NodeProto { domain: Some("com.example".into()), ..node("Relu", &["x"], &["y"]) })
        .output("y")
        .model(13);
    let err = import_err(&model);
    assert!(matches!(err, ImportError::InvalidModel { .. }), "undeclared domain: {err}");
    model.opset_import.push(OperatorSetIdProto { domain: Some("com.example".into()), version: Some(2) });
    let err = import_err(&model);
    assert_eq!(err.to_string(), "unsupported ONNX op `Relu` (domain `com.example`, opset 2) at node `Relu0`");
    // `ai.onnx` spelled out is the default domain.
    model.graph.as_mut().expect("graph").node[0].domain = Some("ai.onnx".into());
    import(&model);
}

#[test]
fn dangling_input_names_the_node() {
    let model = Graph::new()
        .input("x", F32, "2")
        .node(node("Add", &["x", "ghost"], &["y"]).named("add_ghost"))
        .output("y")
        .model(13);
    match import_err(&model) {
        ImportError::InvalidModel { node, reason } => {
            assert_eq!(node, "add_ghost");
            assert!(reason.contains("ghost"), "{reason}");
        }
        other => panic!("wrong error: {other}"),
    }
}

#[test]
fn broken_graphs_are_invalid() {
    let cycle = Graph::new()
        .input("x", F32, "2")
        .node(node("Add", &["x", "b"], &["a"]))
        .node(node("Neg", &["a"], &["b"]))
        .output("b")
        .model(13);
    assert!(matches!(import_err(&cycle), ImportError::InvalidModel { reason, .. } if reason.contains("cycle")));
    let twice = Graph::new()
        .input("x", F32, "2")
        .node(node("Neg", &["x"], &["y"]))
        .node(node("Abs", &["x"], &["y"]))
        .output("y")
        .model(13);
    assert!(matches!(import_err(&twice), ImportError::InvalidModel { .. }));
    let no_output = Graph::new().input("x", F32, "2").node(node("Neg", &["x"], &["y"])).output("z").model(13);
    assert!(matches!(import_err(&no_output), ImportError::InvalidModel { reason, .. } if reason.contains("`z`")));
    let no_opset = ModelProto { opset_import: vec![], ..add_model() };
    assert!(matches!(import_err(&no_opset), ImportError::InvalidModel { .. }));
    let no_graph = ModelProto { graph: None, ..add_model() };
    assert!(matches!(import_err(&no_graph), ImportError::InvalidModel { .. }));
    let mut no_shape = add_model();
    no_shape.graph.as_mut().expect("graph").input[0].r#type = None;
    assert!(matches!(import_err(&no_shape), ImportError::InvalidModel { reason, .. } if reason.contains("`a`")));
}

#[test]
fn bad_attributes_are_invalid() {
    // `axis` declared as a FLOAT.
    let model = Graph::new()
        .input("x", F32, "2,2")
        .node(node("Softmax", &["x"], &["y"]).float("axis", 1.0).named("sm"))
        .output("y")
        .model(13);
    match import_err(&model) {
        ImportError::InvalidModel { node, reason } => {
            assert_eq!(node, "sm");
            assert!(reason.contains("axis") && reason.contains("INT"), "{reason}");
        }
        other => panic!("wrong error: {other}"),
    }
    let out_of_range =
        Graph::new().input("x", F32, "2,2").node(node("Softmax", &["x"], &["y"]).int("axis", 5)).output("y").model(13);
    assert!(matches!(import_err(&out_of_range), ImportError::InvalidModel { .. }));
}

#[test]
fn kiln_rejections_name_the_node() {
    // Adding f32 and i64 breaks kiln's type rule.
    let model = Graph::new()
        .input("a", F32, "2")
        .input("b", I64, "2")
        .node(node("Add", &["a", "b"], &["y"]).named("mixed"))
        .output("y")
        .model(13);
    assert!(matches!(import_err(&model), ImportError::Network { node, .. } if node == "mixed"));
}

#[test]
fn supported_ops_cover_the_required_set() {
    let ops = kiln_onnx::supported_ops();
    for op in ["Conv", "ConvTranspose", "Resize", "LayerNormalization", "Split", "Range", "Tile", "Pad"] {
        assert!(ops.contains(&op), "{op} missing");
    }
}

/// HannWindow has no builder of its own: its ONNX function body is inlined, with the
/// caller's `periodic` attribute or the op's default.
#[test]
fn ops_defined_by_a_function_body_are_inlined() {
    let window = |periodic: Option<i64>| {
        let mut n = node("HannWindow", &["size"], &["w"]);
        if let Some(p) = periodic {
            n = n.int("periodic", p);
        }
        let model = Graph::new().input("size", I64, "").node(n).output("w").model(17);
        run(&model, vec![("size", i64s(&[], &[4]))], "w")
    };
    assert_close(&window(None), &[4], &[0.0, 0.5, 1.0, 0.5], 1e-6);
    assert_close(&window(Some(0)), &[4], &[0.0, 0.75, 0.75, 0.0], 1e-6);
}

/// An input the op does not take is an error, not ignored: a Relu of three inputs would
/// otherwise run as a Relu of the first.
#[test]
fn an_input_the_op_does_not_take_is_an_error() {
    let model = Graph::new().input("x", F32, "4").node(node("Relu", &["x", "x", "x"], &["y"])).output("y").model(17);
    let e = import_err(&model).to_string();
    assert!(e.contains("Relu takes 1 input here, but input #1 (`x`) is given too"), "{e}");
    // Omitted optional inputs (empty names) at the end are not inputs given.
    let clip = Graph::new().input("x", F32, "4").node(node("Clip", &["x", "", ""], &["y"])).output("y").model(13);
    import(&clip);
}

#[test]
fn a_declared_output_type_that_differs_is_an_error_and_a_shape_a_warning() {
    let declared = |elem_type: i32, dims: &str| {
        let mut model = Graph::new().input("x", F32, "4").node(node("Relu", &["x"], &["y"])).model(17);
        model.graph.as_mut().unwrap().output.push(value_info("y", elem_type, dims));
        model.encode_to_vec()
    };
    let e = kiln_onnx::import_bytes(&declared(I64, "4"), None).unwrap_err().to_string();
    assert!(e.contains("graph output `y` is declared i64 but the graph computes f32"), "{e}");
    let (net, warnings) = kiln_onnx::import_bytes_with_warnings(&declared(F32, "7"), None).unwrap();
    assert_eq!(warnings, ["graph output `y` is declared [7] but kiln infers [4]; the inferred shape is used"]);
    assert_eq!(net.tensor(net.outputs()[0]).shape.as_fixed(), Some(vec![4]));
    let (_, warnings) = kiln_onnx::import_bytes_with_warnings(&declared(F32, "N"), None).unwrap();
    assert!(warnings.is_empty(), "a symbolic dim agrees with any size: {warnings:?}");
}

#[test]
fn block_sizes_past_i32_are_refused_before_any_arithmetic() {
    for op in ["DepthToSpace", "SpaceToDepth"] {
        let model = Graph::new()
            .input("x", F32, "1,4,2,2")
            .node(node(op, &["x"], &["y"]).int("blocksize", i64::MAX))
            .output("y")
            .model(13);
        let e = import_err(&model).to_string();
        assert!(e.contains("blocksize must be in 1..=2147483647"), "{op}: {e}");
    }
}

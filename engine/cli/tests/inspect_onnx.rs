//! `kiln inspect MODEL.onnx`: the model's inputs, outputs, opsets, ops and initializers, and
//! every node kiln cannot import; `kiln build` lists every such node in its error.

mod common;

use common::*;
use kiln_onnx::proto::tensor_proto::DataType as OnnxType;
use kiln_onnx::proto::tensor_shape_proto::{dimension, Dimension};
use kiln_onnx::proto::type_proto::{self, Tensor as TensorType};
use kiln_onnx::proto::{
    GraphProto, ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto, TensorProto, TensorShapeProto,
    TypeProto, ValueInfoProto,
};
use prost::Message;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn node(name: &str, op: &str, inputs: &[&str], output: &str) -> NodeProto {
    NodeProto {
        name: Some(name.into()),
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        ..Default::default()
    }
}

/// A float tensor value; dims are numbers, or names for dynamic dims (`?`: unnamed).
fn float_value(name: &str, dims: &[&str]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|d| Dimension {
            value: Some(match d.parse::<i64>() {
                Ok(n) => dimension::Value::DimValue(n),
                Err(_) if *d == "?" => dimension::Value::DimParam(String::new()),
                Err(_) => dimension::Value::DimParam(d.to_string()),
            }),
            ..Default::default()
        })
        .collect();
    let tensor = TensorType { elem_type: Some(OnnxType::Float as i32), shape: Some(TensorShapeProto { dim }) };
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto { value: Some(type_proto::Value::TensorType(tensor)), ..Default::default() }),
        ..Default::default()
    }
}

fn floats(name: &str, dims: &[i64], values: &[f32]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(OnnxType::Float as i32),
        float_data: values.to_vec(),
        ..Default::default()
    }
}

fn write_model(dir: &Path, name: &str, graph: GraphProto, extra_domain: Option<&str>) -> PathBuf {
    let mut opset_import = vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(17) }];
    opset_import.extend(extra_domain.map(|d| OperatorSetIdProto { domain: Some(d.into()), version: Some(1) }));
    let model = ModelProto { ir_version: Some(8), opset_import, graph: Some(graph), ..Default::default() };
    let path = dir.join(format!("{name}.onnx"));
    std::fs::write(&path, model.encode_to_vec()).expect("write model");
    path
}

/// x → Relu → Frobnicate → Add(b) → Sparkle → com.example.Warp → Relu → y: three nodes
/// kiln cannot import among three it can. The middle values declare their types, as
/// exporters do, so the checked nodes after each failure see real shapes.
fn three_unsupported(dir: &Path) -> PathBuf {
    let mut warp = node("warp", "Warp", &["s"], "w");
    warp.domain = Some("com.example".into());
    // `big` lives in a data file that does not exist: the summary counts its declared size.
    let big = TensorProto {
        name: Some("big".into()),
        dims: vec![1024, 256],
        data_type: Some(OnnxType::Float as i32),
        data_location: Some(1), // EXTERNAL
        external_data: vec![StringStringEntryProto { key: Some("location".into()), value: Some("absent.bin".into()) }],
        ..Default::default()
    };
    let graph = GraphProto {
        name: Some("three".into()),
        node: vec![
            node("relu0", "Relu", &["x"], "r"),
            node("frob", "Frobnicate", &["r"], "f"),
            node("add", "Add", &["f", "b"], "a"),
            node("sparkle", "Sparkle", &["a"], "s"),
            warp,
            node("relu1", "Relu", &["w"], "y"),
        ],
        initializer: vec![floats("b", &[4], &[1.0; 4]), big],
        input: vec![float_value("x", &["batch", "4"])],
        output: vec![float_value("y", &["batch", "?"])],
        value_info: vec![float_value("f", &["batch", "4"]), float_value("s", &["batch", "4"]), float_value("w", &["batch", "4"])],
        ..Default::default()
    };
    write_model(dir, "three", graph, Some("com.example"))
}

#[test]
fn inspect_lists_every_node_kiln_cannot_import_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let model = three_unsupported(dir.path());
    let text = kiln_ok(&["inspect", path_arg(&model)]);
    for expected in [
        "inputs (1):\n  `x`: float[batch,4]\n",
        "outputs (1):\n  `y`: float[batch,?]\n",
        "opsets:       ai.onnx 17, com.example 1\n",
        "initializers: 2, 1.05 MB (1048592 bytes) (1 in external data",
        "ops (5 types):\n      2  Relu\n      1  Add\n      1  Frobnicate\n      1  Sparkle\n      1  com.example.Warp\n",
        "import:       3 of 6 nodes kiln cannot import:\n",
        "  `frob` Frobnicate: unsupported ONNX op `Frobnicate` (domain `ai.onnx`, opset 17) at node `frob`\n",
        "  `sparkle` Sparkle: unsupported ONNX op `Sparkle`",
        "  `warp` com.example.Warp: unsupported ONNX op `Warp` (domain `com.example`, opset 1) at node `warp`\n      hint: no loaded plugin provides `com.example::Warp`; load its library with --plugins LIB\n",
    ] {
        assert!(text.contains(expected), "`{expected}` missing from:\n{text}");
    }
    assert_eq!(text.matches("hint:").count(), 1, "only the custom-domain op gets the plugin hint:\n{text}");
    assert!(!text.contains("downstream"), "{text}");

    let json: Value = serde_json::from_str(&kiln_ok(&["inspect", path_arg(&model), "--format", "json"])).expect("valid json");
    assert_eq!(json["inputs"], serde_json::json!([{"name": "x", "dtype": "float", "shape": ["batch", 4]}]));
    assert_eq!(json["outputs"], serde_json::json!([{"name": "y", "dtype": "float", "shape": ["batch", -1]}]));
    assert_eq!(json["opsets"], serde_json::json!([{"domain": "ai.onnx", "version": 17}, {"domain": "com.example", "version": 1}]));
    assert_eq!(json["ops"][0], serde_json::json!({"op": "Relu", "domain": "ai.onnx", "count": 2}));
    assert_eq!(json["ops"].as_array().map(Vec::len), Some(5));
    assert_eq!(json["initializers"], serde_json::json!({"count": 2, "bytes": 1048592, "external": 1}));
    let unsupported = json["unsupported"].as_array().expect("unsupported is an array");
    let nodes: Vec<(&str, &str, &str)> = unsupported
        .iter()
        .map(|u| (u["node"].as_str().unwrap(), u["op"].as_str().unwrap(), u["domain"].as_str().unwrap()))
        .collect();
    assert_eq!(nodes, [("frob", "Frobnicate", "ai.onnx"), ("sparkle", "Sparkle", "ai.onnx"), ("warp", "Warp", "com.example")]);
    for u in unsupported {
        assert!(u["reason"].as_str().unwrap().contains("unsupported ONNX op"), "{u}");
    }
    assert!(unsupported[0]["hint"].is_null() && unsupported[1]["hint"].is_null());
    assert!(unsupported[2]["hint"].as_str().unwrap().contains("--plugins LIB"), "{}", unsupported[2]);
    assert_eq!(json["downstream"], serde_json::json!([]));
    assert!(json["backend"].is_null());
}

#[test]
fn build_fails_with_one_error_line_naming_every_unsupported_node() {
    let dir = tempfile::tempdir().unwrap();
    let model = three_unsupported(dir.path());
    let engine = dir.path().join("x.engine");
    let line = kiln_fails(&["build", path_arg(&model), "-o", path_arg(&engine), "--backend", "cpu"], "3 nodes kiln cannot import: ");
    for node in ["`frob`", "`sparkle`", "`warp`"] {
        assert_eq!(line.matches(node).count(), 1, "{node} once in: {line}");
    }
    assert!(line.contains("`com.example::Warp`; load its library with --plugins LIB"), "{line}");
    assert!(!engine.exists());
}

#[test]
fn inspect_of_a_supported_model_shows_an_empty_capability_report() {
    let dir = tempfile::tempdir().unwrap();
    let graph = GraphProto {
        name: Some("fine".into()),
        node: vec![
            node("m", "MatMul", &["x", "w"], "h"),
            node("r0", "Relu", &["h"], "h1"),
            node("s", "Sigmoid", &["h1"], "h2"),
            node("r1", "Relu", &["h2"], "h3"),
            node("r2", "Relu", &["h3"], "y"),
        ],
        initializer: vec![floats("w", &[4, 2], &[0.5; 8])],
        input: vec![float_value("x", &["N", "4"])],
        output: vec![float_value("y", &["N", "2"])],
        ..Default::default()
    };
    let model = write_model(dir.path(), "fine", graph, None);
    let text = kiln_ok(&["inspect", path_arg(&model), "--backend", "cpu"]);
    assert!(text.contains("ops (3 types):\n      3  Relu\n      1  MatMul\n      1  Sigmoid\n"), "{text}");
    assert!(text.contains("import:       every node imports (5 nodes)\n"), "{text}");
    assert!(text.contains("initializers: 1, 32 bytes (0 in external data"), "{text}");
    assert!(text.contains("backend cpu:  runs all ") && text.contains(" imported layers (checked before"), "{text}");
    let json: Value =
        serde_json::from_str(&kiln_ok(&["inspect", path_arg(&model), "--format", "json", "--backend", "cpu"])).unwrap();
    assert_eq!(json["unsupported"], serde_json::json!([]));
    let counts: Vec<(&str, u64)> = json["ops"].as_array().unwrap().iter().map(|o| (o["op"].as_str().unwrap(), o["count"].as_u64().unwrap())).collect();
    assert_eq!(counts, [("Relu", 3), ("MatMul", 1), ("Sigmoid", 1)]);
    assert_eq!(json["backend"]["name"], "cpu");
    assert_eq!(json["backend"]["unsupported"], serde_json::json!([]));
    for key in ["inputs", "outputs", "opsets", "ops", "initializers", "unsupported"] {
        assert!(json.get(key).is_some(), "key `{key}` missing: {json}");
    }
    // The engine inspector's verbosity has nothing to show of a model.
    kiln_fails(&["inspect", path_arg(&model), "--verbosity", "detailed"], "--verbosity describes engine files");
}

#[test]
fn a_file_that_is_neither_engine_nor_onnx_is_one_error_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("notes.txt");
    std::fs::write(&garbage, b"\x12\x34 this is not a protobuf \xff\xfe\xfd".repeat(8)).unwrap();
    let line = kiln_fails(&["inspect", path_arg(&garbage)], "neither a kiln engine file");
    assert!(line.contains("nor an ONNX model"), "{line}");
    // A file that decodes as an empty protobuf message is not taken for a model either.
    let empty_message = dir.path().join("empty.bin");
    std::fs::write(&empty_message, b"").unwrap();
    kiln_fails(&["inspect", path_arg(&empty_message)], "empty");
    let text = dir.path().join("text.onnx");
    std::fs::write(&text, b"\n\x00").unwrap();
    kiln_fails(&["inspect", path_arg(&text)], "nor an ONNX model");
}

#[test]
fn a_missing_external_data_file_is_reported_once_not_per_node() {
    let dir = tempfile::tempdir().unwrap();
    let w = TensorProto {
        name: Some("w".into()),
        dims: vec![4, 2],
        data_type: Some(OnnxType::Float as i32),
        data_location: Some(1), // EXTERNAL
        external_data: vec![StringStringEntryProto { key: Some("location".into()), value: Some("absent.bin".into()) }],
        ..Default::default()
    };
    let graph = GraphProto {
        name: Some("weights_elsewhere".into()),
        node: vec![node("m", "MatMul", &["x", "w"], "h"), node("r", "Relu", &["h"], "y")],
        initializer: vec![w],
        input: vec![float_value("x", &["N", "4"])],
        output: vec![float_value("y", &["N", "2"])],
        ..Default::default()
    };
    let model = write_model(dir.path(), "weights_elsewhere", graph, None);
    let text = kiln_ok(&["inspect", path_arg(&model)]);
    assert!(text.contains("initializers: 1, 32 bytes (1 in external data"), "{text}");
    assert!(text.contains("data:         the external data of 1 initializer cannot be read (first: external data of tensor `w`"), "{text}");
    assert!(text.contains("import:       every node imports (2 nodes)\n"), "{text}");
    let json: Value = serde_json::from_str(&kiln_ok(&["inspect", path_arg(&model), "--format", "json"])).unwrap();
    assert_eq!(json["unreadable_data"][0]["tensor"], "w");
    assert_eq!(json["unsupported"], serde_json::json!([]));
    // The build still fails on the data, with the import's own error.
    let engine = dir.path().join("x.engine");
    kiln_fails(&["build", path_arg(&model), "-o", path_arg(&engine), "--backend", "cpu"], "external data of tensor `w`");
}

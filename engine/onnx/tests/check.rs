//! The import capability check (`kiln_onnx::check_bytes`): every node kiln cannot import,
//! not only the first, while a plain import still stops at the first.

mod common;

use common::*;
use kiln_onnx::proto::{ModelProto, OperatorSetIdProto};
use kiln_onnx::{CheckReport, ImportError};
use prost::Message;

fn check(model: &ModelProto) -> CheckReport {
    kiln_onnx::check_bytes(&model.encode_to_vec(), None).unwrap_or_else(|e| panic!("check failed: {e}"))
}

fn with_domain(mut model: ModelProto, domain: &str) -> ModelProto {
    model.opset_import.push(OperatorSetIdProto { domain: Some(domain.into()), version: Some(1) });
    model
}

/// x → Relu → Frobnicate → Add(b) → Sparkle → com.example.Warp → Sigmoid → y, the three
/// unknown ops declaring their outputs' types so the nodes after them import.
fn three_unsupported() -> ModelProto {
    let mut warp = node("Warp", &["s"], &["w"]).named("warp");
    warp.domain = Some("com.example".into());
    let mut graph = Graph::new()
        .input("x", F32, "N,4")
        .init(tensor_f32("b", &[4], &[1.0; 4]))
        .node(node("Relu", &["x"], &["r"]).named("relu"))
        .node(node("Frobnicate", &["r"], &["f"]).named("frob"))
        .node(node("Add", &["f", "b"], &["a"]).named("add"))
        .node(node("Sparkle", &["a"], &["s"]).named("sparkle"))
        .node(warp)
        .node(node("Sigmoid", &["w"], &["y"]).named("sigmoid"))
        .output("y");
    for value in ["f", "s", "w"] {
        graph.graph.value_info.push(value_info(value, F32, "N,4"));
    }
    with_domain(graph.model(17), "com.example")
}

#[test]
fn every_unsupported_node_is_listed_in_order_with_its_reason() {
    let model = three_unsupported();
    let report = check(&model);
    let found: Vec<(&str, &str)> = report.unsupported.iter().map(|i| (i.node.as_str(), i.op_type.as_str())).collect();
    assert_eq!(found, [("frob", "Frobnicate"), ("sparkle", "Sparkle"), ("warp", "Warp")]);
    for issue in &report.unsupported {
        assert!(matches!(issue.error, ImportError::UnsupportedOp { .. }), "{}", issue.error);
        assert!(issue.error.to_string().contains(&format!("`{}`", issue.op_type)), "{}", issue.error);
    }
    let wants: Vec<bool> = report.unsupported.iter().map(|i| i.wants_plugin()).collect();
    assert_eq!(wants, [false, false, true], "only the custom-domain op wants a plugin");
    assert!(report.downstream.is_empty(), "{:?}", report.downstream);
    assert!(report.graph_error.is_none(), "{:?}", report.graph_error);
    assert!(!report.imports());
    assert_eq!(report.nodes, 6);
    // The nodes between and after the failures were imported into the checked network.
    for layer in ["relu", "add", "sigmoid"] {
        assert!(report.network.layers().iter().any(|l| l.name == layer), "layer `{layer}` missing");
    }
    // A plain import still stops at the first.
    let error = kiln_onnx::import_bytes(&model.encode_to_vec(), None).expect_err("must fail");
    assert!(error.to_string().contains("Frobnicate"), "{error}");
}

#[test]
fn a_failure_caused_only_by_a_guessed_placeholder_is_reported_as_downstream() {
    // `f` declares no type: its placeholder is an f32 scalar, which MatMul refuses.
    let model = Graph::new()
        .input("x", F32, "2,3")
        .init(tensor_f32("w", &[3, 2], &[1.0; 6]))
        .node(node("Frobnicate", &["x"], &["f"]).named("frob"))
        .node(node("MatMul", &["f", "w"], &["m"]).named("matmul"))
        .node(node("Relu", &["m"], &["y"]).named("relu"))
        .output("y")
        .model(17);
    let report = check(&model);
    let unsupported: Vec<&str> = report.unsupported.iter().map(|i| i.node.as_str()).collect();
    assert_eq!(unsupported, ["frob"]);
    let downstream: Vec<&str> = report.downstream.iter().map(|i| i.node.as_str()).collect();
    assert_eq!(downstream, ["matmul"], "{:?}", report.downstream);
    // An unknown op stays unsupported though it reads a guess: no input changes that.
    let model = Graph::new()
        .input("x", F32, "2,3")
        .node(node("Frobnicate", &["x"], &["f"]).named("frob"))
        .node(node("Sparkle", &["f"], &["y"]).named("sparkle"))
        .output("y")
        .model(17);
    let report = check(&model);
    let unsupported: Vec<&str> = report.unsupported.iter().map(|i| i.node.as_str()).collect();
    assert_eq!(unsupported, ["frob", "sparkle"]);
    assert!(report.downstream.is_empty());
}

#[test]
fn a_model_that_imports_has_an_empty_report() {
    let model = Graph::new()
        .input("x", F32, "N,4")
        .node(node("Relu", &["x"], &["r"]))
        .node(node("Sigmoid", &["r"], &["y"]))
        .output("y")
        .model(17);
    let report = check(&model);
    assert!(report.imports(), "{report:?}");
    assert_eq!(report.network.layers().len(), kiln_onnx::import_bytes(&model.encode_to_vec(), None).unwrap().layers().len());
}

#[test]
fn unreadable_external_data_gets_a_stand_in_and_is_reported_once() {
    let mut w = tensor_f32("w", &[3, 2], &[]);
    w.data_location = Some(1); // EXTERNAL
    w.external_data = vec![kiln_onnx::proto::StringStringEntryProto {
        key: Some("location".into()),
        value: Some("absent.bin".into()),
    }];
    let model = Graph::new()
        .input("x", F32, "2,3")
        .init(w)
        .node(node("MatMul", &["x", "w"], &["m"]).named("matmul"))
        .node(node("Relu", &["m"], &["y"]).named("relu"))
        .output("y")
        .model(17);
    let dir = tempfile::tempdir().unwrap();
    let report = kiln_onnx::check_bytes(&model.encode_to_vec(), Some(dir.path())).expect("check");
    assert!(report.unsupported.is_empty() && report.downstream.is_empty(), "{report:?}");
    let unread: Vec<&str> = report.unreadable_data.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(unread, ["w"]);
    assert!(matches!(report.unreadable_data[0].1, ImportError::ExternalData { .. }));
    assert!(!report.imports());
    // A plain import still fails on it.
    let error = kiln_onnx::import_bytes(&model.encode_to_vec(), Some(dir.path())).expect_err("must fail");
    assert!(matches!(error, ImportError::ExternalData { .. }), "{error}");
}

#[test]
fn an_undeclared_domain_and_bad_bytes_are_errors_not_panics() {
    // A custom-domain node whose domain the model does not import: listed, not fatal.
    let mut warp = node("Warp", &["x"], &["y"]).named("warp");
    warp.domain = Some("com.example".into());
    let model = Graph::new().input("x", F32, "2").node(warp).output("y").model(17);
    let report = check(&model);
    assert_eq!(report.unsupported.len(), 1);
    assert!(report.unsupported[0].error.to_string().contains("not declared"), "{}", report.unsupported[0].error);
    assert!(!report.unsupported[0].wants_plugin());
    assert!(matches!(kiln_onnx::check_bytes(b"\xff\xfe not onnx", None), Err(ImportError::Decode(_))));
}

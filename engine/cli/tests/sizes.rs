//! Models that would compute tensors too large for memory, and bad size options: one
//! `error:` line naming the layer and the size, never a panic, an abort or a wrong answer.

mod common;

use common::*;
use kiln_onnx::proto::attribute_proto::AttributeType;
use kiln_onnx::proto::tensor_proto::DataType as OnnxType;
use kiln_onnx::proto::{AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, ValueInfoProto};
use prost::Message;
use std::path::{Path, PathBuf};

fn node(op: &str, inputs: &[&str], output: &str) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        ..Default::default()
    }
}

fn ints(name: &str, dims: &[i64], values: &[i64]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(OnnxType::Int64 as i32),
        int64_data: values.to_vec(),
        ..Default::default()
    }
}

/// `z = op(expand(1.0, shape))` with the constant `shape`, written to `dir/name.onnx`.
fn expand_model(dir: &Path, name: &str, shape: &[i64], then: Option<NodeProto>) -> PathBuf {
    let mut nodes = vec![node("Expand", &["one", "shape"], "y")];
    let output = match then {
        Some(n) => {
            nodes.push(n);
            "z"
        }
        None => "y",
    };
    let one = TensorProto { name: Some("one".into()), dims: vec![1], data_type: Some(OnnxType::Float as i32), float_data: vec![1.0], ..Default::default() };
    let graph = GraphProto {
        name: Some(name.into()),
        node: nodes,
        initializer: vec![one, ints("shape", &[shape.len() as i64], shape)],
        output: vec![ValueInfoProto { name: Some(output.into()), ..Default::default() }],
        ..Default::default()
    };
    let model = ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(17) }],
        graph: Some(graph),
        ..Default::default()
    };
    let path = dir.join(format!("{name}.onnx"));
    std::fs::write(&path, model.encode_to_vec()).expect("write model");
    path
}

fn reduce_sum() -> NodeProto {
    NodeProto {
        attribute: vec![AttributeProto { name: Some("keepdims".into()), r#type: Some(AttributeType::Int as i32), i: Some(0), ..Default::default() }],
        ..node("ReduceSum", &["y"], "z")
    }
}

#[test]
fn an_element_count_that_overflows_is_an_error_not_a_wrong_sum() {
    let dir = tempfile::tempdir().unwrap();
    let model = expand_model(dir.path(), "sum", &[1 << 32, 1 << 32], Some(reduce_sum()));
    let line = kiln_fails(&["run", "--backend", "cpu", path_arg(&model)], "Expand");
    assert!(line.contains("f32[4294967296, 4294967296] has more elements than any memory can hold"), "{line}");
    let size = expand_model(dir.path(), "size", &[1 << 32, 1 << 32], Some(node("Size", &["y"], "z")));
    kiln_fails(&["run", "--backend", "cpu", path_arg(&size)], "more elements than an int64 can count");
}

#[test]
fn a_tensor_over_the_memory_budget_is_an_error_naming_layer_and_size() {
    let dir = tempfile::tempdir().unwrap();
    let model = expand_model(dir.path(), "huge", &[1 << 20, 1 << 20], Some(node("Cos", &["y"], "z")));
    for command in ["run", "bench"] {
        let line = kiln_fails(&[command, "--backend", "cpu", path_arg(&model)], "Expand");
        assert!(line.contains("f32[1048576, 1048576] needs 4.0 TiB, over the memory budget of"), "{line}");
    }
    let engine = dir.path().join("huge.engine");
    kiln_fails(&["build", "--backend", "cpu", path_arg(&model), "-o", path_arg(&engine)], "needs 4.0 TiB");
    assert!(!engine.exists(), "no engine is written");
    let small = expand_model(dir.path(), "small", &[64, 1024], None);
    let line = kiln_fails(&["run", "--backend", "cpu", "--max-memory", "128K", path_arg(&small)], "Expand");
    assert!(line.contains("f32[64, 1024] needs 256.0 KiB, over the memory budget of 128.0 KiB (set with --max-memory)"), "{line}");
    kiln_ok(&["run", "--backend", "cpu", "--max-memory", "256K", path_arg(&small)]);
    // A built engine records the budget, shows it, and runs within it.
    let engine = dir.path().join("small.engine");
    kiln_ok(&["build", "--backend", "cpu", "--max-memory", "256K", path_arg(&small), "-o", path_arg(&engine)]);
    assert!(kiln_ok(&["inspect", path_arg(&engine)]).contains("limits:       256.0 KiB per tensor"));
    kiln_ok(&["run", path_arg(&engine)]);
}

/// `ulimit -v` lowers the budget below the machine's memory: the tensor is refused
/// before the allocation that would abort the process.
#[test]
fn an_address_space_limit_is_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let model = expand_model(dir.path(), "big", &[1 << 20, 1 << 10], Some(node("Cos", &["y"], "z")));
    let script = format!("ulimit -v 3000000 && exec '{}' run --backend cpu '{}'", env!("CARGO_BIN_EXE_kiln"), model.display());
    let out = std::process::Command::new("sh").args(["-c", &script]).output().expect("start sh");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.starts_with("error: ") && stderr.lines().count() == 1, "{stderr}");
    assert!(stderr.contains("f32[1048576, 1024] needs 4.0 GiB, over the memory budget of 2.9 GiB"), "{stderr}");
}

#[test]
fn bad_size_options_are_usage_errors() {
    let model = repo_path("examples/models/mnist.onnx");
    for bad in ["12Q", "-1", "0", "1e300"] {
        let out = kiln(&["run", "--backend", "cpu", &format!("--max-memory={bad}"), path_arg(&model)]);
        assert_eq!(out.status.code(), Some(2), "--max-memory {bad}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains("--max-memory"), "{}", text(&out.stderr));
    }
    for bad in ["1e300", "-1", "NaN", "inf"] {
        kiln_fails(&["bench", "--backend", "cpu", &format!("--duration-s={bad}"), path_arg(&model)], "--duration-s");
    }
}

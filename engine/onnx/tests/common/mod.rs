//! Builds small ONNX models from the prost structs, imports them and runs them on the cpu
//! backend.
#![allow(dead_code)]

pub mod large_graphs;
pub mod pytorch_data;

use kiln::{BuilderConfig, ExecutionContext, HostTensor, Network, TensorData};
use kiln_onnx::proto::attribute_proto::AttributeType;
use kiln_onnx::proto::tensor_proto::DataType as OnnxType;
use kiln_onnx::proto::tensor_shape_proto::{dimension, Dimension};
use kiln_onnx::proto::type_proto::{self, Tensor as TensorTypeProto};
use kiln_onnx::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto,
    ValueInfoProto,
};
use prost::Message;
use std::collections::{BTreeMap, HashMap};

pub const F32: i32 = OnnxType::Float as i32;
pub const F16: i32 = OnnxType::Float16 as i32;
pub const F64: i32 = OnnxType::Double as i32;
pub const I32: i32 = OnnxType::Int32 as i32;
pub const I64: i32 = OnnxType::Int64 as i32;
pub const BOOL: i32 = OnnxType::Bool as i32;

/// A node; chain the attribute setters.
pub fn node(op_type: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: Some(op_type.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn attribute(name: &str, kind: AttributeType) -> AttributeProto {
    AttributeProto { name: Some(name.into()), r#type: Some(kind as i32), ..Default::default() }
}

pub trait NodeExt: Sized {
    fn attr(self, a: AttributeProto) -> Self;
    fn named(self, name: &str) -> Self;

    fn int(self, name: &str, v: i64) -> Self {
        self.attr(AttributeProto { i: Some(v), ..attribute(name, AttributeType::Int) })
    }
    fn ints(self, name: &str, v: &[i64]) -> Self {
        self.attr(AttributeProto { ints: v.to_vec(), ..attribute(name, AttributeType::Ints) })
    }
    fn float(self, name: &str, v: f32) -> Self {
        self.attr(AttributeProto { f: Some(v), ..attribute(name, AttributeType::Float) })
    }
    fn floats(self, name: &str, v: &[f32]) -> Self {
        self.attr(AttributeProto { floats: v.to_vec(), ..attribute(name, AttributeType::Floats) })
    }
    fn string(self, name: &str, v: &str) -> Self {
        self.attr(AttributeProto { s: Some(v.as_bytes().to_vec()), ..attribute(name, AttributeType::String) })
    }
    fn tensor(self, name: &str, t: TensorProto) -> Self {
        self.attr(AttributeProto { t: Some(t), ..attribute(name, AttributeType::Tensor) })
    }
}

impl NodeExt for NodeProto {
    fn attr(mut self, a: AttributeProto) -> Self {
        self.attribute.push(a);
        self
    }
    fn named(mut self, name: &str) -> Self {
        self.name = Some(name.into());
        self
    }
}

pub fn tensor_f32(name: &str, dims: &[i64], data: &[f32]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(F32),
        float_data: data.to_vec(),
        ..Default::default()
    }
}

pub fn tensor_i64(name: &str, dims: &[i64], data: &[i64]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(I64),
        int64_data: data.to_vec(),
        ..Default::default()
    }
}

/// Raw little-endian data of any element type.
pub fn tensor_raw(name: &str, dims: &[i64], data_type: i32, raw: Vec<u8>) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(data_type),
        raw_data: Some(raw),
        ..Default::default()
    }
}

/// A tensor value-info; `dims` is comma-separated: numbers are fixed, `?` unknown, other
/// words named (`"N,3,?,?"`); the empty string is rank 0.
pub fn value_info(name: &str, elem_type: i32, dims: &str) -> ValueInfoProto {
    let dim = dims
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| Dimension {
            value: match d {
                "?" => None,
                d => Some(match d.parse::<i64>() {
                    Ok(v) => dimension::Value::DimValue(v),
                    Err(_) => dimension::Value::DimParam(d.into()),
                }),
            },
            ..Default::default()
        })
        .collect();
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(TensorTypeProto {
                elem_type: Some(elem_type),
                shape: Some(TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A graph under construction.
#[derive(Default, Debug)]
pub struct Graph {
    pub graph: GraphProto,
}

impl Graph {
    pub fn new() -> Graph {
        Graph { graph: GraphProto { name: Some("test".into()), ..Default::default() } }
    }
    pub fn input(mut self, name: &str, elem_type: i32, dims: &str) -> Graph {
        self.graph.input.push(value_info(name, elem_type, dims));
        self
    }
    pub fn init(mut self, t: TensorProto) -> Graph {
        self.graph.initializer.push(t);
        self
    }
    pub fn node(mut self, n: NodeProto) -> Graph {
        self.graph.node.push(n);
        self
    }
    pub fn output(mut self, name: &str) -> Graph {
        self.graph.output.push(ValueInfoProto { name: Some(name.into()), ..Default::default() });
        self
    }
    pub fn model(self, opset: i64) -> ModelProto {
        ModelProto {
            ir_version: Some(8),
            opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(opset) }],
            graph: Some(self.graph),
            ..Default::default()
        }
    }
}

pub fn import(model: &ModelProto) -> Network {
    kiln_onnx::import_bytes(&model.encode_to_vec(), None).unwrap_or_else(|e| panic!("import failed: {e}"))
}

pub fn import_err(model: &ModelProto) -> kiln_onnx::ImportError {
    match kiln_onnx::import_bytes(&model.encode_to_vec(), None) {
        Ok(net) => panic!("import should fail but gave:\n{}", net.dump()),
        Err(e) => e,
    }
}

/// Builds the network for the cpu backend and runs it.
pub fn run_network(net: &Network, inputs: Vec<(&str, HostTensor)>) -> BTreeMap<String, HostTensor> {
    let backend = kiln_cpu::CpuBackend::new();
    let engine = kiln::Builder::new(&backend)
        .build(net, &BuilderConfig::default())
        .unwrap_or_else(|e| panic!("build failed: {e}\n{}", net.dump()));
    let context = ExecutionContext::new(engine, &backend).unwrap_or_else(|e| panic!("prepare failed: {e}"));
    let inputs: HashMap<String, HostTensor> = inputs.into_iter().map(|(n, t)| (n.to_string(), t)).collect();
    context.run(&inputs).unwrap_or_else(|e| panic!("run failed: {e}\n{}", net.dump()))
}

/// Imports and runs a model; returns output `name`.
pub fn run(model: &ModelProto, inputs: Vec<(&str, HostTensor)>, name: &str) -> HostTensor {
    let net = import(model);
    let mut outputs = run_network(&net, inputs);
    outputs.remove(name).unwrap_or_else(|| panic!("no output `{name}` in {:?}", outputs.keys().collect::<Vec<_>>()))
}

pub fn f32s(shape: &[usize], values: &[f32]) -> HostTensor {
    HostTensor::from_f32(shape.to_vec(), values.to_vec()).expect("length matches shape")
}

pub fn i64s(shape: &[usize], values: &[i64]) -> HostTensor {
    HostTensor::from_i64(shape.to_vec(), values.to_vec()).expect("length matches shape")
}

/// `0, 1, 2, …` as f32 of the given shape.
pub fn iota(shape: &[usize]) -> HostTensor {
    let n: usize = shape.iter().product();
    f32s(shape, &(0..n).map(|i| i as f32).collect::<Vec<_>>())
}

/// Checks shape and values (absolute + relative tolerance).
pub fn assert_close(actual: &HostTensor, shape: &[usize], expected: &[f64], tolerance: f64) {
    assert_eq!(actual.shape(), shape, "shape of {actual:?}");
    let values = actual.to_f64_vec();
    assert_eq!(values.len(), expected.len(), "element count of {actual:?}");
    for (i, (a, e)) in values.iter().zip(expected).enumerate() {
        let ok = (a - e).abs() <= tolerance * (1.0 + e.abs()) || (a.is_nan() && e.is_nan());
        assert!(ok, "element {i}: got {a}, expected {e}\nactual: {values:?}\nexpected: {expected:?}");
    }
}

pub fn assert_i64(actual: &HostTensor, shape: &[usize], expected: &[i64]) {
    assert_eq!(actual.shape(), shape, "shape of {actual:?}");
    assert_eq!(actual.to_i64_vec().expect("integer tensor"), expected);
}

pub fn assert_bool(actual: &HostTensor, shape: &[usize], expected: &[bool]) {
    assert_eq!(actual.shape(), shape);
    match actual.data() {
        TensorData::Bool(v) => assert_eq!(v, expected),
        other => panic!("expected bool, got {other:?}"),
    }
}

/// The named tensors in `prefix_0.pb`, `prefix_1.pb`, … of a folder (ONNX test-data layout).
pub fn pb_tensors(dir: &std::path::Path, prefix: &str) -> Vec<(String, HostTensor)> {
    (0..)
        .map(|i| dir.join(format!("{prefix}_{i}.pb")))
        .take_while(|p| p.exists())
        .map(|p| {
            let bytes = std::fs::read(&p).expect("read tensor file");
            let proto = TensorProto::decode(bytes.as_slice()).expect("decode tensor file");
            let tensor = kiln_onnx::tensor_from_proto(&proto, None).expect("convert tensor");
            (proto.name().to_string(), tensor)
        })
        .collect()
}

/// A Q/DQ model of `tests/qdq_models/<name>`: the network, its inputs by name and the (one)
/// output onnxruntime gave for them.
pub fn qdq_fixture(name: &str) -> (Network, HashMap<String, HostTensor>, HostTensor) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/qdq_models").join(name);
    let net = kiln_onnx::import_file(&dir.join("model.onnx")).expect("import");
    let mut outputs = pb_tensors(&dir, "output");
    assert_eq!(outputs.len(), 1, "{name}: one output");
    (net, pb_tensors(&dir, "input").into_iter().collect(), outputs.remove(0).1)
}

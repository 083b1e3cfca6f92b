//! What an ONNX model declares, read from its protobuf alone (no import, no external data
//! file): value types, opsets, op counts, initializer sizes. For `kiln inspect MODEL.onnx`.

use kiln_onnx::proto::tensor_proto::{DataLocation, DataType as OnnxType};
use kiln_onnx::proto::tensor_shape_proto::dimension::Value as DimValue;
use kiln_onnx::proto::type_proto::Value as TypeValue;
use kiln_onnx::proto::{GraphProto, ModelProto, TensorProto, ValueInfoProto};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashSet};

/// The default ONNX domain's name in reports (models may spell it "" or "ai.onnx").
const DEFAULT_DOMAIN: &str = "ai.onnx";

/// `Relu` in the default domain, `com.example.Warp` in another.
pub fn qualified(domain: &str, op: &str) -> String {
    if domain == DEFAULT_DOMAIN {
        op.to_string()
    } else {
        format!("{domain}.{op}")
    }
}

pub fn domain_name(domain: &str) -> String {
    if domain.is_empty() { DEFAULT_DOMAIN } else { domain }.to_string()
}

/// Imported opsets, `(domain, version)` in the model's order.
pub fn opsets(model: &ModelProto) -> Vec<(String, i64)> {
    model.opset_import.iter().map(|o| (domain_name(o.domain()), o.version())).collect()
}

/// Graph inputs less those an initializer provides (they are constants, not inputs).
pub fn graph_inputs(graph: &GraphProto) -> Vec<&ValueInfoProto> {
    let constants: HashSet<&str> = graph.initializer.iter().map(TensorProto::name).collect();
    graph.input.iter().filter(|i| !constants.contains(i.name())).collect()
}

/// Main-graph nodes per `(domain, op)`, most used first (subgraph bodies are counted in
/// their If or Loop node, as the capability report checks them).
pub fn op_histogram(graph: &GraphProto) -> Vec<((String, String), usize)> {
    let mut counts: BTreeMap<(String, String), usize> = BTreeMap::new();
    for node in &graph.node {
        *counts.entry((domain_name(node.domain()), node.op_type().to_string())).or_default() += 1;
    }
    let mut ops: Vec<_> = counts.into_iter().collect();
    ops.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    ops
}

enum Declared<'a> {
    /// `dims`: `None` where no shape is declared; a dim is `None` where it is unknown.
    Tensor { dtype: String, dims: Option<Vec<Option<&'a DimValue>>> },
    /// A sequence, map, optional, sparse tensor or opaque value.
    Other(&'static str),
    Undeclared,
}

fn declared(info: &ValueInfoProto) -> Declared<'_> {
    match info.r#type.as_ref().and_then(|t| t.value.as_ref()) {
        Some(TypeValue::TensorType(t)) => Declared::Tensor {
            dtype: elem_type_name(t.elem_type()),
            dims: t.shape.as_ref().map(|s| s.dim.iter().map(|d| d.value.as_ref()).collect()),
        },
        Some(TypeValue::SequenceType(_)) => Declared::Other("sequence"),
        Some(TypeValue::MapType(_)) => Declared::Other("map"),
        Some(TypeValue::OptionalType(_)) => Declared::Other("optional"),
        Some(TypeValue::SparseTensorType(_)) => Declared::Other("sparse tensor"),
        Some(TypeValue::OpaqueType(_)) => Declared::Other("opaque"),
        None => Declared::Undeclared,
    }
}

/// `float[N,3,?,?]`; `float (shape not declared)`; `(type not declared)`.
pub fn type_text(info: &ValueInfoProto) -> String {
    match declared(info) {
        Declared::Tensor { dtype, dims: Some(dims) } => {
            let dims: Vec<String> = dims.into_iter().map(dim_text).collect();
            format!("{dtype}[{}]", dims.join(","))
        }
        Declared::Tensor { dtype, dims: None } => format!("{dtype} (shape not declared)"),
        Declared::Other(kind) => kind.to_string(),
        Declared::Undeclared => "(type not declared)".to_string(),
    }
}

fn dim_text(dim: Option<&DimValue>) -> String {
    match dim {
        Some(DimValue::DimValue(n)) => n.to_string(),
        Some(DimValue::DimParam(name)) if !name.is_empty() => name.clone(),
        _ => "?".to_string(),
    }
}

pub fn dtype_name(info: &ValueInfoProto) -> Value {
    match declared(info) {
        Declared::Tensor { dtype, .. } => json!(dtype),
        Declared::Other(kind) => json!(kind),
        Declared::Undeclared => Value::Null,
    }
}

pub fn json_shape(info: &ValueInfoProto) -> Value {
    let Declared::Tensor { dims: Some(dims), .. } = declared(info) else {
        return Value::Null;
    };
    dims.into_iter()
        .map(|d| match d {
            Some(DimValue::DimValue(n)) => json!(n),
            Some(DimValue::DimParam(name)) if !name.is_empty() => json!(name),
            _ => json!(-1),
        })
        .collect()
}

/// `float`, `int64`, … (ONNX's names); `type 99` for a number ONNX does not define.
fn elem_type_name(elem_type: i32) -> String {
    match OnnxType::try_from(elem_type) {
        Ok(t) => t.as_str_name().to_lowercase(),
        Err(_) => format!("type {elem_type}"),
    }
}

/// Initializer count and size. Sizes come from each tensor's type and dims, not from
/// where its data is, so external data files need not exist.
pub struct Initializers {
    pub count: usize,
    pub bytes: u64,
    pub external: usize,
}

impl Initializers {
    pub fn of(graph: &GraphProto) -> Initializers {
        let bytes = graph.initializer.iter().map(tensor_bytes).fold(0u64, u64::saturating_add);
        let external = graph.initializer.iter().filter(|t| t.data_location() == DataLocation::External).count();
        Initializers { count: graph.initializer.len(), bytes, external }
    }
}

/// Bytes of a tensor's values: element count times element size (strings: their bytes).
fn tensor_bytes(t: &TensorProto) -> u64 {
    let Ok(dtype) = OnnxType::try_from(t.data_type()) else { return 0 };
    if dtype == OnnxType::String {
        return t.string_data.iter().map(|s| s.len() as u64).fold(0, u64::saturating_add);
    }
    // A negative dim is malformed: such a tensor counts as empty here (import reports it).
    let elements = t.dims.iter().map(|&d| u64::try_from(d).unwrap_or(0)).fold(1u64, u64::saturating_mul);
    elements.saturating_mul(element_bits(dtype)).div_ceil(8)
}

fn element_bits(dtype: OnnxType) -> u64 {
    use OnnxType::*;
    match dtype {
        Undefined | String => 0,
        Uint2 | Int2 => 2,
        Uint4 | Int4 | Float4e2m1 => 4,
        Float6e2m3 | Float6e3m2 => 6,
        Uint8 | Int8 | Bool | Float8e4m3fn | Float8e4m3fnuz | Float8e5m2 | Float8e5m2fnuz | Float8e8m0 => 8,
        Uint16 | Int16 | Float16 | Bfloat16 => 16,
        Float | Int32 | Uint32 => 32,
        Double | Int64 | Uint64 | Complex64 => 64,
        Complex128 => 128,
    }
}

//! Context-dependent function bodies: ops the standard defines by a body that depends on the
//! node (its attributes, which optional inputs it passes, its input types and ranks), which
//! onnx builds in C++ at model-check time and so cannot ship as a fixed `FunctionProto`
//! (RotaryEmbedding, CausalConvWithState, LinearAttention, FlexAttention), plus ops without a standard body
//! that kiln expands the same way into ops it has (STFT, MaxUnpool, TensorScatter,
//! ConvInteger, MatMulInteger, QLinearConv).
//!
//! kiln writes those bodies here, in Rust (the standard's following the onnx 1.23 builders
//! node for node), and inlines them like the fixed bodies of [`crate::function`]. A body's
//! formal inputs and outputs are the node's (`in{i}`, `out{i}`); its other values are local.

use crate::proto::attribute_proto::AttributeType;
use crate::proto::{
    AttributeProto, FunctionProto, GraphProto, NodeProto, OperatorSetIdProto, TensorProto, ValueInfoProto,
};
use kiln::{DataType, Dim};

mod attention;
mod integer;
mod linear_attention;
mod scatter;
mod sequence_ops;
mod signal;

/// What the body builder knows of one input of the call: its type and dims.
#[derive(Clone, Debug)]
pub(crate) struct InputType {
    pub dtype: DataType,
    pub dims: Vec<Dim>,
}

/// The call being expanded.
pub(crate) struct Call<'a> {
    pub node: &'a NodeProto,
    /// One entry per node input; `None` for an omitted optional input.
    pub inputs: Vec<Option<InputType>>,
    /// The model's default-domain opset (the body imports at no lower one than it needs).
    pub opset: i64,
}

impl Call<'_> {
    pub fn has_input(&self, i: usize) -> bool {
        self.inputs.get(i).is_some_and(Option::is_some)
    }

    pub fn input_type(&self, i: usize) -> Result<&InputType, String> {
        self.inputs.get(i).and_then(Option::as_ref).ok_or_else(|| format!("input #{i} is required"))
    }

    pub fn attribute(&self, name: &str) -> Option<&AttributeProto> {
        self.node.attribute.iter().find(|a| a.name() == name)
    }

    pub fn int(&self, name: &str, default: i64) -> i64 {
        self.attribute(name).and_then(|a| a.i).unwrap_or(default)
    }

    pub fn float(&self, name: &str) -> Option<f32> {
        self.attribute(name).and_then(|a| a.f)
    }

    pub fn string(&self, name: &str, default: &str) -> Result<String, String> {
        match self.attribute(name).and_then(|a| a.s.as_deref()) {
            None => Ok(default.to_string()),
            Some(bytes) => String::from_utf8(bytes.to_vec()).map_err(|_| format!("attribute `{name}` is not UTF-8")),
        }
    }

    pub fn graph(&self, name: &str) -> Option<&GraphProto> {
        self.attribute(name).and_then(|a| a.g.as_ref())
    }
}

/// A builder that expands one op; errors say what in the call it cannot expand.
type BodyFn = fn(&Call, &mut Body) -> Result<(), String>;

/// The context-dependent body builder of `op_type` in `domain` (`""` = ai.onnx) at `opset`.
fn builder(domain: &str, op_type: &str, opset: i64) -> Option<(BodyFn, i64)> {
    Some(match (domain, op_type) {
        ("", "RotaryEmbedding") if opset >= 23 => (sequence_ops::rotary_embedding, 23),
        ("", "ConvInteger") if opset >= 10 => (integer::conv_integer, 10),
        ("", "MatMulInteger") if opset >= 10 => (integer::matmul_integer, 10),
        ("", "QLinearConv") if opset >= 10 => (integer::qlinear_conv, 13),
        ("", "MaxUnpool") if opset >= 9 => (scatter::max_unpool, 22),
        ("", "TensorScatter") if opset >= 24 => (scatter::tensor_scatter, 24),
        ("", "STFT") if opset >= 17 => (signal::stft, 20),
        ("", "LinearAttention") if opset >= 27 => (linear_attention::linear_attention, 27),
        ("", "CausalConvWithState") if opset >= 27 => (sequence_ops::causal_conv_with_state, 27),
        ("ai.onnx.preview", "FlexAttention") if opset >= 1 => (attention::flex_attention, 23),
        _ => return None,
    })
}

/// Whether kiln can expand `op_type` of `domain` at `opset` through a context-dependent body.
pub(crate) fn has_body(domain: &str, op_type: &str, opset: i64) -> bool {
    builder(domain, op_type, opset).is_some()
}

/// The body of `call` as a function whose formal inputs and outputs are `in{i}` / `out{i}`.
pub(crate) fn body(domain: &str, call: &Call) -> Result<FunctionProto, String> {
    let op_type = call.node.op_type();
    let opset = if domain.is_empty() { call.opset } else { 1 };
    let (build, body_opset) = builder(domain, op_type, opset).ok_or_else(|| format!("{op_type} has no body"))?;
    let mut body = Body::default();
    build(call, &mut body)?;
    Ok(FunctionProto {
        name: Some(op_type.to_string()),
        input: (0..call.node.input.len()).map(formal_input).collect(),
        output: (0..call.node.output.len()).map(formal_output).collect(),
        node: body.nodes,
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(body_opset.max(call.opset)),
        }],
        ..Default::default()
    })
}

/// The body's name for the call's input `i`.
pub(crate) fn formal_input(i: usize) -> String {
    format!("in{i}")
}

/// The body's name for the call's output `i`.
pub(crate) fn formal_output(i: usize) -> String {
    format!("out{i}")
}

/// The nodes of a body being written.
#[derive(Default)]
pub(crate) struct Body {
    nodes: Vec<NodeProto>,
    counter: usize,
    /// Starts every local name (subgraph bodies use one so as not to shadow the body's).
    prefix: String,
}

impl Body {
    /// The body of a subgraph (a Scan body): its local names start with `prefix`.
    pub fn nested(prefix: &str) -> Body {
        Body { prefix: prefix.to_string(), ..Body::default() }
    }

    /// This body as a graph attribute with the given formal inputs and outputs.
    pub fn into_graph(self, name: &str, inputs: &[&str], outputs: &[&str]) -> GraphProto {
        let value = |n: &&str| ValueInfoProto { name: Some(n.to_string()), ..Default::default() };
        GraphProto {
            name: Some(name.to_string()),
            node: self.nodes,
            input: inputs.iter().map(value).collect(),
            output: outputs.iter().map(value).collect(),
            ..Default::default()
        }
    }

    /// A fresh local value name.
    fn local(&mut self, hint: &str) -> String {
        self.counter += 1;
        format!("{}{hint}_{}", self.prefix, self.counter)
    }

    /// Adds a node with the given outputs.
    pub fn node_into(&mut self, op: &str, inputs: &[&str], outputs: &[&str], attrs: Vec<AttributeProto>) {
        self.nodes.push(NodeProto {
            op_type: Some(op.to_string()),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            attribute: attrs,
            ..Default::default()
        });
    }

    /// Adds a single-output node and returns its output's name.
    pub fn op(&mut self, op: &str, inputs: &[&str], attrs: Vec<AttributeProto>) -> String {
        let out = self.local(op);
        self.node_into(op, inputs, &[&out], attrs);
        out
    }

    /// Adds an `n`-output node and returns the outputs' names.
    pub fn op_n(&mut self, op: &str, inputs: &[&str], n: usize, attrs: Vec<AttributeProto>) -> Vec<String> {
        let outs: Vec<String> = (0..n).map(|_| self.local(op)).collect();
        let refs: Vec<&str> = outs.iter().map(String::as_str).collect();
        self.node_into(op, inputs, &refs, attrs);
        outs
    }

    /// A 1-D i64 constant.
    pub fn ints(&mut self, values: &[i64]) -> String {
        let t = TensorProto {
            dims: vec![values.len() as i64],
            data_type: Some(onnx_type(DataType::I64)),
            int64_data: values.to_vec(),
            ..Default::default()
        };
        self.op("Constant", &[], vec![tensor_attr("value", t)])
    }

    /// A 0-D f32 constant.
    pub fn scalar_f32(&mut self, value: f32) -> String {
        let t =
            TensorProto { data_type: Some(onnx_type(DataType::F32)), float_data: vec![value], ..Default::default() };
        self.op("Constant", &[], vec![tensor_attr("value", t)])
    }

    /// Inlines a graph attribute (a FlexAttention score or probability modifier): its inputs
    /// read `inputs`, its initializers become constants, its outputs are returned. Its own
    /// value names get a prefix so that they cannot clash with the body's.
    pub fn inline_graph(&mut self, graph: &GraphProto, inputs: &[&str]) -> Result<Vec<String>, String> {
        if graph.input.len() != inputs.len() {
            return Err(format!(
                "graph `{}` takes {} inputs, expected {}",
                graph.name(),
                graph.input.len(),
                inputs.len()
            ));
        }
        self.counter += 1;
        let prefix = format!("g{}/", self.counter);
        let mut local: std::collections::HashMap<String, String> = std::collections::HashMap::new();
        for (formal, actual) in graph.input.iter().zip(inputs) {
            local.insert(formal.name().to_string(), actual.to_string());
        }
        for init in &graph.initializer {
            let name = format!("{prefix}{}", init.name());
            self.node_into("Constant", &[], &[&name], vec![tensor_attr("value", init.clone())]);
            local.insert(init.name().to_string(), name);
        }
        for n in &graph.node {
            for o in n.output.iter().filter(|o| !o.is_empty()) {
                local.insert(o.clone(), format!("{prefix}{o}"));
            }
        }
        let rename = |v: &str| local.get(v).cloned().unwrap_or_else(|| v.to_string());
        for n in &graph.node {
            if n.attribute.iter().any(|a| a.g.is_some() || !a.graphs.is_empty()) {
                return Err(format!("graph `{}` holds a node with a subgraph", graph.name()));
            }
            let mut renamed = n.clone();
            renamed.name = None;
            renamed.input = n.input.iter().map(|i| if i.is_empty() { i.clone() } else { rename(i) }).collect();
            renamed.output = n.output.iter().map(|o| rename(o)).collect();
            self.nodes.push(renamed);
        }
        Ok(graph.output.iter().map(|o| rename(o.name())).collect())
    }
}

/// The ONNX `TensorProto.DataType` code of a kiln type (float and integer types).
pub(crate) fn onnx_type(dtype: DataType) -> i32 {
    match dtype {
        DataType::F32 => 1,
        DataType::U8 => 2,
        DataType::I8 => 3,
        DataType::U16 => 4,
        DataType::I16 => 5,
        DataType::I32 => 6,
        DataType::I64 => 7,
        DataType::Bool => 9,
        DataType::F16 => 10,
        DataType::F64 => 11,
        DataType::U32 => 12,
        DataType::U64 => 13,
        DataType::BF16 => 16,
        // Types added later (fp8, 4-bit): no body here casts to them.
        #[allow(unreachable_patterns)]
        _ => 0,
    }
}

pub(crate) fn int_attr(name: &str, value: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.to_string()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(value),
        ..Default::default()
    }
}

pub(crate) fn ints_attr(name: &str, values: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.to_string()),
        r#type: Some(AttributeType::Ints as i32),
        ints: values.to_vec(),
        ..Default::default()
    }
}

pub(crate) fn graph_attr(name: &str, value: GraphProto) -> AttributeProto {
    AttributeProto {
        name: Some(name.to_string()),
        r#type: Some(AttributeType::Graph as i32),
        g: Some(value),
        ..Default::default()
    }
}

pub(crate) fn tensor_attr(name: &str, value: TensorProto) -> AttributeProto {
    AttributeProto {
        name: Some(name.to_string()),
        r#type: Some(AttributeType::Tensor as i32),
        t: Some(value),
        ..Default::default()
    }
}

/// `Cast` to `dtype`.
pub(crate) fn to(dtype: DataType) -> Vec<AttributeProto> {
    vec![int_attr("to", onnx_type(dtype) as i64)]
}

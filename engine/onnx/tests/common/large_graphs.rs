//! ONNX models with many nodes, for checking that import and build grow about linearly with
//! graph size (issue #25). Shared by the large-graph tests and the `graph_size` benchmark,
//! which includes this file by path.

use kiln_onnx::proto::tensor_proto::DataType as OnnxType;
use kiln_onnx::proto::tensor_shape_proto::{dimension, Dimension};
use kiln_onnx::proto::type_proto::{self, Tensor as TensorTypeProto};
use kiln_onnx::proto::{
    GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};

/// Every generated model computes on one `[1, WIDTH]` f32 input.
pub const WIDTH: i64 = 4;

/// The shapes of graph the generators make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LargeGraph {
    /// `x → Relu → Relu → … → y`.
    ReluChain,
    /// `x → Add(c) → Mul(x) → Sub(c) → Add(x) → …`: a constant or the graph input as the
    /// second operand, alternating, so neither folding nor fusion removes the chain.
    ArithmeticChain,
    /// Branches of `Add(c_b) → Relu` from the input (a constant of its own per branch, so
    /// no branch is a common subexpression of another), summed pairwise by a tree of Adds,
    /// the sums left over at each level joined by one Concat.
    Wide,
}

impl LargeGraph {
    pub const ALL: [LargeGraph; 3] = [LargeGraph::ReluChain, LargeGraph::ArithmeticChain, LargeGraph::Wide];

    pub fn name(self) -> &'static str {
        match self {
            LargeGraph::ReluChain => "relu_chain",
            LargeGraph::ArithmeticChain => "add_mul_sub_chain",
            LargeGraph::Wide => "wide",
        }
    }

    /// A model of about `nodes` nodes.
    pub fn model(self, nodes: usize) -> ModelProto {
        match self {
            LargeGraph::ReluChain => relu_chain(nodes),
            LargeGraph::ArithmeticChain => arithmetic_chain(nodes),
            LargeGraph::Wide => wide(nodes),
        }
    }
}

fn node(op_type: &str, inputs: &[&str], output: &str) -> NodeProto {
    NodeProto {
        op_type: Some(op_type.into()),
        name: Some(format!("{op_type}_{output}")),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.to_string()],
        ..Default::default()
    }
}

fn f32_value(name: &str, dims: &[i64]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|&d| Dimension { value: Some(dimension::Value::DimValue(d)), ..Default::default() })
        .collect();
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(TensorTypeProto {
                elem_type: Some(OnnxType::Float as i32),
                shape: Some(TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn constant(name: &str, value: f32) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: vec![1, WIDTH],
        data_type: Some(OnnxType::Float as i32),
        float_data: vec![value; WIDTH as usize],
        ..Default::default()
    }
}

fn model(nodes: Vec<NodeProto>, initializer: Vec<TensorProto>, output: &str, output_dims: &[i64]) -> ModelProto {
    let graph = GraphProto {
        name: Some("large".into()),
        node: nodes,
        initializer,
        input: vec![f32_value("x", &[1, WIDTH])],
        output: vec![f32_value(output, output_dims)],
        ..Default::default()
    };
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(17) }],
        graph: Some(graph),
        ..Default::default()
    }
}

fn value(i: usize) -> String {
    format!("v{i}")
}

pub fn relu_chain(nodes: usize) -> ModelProto {
    let mut previous = "x".to_string();
    let chain = (0..nodes)
        .map(|i| {
            let n = node("Relu", &[&previous], &value(i));
            previous = value(i);
            n
        })
        .collect();
    model(chain, Vec::new(), &previous, &[1, WIDTH])
}

pub fn arithmetic_chain(nodes: usize) -> ModelProto {
    let mut previous = "x".to_string();
    let chain = (0..nodes)
        .map(|i| {
            let op = ["Add", "Mul", "Sub"][i % 3];
            let other = if i % 2 == 0 { "c" } else { "x" };
            let n = node(op, &[&previous, other], &value(i));
            previous = value(i);
            n
        })
        .collect();
    model(chain, vec![constant("c", 0.5)], &previous, &[1, WIDTH])
}

pub fn wide(nodes: usize) -> ModelProto {
    // Per branch: Relu, Add, and about one Add of the summing tree.
    let branches = (nodes / 3).max(2);
    let mut graph = Vec::with_capacity(3 * branches + 1);
    let mut constants = Vec::with_capacity(branches);
    let mut level: Vec<String> = (0..branches)
        .map(|b| {
            let (c, add, relu) = (format!("c{b}"), format!("a{b}"), format!("r{b}"));
            constants.push(constant(&c, b as f32));
            graph.push(node("Add", &["x", &c], &add));
            graph.push(node("Relu", &[&add], &relu));
            relu
        })
        .collect();
    let mut joined = Vec::new();
    let mut next_sum = 0;
    while level.len() > 1 {
        let mut next = Vec::with_capacity(level.len().div_ceil(2));
        for pair in level.chunks(2) {
            match pair {
                [a, b] => {
                    let sum = format!("s{next_sum}");
                    next_sum += 1;
                    graph.push(node("Add", &[a, b], &sum));
                    next.push(sum);
                }
                [odd] => joined.push(odd.clone()),
                _ => unreachable!("chunks(2) yields one or two"),
            }
        }
        level = next;
    }
    joined.extend(level);
    let mut concat = node("Concat", &joined.iter().map(String::as_str).collect::<Vec<_>>(), "y");
    concat.attribute.push(kiln_onnx::proto::AttributeProto {
        name: Some("axis".into()),
        r#type: Some(kiln_onnx::proto::attribute_proto::AttributeType::Int as i32),
        i: Some(0),
        ..Default::default()
    });
    graph.push(concat);
    model(graph, constants, "y", &[joined.len() as i64, WIDTH])
}

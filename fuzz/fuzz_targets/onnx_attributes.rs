//! One ONNX node with hostile attributes and constant inputs: the fuzz bytes pick the op,
//! the data input's shape, every integer attribute (from edge values: 0, -1, i32 and i64
//! extremes, huge sizes) and the values of its integer inputs. Import, build for cpu
//! under a 1 MiB memory budget and run must each give an error or a result, never a
//! panic, abort or hang. Raw-byte fuzzing (`onnx_import`) rarely gets this far: a model
//! must decode and type-check before an attribute's range matters.
#![no_main]

use kiln_onnx::proto::attribute_proto::AttributeType;
use kiln_onnx::proto::tensor_proto::DataType as OnnxType;
use kiln_onnx::proto::tensor_shape_proto::{dimension, Dimension};
use kiln_onnx::proto::type_proto::{Tensor as TensorTypeProto, Value as TypeValue};
use kiln_onnx::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto,
    ValueInfoProto,
};
use libfuzzer_sys::fuzz_target;
use std::collections::HashMap;

/// An input of the node: the float data input, a float weight, int64 values or a scalar.
#[derive(Clone, Copy)]
enum Input {
    Data,
    Weight,
    Ints,
    Scalar,
}

use Input::*;

/// Ops, their inputs and their integer(-list) attributes.
const OPS: &[(&str, &[Input], &[&str])] = &[
    ("Conv", &[Data, Weight], &["pads", "strides", "dilations", "group", "kernel_shape"]),
    ("ConvTranspose", &[Data, Weight], &["pads", "strides", "dilations", "group", "output_padding", "output_shape"]),
    ("MaxPool", &[Data], &["kernel_shape", "pads", "strides", "dilations", "ceil_mode", "storage_order"]),
    ("AveragePool", &[Data], &["kernel_shape", "pads", "strides", "ceil_mode", "count_include_pad"]),
    ("LpPool", &[Data], &["kernel_shape", "pads", "strides", "p"]),
    ("GlobalAveragePool", &[Data], &[]),
    ("DepthToSpace", &[Data], &["blocksize"]),
    ("SpaceToDepth", &[Data], &["blocksize"]),
    ("LRN", &[Data], &["size"]),
    ("Reshape", &[Data, Ints], &["allowzero"]),
    ("Expand", &[Data, Ints], &[]),
    ("Tile", &[Data, Ints], &[]),
    ("Pad", &[Data, Ints], &[]),
    ("Slice", &[Data, Ints, Ints, Ints, Ints], &[]),
    ("Transpose", &[Data], &["perm"]),
    ("Flatten", &[Data], &["axis"]),
    ("Squeeze", &[Data, Ints], &[]),
    ("Unsqueeze", &[Data, Ints], &[]),
    ("Concat", &[Data, Data], &["axis"]),
    ("Split", &[Data, Ints], &["axis", "num_outputs"]),
    ("Gather", &[Data, Ints], &["axis"]),
    ("ReduceSum", &[Data, Ints], &["keepdims", "noop_with_empty_axes"]),
    ("ReduceMax", &[Data], &["axes", "keepdims"]),
    ("ArgMax", &[Data], &["axis", "keepdims", "select_last_index"]),
    ("Softmax", &[Data], &["axis"]),
    ("CumSum", &[Data, Scalar], &["exclusive", "reverse"]),
    ("TopK", &[Data, Ints], &["axis", "largest", "sorted"]),
    ("OneHot", &[Ints, Scalar, Weight], &["axis"]),
    ("Range", &[Scalar, Scalar, Scalar], &[]),
    ("ConstantOfShape", &[Ints], &[]),
    ("Resize", &[Data, Ints, Weight, Ints], &["antialias", "exclude_outside"]),
    ("GridSample", &[Data, Weight], &["align_corners"]),
    ("Einsum", &[Data, Data], &[]),
    ("MatMul", &[Data, Weight], &[]),
    ("Gemm", &[Data, Weight], &["transA", "transB"]),
    ("Trilu", &[Data, Scalar], &["upper"]),
    ("Compress", &[Data, Ints], &["axis"]),
    ("ScatterElements", &[Data, Ints, Weight], &["axis"]),
    ("GatherElements", &[Data, Ints], &["axis"]),
    ("ReverseSequence", &[Data, Ints], &["batch_axis", "time_axis"]),
    ("Shape", &[Data], &["start", "end"]),
    ("Size", &[Data], &[]),
    ("Col2Im", &[Data, Ints, Ints], &["dilations", "pads", "strides"]),
    ("DFT", &[Data, Scalar, Scalar], &["inverse", "onesided"]),
    ("STFT", &[Data, Scalar, Weight, Scalar], &["onesided"]),
];

/// Values an attribute or an int input may take: the edges kernels and shape arithmetic
/// mishandle, and ordinary small values.
const EDGES: &[i64] = &[
    0,
    1,
    2,
    3,
    -1,
    -2,
    4,
    7,
    1 << 16,
    i32::MAX as i64,
    i32::MIN as i64,
    1 << 31,
    1 << 32,
    1_000_000_000,
    i64::MAX,
    i64::MIN,
    -(1 << 40),
    1 << 62,
];

/// Reads the fuzz bytes one choice at a time (zeros once they run out).
struct Choices<'a>(&'a [u8]);

impl Choices<'_> {
    fn byte(&mut self) -> u8 {
        let (&b, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        b
    }

    fn below(&mut self, n: usize) -> usize {
        self.byte() as usize % n.max(1)
    }

    fn edge(&mut self) -> i64 {
        EDGES[self.below(EDGES.len())]
    }

    /// A list of 0..=4 edge values.
    fn edges(&mut self) -> Vec<i64> {
        let len = self.below(5);
        (0..len).map(|_| self.edge()).collect()
    }

    /// Small dims (1..=4 of each, rank 0..=4), so a run stays quick.
    fn dims(&mut self) -> Vec<i64> {
        let rank = self.below(5);
        (0..rank).map(|_| 1 + self.below(4) as i64).collect()
    }
}

fn value_info(name: &str, dims: &[i64]) -> ValueInfoProto {
    let dim = dims.iter().map(|&d| Dimension { value: Some(dimension::Value::DimValue(d)), ..Default::default() });
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(TypeValue::TensorType(TensorTypeProto {
                elem_type: Some(OnnxType::Float as i32),
                shape: Some(TensorShapeProto { dim: dim.collect() }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn attribute(name: &str, values: Vec<i64>) -> AttributeProto {
    let one = values.len() == 1 && !name.ends_with('s') && name != "perm";
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(if one { AttributeType::Int } else { AttributeType::Ints } as i32),
        i: one.then(|| values[0]),
        ints: if one { Vec::new() } else { values },
        ..Default::default()
    }
}

/// The model the choices describe, and the data inputs' shapes.
fn model(c: &mut Choices) -> (ModelProto, Vec<(String, Vec<i64>)>) {
    let (op, inputs, attributes) = OPS[c.below(OPS.len())];
    let mut graph = GraphProto { name: Some("fuzz".into()), ..Default::default() };
    let mut data_inputs = Vec::new();
    let mut names = Vec::new();
    for (i, kind) in inputs.iter().enumerate() {
        let name = format!("in{i}");
        match kind {
            Data => {
                let dims = c.dims();
                graph.input.push(value_info(&name, &dims));
                data_inputs.push((name.clone(), dims));
            }
            Weight => {
                let dims = c.dims();
                let count: i64 = dims.iter().product();
                graph.initializer.push(TensorProto {
                    name: Some(name.clone()),
                    dims,
                    data_type: Some(OnnxType::Float as i32),
                    float_data: (0..count).map(|k| k as f32 * 0.25 - 1.0).collect(),
                    ..Default::default()
                });
            }
            Ints | Scalar => {
                let values = if matches!(kind, Scalar) { vec![c.edge()] } else { c.edges() };
                let dims = if matches!(kind, Scalar) { Vec::new() } else { vec![values.len() as i64] };
                graph.initializer.push(TensorProto {
                    name: Some(name.clone()),
                    dims,
                    data_type: Some(OnnxType::Int64 as i32),
                    int64_data: values,
                    ..Default::default()
                });
            }
        }
        names.push(name);
    }
    let mut node = NodeProto {
        op_type: Some(op.into()),
        input: names,
        output: vec!["out".into()],
        ..Default::default()
    };
    for &name in attributes {
        if c.byte() % 2 == 1 {
            let values = c.edges();
            if !values.is_empty() {
                node.attribute.push(attribute(name, values));
            }
        }
    }
    graph.node.push(node);
    graph.output.push(ValueInfoProto { name: Some("out".into()), ..Default::default() });
    let opset = [11, 13, 17, 18, 21][c.below(5)];
    let model = ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(opset) }],
        graph: Some(graph),
        ..Default::default()
    };
    (model, data_inputs)
}

fuzz_target!(|data: &[u8]| {
    let (model, data_inputs) = model(&mut Choices(data));
    let Ok(network) = kiln_onnx::import_model(&model, None) else { return };
    let backend = kiln_cpu::CpuBackend::new();
    let config = kiln::BuilderConfig { max_memory_bytes: Some(1 << 20), ..kiln::BuilderConfig::default() };
    let Ok(engine) = kiln::Builder::new(&backend).build(&network, &config) else { return };
    let Ok(context) = kiln::ExecutionContext::new(engine, &backend) else { return };
    let feeds: HashMap<String, kiln::HostTensor> = data_inputs
        .into_iter()
        .map(|(name, dims)| {
            let dims: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
            (name, kiln::HostTensor::zeros(kiln::DataType::F32, dims))
        })
        .collect();
    let _ = context.run(&feeds);
});

//! A small ONNX model written through the protobuf types: a convolution whose BatchNorm
//! parameters are initializers (as exporters write it without constant folding).

use kiln_onnx::proto::tensor_proto::DataType as OnnxType;
use kiln_onnx::proto::{attribute_proto, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto};
use prost::Message;

/// Conv → BatchNormalization → Relu → GlobalAveragePool → Flatten → Gemm, the BatchNorm's
/// parameters as initializers (as exporters write it without constant folding).
/// Output channels of the convolution: its filter has more than
/// `kiln::refit::STRIP_MIN_ELEMENTS` elements, so a weight-stripped engine leaves it out.
pub const C: i64 = 48;

pub fn conv_bn_model(seed: f32) -> Vec<u8> {
    let init = |name: &str, dims: &[i64], f: &dyn Fn(usize) -> f32| {
        let n = dims.iter().product::<i64>() as usize;
        TensorProto {
            name: Some(name.into()),
            dims: dims.to_vec(),
            data_type: Some(OnnxType::Float as i32),
            float_data: (0..n).map(f).collect(),
            ..Default::default()
        }
    };
    let node = |op: &str, inputs: &[&str], output: &str, attribute: Vec<AttributeProto>| NodeProto {
        op_type: Some(op.into()),
        name: Some(format!("{output}_node")),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        attribute,
        ..Default::default()
    };
    let ints = |name: &str, v: &[i64]| AttributeProto {
        name: Some(name.into()),
        r#type: Some(attribute_proto::AttributeType::Ints as i32),
        ints: v.to_vec(),
        ..Default::default()
    };
    let wave = move |scale: f32| move |i: usize| ((i as f32 + seed) * scale).sin() * 0.5;
    let graph = GraphProto {
        name: Some("conv_bn".into()),
        node: vec![
            node("Conv", &["x", "conv.weight"], "c", vec![ints("pads", &[1, 1, 1, 1])]),
            node("BatchNormalization", &["c", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"], "b", vec![]),
            node("Relu", &["b"], "r", vec![]),
            node("GlobalAveragePool", &["r"], "p", vec![]),
            node("Flatten", &["p"], "f", vec![]),
            node("Gemm", &["f", "fc.weight", "fc.bias"], "y", vec![AttributeProto {
                name: Some("transB".into()),
                r#type: Some(attribute_proto::AttributeType::Int as i32),
                i: Some(1),
                ..Default::default()
            }]),
        ],
        initializer: vec![
            init("conv.weight", &[C, 3, 3, 3], &wave(0.7)),
            init("bn.weight", &[C], &|i| 1.0 + 0.1 * i as f32 + seed * 0.01),
            init("bn.bias", &[C], &wave(1.3)),
            init("bn.running_mean", &[C], &wave(0.3)),
            init("bn.running_var", &[C], &|i| 0.5 + 0.2 * i as f32 + seed * 0.05),
            init("fc.weight", &[4, C], &wave(0.9)),
            init("fc.bias", &[4], &wave(2.1)),
        ],
        input: vec![value_info("x", &[2, 3, 6, 6])],
        output: vec![value_info("y", &[2, 4])],
        ..Default::default()
    };
    let opset_import = vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(17) }];
    ModelProto { ir_version: Some(8), opset_import, graph: Some(graph), ..Default::default() }.encode_to_vec()
}

fn value_info(name: &str, dims: &[i64]) -> kiln_onnx::proto::ValueInfoProto {
    use kiln_onnx::proto::tensor_shape_proto::{dimension, Dimension};
    use kiln_onnx::proto::type_proto::{self, Tensor};
    use kiln_onnx::proto::{TensorShapeProto, TypeProto, ValueInfoProto};
    let dim = dims.iter().map(|&d| Dimension { value: Some(dimension::Value::DimValue(d)), ..Default::default() }).collect();
    let tensor = Tensor { elem_type: Some(OnnxType::Float as i32), shape: Some(TensorShapeProto { dim }) };
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto { value: Some(type_proto::Value::TensorType(tensor)), ..Default::default() }),
        ..Default::default()
    }
}


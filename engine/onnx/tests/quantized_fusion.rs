//! Q/DQ fusion on the explicit-quantization fixture `qdq_conv_matmul_u8s8` (as onnxruntime's
//! `quantize_static` writes a network; `tests/fixtures.rs` checks its outputs against
//! onnxruntime exactly): which layers become integer layers, and that a backend without
//! integer layers keeps the Q/DQ graph.

use kiln::passes::{PassContext, Pipeline};
use kiln::{Builder, BuilderConfig, DataType, LayerKind, Network, QuantizedAnchor};
use std::path::Path;

fn fixture() -> Network {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/qdq_conv_matmul_u8s8/model.onnx");
    kiln_onnx::import_file(&path).expect("import")
}

fn quantized_layers(net: &Network) -> Vec<(String, kiln::QuantizedParams)> {
    net.layers()
        .iter()
        .filter_map(|l| match &l.kind {
            LayerKind::Quantized(p) => Some((l.name.clone(), p.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn the_convolution_and_the_gemm_become_integer_layers_ending_in_uint8() {
    let backend = kiln_cpu::CpuBackend::new();
    let engine = Builder::new(&backend).build(&fixture(), &BuilderConfig::default()).expect("build");
    let net = engine.network();
    let fused = quantized_layers(net);
    assert_eq!(fused.len(), 2, "{}", net.dump());
    let (conv_name, conv) = &fused[0];
    assert!(matches!(conv.anchor, QuantizedAnchor::Convolution(_)), "{conv:?}");
    assert!(conv.relu && conv.output == DataType::U8, "{conv:?}");
    // The name lists what was absorbed: the convolution, the ReLU and the QuantizeLinear.
    assert_eq!(conv_name.matches(" + ").count(), 2, "{conv_name}");
    let (_, gemm) = &fused[1];
    assert!(matches!(gemm.anchor, QuantizedAnchor::MatrixMultiply { .. }), "{gemm:?}");
    assert!(!gemm.relu && gemm.output == DataType::U8, "{gemm:?}");
    // Both biases are the int32 tensors themselves, added to the accumulator.
    for (name, _) in &fused {
        let layer = net.layers().iter().find(|l| &l.name == name).expect("layer");
        let bias = layer.inputs[kiln::QuantizedParams::BIAS].expect("bias");
        assert_eq!(net.tensor(bias).dtype, DataType::I32, "{name}");
    }
    // No float convolution or product is left, and no DequantizeLinear of weights.
    for l in net.layers() {
        assert!(!matches!(l.kind, LayerKind::Convolution(_) | LayerKind::MatrixMultiply { .. }), "{} left float", l.name);
    }
}

#[test]
fn without_integer_layers_the_qdq_graph_stays_as_written() {
    let net = fixture();
    let context = PassContext { folding_backend: None, quantized_layers: false };
    let out = Pipeline::standard().run(&net, &context).expect("passes");
    assert!(quantized_layers(&out).is_empty());
    assert!(out.layers().iter().any(|l| matches!(l.kind, LayerKind::Dequantize { .. })));
}

/// A hand-made (or hostile engine file's) integer layer with wrong slot types is refused with
/// the rule it breaks, never run.
#[test]
fn an_integer_layer_with_float_data_or_missing_scales_is_refused() {
    use kiln::{ConvolutionParams, QuantizedParams as Q};
    let conv = QuantizedAnchor::Convolution(ConvolutionParams {
        groups: 1,
        strides: vec![1, 1],
        dilations: vec![1, 1],
        pre_padding: vec![0, 0],
        post_padding: vec![0, 0],
    });
    let params = Q { anchor: conv, relu: false, output: DataType::F32 };
    let attempt = |x_type: DataType, with_scales: bool| {
        let mut net = Network::new("hand-made");
        let x = net.add_input("x", x_type, &[1usize, 2, 4, 4][..]).expect("input");
        let w = net.add_input("w", DataType::I8, &[3usize, 2, 1, 1][..]).expect("input");
        let s = net.add_input("s", DataType::F32, &[1usize][..]).expect("input");
        let mut slots = vec![None; Q::SLOTS];
        slots[Q::X] = Some(x);
        slots[Q::W] = Some(w);
        if with_scales {
            slots[Q::X_SCALE] = Some(s);
            slots[Q::W_SCALE] = Some(s);
        }
        net.add_layer("q", LayerKind::Quantized(params.clone()), slots).map(|_| ()).map_err(|e| e.to_string())
    };
    assert_eq!(attempt(DataType::U8, true), Ok(()));
    let float = attempt(DataType::F32, true).expect_err("float data");
    assert!(float.contains("int8 or uint8"), "{float}");
    let unscaled = attempt(DataType::U8, false).expect_err("no scales");
    assert!(unscaled.contains("scale"), "{unscaled}");
}

//! Q/DQ fusion of FP8 (float8 e4m3fn) products, the form ModelOpt and PyTorch's FP8 export
//! write: `Q(x) → DQ → MatMul ← DQ(w)` becomes one integer layer with float8 operands and a
//! float output, which the cpu backend sums exactly (f64) and scales per output column.

use kiln::passes::{PassContext, Pipeline};
use kiln::{DataType, ElementwiseOp, HostTensor, LayerKind, MatrixOp, Network, Shape, TensorData, TensorId, F8E4M3FN};

const M: usize = 5;
const K: usize = 32;
const N: usize = 16;

fn constant(net: &mut Network, name: &str, t: HostTensor) -> TensorId {
    let w = net.add_weights(t);
    let layer = net.add_layer(name, LayerKind::Constant { weights: w }, vec![]).expect("constant");
    net.output(layer, 0)
}

fn fp8(values: impl IntoIterator<Item = f32>) -> TensorData {
    TensorData::F8E4M3FN(values.into_iter().map(|v| F8E4M3FN::from_f32(v, true)).collect())
}

/// `Q(x) → DQ → MatMul(DQ(w, per-column scales))` with x's zero point `zero`, then what `tail`
/// adds after the product.
fn product(zero: f32, tail: impl Fn(&mut Network, TensorId) -> TensorId) -> Network {
    let mut net = Network::new("fp8 product");
    let x = net.add_input("x", DataType::F32, Shape::fixed(&[M, K])).expect("input");
    let x_scale = constant(&mut net, "x_scale", HostTensor::from_f32(vec![], vec![0.02]).expect("scale"));
    let zero = constant(&mut net, "zero", HostTensor::new(vec![], fp8([zero])).expect("zero"));
    let w_q = constant(&mut net, "w_q", HostTensor::new(vec![K, N], fp8((0..K * N).map(|i| ((i * 37 % 97) as f32 - 48.0) * 3.5))).expect("w"));
    let w_scale = constant(&mut net, "w_scale", HostTensor::from_f32(vec![N], (0..N).map(|j| 0.001 * (1.0 + j as f32)).collect()).expect("scales"));
    let q = net.add_layer("q", LayerKind::Quantize { axis: None, to: DataType::F8E4M3FN }, vec![Some(x), Some(x_scale), Some(zero)]).expect("q");
    let q = net.output(q, 0);
    let dq = net.add_layer("dq", LayerKind::Dequantize { axis: None, to: None }, vec![Some(q), Some(x_scale), Some(zero)]).expect("dq");
    let dq = net.output(dq, 0);
    let dw = net.add_layer("dw", LayerKind::Dequantize { axis: Some(1), to: None }, vec![Some(w_q), Some(w_scale), None]).expect("dw");
    let dw = net.output(dw, 0);
    let mm = net.add_layer("mm", LayerKind::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::None }, vec![Some(dq), Some(dw)]).expect("mm");
    let mm = net.output(mm, 0);
    let y = tail(&mut net, mm);
    net.mark_output(y).expect("output");
    net
}

fn fused(net: &Network) -> Network {
    Pipeline::standard().run(net, &PassContext { folding_backend: None, quantized_layers: true }).expect("passes")
}

fn integer_layers(net: &Network) -> Vec<&kiln::Layer> {
    net.layers().iter().filter(|l| matches!(l.kind, LayerKind::Quantized(_))).collect()
}

fn run(net: &Network) -> Vec<f64> {
    let x = HostTensor::from_f32(vec![M, K], (0..M * K).map(|i| (i as f32 * 0.37).sin() * 5.0).collect()).expect("x");
    let backend = kiln_cpu::CpuBackend::new();
    kiln::Backend::prepare(&backend, net).expect("prepare").execute(&[x]).expect("run").remove(0).to_f64_vec()
}

/// The fused layer's f64 sums, rounded once, against the float graph's f32 products and sums.
fn assert_close(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= 1e-5 * scale, "fused {g} vs float graph {w}");
    }
}

#[test]
fn an_fp8_product_becomes_one_layer_with_float8_operands() {
    let net = product(0.0, |_, y| y);
    let out = fused(&net);
    let layers = integer_layers(&out);
    assert_eq!(layers.len(), 1, "{}", out.dump());
    let LayerKind::Quantized(p) = &layers[0].kind else { unreachable!() };
    assert_eq!(p.output, DataType::F32);
    let slot = |i: usize| layers[0].inputs[i].map(|t| out.tensor(t).dtype);
    assert_eq!((slot(kiln::QuantizedParams::X), slot(kiln::QuantizedParams::W)), (Some(DataType::F8E4M3FN), Some(DataType::F8E4M3FN)));
    assert_eq!(layers[0].inputs[kiln::QuantizedParams::X_ZERO], None, "float8's zero point (0) is dropped");
    assert!(out.layers().iter().any(|l| matches!(l.kind, LayerKind::Quantize { to: DataType::F8E4M3FN, .. })), "x's QuantizeLinear stays");
    assert_close(&run(&out), &run(&net));
}

#[test]
fn an_fp8_bias_stays_float_and_a_following_quantize_stays_a_layer() {
    let net = product(0.0, |net, y| {
        let bias = constant(net, "bias", HostTensor::from_f32(vec![N], (0..N).map(|j| j as f32 * 0.25 - 2.0).collect()).expect("bias"));
        let add = net.add_layer("bias add", LayerKind::Elementwise { op: ElementwiseOp::Sum }, vec![Some(y), Some(bias)]).expect("add");
        let scale = constant(net, "y_scale", HostTensor::from_f32(vec![], vec![0.05]).expect("scale"));
        let q = net.add_layer("q out", LayerKind::Quantize { axis: None, to: DataType::F8E4M3FN }, vec![Some(net.output(add, 0)), Some(scale), None]).expect("q");
        let dq = net.add_layer("dq out", LayerKind::Dequantize { axis: None, to: None }, vec![Some(net.output(q, 0)), Some(scale), None]).expect("dq");
        net.output(dq, 0)
    });
    let out = fused(&net);
    let layers = integer_layers(&out);
    assert_eq!(layers.len(), 1, "{}", out.dump());
    let LayerKind::Quantized(p) = &layers[0].kind else { unreachable!() };
    assert_eq!(p.output, DataType::F32, "an FP8 layer ends in float");
    let bias = layers[0].inputs[kiln::QuantizedParams::BIAS].expect("the Add became the bias");
    assert_eq!(out.tensor(bias).dtype, DataType::F32);
    assert_eq!(out.layers().iter().filter(|l| matches!(l.kind, LayerKind::Quantize { .. })).count(), 2, "{}", out.dump());
    assert_close(&run(&out), &run(&net));
}

/// A float8 zero point other than 0 (ONNX allows only 0 there; a hostile file may hold any)
/// keeps the Q/DQ graph as written.
#[test]
fn a_nonzero_float8_zero_point_is_not_fused() {
    assert!(integer_layers(&fused(&product(1.0, |_, y| y))).is_empty());
}

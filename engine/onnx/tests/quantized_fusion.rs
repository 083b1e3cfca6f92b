//! Q/DQ fusion on the explicit-quantization fixture `qdq_conv_matmul_u8s8` (as onnxruntime's
//! `quantize_static` writes a network; `tests/fixtures.rs` checks its outputs against
//! onnxruntime exactly): which layers become integer layers, and that a backend without
//! integer layers keeps the Q/DQ graph.

use kiln::passes::{PassContext, Pipeline};
use kiln::{Builder, BuilderConfig, DataType, LayerKind, Network, QuantizedAnchor};
use std::path::Path;
#[path = "common/half_first.rs"]
mod half_first;
use half_first::HalfFirstCpu;

fn fixture() -> Network {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/qdq_conv_matmul_u8s8/model.onnx");
    kiln_onnx::import_file(&path).expect("import")
}

/// A Constant layer holding `t`: its output.
fn constant(net: &mut Network, name: &str, t: kiln::HostTensor) -> kiln::TensorId {
    let w = net.add_weights(t);
    let layer = net.add_layer(name, LayerKind::Constant { weights: w }, vec![]).expect("constant");
    net.output(layer, 0)
}

/// A layer of `kind` reading `inputs`: its first output.
fn chain(net: &mut Network, name: &str, kind: LayerKind, inputs: Vec<Option<kiln::TensorId>>) -> kiln::TensorId {
    let l = net.add_layer(name, kind, inputs).expect(name);
    net.output(l, 0)
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
    let params = Q { anchor: conv, relu: false, output: DataType::F32, then: None, lookup: None };
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
    assert!(float.contains("int8, uint8 or float8"), "{float}");
    let mixed = attempt(DataType::F8E4M3FN, true).expect_err("float8 x, int8 w");
    assert!(mixed.contains("both"), "{mixed}");
    let unscaled = attempt(DataType::U8, false).expect_err("no scales");
    assert!(unscaled.contains("scale"), "{unscaled}");
}

/// An FP16 build narrows the Q/DQ region before fusion runs (the DequantizeLinear outputs and
/// the product are f16 then): the product still becomes an integer layer, which rounds its f32
/// result to f16 itself (no Cast after it), and gives the float graph's values to f16 rounding.
#[test]
fn a_qdq_product_narrowed_to_f16_fuses_with_an_f16_output() {
    use half::f16;
    use kiln::{HostTensor, MatrixOp, Shape, TensorData};
    let (m, k, n) = (3usize, 8usize, 4usize);
    let halves = |v: Vec<f32>| TensorData::F16(v.into_iter().map(f16::from_f32).collect());
    let mut net = Network::new("f16 qdq product");
    let x = net.add_input("x", DataType::F16, Shape::fixed(&[m, k])).expect("input");
    let x_scale = constant(&mut net, "x_scale", HostTensor::new(vec![], halves(vec![0.0625])).expect("scale"));
    let w_q = constant(&mut net, "w_q", HostTensor::new(vec![k, n], TensorData::I8((0..k * n).map(|i| (i as i32 * 37 % 255 - 127) as i8).collect())).expect("w"));
    let w_scale = constant(&mut net, "w_scale", HostTensor::new(vec![n], halves(vec![0.01, 0.02, 0.005, 0.04])).expect("scales"));
    let q = net.add_layer("q", LayerKind::Quantize { axis: None, to: DataType::I8 }, vec![Some(x), Some(x_scale), None]).expect("q");
    let q = net.output(q, 0);
    let dq = net.add_layer("dq", LayerKind::Dequantize { axis: None, to: None }, vec![Some(q), Some(x_scale), None]).expect("dq");
    let dq = net.output(dq, 0);
    let dw = net.add_layer("dw", LayerKind::Dequantize { axis: Some(1), to: None }, vec![Some(w_q), Some(w_scale), None]).expect("dw");
    let dw = net.output(dw, 0);
    let mm = net.add_layer("mm", LayerKind::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::None }, vec![Some(dq), Some(dw)]).expect("mm");
    net.mark_output(net.output(mm, 0)).expect("output");
    assert_eq!(net.tensor(dq).dtype, DataType::F16, "the region is f16, as an FP16 build makes it");

    let context = PassContext { folding_backend: None, quantized_layers: true };
    let fused = Pipeline::standard().run(&net, &context).expect("passes");
    let integer = quantized_layers(&fused);
    assert_eq!(integer.len(), 1, "{}", fused.dump());
    assert_eq!(integer[0].1.output, DataType::F16);
    assert!(!fused.layers().iter().any(|l| matches!(l.kind, LayerKind::Cast { .. })), "{}", fused.dump());
    assert_eq!(fused.outputs().iter().map(|&t| fused.tensor(t).dtype).collect::<Vec<_>>(), vec![DataType::F16]);

    let input = HostTensor::new(vec![m, k], halves((0..m * k).map(|i| (i as f32 * 0.7).sin() * 7.0).collect())).expect("x");
    let run = |net: &Network| {
        let backend = kiln_cpu::CpuBackend::new();
        kiln::Backend::prepare(&backend, net).expect("prepare").execute(std::slice::from_ref(&input)).expect("run").remove(0)
    };
    let (got, want) = (run(&fused).to_f64_vec(), run(&net).to_f64_vec());
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() <= 2e-3 * (1.0 + w.abs()), "integer {g} vs float graph {w}");
    }
}

/// An FP16 build fuses the Q/DQ region before narrowing the float layers: its Casts would
/// otherwise stand between the DequantizeLinear layers and the convolution (cuda's Q/DQ
/// ResNet-50 stayed emulated in float that way), and the integer outputs are the same.
#[test]
fn an_fp16_build_still_makes_the_integer_layers() {
    let backend = HalfFirstCpu(kiln_cpu::CpuBackend::new());
    let mut config = BuilderConfig::default();
    config.set_flag(kiln::BuilderFlag::Fp16);
    let half = Builder::new(&backend).build(&fixture(), &config).expect("fp16 build");
    assert_eq!(quantized_layers(half.network()).len(), 2, "{}", half.network().dump());
    let plain = Builder::new(&backend).build(&fixture(), &BuilderConfig::default()).expect("build");
    let x = kiln::HostTensor::from_f32(vec![2, 3, 6, 6], (0..216).map(|i| ((i * 37 % 101) as f32 / 101.0 - 0.5) * 1.6).collect()).expect("x");
    let feeds = std::collections::HashMap::from([("x".to_string(), x)]);
    let run = |engine: kiln::Engine| kiln::ExecutionContext::new(engine, &backend).expect("prepare").run(&feeds).expect("run");
    let (got, want) = (run(half), run(plain));
    for name in ["y1", "y2"] {
        assert_eq!(got[name].data(), want[name].data(), "{name}");
    }
}

/// `Conv → Q → DQ → Relu → Q`, the second QuantizeLinear with the first one's scale and zero
/// point (onnxruntime's form of Conv + Relu): the DequantizeLinear, ReLU and QuantizeLinear are
/// the integer layer's ReLU (`max(q, zero)`), exactly. Power-of-two scales keep the float
/// graph's sums exact, so the fused engine must give its values.
#[test]
fn a_requantized_relu_after_an_integer_layer_becomes_its_relu() {
    use kiln::{ConvolutionParams, HostTensor, Shape, TensorData};
    let mut net = Network::new("conv q dq relu q");
    let x = net.add_input("x", DataType::F32, Shape::fixed(&[1, 4, 5, 5])).expect("input");
    let scalar = |v: f32| HostTensor::from_f32(vec![], vec![v]).expect("scalar");
    let s_in = constant(&mut net, "s_in", scalar(0.5));
    let s_out = constant(&mut net, "s_out", scalar(1.0));
    let zero = constant(&mut net, "zero", HostTensor::new(vec![], TensorData::I8(vec![0])).expect("zero"));
    let w_q = constant(&mut net, "w_q", HostTensor::new(vec![2, 4, 3, 3], TensorData::I8((0..72).map(|i| (i * 29 % 31 - 15) as i8).collect())).expect("w"));
    let w_s = constant(&mut net, "w_s", HostTensor::from_f32(vec![2], vec![0.25, 0.125]).expect("w scale"));
    let q = chain(&mut net, "q_in", LayerKind::Quantize { axis: None, to: DataType::I8 }, vec![Some(x), Some(s_in), Some(zero)]);
    let dq = chain(&mut net, "dq_in", LayerKind::Dequantize { axis: None, to: None }, vec![Some(q), Some(s_in), Some(zero)]);
    let dw = chain(&mut net, "dq_w", LayerKind::Dequantize { axis: Some(0), to: None }, vec![Some(w_q), Some(w_s), None]);
    let p = ConvolutionParams { groups: 1, strides: vec![1, 1], dilations: vec![1, 1], pre_padding: vec![1, 1], post_padding: vec![1, 1] };
    let conv = chain(&mut net, "conv", LayerKind::Convolution(p), vec![Some(dq), Some(dw), None]);
    let q1 = chain(&mut net, "q_conv", LayerKind::Quantize { axis: None, to: DataType::I8 }, vec![Some(conv), Some(s_out), Some(zero)]);
    let dq1 = chain(&mut net, "dq_conv", LayerKind::Dequantize { axis: None, to: None }, vec![Some(q1), Some(s_out), Some(zero)]);
    let relu = chain(&mut net, "relu", LayerKind::Activation { kind: kiln::ActivationKind::Relu }, vec![Some(dq1)]);
    let q2 = chain(&mut net, "q_relu", LayerKind::Quantize { axis: None, to: DataType::I8 }, vec![Some(relu), Some(s_out), Some(zero)]);
    let y = chain(&mut net, "dq_relu", LayerKind::Dequantize { axis: None, to: None }, vec![Some(q2), Some(s_out), Some(zero)]);
    net.mark_output(y).expect("output");

    let backend = kiln_cpu::CpuBackend::new();
    let engine = Builder::new(&backend).build(&net, &BuilderConfig::default()).expect("build");
    let fused = quantized_layers(engine.network());
    assert_eq!(fused.len(), 1, "{}", engine.network().dump());
    assert!(fused[0].1.relu && fused[0].1.output == DataType::I8, "{:?}", fused[0]);
    assert!(fused[0].0.contains("relu") && fused[0].0.contains("q_relu"), "{}", fused[0].0);
    assert!(!engine.network().layers().iter().any(|l| matches!(l.kind, LayerKind::Activation { .. })), "{}", engine.network().dump());

    let input = HostTensor::from_f32(vec![1, 4, 5, 5], (0..100).map(|i| ((i * 13 % 41) as f32 - 20.0) * 0.5).collect()).expect("x");
    let got = kiln::ExecutionContext::new(engine, &backend).expect("prepare").run(&std::collections::HashMap::from([("x".to_string(), input.clone())])).expect("run");
    let want = kiln::Backend::prepare(&backend, &net).expect("prepare").execute(&[input]).expect("run").remove(0);
    let got = got.values().next().expect("one output");
    assert_eq!(got.to_f64_vec(), want.to_f64_vec());
    assert!(want.to_f64_vec().contains(&0.0) && want.to_f64_vec().iter().any(|&v| v > 0.0), "the ReLU clamps some values");
}

/// `DequantizeLinear(a) + DequantizeLinear(b) → Relu → QuantizeLinear` between two 8-bit
/// tensors (a residual join as onnxruntime writes it), then the form where the sum is
/// quantized, dequantized again and the ReLU requantized: each is one fused layer over the
/// integers, with no Cast even in an FP16 build, and gives the float graph's levels.
fn residual_join(form_with_requantized_relu: bool, to: DataType, scale_a_is_an_input: bool) -> Network {
    use kiln::{HostTensor, Shape, TensorData};
    let mut net = Network::new("residual join");
    let a = net.add_input("a", DataType::I8, Shape::fixed(&[2, 3, 4, 8])).expect("a");
    let b = net.add_input("b", DataType::U8, Shape::fixed(&[2, 3, 4, 8])).expect("b");
    let scalar = |v: f32| HostTensor::from_f32(vec![], vec![v]).expect("scalar");
    let sa = match scale_a_is_an_input {
        true => net.add_input("sa", DataType::F32, Shape::fixed(&[])).expect("sa"),
        false => constant(&mut net, "sa", scalar(0.5)),
    };
    let (sb, sy) = (constant(&mut net, "sb", scalar(0.25)), constant(&mut net, "sy", scalar(0.25)));
    let zb = constant(&mut net, "zb", HostTensor::new(vec![], TensorData::U8(vec![128])).expect("zb"));
    let zy = match to {
        DataType::U8 => constant(&mut net, "zy", HostTensor::new(vec![], TensorData::U8(vec![60])).expect("zy")),
        _ => constant(&mut net, "zy", HostTensor::new(vec![], TensorData::I8(vec![-3])).expect("zy")),
    };
    let mut chain = |name: &str, kind: LayerKind, inputs: Vec<Option<kiln::TensorId>>| {
        let l = net.add_layer(name, kind, inputs).expect(name);
        net.output(l, 0)
    };
    let da = chain("dq_a", LayerKind::Dequantize { axis: None, to: None }, vec![Some(a), Some(sa), None]);
    let db = chain("dq_b", LayerKind::Dequantize { axis: None, to: None }, vec![Some(b), Some(sb), Some(zb)]);
    let sum = chain("add", LayerKind::Elementwise { op: kiln::ElementwiseOp::Sum }, vec![Some(da), Some(db)]);
    let relu_in = match form_with_requantized_relu {
        true => {
            let q = chain("q_add", LayerKind::Quantize { axis: None, to }, vec![Some(sum), Some(sy), Some(zy)]);
            chain("dq_add", LayerKind::Dequantize { axis: None, to: None }, vec![Some(q), Some(sy), Some(zy)])
        }
        false => sum,
    };
    let relu = chain("relu", LayerKind::Activation { kind: kiln::ActivationKind::Relu }, vec![Some(relu_in)]);
    let y = chain("q_relu", LayerKind::Quantize { axis: None, to }, vec![Some(relu), Some(sy), Some(zy)]);
    net.mark_output(y).expect("output");
    net
}

#[test]
fn a_residual_join_between_integer_tensors_is_one_pass_over_the_integers() {
    use kiln::{HostTensor, PostOp, TensorData};
    let backend = HalfFirstCpu(kiln_cpu::CpuBackend::new());
    let mut config = BuilderConfig::default();
    config.set_flag(kiln::BuilderFlag::Fp16);
    let n = 2 * 3 * 4 * 8;
    let a = HostTensor::new(vec![2, 3, 4, 8], TensorData::I8((0..n).map(|i| (i * 53 % 256 - 128) as i8).collect())).expect("a");
    let b = HostTensor::new(vec![2, 3, 4, 8], TensorData::U8((0..n).map(|i| (i * 97 % 256) as u8).collect())).expect("b");
    let feeds = std::collections::HashMap::from([("a".to_string(), a.clone()), ("b".to_string(), b.clone())]);
    for requantized in [false, true] {
        for to in [DataType::I8, DataType::U8] {
            let what = format!("requantized ReLU {requantized}, {to}");
            let net = residual_join(requantized, to, false);
            let engine = Builder::new(&backend).build(&net, &config).expect("fp16 build");
            let built = engine.network();
            let [layer] = built.layers().iter().filter(|l| !matches!(l.kind, LayerKind::Constant { .. })).collect::<Vec<_>>()[..] else {
                panic!("{what}: one layer besides constants:\n{}", built.dump())
            };
            let LayerKind::Fused(p) = &layer.kind else { panic!("{what}: {}", built.dump()) };
            assert_eq!(p.dequantized.len(), 2, "{what}: both inputs read as integers");
            let steps: Vec<&str> = p.epilogue.iter().map(|s| match s {
                PostOp::Quantize { .. } => "q",
                PostOp::Dequantize { .. } => "dq",
                PostOp::Activation(_) => "relu",
                _ => "other",
            }).collect();
            let want_steps = if requantized { vec!["q", "dq", "relu", "q"] } else { vec!["relu", "q"] };
            assert_eq!(steps, want_steps, "{what}");
            assert!(layer.name.contains("dq_a") || layer.name.contains("add"), "{what}: {}", layer.name);
            let got = kiln::ExecutionContext::new(engine, &backend).expect("prepare").run(&feeds).expect("run");
            let want = kiln::Backend::prepare(&kiln_cpu::CpuBackend::new(), &net).expect("prepare").execute(&[a.clone(), b.clone()]).expect("run").remove(0);
            let got = got.values().next().expect("one output");
            assert_eq!((got.dtype(), got.data()), (to, want.data()), "{what}");
            let levels = want.to_f64_vec();
            let (lo, hi) = if to == DataType::I8 { (-128.0, 127.0) } else { (0.0, 255.0) };
            assert!(levels.contains(&hi) && levels.iter().any(|&v| v > lo && v < hi), "{what}: saturates some values, not all: {levels:?}");
        }
    }
}

#[test]
fn an_island_whose_scale_is_not_known_stays_as_written() {
    let net = residual_join(false, DataType::I8, true);
    let context = PassContext { folding_backend: None, quantized_layers: true };
    let out = Pipeline::standard().run(&net, &context).expect("passes");
    let fused = out.layers().iter().find_map(|l| match &l.kind {
        LayerKind::Fused(p) => Some(p.clone()),
        _ => None,
    });
    let fused = fused.expect("the known side still fuses");
    assert_eq!(fused.dequantized.len(), 1, "{}", out.dump());
    assert!(out.layers().iter().any(|l| l.name == "dq_a"), "{}", out.dump());
}

/// `DQ → MaxPool → Q` with one scale and zero point pools the levels themselves (and gives
/// the float graph's levels); another output scale keeps the float pooling. With a ReLU before
/// the pooling (Conv → ReLU → MaxPool) the levels are pooled and the ReLU requantizes them,
/// whatever the output scale.
#[test]
fn a_max_pooling_between_quantizations_pools_the_integers() {
    use kiln::{HostTensor, PoolingKind, PoolingParams, Shape, TensorData};
    for (same_scale, relu) in [(true, false), (false, false), (true, true), (false, true)] {
        let what = format!("same scale {same_scale}, ReLU {relu}");
        let mut net = Network::new("pool island");
        let x = net.add_input("x", DataType::U8, Shape::fixed(&[2, 3, 7, 6])).expect("x");
        let s = constant(&mut net, "s", HostTensor::from_f32(vec![], vec![0.3]).expect("s"));
        let s_out = if same_scale { s } else { constant(&mut net, "s_out", HostTensor::from_f32(vec![], vec![0.2]).expect("s_out")) };
        let z = constant(&mut net, "z", HostTensor::new(vec![], TensorData::U8(vec![100])).expect("z"));
        let dq = net.add_layer("dq", LayerKind::Dequantize { axis: None, to: None }, vec![Some(x), Some(s), Some(z)]).expect("dq");
        let mut pooled_input = net.output(dq, 0);
        if relu {
            let r = net.add_layer("relu", LayerKind::Activation { kind: kiln::ActivationKind::Relu }, vec![Some(pooled_input)]).expect("relu");
            pooled_input = net.output(r, 0);
        }
        let p = PoolingParams { kind: PoolingKind::Max, window: vec![3, 3], strides: vec![2, 2], dilations: vec![1, 1], pre_padding: vec![1, 1], post_padding: vec![1, 1], ceil_mode: false, average_count_excludes_padding: false };
        let pool = net.add_layer("pool", LayerKind::Pooling(p), vec![Some(pooled_input)]).expect("pool");
        let q = net.add_layer("q", LayerKind::Quantize { axis: None, to: DataType::U8 }, vec![Some(net.output(pool, 0)), Some(s_out), Some(z)]).expect("q");
        net.mark_output(net.output(q, 0)).expect("output");
        let backend = kiln_cpu::CpuBackend::new();
        let engine = Builder::new(&backend).build(&net, &BuilderConfig::default()).expect("build");
        let built = engine.network();
        // With a ReLU the pooling heads the layer that maps its levels (dequantized, ReLU,
        // quantized) after the maximum.
        let integer_pool = built.layers().iter().any(|l| {
            let pools = match &l.kind {
                LayerKind::Pooling(_) => true,
                LayerKind::Fused(f) => matches!(f.anchor, kiln::FusedAnchor::Pooling(_)) && built.tensor(l.inputs[0].expect("input")).dtype == DataType::U8,
                _ => false,
            };
            pools && built.tensor(l.outputs[0]).dtype == DataType::U8
        });
        assert_eq!(integer_pool, same_scale || relu, "{what}: {}", built.dump());
        let pooling_anchor = built.layers().iter().any(|l| matches!(&l.kind, LayerKind::Fused(f) if matches!(f.anchor, kiln::FusedAnchor::Pooling(_))));
        assert_eq!(pooling_anchor, relu, "{what}: {}", built.dump());
        assert_eq!(built.layers().iter().any(|l| matches!(l.kind, LayerKind::Dequantize { .. })), !(same_scale || relu), "{what}: {}", built.dump());
        let input = HostTensor::new(vec![2, 3, 7, 6], TensorData::U8((0..252).map(|i| (i * 89 % 256) as u8).collect())).expect("x");
        let got = kiln::ExecutionContext::new(engine, &backend).expect("prepare").run(&std::collections::HashMap::from([("x".to_string(), input.clone())])).expect("run");
        let want = kiln::Backend::prepare(&backend, &net).expect("prepare").execute(&[input]).expect("run").remove(0);
        assert_eq!(got.values().next().expect("one output").data(), want.data(), "{what}");
    }
}

/// `net`'s FP16 builds on `backend`: optimized, and as given.
fn fp16_builds(backend: &HalfFirstCpu, net: &Network) -> (kiln::Engine, kiln::Engine) {
    let build = |optimization: kiln::Optimization| {
        let mut config = BuilderConfig::default();
        config.set_flag(kiln::BuilderFlag::Fp16);
        config.optimization = optimization;
        Builder::new(backend).build(net, &config).expect("fp16 build")
    };
    (build(kiln::Optimization::Full), build(kiln::Optimization::None))
}

/// An FP16 build puts a Cast back to f32 between a narrowed float layer and its
/// QuantizeLinear; the QuantizeLinear reads the f16 tensor itself (widening is exact), with the
/// levels of the unoptimized FP16 build.
#[test]
fn a_quantize_after_an_f16_layer_reads_it_without_a_widening_cast() {
    use kiln::{HostTensor, Shape};
    let mut net = Network::new("relu q");
    let x = net.add_input("x", DataType::F32, Shape::fixed(&[4, 16])).expect("x");
    let relu = net.add_layer("relu", LayerKind::Activation { kind: kiln::ActivationKind::Relu }, vec![Some(x)]).expect("relu");
    let scale = net.add_weights(HostTensor::from_f32(vec![], vec![0.037]).expect("scale"));
    let scale = net.add_layer("scale", LayerKind::Constant { weights: scale }, vec![]).expect("scale");
    let (relu, scale) = (net.output(relu, 0), net.output(scale, 0));
    let q = net.add_layer("q", LayerKind::Quantize { axis: None, to: DataType::I8 }, vec![Some(relu), Some(scale), None]).expect("q");
    let y = net.output(q, 0);
    net.mark_output(y).expect("output");
    let backend = HalfFirstCpu(kiln_cpu::CpuBackend::new());
    let (fused, plain) = fp16_builds(&backend, &net);
    let kinds = |e: &kiln::Engine| e.network().layers().iter().map(|l| l.kind.type_name()).collect::<Vec<_>>();
    assert!(kinds(&plain).contains(&"Cast"), "the FP16 build widens before quantizing: {}", plain.network().dump());
    let quantize = fused.network().layers().iter().find(|l| matches!(l.kind, LayerKind::Quantize { .. })).expect("a QuantizeLinear");
    let read = fused.network().tensor(quantize.inputs[0].expect("x"));
    assert_eq!(read.dtype, DataType::F16, "{}", fused.network().dump());
    assert!(fused.network().layers().iter().all(|l| l.kind != (LayerKind::Cast { to: DataType::F32 })), "no widening Cast left: {}", fused.network().dump());
    let input = HostTensor::from_f32(vec![4, 16], (0..64).map(|i| (i as f32 * 0.731).sin() * 6.0).collect()).expect("x");
    let feeds = std::collections::HashMap::from([("x".to_string(), input)]);
    let run = |engine: kiln::Engine| kiln::ExecutionContext::new(engine, &backend).expect("prepare").run(&feeds).expect("run");
    let (got, want) = (run(fused), run(plain));
    let (got, want) = (got.values().next().expect("y"), want.values().next().expect("y"));
    assert_eq!((got.dtype(), got.data()), (DataType::I8, want.data()));
    let levels = want.to_f64_vec();
    assert!(levels.contains(&127.0) && levels.iter().any(|&v| v > 0.0 && v < 127.0), "saturates some values, not all: {levels:?}");
}

/// The other side: an FP16 build casts a DequantizeLinear's f32 to f16 for the narrowed layer
/// reading it; the DequantizeLinear writes f16 itself (its f32 value rounded once, as the Cast
/// rounded it), with the unoptimized FP16 build's values.
#[test]
fn a_dequantize_before_an_f16_layer_writes_f16_without_a_cast() {
    use kiln::{HostTensor, Shape, TensorData};
    let mut net = Network::new("dq relu");
    let x = net.add_input("x", DataType::I8, Shape::fixed(&[4, 16])).expect("x");
    let scale = net.add_weights(HostTensor::from_f32(vec![], vec![0.0371]).expect("scale"));
    let scale = net.add_layer("scale", LayerKind::Constant { weights: scale }, vec![]).expect("scale");
    let scale = net.output(scale, 0);
    let dq = net.add_layer("dq", LayerKind::Dequantize { axis: None, to: None }, vec![Some(x), Some(scale), None]).expect("dq");
    let dq = net.output(dq, 0);
    let relu = net.add_layer("relu", LayerKind::Activation { kind: kiln::ActivationKind::Relu }, vec![Some(dq)]).expect("relu");
    let y = net.output(relu, 0);
    net.mark_output(y).expect("output");
    let backend = HalfFirstCpu(kiln_cpu::CpuBackend::new());
    let (fused, plain) = fp16_builds(&backend, &net);
    let narrowing = |e: &kiln::Engine| e.network().layers().iter().filter(|l| l.kind == (LayerKind::Cast { to: DataType::F16 })).count();
    assert_eq!(narrowing(&plain), 1, "the FP16 build narrows the f32: {}", plain.network().dump());
    assert_eq!(narrowing(&fused), 0, "{}", fused.network().dump());
    let dq = fused.network().layers().iter().find(|l| matches!(l.kind, LayerKind::Dequantize { .. })).expect("a DequantizeLinear");
    assert_eq!(dq.kind, LayerKind::Dequantize { axis: None, to: Some(DataType::F16) }, "{}", fused.network().dump());
    let levels = HostTensor::new(vec![4, 16], TensorData::I8((0..64).map(|i| (i * 37 % 256 - 128) as i8).collect())).expect("x");
    let feeds = std::collections::HashMap::from([("x".to_string(), levels)]);
    let run = |engine: kiln::Engine| kiln::ExecutionContext::new(engine, &backend).expect("prepare").run(&feeds).expect("run");
    let (got, want) = (run(fused), run(plain));
    let (got, want) = (got.values().next().expect("y"), want.values().next().expect("y"));
    assert_eq!((got.dtype(), got.data()), (want.dtype(), want.data()));
    // 0.0371 is not an f16 step: some f32 values round, so the comparison can tell.
    let rounded = want.to_f64_vec().iter().zip(0..).filter(|&(&v, i)| v != f64::from(((i * 37 % 256 - 128) as f32 * 0.0371f32).max(0.0))).count();
    assert!(rounded > 0, "the f16 output rounds some values");
}

/// Two Q/DQ convolutions from one int8 input meeting at a skip connection's Add, as a network
/// quantized at the convolutions' inputs only writes them (TensorRT's placement): `Add(conv_a,
/// DequantizeLinear(r))` or `Add(conv_a, conv_b)`, then ReLU and QuantizeLinear. `exposed`
/// makes the later convolution's output a network output too, which keeps the Add out of it.
fn skip_connection(residual_is_a_convolution: bool, exposed: bool) -> Network {
    use kiln::{ConvolutionParams, ElementwiseOp, HostTensor, Shape, TensorData};
    // Integers spread over lo..hi by a multiplicative hash of their index.
    let ints = |shape: &[usize], dtype: DataType, lo: i32, hi: i32| {
        let spread = |i: usize| ((i as u64 * 2_654_435_761 + 12_345) >> 7) % (hi - lo) as u64;
        let v: Vec<i32> = (0..shape.iter().product::<usize>()).map(|i| lo + spread(i) as i32).collect();
        let data = match dtype {
            DataType::I8 => TensorData::I8(v.iter().map(|&x| x as i8).collect()),
            _ => TensorData::I32(v),
        };
        HostTensor::new(shape.to_vec(), data).expect("ints")
    };
    let mut net = Network::new("skip connection");
    let x = net.add_input("x", DataType::I8, Shape::fixed(&[2, 16, 6, 5])).expect("x");
    let r = net.add_input("r", DataType::I8, Shape::fixed(&[2, 32, 6, 5])).expect("r");
    let scalar = |v: f32| HostTensor::from_f32(vec![], vec![v]).expect("scalar");
    let x_scale = 0.05f32;
    let w_scales: Vec<f32> = (0..32).map(|k| [0.02, 0.01, 0.04, 0.005][k % 4]).collect();
    let bias_scales: Vec<f32> = w_scales.iter().map(|w| x_scale * w).collect();
    let sx = constant(&mut net, "sx", scalar(x_scale));
    let sr = constant(&mut net, "sr", scalar(0.75));
    let zr = constant(&mut net, "zr", HostTensor::new(vec![], TensorData::I8(vec![-5])).expect("zr"));
    let sy = constant(&mut net, "sy", scalar(0.5));
    let zy = constant(&mut net, "zy", HostTensor::new(vec![], TensorData::I8(vec![3])).expect("zy"));
    let dq = |axis| LayerKind::Dequantize { axis, to: None };
    let dx = chain(&mut net, "dq_x", dq(None), vec![Some(x), Some(sx), None]);
    let convolution = |net: &mut Network, name: &str, kernel: usize| {
        let w = constant(net, &format!("{name}_w"), ints(&[32, 16, kernel, kernel], DataType::I8, -127, 128));
        let sw = constant(net, &format!("{name}_sw"), HostTensor::from_f32(vec![32], w_scales.clone()).expect("sw"));
        let b = constant(net, &format!("{name}_b"), ints(&[32], DataType::I32, -4000, 4000));
        let sb = constant(net, &format!("{name}_sb"), HostTensor::from_f32(vec![32], bias_scales.clone()).expect("sb"));
        let dw = chain(net, &format!("{name}_dq_w"), dq(Some(0)), vec![Some(w), Some(sw), None]);
        let db = chain(net, &format!("{name}_dq_b"), dq(Some(0)), vec![Some(b), Some(sb), None]);
        let pad = kernel / 2;
        let params = ConvolutionParams { groups: 1, strides: vec![1, 1], dilations: vec![1, 1], pre_padding: vec![pad, pad], post_padding: vec![pad, pad] };
        chain(net, name, LayerKind::Convolution(params), vec![Some(dx), Some(dw), Some(db)])
    };
    let a = convolution(&mut net, "conv_a", 3);
    let other = match residual_is_a_convolution {
        true => convolution(&mut net, "conv_b", 1),
        false => chain(&mut net, "dq_r", dq(None), vec![Some(r), Some(sr), Some(zr)]),
    };
    let sum = chain(&mut net, "add", LayerKind::Elementwise { op: ElementwiseOp::Sum }, vec![Some(a), Some(other)]);
    let relu = chain(&mut net, "relu", LayerKind::Activation { kind: kiln::ActivationKind::Relu }, vec![Some(sum)]);
    let y = chain(&mut net, "q_y", LayerKind::Quantize { axis: None, to: DataType::I8 }, vec![Some(relu), Some(sy), Some(zy)]);
    net.mark_output(y).expect("output");
    if exposed {
        net.mark_output(if residual_is_a_convolution { other } else { a }).expect("output");
    }
    net
}

#[test]
fn a_skip_connection_add_becomes_the_residual_of_an_integer_layer_exactly() {
    use kiln::{HostTensor, QuantizedParams as Q, TensorData};
    let backend = kiln_cpu::CpuBackend::new();
    let n = |shape: &[usize]| shape.iter().product::<usize>();
    let x = HostTensor::new(vec![2, 16, 6, 5], TensorData::I8((0..n(&[2, 16, 6, 5])).map(|i| (i as i32 * 53 % 256 - 128) as i8).collect())).expect("x");
    let r = HostTensor::new(vec![2, 32, 6, 5], TensorData::I8((0..n(&[2, 32, 6, 5])).map(|i| (i as i32 * 97 % 256 - 128) as i8).collect())).expect("r");
    let feeds = std::collections::HashMap::from([("x".to_string(), x.clone()), ("r".to_string(), r.clone())]);
    for residual_is_a_convolution in [false, true] {
        let what = if residual_is_a_convolution { "two convolutions" } else { "a dequantized int8 input" };
        let net = skip_connection(residual_is_a_convolution, false);
        let engine = Builder::new(&backend).build(&net, &BuilderConfig::default()).expect("build");
        let built = engine.network();
        let fused = quantized_layers(built);
        assert_eq!(fused.len(), 1 + usize::from(residual_is_a_convolution), "{what}:\n{}", built.dump());
        // The layer that ends in int8 took the Add, the ReLU and the QuantizeLinear.
        let (name, params) = fused.last().expect("a layer");
        assert!(params.relu && params.output == DataType::I8 && name.contains("add"), "{what}: {name} {params:?}");
        let layer = built.layers().iter().find(|l| &l.name == name).expect("layer");
        let residual = layer.inputs[Q::RESIDUAL].expect("a residual");
        // A dequantized residual is read as its int8 levels with their scale and zero point;
        // the other convolution's output (computed first, in f32) as it is.
        let (want_type, want_scale) = if residual_is_a_convolution { (DataType::F32, false) } else { (DataType::I8, true) };
        assert_eq!((built.tensor(residual).dtype, layer.inputs[Q::RESIDUAL_SCALE].is_some()), (want_type, want_scale), "{what}");
        assert!(name.contains(if residual_is_a_convolution { "conv_b" } else { "conv_a" }), "{what}: the later convolution takes the Add: {name}");
        // The same layers with the Add run as written after the integer layer's f32 output.
        let unfused = Builder::new(&backend).build(&skip_connection(residual_is_a_convolution, true), &BuilderConfig::default()).expect("build");
        assert!(quantized_layers(unfused.network()).iter().all(|(_, p)| p.output == DataType::F32), "{what}: {}", unfused.network().dump());
        let y = net.tensor(net.outputs()[0]).name.clone();
        let run = |engine| kiln::ExecutionContext::new(engine, &backend).expect("prepare").run(&feeds).expect("run").remove(&y).expect("y");
        let (got, want) = (run(engine), run(unfused));
        assert_eq!((got.dtype(), got.data()), (DataType::I8, want.data()), "{what}: the unfused layers' levels");
        let levels = want.to_f64_vec();
        assert!(levels.contains(&127.0) && levels.iter().filter(|&&v| v == 3.0).count() > 4 && levels.iter().any(|&v| v > 3.0 && v < 127.0), "{what}: ReLU, saturation and values between: {levels:?}");
    }
}

/// A convolution whose bias is int32 zeros behind another layer's DequantizeLinear (its scale
/// not x_scale·w_scale: how onnxruntime quantizes the one zero bias the PyTorch exporter shares
/// among an untrained model's convolutions) has no bias: the same levels as without one. Both
/// forms onnxruntime writes are covered: the DequantizeLinear read directly, and read through
/// an Identity with a per-channel int32 zero point of zeros (ResNet-50's, as exported by the
/// legacy exporter and quantized by `quantize_static`).
#[test]
fn a_zero_bias_with_a_foreign_scale_is_dropped() {
    use kiln::{ConvolutionParams, HostTensor, QuantizedParams as Q, Shape, TensorData};
    let build = |with_bias: bool, through_identity: bool| {
        let mut net = Network::new("zero bias");
        let x = net.add_input("x", DataType::I8, Shape::fixed(&[1, 8, 5, 5])).expect("x");
        let sx = constant(&mut net, "sx", HostTensor::from_f32(vec![], vec![0.1]).expect("sx"));
        let w = constant(&mut net, "w", HostTensor::new(vec![4, 8, 3, 3], TensorData::I8((0..288).map(|i| (i * 37 % 255) as i8).collect())).expect("w"));
        let sw = constant(&mut net, "sw", HostTensor::from_f32(vec![4], vec![0.02, 0.03, 0.05, 0.07]).expect("sw"));
        let dq = |axis| LayerKind::Dequantize { axis, to: None };
        let dx = chain(&mut net, "dq_x", dq(None), vec![Some(x), Some(sx), None]);
        let dw = chain(&mut net, "dq_w", dq(Some(0)), vec![Some(w), Some(sw), None]);
        let bias = with_bias.then(|| {
            let b = constant(&mut net, "b", HostTensor::new(vec![4], TensorData::I32(vec![0; 4])).expect("b"));
            let sb = constant(&mut net, "sb", HostTensor::from_f32(vec![4], vec![0.123, 0.5, 0.25, 1.0]).expect("sb"));
            if !through_identity {
                return chain(&mut net, "dq_b", dq(Some(0)), vec![Some(b), Some(sb), None]);
            }
            let zb = constant(&mut net, "zb", HostTensor::new(vec![4], TensorData::I32(vec![0; 4])).expect("zb"));
            let shared = chain(&mut net, "dq_b", dq(Some(0)), vec![Some(b), Some(sb), Some(zb)]);
            chain(&mut net, "identity", LayerKind::Identity, vec![Some(shared)])
        });
        let params = ConvolutionParams { groups: 1, strides: vec![1, 1], dilations: vec![1, 1], pre_padding: vec![1, 1], post_padding: vec![1, 1] };
        let conv = chain(&mut net, "conv", LayerKind::Convolution(params), vec![Some(dx), Some(dw), bias]);
        let sy = constant(&mut net, "sy", HostTensor::from_f32(vec![], vec![0.7]).expect("sy"));
        let y = chain(&mut net, "q", LayerKind::Quantize { axis: None, to: DataType::I8 }, vec![Some(conv), Some(sy), None]);
        net.mark_output(y).expect("output");
        net
    };
    let backend = kiln_cpu::CpuBackend::new();
    let x = HostTensor::new(vec![1, 8, 5, 5], TensorData::I8((0..200).map(|i| (i * 53 % 256) as u8 as i8).collect())).expect("x");
    let run = |net: &Network| {
        let engine = Builder::new(&backend).build(net, &BuilderConfig::default()).expect("build");
        let fused = quantized_layers(engine.network());
        assert_eq!(fused.len(), 1, "{}", engine.network().dump());
        let layer = engine.network().layers().iter().find(|l| l.name == fused[0].0).expect("layer");
        assert!(layer.inputs[Q::BIAS].is_none(), "the zero bias is dropped: {}", engine.network().dump());
        let feeds = std::collections::HashMap::from([("x".to_string(), x.clone())]);
        kiln::ExecutionContext::new(engine, &backend).expect("prepare").run(&feeds).expect("run").into_values().next().expect("y")
    };
    let without = run(&build(false, false));
    for through_identity in [false, true] {
        assert_eq!(run(&build(true, through_identity)).data(), without.data(), "through an Identity: {through_identity}");
    }
}

/// The fused engine's one output and the cpu backend's of `net` as written, both fed the two
/// named inputs (given in the network's input order).
fn fused_and_graph_outputs(fused: kiln::Engine, backend: &dyn kiln::Backend, net: &Network, [(a_name, a), (r_name, r)]: [(&str, kiln::HostTensor); 2]) -> (kiln::HostTensor, kiln::HostTensor) {
    let feeds = std::collections::HashMap::from([(a_name.to_string(), a.clone()), (r_name.to_string(), r.clone())]);
    let got = kiln::ExecutionContext::new(fused, backend).expect("prepare").run(&feeds).expect("run").into_values().next().expect("one output");
    let want = kiln::Backend::prepare(&kiln_cpu::CpuBackend::new(), net).expect("prepare").execute(&[a, r]).expect("run").remove(0);
    (got, want)
}

/// A Q/DQ transformer's `DequantizeLinear → + bias → + DequantizeLinear(residual) → LayerNorm →
/// QuantizeLinear`: an island with a layer norm in it. An FP16 build keeps it f32 (the integers
/// around it fix its precision) and fuses it into one layer that reads both 8-bit tensors and
/// writes the levels, with the unoptimized f32 graph's levels bit for bit.
#[test]
fn a_layer_norm_between_quantizations_is_one_pass_over_the_rows() {
    use kiln::{HostTensor, PostOp, Shape, TensorData};
    let shape = [4usize, 6, 32];
    let n: usize = shape.iter().product();
    let mut net = Network::new("layer norm block");
    let a = net.add_input("a", DataType::I8, Shape::fixed(&shape)).expect("a");
    let r = net.add_input("r", DataType::I8, Shape::fixed(&shape)).expect("r");
    let scalar = |v: f32| HostTensor::from_f32(vec![], vec![v]).expect("scalar");
    let row = |seed: usize, base: f32| HostTensor::from_f32(vec![32], (0..32).map(|i| base + ((i * 7 + seed) % 13) as f32 * 0.05).collect()).expect("row");
    let (sa, sr, sy) = (constant(&mut net, "sa", scalar(0.031)), constant(&mut net, "sr", scalar(0.047)), constant(&mut net, "sy", scalar(0.021)));
    let (bias, gamma, beta) = (constant(&mut net, "bias", row(1, -0.3)), constant(&mut net, "gamma", row(2, 0.7)), constant(&mut net, "beta", row(3, -0.2)));
    let da = chain(&mut net, "dq_a", LayerKind::Dequantize { axis: None, to: None }, vec![Some(a), Some(sa), None]);
    let biased = chain(&mut net, "bias_add", LayerKind::Elementwise { op: kiln::ElementwiseOp::Sum }, vec![Some(da), Some(bias)]);
    let dr = chain(&mut net, "dq_r", LayerKind::Dequantize { axis: None, to: None }, vec![Some(r), Some(sr), None]);
    let joined = chain(&mut net, "residual", LayerKind::Elementwise { op: kiln::ElementwiseOp::Sum }, vec![Some(biased), Some(dr)]);
    let norm = chain(&mut net, "norm", LayerKind::Normalization { axes: vec![2], epsilon: 1e-5, num_groups: 1 }, vec![Some(joined), Some(gamma), Some(beta)]);
    let y = chain(&mut net, "q_norm", LayerKind::Quantize { axis: None, to: DataType::I8 }, vec![Some(norm), Some(sy), None]);
    net.mark_output(y).expect("output");
    let backend = HalfFirstCpu(kiln_cpu::CpuBackend::new());
    let (fused, _) = fp16_builds(&backend, &net);
    let built = fused.network();
    let [layer] = built.layers().iter().filter(|l| !matches!(l.kind, LayerKind::Constant { .. })).collect::<Vec<_>>()[..] else {
        panic!("one layer besides constants:\n{}", built.dump())
    };
    let LayerKind::Fused(p) = &layer.kind else { panic!("{}", built.dump()) };
    assert_eq!(p.dequantized.len(), 2, "both 8-bit tensors read as integers: {p:?}");
    assert!(matches!(p.epilogue[..], [PostOp::Elementwise { .. }, PostOp::Normalization { axis: 2, .. }, PostOp::Quantize { .. }]), "{p:?}");
    let levels = |seed: usize| HostTensor::new(shape.to_vec(), TensorData::I8((0..n).map(|i| ((i * (31 + seed) + seed * 7) % 256) as u8 as i8).collect())).expect("levels");
    let (a, r) = (levels(0), levels(5));
    let (got, want) = fused_and_graph_outputs(fused, &backend, &net, [("a", a), ("r", r)]);
    assert_eq!((got.dtype(), got.data()), (DataType::I8, want.data()));
    let values = want.to_f64_vec();
    assert!(values.iter().any(|&v| v > 20.0) && values.iter().any(|&v| v < -20.0), "the norm spreads the levels: {values:?}");
}

/// A Q/DQ CNN's head, `DequantizeLinear ×2 → Add → Relu → GlobalAveragePool → QuantizeLinear`:
/// an FP16 build keeps the reduction f32 with the pointwise layers before it (the integers
/// around them fix their precision), so the Add and ReLU read both 8-bit tensors as one island
/// with no Cast between, the pooling is the island's last step (averaging its f32 values: the
/// island's result is never written), and the levels are the unoptimized f32 graph's bit for bit.
#[test]
fn a_cnn_head_between_quantizations_reads_the_integers_in_an_fp16_build() {
    use kiln::{HostTensor, Shape, TensorData};
    let shape = [2usize, 8, 5, 5];
    let n: usize = shape.iter().product();
    let mut net = Network::new("cnn head");
    let a = net.add_input("a", DataType::I8, Shape::fixed(&shape)).expect("a");
    let r = net.add_input("r", DataType::U8, Shape::fixed(&shape)).expect("r");
    let scalar = |v: f32| HostTensor::from_f32(vec![], vec![v]).expect("scalar");
    let (sa, sr, sy) = (constant(&mut net, "sa", scalar(0.031)), constant(&mut net, "sr", scalar(0.047)), constant(&mut net, "sy", scalar(0.05)));
    let da = chain(&mut net, "dq_a", LayerKind::Dequantize { axis: None, to: None }, vec![Some(a), Some(sa), None]);
    let dr = chain(&mut net, "dq_r", LayerKind::Dequantize { axis: None, to: None }, vec![Some(r), Some(sr), None]);
    let joined = chain(&mut net, "join", LayerKind::Elementwise { op: kiln::ElementwiseOp::Sum }, vec![Some(da), Some(dr)]);
    let relu = chain(&mut net, "relu", LayerKind::Activation { kind: kiln::ActivationKind::Relu }, vec![Some(joined)]);
    let mean = chain(&mut net, "pool", LayerKind::Reduce { op: kiln::ReduceOp::Mean, axes: vec![2, 3], keep_dims: true }, vec![Some(relu)]);
    let y = chain(&mut net, "q_pool", LayerKind::Quantize { axis: None, to: DataType::U8 }, vec![Some(mean), Some(sy), None]);
    net.mark_output(y).expect("output");
    let backend = HalfFirstCpu(kiln_cpu::CpuBackend::new());
    let (fused, _) = fp16_builds(&backend, &net);
    let built = fused.network();
    assert!(built.layers().iter().all(|l| !matches!(l.kind, LayerKind::Cast { .. })), "no Cast: {}", built.dump());
    let island = built.layers().iter().find_map(|l| match &l.kind {
        LayerKind::Fused(p) => Some(p),
        _ => None,
    });
    assert_eq!(island.map(|p| p.dequantized.len()), Some(2), "both 8-bit tensors read as integers: {}", built.dump());
    let island = island.expect("the island");
    let pool = kiln::PostOp::Reduce { op: kiln::ReduceOp::Mean, axes: kiln::AxisMask(0b1100), keep_dims: true };
    assert_eq!(island.epilogue.last(), Some(&pool), "the pooling ends the island: {}", built.dump());
    assert!(built.layers().iter().all(|l| !matches!(l.kind, LayerKind::Reduce { .. })), "{}", built.dump());
    let pooled = built.layers().iter().find(|l| matches!(l.kind, LayerKind::Fused(_))).expect("the island");
    assert_eq!(built.tensor(pooled.outputs[0]).dtype, DataType::F32, "{}", built.dump());
    let levels = |seed: usize, data: fn(Vec<usize>) -> TensorData| HostTensor::new(shape.to_vec(), data((0..n).map(|i| (i * (31 + seed) + seed * 7) % 256).collect())).expect("levels");
    let a = levels(0, |v| TensorData::I8(v.into_iter().map(|b| b as u8 as i8).collect()));
    let r = levels(5, |v| TensorData::U8(v.into_iter().map(|b| b as u8).collect()));
    let (got, want) = fused_and_graph_outputs(fused, &backend, &net, [("a", a), ("r", r)]);
    assert_eq!((got.dtype(), got.data()), (DataType::U8, want.data()));
    let values = want.to_f64_vec();
    assert!(values.iter().any(|&v| v > 50.0) && values.iter().map(|&v| v as i64).collect::<std::collections::HashSet<_>>().len() > 4, "the levels spread: {values:?}");
}

/// ConvNeXt's `Q → DQ → LayerNorm → Q` (a depthwise convolution's levels normalized per pixel
/// across channels): the layer norm reading the dequantized levels heads an island of its own
/// (the identity anchor, the normalization and the quantization its steps), one pass over the
/// integers in an FP16 build, with the unfused f32 graph's levels.
#[test]
fn a_layer_norm_of_dequantized_levels_is_an_island() {
    use kiln::{FusedAnchor, HostTensor, PostOp, Shape, TensorData};
    let backend = HalfFirstCpu(kiln_cpu::CpuBackend::new());
    let mut config = BuilderConfig::default();
    config.set_flag(kiln::BuilderFlag::Fp16);
    let (shape, channels) = (vec![2usize, 3, 5, 24], 24usize);
    let mut net = Network::new("dq layer norm q");
    let x = net.add_input("x", DataType::I8, Shape::fixed(&shape)).expect("x");
    let scalar = |v: f32| HostTensor::from_f32(vec![], vec![v]).expect("scalar");
    let sx = constant(&mut net, "sx", scalar(0.041));
    let sy = constant(&mut net, "sy", scalar(0.027));
    let zy = constant(&mut net, "zy", HostTensor::new(vec![], TensorData::U8(vec![120])).expect("zero point"));
    let gamma = constant(&mut net, "gamma", HostTensor::from_f32(vec![channels], (0..channels).map(|k| 0.7 + 0.05 * k as f32).collect()).expect("gamma"));
    let beta = constant(&mut net, "beta", HostTensor::from_f32(vec![channels], (0..channels).map(|k| 0.1 * k as f32 - 1.0).collect()).expect("beta"));
    let dx = chain(&mut net, "dq_x", LayerKind::Dequantize { axis: None, to: None }, vec![Some(x), Some(sx), None]);
    let norm = chain(&mut net, "norm", LayerKind::Normalization { axes: vec![3], epsilon: 1e-6, num_groups: 1 }, vec![Some(dx), Some(gamma), Some(beta)]);
    let y = chain(&mut net, "q_y", LayerKind::Quantize { axis: None, to: DataType::U8 }, vec![Some(norm), Some(sy), Some(zy)]);
    net.mark_output(y).expect("output");
    let engine = Builder::new(&backend).build(&net, &config).expect("fp16 build");
    let built = engine.network();
    let [layer] = built.layers().iter().filter(|l| !matches!(l.kind, LayerKind::Constant { .. })).collect::<Vec<_>>()[..] else {
        panic!("one layer besides constants:\n{}", built.dump())
    };
    let LayerKind::Fused(p) = &layer.kind else { panic!("{}", built.dump()) };
    assert_eq!(p.anchor, FusedAnchor::Identity, "{}", built.dump());
    assert_eq!(p.dequantized.len(), 1, "the levels read as integers");
    assert!(matches!(p.epilogue[..], [PostOp::Normalization { axis: 3, .. }, PostOp::Quantize { to: DataType::U8, .. }]), "{:?}", p.epilogue);
    let n = shape.iter().product::<usize>();
    let feed = HostTensor::new(shape.clone(), TensorData::I8((0..n).map(|i| (i * 53 % 256) as u8 as i8).collect())).expect("x");
    let got = kiln::ExecutionContext::new(engine, &backend).expect("prepare").run(&std::collections::HashMap::from([("x".to_string(), feed.clone())])).expect("run");
    let want = kiln::Backend::prepare(&kiln_cpu::CpuBackend::new(), &net).expect("prepare").execute(&[feed]).expect("run").remove(0);
    let got = got.values().next().expect("one output");
    assert_eq!((got.dtype(), got.data()), (DataType::U8, want.data()));
}

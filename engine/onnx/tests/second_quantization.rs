//! The second quantization of an integer layer's levels (`QuantizedParams::then`) on
//! `qdq_models/mini_resnet_s8`, a small ResNet as onnxruntime's `quantize_static` writes it
//! (every convolution's output quantized, then dequantized again before its ReLU or skip
//! connection's Add): the ReLU and skip-connection islands after the convolutions become part
//! of them, and the network gives the values it gives with the islands run as written, exactly.

mod common;

use kiln::{Builder, BuilderConfig, LayerKind, Network, QuantizedParams as Q};

#[test]
fn onnxruntime_islands_after_convolutions_become_their_second_quantization_exactly() {
    let backend = kiln_cpu::CpuBackend::new();
    let (net, feeds, onnxruntime) = common::qdq_fixture("mini_resnet_s8");
    let config = BuilderConfig { profiling_verbosity: kiln::ProfilingVerbosity::Detailed, ..BuilderConfig::default() };
    let engine = Builder::new(&backend).build(&net, &config).expect("build");
    let built = engine.network();
    // Every convolution and the classifier's product are integer layers.
    let integer: Vec<_> = built.layers().iter().filter(|l| matches!(l.kind, LayerKind::Quantized(_))).collect();
    assert_eq!(integer.len(), 10, "{}", built.dump());
    // Every ReLU island after a convolution is part of it, and the levels between are never
    // written (the stem's ReLU feeds a max pooling, which pools the integers instead; the
    // head's, the float global pooling). Some ReLUs requantize with the convolution's own
    // scale: that is the layer's ReLU, no second quantization.
    for name in ["b1c1_r", "b1c2_r", "b2c1_r", "b2c2_r"] {
        assert!(built.find_tensor(name).is_none(), "{name} is written:\n{}", built.dump());
    }
    let requantizing = integer.iter().filter(|l| matches!(&l.kind, LayerKind::Quantized(p) if p.then.is_some())).count();
    assert!(requantizing >= 2, "{}", built.dump());
    // The skip connections' `DequantizeLinear + DequantizeLinear → Add → Relu → QuantizeLinear`
    // are part of the convolution before them: no island is left, and each of the two blocks'
    // last convolutions joins its block's input.
    let islands = built.layers().iter().filter(|l| matches!(&l.kind, LayerKind::Fused(p) if p.dequantized.len() == 2)).count();
    assert_eq!(islands, 0, "{}", built.dump());
    let joins = integer.iter().filter(|l| l.inputs.get(Q::JOIN).copied().flatten().is_some()).count();
    assert_eq!(joins, 2, "{}", built.dump());
    // The inspector says which layers fold a skip connection.
    let inspector = kiln::EngineInspector::new(&engine);
    let shown = (0..built.layers().len()).filter_map(|i| inspector.get_layer_information(i, kiln::LayerInformationFormat::Text).ok()).filter(|t| t.contains("JoinsSkipConnection: true")).count();
    assert_eq!(shown, 2);

    // The same network with each convolution's first levels a network output: nothing can
    // absorb them, so the islands run as written.
    let mut exposed = net.clone();
    let firsts: Vec<_> = net.tensors().iter().enumerate().filter(|(_, t)| t.name.ends_with("_QuantizeLinear_Output") && !t.name.ends_with("_r_QuantizeLinear_Output")).map(|(i, _)| kiln::TensorId(i)).collect();
    for &t in &firsts {
        exposed.mark_output(t).expect("output");
    }
    let unfused = Builder::new(&backend).build(&exposed, &BuilderConfig::default()).expect("build");
    assert!(unfused.network().layers().iter().all(|l| !matches!(&l.kind, LayerKind::Quantized(p) if p.then.is_some())), "{}", unfused.network().dump());
    let run = |engine| kiln::ExecutionContext::new(engine, &backend).expect("prepare").run(&feeds).expect("run").remove("y").expect("y");
    let (got, want) = (run(engine), run(unfused));
    assert_eq!(got.data(), want.data());
    // onnxruntime's float emulation of the Q/DQ graph gives these values exactly today; a
    // sum that lands on a rounding tie in f32 may move one level, which the bound allows.
    let (g, o) = (got.to_f64_vec(), onnxruntime.to_f64_vec());
    let error = (g.iter().zip(&o).map(|(a, b)| (a - b).powi(2)).sum::<f64>() / o.iter().map(|b| b * b).sum::<f64>()).sqrt();
    assert!(error < 1e-3, "relative L2 against onnxruntime: {error}");
}

/// A hand-made layer's second quantization is checked: it follows levels and has its scale.
#[test]
fn a_second_quantization_without_levels_or_a_scale_is_refused() {
    use kiln::{DataType, QuantizedAnchor, Requantization};
    let anchor = QuantizedAnchor::MatrixMultiply { op_a: kiln::MatrixOp::None, op_b: kiln::MatrixOp::None };
    let attempt = |output: DataType, then_scale: bool, then_zero: DataType| {
        let mut net = Network::new("hand-made");
        let x = net.add_input("x", DataType::I8, &[4usize, 8][..]).expect("x");
        let w = net.add_input("w", DataType::I8, &[8usize, 3][..]).expect("w");
        let s = net.add_input("s", DataType::F32, &[1usize][..]).expect("s");
        let z = net.add_input("z", then_zero, &[1usize][..]).expect("z");
        let mut slots = vec![None; Q::SLOTS];
        [slots[Q::X], slots[Q::W], slots[Q::X_SCALE], slots[Q::W_SCALE], slots[Q::THEN_ZERO]] = [Some(x), Some(w), Some(s), Some(s), Some(z)];
        if output.is_8bit_integer() {
            slots[Q::Y_SCALE] = Some(s);
        }
        if then_scale {
            slots[Q::THEN_SCALE] = Some(s);
        }
        let params = Q { anchor: anchor.clone(), relu: false, output, then: Some(Requantization { relu: true, to: DataType::U8 }), lookup: None };
        net.add_layer("q", LayerKind::Quantized(params), slots).map(|l| net.tensor(net.output(l, 0)).dtype).map_err(|e| e.to_string())
    };
    assert_eq!(attempt(DataType::I8, true, DataType::U8), Ok(DataType::U8), "the second quantization's type");
    for (what, output, then_scale, then_zero) in [
        ("a float output", DataType::F32, true, DataType::U8),
        ("no scale", DataType::I8, false, DataType::U8),
        ("a zero point of another type", DataType::I8, true, DataType::I8),
    ] {
        let refused = attempt(output, then_scale, then_zero).expect_err(what);
        assert!(refused.contains("second quantization") || refused.contains("scale"), "{what}: {refused}");
    }
}

/// A hand-made layer's join is checked: it comes with a second quantization, is 8-bit, has the
/// output's shape and its scale.
#[test]
fn a_join_without_a_second_quantization_or_of_another_shape_or_type_is_refused() {
    use kiln::{DataType, QuantizedAnchor, Requantization};
    let anchor = QuantizedAnchor::MatrixMultiply { op_a: kiln::MatrixOp::None, op_b: kiln::MatrixOp::None };
    let attempt = |then: bool, join_type: DataType, join_shape: &[usize], join_scale: bool| {
        let mut net = Network::new("hand-made");
        let x = net.add_input("x", DataType::I8, &[4usize, 8][..]).expect("x");
        let w = net.add_input("w", DataType::I8, &[8usize, 3][..]).expect("w");
        let s = net.add_input("s", DataType::F32, &[1usize][..]).expect("s");
        let j = net.add_input("j", join_type, join_shape).expect("j");
        let mut slots = vec![None; Q::SLOTS];
        [slots[Q::X], slots[Q::W], slots[Q::X_SCALE], slots[Q::W_SCALE], slots[Q::Y_SCALE], slots[Q::JOIN]] = [Some(x), Some(w), Some(s), Some(s), Some(s), Some(j)];
        if then {
            slots[Q::THEN_SCALE] = Some(s);
        }
        if join_scale {
            slots[Q::JOIN_SCALE] = Some(s);
        }
        let params = Q { anchor: anchor.clone(), relu: false, output: DataType::I8, then: then.then_some(Requantization { relu: true, to: DataType::U8 }), lookup: None };
        net.add_layer("q", LayerKind::Quantized(params), slots).map(|l| net.tensor(net.output(l, 0)).dtype).map_err(|e| e.to_string())
    };
    assert_eq!(attempt(true, DataType::I8, &[4, 3], true), Ok(DataType::U8), "a join at the second quantization");
    for (what, then, join_type, shape, scale, says) in [
        ("no second quantization", false, DataType::I8, &[4usize, 3][..], true, "second quantization"),
        ("another shape", true, DataType::I8, &[4, 1][..], true, "shape"),
        ("a float join", true, DataType::F32, &[4, 3][..], true, "int8 or uint8"),
        ("no join scale", true, DataType::U8, &[4, 3][..], false, "scale"),
    ] {
        let refused = attempt(then, join_type, shape, scale).expect_err(what);
        assert!(refused.contains(says), "{what}: {refused}");
    }
}

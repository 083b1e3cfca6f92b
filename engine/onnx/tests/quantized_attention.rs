//! Attention in a Q/DQ network, on `qdq_models/mini_attention_s8`: one BERT-style self-attention
//! block as onnxruntime's `quantize_static` writes it (the product `Q·Kᵀ` and the
//! probabilities each quantized and dequantized again). The builder fuses the attention with
//! those levels before the Q/DQ fusion takes its products, folds the DequantizeLinear of Q, K
//! and V and the QuantizeLinear of its output into it, and the network keeps giving
//! onnxruntime's values.

mod common;

use kiln::{Builder, BuilderConfig, HostTensor, LayerKind};

fn relative_l2(got: &HostTensor, want: &HostTensor) -> f64 {
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    assert_eq!(g.len(), w.len());
    (g.iter().zip(&w).map(|(a, b)| (a - b).powi(2)).sum::<f64>() / w.iter().map(|b| b * b).sum::<f64>()).sqrt()
}

#[test]
fn a_quantized_attention_fuses_with_its_levels_and_keeps_onnxruntimes_values() {
    let backend = kiln_cpu::CpuBackend::new();
    let (net, feeds, onnxruntime) = common::qdq_fixture("mini_attention_s8");
    let engine = Builder::new(&backend).build(&net, &BuilderConfig::default()).expect("build");
    let built = engine.network();
    let attention: Vec<_> = built.layers().iter().filter_map(|l| match &l.kind {
        LayerKind::Attention(p) => Some(*p),
        _ => None,
    }).collect();
    assert_eq!(attention.len(), 1, "{}", built.dump());
    let p = attention[0];
    // onnxruntime quantizes the product before the division by sqrt(d), and the softmax's output.
    assert!(p.product_levels.is_some() && p.scores_levels.is_none() && p.probs_levels.is_some(), "{p:?}");
    assert!(!p.scale_multiplies && (p.scale - 4.0).abs() < 1e-6, "{p:?}");
    // Q, K and V are the projections' levels: their DequantizeLinear folded into the layer.
    let levels = p.input_levels.expect("Q, K and V read as levels");
    assert!(levels.grids.iter().all(Option::is_some) && levels.to == kiln::DataType::F32, "{p:?}");
    assert!(!built.layers().iter().any(|l| matches!(l.kind, LayerKind::Dequantize { .. })), "{}", built.dump());
    // The context's QuantizeLinear folded in too: the layer writes the levels the output
    // projection reads, and the only QuantizeLinear left is the network input's.
    let out = p.output_levels.expect("the output written as levels");
    assert_eq!(out.levels, kiln::DataType::I8, "{p:?}");
    assert_eq!(built.layers().iter().filter(|l| matches!(l.kind, LayerKind::Quantize { .. })).count(), 1, "{}", built.dump());
    // The projections around it are still integer layers: Q, K and V side by side as one
    // (passes/horizontal_quantized.rs), and the output projection.
    let integer = built.layers().iter().filter(|l| matches!(l.kind, LayerKind::Quantized(_))).count();
    assert_eq!(integer, 2, "{}", built.dump());
    let run = |engine| kiln::ExecutionContext::new(engine, &backend).expect("prepare").run(&feeds).expect("run").remove("y").expect("y");
    let got = run(engine);
    // onnxruntime emulates the Q/DQ graph in f32 as kiln's fused layer does; a sum in another
    // order may land a score or probability on the other side of a rounding tie.
    let error = relative_l2(&got, &onnxruntime);
    assert!(error < 1e-3, "relative L2 against onnxruntime: {error}");

    // With the probabilities a network output nothing fuses: the products run as integer
    // layers (exact sums), and the fused layer's float products agree with them.
    let mut exposed = net.clone();
    exposed.mark_output(net.find_tensor("probs").expect("probs")).expect("output");
    let unfused = Builder::new(&backend).build(&exposed, &BuilderConfig::default()).expect("build");
    assert!(unfused.network().layers().iter().all(|l| !matches!(l.kind, LayerKind::Attention(_))), "{}", unfused.network().dump());
    let error = relative_l2(&got, &run(unfused));
    assert!(error < 1e-3, "relative L2 against the unfused layers: {error}");
}

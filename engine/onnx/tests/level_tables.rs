//! Level tables (`passes/level_tables.rs`) on `qdq_models/mini_attention_s8`: onnxruntime's
//! `quantize_static` quantizes the projections before their bias (`MatMul → Q → DQ →
//! Add(bias) → Q`); the island after each product's levels becomes a per-column table the
//! product looks its levels up in (`QuantizedParams::lookup`), and the network gives exactly
//! the values it gives with the islands run as written.

mod common;

use kiln::{Builder, BuilderConfig, DataType, LayerKind, Network, QuantizedParams as Q};

/// The integer layers of `net` that look their levels up.
fn looking_up(net: &Network) -> Vec<&kiln::Layer> {
    net.layers().iter().filter(|l| matches!(&l.kind, LayerKind::Quantized(p) if p.lookup.is_some())).collect()
}

#[test]
fn islands_after_a_products_levels_become_its_level_table_exactly() {
    let backend = kiln_cpu::CpuBackend::new();
    let (net, feeds, _) = common::qdq_fixture("mini_attention_s8");
    let config = BuilderConfig { profiling_verbosity: kiln::ProfilingVerbosity::Detailed, ..BuilderConfig::default() };
    let engine = Builder::new(&backend).build(&net, &config).expect("build");
    let built = engine.network();
    // Q, K and V: their bias islands end in levels (the attention's inputs). The output
    // projection's ends in the network's float output: no table. The three products then
    // merge side by side (passes/horizontal_quantized.rs), their tables one after another.
    let folded = looking_up(built);
    assert_eq!(folded.len(), 1, "{}", built.dump());
    let table = built.tensor(folded[0].inputs[Q::LOOKUP].expect("a table"));
    assert_eq!((table.dtype, table.shape.as_fixed()), (DataType::I8, Some(vec![3 * 32, Q::LOOKUP_ROW])), "{}", folded[0].name);
    for island in [" + query", " + key", " + value"] {
        assert!(folded[0].name.contains(island), "{island} in {}", folded[0].name);
    }
    // No island reads a product's levels any more: the levels between are never written.
    for name in ["query_mm_QuantizeLinear_Output", "key_mm_QuantizeLinear_Output", "value_mm_QuantizeLinear_Output"] {
        assert!(built.find_tensor(name).is_none(), "{name} is written:\n{}", built.dump());
    }
    // The inspector shows the table's type among the layer's parameters.
    let inspector = kiln::EngineInspector::new(&engine);
    let shown = (0..built.layers().len())
        .filter_map(|i| inspector.get_layer_information(i, kiln::LayerInformationFormat::Json).ok())
        .filter(|j| j.contains("\"lookup\": \"I8\""))
        .count();
    assert_eq!(shown, 1);

    // With the products' levels network outputs nothing can fold them: the islands run as written.
    let mut exposed = net.clone();
    for name in ["query_mm_QuantizeLinear_Output", "key_mm_QuantizeLinear_Output", "value_mm_QuantizeLinear_Output"] {
        exposed.mark_output(net.find_tensor(name).expect(name)).expect("output");
    }
    let unfused = Builder::new(&backend).build(&exposed, &BuilderConfig::default()).expect("build");
    assert!(looking_up(unfused.network()).is_empty(), "{}", unfused.network().dump());
    // The engine file keeps the tables (format 16).
    let engine = kiln::Engine::deserialize(&engine.serialize()).expect("round trip");
    let run = |engine| kiln::ExecutionContext::new(engine, &backend).expect("prepare").run(&feeds).expect("run").remove("y").expect("y");
    let (got, want) = (run(engine), run(unfused));
    assert_eq!(got.data(), want.data());
}

/// A hand-made lookup is checked: levels before it, no second quantization, a `[columns, 256]`
/// table of the lookup's type.
#[test]
fn a_lookup_without_levels_or_with_a_misshapen_table_is_refused() {
    use kiln::{MatrixOp, QuantizedAnchor};
    let attempt = |output: DataType, table_shape: &[usize], table_type: DataType| {
        let mut net = Network::new("hand-made");
        let x = net.add_input("x", DataType::I8, &[4usize, 8][..]).expect("x");
        let w = net.add_input("w", DataType::I8, &[8usize, 3][..]).expect("w");
        let s = net.add_input("s", DataType::F32, &[1usize][..]).expect("s");
        let table = net.add_input("table", table_type, table_shape).expect("table");
        let mut slots = vec![None; Q::SLOTS];
        slots[Q::X] = Some(x);
        slots[Q::W] = Some(w);
        slots[Q::X_SCALE] = Some(s);
        slots[Q::W_SCALE] = Some(s);
        if output.is_8bit_integer() {
            slots[Q::Y_SCALE] = Some(s);
        }
        slots[Q::LOOKUP] = Some(table);
        let anchor = QuantizedAnchor::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::None };
        let params = Q { anchor, relu: false, output, then: None, lookup: Some(DataType::I8) };
        net.add_layer("layer", LayerKind::Quantized(params), slots).map(|_| ()).map_err(|e| e.to_string())
    };
    attempt(DataType::I8, &[3, 256], DataType::I8).expect("levels and a [3, 256] int8 table");
    let float = attempt(DataType::F32, &[3, 256], DataType::I8).unwrap_err();
    assert!(float.contains("a lookup maps levels"), "{float}");
    let shape = attempt(DataType::I8, &[4, 256], DataType::I8).unwrap_err();
    assert!(shape.contains("must be [3, 256]"), "{shape}");
    let dtype = attempt(DataType::I8, &[3, 256], DataType::U8).unwrap_err();
    assert!(dtype.contains("must be i8") || dtype.contains("must be I8"), "{dtype}");
}

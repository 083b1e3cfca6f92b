//! Horizontal fusion of sibling integer products (`passes/horizontal_quantized.rs`): products
//! of one input's levels become one product over their weights side by side, each column
//! keeping its own weight scale, int32 bias, output scale and level table, so the network
//! gives exactly the levels it gave. Siblings that differ where one layer cannot hold both (a
//! residual, another output type) stay apart.

mod common;

use kiln::passes::{DeadLayerElimination, Pass, PassContext, Pipeline, QuantizedHorizontalFusion};
use kiln::{Builder, BuilderConfig, DataType, ExecutionContext, HostTensor, LayerKind, MatrixOp, Network, Optimization, QuantizedAnchor, QuantizedParams as Q, TensorData};
use std::collections::HashMap;

/// A member: its columns, weights stored transposed or not, per-channel weight scales or one,
/// an int32 bias or none, its output scale, a level table or none, a residual or none.
struct Sibling {
    columns: usize,
    transposed: bool,
    per_channel: bool,
    bias: bool,
    y_scale: f32,
    table: bool,
    residual: bool,
}

/// Integers in `lo..hi` stored as `dtype` (i8 or i32), from a small LCG seeded by `seed`.
fn ints(shape: &[usize], dtype: DataType, lo: i64, hi: i64, seed: u64) -> HostTensor {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let values: Vec<i64> = (0..shape.iter().product::<usize>())
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            lo + ((state >> 33) % (hi - lo) as u64) as i64
        })
        .collect();
    let data = match dtype {
        DataType::I8 => TensorData::I8(values.iter().map(|&v| v as i8).collect()),
        _ => TensorData::I32(values.iter().map(|&v| v as i32).collect()),
    };
    HostTensor::new(shape.to_vec(), data).expect("shape")
}

const ROWS: usize = 6;
const DEPTH: usize = 32;

fn constant(net: &mut Network, t: HostTensor) -> kiln::TensorId {
    let shape = t.shape().to_vec();
    let l = net.add_constant(&shape, t.data().clone()).expect("constant");
    net.output(l, 0)
}

fn f32s(values: Vec<f32>) -> HostTensor {
    HostTensor::from_f32(vec![values.len()], values).expect("f32s")
}

/// Siblings reading int8 levels `x` ([6, 32]), each output read by a Cast to f32 (the network's
/// outputs, so the products' own outputs are not).
fn siblings(members: &[Sibling]) -> Network {
    let mut net = Network::new("siblings");
    let x = net.add_input("x", DataType::I8, &[ROWS, DEPTH][..]).expect("x");
    let residual = net.add_input("r", DataType::F32, &[ROWS, 8][..]).expect("r");
    let x_scale = constant(&mut net, f32s(vec![0.1]));
    for (m, s) in members.iter().enumerate() {
        let seed = 10 * m as u64;
        let shape = if s.transposed { [s.columns, DEPTH] } else { [DEPTH, s.columns] };
        let mut slots = vec![None; Q::SLOTS];
        slots[Q::X] = Some(x);
        slots[Q::X_SCALE] = Some(x_scale);
        slots[Q::W] = Some(constant(&mut net, ints(&shape, DataType::I8, -127, 128, seed + 1)));
        // Scales near 1/2^k put many results at a rounding tie.
        let w_scales = if s.per_channel { (0..s.columns).map(|k| [0.05, 0.025, 0.1, 0.0125][k % 4]).collect() } else { vec![0.025] };
        slots[Q::W_SCALE] = Some(constant(&mut net, f32s(w_scales)));
        if s.bias {
            slots[Q::BIAS] = Some(constant(&mut net, ints(&[s.columns], DataType::I32, -3000, 3000, seed + 2)));
        }
        slots[Q::Y_SCALE] = Some(constant(&mut net, f32s(vec![s.y_scale])));
        if s.table {
            slots[Q::LOOKUP] = Some(constant(&mut net, ints(&[s.columns, Q::LOOKUP_ROW], DataType::I8, -128, 128, seed + 3)));
        }
        if s.residual {
            slots[Q::RESIDUAL] = Some(residual);
        }
        let op_b = if s.transposed { MatrixOp::Transpose } else { MatrixOp::None };
        let params = Q { anchor: QuantizedAnchor::MatrixMultiply { op_a: MatrixOp::None, op_b }, relu: false, output: DataType::I8, then: None, lookup: s.table.then_some(DataType::I8) };
        let product = net.add_layer(&format!("product {m}"), LayerKind::Quantized(params), slots).expect("product");
        let levels = net.output(product, 0);
        let cast = net.add_layer(&format!("cast {m}"), LayerKind::Cast { to: DataType::F32 }, vec![Some(levels)]).expect("cast");
        let out = net.output(cast, 0);
        net.set_tensor_name(out, &format!("y{m}")).expect("name");
        net.mark_output(out).expect("output");
    }
    net
}

fn run(net: &Network) -> std::collections::BTreeMap<String, HostTensor> {
    let backend = kiln_cpu::CpuBackend::new();
    let config = BuilderConfig { optimization: Optimization::None, ..BuilderConfig::default() };
    let engine = Builder::new(&backend).build(net, &config).unwrap_or_else(|e| panic!("build: {e}\n{}", net.dump()));
    let feeds: HashMap<String, HostTensor> = [
        ("x".to_string(), ints(&[ROWS, DEPTH], DataType::I8, -128, 128, 99)),
        ("r".to_string(), HostTensor::from_f32(vec![ROWS, 8], (0..ROWS * 8).map(|i| i as f32 * 0.75 - 20.0).collect()).expect("r")),
    ]
    .into_iter()
    .collect();
    ExecutionContext::new(engine, &backend).expect("prepare").run(&feeds).expect("run")
}

fn merged(net: &Network) -> Network {
    Pipeline::new(vec![Box::new(QuantizedHorizontalFusion), Box::new(DeadLayerElimination)]).run(net, &PassContext::default()).expect("passes")
}

fn products(net: &Network) -> Vec<&kiln::Layer> {
    net.layers().iter().filter(|l| matches!(l.kind, LayerKind::Quantized(_))).collect()
}

fn sibling(columns: usize, transposed: bool, per_channel: bool, bias: bool, y_scale: f32) -> Sibling {
    Sibling { columns, transposed, per_channel, bias, y_scale, table: true, residual: false }
}

#[test]
fn sibling_integer_products_run_as_one_with_each_columns_arithmetic() {
    // Three projections with their own output scales (one a tie-prone power of two), one without
    // a bias, one with one weight scale: as Q, K and V of a Q/DQ transformer.
    let net = siblings(&[sibling(16, false, true, true, 0.37), sibling(24, false, false, false, 0.5), sibling(8, false, true, true, 1.25)]);
    let out = merged(&net);
    let layers = products(&out);
    assert_eq!(layers.len(), 1, "{}", out.dump());
    let wide = layers[0];
    assert_eq!(wide.name, "product 0 | product 1 | product 2");
    let shape = |slot: usize| out.tensor(wide.inputs[slot].expect("slot")).shape.as_fixed();
    assert_eq!(shape(Q::W), Some(vec![DEPTH, 48]));
    assert_eq!(shape(Q::LOOKUP), Some(vec![48, Q::LOOKUP_ROW]));
    for slot in [Q::W_SCALE, Q::Y_SCALE, Q::BIAS] {
        assert_eq!(shape(slot), Some(vec![48]), "slot {slot}");
    }
    assert_eq!(out.layers().iter().filter(|l| matches!(l.kind, LayerKind::Slice)).count(), 3);
    let (want, got) = (run(&net), run(&out));
    assert_eq!(want.len(), 3);
    for (name, w) in &want {
        assert_eq!(got[name].data(), w.data(), "{name}");
    }
    // Each member's columns really differ from the others' (the test would pass on any slicing
    // of equal columns otherwise).
    assert_ne!(want["y0"].to_f64_vec()[..8], want["y2"].to_f64_vec()[..8]);
}

#[test]
fn transposed_weights_merge_and_equal_output_scales_stay_one_value() {
    let net = siblings(&[sibling(16, true, true, true, 0.5), sibling(8, true, true, false, 0.5)]);
    let out = merged(&net);
    let layers = products(&out);
    assert_eq!(layers.len(), 1, "{}", out.dump());
    let shape = |slot: usize| out.tensor(layers[0].inputs[slot].expect("slot")).shape.volume();
    assert_eq!(out.tensor(layers[0].inputs[Q::W].unwrap()).shape.as_fixed(), Some(vec![24, DEPTH]));
    assert_eq!(shape(Q::Y_SCALE), Some(1), "one shared output scale stays one value");
    let (want, got) = (run(&net), run(&out));
    for (name, w) in &want {
        assert_eq!(got[name].data(), w.data(), "{name}");
    }
}

#[test]
fn siblings_that_one_layer_cannot_hold_stay_apart() {
    // A residual divides by one output scale; a member without a table has another output; a
    // transposed member stores its weights the other way: none merges with the first.
    let residual = Sibling { residual: true, ..sibling(8, false, true, true, 0.5) };
    let plain = Sibling { table: false, ..sibling(8, false, true, true, 0.5) };
    let net = siblings(&[sibling(8, false, true, true, 0.5), residual, plain, sibling(8, true, true, true, 0.5)]);
    assert!(QuantizedHorizontalFusion.run(&net, &PassContext::default()).expect("pass").is_none());
}

/// The full pipeline on the Q/DQ attention fixture: Q, K and V (after their bias islands became
/// level tables) merge into one product, and the output is what the islands gave run as written.
#[test]
fn a_qdq_attentions_projections_merge_after_their_level_tables() {
    let backend = kiln_cpu::CpuBackend::new();
    let (net, feeds, _) = common::qdq_fixture("mini_attention_s8");
    let engine = Builder::new(&backend).build(&net, &BuilderConfig::default()).expect("build");
    let built = engine.network();
    let wide: Vec<&kiln::Layer> = products(built).into_iter().filter(|l| l.name.contains(" | ")).collect();
    assert_eq!(wide.len(), 1, "{}", built.dump());
    assert_eq!(built.tensor(wide[0].inputs[Q::LOOKUP].expect("tables")).shape.as_fixed(), Some(vec![96, Q::LOOKUP_ROW]));
    let mut exposed = net.clone();
    for name in ["query_mm_QuantizeLinear_Output", "key_mm_QuantizeLinear_Output", "value_mm_QuantizeLinear_Output"] {
        exposed.mark_output(net.find_tensor(name).expect(name)).expect("output");
    }
    let unmerged = Builder::new(&backend).build(&exposed, &BuilderConfig::default()).expect("build");
    assert!(products(unmerged.network()).iter().all(|l| !l.name.contains(" | ")), "{}", unmerged.network().dump());
    let run = |engine| ExecutionContext::new(engine, &backend).expect("prepare").run(&feeds).expect("run").remove("y").expect("y");
    assert_eq!(run(engine).data(), run(unmerged).data());
}

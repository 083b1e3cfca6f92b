//! Q/DQ propagation (`kiln::passes::QdqPropagation`): the reshapes and transposes
//! onnxruntime's `quantize_static` wraps in Q/DQ pairs run on the integers, the pairs that
//! give every level back cancel, and the integer fusions reach across the layout layers, while
//! the outputs stay bit for bit those of the network as written.

mod common;

use common::*;
use kiln::passes::{Pass, PassContext, Pipeline, QdqPropagation, QuantizedFusion};
use kiln::{Builder, BuilderConfig, DataType, HostTensor, LayerKind, Network, ShuffleParams, TensorData, TensorId};
use kiln_onnx::proto::ModelProto;
#[path = "common/half_first.rs"]
mod half_first;
use half_first::HalfFirstCpu;

const ONNX_U8: i32 = 2;
const ONNX_I8: i32 = 3;

fn context() -> PassContext<'static> {
    PassContext { folding_backend: None, quantized_layers: true }
}

/// Deterministic values in `[-range, range)` (xorshift), wide enough to saturate some levels.
fn noise(seed: u64, n: usize, range: f32) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ((state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * range
        })
        .collect()
}

/// The network's outputs on the cpu backend, run as written (no pass).
fn run(net: &Network, inputs: &[HostTensor]) -> Vec<HostTensor> {
    let backend = kiln_cpu::CpuBackend::new();
    kiln::Backend::prepare(&backend, net).expect("prepare").execute(inputs).expect("run")
}

/// Same types and the same bits.
fn assert_bit_exact(got: &[HostTensor], want: &[HostTensor], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (g, w) in got.iter().zip(want) {
        assert_eq!((g.dtype(), g.shape()), (w.dtype(), w.shape()), "{what}");
        let bits = |t: &HostTensor| match t.data() {
            TensorData::F32(v) => v.iter().map(|x| x.to_bits() as u64).collect::<Vec<_>>(),
            TensorData::F16(v) => v.iter().map(|x| x.to_bits() as u64).collect(),
            TensorData::BF16(v) => v.iter().map(|x| x.to_bits() as u64).collect(),
            _ => t.to_i64_vec().expect("integers").into_iter().map(|x| x as u64).collect(),
        };
        assert_eq!(bits(g), bits(w), "{what}");
    }
}

fn propagated(net: &Network) -> Network {
    QdqPropagation.run(net, &context()).expect("pass").unwrap_or_else(|| panic!("nothing propagated:\n{}", net.dump()))
}

/// Kinds of the layers besides constants, as `(kind, output type)`.
fn kinds(net: &Network) -> Vec<(&'static str, DataType)> {
    net.layers()
        .iter()
        .filter(|l| !matches!(l.kind, LayerKind::Constant { .. }))
        .map(|l| (l.kind.type_name(), net.tensor(l.outputs[0]).dtype))
        .collect()
}

fn float_shuffles(net: &Network) -> usize {
    net.layers().iter().filter(|l| matches!(l.kind, LayerKind::Shuffle(_)) && net.tensor(l.outputs[0]).dtype.is_float()).count()
}

/// A QuantizeLinear reading a DequantizeLinear directly.
fn has_dq_q_pair(net: &Network) -> bool {
    net.layers().iter().any(|l| {
        matches!(l.kind, LayerKind::Quantize { .. })
            && l.inputs[0].and_then(|t| net.tensor(t).producer).is_some_and(|(p, _)| matches!(net.layer(p).kind, LayerKind::Dequantize { .. }))
    })
}

/// An attention block's Q/DQ graph as onnxruntime's `quantize_static` writes it (uint8
/// activations, int8 weights): a projection whose heads are split by Reshape → Transpose with
/// a Q/DQ pair after each, the keys transposed, the scores and context products, the heads
/// merged back by Transpose → Reshape and a residual Add after the Reshape.
fn bert_like_block() -> ModelProto {
    let scale = |name: &str, v: f32| tensor_f32(name, &[], &[v]);
    let zero = |name: &str, v: u8| tensor_raw(name, &[], ONNX_U8, vec![v]);
    let weights: Vec<u8> = (0..256).map(|i| ((i * 37 % 255) - 127) as i8 as u8).collect();
    let q = |x: &str, s: &str, z: &str, y: &str| node("QuantizeLinear", &[x, s, z], &[y]);
    let dq = |x: &str, s: &str, z: &str, y: &str| node("DequantizeLinear", &[x, s, z], &[y]);
    Graph::new()
        .input("x", F32, "1,4,16")
        .init(scale("s_x", 0.05))
        .init(zero("z_x", 128))
        .init(tensor_raw("w", &[16, 16], ONNX_I8, weights))
        .init(scale("s_w", 0.02))
        .init(tensor_raw("z_w", &[], ONNX_I8, vec![0]))
        .init(tensor_f32("bias", &[16], &noise(7, 16, 0.5)))
        .init(scale("s_p", 0.04))
        .init(zero("z_p", 120))
        .init(scale("s_a", 0.1))
        .init(zero("z_a", 100))
        .init(scale("s_y", 0.06))
        .init(zero("z_y", 128))
        .init(tensor_i64("heads", &[4], &[1, 4, 2, 8]))
        .init(tensor_i64("merged", &[3], &[1, 4, 16]))
        .node(q("x", "s_x", "z_x", "x_q"))
        .node(dq("x_q", "s_x", "z_x", "x_dq"))
        .node(dq("w", "s_w", "z_w", "w_dq"))
        .node(node("MatMul", &["x_dq", "w_dq"], &["proj"]))
        .node(node("Add", &["proj", "bias"], &["proj_b"]))
        .node(q("proj_b", "s_p", "z_p", "proj_q"))
        .node(dq("proj_q", "s_p", "z_p", "proj_dq"))
        .node(node("Reshape", &["proj_dq", "heads"], &["split"]))
        .node(q("split", "s_p", "z_p", "split_q"))
        .node(dq("split_q", "s_p", "z_p", "split_dq"))
        .node(node("Transpose", &["split_dq"], &["heads_t"]).ints("perm", &[0, 2, 1, 3]))
        .node(q("heads_t", "s_p", "z_p", "heads_q"))
        .node(dq("heads_q", "s_p", "z_p", "heads_dq"))
        .node(node("Transpose", &["heads_dq"], &["keys"]).ints("perm", &[0, 1, 3, 2]))
        .node(q("keys", "s_p", "z_p", "keys_q"))
        .node(dq("keys_q", "s_p", "z_p", "keys_dq"))
        .node(node("MatMul", &["heads_dq", "keys_dq"], &["scores"]))
        .node(q("scores", "s_a", "z_a", "scores_q"))
        .node(dq("scores_q", "s_a", "z_a", "scores_dq"))
        .node(node("MatMul", &["scores_dq", "heads_dq"], &["context"]))
        .node(q("context", "s_p", "z_p", "context_q"))
        .node(dq("context_q", "s_p", "z_p", "context_dq"))
        .node(node("Transpose", &["context_dq"], &["merged_t"]).ints("perm", &[0, 2, 1, 3]))
        .node(q("merged_t", "s_p", "z_p", "merged_q"))
        .node(dq("merged_q", "s_p", "z_p", "merged_dq"))
        .node(node("Reshape", &["merged_dq", "merged"], &["merged_r"]))
        .node(node("Add", &["merged_r", "x_dq"], &["residual"]))
        .node(q("residual", "s_y", "z_y", "y_q"))
        .node(dq("y_q", "s_y", "z_y", "y"))
        .output("y")
        .model(13)
}

fn bert_inputs(seed: u64) -> Vec<HostTensor> {
    vec![HostTensor::from_f32(vec![1, 4, 16], noise(seed, 64, 8.0)).expect("x")]
}

/// The standard pipeline without Q/DQ propagation: what the optimizer made before it.
fn pipeline_without_propagation() -> Pipeline {
    Pipeline::new(Pipeline::standard().passes.into_iter().filter(|p| p.name() != "qdq-propagation").collect())
}

/// The residual Add's fused layer: its dequantized inputs, and whether it ends quantized.
fn residual_island(net: &Network) -> (usize, bool) {
    let islands: Vec<_> = net
        .layers()
        .iter()
        .filter_map(|l| match &l.kind {
            LayerKind::Fused(p) if matches!(p.anchor, kiln::FusedAnchor::Elementwise(_)) => Some(p),
            _ => None,
        })
        .collect();
    let [island] = islands[..] else { panic!("one fused Add:\n{}", net.dump()) };
    (island.dequantized.len(), island.epilogue.iter().any(|s| matches!(s, kiln::PostOp::Quantize { .. })))
}

#[test]
fn a_bert_block_runs_its_reshapes_and_transposes_on_the_integers() {
    let net = import(&bert_like_block());
    assert_eq!(float_shuffles(&net), 5, "as imported:\n{}", net.dump());

    // The pass alone: every layout layer on uint8, every pair around them gone, bit-exact.
    let moved = propagated(&net);
    assert_eq!(float_shuffles(&moved), 0, "{}", moved.dump());
    assert!(!has_dq_q_pair(&moved), "{}", moved.dump());
    for seed in 1..=4 {
        assert_bit_exact(&run(&moved, &bert_inputs(seed)), &run(&net, &bert_inputs(seed)), &format!("pass alone, seed {seed}"));
    }

    // The pipeline: three integer products, and the residual island reads both sides as
    // integers (before, the Reshape left one side float).
    let optimized = Pipeline::standard().run(&net, &context()).expect("passes");
    let before = pipeline_without_propagation().run(&net, &context()).expect("passes");
    let integer_products = |n: &Network| n.layers().iter().filter(|l| matches!(l.kind, LayerKind::Quantized(_))).count();
    assert_eq!(integer_products(&optimized), 3, "{}", optimized.dump());
    assert_eq!(float_shuffles(&optimized), 0, "{}", optimized.dump());
    assert_eq!(residual_island(&optimized), (2, true), "{}", optimized.dump());
    assert_eq!(residual_island(&before), (1, true), "{}", before.dump());
    assert!(float_shuffles(&before) > 0, "{}", before.dump());
    let quantizations = optimized.layers().iter().filter(|l| matches!(l.kind, LayerKind::Quantize { .. })).count();
    assert_eq!(quantizations, 1, "only the input's QuantizeLinear is left:\n{}", optimized.dump());
    for seed in 1..=4 {
        let inputs = bert_inputs(seed);
        assert_bit_exact(&run(&optimized, &inputs), &run(&before, &inputs), &format!("pipeline, seed {seed}"));
    }
}

/// An FP16 build propagates before narrowing: no f16 layout layer between Casts is left where
/// the Q/DQ pairs were, and the outputs are those of the f32 build.
#[test]
fn an_fp16_build_keeps_the_layout_layers_on_the_integers() {
    let net = import(&bert_like_block());
    let backend = HalfFirstCpu(kiln_cpu::CpuBackend::new());
    let mut config = BuilderConfig::default();
    config.set_flag(kiln::BuilderFlag::Fp16);
    let half = Builder::new(&backend).build(&net, &config).expect("fp16 build");
    let built = half.network();
    assert_eq!(float_shuffles(built), 0, "{}", built.dump());
    assert!(!built.layers().iter().any(|l| matches!(l.kind, LayerKind::Cast { .. })), "{}", built.dump());
    let plain = Builder::new(&backend).build(&net, &BuilderConfig::default()).expect("build");
    let feeds = std::collections::HashMap::from([("x".to_string(), bert_inputs(3).remove(0))]);
    let run = |engine: kiln::Engine| kiln::ExecutionContext::new(engine, &backend).expect("prepare").run(&feeds).expect("run");
    assert_eq!(run(half)["y"].data(), run(plain)["y"].data());
}

/// A hand-built Q/DQ network.
struct Qdq {
    net: Network,
}

impl Qdq {
    fn new(name: &str) -> Qdq {
        Qdq { net: Network::new(name) }
    }
    fn constant(&mut self, name: &str, t: HostTensor) -> TensorId {
        let w = self.net.add_weights(t);
        let layer = self.net.add_layer(name, LayerKind::Constant { weights: w }, vec![]).expect("constant");
        self.net.output(layer, 0)
    }
    fn layer(&mut self, name: &str, kind: LayerKind, inputs: &[Option<TensorId>]) -> TensorId {
        let layer = self.net.add_layer(name, kind, inputs.to_vec()).expect(name);
        self.net.output(layer, 0)
    }
    fn q(&mut self, name: &str, x: TensorId, s: TensorId, z: Option<TensorId>, to: DataType) -> TensorId {
        self.layer(name, LayerKind::Quantize { axis: None, to }, &[Some(x), Some(s), z])
    }
    fn dq(&mut self, name: &str, x: TensorId, s: TensorId, z: Option<TensorId>) -> TensorId {
        self.layer(name, LayerKind::Dequantize { axis: None, to: None }, &[Some(x), Some(s), z])
    }
    fn reshape(&mut self, name: &str, x: TensorId, dims: &[i64]) -> TensorId {
        self.layer(name, LayerKind::Shuffle(ShuffleParams { reshape: Some(dims.to_vec()), ..Default::default() }), &[Some(x)])
    }
    fn transpose(&mut self, name: &str, x: TensorId, perm: &[usize]) -> TensorId {
        self.layer(name, LayerKind::Shuffle(ShuffleParams { first_transpose: perm.to_vec(), ..Default::default() }), &[Some(x)])
    }
}

fn u8_input(shape: &[usize], seed: u64) -> HostTensor {
    let n = shape.iter().product();
    let mut levels: Vec<u8> = noise(seed, n, 128.0).into_iter().map(|v| (v + 128.0) as u8).collect();
    levels[0] = 255;
    levels[1] = 0;
    HostTensor::new(shape.to_vec(), TensorData::U8(levels)).expect("levels")
}

/// f16 scales: the DequantizeLinear outputs are f16, rounded once from the f32 product; with
/// one scale every level still comes back, so the pairs cancel, bit-exact.
#[test]
fn f16_scales_cancel_exactly_through_reshape_and_transpose() {
    use half::f16;
    let mut b = Qdq::new("f16 qdq layout");
    let x = b.net.add_input("x", DataType::F16, &[2usize, 3, 4][..]).expect("x");
    let s = b.constant("s", HostTensor::new(vec![], TensorData::F16(vec![f16::from_f32(0.07)])).expect("s"));
    let z = b.constant("z", HostTensor::new(vec![], TensorData::I8(vec![-5])).expect("z"));
    let q0 = b.q("q0", x, s, Some(z), DataType::I8);
    let d0 = b.dq("dq0", q0, s, Some(z));
    let r = b.reshape("reshape", d0, &[6, 4]);
    let q1 = b.q("q1", r, s, Some(z), DataType::I8);
    let d1 = b.dq("dq1", q1, s, Some(z));
    let t = b.transpose("transpose", d1, &[1, 0]);
    let q2 = b.q("q2", t, s, Some(z), DataType::I8);
    let y = b.dq("dq2", q2, s, Some(z));
    b.net.mark_output(y).expect("y");
    let moved = propagated(&b.net);
    assert_eq!(
        kinds(&moved),
        vec![("Quantize", DataType::I8), ("Shuffle", DataType::I8), ("Shuffle", DataType::I8), ("Dequantize", DataType::F16)],
        "{}",
        moved.dump()
    );
    for seed in 1..=4 {
        let x = HostTensor::new(vec![2, 3, 4], TensorData::F16(noise(seed, 24, 12.0).into_iter().map(f16::from_f32).collect())).expect("x");
        assert_bit_exact(&run(&moved, std::slice::from_ref(&x)), &run(&b.net, &[x]), &format!("seed {seed}"));
    }
}

/// `a → DQ → Reshape → Q → DQ → y` with the given DequantizeLinear and QuantizeLinear scales.
fn dq_reshape_q(dq_scale: HostTensor, q_scale: HostTensor) -> Network {
    let mut b = Qdq::new("dq reshape q");
    let a = b.net.add_input("a", DataType::U8, &[2usize, 3, 4][..]).expect("a");
    let (s_in, s_out) = (b.constant("s_in", dq_scale), b.constant("s_out", q_scale));
    let d = b.dq("dq", a, s_in, None);
    let r = b.reshape("reshape", d, &[6, 4]);
    let q = b.q("q", r, s_out, None, DataType::U8);
    let y = b.dq("dq_y", q, s_out, None);
    b.net.mark_output(y).expect("y");
    b.net
}

/// Pairs that do not give every level back stay: another scale, and one bf16 scale whose
/// products round to 8 bits (255 · 1.0078125 is 256 in bf16, which quantizes to 254).
#[test]
fn a_pair_that_changes_some_level_stays_as_written() {
    use half::bf16;
    let f32_scale = |v: f32| HostTensor::from_f32(vec![], vec![v]).expect("scale");
    let bf16_scale = || HostTensor::new(vec![], TensorData::BF16(vec![bf16::from_f32(1.0078125)])).expect("scale");
    for (what, net) in [("other scale", dq_reshape_q(f32_scale(0.1), f32_scale(0.2))), ("bf16 scale", dq_reshape_q(bf16_scale(), bf16_scale()))] {
        let moved = propagated(&net);
        assert_eq!(float_shuffles(&moved), 0, "{what}: the reshape still moves onto the integers:\n{}", moved.dump());
        assert!(has_dq_q_pair(&moved), "{what}: the pair stays:\n{}", moved.dump());
        let a = u8_input(&[2, 3, 4], 5);
        let (got, want) = (run(&moved, std::slice::from_ref(&a)), run(&net, std::slice::from_ref(&a)));
        assert_bit_exact(&got, &want, what);
    }
    // Cancelling the bf16 pair would be wrong: level 255 comes back as 254.
    let mut b = Qdq::new("bf16 round trip");
    let a = b.net.add_input("a", DataType::U8, &[2usize][..]).expect("a");
    let s = b.constant("s", bf16_scale());
    let d = b.dq("dq", a, s, None);
    let q = b.q("q", d, s, None, DataType::U8);
    b.net.mark_output(q).expect("q");
    let levels = run(&b.net, &[HostTensor::new(vec![2], TensorData::U8(vec![255, 3])).expect("a")]);
    assert_eq!(levels[0].data(), &TensorData::U8(vec![254, 3]));
}

/// A per-channel DequantizeLinear or QuantizeLinear does not commute with a layout layer: it
/// stays on its side, and a per-channel pair does not cancel.
#[test]
fn per_channel_steps_stay_as_written() {
    let mut b = Qdq::new("per channel dq");
    let a = b.net.add_input("a", DataType::U8, &[2usize, 3, 4][..]).expect("a");
    let s = b.constant("s", HostTensor::from_f32(vec![3], vec![0.1, 0.2, 0.3]).expect("s"));
    let s1 = b.constant("s1", HostTensor::from_f32(vec![], vec![0.1]).expect("s1"));
    let d = b.layer("dq", LayerKind::Dequantize { axis: Some(1), to: None }, &[Some(a), Some(s), None]);
    let r = b.reshape("reshape", d, &[6, 4]);
    let q = b.q("q", r, s1, None, DataType::U8);
    let y = b.dq("dq_y", q, s1, None);
    b.net.mark_output(y).expect("y");
    // The per-tensor QuantizeLinear moves before the reshape; the per-channel pair stays.
    let moved = propagated(&b.net);
    assert_eq!(
        kinds(&moved),
        vec![("Dequantize", DataType::F32), ("Quantize", DataType::U8), ("Shuffle", DataType::U8), ("Dequantize", DataType::F32)],
        "{}",
        moved.dump()
    );
    assert!(has_dq_q_pair(&moved), "{}", moved.dump());
    let a = u8_input(&[2, 3, 4], 9);
    assert_bit_exact(&run(&moved, std::slice::from_ref(&a)), &run(&b.net, &[a]), "per-channel dq");

    let mut b = Qdq::new("per channel q");
    let x = b.net.add_input("x", DataType::F32, &[2usize, 3, 4][..]).expect("x");
    let s = b.constant("s", HostTensor::from_f32(vec![3], vec![0.1, 0.2, 0.3]).expect("s"));
    let t = b.transpose("transpose", x, &[0, 2, 1]);
    let q = b.layer("q", LayerKind::Quantize { axis: Some(2), to: DataType::U8 }, &[Some(t), Some(s), None]);
    b.net.mark_output(q).expect("q");
    assert!(QdqPropagation.run(&b.net, &context()).expect("pass").is_none(), "{}", b.net.dump());
}

/// A DequantizeLinear read by a reshape and by a ReLU stays for the ReLU; the reshape reads the
/// integers and the pair after it cancels.
#[test]
fn a_dequantize_with_two_readers_stays_for_the_other() {
    let mut b = Qdq::new("two readers");
    let a = b.net.add_input("a", DataType::U8, &[2usize, 3, 4][..]).expect("a");
    let s = b.constant("s", HostTensor::from_f32(vec![], vec![0.3]).expect("s"));
    let z = b.constant("z", HostTensor::new(vec![], TensorData::U8(vec![100])).expect("z"));
    let d = b.dq("dq", a, s, Some(z));
    let r = b.reshape("reshape", d, &[6, 4]);
    let q = b.q("q", r, s, Some(z), DataType::U8);
    let y1 = b.dq("dq_y", q, s, Some(z));
    let y2 = b.layer("relu", LayerKind::Activation { kind: kiln::ActivationKind::Relu }, &[Some(d)]);
    b.net.mark_output(y1).expect("y1");
    b.net.mark_output(y2).expect("y2");
    let moved = propagated(&b.net);
    let mut got = kinds(&moved);
    got.sort();
    let mut want = vec![("Dequantize", DataType::F32), ("Shuffle", DataType::U8), ("Dequantize", DataType::F32), ("Activation", DataType::F32)];
    want.sort();
    assert_eq!(got, want, "{}", moved.dump());
    let relu = moved.layers().iter().find(|l| l.name == "relu").expect("relu");
    let relu_input = moved.tensor(relu.inputs[0].expect("input")).producer.expect("producer").0;
    assert_eq!(moved.layer(relu_input).name, "dq", "{}", moved.dump());
    for seed in 1..=3 {
        let a = u8_input(&[2, 3, 4], seed);
        assert_bit_exact(&run(&moved, std::slice::from_ref(&a)), &run(&b.net, &[a]), &format!("seed {seed}"));
    }
}

/// `Transpose → Q`: the QuantizeLinear moves before the transpose, which then moves integers.
#[test]
fn a_quantize_after_a_transpose_moves_before_it() {
    let mut b = Qdq::new("transpose q");
    let x = b.net.add_input("x", DataType::F32, &[2usize, 3, 4][..]).expect("x");
    let s = b.constant("s", HostTensor::from_f32(vec![], vec![0.05]).expect("s"));
    let z = b.constant("z", HostTensor::new(vec![], TensorData::U8(vec![128])).expect("z"));
    let t = b.transpose("transpose", x, &[0, 2, 1]);
    let q = b.q("q", t, s, Some(z), DataType::U8);
    let y = b.dq("dq", q, s, Some(z));
    b.net.mark_output(y).expect("y");
    let moved = propagated(&b.net);
    assert_eq!(kinds(&moved), vec![("Quantize", DataType::U8), ("Shuffle", DataType::U8), ("Dequantize", DataType::F32)], "{}", moved.dump());
    for seed in 1..=3 {
        let x = HostTensor::from_f32(vec![2, 3, 4], noise(seed, 24, 9.0)).expect("x");
        assert_bit_exact(&run(&moved, std::slice::from_ref(&x)), &run(&b.net, &[x]), &format!("seed {seed}"));
    }
}

/// `DQ → Add → Reshape → Transpose → Mul(scalar) → Q` (BERT's exported attention scales its
/// heads after splitting them): the Mul moves above both layout layers, the Q then moves onto
/// the integers, and the bias, the scale and the Q are one island before the layout layers.
#[test]
fn a_scalar_step_between_a_layout_layer_and_a_quantize_moves_before_the_layout() {
    let mut b = Qdq::new("scaled heads");
    let a = b.net.add_input("a", DataType::U8, &[2usize, 4, 6][..]).expect("a");
    let s = b.constant("s", HostTensor::from_f32(vec![], vec![0.3]).expect("s"));
    let z = b.constant("z", HostTensor::new(vec![], TensorData::U8(vec![100])).expect("z"));
    let bias = b.constant("bias", HostTensor::from_f32(vec![6], noise(5, 6, 2.0)).expect("bias"));
    let factor = b.constant("factor", HostTensor::from_f32(vec![], vec![0.59460354]).expect("factor"));
    let d = b.dq("dq", a, s, Some(z));
    let biased = b.layer("bias", LayerKind::Elementwise { op: kiln::ElementwiseOp::Sum }, &[Some(d), Some(bias)]);
    let split = b.reshape("split", biased, &[2, 4, 2, 3]);
    let heads = b.transpose("heads", split, &[0, 2, 3, 1]);
    let scaled = b.layer("scale", LayerKind::Elementwise { op: kiln::ElementwiseOp::Prod }, &[Some(factor), Some(heads)]);
    let q = b.q("q", scaled, s, Some(z), DataType::U8);
    let y = b.dq("dq_y", q, s, Some(z));
    b.net.mark_output(y).expect("y");
    let moved = propagated(&b.net);
    let want = vec![
        ("Dequantize", DataType::F32),
        ("ElementWise", DataType::F32),
        ("ElementWise", DataType::F32),
        ("Quantize", DataType::U8),
        ("Shuffle", DataType::U8),
        ("Shuffle", DataType::U8),
        ("Dequantize", DataType::F32),
    ];
    assert_eq!(kinds(&moved), want, "{}", moved.dump());
    for seed in 1..=3 {
        let a = u8_input(&[2, 4, 6], seed);
        assert_bit_exact(&run(&moved, std::slice::from_ref(&a)), &run(&b.net, &[a]), &format!("seed {seed}"));
    }
    // A per-element operand does not apply one value to every element: the Mul stays after
    // the layout layers.
    let mut b = Qdq::new("per-element scale");
    let x = b.net.add_input("x", DataType::F32, &[2usize, 6][..]).expect("x");
    let per_element = b.constant("factors", HostTensor::from_f32(vec![6, 2], noise(6, 12, 1.0)).expect("factors"));
    let s = b.constant("s", HostTensor::from_f32(vec![], vec![0.05]).expect("s"));
    let t = b.transpose("transpose", x, &[1, 0]);
    let scaled = b.layer("scale", LayerKind::Elementwise { op: kiln::ElementwiseOp::Prod }, &[Some(t), Some(per_element)]);
    let q = b.q("q", scaled, s, None, DataType::I8);
    b.net.mark_output(q).expect("q");
    assert!(QdqPropagation.run(&b.net, &context()).expect("pass").is_none(), "per-element operand moved:\n{}", b.net.dump());
}

/// A packed in-projection (`nn.MultiheadAttention`, as torchvision's ViT exports it): one
/// product's levels dequantized, its bias added, split into Q, K and V by reshape, transpose and
/// one-index slices, Q and K scaled, each quantized on its own grid. The bias moves through the
/// split (each of Q, K and V gets its part), every layout layer and slice then runs on the
/// levels, and each branch is `DQ → Add → [Mul] → Q`, bit-exact.
#[test]
fn a_packed_projections_split_moves_onto_its_levels() {
    let (seq, batch, heads, head_dim) = (3usize, 2usize, 2usize, 2usize);
    let embed = heads * head_dim;
    let mut b = Qdq::new("packed in-projection");
    let a = b.net.add_input("a", DataType::U8, &[seq, batch, 3 * embed][..]).expect("a");
    let s = b.constant("s", HostTensor::from_f32(vec![], vec![0.05]).expect("s"));
    let z = b.constant("z", HostTensor::new(vec![], TensorData::U8(vec![120])).expect("z"));
    let bias = b.constant("bias", HostTensor::from_f32(vec![3 * embed], noise(9, 3 * embed, 2.0)).expect("bias"));
    let d = b.dq("dq", a, s, Some(z));
    let biased = b.layer("bias", LayerKind::Elementwise { op: kiln::ElementwiseOp::Sum }, &[Some(d), Some(bias)]);
    // unflatten(-1, (3, E)).unsqueeze(0).transpose(0, -2).squeeze(-2): [3, S, B, E].
    let unflat = b.reshape("unflatten", biased, &[1, seq as i64, batch as i64, 3, embed as i64]);
    let moved = b.transpose("transpose", unflat, &[3, 1, 2, 0, 4]);
    let split = b.reshape("squeeze", moved, &[3, seq as i64, batch as i64, embed as i64]);
    let int = |b: &mut Qdq, name: &str, v: i64| b.constant(name, HostTensor::from_i64(vec![1], vec![v]).expect(name));
    let (axes, factor) = (int(&mut b, "axes", 0), b.constant("factor", HostTensor::from_f32(vec![], vec![0.70710677]).expect("factor")));
    let grids = [0.04f32, 0.045, 0.06];
    for (k, name) in ["q", "k", "v"].into_iter().enumerate() {
        let (start, end) = (int(&mut b, &format!("{name} start"), k as i64), int(&mut b, &format!("{name} end"), k as i64 + 1));
        let part = b.layer(&format!("{name} slice"), LayerKind::Slice, &[Some(split), Some(start), Some(end), Some(axes)]);
        let heads_first = b.reshape(&format!("{name} heads"), part, &[seq as i64, (batch * heads) as i64, head_dim as i64]);
        let mut x = b.transpose(&format!("{name} batch first"), heads_first, &[1, 0, 2]);
        if name != "v" {
            x = b.layer(&format!("{name} scale"), LayerKind::Elementwise { op: kiln::ElementwiseOp::Prod }, &[Some(x), Some(factor)]);
        }
        let grid = b.constant(&format!("{name} grid"), HostTensor::from_f32(vec![], vec![grids[k]]).expect("grid"));
        let q = b.q(&format!("{name} q"), x, grid, None, DataType::I8);
        b.net.mark_output(q).expect("output");
    }
    let moved = propagated(&b.net);
    let float_moves = |n: &Network| {
        n.layers().iter().filter(|l| matches!(l.kind, LayerKind::Shuffle(_) | LayerKind::Slice) && n.tensor(l.outputs[0]).dtype.is_float()).count()
    };
    assert_eq!(float_moves(&b.net), 12);
    assert_eq!(float_moves(&moved), 0, "{}", moved.dump());
    // Three branches of DQ → Add → [Mul] → Q, each Add with its third of the bias.
    let adds: Vec<_> = moved.layers().iter().filter(|l| matches!(l.kind, LayerKind::Elementwise { op: kiln::ElementwiseOp::Sum })).collect();
    assert_eq!(adds.len(), 3, "{}", moved.dump());
    for add in &adds {
        let operand = add.inputs.iter().flatten().find_map(|&t| moved.tensor(t).value.clone()).expect("the moved bias");
        assert_eq!(operand.len(), embed, "{}", add.name);
    }
    for seed in 1..=4 {
        let a = u8_input(&[seq, batch, 3 * embed], seed);
        assert_bit_exact(&run(&moved, std::slice::from_ref(&a)), &run(&b.net, &[a]), &format!("seed {seed}"));
    }
    // A bias read by a layer that only moves elements and by one that computes stays put.
    let mut b = Qdq::new("bias read twice");
    let a = b.net.add_input("a", DataType::U8, &[2usize, 6][..]).expect("a");
    let s = b.constant("s", HostTensor::from_f32(vec![], vec![0.05]).expect("s"));
    let bias = b.constant("bias", HostTensor::from_f32(vec![6], noise(3, 6, 1.0)).expect("bias"));
    let d = b.dq("dq", a, s, None);
    let biased = b.layer("bias", LayerKind::Elementwise { op: kiln::ElementwiseOp::Sum }, &[Some(d), Some(bias)]);
    let t = b.transpose("transpose", biased, &[1, 0]);
    let doubled = b.layer("double", LayerKind::Elementwise { op: kiln::ElementwiseOp::Sum }, &[Some(biased), Some(biased)]);
    b.net.mark_output(t).expect("t");
    b.net.mark_output(doubled).expect("doubled");
    assert!(QdqPropagation.run(&b.net, &context()).expect("pass").is_none(), "{}", b.net.dump());
}

/// The packed in-projection as the legacy exporter writes it: `unflatten` (a Reshape by dims
/// computed from the tensor's shape), then Unsqueeze → Transpose → Squeeze and one-index
/// Gathers; Q and K scaled after their head split.
fn packed_projection_model() -> ModelProto {
    let scale = |name: &str, v: f32| tensor_f32(name, &[], &[v]);
    let zero = |name: &str, v: u8| tensor_raw(name, &[], ONNX_U8, vec![v]);
    let weights: Vec<u8> = (0..8 * 24).map(|i| ((i * 53 % 251) as i64 - 125) as i8 as u8).collect();
    let q = |x: &str, s: &str, z: &str, y: &str| node("QuantizeLinear", &[x, s, z], &[y]);
    let dq = |x: &str, s: &str, z: &str, y: &str| node("DequantizeLinear", &[x, s, z], &[y]);
    let mut g = Graph::new()
        .input("x", F32, "3,2,8")
        .init(scale("s_x", 0.05))
        .init(zero("z_x", 128))
        .init(tensor_raw("w", &[8, 24], ONNX_I8, weights))
        .init(scale("s_w", 0.02))
        .init(tensor_raw("z_w", &[], ONNX_I8, vec![0]))
        .init(tensor_f32("bias", &[24], &noise(11, 24, 0.5)))
        .init(scale("s_p", 0.03))
        .init(zero("z_p", 125))
        .init(tensor_i64("from0", &[1], &[0]))
        .init(tensor_i64("to2", &[1], &[2]))
        .init(tensor_i64("parts", &[2], &[3, 8]))
        .init(tensor_i64("axis0", &[1], &[0]))
        .init(tensor_i64("axis3", &[1], &[3]))
        .init(tensor_i64("heads", &[3], &[3, 4, 4]))
        .init(tensor_f32("factor", &[], &[0.70710677]))
        .node(q("x", "s_x", "z_x", "x_q"))
        .node(dq("x_q", "s_x", "z_x", "x_dq"))
        .node(dq("w", "s_w", "z_w", "w_dq"))
        .node(node("MatMul", &["x_dq", "w_dq"], &["proj"]))
        .node(q("proj", "s_p", "z_p", "proj_q"))
        .node(dq("proj_q", "s_p", "z_p", "proj_dq"))
        .node(node("Add", &["bias", "proj_dq"], &["proj_b"]))
        // The legacy exporter computes unflatten's dims from the tensor's shape.
        .node(node("Shape", &["proj_b"], &["proj_shape"]))
        .node(node("Slice", &["proj_shape", "from0", "to2"], &["leading"]))
        .node(node("Concat", &["leading", "parts"], &["unflat"]).int("axis", 0))
        .node(node("Reshape", &["proj_b", "unflat"], &["unflattened"]))
        .node(node("Unsqueeze", &["unflattened", "axis0"], &["unsqueezed"]))
        .node(node("Transpose", &["unsqueezed"], &["transposed"]).ints("perm", &[3, 1, 2, 0, 4]))
        .node(node("Squeeze", &["transposed", "axis3"], &["split"]));
    for (k, name) in ["q", "k", "v"].into_iter().enumerate() {
        let (index, part, heads, batch_first, scaled) =
            (format!("{name}_index"), format!("{name}_part"), format!("{name}_heads"), format!("{name}_bf"), format!("{name}_scaled"));
        g = g
            .init(tensor_i64(&index, &[], &[k as i64]))
            .init(scale(&format!("s_{name}"), [0.04, 0.045, 0.03][k]))
            .init(zero(&format!("z_{name}"), 128))
            .node(node("Gather", &["split", &index], &[&part]).int("axis", 0))
            .node(node("Reshape", &[&part, "heads"], &[&heads]))
            .node(node("Transpose", &[&heads], &[&batch_first]).ints("perm", &[1, 0, 2]));
        let before_q = if name == "v" {
            batch_first.clone()
        } else {
            g = g.node(node("Mul", &[&batch_first, "factor"], &[&scaled]));
            scaled.clone()
        };
        let (s, z) = (format!("s_{name}"), format!("z_{name}"));
        g = g.node(q(&before_q, &s, &z, &format!("{name}_q"))).node(dq(&format!("{name}_q"), &s, &z, name)).output(name);
    }
    g.model(13)
}

/// A build of the legacy export's packed in-projection: the split runs on the projection's
/// levels (no float layout layer or slice is left) in an FP16 build too, and its outputs are
/// the network's with the same integer product.
#[test]
fn a_build_runs_a_packed_projections_split_on_its_levels() {
    let net = import(&packed_projection_model());
    let float_moves = |n: &Network| {
        n.layers().iter().filter(|l| matches!(l.kind, LayerKind::Shuffle(_) | LayerKind::Slice | LayerKind::Gather { .. }) && n.tensor(l.outputs[0]).dtype.is_float()).count()
    };
    assert!(float_moves(&net) >= 9, "{}", net.dump());
    let backend = HalfFirstCpu(kiln_cpu::CpuBackend::new());
    let plain = Builder::new(&backend).build(&net, &BuilderConfig::default()).expect("build");
    let mut config = BuilderConfig::default();
    config.set_flag(kiln::BuilderFlag::Fp16);
    let half = Builder::new(&backend).build(&net, &config).expect("fp16 build");
    for engine in [&plain, &half] {
        let built = engine.network();
        assert_eq!(float_moves(built), 0, "{}", built.dump());
        // Q's, K's and V's islands fold into the product as one table of its 24 columns.
        let tables: Vec<_> = built.layers().iter().filter(|l| matches!(&l.kind, LayerKind::Quantized(p) if p.lookup.is_some())).collect();
        assert_eq!(tables.len(), 1, "{}", built.dump());
        assert!(!built.layers().iter().any(|l| matches!(l.kind, LayerKind::Fused(_))), "{}", built.dump());
    }
    // The projection's integer sums are exact where the float graph rounds each partial sum:
    // the reference is the network with only its product made an integer layer.
    let integer = QuantizedFusion.run(&net, &context()).expect("pass").expect("an integer product");
    let x = HostTensor::from_f32(vec![3, 2, 8], noise(4, 48, 6.0)).expect("x");
    let want = run(&integer, std::slice::from_ref(&x));
    let feeds = std::collections::HashMap::from([("x".to_string(), x)]);
    let outputs = |engine: kiln::Engine| kiln::ExecutionContext::new(engine, &backend).expect("prepare").run(&feeds).expect("run");
    for (what, engine) in [("plain", plain), ("fp16", half)] {
        let got = outputs(engine);
        for (k, name) in ["q", "k", "v"].into_iter().enumerate() {
            assert_bit_exact(std::slice::from_ref(&got[name]), std::slice::from_ref(&want[k]), &format!("{what} build, {name}"));
        }
    }
}

/// The dynamo exporter's attention reads the keys' shape where it transposes them (`Shape(k)`,
/// then `k` reshaped and transposed by the computed shape): a Shape reader does not stop the
/// scale and the Q moving above the layout layers, and reads the moved layouts' output, so the
/// bias, the scale and the Q meet on the projection's rows.
#[test]
fn a_shape_reader_does_not_stop_the_moves() {
    let mut b = Qdq::new("keys with a shape reader");
    let a = b.net.add_input("a", DataType::I8, &[2usize, 4, 6][..]).expect("a");
    let s = b.constant("s", HostTensor::from_f32(vec![], vec![0.3]).expect("s"));
    let factor = b.constant("factor", HostTensor::from_f32(vec![], vec![0.59460354]).expect("factor"));
    let bias = b.constant("bias", HostTensor::from_f32(vec![6], noise(5, 6, 2.0)).expect("bias"));
    let d = b.dq("dq", a, s, None);
    let biased = b.layer("bias", LayerKind::Elementwise { op: kiln::ElementwiseOp::Sum }, &[Some(d), Some(bias)]);
    let split = b.reshape("split", biased, &[2, 4, 2, 3]);
    let keys = b.transpose("keys", split, &[0, 2, 1, 3]);
    let shape = b.layer("keys_shape", LayerKind::Shape, &[Some(keys)]);
    let swapped = b.transpose("swapped", keys, &[0, 1, 3, 2]);
    let scaled = b.layer("scale", LayerKind::Elementwise { op: kiln::ElementwiseOp::Prod }, &[Some(swapped), Some(factor)]);
    let q = b.q("q", scaled, s, None, DataType::I8);
    let y = b.dq("dq_y", q, s, None);
    b.net.mark_output(y).expect("y");
    b.net.mark_output(shape).expect("shape");
    let moved = propagated(&b.net);
    let want = vec![
        ("Dequantize", DataType::F32),
        ("ElementWise", DataType::F32),
        ("ElementWise", DataType::F32),
        ("Quantize", DataType::I8),
        ("Shuffle", DataType::I8),
        ("Shuffle", DataType::I8),
        ("Shape", DataType::I64),
        ("Shuffle", DataType::I8),
        ("Dequantize", DataType::F32),
    ];
    assert_eq!(kinds(&moved), want, "{}", moved.dump());
    for seed in 1..=3 {
        let a = HostTensor::new(vec![2, 4, 6], TensorData::I8(noise(seed, 48, 128.0).into_iter().map(|v| v as i8).collect())).expect("a");
        assert_bit_exact(&run(&moved, std::slice::from_ref(&a)), &run(&b.net, &[a]), &format!("seed {seed}"));
    }
}

#[test]
fn without_integer_layers_nothing_moves() {
    let net = import(&bert_like_block());
    let context = PassContext { folding_backend: None, quantized_layers: false };
    assert!(QdqPropagation.run(&net, &context).expect("pass").is_none());
}

/// A one-layer BERT from PyTorch's dynamo exporter, Q/DQ-quantized as benches/gpu/quant.py
/// quantizes BERT-base (`qdq_models/tiny_bert_dynamo_s8`). Its attention reads the keys' shape
/// where it transposes them and scales the keys after their head split by a constant the graph
/// makes after that transpose; the moves still take every layout layer onto the integers (no
/// float Shuffle is left), with the unoptimized build's values bit for bit.
#[test]
fn the_dynamo_exporters_bert_has_every_layout_on_the_integers() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/qdq_models/tiny_bert_dynamo_s8/model.onnx");
    let net = kiln_onnx::import_file(&path).expect("import");
    let backend = kiln_cpu::CpuBackend::new();
    let build = |optimization: kiln::Optimization| {
        let config = BuilderConfig { optimization, ..BuilderConfig::default() };
        Builder::new(&backend).build(&net, &config).expect("build")
    };
    let (fused, plain) = (build(kiln::Optimization::Full), build(kiln::Optimization::None));
    let built = fused.network();
    let float_layouts: Vec<&str> = built
        .layers()
        .iter()
        .filter(|l| matches!(l.kind, LayerKind::Shuffle(_)) && l.outputs.iter().any(|&t| built.tensor(t).dtype.is_float()))
        .map(|l| l.name.as_str())
        .collect();
    assert!(float_layouts.is_empty(), "float layout layers left: {float_layouts:?}\n{}", built.dump());
    assert_eq!(built.layers().iter().filter(|l| matches!(l.kind, LayerKind::Attention(_))).count(), 1, "{}", built.dump());
    let ids = HostTensor::new(vec![2, 16], TensorData::I64((0..32).map(|i| (i * 37 + 5) % 64).collect())).expect("ids");
    let mask = HostTensor::new(vec![2, 16], TensorData::I64(vec![1; 32])).expect("mask");
    let feeds = std::collections::HashMap::from([("input_ids".to_string(), ids), ("attention_mask".to_string(), mask)]);
    let run = |engine: kiln::Engine| kiln::ExecutionContext::new(engine, &backend).expect("prepare").run(&feeds).expect("run").remove("hidden").expect("hidden");
    let (got, want) = (run(fused), run(plain));
    assert_eq!(got.shape(), &[2, 16, 64]);
    assert_eq!(got.data(), want.data());
}


/// A one-layer torchvision ViT (`nn.MultiheadAttention`'s packed in-projection) from each
/// PyTorch exporter, Q/DQ-quantized as benches/gpu/quant.py quantizes ViT-B/16
/// (`qdq_models/tiny_vit_{legacy,dynamo}_s8`). The exported attention scales Q by a factor it
/// computes from Q's own shape after the head split, which only folding makes known: the
/// propagation after folding still moves that split onto the levels. Every layout layer then
/// runs on the integers, Q's, K's and V's islands fold into the in-projection as one table, and
/// the outputs are the unoptimized build's bit for bit (an FP16 build's within f16's rounding).
#[test]
fn the_torchvision_vits_in_projection_splits_its_levels_from_either_exporter() {
    for exporter in ["legacy", "dynamo"] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/qdq_models/tiny_vit_{exporter}_s8/model.onnx"));
        let net = kiln_onnx::import_file(&path).expect("import");
        let backend = HalfFirstCpu(kiln_cpu::CpuBackend::new());
        let build = |optimization: kiln::Optimization, fp16: bool| {
            let mut config = BuilderConfig { optimization, ..BuilderConfig::default() };
            if fp16 {
                config.set_flag(kiln::BuilderFlag::Fp16);
            }
            Builder::new(&backend).build(&net, &config).expect("build")
        };
        let x = HostTensor::from_f32(vec![2, 3, 32, 32], noise(9, 2 * 3 * 32 * 32, 2.0)).expect("x");
        let feeds = std::collections::HashMap::from([("input".to_string(), x)]);
        let run = |engine: kiln::Engine| kiln::ExecutionContext::new(engine, &backend).expect("prepare").run(&feeds).expect("run").remove("logits").expect("logits");
        let want = run(build(kiln::Optimization::None, false));
        let relative_l2 = |got: &HostTensor| {
            let (g, w) = (got.as_f32().expect("f32"), want.as_f32().expect("f32"));
            g.iter().zip(w).map(|(a, b)| (a - b) * (a - b)).sum::<f32>().sqrt() / w.iter().map(|b| b * b).sum::<f32>().sqrt()
        };
        // An FP16 build rounds its float layers (the norms, the residual adds) to f16: no
        // further from the f32 build than the unoptimized FP16 build is.
        let unfused_fp16_error = relative_l2(&run(build(kiln::Optimization::None, true)));
        for fp16 in [false, true] {
            let fused = build(kiln::Optimization::Full, fp16);
            let built = fused.network();
            let float_moves: Vec<&str> = built
                .layers()
                .iter()
                .filter(|l| matches!(l.kind, LayerKind::Shuffle(_) | LayerKind::Slice | LayerKind::Gather { .. }))
                .filter(|l| l.outputs.iter().any(|&t| built.tensor(t).dtype.is_float()))
                .map(|l| l.name.as_str())
                .collect();
            // Only the class token's slice (`x[:, 0]`, before the head's QuantizeLinear) is float.
            assert_eq!(float_moves.len(), 1, "{exporter}: float layout layers: {float_moves:?}\n{}", built.dump());
            let split = built.layers().iter().filter(|l| matches!(&l.kind, LayerKind::Quantized(p) if p.lookup.is_some()) && l.name.contains("the islands after its split"));
            assert_eq!(split.count(), 1, "{exporter}: the in-projection with Q's, K's and V's islands as its table\n{}", built.dump());
            let got = run(fused);
            assert_eq!(got.shape(), &[2, 10]);
            if fp16 {
                let err = relative_l2(&got);
                assert!(err <= 1.25 * unfused_fp16_error, "{exporter}, fp16: relative L2 {err} against the f32 build, the unfused FP16 build's {unfused_fp16_error}");
            } else {
                assert_eq!(got.data(), want.data(), "{exporter}");
            }
        }
    }
}

/// A layer the rewrites before the precision pass keep keeps its precision constraint: a
/// Sigmoid constrained to f32 after a Q/DQ region the propagation changes still computes in
/// f32 in an FP16 build that obeys constraints.
#[test]
fn a_kept_layer_keeps_its_precision_constraint() {
    let mut b = Qdq::new("constrained sigmoid");
    let a = b.net.add_input("a", DataType::U8, &[2usize, 4, 6][..]).expect("a");
    let s = b.constant("s", HostTensor::from_f32(vec![], vec![0.05]).expect("s"));
    let z = b.constant("z", HostTensor::new(vec![], TensorData::U8(vec![100])).expect("z"));
    let d = b.dq("dq", a, s, Some(z));
    let r = b.reshape("reshape", d, &[8, 6]);
    let q = b.q("q", r, s, Some(z), DataType::U8);
    let d2 = b.dq("dq2", q, s, Some(z));
    let y = b.layer("sigmoid", LayerKind::Activation { kind: kiln::ActivationKind::Sigmoid }, &[Some(d2)]);
    b.net.mark_output(y).expect("y");
    let sigmoid = b.net.layers().iter().position(|l| l.name == "sigmoid").expect("sigmoid");
    b.net.set_layer_precision(kiln::LayerId(sigmoid), DataType::F32).expect("constraint");
    assert!(propagated(&b.net).layers().iter().any(|l| l.name == "sigmoid" && l.precision == Some(DataType::F32)));
    let backend = HalfFirstCpu(kiln_cpu::CpuBackend::new());
    let mut config = BuilderConfig::default();
    config.set_flag(kiln::BuilderFlag::Fp16);
    config.set_flag(kiln::BuilderFlag::ObeyPrecisionConstraints);
    let out = Builder::new(&backend).build_with_report(&b.net, &config).expect("fp16 build");
    assert!(!out.log.iter().any(|l| l.contains("`sigmoid` computes in f16")), "{:?}", out.log);
    // No f16 sigmoid between casts: it reads the levels and writes f32.
    let built = out.engine.network();
    assert!(!built.layers().iter().any(|l| matches!(l.kind, LayerKind::Cast { .. })), "{}", built.dump());
}

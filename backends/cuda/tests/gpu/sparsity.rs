//! 2:4 structured sparsity (seed §6.9) on cuSPARSELt: products and 1×1 convolutions whose
//! weights qualify are offered a sparse tactic in SPARSE_WEIGHTS builds; run sparse they give
//! the dense answer; the build reports eligible and picked layers; the 8192³ product is timed
//! sparse against dense (`KILN_CUDA_BENCH=1`).

use crate::common::{backend, random, rng, worst_error};
use kiln::tactics::{AlgorithmChoice, AlgorithmContext};
use kiln::{
    AlgorithmSelector, Backend, Builder, BuilderConfig, BuilderFlag, DataType, Engine, HostTensor, LayerId, LayerKind, MathMode,
    MatrixOp, Network, PreparedEngine, Shape, TensorData,
};
use std::collections::HashMap;
use std::sync::Arc;

/// Uniform values in [-1, 1) with channels 1 and 2 of every four along the reduction axis
/// zeroed: element `(o, r, i)` at `(o · reduction + r) · inner + i`.
fn two_four(len: usize, reduction: usize, inner: usize, seed: u64) -> Vec<f32> {
    let mut v = random(&mut rng(seed), DataType::F32, &[len]).to_f64_vec().into_iter().map(|x| x as f32).collect::<Vec<_>>();
    for (at, x) in v.iter_mut().enumerate() {
        if matches!((at / inner) % reduction % 4, 1 | 2) {
            *x = 0.0;
        }
    }
    v
}

/// `sparse` (x · W, W [256, 128]), `sparse_t` (x · Vᵀ, V [128, 256]), `sparse_bias_relu`
/// (ReLU(x · U + b), U [256, 64]), `dense` (x · D, D without zeros) and `conv1x1` (a 1×1
/// convolution of 64 to 32 channels with bias and ReLU), every sparse weight 2:4.
fn network() -> Network {
    let mut net = Network::new("sparsity");
    let x = net.add_input("x", DataType::F32, [64, 256]).unwrap();
    // The dense product and the biased one read inputs of their own, so that no sibling
    // products of one input merge (horizontal fusion) and each layer is checked by its name.
    let y = net.add_input("y", DataType::F32, [64, 256]).unwrap();
    let z = net.add_input("z", DataType::F32, [64, 256]).unwrap();
    let product = |net: &mut Network, name: &str, x: kiln::TensorId, dims: [usize; 2], data: Vec<f32>, op_b: MatrixOp| {
        let w = net.add_constant(&dims, TensorData::F32(data)).unwrap();
        let w = net.output(w, 0);
        let m = net.add_matrix_multiply(x, MatrixOp::None, w, op_b).unwrap();
        net.set_layer_name(m, name);
        net.output(m, 0)
    };
    let mut outputs = vec![
        ("sparse", product(&mut net, "sparse", x, [256, 128], two_four(256 * 128, 256, 128, 1), MatrixOp::None)),
        ("sparse_t", product(&mut net, "sparse_t", x, [128, 256], two_four(128 * 256, 256, 1, 2), MatrixOp::Transpose)),
        ("dense", product(&mut net, "dense", y, [256, 128], random(&mut rng(3), DataType::F32, &[256 * 128]).to_f64_vec().into_iter().map(|v| v as f32).collect(), MatrixOp::None)),
    ];
    let u = product(&mut net, "sparse_bias_relu", z, [256, 64], two_four(256 * 64, 256, 64, 4), MatrixOp::None);
    let b = net.add_constant(&[1, 64], TensorData::F32((0..64).map(|i| i as f32 / 32.0 - 1.0).collect())).unwrap();
    let b = net.output(b, 0);
    let sum = net.add_elementwise(u, b, kiln::ElementwiseOp::Sum).unwrap();
    let sum = net.output(sum, 0);
    let relu = net.add_activation(sum, kiln::ActivationKind::Relu).unwrap();
    outputs.push(("sparse_bias_relu", net.output(relu, 0)));
    let image = net.add_input("image", DataType::F32, [2, 64, 8, 8]).unwrap();
    let bias = (0..32).map(|i| i as f32 / 16.0 - 1.0).collect();
    let c = net.add_convolution(image, 32, &[1, 1], TensorData::F32(two_four(32 * 64, 64, 1, 5)), Some(TensorData::F32(bias))).unwrap();
    net.set_layer_name(c, "conv1x1");
    let c = net.output(c, 0);
    let relu = net.add_activation(c, kiln::ActivationKind::Relu).unwrap();
    outputs.push(("conv1x1", net.output(relu, 0)));
    for (name, t) in outputs {
        net.set_tensor_name(t, name).unwrap();
        net.mark_output(t).unwrap();
    }
    net
}

fn inputs() -> HashMap<String, HostTensor> {
    let mut r = rng(9);
    HashMap::from([
        ("x".into(), random(&mut r, DataType::F32, &[64, 256])),
        ("y".into(), random(&mut r, DataType::F32, &[64, 256])),
        ("z".into(), random(&mut r, DataType::F32, &[64, 256])),
        ("image".into(), random(&mut r, DataType::F32, &[2, 64, 8, 8])),
    ])
}

/// Keeps the sparse candidate wherever there is one.
struct PreferSparse;

impl AlgorithmSelector for PreferSparse {
    fn select_algorithms(&self, _: &AlgorithmContext, choices: &[AlgorithmChoice]) -> Vec<usize> {
        (0..choices.len()).filter(|&i| kiln::sparsity::is_sparse_tactic(&choices[i].tactic.id)).collect()
    }
    fn report_algorithms(&self, _: &[(AlgorithmContext, kiln::TacticId)]) {}
}

fn config(sparse: bool, prefer_sparse: bool) -> BuilderConfig {
    let mut config = BuilderConfig::default();
    config.set_flag(BuilderFlag::Fp16);
    if sparse {
        config.set_flag(BuilderFlag::SparseWeights);
    }
    if prefer_sparse {
        config.set_algorithm_selector(Arc::new(PreferSparse));
    }
    config
}

fn run(engine: Engine, backend: &dyn Backend) -> std::collections::BTreeMap<String, HostTensor> {
    PreparedEngine::new(engine, backend).unwrap().create_execution_context().run(&inputs()).expect("run")
}

/// The built layer `name` heads (a fused layer is named after all it took in: "a + b").
fn position(net: &Network, name: &str) -> usize {
    net.layers().iter().position(|l| l.name.split(" + ").next() == Some(name)).unwrap_or_else(|| panic!("no layer {name}"))
}

fn tactic_of(engine: &Engine, name: &str) -> String {
    engine.tactics()[position(engine.network(), name)].as_ref().expect("a tactic").name.clone()
}

/// A report's layer names less what fusion appended.
fn heads(names: &[String]) -> Vec<&str> {
    names.iter().map(|n| n.split(" + ").next().unwrap_or(n)).collect()
}

#[test]
fn sparse_products_and_convolutions_give_the_dense_answer() {
    let Some(cuda) = backend() else { return };
    let out = Builder::new(cuda).build_with_report(&network(), &config(true, true)).expect("sparse build");
    let report = out.summary.sparsity.clone().expect("a sparsity report");
    let sparse_layers = ["sparse", "sparse_t", "sparse_bias_relu", "conv1x1"];
    assert_eq!(heads(&report.eligible), sparse_layers, "{:?}", out.log);
    assert_eq!(heads(&report.picked), sparse_layers, "{:?}", out.log);
    assert!(out.log.iter().any(|l| l.starts_with("(Sparsity) the engine picked sparse implementation for layers: sparse, sparse_t, sparse_bias_relu")), "{:?}", out.log);
    assert_eq!(tactic_of(&out.engine, "sparse"), "sparse_gemm_cusparselt");
    assert_eq!(tactic_of(&out.engine, "conv1x1"), "sparse_conv_patches_gemm_cusparselt");
    assert!(!tactic_of(&out.engine, "dense").starts_with(kiln::sparsity::TACTIC_PREFIX));
    let engine = Engine::deserialize(&out.engine.serialize()).expect("round trip");
    let want = run(Builder::new(&kiln_cpu::CpuBackend::new()).build(&network(), &BuilderConfig::default()).unwrap(), &kiln_cpu::CpuBackend::new());
    let dense = run(Builder::new(cuda).build(&network(), &config(false, false)).expect("dense build"), cuda);
    // Twice: the first run chooses cuSPARSELt's configurations, the second replays a graph.
    let prepared = PreparedEngine::new(engine, cuda).unwrap();
    for round in 0..2 {
        let before = kiln_cuda::sparse::products_enqueued();
        let got = prepared.create_execution_context().run(&inputs()).expect("run");
        // A replayed graph enqueues nothing on the host: the first round counts the products.
        if round == 0 {
            assert!(kiln_cuda::sparse::products_enqueued() >= before + 4, "the four sparse layers ran on cuSPARSELt");
        }
        for (name, w) in &want {
            // f16 operands over k = 256 (64 at the convolution), f32 sums: the dense fp16
            // engine's error, whatever the order of the sums.
            let (err, dense_err) = (worst_error(&got[name], w), worst_error(&dense[name], w));
            assert!(err <= 1e-2, "round {round} {name}: {err} from the cpu oracle (dense fp16 {dense_err})");
            println!("sparse {name}: {err:.2e} from the cpu oracle, dense fp16 {dense_err:.2e}");
        }
    }
}

#[test]
fn the_sparse_tactic_is_offered_only_for_eligible_16_bit_weights_with_the_flag() {
    let Some(cuda) = backend() else { return };
    // As the builder sees it: the FP16 build's typed network.
    let out = Builder::new(cuda).build_with_report(&network(), &config(true, false)).expect("build");
    let net = out.engine.network();
    let offered = |name: &str, math: MathMode| {
        let layer = LayerId(position(net, name));
        cuda.tactics(net, layer, math).iter().any(|t| kiln::sparsity::is_sparse_tactic(&t.id))
    };
    let sparse = MathMode { sparse_weights: true, ..MathMode::EXACT };
    assert!(offered("sparse", sparse) && offered("sparse_t", sparse) && offered("conv1x1", sparse));
    assert!(!offered("sparse", MathMode::EXACT), "no flag, no sparse tactic");
    assert!(!offered("dense", sparse), "dense weights are not offered one");
    // Timing decided every layer; the report says what the engine runs.
    let report = out.summary.sparsity.expect("a sparsity report");
    for name in ["sparse", "sparse_t", "sparse_bias_relu", "conv1x1"] {
        let runs_sparse = tactic_of(&out.engine, name).starts_with(kiln::sparsity::TACTIC_PREFIX);
        assert_eq!(heads(&report.picked).contains(&name), runs_sparse, "{name}");
        println!("{name}: timed {:?}", out.engine.tactic_times(position(net, name)));
    }
    // f32 layers (no FP16 flag) have no cuSPARSELt tactic: the build warns they run dense.
    let mut f32_config = BuilderConfig::default();
    f32_config.set_flag(BuilderFlag::SparseWeights);
    let out = Builder::new(cuda).build_with_report(&network(), &f32_config).expect("f32 build");
    assert!(out.warnings.iter().any(|w| w.contains("no sparse kernel for 4 of 4 eligible layers")), "{:?}", out.warnings);
}

fn median(mut times: Vec<f32>) -> f32 {
    times.sort_by(f32::total_cmp);
    times[times.len() / 2]
}

/// A 8192³ fp16 product with constant 2:4 weights (stored `[k, n]`, or `[n, k]` transposed)
/// run sparse and dense by the same executable kind, alternating rounds: (sparse, dense) ms.
fn time_sparse_against_dense(n: usize, op_b: MatrixOp) -> (f32, f32) {
    let cuda = backend().expect("a device");
    let mut net = Network::new("sparse_gemm");
    let a = net.add_input("a", DataType::F16, Shape::fixed(&[n, n])).unwrap();
    let inner = if op_b == MatrixOp::None { n } else { 1 };
    let w = HostTensor::new(vec![n, n], TensorData::F16(two_four(n * n, n, inner, 7).into_iter().map(half::f16::from_f32).collect())).unwrap();
    let w = net.add_weights(w);
    let w = net.add_layer("w", LayerKind::Constant { weights: w }, vec![]).unwrap();
    let w = net.output(w, 0);
    let mm = net.add_layer("mm", LayerKind::MatrixMultiply { op_a: MatrixOp::None, op_b }, vec![Some(a), Some(w)]).unwrap();
    let out = net.output(mm, 0);
    net.mark_output(out).unwrap();
    let control = kiln::ir::control::lower(&net, kiln::ir::control::DEFAULT_MAX_TRIP_COUNT).expect("lower");
    let math = MathMode { sparse_weights: true, ..MathMode::EXACT };
    let tactics = cuda.tactics(&net, mm, math);
    let pick = |sparse: bool| {
        let mut chosen = vec![None; net.layers().len()];
        chosen[mm.0] = tactics.iter().find(|t| kiln::sparsity::is_sparse_tactic(&t.id) == sparse).map(|t| t.id.clone());
        assert!(chosen[mm.0].is_some(), "no {} tactic offered", if sparse { "sparse" } else { "dense" });
        cuda.prepare_cuda_plan(&net, &control, &chosen, math).expect("prepare")
    };
    let (sparse, dense) = (pick(true), pick(false));
    let gpu = sparse.gpu().clone();
    let x = gpu.upload(&random(&mut rng(8), DataType::F16, &[n, n])).unwrap();
    // Same answer first (f32 sums of the same f16 products, in another order).
    let (s, d) = (gpu.download(&sparse.execute_device(std::slice::from_ref(&x)).unwrap()[0]).unwrap(), gpu.download(&dense.execute_device(std::slice::from_ref(&x)).unwrap()[0]).unwrap());
    let err = worst_error(&s, &d);
    assert!(err <= 2e-2, "sparse differs from dense by {err}");
    let (mut ts, mut td) = (Vec::new(), Vec::new());
    for _ in 0..4 {
        ts.extend(gpu.time_ms(10, || sparse.execute_device(std::slice::from_ref(&x)).map(drop).map_err(|e| e.to_string())).unwrap());
        td.extend(gpu.time_ms(10, || dense.execute_device(std::slice::from_ref(&x)).map(drop).map_err(|e| e.to_string())).unwrap());
    }
    (median(ts), median(td))
}

#[test]
fn sparse_matrix_multiply_8192_against_dense() {
    if std::env::var("KILN_CUDA_BENCH").as_deref() != Ok("1") {
        eprintln!("SKIPPED: set KILN_CUDA_BENCH=1 to time the 2:4 sparse product against the dense one (GPU machine)");
        return;
    }
    if backend().is_none() {
        return;
    }
    let n = 8192;
    let tflops = |ms: f32| 2.0 * (n as f64).powi(3) / (ms as f64 * 1e-3) / 1e12;
    for (label, op_b) in [("W [k, n]", MatrixOp::None), ("W [n, k] transposed", MatrixOp::Transpose)] {
        let (sparse, dense) = time_sparse_against_dense(n, op_b);
        println!(
            "BENCH sparse fp16 {n}^3 {label}: cuSPARSELt {sparse:.3} ms ({:.0} dense-equivalent TFLOP/s), cuBLASLt dense {dense:.3} ms ({:.0} TFLOP/s), speed-up {:.3}",
            tflops(sparse),
            tflops(dense),
            dense / sparse
        );
    }
}

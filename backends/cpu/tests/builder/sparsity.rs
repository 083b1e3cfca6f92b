//! 2:4 structured sparsity (seed §6.9) on the cpu backend, whose 2:4 sparse matrix product
//! competes with the dense ones for weights that qualify in a SPARSE_WEIGHTS build.

use super::common::run;
use kiln::sparsity::{is_eligible, prune_network};
use kiln::tactics::{AlgorithmChoice, AlgorithmContext};
use kiln::{
    AlgorithmSelector, Backend, Builder, BuilderConfig, BuilderFlag, DataType, Engine, EngineInspector, HostTensor, LayerId,
    LayerInformationFormat, MathMode, MatrixOp, Network, ProfilingVerbosity, TensorData,
};
use kiln_cpu::CpuBackend;
use std::sync::Arc;

fn values(len: usize, seed: u32) -> Vec<f32> {
    (0..len).map(|i| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) % 1000) as f32 / 500.0 - 1.0 + 1e-3).collect()
}

/// `values` with channels 1 and 2 of every four along the reduction axis zeroed: element
/// `(o, r, i)` at `(o · reduction + r) · inner + i`.
fn two_four(len: usize, reduction: usize, inner: usize, seed: u32) -> Vec<f32> {
    let mut v = values(len, seed);
    for (at, x) in v.iter_mut().enumerate() {
        if matches!((at / inner) % reduction % 4, 1 | 2) {
            *x = 0.0;
        }
    }
    v
}

/// `sparse` (x · W, W [16, 12] 2:4 along its 16 rows), `sparse_t` (x · Vᵀ, V [12, 16] 2:4
/// along each row), `dense` (x · U, U dense) and `conv` (a 3x3 convolution over 8 channels
/// with 2:4 weights: eligible, but the cpu has no sparse convolution).
fn network() -> Network {
    let mut net = Network::new("sparsity");
    let x = net.add_input("x", DataType::F32, [24, 16]).unwrap();
    let mut product = |name: &str, dims: [usize; 2], data: Vec<f32>, op_b: MatrixOp| {
        let w = net.add_constant(&dims, TensorData::F32(data)).unwrap();
        let w = net.output(w, 0);
        let m = net.add_matrix_multiply(x, MatrixOp::None, w, op_b).unwrap();
        net.set_layer_name(m, name);
        let out = net.output(m, 0);
        net.set_tensor_name(out, name).unwrap();
        net.mark_output(out).unwrap();
    };
    product("sparse", [16, 12], two_four(16 * 12, 16, 12, 1), MatrixOp::None);
    product("sparse_t", [12, 16], two_four(12 * 16, 16, 1, 2), MatrixOp::Transpose);
    product("dense", [16, 12], values(16 * 12, 3), MatrixOp::None);
    let image = net.add_input("image", DataType::F32, [1, 8, 6, 6]).unwrap();
    let c = net.add_convolution(image, 4, &[3, 3], TensorData::F32(two_four(4 * 8 * 9, 8, 9, 4)), None).unwrap();
    net.set_layer_name(c, "conv");
    let out = net.output(c, 0);
    net.set_tensor_name(out, "conv").unwrap();
    net.mark_output(out).unwrap();
    net
}

fn inputs() -> Vec<(&'static str, HostTensor)> {
    vec![
        ("x", HostTensor::from_f32(vec![24, 16], values(24 * 16, 5)).unwrap()),
        ("image", HostTensor::from_f32(vec![1, 8, 6, 6], values(8 * 36, 6)).unwrap()),
    ]
}

fn layer(net: &Network, name: &str) -> LayerId {
    LayerId(net.layers().iter().position(|l| l.name == name).expect("layer"))
}

fn tactic_name(engine: &Engine, name: &str) -> String {
    engine.tactics()[layer(engine.network(), name).0].as_ref().expect("a tactic").name.clone()
}

/// Keeps the sparse candidate wherever there is one.
struct PreferSparse;

impl AlgorithmSelector for PreferSparse {
    fn select_algorithms(&self, _: &AlgorithmContext, choices: &[AlgorithmChoice]) -> Vec<usize> {
        (0..choices.len()).filter(|&i| kiln::sparsity::is_sparse_tactic(&choices[i].tactic.id)).collect()
    }
    fn report_algorithms(&self, _: &[(AlgorithmContext, kiln::TacticId)]) {}
}

fn sparse_config(selector: bool) -> BuilderConfig {
    let mut config = BuilderConfig { profiling_verbosity: ProfilingVerbosity::Detailed, ..BuilderConfig::default() };
    config.set_flag(BuilderFlag::SparseWeights);
    if selector {
        config.set_algorithm_selector(Arc::new(PreferSparse));
    }
    config
}

fn assert_close(a: Engine, b: Engine) {
    let (ra, rb) = (run(a, &inputs()), run(b, &inputs()));
    assert_eq!(ra.len(), 4);
    for (name, x) in &ra {
        for (p, q) in x.to_f64_vec().iter().zip(rb[name].to_f64_vec()) {
            assert!((p - q).abs() <= 1e-5 * (1.0 + p.abs()), "{name}: {p} vs {q}");
        }
    }
}

#[test]
fn weights_with_two_zeros_in_every_four_input_channels_are_eligible() {
    let net = network();
    let eligible: Vec<&str> = ["sparse", "sparse_t", "dense", "conv"].into_iter().filter(|n| is_eligible(&net, layer(&net, n))).collect();
    assert_eq!(eligible, ["sparse", "sparse_t", "conv"]);
}

#[test]
fn the_sparse_product_is_offered_only_for_eligible_weights_with_the_flag() {
    let net = network();
    let backend = CpuBackend::new();
    let names = |name: &str, math: MathMode| backend.tactics(&net, layer(&net, name), math).into_iter().map(|t| t.id.name).collect::<Vec<_>>();
    let sparse = MathMode { sparse_weights: true, ..MathMode::EXACT };
    assert_eq!(names("sparse", sparse), ["matmul_sgemm", "matmul_blocked", "sparse_matmul_2_4"]);
    assert_eq!(names("sparse_t", sparse), ["matmul_sgemm", "matmul_blocked", "sparse_matmul_2_4"]);
    assert_eq!(names("sparse", MathMode::EXACT), ["matmul_sgemm", "matmul_blocked"]);
    assert_eq!(names("dense", sparse), ["matmul_sgemm", "matmul_blocked"]);
    assert_eq!(names("conv", sparse), ["conv_im2col_gemm", "conv_direct"]);
}

#[test]
fn the_build_reports_eligible_and_picked_layers_and_the_sparse_engine_computes_the_dense_answer() {
    let backend = CpuBackend::new();
    let dense = Builder::new(&backend).build(&network(), &BuilderConfig::default()).unwrap();
    let out = Builder::new(&backend).build_with_report(&network(), &sparse_config(true)).unwrap();
    let report = out.summary.sparsity.clone().expect("a sparsity report");
    assert_eq!(report.eligible, ["sparse", "sparse_t", "conv"]);
    assert_eq!(report.offered, ["sparse", "sparse_t"]);
    assert_eq!(report.picked, ["sparse", "sparse_t"]);
    assert!(out.log.contains(&"(Sparsity) Layers eligible for sparse math: sparse, sparse_t, conv".to_string()), "{:?}", out.log);
    assert!(out.log.contains(&"(Sparsity) the engine picked sparse implementation for layers: sparse, sparse_t".to_string()), "{:?}", out.log);
    // The convolution has no sparse kernel here: the build says so and runs it dense.
    assert!(out.warnings.iter().any(|w| w.contains("no sparse kernel for 1 of 3 eligible layers (conv)")), "{:?}", out.warnings);
    assert_eq!(tactic_name(&out.engine, "sparse"), "sparse_matmul_2_4");
    assert_eq!(tactic_name(&out.engine, "dense"), "matmul_sgemm");
    // The inspector marks eligible layers and whether they run sparse.
    let inspector = EngineInspector::new(&out.engine);
    let info = |name: &str| {
        let text = inspector.get_layer_information(layer(out.engine.network(), name).0, LayerInformationFormat::Json).unwrap();
        serde_json::from_str::<serde_json::Value>(&text).unwrap()
    };
    assert_eq!((info("sparse")["AllowSparse"].clone(), info("sparse")["Sparse"].clone()), (1.into(), 1.into()));
    assert_eq!((info("conv")["AllowSparse"].clone(), info("conv")["Sparse"].clone()), (1.into(), 0.into()));
    assert_eq!(info("dense").get("Sparse"), None);
    // Serialized and loaded, the engine still runs the sparse kernel.
    let loaded = Engine::deserialize(&out.engine.serialize()).unwrap();
    assert_eq!(tactic_name(&loaded, "sparse_t"), "sparse_matmul_2_4");
    assert_close(dense, loaded);
}

#[test]
fn timing_decides_between_sparse_and_dense() {
    let out = Builder::new(&CpuBackend::new()).build_with_report(&network(), &sparse_config(false)).unwrap();
    let report = out.summary.sparsity.expect("a sparsity report");
    // Whatever timing chose, the report says what the engine runs.
    for name in ["sparse", "sparse_t"] {
        let runs_sparse = tactic_name(&out.engine, name).starts_with(kiln::sparsity::TACTIC_PREFIX);
        assert_eq!(report.picked.iter().any(|p| p == name), runs_sparse, "{name}");
        let timed = out.engine.tactic_times(layer(out.engine.network(), name).0);
        assert_eq!(timed.len(), 3, "{name}: the sparse and both dense products are timed");
    }
}

#[test]
fn without_the_flag_there_is_no_report_and_no_sparse_tactic() {
    let out = Builder::new(&CpuBackend::new()).build_with_report(&network(), &BuilderConfig::default()).unwrap();
    assert_eq!(out.summary.sparsity, None);
    assert!(!out.log.iter().any(|l| l.contains("Sparsity")));
    assert!(out.engine.tactics().iter().flatten().all(|t| !kiln::sparsity::is_sparse_tactic(t)));
}

#[test]
fn forced_pruning_makes_every_qualifying_layer_eligible() {
    let net = network();
    let (pruned, changed) = prune_network(&net).unwrap();
    assert_eq!(changed, ["dense"]);
    assert!(is_eligible(&pruned, layer(&pruned, "dense")));
    let out = Builder::new(&CpuBackend::new()).build_with_report(&pruned, &sparse_config(true)).unwrap();
    assert_eq!(out.summary.sparsity.unwrap().picked, ["sparse", "sparse_t", "dense"]);
    // The pruned product keeps the two largest of every four weights and zeroes the rest.
    let original = net.tensor(net.layer(layer(&net, "dense")).inputs[1].unwrap()).value.clone().unwrap().to_f64_vec();
    let kept = pruned.tensor(pruned.layer(layer(&pruned, "dense")).inputs[1].unwrap()).value.clone().unwrap().to_f64_vec();
    for column in 0..12 {
        for group in 0..4 {
            let at: Vec<usize> = (0..4).map(|j| (group * 4 + j) * 12 + column).collect();
            let zeros = at.iter().filter(|&&i| kept[i] == 0.0).count();
            assert_eq!(zeros, 2, "column {column}, group {group}");
            let smallest_kept = at.iter().filter(|&&i| kept[i] != 0.0).map(|&i| original[i].abs()).fold(f64::MAX, f64::min);
            let largest_dropped = at.iter().filter(|&&i| kept[i] == 0.0).map(|&i| original[i].abs()).fold(0.0, f64::max);
            assert!(smallest_kept >= largest_dropped, "column {column}, group {group}");
        }
    }
}

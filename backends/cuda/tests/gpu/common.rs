//! Running one layer on cuda and on the cpu oracle, on random inputs, and comparing.

use half::{bf16, f16};
use kiln::{Backend, DataType, HostTensor, LayerId, LayerKind, MathMode, Network, Shape, TensorData};
use kiln_cuda::CudaBackend;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::OnceLock;

/// The shared backend, or None (with a SKIPPED message) where no CUDA device exists.
/// `KILN_REQUIRE_CUDA=1` (set on the GPU machine) turns a missing device into a failure.
pub fn backend() -> Option<&'static CudaBackend> {
    static BACKEND: OnceLock<Result<CudaBackend, String>> = OnceLock::new();
    let b = BACKEND.get_or_init(|| {
        let b = CudaBackend::new();
        b.device().map(|_| b).map_err(|e| e.to_string())
    });
    match b {
        Ok(b) => Some(b),
        Err(reason) => {
            if std::env::var("KILN_REQUIRE_CUDA").as_deref() == Ok("1") {
                panic!("KILN_REQUIRE_CUDA=1 but CUDA is unavailable: {reason}");
            }
            eprintln!("SKIPPED: no CUDA driver/device: {reason}");
            None
        }
    }
}

/// The default builder configuration less TF32: f32 engines compute exactly, for tests that
/// compare them with the cpu oracle or PyTorch to f32 rounding.
pub fn exact_f32_config() -> kiln::BuilderConfig {
    let mut config = kiln::BuilderConfig::default();
    config.clear_flag(kiln::BuilderFlag::Tf32);
    config
}

pub fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// Uniform values in [-1, 1) of `dtype`.
pub fn random(rng: &mut ChaCha8Rng, dtype: DataType, shape: &[usize]) -> HostTensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
    let data = match dtype {
        DataType::F32 => TensorData::F32(v),
        DataType::F16 => TensorData::F16(v.iter().map(|&x| f16::from_f32(x)).collect()),
        DataType::BF16 => TensorData::BF16(v.iter().map(|&x| bf16::from_f32(x)).collect()),
        DataType::I64 => TensorData::I64(v.iter().map(|&x| (x * 100.0) as i64).collect()),
        DataType::I32 => TensorData::I32(v.iter().map(|&x| (x * 100.0) as i32).collect()),
        DataType::Bool => TensorData::Bool(v.iter().map(|&x| x > 0.0).collect()),
        other => panic!("no random {other}"),
    };
    HostTensor::new(shape.to_vec(), data).unwrap()
}

pub fn f32s(shape: &[usize], v: Vec<f32>) -> HostTensor {
    HostTensor::new(shape.to_vec(), TensorData::F32(v)).unwrap()
}

pub fn i64s(shape: &[usize], v: Vec<i64>) -> HostTensor {
    HostTensor::new(shape.to_vec(), TensorData::I64(v)).unwrap()
}

/// One input slot of the layer under test.
#[derive(Clone)]
pub enum In {
    /// A network input.
    Run(HostTensor),
    /// A Constant layer.
    Const(HostTensor),
    Absent,
}

/// A network of one layer fed by `inputs`, its outputs marked, and the run-time feeds.
pub fn one_layer(kind: LayerKind, inputs: Vec<In>) -> (Network, Vec<HostTensor>) {
    let mut net = Network::new("test");
    let mut feeds = Vec::new();
    let mut slots = Vec::new();
    for (i, input) in inputs.into_iter().enumerate() {
        slots.push(match input {
            In::Run(t) => {
                let id = net.add_input(&format!("in{i}"), t.dtype(), Shape::fixed(t.shape())).unwrap();
                feeds.push(t);
                Some(id)
            }
            In::Const(t) => {
                let w = net.add_weights(t);
                let layer = net.add_layer(&format!("const{i}"), LayerKind::Constant { weights: w }, vec![]).unwrap();
                Some(net.output(layer, 0))
            }
            In::Absent => None,
        });
    }
    let layer = net.add_layer("layer", kind, slots).unwrap();
    for t in net.layer(layer).outputs.clone() {
        net.mark_output(t).unwrap();
    }
    (net, feeds)
}

/// Largest `|got - want| / (1 + |want|)`; NaN where one is NaN and the other is not.
pub fn worst_error(got: &HostTensor, want: &HostTensor) -> f64 {
    got.to_f64_vec()
        .iter()
        .zip(want.to_f64_vec())
        .map(|(a, e)| if a.is_nan() && e.is_nan() { 0.0 } else if a.is_nan() || e.is_nan() { f64::NAN } else { (a - e).abs() / (1.0 + e.abs()) })
        .fold(0.0, |m: f64, x| if x.is_nan() || m.is_nan() { f64::NAN } else { m.max(x) })
}

/// Runs the network on cuda and cpu and checks every output within `tolerance`.
pub fn check_network(what: &str, net: &Network, feeds: &[HostTensor], tolerance: f64) {
    let Some(cuda) = backend() else { return };
    let want = kiln_cpu::CpuBackend::new().prepare(net).unwrap_or_else(|e| panic!("{what}: cpu prepare: {e}")).execute(feeds);
    let want = want.unwrap_or_else(|e| panic!("{what}: cpu run: {e}"));
    let got = cuda.prepare(net).unwrap_or_else(|e| panic!("{what}: cuda prepare: {e}")).execute(feeds);
    let got = got.unwrap_or_else(|e| panic!("{what}: cuda run: {e}"));
    assert_eq!(got.len(), want.len(), "{what}: output count");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!((g.dtype(), g.shape()), (w.dtype(), w.shape()), "{what}: output {i} type/shape");
        let err = worst_error(g, w);
        assert!(err <= tolerance, "{what}: output {i} differs from the cpu oracle by {err} (tolerance {tolerance})");
    }
}

/// One layer on cuda vs cpu.
pub fn check(what: &str, kind: LayerKind, inputs: Vec<In>, tolerance: f64) {
    let (net, feeds) = one_layer(kind, inputs);
    check_network(what, &net, &feeds, tolerance);
}

/// The network's last layer: the one under test, which `one_layer` adds last.
pub fn last_layer(net: &Network) -> LayerId {
    LayerId(net.layers().len() - 1)
}

/// Runs `net` on cuda with `tactic` chosen for `layer` (the rest as untimed builds run).
pub fn run_with_tactic(cuda: &CudaBackend, net: &Network, feeds: &[HostTensor], layer: LayerId, tactic: &kiln::TacticId, what: &str) -> Vec<HostTensor> {
    let mut chosen = vec![None; net.layers().len()];
    chosen[layer.0] = Some(tactic.clone());
    let lowered = kiln::ir::control::lower(net, kiln::ir::control::DEFAULT_MAX_TRIP_COUNT).unwrap();
    cuda.prepare_plan(net, &lowered, &chosen, MathMode::EXACT).unwrap().execute(feeds).unwrap_or_else(|e| panic!("{what} {tactic}: {e}"))
}

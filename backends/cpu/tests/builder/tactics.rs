//! Tactics, the timing cache and the algorithm selector (seed §6.1, §6.3) on the cpu
//! backend, which offers two convolutions and two float matrix multiplies.

use super::common::run;
use kiln::tactics::{AlgorithmChoice, AlgorithmContext, TacticError, TimingCacheError};
use kiln::{
    AlgorithmSelector, Backend, BackendError, BuildError, Builder, BuilderConfig, ConvolutionParams, DataType,
    DeviceFingerprint, Engine, Executable, HostTensor, LayerId, MatrixOp, Network, TacticDesc, TacticId, TensorData,
    TimingCache,
};
use kiln_cpu::CpuBackend;
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn values(len: usize, seed: u32) -> Vec<f32> {
    (0..len).map(|i| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) % 1000) as f32 / 500.0 - 1.0).collect()
}

/// Two convolutions of one signature (x → a, x → b, padded and strided), and a matrix
/// product with a constant.
fn network() -> Network {
    let mut net = Network::new("tactics");
    let x = net.add_input("x", DataType::F32, [1, 4, 12, 12]).unwrap();
    let params = ConvolutionParams {
        groups: 1,
        strides: vec![2, 1],
        dilations: vec![1, 2],
        pre_padding: vec![1, 2],
        post_padding: vec![0, 1],
    };
    for (name, seed) in [("conv_a", 1), ("conv_b", 2)] {
        let c = net.add_convolution(x, 6, &[3, 3], TensorData::F32(values(6 * 4 * 9, seed)), Some(TensorData::F32(values(6, 9)))).unwrap();
        net.set_convolution_params(c, params.clone()).unwrap();
        net.set_layer_name(c, name);
        let out = net.output(c, 0);
        net.set_tensor_name(out, name).unwrap();
        net.mark_output(out).unwrap();
    }
    let y = net.add_input("y", DataType::F32, [70, 33]).unwrap();
    let w = net.add_constant(&[50, 33], TensorData::F32(values(50 * 33, 3))).unwrap();
    let w = net.output(w, 0);
    let m = net.add_matrix_multiply(y, MatrixOp::None, w, MatrixOp::Transpose).unwrap();
    net.set_layer_name(m, "project");
    let out = net.output(m, 0);
    net.set_tensor_name(out, "z").unwrap();
    net.mark_output(out).unwrap();
    net
}

fn inputs() -> Vec<(&'static str, HostTensor)> {
    vec![
        ("x", HostTensor::from_f32(vec![1, 4, 12, 12], values(4 * 144, 5)).unwrap()),
        ("y", HostTensor::from_f32(vec![70, 33], values(70 * 33, 6)).unwrap()),
    ]
}

fn tactic_of<'e>(engine: &'e Engine, layer: &str) -> &'e TacticId {
    let i = engine.network().layers().iter().position(|l| l.name == layer).expect("layer");
    engine.tactics()[i].as_ref().expect("a recorded tactic")
}

fn build(config: &BuilderConfig) -> Result<kiln::BuildOutput, BuildError> {
    Builder::new(&CpuBackend::new()).build_with_report(&network(), config)
}

fn key_of(cache: &TimingCache, kind: &str) -> String {
    cache.entries().map(|(k, _)| k).find(|k| k.starts_with(kind)).expect("an entry").to_string()
}

#[test]
fn cpu_offers_two_tactics_for_conv_and_matmul() {
    let net = network();
    let backend = CpuBackend::new();
    let names = |name: &str| {
        let i = net.layers().iter().position(|l| l.name == name).unwrap();
        backend.tactics(&net, LayerId(i), kiln::MathMode::EXACT).into_iter().map(|t| t.id.name).collect::<Vec<_>>()
    };
    assert_eq!(names("conv_a"), ["conv_im2col_gemm", "conv_direct"]);
    assert_eq!(names("project"), ["matmul_sgemm", "matmul_blocked"]);
}

#[test]
fn identical_layers_are_timed_once_and_the_cache_round_trips() {
    let mut config = BuilderConfig::default();
    let shared = config.set_timing_cache(TimingCache::from_bytes(&[]).unwrap(), false);
    let out = build(&config).unwrap();
    // conv_a and conv_b share a signature: timed once, the second served from the cache.
    assert_eq!((out.summary.layers_timed, out.summary.layers_from_cache), (2, 1));
    let cache = shared.lock().unwrap().clone();
    assert_eq!(cache.len(), 2);
    let entry = cache.get(&key_of(&cache, "Convolution")).unwrap();
    assert_eq!(entry.candidates.len(), 2);
    assert!(entry.candidates.iter().any(|(id, _)| *id == entry.chosen));
    let bytes = cache.serialize();
    assert_eq!(TimingCache::from_bytes(&bytes).unwrap(), cache);
    assert_eq!(TimingCache::from_bytes(&bytes).unwrap().serialize(), bytes);
}

#[test]
fn corrupted_cache_bytes_are_errors() {
    let mut config = BuilderConfig::default();
    let shared = config.set_timing_cache(TimingCache::new(), false);
    build(&config).unwrap();
    let bytes = shared.lock().unwrap().serialize();
    let mut flipped = bytes.clone();
    *flipped.last_mut().unwrap() ^= 0x40;
    assert_eq!(TimingCache::from_bytes(&flipped), Err(TimingCacheError::Checksum));
    assert!(matches!(TimingCache::from_bytes(&bytes[..bytes.len() - 3]), Err(TimingCacheError::Truncated(_))));
    assert!(matches!(TimingCache::from_bytes(&bytes[..7]), Err(TimingCacheError::Truncated(_))));
    assert_eq!(TimingCache::from_bytes(b"not a cache at all, longer"), Err(TimingCacheError::BadMagic));
    assert!(TimingCache::from_bytes(&[]).unwrap().is_empty());
}

#[test]
fn a_second_build_with_the_cache_times_nothing_and_is_byte_identical() {
    let mut config = BuilderConfig::default();
    config.set_timing_cache(TimingCache::new(), false);
    let first = build(&config).unwrap();
    let second = build(&config).unwrap();
    assert_eq!((second.summary.layers_timed, second.summary.layers_from_cache), (0, 3));
    assert_eq!(first.engine.serialize(), second.engine.serialize());
    // Loading the cache from its bytes gives the same engine again.
    let mut reloaded = BuilderConfig::default();
    reloaded.set_timing_cache(TimingCache::from_bytes(&config.timing_cache().unwrap().serialize()).unwrap(), false);
    reloaded.tactics.error_on_timing_cache_miss = true;
    assert_eq!(build(&reloaded).unwrap().engine.serialize(), first.engine.serialize());
}

#[test]
fn a_miss_with_error_on_timing_cache_miss_names_the_layer() {
    let mut config = BuilderConfig::default();
    config.set_timing_cache(TimingCache::new(), false);
    config.tactics.error_on_timing_cache_miss = true;
    let err = build(&config).unwrap_err();
    assert!(matches!(&err, BuildError::Tactic(TacticError::CacheMiss { layer, .. }) if layer == "conv_a"), "{err}");
    assert!(err.to_string().contains("conv_a"));
}

/// The cpu backend reporting another device.
struct OtherDevice(CpuBackend);

impl Backend for OtherDevice {
    fn name(&self) -> &str {
        "cpu"
    }
    fn device(&self) -> Result<DeviceFingerprint, BackendError> {
        Ok(DeviceFingerprint { name: "another cpu".into(), ..self.0.device()? })
    }
    fn check_support(&self, network: &Network) -> Result<(), BackendError> {
        self.0.check_support(network)
    }
    fn prepare_plan(
        &self,
        network: &Network,
        control: &kiln::ir::control::ControlFlow,
        tactics: &[Option<kiln::TacticId>],
        math: kiln::MathMode,
    ) -> Result<Box<dyn Executable>, BackendError> {
        self.0.prepare_plan(network, control, tactics, math)
    }
    fn tactics(&self, network: &Network, layer: LayerId, math: kiln::MathMode) -> Vec<TacticDesc> {
        self.0.tactics(network, layer, math)
    }
    fn time_tactic(&self, n: &Network, l: LayerId, t: &TacticDesc, math: kiln::MathMode, reps: usize) -> Result<Duration, BackendError> {
        self.0.time_tactic(n, l, t, math, reps)
    }
}

#[test]
fn a_cache_from_another_device_is_refused_unless_mismatch_is_ignored() {
    let mut config = BuilderConfig::default();
    let shared = config.set_timing_cache(TimingCache::new(), false);
    Builder::new(&OtherDevice(CpuBackend::new())).build(&network(), &config).unwrap();
    let foreign = shared.lock().unwrap().clone();
    assert_eq!(foreign.header().unwrap().device.name, "another cpu");

    let mut config = BuilderConfig::default();
    config.set_timing_cache(foreign.clone(), false);
    let err = build(&config).unwrap_err();
    assert!(matches!(&err, BuildError::Tactic(TacticError::Cache(TimingCacheError::Mismatch(d))) if d.starts_with("device: another cpu (cache) vs ")), "{err}");
    assert!(!err.to_string().contains("DeviceFingerprint"), "{err}");

    let mut config = BuilderConfig::default();
    config.set_timing_cache(foreign, true);
    let out = build(&config).unwrap();
    assert!(out.warnings.iter().any(|w| w.contains("timing cache")), "{:?}", out.warnings);
    assert_eq!(out.summary.layers_timed, 0);
}

#[test]
fn an_edited_entry_changes_the_chosen_tactic() {
    let mut config = BuilderConfig::default();
    let shared = config.set_timing_cache(TimingCache::new(), false);
    let reference = build(&config).unwrap().engine;
    let mut cache = shared.lock().unwrap().clone();
    for kind in ["Convolution", "MatrixMultiply"] {
        let key = key_of(&cache, kind);
        let entry = cache.get(&key).unwrap().clone();
        let other = entry.candidates.iter().find(|(id, _)| *id != entry.chosen).unwrap().0.clone();
        assert_eq!(cache.set_tactic(&key, &other.to_string()).unwrap(), other);
        assert_eq!(cache.get(&key).unwrap().chosen, other);
    }
    assert!(matches!(cache.set_tactic("nope", "x"), Err(TimingCacheError::NoSuchKey(_))));
    let key = key_of(&cache, "Convolution");
    assert!(matches!(cache.set_tactic(&key, "cpu/matmul_sgemm@00"), Err(TimingCacheError::NotACandidate { .. })));

    let mut edited = BuilderConfig::default();
    edited.set_timing_cache(cache, false);
    edited.tactics.error_on_timing_cache_miss = true;
    let engine = build(&edited).unwrap().engine;
    for layer in ["conv_a", "conv_b", "project"] {
        assert_ne!(tactic_of(&engine, layer), tactic_of(&reference, layer), "{layer}");
    }
    assert_outputs_close(reference, engine);
}

fn assert_outputs_close(a: Engine, b: Engine) {
    let (ra, rb) = (run(a, &inputs()), run(b, &inputs()));
    assert_eq!(ra.len(), 3);
    for (name, x) in &ra {
        let (x, y) = (x.to_f64_vec(), rb[name].to_f64_vec());
        assert_eq!(x.len(), y.len());
        for (p, q) in x.iter().zip(&y) {
            assert!((p - q).abs() <= 1e-4 * (1.0 + p.abs()), "{name}: {p} vs {q}");
        }
    }
}

/// Keeps the candidates named in `wanted` (none: returns nothing) and records reports.
struct Pick {
    wanted: Vec<&'static str>,
    seen: Mutex<Vec<AlgorithmContext>>,
    reported: Mutex<Vec<(String, String)>>,
}

impl Pick {
    fn new(wanted: &[&'static str]) -> Arc<Pick> {
        Arc::new(Pick { wanted: wanted.to_vec(), seen: Mutex::default(), reported: Mutex::default() })
    }
}

impl AlgorithmSelector for Pick {
    fn select_algorithms(&self, context: &AlgorithmContext, choices: &[AlgorithmChoice]) -> Vec<usize> {
        self.seen.lock().unwrap().push(context.clone());
        if choices.len() == 1 {
            return vec![0];
        }
        (0..choices.len()).filter(|&i| self.wanted.contains(&choices[i].tactic.id.name.as_str())).collect()
    }
    fn report_algorithms(&self, choices: &[(AlgorithmContext, TacticId)]) {
        self.reported.lock().unwrap().extend(choices.iter().map(|(c, t)| (c.layer.clone(), t.name.clone())));
    }
}

#[test]
fn the_selector_is_honoured_and_reported() {
    let reference = build(&BuilderConfig::default()).unwrap().engine;
    let pick = Pick::new(&["conv_direct", "matmul_blocked"]);
    let mut config = BuilderConfig::default();
    config.set_algorithm_selector(pick.clone());
    let engine = build(&config).unwrap().engine;
    assert_eq!(tactic_of(&engine, "conv_a").name, "conv_direct");
    assert_eq!(tactic_of(&engine, "project").name, "matmul_blocked");
    let reported = pick.reported.lock().unwrap().clone();
    assert!(reported.contains(&("conv_b".into(), "conv_direct".into())), "{reported:?}");
    assert!(reported.contains(&("project".into(), "matmul_blocked".into())), "{reported:?}");
    let seen = pick.seen.lock().unwrap();
    let conv = seen.iter().find(|c| c.layer == "conv_a").unwrap();
    assert_eq!((conv.kind.as_str(), conv.outputs[0].1.to_string()), ("Convolution", "[1,6,6,11]".to_string()));
    drop(seen);
    // The direct and blocked kernels compute what im2col + GEMM and sgemm compute.
    assert_outputs_close(reference, engine);
}

#[test]
fn an_empty_selection_means_any_unless_reject_empty_algorithms() {
    let mut config = BuilderConfig::default();
    config.set_algorithm_selector(Pick::new(&[]));
    build(&config).unwrap();
    config.tactics.reject_empty_algorithms = true;
    let err = build(&config).unwrap_err();
    assert!(matches!(&err, BuildError::Tactic(TacticError::EmptySelection { layer }) if layer == "conv_a"), "{err}");
}

#[test]
fn disable_timing_cache_leaves_the_attached_cache_alone() {
    let mut config = BuilderConfig::default();
    let shared = config.set_timing_cache(TimingCache::new(), false);
    config.tactics.disable_timing_cache = true;
    let out = build(&config).unwrap();
    assert_eq!(out.summary.layers_timed, 2);
    assert!(shared.lock().unwrap().is_empty());
}

#[test]
fn the_tactics_survive_serialization() {
    let engine = build(&BuilderConfig::default()).unwrap().engine;
    let loaded = Engine::deserialize(&engine.serialize()).unwrap();
    assert_eq!(loaded.tactics(), engine.tactics());
    assert_eq!(loaded.tactics().len(), loaded.network().layers().len());
}

#[test]
fn progress_is_reported_for_every_layer_and_at_the_end() {
    let calls: Arc<Mutex<Vec<(usize, usize, String)>>> = Arc::default();
    let seen = calls.clone();
    let mut config = BuilderConfig::default();
    config.tactics.progress = Some(kiln::tactics::ProgressHandle(Arc::new(move |done, layers, name| {
        seen.lock().unwrap().push((done, layers, name.to_string()));
    })));
    let engine = build(&config).unwrap().engine;
    let calls = calls.lock().unwrap();
    let layers = engine.network().layers().len();
    assert_eq!(calls.len(), layers + 1, "{calls:?}");
    assert!(calls.iter().enumerate().all(|(i, (done, n, _))| *done == i && *n == layers), "{calls:?}");
    assert_eq!(calls[0].2, engine.network().layers()[0].name);
}

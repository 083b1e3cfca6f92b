//! The engine's TF32 flag reaches the backend: tactic listing and timing during the build,
//! and preparation when the engine (or its file) is loaded, all with the same math.

use super::common::config;
use kiln::{
    Backend, BackendError, Builder, BuilderConfig, BuilderFlag, DataType, DeviceFingerprint, Engine,
    Executable, LayerId, MathMode, Network, PreparedEngine, TacticDesc, TensorData,
};
use kiln_cpu::CpuBackend;
use std::sync::Mutex;
use std::time::Duration;

/// The cpu backend, recording the math of every call that receives one.
#[derive(Default)]
struct MathRecorder {
    cpu: CpuBackend,
    seen: Mutex<Vec<(&'static str, MathMode)>>,
}

impl MathRecorder {
    fn record(&self, call: &'static str, math: MathMode) {
        self.seen.lock().unwrap().push((call, math));
    }

    fn take(&self) -> Vec<(&'static str, MathMode)> {
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

impl Backend for MathRecorder {
    fn name(&self) -> &str {
        self.cpu.name()
    }
    fn device(&self) -> Result<DeviceFingerprint, BackendError> {
        self.cpu.device()
    }
    fn check_support(&self, network: &Network) -> Result<(), BackendError> {
        self.cpu.check_support(network)
    }
    fn prepare_plan(
        &self,
        network: &Network,
        control: &kiln::ir::control::ControlFlow,
        tactics: &[Option<kiln::TacticId>],
        math: MathMode,
    ) -> Result<Box<dyn Executable>, BackendError> {
        self.record("prepare_plan", math);
        self.cpu.prepare_plan(network, control, tactics, math)
    }
    fn tactics(&self, network: &Network, layer: LayerId, math: MathMode) -> Vec<TacticDesc> {
        self.record("tactics", math);
        self.cpu.tactics(network, layer, math)
    }
    fn time_tactic(&self, n: &Network, l: LayerId, t: &TacticDesc, math: MathMode, reps: usize) -> Result<Duration, BackendError> {
        self.record("time_tactic", math);
        self.cpu.time_tactic(n, l, t, math, reps)
    }
}

/// A convolution (two cpu tactics, so one is timed) on a network input.
fn network() -> Network {
    let mut net = Network::new("math");
    let x = net.add_input("x", DataType::F32, [1, 3, 8, 8]).unwrap();
    let weights = TensorData::F32((0..4 * 3 * 9).map(|i| (i % 7) as f32 * 0.1 - 0.3).collect());
    let c = net.add_convolution(x, 4, &[3, 3], weights, None).unwrap();
    let y = net.output(c, 0);
    net.mark_output(y).unwrap();
    net
}

/// Every call the backend saw, by name, with the one math mode they all had.
fn calls_with(recorder: &MathRecorder, expected: MathMode) -> Vec<&'static str> {
    let seen = recorder.take();
    for (call, math) in &seen {
        assert_eq!(*math, expected, "{call} saw {math:?}");
    }
    let mut calls: Vec<_> = seen.into_iter().map(|(c, _)| c).collect();
    calls.dedup();
    calls
}

fn build_and_load(config: &BuilderConfig, expected: MathMode, log_line: &str) {
    let recorder = MathRecorder::default();
    let out = Builder::new(&recorder).build_with_report(&network(), config).expect("build");
    assert_eq!(calls_with(&recorder, expected), ["tactics", "time_tactic"]);
    // The build log says what the flag allows.
    assert!(out.log.iter().any(|l| l.starts_with(log_line)), "no `{log_line}` line in {:?}", out.log);
    let engine = out.engine;
    assert_eq!(engine.math(), expected);

    // Loading the engine file prepares it with the math it was built with.
    let loaded = Engine::deserialize(&engine.serialize()).expect("deserialize");
    PreparedEngine::new(loaded, &recorder).expect("prepare");
    assert_eq!(calls_with(&recorder, expected), ["prepare_plan"]);
}

#[test]
fn a_default_build_lets_its_tactics_and_its_plan_use_tf32() {
    build_and_load(&BuilderConfig::default(), MathMode { tf32: true, ..MathMode::EXACT }, "TF32: 1 f32 products and convolutions may round");
}

#[test]
fn a_build_without_tf32_keeps_f32_exact_everywhere() {
    let mut config = config(&[]);
    config.clear_flag(BuilderFlag::Tf32);
    build_and_load(&config, MathMode::EXACT, "TF32 off: 1 f32 products and convolutions compute in f32");
}

#[test]
fn a_network_prepared_outside_the_builder_is_exact() {
    let recorder = MathRecorder::default();
    recorder.prepare(&network()).expect("prepare");
    assert_eq!(calls_with(&recorder, MathMode::EXACT), ["prepare_plan"]);
}

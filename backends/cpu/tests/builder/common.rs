//! Helpers shared by the builder tests.

use kiln::{Backend, BackendError, BuildOutput, Builder, BuilderConfig, BuilderFlag, DeviceFingerprint, Engine, ExecutionContext, Executable, HostTensor, Network};
use kiln_cpu::CpuBackend;
use std::collections::HashMap;

pub fn config(flags: &[BuilderFlag]) -> BuilderConfig {
    let mut config = BuilderConfig::default();
    for &f in flags {
        config.set_flag(f);
    }
    config
}

pub fn build(net: &Network, flags: &[BuilderFlag]) -> BuildOutput {
    Builder::new(&CpuBackend::new()).build_with_report(net, &config(flags)).expect("build")
}

/// Runs an engine on the cpu backend; returns outputs by name.
pub fn run(engine: Engine, inputs: &[(&str, HostTensor)]) -> HashMap<String, HostTensor> {
    let context = ExecutionContext::new(engine, &CpuBackend::new()).expect("context");
    let feeds: HashMap<String, HostTensor> = inputs.iter().map(|(n, t)| (n.to_string(), t.clone())).collect();
    context.run(&feeds).expect("run").into_iter().collect()
}

/// Type names of an engine's layers, in order.
pub fn layer_types(engine: &Engine) -> Vec<&'static str> {
    engine.network().layers().iter().map(|l| l.kind.type_name()).collect()
}

/// The cpu backend without its precision and format support (kiln's defaults: f32 only,
/// LINEAR only).
#[derive(Debug)]
pub struct PlainCpu(pub CpuBackend);

impl Backend for PlainCpu {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn device(&self) -> Result<DeviceFingerprint, BackendError> {
        self.0.device()
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
}

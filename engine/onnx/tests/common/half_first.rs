//! A cpu backend that reports f16 as its faster type, for the Q/DQ tests' FP16 builds
//! (included by path).

use kiln::{DataType, Network};

/// The cpu backend reporting f16 as its faster type, as cuda does: an FP16 build narrows every
/// float layer it can.
#[derive(Debug)]
pub struct HalfFirstCpu(pub kiln_cpu::CpuBackend);

impl kiln::Backend for HalfFirstCpu {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn device(&self) -> Result<kiln::DeviceFingerprint, kiln::BackendError> {
        self.0.device()
    }
    fn check_support(&self, network: &Network) -> Result<(), kiln::BackendError> {
        self.0.check_support(network)
    }
    fn prepare_plan(
        &self,
        network: &Network,
        control: &kiln::ir::control::ControlFlow,
        tactics: &[Option<kiln::TacticId>],
        math: kiln::MathMode,
    ) -> Result<Box<dyn kiln::Executable>, kiln::BackendError> {
        self.0.prepare_plan(network, control, tactics, math)
    }
    fn precision_support(&self, network: &Network, layer: kiln::LayerId) -> kiln::PrecisionSupport {
        let mut support = self.0.precision_support(network, layer);
        support.faster = support.offered.iter().copied().filter(|&t| t == DataType::F16).collect();
        support
    }
    fn runs_quantized_layers(&self) -> bool {
        true
    }
}

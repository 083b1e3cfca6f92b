//! The cpu reference backend: interprets a network layer by layer on the host.
//!
//! It is the oracle that the GPU backends are checked against, so its kernels favour
//! clarity and exactness: every output shape comes from kiln's shape inference, float
//! kernels compute f16/bf16 in f32 (reductions and statistics in f64) and round once, and
//! integer arithmetic wraps. Matrix products and convolutions go through `matrixmultiply`.
//! Failures (an index out of range, a failed assertion, an integer division by zero) are
//! [`BackendError::Execution`] errors naming the layer, never panics.
#![forbid(unsafe_code)]

mod element;
mod element_narrow;
mod exec;
mod kernels;
mod layout;
mod tactics;

use exec::CpuExecutable;
/// One layer's kernel on host tensors (inputs in slot order, outputs as shape inference
/// expects): what the GPU backends run shape-tensor arithmetic with.
pub use kernels::{run_with as run_layer_kernel, Variant};
use kiln::{
    Backend, BackendError, DataType, DeviceFingerprint, Executable, Layer, LayerId, LayerKind, Network, PrecisionSupport, ResizeMode,
};

/// The cpu backend.
#[derive(Clone, Debug)]
pub struct CpuBackend {
    threads: usize,
}

impl CpuBackend {
    pub fn new() -> CpuBackend {
        CpuBackend { threads: std::thread::available_parallelism().map_or(1, usize::from) }
    }
}

impl Default for CpuBackend {
    fn default() -> CpuBackend {
        CpuBackend::new()
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> &str {
        "cpu"
    }

    fn device(&self) -> Result<DeviceFingerprint, BackendError> {
        let arch = std::env::consts::ARCH;
        Ok(DeviceFingerprint {
            backend: "cpu".into(),
            name: format!("{arch} cpu ({} threads)", self.threads),
            compute_capability: arch.into(),
            ..DeviceFingerprint::default()
        })
    }

    /// Integer convolutions and products are the reference the GPU backends' INT8 kernels
    /// are checked against.
    fn runs_quantized_layers(&self) -> bool {
        true
    }

    fn check_support(&self, network: &Network) -> Result<(), BackendError> {
        for layer in network.layers() {
            if let Some(reason) = unsupported(network, layer) {
                return Err(BackendError::Unsupported {
                    backend: "cpu".into(),
                    layer: layer.name.clone(),
                    kind: layer.kind.type_name().into(),
                    reason,
                });
            }
        }
        Ok(())
    }

    /// f32 is computed exactly here: TF32 changes nothing; `math.sparse_weights` offers the 2:4
    /// sparse product where a layer qualifies.
    fn tactics(&self, network: &Network, layer: LayerId, math: kiln::MathMode) -> Vec<kiln::TacticDesc> {
        tactics::tactics(network, layer, math)
    }

    fn time_tactic(
        &self,
        network: &Network,
        layer: LayerId,
        tactic: &kiln::TacticDesc,
        _math: kiln::MathMode,
        repetitions: usize,
    ) -> Result<std::time::Duration, BackendError> {
        tactics::time_tactic(network, layer, tactic, repetitions)
    }

    fn prepare_plan(
        &self,
        network: &Network,
        control: &kiln::ir::control::ControlFlow,
        chosen: &[Option<kiln::TacticId>],
        _math: kiln::MathMode,
    ) -> Result<Box<dyn Executable>, BackendError> {
        self.check_support(network)?;
        let variants =
            (0..network.layers().len()).map(|i| tactics::variant_of(network, LayerId(i), chosen.get(i).and_then(Option::as_ref))).collect();
        Ok(Box::new(CpuExecutable::new(network.clone(), control.clone()).with_variants(variants)))
    }

    /// Float layers run in f32, f16 and bf16 alike (kernels compute in f32 and round once
    /// per output), never faster in the narrow types: unconstrained layers stay f32.
    fn precision_support(&self, network: &Network, layer: LayerId) -> PrecisionSupport {
        let offered = if kiln::precision::is_float_compute(&network.layer(layer).kind) {
            vec![DataType::F32, DataType::F16, DataType::BF16]
        } else {
            vec![DataType::F32]
        };
        PrecisionSupport { offered, faster: Vec::new() }
    }
}

/// Why the cpu backend cannot run a layer, if it cannot: kinds it has no kernel for yet,
/// and type combinations that shape inference admits but that have no meaning here.
fn unsupported(network: &Network, layer: &Layer) -> Option<String> {
    use LayerKind as K;
    let input_type = |slot: usize| layer.inputs.get(slot).copied().flatten().map(|t| network.tensor(t).dtype);
    match &layer.kind {
        K::Plugin(p) => match p.plugin() {
            Ok(plugin) if plugin.runs_on("cpu") => None,
            Ok(_) => Some(format!("plugin `{}` has no cpu implementation", kiln::plugin::PluginKey::of(p))),
            Err(e) => Some(e.to_string()),
        },
        K::Reduce { op, .. }
            if input_type(0) == Some(DataType::Bool) && !matches!(op, kiln::ReduceOp::Max | kiln::ReduceOp::Min) =>
        {
            Some(format!("Reduce {op:?} is not defined on bool (only Max and Min are)"))
        }
        K::CumulativeSum { .. } if input_type(0) == Some(DataType::Bool) => {
            Some("a running sum is not defined on bool".into())
        }
        K::CumulativeProduct { .. } if input_type(0) == Some(DataType::Bool) => {
            Some("a running product is not defined on bool".into())
        }
        K::Resize(p) if p.mode != ResizeMode::Nearest && input_type(0) == Some(DataType::Bool) => {
            Some(format!("{:?} interpolation is not defined on bool", p.mode))
        }
        K::Quantize { to, .. } if !(to.is_integer() || to.is_narrow_float()) || *to == DataType::F8E8M0 => {
            Some(format!("Quantize produces integers, float8 or float4, not {to}"))
        }
        K::Dequantize { .. } if input_type(0).is_some_and(|t| !(t.is_integer() || t.is_narrow_float())) => Some(format!(
            "Dequantize reads integers, float8 or float4, not {}",
            input_type(0).map_or(String::new(), |t| t.to_string())
        )),
        _ => None,
    }
}

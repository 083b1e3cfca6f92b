//! kiln's portable GPU backend: every layer as WGSL compute shaders through wgpu (Vulkan,
//! Metal, DX12, GL; Mesa's lavapipe in CI).
//!
//! - [`device`]: one shared device per process; adapter limits read and respected; no
//!   adapter, device loss, out-of-memory and limit violations are [`DeviceError`]s.
//! - [`shaders`]: the WGSL sources of `/shaders` and every instantiation compiled.
//! - Values are device tensors of 32-bit words (f16/bf16 as f32 rounded after every
//!   layer, 8/16-bit integers widened and wrapped, i64 as i32 when every value fits,
//!   bool as 0/1), or small host tensors for shape arithmetic that kiln's inference
//!   evaluates (TensorRT's shape tensors). f64 and u64 are refused.
//! - One execution records all dispatches into one command encoder and submits it when
//!   a value must be read (a loop condition, a shape parameter) and at the end.
#![deny(unsafe_code)]

pub mod bench;
mod control;
pub mod device;
mod exec;
pub mod gemm;
mod kernels;
pub mod ops;
pub mod shaders;
pub mod tactics;
mod value;

pub use device::DeviceError;
use exec::WgpuExecutable;
use kiln::{
    Backend, BackendError, DataType, DeviceFingerprint, Executable, GatherMode, Layer, LayerKind, Network, PaddingMode,
};

const NAME: &str = "wgpu";

/// The wgpu backend.
#[derive(Clone, Debug, Default)]
pub struct WgpuBackend;

impl WgpuBackend {
    pub fn new() -> WgpuBackend {
        WgpuBackend
    }

    fn gpu(&self) -> Result<&'static device::Gpu, BackendError> {
        device::shared().map_err(|e| BackendError::Unavailable { backend: NAME.into(), reason: e.to_string() })
    }
}

/// Whether a wgpu device fingerprint is a software adapter (lavapipe, llvmpipe, WARP): fine
/// for cross-checking, slower than the cpu backend, so `--backend auto` passes over it.
pub fn is_software_adapter(device: &DeviceFingerprint) -> bool {
    device.backend == NAME && device.compute_capability.split('/').nth(1) == Some(&format!("{:?}", wgpu::DeviceType::Cpu))
}

impl Backend for WgpuBackend {
    fn name(&self) -> &str {
        NAME
    }

    fn device(&self) -> Result<DeviceFingerprint, BackendError> {
        let gpu = self.gpu()?;
        let info = &gpu.info;
        Ok(DeviceFingerprint {
            backend: NAME.into(),
            name: info.name.clone(),
            compute_capability: format!(
                "{:?}/{:?}/{:04x}:{:04x}",
                info.backend, info.device_type, info.vendor, info.device
            ),
            driver_version: format!("{} {}", info.driver, info.driver_info).trim().to_string(),
            shared_memory_per_block: u64::from(gpu.limits.max_compute_workgroup_storage_size),
            integrated: matches!(info.device_type, wgpu::DeviceType::IntegratedGpu | wgpu::DeviceType::Cpu),
            ..DeviceFingerprint::default()
        })
    }

    fn check_support(&self, network: &Network) -> Result<(), BackendError> {
        for layer in network.layers() {
            if let Some(reason) = unsupported(network, layer) {
                return Err(BackendError::Unsupported {
                    backend: NAME.into(),
                    layer: layer.name.clone(),
                    kind: layer.kind.type_name().into(),
                    reason,
                });
            }
        }
        Ok(())
    }

    fn prepare(&self, network: &Network) -> Result<Box<dyn Executable>, BackendError> {
        self.check_support(network)?;
        let gpu = self.gpu()?;
        Ok(Box::new(WgpuExecutable::new(network.clone(), gpu)?))
    }

    fn tactics(&self, network: &Network, layer: kiln::LayerId) -> Vec<kiln::tactics::TacticDesc> {
        tactics::tactics(network, layer)
    }

    fn time_tactic(
        &self,
        network: &Network,
        layer: kiln::LayerId,
        tactic: &kiln::tactics::TacticDesc,
        repetitions: usize,
    ) -> Result<std::time::Duration, BackendError> {
        self.gpu()?;
        tactics::time_tactic(network, layer, tactic, repetitions)
    }

    fn prepare_with_tactics(
        &self,
        network: &Network,
        tactics: &[Option<kiln::tactics::TacticId>],
    ) -> Result<Box<dyn Executable>, BackendError> {
        tactics::adopt(network, tactics);
        self.prepare(network)
    }
}

/// Why the wgpu backend cannot run a layer, if it cannot.
fn unsupported(network: &Network, layer: &Layer) -> Option<String> {
    use LayerKind as K;
    let tensors = layer.inputs.iter().flatten().chain(&layer.outputs);
    if let Some(t) = tensors.map(|&t| network.tensor(t)).find(|t| crate::ops::Storage::of(t.dtype).is_none()) {
        return Some(format!("tensor `{}` is {}: WGSL has no storage for this type yet", t.name, t.dtype));
    }
    let input_type = |slot: usize| layer.inputs.get(slot).copied().flatten().map(|t| network.tensor(t).dtype);
    let float_input = || input_type(0).is_some_and(DataType::is_float);
    match &layer.kind {
        K::Constant { .. }
        | K::Identity
        | K::Cast { .. }
        | K::BitCast { .. }
        | K::Elementwise { .. }
        | K::Activation { .. }
        | K::Unary { .. }
        | K::ParametricRelu
        | K::Select
        | K::MatrixMultiply { .. }
        | K::Reduce { .. }
        | K::Shuffle(_)
        | K::Concatenation { .. }
        | K::Slice
        | K::Expand
        | K::Padding { mode: PaddingMode::Constant }
        | K::Gather { mode: GatherMode::Default { .. } | GatherMode::Elements { .. } }
        | K::Fill { .. }
        | K::Shape
        | K::Assertion { .. }
        | K::Fused(_)
        | K::TripLimit { .. }
        | K::Iterator { .. }
        | K::Recurrence { .. }
        | K::LoopOutput { .. }
        | K::Condition { .. }
        | K::IfConditionalInput { .. }
        | K::IfConditionalOutput { .. } => None,
        K::Convolution(_)
        | K::Deconvolution(_)
        | K::Pooling(_)
        | K::SoftMax { .. }
        | K::Normalization { .. }
        | K::RmsNormalization { .. }
        | K::Attention(_) => {
            (!float_input()).then(|| format!("the WGSL {} kernel computes floats only", layer.kind.type_name()))
        }
        other => Some(format!("no WGSL kernel for {} yet", other.type_name())),
    }
}

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
pub mod device;
mod control;
mod exec;
mod kernels;
pub mod ops;
pub mod shaders;
mod value;

pub use device::DeviceError;
use exec::{Run, WgpuExecutable};
use kiln::ir::control::{lower, Step, DEFAULT_MAX_TRIP_COUNT};
use kiln::{Backend, BackendError, DataType, DeviceFingerprint, Executable, GatherMode, HostTensor, Layer, LayerKind, Network, PaddingMode};
use std::sync::Arc;
use value::Value;

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
            compute_capability: format!("{:?}/{:?}/{:04x}:{:04x}", info.backend, info.device_type, info.vendor, info.device),
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
        Ok(Box::new(WgpuExecutable::new(network.clone(), gpu)))
    }
}

/// Why the wgpu backend cannot run a layer, if it cannot.
fn unsupported(network: &Network, layer: &Layer) -> Option<String> {
    use LayerKind as K;
    let tensors = layer.inputs.iter().flatten().chain(&layer.outputs);
    if let Some(t) = tensors.map(|&t| network.tensor(t)).find(|t| crate::ops::Storage::of(t.dtype).is_none()) {
        return Some(format!("tensor `{}` is {}: WGSL has no 64-bit types", t.name, t.dtype));
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

impl Executable for WgpuExecutable {
    fn execute(&self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>, BackendError> {
        let net = &self.network;
        let fail = |layer: &str, reason: String| BackendError::Execution { layer: layer.into(), reason };
        let plan = match net.control_flow() {
            Some(plan) => plan.clone(),
            None => lower(net, DEFAULT_MAX_TRIP_COUNT).map_err(|e| fail("(control flow)", e.to_string()))?,
        };
        if inputs.len() != net.inputs().len() {
            return Err(fail("(network inputs)", format!("{} inputs given, the network takes {}", inputs.len(), net.inputs().len())));
        }
        let run = Run::new(self);
        let mut values: Vec<Option<Value>> = vec![None; net.tensors().len()];
        for (&t, x) in net.inputs().iter().zip(inputs) {
            let v = run.to_device(&Value::Host(Arc::new(x.clone()))).map_err(|e| fail(&net.tensor(t).name, e))?;
            values[t.0] = Some(Value::Device(v));
        }
        for step in &plan.body.steps {
            let &Step::Layer(id) = step else {
                return Err(fail("(control flow)", "loops and conditionals run through kiln's plan interpreter".into()));
            };
            let layer = net.layer(id);
            let ins: Vec<Option<Value>> = layer.inputs.iter().map(|s| s.and_then(|t| values[t.0].clone())).collect();
            let outs = run.run_layer(id, &ins).map_err(|e| fail(&layer.name, e))?;
            for (t, v) in layer.outputs.iter().zip(outs) {
                values[t.0] = Some(v);
            }
        }
        net.outputs()
            .iter()
            .map(|t| {
                let v = values[t.0].as_ref().ok_or_else(|| fail("(network outputs)", format!("output `{}` was not computed", net.tensor(*t).name)))?;
                let h = run.to_host(v).map_err(|e| fail(&net.tensor(*t).name, e))?;
                Ok(Arc::try_unwrap(h).unwrap_or_else(|shared| (*shared).clone()))
            })
            .collect()
    }
}

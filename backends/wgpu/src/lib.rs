//! kiln's portable GPU backend: every layer as WGSL compute shaders through wgpu (Vulkan,
//! Metal, DX12, GL; Mesa's lavapipe in CI).
//!
//! - [`device`]: one shared device per process; adapter limits read and respected; no
//!   adapter, device loss, out-of-memory and limit violations are [`DeviceError`]s.
//! - [`shaders`]: the WGSL sources of `/shaders` and every instantiation compiled.
//! - Values are device tensors of 32-bit words (f16 as halves, 2 bytes per element, where
//!   the adapter has SHADER_F16, widened to words for kernels without an f16
//!   instantiation; else f16 and bf16 as f32 rounded after every layer, 8/16-bit integers widened and wrapped, i64 / u64 as i32 / u32 when every
//!   value fits (refused on upload otherwise; device results beyond the 32-bit range
//!   saturate or wrap there), bool as 0/1), or small host tensors for shape arithmetic
//!   that kiln's inference evaluates (TensorRT's shape tensors).
//! - **f64 is stored and computed as f32** (WGSL has no f64; TensorRT's ONNX parser does
//!   the same with DOUBLE): inputs are rounded to f32 on upload, casts to and from f64
//!   follow f32 rounding, and results match the cpu backend to f32 precision only.
//! - The storage-only types hold their value in a word: float8 (e4m3fn, e4m3fnuz, e5m2,
//!   e5m2fnuz, e8m0) and float4 e2m1 as the decoded f32 (casts into them round in WGSL
//!   bit-exactly as the cpu backend, `shaders/minifloat.wgsl`), the 4- and 2-bit integers
//!   as i32 / u32 (casts wrap as on cpu). Like the cpu backend, no layer computes on them:
//!   they are cast, moved, gathered and selected.
//! - One execution records its dispatches into a command encoder and submits it when a
//!   value must be read (a loop condition, a shape parameter), every 128 dispatches (so
//!   what the device holds for recorded work stays bounded) and at the end.
//! - Memory is allocated once per execution context (see `arena`): executions check an
//!   arena out of the executable's pool, and those repeating an earlier run's shapes take
//!   every tensor at the offset kiln's placement gave it, creating no buffers.
#![deny(unsafe_code)]

mod arena;
pub mod bench;
mod control;
pub mod device;
mod exec;
pub mod gemm;
pub mod ops;
mod plugin;
pub mod shaders;
pub mod tactics;
mod value;
pub mod wgsl;

pub use device::DeviceError;
use exec::WgpuExecutable;
use kiln::{
    Backend, BackendError, DataType, DeviceFingerprint, Executable, GatherMode, Layer, LayerKind, Network, PaddingMode,
    ResizeMode,
};

pub(crate) const NAME: &str = "wgpu";

/// The wgpu backend.
#[derive(Clone, Debug)]
pub struct WgpuBackend {
    reuse_memory: bool,
    half_storage: bool,
}

impl Default for WgpuBackend {
    fn default() -> WgpuBackend {
        WgpuBackend::new()
    }
}

impl WgpuBackend {
    pub fn new() -> WgpuBackend {
        WgpuBackend { reuse_memory: true, half_storage: true }
    }

    /// A backend whose executions create a buffer per tensor and per dispatch instead of
    /// reusing per-context arenas: for measuring what the arenas save, and for ruling them
    /// out when chasing a wrong result.
    pub fn without_memory_reuse() -> WgpuBackend {
        WgpuBackend { reuse_memory: false, half_storage: true }
    }

    /// A backend storing f16 tensors as f32 words (what adapters without SHADER_F16
    /// get): for comparing against the halves, and ruling them out when chasing a wrong
    /// result. By default f16 tensors are halves where the adapter has SHADER_F16.
    pub fn without_f16_storage() -> WgpuBackend {
        WgpuBackend { reuse_memory: true, half_storage: false }
    }

    /// Whether this backend's executions store f16 tensors as halves, 2 bytes per element
    /// (the adapter has SHADER_F16 and the storage is not switched off).
    pub fn stores_f16_as_halves(&self) -> Result<bool, BackendError> {
        Ok(self.half_storage && self.gpu()?.features.contains(wgpu::Features::SHADER_F16))
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

    /// Integer layers run as exact i32 sums and the cpu backend's requantization.
    fn runs_quantized_layers(&self) -> bool {
        true
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

    /// f32 is computed exactly here: `math` (TF32) changes nothing.
    fn tactics(&self, network: &Network, layer: kiln::LayerId, _math: kiln::MathMode) -> Vec<kiln::tactics::TacticDesc> {
        tactics::tactics(network, layer)
    }

    fn time_tactic(
        &self,
        network: &Network,
        layer: kiln::LayerId,
        tactic: &kiln::tactics::TacticDesc,
        _math: kiln::MathMode,
        repetitions: usize,
    ) -> Result<std::time::Duration, BackendError> {
        self.gpu()?;
        tactics::time_tactic(network, layer, tactic, repetitions)
    }

    fn prepare_plan(
        &self,
        network: &Network,
        control: &kiln::ir::control::ControlFlow,
        tactics: &[Option<kiln::tactics::TacticId>],
        _math: kiln::MathMode,
    ) -> Result<Box<dyn Executable>, BackendError> {
        self.check_support(network)?;
        let gpu = self.gpu()?;
        let exe = WgpuExecutable::new(network.clone(), control.clone(), gpu, self.reuse_memory, self.half_storage);
        Ok(Box::new(exe.with_gemm_choices(tactics::adopt(network, tactics))))
    }
}

/// Why the wgpu backend cannot run a layer, if it cannot.
fn unsupported(network: &Network, layer: &Layer) -> Option<String> {
    use LayerKind as K;
    let tensors = layer.inputs.iter().flatten().chain(&layer.outputs);
    if let Some(t) = tensors.map(|&t| network.tensor(t)).find(|t| crate::wgsl::Storage::of(t.dtype).is_none()) {
        return Some(format!("tensor `{}` is {}: WGSL has no storage for this type yet", t.name, t.dtype));
    }
    if computes(&layer.kind) {
        let tensors = layer.inputs.iter().flatten().chain(&layer.outputs);
        if let Some(t) = tensors.map(|&t| network.tensor(t)).find(|t| t.dtype.is_narrow()) {
            return Some(format!("tensor `{}` is {}: a storage-only type, cast it to compute", t.name, t.dtype));
        }
    }
    let input_type = |slot: usize| layer.inputs.get(slot).copied().flatten().map(|t| network.tensor(t).dtype);
    let float_input = || input_type(0).is_some_and(DataType::is_float);
    match &layer.kind {
        // A fused layer headed by a pooling pools with the WGSL kernel first.
        K::Fused(p) if matches!(p.anchor, kiln::FusedAnchor::Pooling(_)) && !float_input() => {
            Some("the WGSL Pooling kernel computes floats only (a fused layer headed by a pooling of levels)".to_string())
        }
        K::Constant { .. }
        | K::Identity
        | K::Cast { .. }
        | K::CastNarrow { .. }
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
        | K::Fused(_) => None,
        // The interpreter runs loop and conditional boundaries.
        kiln::control_boundary!() => None,
        // Levels it dequantizes itself (to a float type, shape inference checks).
        K::Attention(p) if p.input_levels.is_some() => None,
        K::Convolution(_)
        | K::Deconvolution(_)
        | K::Pooling(_)
        | K::SoftMax { .. }
        | K::Normalization { .. }
        | K::RmsNormalization { .. }
        | K::Attention(_) => {
            (!float_input()).then(|| format!("the WGSL {} kernel computes floats only", layer.kind.type_name()))
        }
        K::TopK { .. }
        | K::CumulativeSum { .. }
        | K::CumulativeProduct { .. }
        | K::Scatter { .. }
        | K::Gather { mode: GatherMode::Nd { .. } }
        | K::OneHot { .. }
        | K::NonZero
        | K::Unique { .. }
        | K::Padding { mode: PaddingMode::Reflect | PaddingMode::Edge | PaddingMode::Wrap } => None,
        K::Einsum { .. } => (layer.inputs.len() > 2
            || input_type(0).and_then(crate::wgsl::Storage::of) == Some(crate::wgsl::Storage::U32))
        .then(|| "the WGSL Einsum kernel takes one or two float or signed integer operands".to_string()),
        K::Lrn { .. } => (!float_input()).then(|| "the WGSL LRN kernel computes floats only".to_string()),
        K::Resize(p) => (p.mode != ResizeMode::Nearest && !float_input())
            .then(|| format!("the WGSL {:?} Resize kernel interpolates floats only", p.mode)),
        K::GridSample(_) => {
            let rank = layer.inputs.first().copied().flatten().map_or(0, |t| network.tensor(t).shape.rank());
            if !float_input() {
                Some("the WGSL GridSample kernel samples floats only".into())
            } else {
                (rank > ops::sampling::MAX_SPATIAL + 2).then(|| {
                    format!("the WGSL GridSample kernel samples at most {} spatial dims", ops::sampling::MAX_SPATIAL)
                })
            }
        }
        K::Quantize { to, .. } => (!matches!(
            to,
            DataType::I8 | DataType::U8 | DataType::I16 | DataType::U16 | DataType::I32
        ))
        .then(|| format!("the WGSL Quantize kernel produces 8/16-bit integers and i32, not {to}")),
        K::Dequantize { .. } => (!matches!(
            input_type(0),
            Some(DataType::I8 | DataType::U8 | DataType::I16 | DataType::U16 | DataType::I32 | DataType::U32)
        ))
        .then(|| "the WGSL Dequantize kernel reads 8/16/32-bit integers only".to_string()),
        // Read back and computed on the host: its output length depends on the data.
        K::NonMaxSuppression { .. } => None,
        K::Dft { .. } | K::Determinant | K::RoiAlign { .. } => {
            (!float_input()).then(|| format!("the WGSL {} kernel computes floats only", layer.kind.type_name()))
        }
        K::Col2Im { .. } => {
            let rank = layer.outputs.first().map_or(0, |&t| network.tensor(t).shape.rank());
            if !float_input() {
                Some("the WGSL Col2Im kernel computes floats only".into())
            } else {
                (rank > ops::signal::COL2IM_MAX_SPATIAL + 2).then(|| {
                    format!("the WGSL Col2Im kernel handles at most {} spatial dims", ops::signal::COL2IM_MAX_SPATIAL)
                })
            }
        }
        K::Plugin(p) => plugin::unsupported(p),
        K::Reformat { .. } | K::Text(_) => Some(format!("no WGSL kernel for {} yet", layer.kind.type_name())),
        K::Quantized(p) => match &p.anchor {
            _ if input_type(kiln::QuantizedParams::X).is_some_and(kiln::QuantizedParams::is_fp8) => {
                Some("float8 (FP8) integer layers have no WGSL kernel yet: they run on cpu and cuda".into())
            }
            kiln::QuantizedAnchor::Convolution(c) if c.strides.len() > 3 => {
                Some("integer convolutions run over at most 3 spatial dims".into())
            }
            _ => None,
        },
    }
}

/// Whether a layer does arithmetic on its values (rather than converting or moving them).
fn computes(kind: &LayerKind) -> bool {
    use LayerKind as K;
    matches!(
        kind,
        K::Elementwise { .. }
            | K::Activation { .. }
            | K::Unary { .. }
            | K::ParametricRelu
            | K::MatrixMultiply { .. }
            | K::Reduce { .. }
            | K::Convolution(_)
            | K::Deconvolution(_)
            | K::Pooling(_)
            | K::SoftMax { .. }
            | K::Normalization { .. }
            | K::RmsNormalization { .. }
            | K::Attention(_)
            | K::Fused(_)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln::{FusedAnchor, FusedParams, PoolingKind, PoolingParams, PostOp, Shape};

    /// A fused layer headed by a pooling of levels (what the Q/DQ passes make of a CNN's
    /// `ReLU → MaxPool`) is refused by name at the support check, not at its first run.
    #[test]
    fn a_fused_pooling_of_levels_is_refused_by_name() {
        let pool = PoolingParams {
            kind: PoolingKind::Max,
            window: vec![2, 2],
            strides: vec![2, 2],
            dilations: vec![1, 1],
            pre_padding: vec![0, 0],
            post_padding: vec![0, 0],
            ceil_mode: false,
            average_count_excludes_padding: false,
        };
        for (dtype, refused) in [(DataType::I8, true), (DataType::F32, false)] {
            let mut net = Network::new("pool");
            let x = net.add_input("x", dtype, Shape::fixed(&[1, 4, 4, 4])).expect("x");
            let kind = LayerKind::Fused(FusedParams::new(FusedAnchor::Pooling(pool.clone()), 1, vec![PostOp::Activation(kiln::ActivationKind::Relu)]));
            let l = net.add_layer("pool", kind, vec![Some(x)]).expect("pool");
            let reason = unsupported(&net, net.layer(l));
            assert_eq!(reason.is_some(), refused, "{dtype}: {reason:?}");
            assert!(reason.is_none_or(|r| r.contains("Pooling")), "names the pooling");
        }
    }
}

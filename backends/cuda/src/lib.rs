//! kiln's CUDA backend: NVRTC-compiled kernels (`/kernels/*.cu`) and cuBLASLt on NVIDIA GPUs.
//!
//! Nothing of CUDA is needed to build: the driver, NVRTC and cuBLASLt are opened at run time,
//! and [`probe`] checks for them before any cudarc call (cudarc panics on a missing library),
//! so a machine without them gets [`BackendError::Unavailable`] naming what is missing.
//! cuDNN (optional) runs convolutions and pooling where present ([`dnn`]).
//! `unsafe` lives only in the FFI and device-memory modules, the ones allowed it below
//! (`nvrtc`, `probe`, `arena`, `buffer`, `caller_memory`, `blas`, `device`, `dnn`, `ops::plugin`), each block with a
//! `// SAFETY:` comment.

#![deny(unsafe_code)]

pub mod sources;
#[allow(unsafe_code)] // FFI / device memory
pub mod nvrtc;
/// Compiled kernels kept on disk between processes.
pub mod kernel_cache;
#[allow(unsafe_code)] // FFI / device memory
pub mod probe;

#[allow(unsafe_code)] // FFI / device memory
pub mod arena;
#[allow(unsafe_code)] // FFI / device memory
pub mod blas;
#[allow(unsafe_code)] // FFI
pub mod sparse;
#[allow(unsafe_code)] // FFI / device memory
pub mod buffer;
#[allow(unsafe_code)] // FFI / device memory
pub mod caller_memory;
#[allow(unsafe_code)] // FFI / device memory
pub mod device;
#[allow(unsafe_code)] // FFI / device memory
pub mod dnn;
pub mod error;
mod exec;
mod layer_events;
pub mod ops;
mod replay;
mod tactics;

pub use buffer::{DeviceBuffer, DeviceTensor};
pub use device::Gpu;
pub use error::GpuError;
pub use exec::{CudaExecutable, CUDA_GRAPHS_VAR};

use kiln::{Backend, BackendError, DataType, DeviceFingerprint, Executable, MathMode, Network, PrecisionSupport};
use std::sync::{Arc, OnceLock};

/// The CUDA backend, on one device (0 unless [`CudaBackend::on_device`]). Cheap to create: the
/// device is opened (and kiln's kernels compiled for it) on first use, and shared by every
/// executable it prepares.
#[derive(Debug, Default)]
pub struct CudaBackend {
    gpu: OnceLock<Result<Arc<Gpu>, GpuError>>,
    /// The device's ordinal.
    ordinal: usize,
    /// Convolutions and pooling ignore cuDNN even where it is present (its own device).
    without_cudnn: bool,
}

impl CudaBackend {
    /// A backend on device 0. Whether f32 products and convolutions use TF32 is each
    /// plan's [`MathMode`] (the engine's TF32 builder flag).
    pub fn new() -> CudaBackend {
        CudaBackend::default()
    }

    /// A backend on device `ordinal` (as `CUDA_VISIBLE_DEVICES` numbers them): several engines
    /// of one process may run on several GPUs, one backend each.
    pub fn on_device(ordinal: usize) -> CudaBackend {
        CudaBackend { ordinal, ..CudaBackend::default() }
    }

    /// A backend whose convolutions and pooling never use cuDNN (kiln's direct kernels only),
    /// on a device of its own: for tests of the fallback and for A/B timing. The
    /// `KILN_CUDA_DISABLE_CUDNN=1` environment variable does the same process-wide.
    pub fn without_cudnn(mut self) -> CudaBackend {
        self.without_cudnn = true;
        self
    }

    /// The shared device, opened on first use.
    pub fn gpu(&self) -> Result<Arc<Gpu>, BackendError> {
        let open = || {
            let gpu = Gpu::new(self.ordinal)?;
            if self.without_cudnn {
                let _ = gpu.dnn.set(Err(GpuError::Unavailable("cuDNN is off for this backend (CudaBackend::without_cudnn)".into())));
            }
            Ok(Arc::new(gpu))
        };
        self.gpu.get_or_init(open).clone().map_err(|e| exec::gpu_error("(device)", e))
    }

    /// Prepares `network` as the concrete executable (for callers that time or inspect it);
    /// its control flow is lowered here and f32 is exact, as [`Backend::prepare`] does.
    pub fn prepare_cuda(&self, network: &Network) -> Result<CudaExecutable, BackendError> {
        let control = kiln::ir::control::lower(network, kiln::ir::control::DEFAULT_MAX_TRIP_COUNT)
            .map_err(|e| BackendError::Execution { layer: "(control flow)".into(), reason: e.to_string() })?;
        self.prepare_cuda_plan(network, &control, &[], MathMode::EXACT)
    }
}

impl CudaBackend {
    /// The concrete executable of an engine's network, control flow and tactics
    /// (`Engine::control_flow`, `Engine::tactics`): cuBLASLt algorithm, cuDNN algorithm or
    /// direct kernel per layer.
    pub fn prepare_cuda_plan(
        &self,
        network: &Network,
        control: &kiln::ir::control::ControlFlow,
        chosen: &[Option<kiln::TacticId>],
        math: MathMode,
    ) -> Result<CudaExecutable, BackendError> {
        self.check_support(network)?;
        let ranks = (0..network.layers().len())
            .map(|i| tactics::rank_of(network, kiln::LayerId(i), chosen.get(i).and_then(Option::as_ref)))
            .collect();
        Ok(CudaExecutable::new(network.clone(), control.clone(), self.gpu()?, math.tf32)?.with_gemm_ranks(ranks))
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> &str {
        "cuda"
    }

    fn device(&self) -> Result<DeviceFingerprint, BackendError> {
        probe::libraries().runtime_ready().map_err(|reason| BackendError::Unavailable { backend: "cuda".into(), reason })?;
        self.gpu()?.fingerprint().map_err(|e| exec::gpu_error("(device)", e))
    }

    fn check_support(&self, network: &Network) -> Result<(), BackendError> {
        let placement_host = exec::host_layers(network);
        for (i, layer) in network.layers().iter().enumerate() {
            if layer.kind.is_control_boundary() || placement_host[i] {
                continue;
            }
            let input_types: Vec<Option<DataType>> = layer.inputs.iter().map(|t| t.map(|t| network.tensor(t).dtype)).collect();
            let output_types: Vec<DataType> = layer.outputs.iter().map(|&t| network.tensor(t).dtype).collect();
            let conv_3d = match &layer.kind {
                kiln::LayerKind::Convolution(p) => p.strides.len() > 2,
                kiln::LayerKind::Fused(f) => matches!(&f.anchor, kiln::FusedAnchor::Convolution(p) if p.strides.len() > 2),
                _ => false,
            };
            let no_dnn = conv_3d && self.without_cudnn;
            let reason = no_dnn.then(|| "3-D convolutions need cuDNN, which this backend does not use".to_string());
            if let Some(reason) = reason.or_else(|| ops::unsupported(&layer.kind, &input_types, &output_types)) {
                return Err(BackendError::Unsupported {
                    backend: "cuda".into(),
                    layer: layer.name.clone(),
                    kind: layer.kind.type_name().into(),
                    reason,
                });
            }
        }
        Ok(())
    }

    /// Q/DQ fusion's integer layers run on INT8 tensor cores (cuBLASLt IMMA, cuDNN INT8
    /// convolutions) where they are symmetric int8, and exactly in f32 otherwise.
    fn runs_quantized_layers(&self) -> bool {
        true
    }

    fn tactics(&self, network: &Network, layer: kiln::LayerId, math: MathMode) -> Vec<kiln::TacticDesc> {
        tactics::tactics(self, network, layer, math)
    }

    fn time_tactic(
        &self,
        network: &Network,
        layer: kiln::LayerId,
        tactic: &kiln::TacticDesc,
        math: MathMode,
        repetitions: usize,
    ) -> Result<std::time::Duration, BackendError> {
        tactics::time_tactic(self, network, layer, tactic, math, repetitions)
    }

    fn prepare_plan(
        &self,
        network: &Network,
        control: &kiln::ir::control::ControlFlow,
        chosen: &[Option<kiln::TacticId>],
        math: MathMode,
    ) -> Result<Box<dyn Executable>, BackendError> {
        Ok(Box::new(self.prepare_cuda_plan(network, control, chosen, math)?))
    }

    /// Float layers compute in f32, f16 and bf16, and every one is faster in the 16-bit types:
    /// products, attention and convolutions on tensor cores (cuBLASLt, cuDNN), the memory-bound
    /// rest moving half the bytes with f32 arithmetic inside the kernels — so a chain of layers
    /// stays 16-bit and fuses, with no cast pairs between them.
    fn precision_support(&self, network: &Network, layer: kiln::LayerId) -> PrecisionSupport {
        let kind = &network.layer(layer).kind;
        if !kiln::precision::is_float_compute(kind) {
            return PrecisionSupport::default();
        }
        PrecisionSupport {
            offered: vec![DataType::F32, DataType::F16, DataType::BF16],
            faster: vec![DataType::F16, DataType::BF16],
        }
    }
}

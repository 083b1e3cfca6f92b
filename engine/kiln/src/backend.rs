//! The seam between kiln's core and its backends (cpu, wgpu, cuda, plugins).

use crate::ir::dtype::DataType;
use crate::ir::format::TensorFormat;
use crate::ir::network::{LayerId, Network};
use crate::device::DeviceFingerprint;
use crate::device_io::{DeviceAllocation, DeviceIo};
use crate::ir::control::{lower, ControlFlow, DEFAULT_MAX_TRIP_COUNT};
use crate::error::BackendError;
use crate::ir::tensor::HostTensor;
use crate::tactics::{TacticDesc, TacticId};
use std::time::Duration;

/// A backend: probes its device, checks which layers it runs and prepares executables.
pub trait Backend: Send + Sync {
    /// The backend's name ("cpu", "wgpu", "cuda", …).
    fn name(&self) -> &str;
    /// Probes for a usable device; the error says why there is none.
    fn device(&self) -> Result<DeviceFingerprint, BackendError>;
    /// Checks that every layer of a network can run here.
    fn check_support(&self, network: &Network) -> Result<(), BackendError>;
    /// Prepares `network` to run the lowered control flow `control`, each layer with the
    /// tactic the builder chose (`tactics` is empty or one entry per layer) and f32
    /// arithmetic as `math` allows: what an engine runs through
    /// ([`crate::runtime::PreparedEngine`]).
    fn prepare_plan(
        &self,
        network: &Network,
        control: &ControlFlow,
        tactics: &[Option<TacticId>],
        math: MathMode,
    ) -> Result<Box<dyn Executable>, BackendError>;

    /// Prepares a network that did not come through the builder: its control flow is
    /// lowered here (with the default trip guard), every layer runs its first tactic and f32
    /// is exact.
    fn prepare(&self, network: &Network) -> Result<Box<dyn Executable>, BackendError> {
        let control = lower(network, DEFAULT_MAX_TRIP_COUNT)
            .map_err(|e| BackendError::Execution { layer: "(control flow)".into(), reason: e.to_string() })?;
        self.prepare_plan(network, &control, &[], MathMode::EXACT)
    }

    /// The compute types this backend offers for `layer` of `network`, and which of them
    /// it runs faster than f32 (a hint until tactics are timed). Default: f32 only.
    fn precision_support(&self, network: &Network, layer: LayerId) -> PrecisionSupport {
        let _ = (network, layer);
        PrecisionSupport::default()
    }

    /// Whether the backend runs [`crate::LayerKind::Quantized`] layers (integer convolutions
    /// and products that Q/DQ fusion makes); without them a Q/DQ network runs as written.
    fn runs_quantized_layers(&self) -> bool {
        false
    }

    /// Whether a network input or output in `format` and `dtype` is read or written by
    /// the adjacent kernels directly, so the boundary Reformat layer costs nothing (what
    /// the DIRECT_IO builder flag requires). Default: LINEAR only.
    fn consumes_io_format(&self, format: TensorFormat, dtype: DataType) -> bool {
        let _ = dtype;
        format == TensorFormat::Linear
    }

    /// The implementations this backend offers for `layer` under `math`, in a stable order
    /// (the first wins ties). Default: one "default" tactic.
    fn tactics(&self, network: &Network, layer: LayerId, math: MathMode) -> Vec<TacticDesc> {
        let _ = (network, layer, math);
        vec![TacticDesc::default_for(self.name())]
    }

    /// The median time of `repetitions` runs of `tactic` on `layer` under `math` (after a
    /// warm-up), on inputs of the layer's shapes. Only called for layers offering several
    /// tactics.
    fn time_tactic(
        &self,
        network: &Network,
        layer: LayerId,
        tactic: &TacticDesc,
        math: MathMode,
        repetitions: usize,
    ) -> Result<Duration, BackendError> {
        let _ = (network, layer, tactic, math, repetitions);
        Ok(Duration::ZERO)
    }

    /// The name of the kernel that runs `layer`, as the engine inspector reports it in
    /// place of a tactic name. Default: `{backend}::{layer type}_{output type}`.
    fn kernel_name(&self, network: &Network, layer: LayerId) -> String {
        let l = network.layer(layer);
        let dtype = l.outputs.first().map_or("none", |&t| network.tensor(t).dtype.name());
        format!("{}::{}_{dtype}", self.name(), l.kind.type_name().to_ascii_lowercase())
    }
}

/// How a backend may compute f32 arithmetic: what the engine's builder flags allow. The
/// builder passes it to tactic listing and timing and the runtime to preparation, so an
/// engine runs as its tactics were timed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MathMode {
    /// f32 matrix products and convolutions may round their operands to TF32 (a 10-bit
    /// mantissa) on tensor cores (the TF32 builder flag); backends without TF32 units ignore it.
    pub tf32: bool,
    /// Convolutions and products whose weights satisfy 2:4 sparsity may run on sparse
    /// kernels (the SPARSE_WEIGHTS builder flag, [`crate::sparsity`]).
    pub sparse_weights: bool,
}

impl MathMode {
    /// f32 computed in f32: networks prepared outside the builder, constant folding.
    pub const EXACT: MathMode = MathMode { tf32: false, sparse_weights: false };

    /// This mode's part of a timing-cache key: tactics timed under one mode are not reused
    /// under another.
    pub fn cache_settings(self) -> &'static str {
        match (self.tf32, self.sparse_weights) {
            (true, false) => "tf32",
            (false, false) => "no-tf32",
            (true, true) => "tf32+sparse",
            (false, true) => "no-tf32+sparse",
        }
    }
}

/// Reduced-precision support of one layer on a backend (see
/// [`Backend::precision_support`]). f32 is always offered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrecisionSupport {
    /// Types the backend can compute the layer in.
    pub offered: Vec<DataType>,
    /// Of those, the ones faster than f32, fastest first.
    pub faster: Vec<DataType>,
}

impl Default for PrecisionSupport {
    fn default() -> PrecisionSupport {
        PrecisionSupport { offered: vec![DataType::F32], faster: Vec::new() }
    }
}

/// Device time of one execution's phases, measured between device events (what trtexec
/// reports as H2D, GPU compute and D2H).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceTimes {
    /// Copying the inputs to the device.
    pub host_to_device: Duration,
    /// From the inputs' arrival to the last layer's completion (device idle time while the
    /// host launches layers one by one included).
    pub compute: Duration,
    /// Copying the outputs back.
    pub device_to_host: Duration,
}

/// The per-layer times of one profiled execution, by layer index: None for a layer that ran
/// no kernel (constants, shape arithmetic); a layer run several times (in a loop) is summed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LayerTimes(pub Vec<Option<Duration>>);

impl LayerTimes {
    pub fn new(layers: usize) -> LayerTimes {
        LayerTimes(vec![None; layers])
    }

    /// Adds `time` to layer `layer` (ignored past the end: a layer the network does not have).
    pub fn add(&mut self, layer: LayerId, time: Duration) {
        if let Some(slot) = self.0.get_mut(layer.0) {
            *slot = Some(slot.unwrap_or_default() + time);
        }
    }
}

/// A network prepared for one backend; callable from several threads.
pub trait Executable: Send + Sync {
    /// Runs the network on inputs given in network-input order (already validated against
    /// the declared types and shapes) and returns the outputs in network-output order.
    fn execute(&self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>, BackendError>;

    /// [`Executable::execute`], also measuring the execution's phases on the device where
    /// the backend can. Default: no device times.
    fn execute_timed(&self, inputs: &[HostTensor]) -> Result<(Vec<HostTensor>, Option<DeviceTimes>), BackendError> {
        Ok((self.execute(inputs)?, None))
    }

    /// [`Executable::execute`] with the time of every layer measured (a profile run,
    /// interpreted layer by layer; see [`crate::runtime::layer_profile`]). Default: the
    /// backend times no layers (None).
    fn execute_profiled(&self, inputs: &[HostTensor]) -> Result<(Vec<HostTensor>, Option<LayerTimes>), BackendError> {
        Ok((self.execute(inputs)?, None))
    }

    /// Allows or forbids replaying captured device graphs of whole executions (CUDA graphs).
    /// Returns whether the backend captures graphs at all. Default: it does not.
    fn set_graph_capture(&self, enabled: bool) -> bool {
        let _ = enabled;
        false
    }

    /// Replaces weights blobs of the prepared network in place (a refit, see
    /// [`crate::refit`]): each new blob has the old one's type and dims; device copies and
    /// anything derived from them are rewritten, no kernel is compiled. Called only while no
    /// execution runs. Default: the backend cannot refit.
    fn refit(&mut self, changes: &[(crate::ir::layer::WeightsId, std::sync::Arc<HostTensor>)]) -> Result<(), BackendError> {
        let _ = changes;
        Err(BackendError::NotOffered {
            backend: "(this backend)".into(),
            operation: "refit a prepared engine".into(),
            reason: "refit the engine file (kiln refit) and load it again".into(),
        })
    }

    /// How the latest execution ran (e.g. "graph replay" or why it was interpreted), for
    /// reports. Default: the backend does not say.
    fn execution_mode(&self) -> Option<String> {
        None
    }

    /// Runs on inputs in device memory and writes the outputs to device memory (see
    /// [`crate::device_io`]), inputs validated as for [`Executable::execute`]. Returns each
    /// output's dims and, when `timed`, the device times of the phases (input copies, compute,
    /// output copies). Default: the backend runs on host memory only.
    fn execute_on_device(&self, io: &DeviceIo<'_>, timed: bool) -> Result<DeviceRun, BackendError> {
        let _ = (io, timed);
        Err(host_memory_only("run on device memory"))
    }

    /// Allocates `bytes` of device memory on the executable's device, for callers without an
    /// allocator of their own. Default: the backend runs on host memory only.
    fn allocate_device(&self, bytes: usize) -> Result<Box<dyn DeviceAllocation>, BackendError> {
        let _ = bytes;
        Err(host_memory_only("allocate device memory"))
    }

    /// Allocates `bytes` of page-locked host memory the device copies straight from and to,
    /// bindable for device executions as device memory is (what registered host buffers
    /// give). Default: the backend runs on host memory only.
    fn allocate_host(&self, bytes: usize) -> Result<Box<dyn DeviceAllocation>, BackendError> {
        let _ = bytes;
        Err(host_memory_only("allocate page-locked host memory"))
    }
}

/// What a device execution reports: each output's dims (in network-output order) and, when
/// timed, its device times.
pub type DeviceRun = (Vec<Vec<usize>>, Option<DeviceTimes>);

fn host_memory_only(operation: &str) -> BackendError {
    BackendError::NotOffered {
        backend: "(this backend)".into(),
        operation: operation.into(),
        reason: "it runs on host memory: bind host buffers instead".into(),
    }
}

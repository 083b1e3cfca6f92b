//! The executable: interprets a network layer by layer in its stored (topological) order.

use kiln::plan::loops::{slice_along, stack_along};
use crate::kernels::{self, Variant};
use kiln::ir::control::ControlFlow;
use kiln::ir::infer::{Fact, OutFact};
use kiln::runtime::interp::{run_plan, top_level_frees};
use kiln::runtime::layer_profile::{HostClock, LayerProfiler};
use kiln::runtime::machine::{KernelError, Machine};
use kiln::{BackendError, DataType, Executable, HostTensor, LayerId, LayerTimes, Network};
use std::sync::Arc;

/// A network prepared for the cpu backend. Immutable once built, so it is shared freely
/// between threads; each [`Executable::execute`] call keeps its own tensor values.
#[derive(Debug)]
pub struct CpuExecutable {
    network: Network,
    /// The steps to run: the engine's lowered control flow (one block of every layer when
    /// the network has no loops or conditionals).
    plan: ControlFlow,
    /// Per top-level step, the tensors whose value is no longer needed once it has run.
    frees: Vec<Vec<usize>>,
    /// Per layer, the implementation its tactic selects (empty: primary everywhere).
    variants: Vec<Variant>,
}

impl CpuExecutable {
    /// Prepares a network to run its lowered control flow `plan`.
    pub fn new(network: Network, plan: ControlFlow) -> CpuExecutable {
        let frees = top_level_frees(&network, &plan.body.steps);
        CpuExecutable { network, plan, frees, variants: Vec::new() }
    }

    /// Runs each layer with the implementation the builder's tactic chose.
    pub fn with_variants(mut self, variants: Vec<Variant>) -> CpuExecutable {
        self.variants = variants;
        self
    }
}

/// One execution of a [`CpuExecutable`]: the interpreter's machine.
struct CpuRun<'e> {
    exe: &'e CpuExecutable,
    /// Times each layer in a profile run.
    clock: Option<HostClock>,
}

impl CpuRun<'_> {
    fn execute(&self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>, BackendError> {
        let values = inputs.iter().map(|x| Arc::new(x.clone())).collect();
        let outputs = run_plan(self, &self.exe.plan, &self.exe.frees, values)?;
        Ok(outputs.into_iter().map(|v| Arc::try_unwrap(v).unwrap_or_else(|shared| (*shared).clone())).collect())
    }
}

impl Machine for CpuRun<'_> {
    type Value = Arc<HostTensor>;

    fn network(&self) -> &Network {
        &self.exe.network
    }

    fn backend_name(&self) -> &str {
        "cpu"
    }

    /// The reference computes every layer with its own kernels.
    fn skips_inferred_layers(&self) -> bool {
        false
    }

    fn profiler(&self) -> Option<&dyn LayerProfiler> {
        self.clock.as_ref().map(|c| c as &dyn LayerProfiler)
    }

    fn memory_capacity(&self) -> u64 {
        kiln::limits::host_memory_bytes()
    }

    fn meta(&self, value: &Arc<HostTensor>) -> (DataType, Vec<usize>) {
        (value.dtype(), value.shape().to_vec())
    }

    fn host_copy(&self, value: &Arc<HostTensor>) -> Option<Arc<HostTensor>> {
        Some(value.clone())
    }

    fn host_value(&self, tensor: Arc<HostTensor>) -> Arc<HostTensor> {
        tensor
    }

    /// The kernel the layer's tactic chose, on the input values.
    fn run_kernel(
        &self,
        id: LayerId,
        values: &[Option<Arc<HostTensor>>],
        _facts: &[Option<Fact>],
        expected: &[OutFact],
    ) -> Result<Vec<Arc<HostTensor>>, KernelError> {
        reserve_outputs(expected)?;
        let inputs: Vec<Option<&HostTensor>> = values.iter().map(|v| v.as_deref()).collect();
        let variant = self.exe.variants.get(id.0).copied().unwrap_or_default();
        let outputs = kernels::run_with(&self.exe.network.layer(id).kind, &inputs, expected, variant)?;
        Ok(outputs.into_iter().map(Arc::new).collect())
    }

    fn to_host(&self, value: &Arc<HostTensor>) -> Result<Arc<HostTensor>, KernelError> {
        Ok(value.clone())
    }

    fn from_host(&self, tensor: Arc<HostTensor>) -> Result<Arc<HostTensor>, KernelError> {
        Ok(tensor)
    }

    fn slice_along(&self, value: &Arc<HostTensor>, axis: usize, index: usize) -> Result<Arc<HostTensor>, KernelError> {
        Ok(Arc::new(slice_along(value, axis, index)?))
    }

    fn stack_along(
        &self,
        parts: &[Arc<HostTensor>],
        axis: usize,
        length: usize,
        reverse: bool,
        dtype: DataType,
        slice_shape: &[usize],
    ) -> Result<Arc<HostTensor>, KernelError> {
        Ok(Arc::new(stack_along(parts, axis, length, reverse, dtype, slice_shape)?))
    }
}

/// Outputs from this size up are reserved before their kernel runs.
const RESERVED_OUTPUT_BYTES: u64 = 64 << 20;

/// The host may have less memory free than the budget allows: reserving large outputs
/// first (and giving the reservation straight back) turns an allocation the host refuses
/// into an error naming the layer, where the kernel's own allocation would abort.
fn reserve_outputs(expected: &[OutFact]) -> Result<(), KernelError> {
    let bytes = expected
        .iter()
        .filter_map(|o| kiln::limits::tensor_bytes(o.dtype, &o.shape.as_fixed()?))
        .fold(0u64, u64::saturating_add);
    if bytes < RESERVED_OUTPUT_BYTES {
        return Ok(());
    }
    let mut reservation: Vec<u8> = Vec::new();
    let refused = || {
        KernelError::OutOfMemory(format!("the host cannot allocate {} for the outputs", kiln::limits::format_bytes(bytes)))
    };
    let bytes = usize::try_from(bytes).map_err(|_| refused())?;
    reservation.try_reserve_exact(bytes).map_err(|_| refused())
}

impl Executable for CpuExecutable {
    fn execute(&self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>, BackendError> {
        CpuRun { exe: self, clock: None }.execute(inputs)
    }

    /// Each layer timed on the host clock.
    fn execute_profiled(&self, inputs: &[HostTensor]) -> Result<(Vec<HostTensor>, Option<LayerTimes>), BackendError> {
        let run = CpuRun { exe: self, clock: Some(HostClock::new(self.network.layers().len())) };
        let outputs = run.execute(inputs)?;
        Ok((outputs, run.clock.map(HostClock::into_times)))
    }

    /// Kernels read weights from the network: replacing the blobs is the whole refit.
    fn refit(&mut self, changes: &[(kiln::WeightsId, std::sync::Arc<HostTensor>)]) -> Result<(), BackendError> {
        self.network.replace_weights(changes).map_err(|reason| BackendError::Execution { layer: "(refit)".into(), reason })
    }
}

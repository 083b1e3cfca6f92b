//! Running engines (TensorRT 10 style): an engine is prepared once on a backend
//! ([`PreparedEngine`], shared through an `Arc`) and run through any number of
//! [`ExecutionContext`]s, each with its own optimization profile, input shapes and tensor
//! buffers, usable from different threads. [`ExecutionContext::enqueue`] runs
//! asynchronously on a [`Stream`]; [`ExecutionContext::run`] is the one-call convenience.

mod buffer;
mod context;
pub mod interp;
pub mod layer_profile;
pub mod machine;
mod stream;

pub use buffer::Buffer;
pub use context::ExecutionContext;
pub use stream::{Event, Stream};

use crate::backend::{Backend, Executable};
use crate::device_io::DeviceAllocation;
use crate::error::BackendError;
use crate::engine::{Engine, EngineLoadError};
use std::sync::Arc;
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RunError {
    #[error(transparent)]
    Load(#[from] EngineLoadError),
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("input `{0}` is missing")]
    MissingInput(String),
    #[error("`{name}` is not an input of this engine (inputs: {expected})")]
    UnknownInput { name: String, expected: String },
    #[error("`{name}` is not an input or output of this engine (inputs and outputs: {expected})")]
    UnknownTensor { name: String, expected: String },
    #[error("input `{name}` must be {expected}, got {actual}")]
    InputType { name: String, expected: String, actual: String },
    #[error("input `{name}` has shape {actual:?} but the engine expects {expected}: {reason}")]
    InputShape { name: String, expected: String, actual: Vec<usize>, reason: String },
    #[error("optimization profile {index} does not exist: the engine has {count}")]
    NoSuchProfile { index: usize, count: usize },
    #[error("input `{input}` axis {axis} is {value}, outside [{min}, {max}] of optimization profile {profile}")]
    ShapeOutOfProfile { input: String, axis: usize, value: usize, min: usize, max: usize, profile: usize },
    #[error(
        "shape tensor `{input}` value #{index} is {value}, outside [{min}, {max}] of optimization profile {profile}"
    )]
    ShapeValueOutOfProfile { input: String, index: usize, value: i64, min: i64, max: i64, profile: usize },
    #[error("input `{input}` is not a shape tensor (shape tensors are the inputs a profile gives values for)")]
    NotAShapeTensor { input: String },
    #[error("shape tensor `{input}` needs {expected} values, got {actual}")]
    ShapeValueCount { input: String, expected: usize, actual: usize },
    #[error("the shape of input `{input}` is not set: call set_input_shape first")]
    ShapeNotSet { input: String },
    #[error("the values of shape tensor `{input}` are not set: call set_shape_tensor_values first")]
    ShapeValuesNotSet { input: String },
    #[error("no buffer is bound to `{tensor}`: call set_tensor_address first")]
    AddressNotSet { tensor: String },
    #[error("`{name}` is an input: only outputs take an output allocator")]
    NotAnOutput { name: String },
    #[error("no device memory is bound to `{tensor}`: a device execution reads and writes every input and output in device memory (set_device_tensor_address)")]
    DeviceAddressNotSet { tensor: String },
    #[error("`{tensor}` holds strings, which have no fixed size and cannot live in a byte buffer: use ExecutionContext::run with host tensors")]
    StringInBuffer { tensor: String },
    #[error("the buffer of `{tensor}` has {available} bytes, it needs {needed}")]
    BufferTooSmall { tensor: String, needed: usize, available: usize },
    #[error("the buffer of `{tensor}` does not hold valid {dtype} elements")]
    BufferContents { tensor: String, dtype: String },
    #[error("the engine was built with STRIP_WEIGHTS and holds no weights yet: refit it first (kiln refit ENGINE --weights MODEL.onnx -o OUT)")]
    WeightStripped,
    #[error("shape inference fails at layer `{layer}` for the input shapes set: {rule}")]
    ShapeInference { layer: String, rule: String },
}

/// An engine checked against a backend's device and prepared on it; shared by every
/// execution context made from it (`Send + Sync`).
pub struct PreparedEngine {
    engine: Engine,
    executable: Box<dyn Executable>,
    warnings: Vec<String>,
}

impl std::fmt::Debug for PreparedEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedEngine").field("backend", &self.engine.backend()).finish()
    }
}

impl PreparedEngine {
    /// Refuses a device the engine was not built for (seed §6.7: warnings for differences
    /// that only cost performance) and prepares the engine for execution.
    pub fn new(engine: Engine, backend: &dyn Backend) -> Result<Arc<PreparedEngine>, RunError> {
        let device = backend.device()?;
        let warnings = engine.check_device(&device)?;
        if engine.is_weight_stripped() {
            return Err(RunError::WeightStripped);
        }
        let executable = backend.prepare_plan(engine.network(), engine.control_flow(), engine.tactics(), engine.math())?;
        Ok(Arc::new(PreparedEngine { engine, executable, warnings }))
    }

    /// A new context on this engine, with profile 0 active and no shapes or buffers set.
    pub fn create_execution_context(self: &Arc<Self>) -> ExecutionContext {
        ExecutionContext::from_prepared(Arc::clone(self))
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Device differences that may cost performance (seed §6.7).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Device memory on the engine's device, for callers without an allocator of their own
    /// (see [`crate::device_io`]); an error on backends that run on host memory.
    pub fn allocate_device(&self, bytes: usize) -> Result<Box<dyn DeviceAllocation>, RunError> {
        self.executable.allocate_device(bytes).map_err(|e| self.named(e))
    }

    /// Page-locked host memory the engine's device copies straight from and to, bindable with
    /// [`ExecutionContext::set_device_tensor_address`] as device memory is; an error on
    /// backends that run on host memory.
    pub fn allocate_host(&self, bytes: usize) -> Result<Box<dyn DeviceAllocation>, RunError> {
        self.executable.allocate_host(bytes).map_err(|e| self.named(e))
    }

    /// `e` with the backend's name where the executable's default left it unnamed.
    pub(crate) fn named(&self, e: BackendError) -> RunError {
        match e {
            BackendError::NotOffered { operation, reason, .. } => {
                RunError::Backend(BackendError::NotOffered { backend: self.engine.backend().to_string(), operation, reason })
            }
            e => RunError::Backend(e),
        }
    }

    pub(crate) fn executable(&self) -> &dyn Executable {
        self.executable.as_ref()
    }

    /// The engine and its executable, for a refit (which holds the only reference).
    pub(crate) fn parts_mut(&mut self) -> (&mut Engine, &mut dyn Executable) {
        (&mut self.engine, self.executable.as_mut())
    }
}

//! The seam between the shared interpreter and a backend's kernels: [`Machine`], its
//! provided per-layer driver, and the typed [`KernelError`] every kernel returns.
//!
//! The driver is written once for every backend: Constant and Shape layers, reading the
//! shape-deciding inputs ([`LayerKind::host_slots`]) to the host, concrete facts, shape
//! inference, the backend's kernel, and a check that the kernel made what inference said.
//! A backend implements only [`Machine::run_kernel`] and its value transfers.

use crate::backend::BackendError;
use crate::ir::dtype::DataType;
use crate::ir::infer::{infer_layer, Fact, OutFact};
use crate::ir::layer::LayerKind;
use crate::ir::network::{LayerId, Network};
use crate::ir::shape::Shape;
use crate::ir::tensor::HostTensor;
use std::sync::Arc;
use thiserror::Error;

/// Shape-deciding inputs up to this many elements are read to the host before a layer
/// runs (they are shapes, bounds and scalars; anything larger is not a shape).
pub const HOST_SLOT_ELEMENTS: usize = 4096;

/// Why a kernel, or the driver around it, failed. Out-of-memory and a lost device are
/// told apart where they happen, so the caller sees them as such, not as a message.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum KernelError {
    /// A device or host allocation failed.
    #[error("{0}")]
    OutOfMemory(String),
    /// The device stopped answering (driver reset, lost adapter).
    #[error("{0}")]
    DeviceLost(String),
    /// The backend has no kernel for this case (a layer kind, type or attribute).
    #[error("{0}")]
    Unsupported(String),
    /// Anything else: bad values, shapes a kernel cannot take, a failed launch.
    #[error("{0}")]
    Invalid(String),
}

impl From<String> for KernelError {
    fn from(reason: String) -> KernelError {
        KernelError::Invalid(reason)
    }
}

impl From<&str> for KernelError {
    fn from(reason: &str) -> KernelError {
        KernelError::Invalid(reason.to_string())
    }
}

impl KernelError {
    /// The error as the runtime reports it for layer `layer` (of type `kind`, as
    /// [`LayerKind::type_name`] says) on `backend`; `layer` may name a boundary such as
    /// an input tensor.
    pub fn at_layer(self, backend: &str, layer: &str, kind: &str) -> BackendError {
        match self {
            KernelError::OutOfMemory(reason) => {
                BackendError::OutOfMemory { backend: backend.into(), reason: format!("layer `{layer}`: {reason}") }
            }
            KernelError::DeviceLost(reason) => {
                BackendError::Unavailable { backend: backend.into(), reason: format!("device lost at layer `{layer}`: {reason}") }
            }
            KernelError::Unsupported(reason) => BackendError::Unsupported {
                backend: backend.into(),
                layer: layer.into(),
                kind: kind.into(),
                reason,
            },
            KernelError::Invalid(reason) => BackendError::Execution { layer: layer.into(), reason },
        }
    }
}

/// A backend's values and kernels, as the interpreter drives them.
pub trait Machine {
    /// A tensor value; cloning must be cheap (an `Arc` or a buffer handle).
    type Value: Clone;

    fn network(&self) -> &Network;
    /// The backend's name, for errors ("cpu", "wgpu", "cuda").
    fn backend_name(&self) -> &str;
    /// The element type and dims of a value, known without waiting for the device.
    fn meta(&self, value: &Self::Value) -> (DataType, Vec<usize>);
    /// The value's host copy, if it has one now (no transfer).
    fn host_copy(&self, value: &Self::Value) -> Option<Arc<HostTensor>>;
    /// A value living on the host (shape arithmetic, small constants).
    fn host_value(&self, tensor: Arc<HostTensor>) -> Self::Value;
    /// `value` with a host copy, read back from the device if it has none.
    fn with_host_copy(&self, value: &Self::Value) -> Result<Self::Value, KernelError> {
        Ok(self.host_value(self.to_host(value)?))
    }
    /// Reads a value to the host (trip counts, loop and if conditions, outputs).
    fn to_host(&self, value: &Self::Value) -> Result<Arc<HostTensor>, KernelError>;
    /// Makes a device value from a host tensor (the network inputs).
    #[allow(clippy::wrong_self_convention)] // uploads through the machine's device
    fn from_host(&self, tensor: Arc<HostTensor>) -> Result<Self::Value, KernelError>;
    /// The value of Constant layer `id` holding `weights` (checked against its declaration).
    fn constant(&self, id: LayerId, weights: &Arc<HostTensor>) -> Result<Self::Value, KernelError> {
        let _ = id;
        Ok(self.host_value(weights.clone()))
    }
    /// Runs the kernel of layer `id` (never Constant, Shape or a control boundary).
    /// `inputs` in slot order with the host slots read back, `facts` their concrete facts,
    /// `expected` what shape inference says the outputs are.
    fn run_kernel(
        &self,
        id: LayerId,
        inputs: &[Option<Self::Value>],
        facts: &[Option<Fact>],
        expected: &[OutFact],
    ) -> Result<Vec<Self::Value>, KernelError>;
    /// A loop Iterator's value: the slice at `index` along `axis`, the axis removed.
    fn slice_along(&self, value: &Self::Value, axis: usize, index: usize) -> Result<Self::Value, KernelError>;
    /// A CONCATENATE/REVERSE loop output: `parts` stacked along a new axis `axis` of
    /// `length` (at least `parts.len()`; zeros past the parts), last part first when
    /// `reverse`. Every part is `dtype` with dims `slice_shape` (checked by the caller).
    #[allow(clippy::too_many_arguments)]
    fn stack_along(
        &self,
        parts: &[Self::Value],
        axis: usize,
        length: usize,
        reverse: bool,
        dtype: DataType,
        slice_shape: &[usize],
    ) -> Result<Self::Value, KernelError>;

    /// Runs one layer: any kind except the loop and conditional boundary layers
    /// (TripLimit, Iterator, Recurrence, LoopOutput, Condition, IfConditionalInput/Output),
    /// which the interpreter handles. Inputs in slot order, `None` for an omitted input.
    fn run_layer(&self, id: LayerId, inputs: &[Option<Self::Value>]) -> Result<Vec<Self::Value>, KernelError> {
        drive_layer(self, id, inputs)
    }
}

/// The per-layer driver every backend shares (see the module doc).
fn drive_layer<M: Machine + ?Sized>(m: &M, id: LayerId, inputs: &[Option<M::Value>]) -> Result<Vec<M::Value>, KernelError> {
    let net = m.network();
    let layer = net.layer(id);
    match &layer.kind {
        LayerKind::Constant { weights } => {
            let w = net.weights().get(weights.0).ok_or_else(|| format!("weights blob #{} is missing", weights.0))?;
            if let Some(&t) = layer.outputs.first() {
                let desc = net.tensor(t);
                check_output(&OutFact::new(desc.dtype, desc.shape.clone()), w.dtype(), w.shape())?;
            }
            return Ok(vec![m.constant(id, w)?]);
        }
        LayerKind::Shape => {
            let x = inputs.first().and_then(Option::as_ref).ok_or("Shape has no input")?;
            let dims: Vec<i64> = m.meta(x).1.iter().map(|&d| d as i64).collect();
            let t = HostTensor::from_i64(vec![dims.len()], dims).map_err(|e| e.to_string())?;
            return Ok(vec![m.host_value(Arc::new(t))]);
        }
        _ => {}
    }
    let mut values = inputs.to_vec();
    for &slot in layer.kind.host_slots() {
        if let Some(Some(v)) = values.get_mut(slot) {
            let small = m.meta(v).1.iter().product::<usize>() <= HOST_SLOT_ELEMENTS;
            if small && m.host_copy(v).is_none() {
                *v = m.with_host_copy(v)?;
            }
        }
    }
    let metas: Vec<Option<(DataType, Shape, Option<Arc<HostTensor>>)>> = values
        .iter()
        .map(|v| v.as_ref().map(|v| {
            let (dtype, dims) = m.meta(v);
            (dtype, Shape::fixed(&dims), m.host_copy(v))
        }))
        .collect();
    let facts: Vec<Option<Fact>> =
        metas.iter().map(|x| x.as_ref().map(|(dtype, shape, host)| Fact::new(*dtype, shape, host.as_deref()))).collect();
    let expected =
        infer_layer(&layer.kind, &facts, &|w| net.weights_blob(w)).map_err(|e| format!("shape inference: {}", e.rule))?;
    let outputs = m.run_kernel(id, &values, &facts, &expected)?;
    if outputs.len() != expected.len() || outputs.len() != layer.outputs.len() {
        return Err(KernelError::Invalid(format!(
            "the kernel produced {} outputs, inference expects {} and the layer has {}",
            outputs.len(),
            expected.len(),
            layer.outputs.len()
        )));
    }
    for (fact, out) in expected.iter().zip(&outputs) {
        let (dtype, dims) = m.meta(out);
        check_output(fact, dtype, &dims)?;
    }
    Ok(outputs)
}

/// A kernel's output must have the inferred type and every inferred fixed dim.
pub fn check_output(fact: &OutFact, dtype: DataType, dims: &[usize]) -> Result<(), KernelError> {
    let dims_match = fact.shape.rank() == dims.len()
        && fact.shape.dims().iter().zip(dims).all(|(d, &n)| d.fixed().is_none_or(|f| f == n));
    if dtype != fact.dtype || !dims_match {
        return Err(KernelError::Invalid(format!(
            "the kernel produced {dtype}{dims:?} but shape inference expects {}{}",
            fact.dtype, fact.shape
        )));
    }
    Ok(())
}

/// A [`KernelError::Invalid`] with a `format!` message: `Err(invalid!("axis {a} is out of range"))`.
#[macro_export]
macro_rules! invalid {
    ($($arg:tt)*) => { $crate::runtime::machine::KernelError::Invalid(format!($($arg)*)) };
}

impl From<crate::ir::tensor::ShapeMismatch> for KernelError {
    fn from(e: crate::ir::tensor::ShapeMismatch) -> KernelError {
        KernelError::Invalid(e.to_string())
    }
}

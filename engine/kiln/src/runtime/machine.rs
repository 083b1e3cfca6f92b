//! The seam between the shared interpreter and a backend's kernels: [`Machine`], its
//! provided per-layer driver, and the typed [`KernelError`] every kernel returns.
//!
//! The driver is written once for every backend: Constant, Shape and Assertion layers,
//! reading the shape-deciding inputs ([`LayerKind::host_slots`]) to the host, concrete
//! facts, shape inference (whose values of shape arithmetic stand for a kernel), the
//! backend's kernel, and a check that the kernel made what inference said.
//! A backend implements only [`Machine::run_kernel`] and its value transfers.

use crate::error::BackendError;
use crate::ir::dtype::DataType;
use crate::ir::infer::{infer_layer, infer_layer_types, Fact, OutFact};
use crate::ir::layer::LayerKind;
use crate::ir::network::{LayerId, Network};
use crate::ir::shape::Shape;
use crate::ir::tensor::HostTensor;
use super::layer_profile::LayerProfiler;
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
    /// Whether a layer whose outputs shape inference computed (small shape arithmetic on
    /// host values) skips the kernel: true for device backends, which then need neither a
    /// kernel nor a transfer for it; the cpu reference runs its own kernels on everything.
    fn skips_inferred_layers(&self) -> bool {
        true
    }
    /// This execution's per-layer profiler, when it is a profiled one (see
    /// [`crate::runtime::layer_profile`]): the driver brackets every kernel with it.
    fn profiler(&self) -> Option<&dyn LayerProfiler> {
        None
    }
    /// Runs the kernel of layer `id` (never Constant, Shape, Assertion, a control boundary
    /// or, see [`Machine::skips_inferred_layers`], a layer whose outputs inference computed).
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

    /// Most bytes this machine can hold in one tensor (host memory on the cpu); an output
    /// inference says is larger fails before the kernel allocates it. Device backends
    /// report their own allocation failures, so the default is no limit.
    fn memory_capacity(&self) -> u64 {
        u64::MAX
    }

    /// Runs one layer: any kind except the loop and conditional boundary layers
    /// (TripLimit, Iterator, Recurrence, LoopOutput, Condition, IfConditionalInput/Output),
    /// which the interpreter handles. Inputs in slot order, `None` for an omitted input;
    /// no output may take more than `memory_budget` bytes.
    fn run_layer(&self, id: LayerId, inputs: &[Option<Self::Value>], memory_budget: u64) -> Result<Vec<Self::Value>, KernelError> {
        drive_layer(self, id, inputs, memory_budget)
    }
}

/// The per-layer driver every backend shares (see the module doc).
fn drive_layer<M: Machine + ?Sized>(
    m: &M,
    id: LayerId,
    inputs: &[Option<M::Value>],
    memory_budget: u64,
) -> Result<Vec<M::Value>, KernelError> {
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
        // A check of shapes or values: read to the host wherever its input lives.
        LayerKind::Assertion { message } => {
            let cond = inputs.first().and_then(Option::as_ref).ok_or("Assertion has no input")?;
            let cond = match m.host_copy(cond) {
                Some(t) => t,
                None => m.to_host(cond)?,
            };
            crate::plan::dynamic::assertion(&cond, message)?;
            return Ok(Vec::new());
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
    // A machine that runs every kernel itself has no use for inference's values.
    let infer = if m.skips_inferred_layers() { infer_layer } else { infer_layer_types };
    let expected = infer(&layer.kind, &facts, &|w| net.weights_blob(w)).map_err(|e| format!("shape inference: {}", e.rule))?;
    for out in &expected {
        if let Some(dims) = out.shape.as_fixed() {
            crate::limits::check_tensor(out.dtype, &dims, memory_budget).map_err(KernelError::OutOfMemory)?;
        }
    }
    // Shape arithmetic inference evaluated (see `ir::infer::evaluates_on_host`): no kernel.
    if m.skips_inferred_layers() && !expected.is_empty() && expected.iter().all(|o| o.value.is_some()) {
        return Ok(expected.into_iter().filter_map(|o| o.value).map(|t| m.host_value(Arc::new(t))).collect());
    }
    let profiler = m.profiler();
    if let Some(p) = profiler {
        p.begin(id)?;
    }
    let outputs = m.run_kernel(id, &values, &facts, &expected)?;
    if let Some(p) = profiler {
        p.end(id)?;
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// Values "on a device" unless made on the host; counts read-backs.
    struct Device {
        net: Network,
        reads: Cell<usize>,
        /// The dims the kernel makes (None: what inference expects).
        wrong_dims: Option<Vec<usize>>,
    }

    #[derive(Clone, Debug)]
    struct V {
        t: Arc<HostTensor>,
        on_host: bool,
    }

    impl Machine for Device {
        type Value = V;
        fn network(&self) -> &Network {
            &self.net
        }
        fn backend_name(&self) -> &str {
            "test"
        }
        fn meta(&self, v: &V) -> (DataType, Vec<usize>) {
            (v.t.dtype(), v.t.shape().to_vec())
        }
        fn host_copy(&self, v: &V) -> Option<Arc<HostTensor>> {
            v.on_host.then(|| v.t.clone())
        }
        fn host_value(&self, t: Arc<HostTensor>) -> V {
            V { t, on_host: true }
        }
        fn to_host(&self, v: &V) -> Result<Arc<HostTensor>, KernelError> {
            self.reads.set(self.reads.get() + 1);
            Ok(v.t.clone())
        }
        fn from_host(&self, t: Arc<HostTensor>) -> Result<V, KernelError> {
            Ok(V { t, on_host: false })
        }
        fn run_kernel(&self, _: LayerId, inputs: &[Option<V>], facts: &[Option<Fact>], expected: &[OutFact]) -> Result<Vec<V>, KernelError> {
            assert!(inputs[1].as_ref().is_some_and(|v| v.on_host), "the shape input was read to the host");
            assert!(facts[1].as_ref().is_some_and(|f| f.value.is_some()), "inference saw the shape's value");
            let dims = self.wrong_dims.clone().unwrap_or_else(|| expected[0].shape.as_fixed().expect("inference resolved the shape"));
            Ok(vec![V { t: Arc::new(HostTensor::zeros(DataType::F32, dims)), on_host: false }])
        }
        fn slice_along(&self, v: &V, _: usize, _: usize) -> Result<V, KernelError> {
            Ok(v.clone())
        }
        fn stack_along(&self, p: &[V], _: usize, _: usize, _: bool, _: DataType, _: &[usize]) -> Result<V, KernelError> {
            Ok(p[0].clone())
        }
    }

    fn expand(wrong_dims: Option<Vec<usize>>) -> (Device, LayerId, Vec<Option<V>>) {
        let mut net = Network::new("expand");
        let x = net.add_input("x", DataType::F32, Shape::fixed(&[1, 3])).unwrap();
        let s = net.add_input("s", DataType::I64, Shape::fixed(&[2])).unwrap();
        let id = net.add_layer("expand", LayerKind::Expand, vec![Some(x), Some(s)]).unwrap();
        let device = |t: HostTensor| Some(V { t: Arc::new(t), on_host: false });
        let inputs = vec![device(HostTensor::zeros(DataType::F32, vec![1, 3])), device(HostTensor::from_i64(vec![2], vec![4, 3]).unwrap())];
        (Device { net, reads: Cell::new(0), wrong_dims }, id, inputs)
    }

    #[test]
    fn the_driver_reads_shape_inputs_back_once_and_checks_the_kernel() {
        let (m, id, inputs) = expand(None);
        let out = m.run_layer(id, &inputs, u64::MAX).expect("runs");
        assert_eq!(out[0].t.shape(), &[4, 3]);
        assert_eq!(m.reads.get(), 1, "only the shape input is read back");
    }

    #[test]
    fn a_kernel_output_inference_does_not_expect_is_an_error() {
        let (m, id, inputs) = expand(Some(vec![4, 4]));
        let e = m.run_layer(id, &inputs, u64::MAX).unwrap_err();
        assert!(matches!(&e, KernelError::Invalid(r) if r.contains("shape inference expects")), "{e:?}");
    }

    #[test]
    fn an_output_over_the_memory_budget_fails_before_the_kernel_runs() {
        let (m, id, inputs) = expand(Some(vec![4, 4]));
        let e = m.run_layer(id, &inputs, 47).unwrap_err();
        let KernelError::OutOfMemory(reason) = &e else { panic!("{e:?}") };
        assert!(reason.contains("f32[4, 3] needs 48 B, over the memory budget of 47 B"), "{reason}");
        assert!(m.run_layer(id, &inputs, 48).is_err_and(|e| matches!(e, KernelError::Invalid(_))), "48 bytes fit: the kernel ran");
    }

    #[test]
    fn kernel_errors_keep_their_kind_at_the_runtime() {
        let at = |e: KernelError| e.at_layer("cuda", "conv1", "Convolution");
        assert!(matches!(at(KernelError::OutOfMemory("4 GiB".into())), BackendError::OutOfMemory { backend, reason } if backend == "cuda" && reason.contains("conv1")));
        assert!(matches!(at(KernelError::DeviceLost("reset".into())), BackendError::Unavailable { .. }));
        assert!(matches!(at(KernelError::Unsupported("f64".into())), BackendError::Unsupported { kind, .. } if kind == "Convolution"));
        assert!(matches!(at("bad axis".into()), BackendError::Execution { layer, reason } if layer == "conv1" && reason == "bad axis"));
    }
}

//! The executable: kiln's shared control-flow interpreter driving device kernels.
//!
//! Values live on the device, except small shape tensors: Shape outputs, small constants and
//! the layers computing only from them run on the host with the cpu backend's kernels (as
//! TensorRT's shape tensors do), so reshapes and slices never wait for the device.

use crate::device::{Gpu, GpuError};
use crate::ops::{self, Ctx, Value};
use kiln::ir::control::{self, ControlFlow, DEFAULT_MAX_TRIP_COUNT};
use kiln::ir::infer::{infer_layer, Fact, OutFact};
use kiln::runtime::interp::{self, Machine};
use kiln::{BackendError, DataType, Executable, HostTensor, LayerId, LayerKind, Network, Shape};
use std::sync::Arc;

/// Constants up to this many elements are also kept on the host, for shape arithmetic.
const HOST_CONSTANT_LIMIT: usize = 4096;

/// Where each layer runs, decided once from the network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Placement {
    /// Constant: served from the values uploaded at prepare time.
    Constant,
    /// Shape: the dims of its input, known without the device.
    Shape,
    /// A cpu kernel on host values.
    Host,
    /// kiln's CUDA kernels.
    Device,
}

/// A network prepared for one CUDA device.
#[derive(Debug)]
pub struct CudaExecutable {
    network: Network,
    plan: ControlFlow,
    frees: Vec<Vec<usize>>,
    placement: Vec<Placement>,
    /// Per layer, the Constant's value (device copy, plus host copy when small).
    constants: Vec<Option<Value>>,
    gpu: Arc<Gpu>,
    tf32: bool,
    /// Per layer, the cuBLASLt heuristic rank its tactic chose (empty: rank 0 everywhere).
    gemm_ranks: Vec<usize>,
}

/// Which layers run on the host: those whose every input is host-available (small
/// constants, Shape outputs, other host layers' outputs).
fn place(network: &Network) -> Vec<Placement> {
    let mut on_host = vec![false; network.tensors().len()];
    let mut placement = Vec::with_capacity(network.layers().len());
    for layer in network.layers() {
        let p = match &layer.kind {
            LayerKind::Constant { weights } => {
                let small = network.weights().get(weights.0).is_some_and(|w| w.len() <= HOST_CONSTANT_LIMIT);
                for t in &layer.outputs {
                    on_host[t.0] = small;
                }
                placement.push(Placement::Constant);
                continue;
            }
            LayerKind::Shape => Placement::Shape,
            k if k.is_control_boundary() => Placement::Device,
            _ if layer.inputs.iter().flatten().all(|t| on_host[t.0]) => Placement::Host,
            _ => Placement::Device,
        };
        if p != Placement::Device {
            for t in &layer.outputs {
                on_host[t.0] = true;
            }
        }
        placement.push(p);
    }
    placement
}

/// Per layer, whether it runs on the host (Constant, Shape and shape arithmetic): such layers
/// need no device kernel.
pub(crate) fn host_layers(network: &Network) -> Vec<bool> {
    place(network).into_iter().map(|p| p != Placement::Device).collect()
}

impl CudaExecutable {
    pub fn new(network: Network, gpu: Arc<Gpu>, tf32: bool) -> Result<CudaExecutable, BackendError> {
        let plan = match network.control_flow() {
            Some(plan) => plan.clone(),
            None => control::lower(&network, DEFAULT_MAX_TRIP_COUNT)
                .map_err(|e| BackendError::Execution { layer: "(control flow)".into(), reason: e.to_string() })?,
        };
        let frees = interp::top_level_frees(&network, &plan.body.steps);
        let placement = place(&network);
        let mut constants = vec![None; network.layers().len()];
        for (i, layer) in network.layers().iter().enumerate() {
            if let LayerKind::Constant { weights } = &layer.kind {
                let w = network.weights().get(weights.0).ok_or_else(|| BackendError::Execution {
                    layer: layer.name.clone(),
                    reason: format!("weights blob #{} is missing", weights.0),
                })?;
                let device = gpu.upload(w).map_err(|e| gpu_error(&layer.name, e))?;
                let host = (w.len() <= HOST_CONSTANT_LIMIT).then(|| w.clone());
                constants[i] = Some(Value { device: Some(device), host });
            }
        }
        Ok(CudaExecutable { network, plan, frees, placement, constants, gpu, tf32, gemm_ranks: Vec::new() })
    }

    /// Runs each matrix product with the cuBLASLt algorithm its tactic chose.
    pub fn with_gemm_ranks(mut self, ranks: Vec<usize>) -> CudaExecutable {
        self.gemm_ranks = ranks;
        self
    }

    /// How many layers run on the host and on the device (for reports and tests).
    pub fn placement_counts(&self) -> (usize, usize) {
        let host = self.placement.iter().filter(|p| matches!(p, Placement::Host | Placement::Shape)).count();
        let device = self.placement.iter().filter(|p| **p == Placement::Device).count();
        (host, device)
    }
}

pub(crate) fn gpu_error(layer: &str, e: GpuError) -> BackendError {
    match e {
        GpuError::OutOfMemory { .. } => BackendError::OutOfMemory { backend: "cuda".into(), reason: format!("layer `{layer}`: {e}") },
        GpuError::Unavailable(reason) => BackendError::Unavailable { backend: "cuda".into(), reason },
        other => BackendError::Execution { layer: layer.into(), reason: other.to_string() },
    }
}

/// One execution: the interpreter's view of the executable.
struct Run<'e> {
    exe: &'e CudaExecutable,
    cx: Ctx<'e>,
}

/// The output must have the inferred type and every inferred fixed dim.
fn check_output(fact: &OutFact, dtype: DataType, shape: &[usize]) -> Result<(), String> {
    let dims_match = fact.shape.rank() == shape.len() && fact.shape.dims().iter().zip(shape).all(|(d, &n)| d.fixed().is_none_or(|f| f == n));
    if dtype != fact.dtype || !dims_match {
        return Err(format!("the kernel produced {dtype}{shape:?} but shape inference expects {}{}", fact.dtype, fact.shape));
    }
    Ok(())
}

impl Run<'_> {
    fn host_layer(&self, kind: &LayerKind, inputs: &[Option<Value>]) -> Result<Vec<Value>, String> {
        let host: Vec<Option<Arc<HostTensor>>> = inputs.iter().map(|v| v.as_ref().map(|v| self.cx.host(v)).transpose()).collect::<Result<_, _>>()?;
        let shapes: Vec<Option<Shape>> = host.iter().map(|x| x.as_ref().map(|x| Shape::fixed(x.shape()))).collect();
        let facts: Vec<Option<Fact>> = host
            .iter()
            .zip(&shapes)
            .map(|(x, s)| x.as_deref().zip(s.as_ref()).map(|(x, s)| Fact { dtype: x.dtype(), shape: s, value: Some(x) }))
            .collect();
        let net = &self.exe.network;
        let expected = infer_layer(kind, &facts, &|w| net.weights_blob(w)).map_err(|e| format!("shape inference: {}", e.rule))?;
        let refs: Vec<Option<&HostTensor>> = host.iter().map(|x| x.as_deref()).collect();
        let outputs = kiln_cpu::run_layer_kernel(kind, &refs, &expected, kiln_cpu::Variant::Primary)?;
        for (fact, out) in expected.iter().zip(&outputs) {
            check_output(fact, out.dtype(), out.shape())?;
        }
        Ok(outputs.into_iter().map(|t| Value::host(Arc::new(t))).collect())
    }

    fn device_layer(&self, kind: &LayerKind, inputs: &[Option<Value>]) -> Result<Vec<Value>, String> {
        let inputs = &ops::shape_inputs_on_host(&self.cx, kind, inputs)?;
        let expected = ops::infer(kind, inputs)?;
        let outputs = ops::run(&self.cx, kind, inputs, &expected)?;
        if outputs.len() != expected.len() {
            return Err(format!("the kernels produced {} outputs, inference expects {}", outputs.len(), expected.len()));
        }
        for (fact, out) in expected.iter().zip(&outputs) {
            check_output(fact, out.dtype, &out.shape)?;
        }
        Ok(outputs.into_iter().map(Value::device).collect())
    }
}

impl Machine for Run<'_> {
    type Value = Value;

    fn network(&self) -> &Network {
        &self.exe.network
    }

    fn meta(&self, value: &Value) -> (DataType, Vec<usize>) {
        value.meta()
    }

    fn run_layer(&self, id: LayerId, inputs: &[Option<Value>]) -> Result<Vec<Value>, String> {
        let layer = self.exe.network.layer(id);
        match self.exe.placement.get(id.0).copied().unwrap_or(Placement::Device) {
            Placement::Constant => Ok(vec![self.exe.constants[id.0].clone().ok_or("the constant was not uploaded")?]),
            Placement::Shape => {
                let (_, shape) = inputs.first().and_then(Option::as_ref).ok_or("Shape has no input")?.meta();
                let dims = HostTensor::from_i64(vec![shape.len()], shape.iter().map(|&d| d as i64).collect()).map_err(|e| e.to_string())?;
                Ok(vec![Value::host(Arc::new(dims))])
            }
            Placement::Host => self.host_layer(&layer.kind, inputs),
            Placement::Device => {
                self.cx.gemm_rank.set(self.exe.gemm_ranks.get(id.0).copied().unwrap_or(0));
                self.device_layer(&layer.kind, inputs)
            }
        }
    }

    fn to_host(&self, value: &Value) -> Result<Arc<HostTensor>, String> {
        self.cx.host(value)
    }

    fn from_host(&self, tensor: Arc<HostTensor>) -> Result<Value, String> {
        Ok(Value::device(self.exe.gpu.upload(&tensor).map_err(|e| e.to_string())?))
    }

    fn slice_along(&self, value: &Value, axis: usize, index: usize) -> Result<Value, String> {
        if let (None, Some(h)) = (&value.device, &value.host) {
            return Ok(Value::host(Arc::new(interp::host_slice_along(h, axis, index)?)));
        }
        let x = self.cx.dev(value)?;
        let mut bounds_shape = x.shape.clone();
        if axis >= bounds_shape.len() || index >= bounds_shape[axis] {
            return Err(format!("slice {index} along axis {axis} of {:?}", x.shape));
        }
        let st = ops::contiguous_strides(&x.shape);
        bounds_shape[axis] = 1;
        let part = ops::movement::gather_strided(&self.cx, &x, &bounds_shape, &st, index as i64 * st[axis])?;
        bounds_shape.remove(axis);
        Ok(Value::device(part.reshaped(bounds_shape)))
    }

    fn stack_along(&self, parts: &[Value], axis: usize, length: usize, reverse: bool, dtype: DataType, slice_shape: &[usize]) -> Result<Value, String> {
        let mut shape = slice_shape.to_vec();
        if axis > shape.len() {
            return Err(format!("stack axis {axis} of rank {}", shape.len()));
        }
        shape.insert(axis, length);
        let out = ops::zeros(&self.cx, self.exe.gpu.empty(dtype, shape.clone()).map_err(|e| e.to_string())?)?;
        let out_strides = ops::contiguous_strides(&shape);
        for (i, part) in parts.iter().enumerate() {
            let at = if reverse { parts.len() - 1 - i } else { i };
            let x = self.cx.dev(part)?;
            let mut view = slice_shape.to_vec();
            view.insert(axis, 1);
            let src_strides = ops::contiguous_strides(&view);
            ops::movement::copy_into(&self.cx, &x, &view, &src_strides, 0, &out, &out_strides, at as i64 * out_strides[axis])?;
        }
        Ok(Value::device(out))
    }
}

impl CudaExecutable {
    /// The device this executable runs on.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// Runs on inputs already on the device and leaves the outputs there (enqueued, not
    /// waited for): what timing with device events measures.
    pub fn execute_device(&self, inputs: &[crate::DeviceTensor]) -> Result<Vec<crate::DeviceTensor>, BackendError> {
        let _one_run_at_a_time = self.gpu.run_lock.lock().unwrap_or_else(|p| p.into_inner());
        let run = Run { exe: self, cx: Ctx::new(&self.gpu, self.tf32) };
        let values = inputs.iter().cloned().map(Value::device).collect();
        let outputs = interp::run_plan(&run, &self.plan, &self.frees, values)?;
        let end = |reason: String| BackendError::Execution { layer: "(network outputs)".into(), reason };
        let device = outputs.iter().map(|v| run.cx.dev(v)).collect::<Result<Vec<_>, _>>().map_err(end)?;
        if !run.cx.pending_checks.borrow().is_empty() {
            run.cx.finish().map_err(end)?;
        }
        Ok(device)
    }
}

impl Executable for CudaExecutable {
    fn execute(&self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>, BackendError> {
        let _one_run_at_a_time = self.gpu.run_lock.lock().unwrap_or_else(|p| p.into_inner());
        let run = Run { exe: self, cx: Ctx::new(&self.gpu, self.tf32) };
        let boundary = |reason: String| BackendError::Execution { layer: "(network inputs)".into(), reason };
        let values = inputs
            .iter()
            .map(|x| run.from_host(Arc::new(x.clone())))
            .collect::<Result<Vec<_>, _>>()
            .map_err(boundary)?;
        let outputs = interp::run_plan(&run, &self.plan, &self.frees, values)?;
        let end = |reason: String| BackendError::Execution { layer: "(network outputs)".into(), reason };
        let host = outputs.iter().map(|v| run.cx.host(v).map(|h| (*h).clone())).collect::<Result<Vec<_>, _>>().map_err(end)?;
        run.cx.finish().map_err(end)?;
        Ok(host)
    }
}

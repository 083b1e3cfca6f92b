//! Execution contexts: per-run state (active profile, input shapes, shape-tensor values,
//! tensor buffers) over a shared prepared engine.

use crate::ir::infer::network_shapes::{dims_with_wildcards, infer_shapes, BoundInput};
use super::stream::{Event, Job, Stream};
use super::{Buffer, PreparedEngine, RunError};
use crate::backend::{Backend, DeviceTimes, LayerTimes};
use crate::device_io::{DeviceInput, DeviceIo, DeviceOutput, DevicePointer, OutputAllocator};
use crate::engine::Engine;
use crate::ir::network::{Network, TensorDesc, TensorId};
use crate::ir::shape::{Dim, Shape};
use crate::ir::tensor::HostTensor;
use crate::memory_plan::shape_tensor;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

/// One line of execution over a prepared engine. `Send`: move it to the thread that runs
/// it; make one context per thread to run an engine concurrently.
pub struct ExecutionContext {
    prepared: Arc<PreparedEngine>,
    profile: usize,
    /// Per network input (in input order): the dims set, or the declared ones when fixed.
    shapes: Vec<Option<Vec<usize>>>,
    /// Per network input: the values of a shape tensor.
    shape_values: Vec<Option<Vec<i64>>>,
    addresses: HashMap<String, Buffer>,
    /// Tensors bound to device memory instead (a name is in one map or the other), or, for
    /// outputs, to an allocator.
    device_addresses: HashMap<String, DeviceOutput>,
    /// The output dims of the latest device execution, in network-output order.
    device_output_dims: Mutex<Vec<Vec<usize>>>,
    /// Whether executions measure their device phases, and the latest measurement.
    device_timing: bool,
    device_times: Arc<Mutex<Option<DeviceTimes>>>,
    /// The last shape inference and the settings it was made for: enqueues with unchanged
    /// shapes skip it (at batch 1 it costs as much as a replayed BERT-base on the device).
    inferred: Mutex<Option<InferredShapes>>,
    /// The inputs the last enqueue read from their buffers, overwritten in place by the next
    /// one of the same types and shapes: a fresh allocation of a large input page-faults on
    /// every read (ResNet-50's 77 MB batch of 128 took tens of milliseconds).
    staged_inputs: Arc<Mutex<Vec<HostTensor>>>,
}

/// A shape inference and the settings it was made for.
type InferredShapes = (ShapeSettings, Vec<BoundInput>, Vec<Shape>);

/// What shape inference depends on: the profile, input dims and shape-tensor values.
type ShapeSettings = (usize, Vec<Option<Vec<usize>>>, Vec<Option<Vec<i64>>>);

impl std::fmt::Debug for ExecutionContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutionContext")
            .field("backend", &self.engine().backend())
            .field("profile", &self.profile)
            .field("shapes", &self.shapes)
            .finish()
    }
}

impl ExecutionContext {
    /// Prepares an engine on a backend and opens one context on it (see [`PreparedEngine`]
    /// for several contexts sharing one engine).
    pub fn new(engine: Engine, backend: &dyn Backend) -> Result<ExecutionContext, RunError> {
        Ok(PreparedEngine::new(engine, backend)?.create_execution_context())
    }

    pub(crate) fn from_prepared(prepared: Arc<PreparedEngine>) -> ExecutionContext {
        let net = prepared.engine().network();
        let shapes = net.inputs().iter().map(|&t| net.tensor(t).shape.as_fixed()).collect();
        let shape_values = vec![None; net.inputs().len()];
        ExecutionContext {
            prepared,
            profile: 0,
            shapes,
            shape_values,
            addresses: HashMap::new(),
            device_addresses: HashMap::new(),
            device_output_dims: Mutex::default(),
            device_timing: false,
            device_times: Arc::default(),
            inferred: Mutex::default(),
            staged_inputs: Arc::default(),
        }
    }

    pub fn engine(&self) -> &Engine {
        self.prepared.engine()
    }

    pub fn prepared_engine(&self) -> &Arc<PreparedEngine> {
        &self.prepared
    }

    /// Makes later executions measure their phases on the device (host-to-device, compute,
    /// device-to-host), where the backend can: see [`ExecutionContext::last_device_times`].
    pub fn set_device_timing(&mut self, enabled: bool) {
        self.device_timing = enabled;
    }

    /// The device times of the latest finished execution with device timing on (None where
    /// the backend measures none).
    pub fn last_device_times(&self) -> Option<DeviceTimes> {
        *self.device_times.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Allows or forbids the backend to replay captured device graphs (CUDA graphs) for this
    /// engine; returns whether the backend captures graphs at all. Shared by every context of
    /// the prepared engine.
    pub fn set_graph_capture(&self, enabled: bool) -> bool {
        self.prepared.executable().set_graph_capture(enabled)
    }

    /// How the latest execution of this engine ran, where the backend says (e.g. "graph replay").
    pub fn execution_mode(&self) -> Option<String> {
        self.prepared.executable().execution_mode()
    }

    /// Runs the executable, timing it on the device when asked.
    fn execute(prepared: &PreparedEngine, timing: Option<&Mutex<Option<DeviceTimes>>>, inputs: &[HostTensor]) -> Result<Vec<HostTensor>, RunError> {
        let Some(slot) = timing else { return Ok(prepared.executable().execute(inputs)?) };
        let (outputs, times) = prepared.executable().execute_timed(inputs)?;
        *slot.lock().unwrap_or_else(PoisonError::into_inner) = times;
        Ok(outputs)
    }

    /// Device differences that may cost performance (seed §6.7).
    pub fn warnings(&self) -> &[String] {
        self.prepared.warnings()
    }

    fn network(&self) -> &Network {
        self.prepared.engine().network()
    }

    pub fn optimization_profile(&self) -> usize {
        self.profile
    }

    /// Makes profile `index` active. Dynamic input shapes and shape-tensor values set
    /// before are cleared: they must be set again within the new profile's bounds.
    pub fn set_optimization_profile(&mut self, index: usize) -> Result<(), RunError> {
        let count = self.engine().num_optimization_profiles();
        if index >= count.max(1) {
            return Err(RunError::NoSuchProfile { index, count });
        }
        self.profile = index;
        let net = self.prepared.engine().network();
        self.shapes = net.inputs().iter().map(|&t| net.tensor(t).shape.as_fixed()).collect();
        self.shape_values.iter_mut().for_each(|v| *v = None);
        Ok(())
    }

    fn input_index(&self, name: &str) -> Result<usize, RunError> {
        let net = self.network();
        net.inputs().iter().position(|&t| net.tensor(t).name == name).ok_or_else(|| RunError::UnknownInput {
            name: name.to_string(),
            expected: net.inputs().iter().map(|&t| net.tensor(t).name.as_str()).collect::<Vec<_>>().join(", "),
        })
    }

    /// Sets the dims of input `name` for the next runs. They must have the declared rank,
    /// equal the declared fixed dims and lie within the active profile's min and max.
    pub fn set_input_shape(&mut self, name: &str, dims: &[usize]) -> Result<(), RunError> {
        let index = self.input_index(name)?;
        self.check_input_dims(index, dims)?;
        self.shapes[index] = Some(dims.to_vec());
        Ok(())
    }

    /// Sets the values of shape-tensor input `name` (one the profiles give value ranges
    /// for); they must lie within the active profile's min and max. Shape tensors take
    /// their values from here, not from a bound buffer.
    pub fn set_shape_tensor_values(&mut self, name: &str, values: &[i64]) -> Result<(), RunError> {
        let index = self.input_index(name)?;
        self.check_shape_values(index, values)?;
        self.shape_values[index] = Some(values.to_vec());
        Ok(())
    }

    /// The input shapes set so far, by input name.
    pub fn input_shapes(&self) -> HashMap<String, Vec<usize>> {
        let net = self.network();
        net.inputs()
            .iter()
            .zip(&self.shapes)
            .filter_map(|(&t, shape)| shape.clone().map(|s| (net.tensor(t).name.clone(), s)))
            .collect()
    }

    /// Whether every input's shape (and every shape tensor's values) is known.
    pub fn all_input_shapes_specified(&self) -> bool {
        self.shapes.iter().all(Option::is_some)
            && (0..self.shapes.len()).all(|i| !self.is_shape_tensor(i) || self.shape_values[i].is_some())
    }

    fn is_shape_tensor(&self, index: usize) -> bool {
        let net = self.network();
        let name = &net.tensor(net.inputs()[index]).name;
        self.engine().profiles().first().is_some_and(|p| p.shape_values(name).is_some())
    }

    fn check_input_dims(&self, index: usize, dims: &[usize]) -> Result<(), RunError> {
        let net = self.network();
        let desc = net.tensor(net.inputs()[index]);
        let shape_error = |reason: String| RunError::InputShape {
            name: desc.name.clone(),
            expected: desc.shape.text(),
            actual: dims.to_vec(),
            reason,
        };
        if dims.len() != desc.shape.rank() {
            return Err(shape_error(format!("rank {} instead of {}", dims.len(), desc.shape.rank())));
        }
        for (axis, (d, &n)) in desc.shape.dims().iter().zip(dims).enumerate() {
            if let Dim::Fixed(f) = d {
                if *f != n {
                    return Err(shape_error(format!("axis {axis} must be {f}")));
                }
            }
        }
        if let Some(range) = self.engine().profiles().get(self.profile).and_then(|p| p.dimensions(&desc.name)) {
            for (axis, &n) in dims.iter().enumerate() {
                let (min, max) = (range.min[axis], range.max[axis]);
                if n < min || n > max {
                    return Err(RunError::ShapeOutOfProfile {
                        input: desc.name.clone(),
                        axis,
                        value: n,
                        min,
                        max,
                        profile: self.profile,
                    });
                }
            }
        }
        Ok(())
    }

    fn check_shape_values(&self, index: usize, values: &[i64]) -> Result<(), RunError> {
        let net = self.network();
        let name = net.tensor(net.inputs()[index]).name.clone();
        let Some(range) = self.engine().profiles().get(self.profile).and_then(|p| p.shape_values(&name)) else {
            return Err(RunError::NotAShapeTensor { input: name });
        };
        if values.len() != range.min.len() {
            return Err(RunError::ShapeValueCount { input: name, expected: range.min.len(), actual: values.len() });
        }
        for (i, &v) in values.iter().enumerate() {
            let (min, max) = (range.min[i], range.max[i]);
            if v < min || v > max {
                return Err(RunError::ShapeValueOutOfProfile {
                    input: name,
                    index: i,
                    value: v,
                    min,
                    max,
                    profile: self.profile,
                });
            }
        }
        Ok(())
    }

    /// Inputs bound so far, for inference; `Err` names the first input not yet set.
    fn bound_inputs(&self) -> Result<Vec<BoundInput>, RunError> {
        let net = self.network();
        let mut bound = Vec::with_capacity(self.shapes.len());
        for (i, &t) in net.inputs().iter().enumerate() {
            let desc = net.tensor(t);
            let dims = self.shapes[i].clone().ok_or_else(|| RunError::ShapeNotSet { input: desc.name.clone() })?;
            let value = match (self.is_shape_tensor(i), &self.shape_values[i]) {
                (false, _) => None,
                (true, None) => return Err(RunError::ShapeValuesNotSet { input: desc.name.clone() }),
                (true, Some(v)) => {
                    Some(shape_tensor(desc.dtype, &dims, v).ok_or_else(|| RunError::ShapeValueCount {
                        input: desc.name.clone(),
                        expected: dims.iter().product(),
                        actual: v.len(),
                    })?)
                }
            };
            bound.push(BoundInput { tensor: t, dims, value });
        }
        check_named_dims(net, &bound)?;
        Ok(bound)
    }

    /// Every tensor's shape for the inputs set (all must be set).
    fn inferred_shapes(&self) -> Result<(Vec<BoundInput>, Vec<Shape>), RunError> {
        let mut cache = self.inferred.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((settings, bound, shapes)) = cache.as_ref() {
            if settings.0 == self.profile && settings.1 == self.shapes && settings.2 == self.shape_values {
                return Ok((bound.clone(), shapes.clone()));
            }
        }
        let bound = self.bound_inputs()?;
        let shapes = infer_shapes(self.network(), &bound)
            .map_err(|f| RunError::ShapeInference { layer: f.layer, rule: f.rule })?;
        let settings = (self.profile, self.shapes.clone(), self.shape_values.clone());
        *cache = Some((settings, bound.clone(), shapes.clone()));
        Ok((bound, shapes))
    }

    /// The dims of an input or output, TensorRT style: -1 for a dim not known yet. Output
    /// dims come from shape inference once every input shape is set (a dim that depends on
    /// data stays -1).
    pub fn tensor_shape(&self, name: &str) -> Result<Vec<i64>, RunError> {
        let t = self.io_tensor(name)?;
        let net = self.network();
        if let Some(i) = net.inputs().iter().position(|&x| x == t) {
            return Ok(match &self.shapes[i] {
                Some(d) => d.iter().map(|&n| n as i64).collect(),
                None => dims_with_wildcards(&net.tensor(t).shape),
            });
        }
        if !self.all_input_shapes_specified() {
            return Ok(dims_with_wildcards(&net.tensor(t).shape));
        }
        let (_, shapes) = self.inferred_shapes()?;
        Ok(dims_with_wildcards(&shapes[t.0]))
    }

    fn io_tensor(&self, name: &str) -> Result<TensorId, RunError> {
        let net = self.network();
        net.inputs().iter().chain(net.outputs()).copied().find(|&t| net.tensor(t).name == name).ok_or_else(|| {
            RunError::UnknownTensor {
                name: name.to_string(),
                expected: net
                    .inputs()
                    .iter()
                    .chain(net.outputs())
                    .map(|&t| net.tensor(t).name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            }
        })
    }

    /// Binds the buffer an input is read from or an output written to.
    pub fn set_tensor_address(&mut self, name: &str, buffer: Buffer) -> Result<(), RunError> {
        self.io_tensor(name)?;
        self.device_addresses.remove(name);
        self.addresses.insert(name.to_string(), buffer);
        Ok(())
    }

    /// Binds device memory an input is read from or an output written to, for
    /// [`ExecutionContext::enqueue_on_device`] (see [`crate::device_io`]).
    pub fn set_device_tensor_address(&mut self, name: &str, memory: DevicePointer) -> Result<(), RunError> {
        self.io_tensor(name)?;
        self.addresses.remove(name);
        self.device_addresses.insert(name.to_string(), DeviceOutput::Memory(memory));
        Ok(())
    }

    /// Makes output `name` of device executions take its memory from `allocator`, asked once
    /// its dims are known (for outputs whose size depends on the data).
    pub fn set_output_allocator(&mut self, name: &str, allocator: Arc<dyn OutputAllocator>) -> Result<(), RunError> {
        let t = self.io_tensor(name)?;
        if self.network().inputs().contains(&t) {
            return Err(RunError::NotAnOutput { name: name.to_string() });
        }
        self.addresses.remove(name);
        self.device_addresses.insert(name.to_string(), DeviceOutput::Allocator(allocator, name.to_string()));
        Ok(())
    }

    /// The device memory bound to `name`, if any (not an allocator's).
    pub fn device_tensor_address(&self, name: &str) -> Option<DevicePointer> {
        match self.device_addresses.get(name) {
            Some(DeviceOutput::Memory(p)) => Some(*p),
            _ => None,
        }
    }

    /// Runs the engine on the device memory bound to every input and output (shape tensors
    /// take their values from [`ExecutionContext::set_shape_tensor_values`]), ordered on the
    /// caller's `stream` (see [`DeviceIo::stream`]): no host copy of any tensor. Each output's
    /// memory must hold its elements; their dims are [`ExecutionContext::device_output_dims`]
    /// afterwards. With device timing on, the phases are measured (the call then waits for
    /// the execution). Backends that run on host memory refuse.
    pub fn enqueue_on_device(&self, stream: Option<u64>) -> Result<(), RunError> {
        self.enqueue_on_device_with(stream, None)
    }

    /// [`ExecutionContext::enqueue_on_device`], recording the caller's `input_consumed` event
    /// (a `CUevent` on cuda) once the inputs have been read.
    pub fn enqueue_on_device_with(&self, stream: Option<u64>, input_consumed: Option<u64>) -> Result<(), RunError> {
        let (bound, shapes) = self.inferred_shapes()?;
        let net = self.network();
        let mut inputs = Vec::with_capacity(bound.len());
        for b in bound {
            let desc = net.tensor(b.tensor);
            if let Some(values) = b.value {
                inputs.push(DeviceInput::Host(values));
                continue;
            }
            let Some(memory) = self.device_tensor_address(&desc.name) else {
                return Err(RunError::DeviceAddressNotSet { tensor: desc.name.clone() });
            };
            check_room(desc, element_size(desc)?, b.dims.iter().product(), memory.bytes)?;
            inputs.push(DeviceInput::Device { memory, dtype: desc.dtype, dims: b.dims });
        }
        let mut outputs = Vec::with_capacity(net.outputs().len());
        for &t in net.outputs() {
            let desc = net.tensor(t);
            let output = self.device_addresses.get(&desc.name).cloned();
            let output = output.ok_or_else(|| RunError::DeviceAddressNotSet { tensor: desc.name.clone() })?;
            if let (DeviceOutput::Memory(memory), Some(volume)) = (&output, shapes[t.0].volume()) {
                check_room(desc, element_size(desc)?, volume, memory.bytes)?;
            }
            outputs.push(output);
        }
        let io = DeviceIo { inputs: &inputs, outputs: &outputs, stream, input_consumed };
        let (dims, times) = self.prepared.executable().execute_on_device(&io, self.device_timing).map_err(|e| self.prepared.named(e))?;
        if self.device_timing {
            *self.device_times.lock().unwrap_or_else(PoisonError::into_inner) = times;
        }
        *self.device_output_dims.lock().unwrap_or_else(PoisonError::into_inner) = dims;
        Ok(())
    }

    /// The dims of output `name` written by the latest device execution.
    pub fn device_output_dims(&self, name: &str) -> Option<Vec<usize>> {
        let net = self.network();
        let index = net.outputs().iter().position(|&t| net.tensor(t).name == name)?;
        self.device_output_dims.lock().unwrap_or_else(PoisonError::into_inner).get(index).cloned()
    }

    /// The address of the buffer bound to `name`, if any.
    pub fn tensor_address(&self, name: &str) -> Option<u64> {
        self.addresses.get(name).map(Buffer::address)
    }

    /// Runs the engine asynchronously on `stream` with the shapes and buffers set: inputs
    /// are read from their buffers, outputs written to theirs. `input_consumed` (seed
    /// §6.11) is reset now and signalled once the inputs have been read; from then on the
    /// input buffers may be refilled. Errors found now (shapes, buffers, sizes) are
    /// returned; errors while running come from [`Stream::synchronize`].
    pub fn enqueue(&self, stream: &Stream, input_consumed: Option<&Event>) -> Result<(), RunError> {
        let (bound, shapes) = self.inferred_shapes()?;
        let net = self.network();
        let mut inputs: Vec<(BoundInput, Option<Buffer>)> = Vec::with_capacity(bound.len());
        for b in bound {
            let desc = net.tensor(b.tensor);
            if b.value.is_some() {
                inputs.push((b, None));
                continue;
            }
            let buffer = self.buffer(&desc.name)?;
            check_room(desc, element_size(desc)?, b.dims.iter().product(), buffer.len())?;
            inputs.push((b, Some(buffer)));
        }
        let mut outputs = Vec::with_capacity(net.outputs().len());
        for &t in net.outputs() {
            let desc = net.tensor(t);
            let buffer = self.buffer(&desc.name)?;
            let size = element_size(desc)?;
            if let Some(volume) = shapes[t.0].volume() {
                check_room(desc, size, volume, buffer.len())?;
            }
            outputs.push((desc.name.clone(), buffer));
        }
        let prepared = Arc::clone(&self.prepared);
        let timing = self.device_timing.then(|| Arc::clone(&self.device_times));
        let event = input_consumed.cloned();
        let staged = Arc::clone(&self.staged_inputs);
        if let Some(e) = &event {
            e.reset();
        }
        let job: Job = Box::new(move || {
            let mut staged = staged.lock().unwrap_or_else(PoisonError::into_inner);
            let read = read_inputs(prepared.engine().network(), inputs, &mut staged);
            if let Some(e) = &event {
                e.signal();
            }
            read?;
            let values = Self::execute(&prepared, timing.as_deref(), &staged)?;
            drop(staged);
            for (value, (name, buffer)) in values.iter().zip(&outputs) {
                if !buffer.write_tensor(value) {
                    return Err(RunError::BufferTooSmall {
                        tensor: name.clone(),
                        needed: value.size_bytes(),
                        available: buffer.len(),
                    });
                }
            }
            Ok(())
        });
        stream.submit(job)
    }

    fn buffer(&self, name: &str) -> Result<Buffer, RunError> {
        self.addresses.get(name).cloned().ok_or_else(|| RunError::AddressNotSet { tensor: name.to_string() })
    }

    /// Runs the engine once, synchronously, on host tensors. Every network input must be
    /// given by name, with the declared type, rank and fixed dims, within the active
    /// profile; dims with the same name must agree. Returns outputs by name. The context's
    /// set shapes and buffers are neither used nor changed. An input or output in a
    /// vectorized format (see [`crate::ir::format`]) is passed in its physical shape: a CHW4
    /// input of logical `N×3×H×W` is `N×1×H×W×4`, padding zeroed.
    pub fn run(&self, inputs: &HashMap<String, HostTensor>) -> Result<BTreeMap<String, HostTensor>, RunError> {
        let ordered = self.checked_inputs(inputs)?;
        let outputs = Self::execute(&self.prepared, self.device_timing.then_some(&*self.device_times), &ordered)?;
        let net = self.network();
        Ok(net.outputs().iter().map(|&t| net.tensor(t).name.clone()).zip(outputs).collect())
    }

    /// One profile run on `inputs` (as [`ExecutionContext::run`] takes them): the time of
    /// every layer, measured as [`crate::runtime::layer_profile`] says; None where the
    /// backend times no layers.
    pub fn profile_layers(&self, inputs: &HashMap<String, HostTensor>) -> Result<Option<LayerTimes>, RunError> {
        let ordered = self.checked_inputs(inputs)?;
        Ok(self.prepared.executable().execute_profiled(&ordered)?.1)
    }

    /// `inputs` checked against the engine and the profile, in network-input order.
    fn checked_inputs(&self, inputs: &HashMap<String, HostTensor>) -> Result<Vec<HostTensor>, RunError> {
        let net = self.network();
        let names: Vec<&str> = net.inputs().iter().map(|&t| net.tensor(t).name.as_str()).collect();
        if let Some(extra) = inputs.keys().find(|k| !names.contains(&k.as_str())) {
            return Err(RunError::UnknownInput { name: extra.clone(), expected: names.join(", ") });
        }
        let mut ordered = Vec::with_capacity(names.len());
        let mut bound = Vec::with_capacity(names.len());
        for (i, &t) in net.inputs().iter().enumerate() {
            let desc = net.tensor(t);
            let value = inputs.get(&desc.name).ok_or_else(|| RunError::MissingInput(desc.name.clone()))?;
            if value.dtype() != desc.dtype {
                return Err(RunError::InputType {
                    name: desc.name.clone(),
                    expected: desc.dtype.to_string(),
                    actual: value.dtype().to_string(),
                });
            }
            self.check_input_dims(i, value.shape())?;
            if self.is_shape_tensor(i) {
                let values = value.to_i64_vec().unwrap_or_default();
                self.check_shape_values(i, &values)?;
            }
            bound.push(BoundInput { tensor: t, dims: value.shape().to_vec(), value: None });
            ordered.push(value.clone());
        }
        check_named_dims(net, &bound)?;
        Ok(ordered)
    }
}

/// Bytes per element of `desc` in a buffer or device memory (strings have no fixed size).
fn element_size(desc: &TensorDesc) -> Result<usize, RunError> {
    desc.dtype.size_bytes().ok_or_else(|| RunError::StringInBuffer { tensor: desc.name.clone() })
}

/// Refuses `available` bytes of memory (a buffer or device memory) for `volume` elements of
/// `size` bytes of `desc`.
fn check_room(desc: &TensorDesc, size: usize, volume: usize, available: usize) -> Result<(), RunError> {
    let needed = volume * size;
    if available < needed {
        return Err(RunError::BufferTooSmall { tensor: desc.name.clone(), needed, available });
    }
    Ok(())
}

/// Inputs that share a named dim must agree on its length.
fn check_named_dims(net: &Network, bound: &[BoundInput]) -> Result<(), RunError> {
    let mut named: HashMap<&str, (usize, &str)> = HashMap::new();
    for b in bound {
        let desc = net.tensor(b.tensor);
        for (d, &n) in desc.shape.dims().iter().zip(&b.dims) {
            if let Dim::Named(sym) = d {
                if let Some((prev, who)) = named.insert(sym.as_str(), (n, desc.name.as_str())) {
                    if prev != n {
                        return Err(RunError::InputShape {
                            name: desc.name.clone(),
                            expected: desc.shape.text(),
                            actual: b.dims.clone(),
                            reason: format!("dim `{sym}` is {n} here but {prev} in input `{who}`"),
                        });
                    }
                }
            }
        }
    }
    Ok(())
}

/// The input values for one run: read from their buffers, or the shape-tensor values.
/// Reads the bound inputs into `staged` (one tensor per input, in order): a buffer's bytes are
/// copied into the tensor staged last time when its type and shape match, else read afresh.
fn read_inputs(net: &Network, inputs: Vec<(BoundInput, Option<Buffer>)>, staged: &mut Vec<HostTensor>) -> Result<(), RunError> {
    staged.truncate(inputs.len());
    for (i, (b, buffer)) in inputs.into_iter().enumerate() {
        let desc = net.tensor(b.tensor);
        let value = match (b.value, buffer) {
            (Some(v), _) => v,
            (None, Some(buffer)) => {
                let reusable = staged.get_mut(i).filter(|t| t.dtype() == desc.dtype && t.shape() == b.dims);
                if reusable.is_some_and(|t| buffer.read_into(t)) {
                    continue;
                }
                buffer.read_tensor(desc.dtype, &b.dims).ok_or_else(|| RunError::BufferContents {
                    tensor: desc.name.clone(),
                    dtype: desc.dtype.to_string(),
                })?
            }
            (None, None) => return Err(RunError::AddressNotSet { tensor: desc.name.clone() }),
        };
        match staged.get_mut(i) {
            Some(slot) => *slot = value,
            None => staged.push(value),
        }
    }
    Ok(())
}

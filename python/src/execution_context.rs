//! `ExecutionContext`, as TensorRT's: its own profile, input shapes and bound tensors. A tensor is
//! bound to a numpy array, which `execute()` reads (inputs) or writes (outputs), or to device
//! memory: a CUDA tensor (DLPack, CUDA array interface, `kiln.DeviceArray`) or a raw address,
//! which `execute_async_v3(stream)` reads and writes in place, ordered on the caller's stream.

use crate::device_run::{is_shape_tensor, mixed_inputs};
use crate::device_tensor::{device_tensor, host_array, DeviceTensor};
use crate::{convert, streams, error};
use kiln::{DataType, DevicePointer, HostTensor, RunError};
use numpy::PyUntypedArrayMethods;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

/// One execution context: its own profile, input shapes and bound tensors. Contexts of one
/// engine run at once from several threads.
#[pyclass(module = "kiln")]
pub(crate) struct ExecutionContext {
    context: Mutex<kiln::ExecutionContext>,
    bound: BTreeMap<String, Binding>,
    /// Inputs given a shape by `set_input_shape` since the profile was chosen: a device tensor
    /// bound to any other dynamic input gives its own dims.
    shapes_set: BTreeSet<String>,
}

enum Binding {
    /// A numpy array: `execute()` reads an input's and writes an output's.
    Host(Py<PyAny>),
    /// CUDA memory of known size, kept alive while bound.
    Device(DeviceTensor),
    /// A raw device address (TensorRT's int pointer): sized from the tensor's dims and dtype
    /// when executing.
    Address(u64),
}

/// Device memory for one tensor of a device execution.
enum Memory {
    Sized(DevicePointer),
    Address(u64, DataType),
}

/// What a device execution sets on the context, gathered from the bindings while attached to
/// Python and applied under the context's lock while detached.
struct DevicePlan {
    /// Input dims taken from bound device tensors.
    shapes: Vec<(String, Vec<usize>)>,
    /// Shape tensors' dims and values, from their host arrays.
    shape_values: Vec<(String, Vec<usize>, Vec<i64>)>,
    memory: Vec<(String, Memory)>,
    /// The CUDA device, where a bound tensor says (else the first).
    device: usize,
}

impl ExecutionContext {
    pub(crate) fn new(prepared: &Arc<kiln::PreparedEngine>) -> ExecutionContext {
        ExecutionContext { context: Mutex::new(prepared.create_execution_context()), bound: BTreeMap::new(), shapes_set: BTreeSet::new() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, kiln::ExecutionContext> {
        self.context.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Gathers the device memory of every input and output; an error names a tensor bound to
    /// host memory or to nothing.
    fn device_plan(&self, py: Python<'_>) -> PyResult<DevicePlan> {
        let context = self.lock();
        let engine = context.engine();
        let net = engine.network();
        let profile = context.optimization_profile();
        let mut plan = DevicePlan { shapes: Vec::new(), shape_values: Vec::new(), memory: Vec::new(), device: 0 };
        let mut device = None;
        for (index, &t) in net.inputs().iter().chain(net.outputs()).enumerate() {
            let desc = net.tensor(t);
            let name = desc.name.clone();
            let is_input = index < net.inputs().len();
            let memory = match self.bound.get(&name) {
                None => return Err(not_bound(&name)),
                Some(Binding::Device(tensor)) => {
                    let dynamic = desc.shape.as_fixed().is_none();
                    if is_input && dynamic && !self.shapes_set.contains(&name) {
                        plan.shapes.push((name.clone(), tensor.dims.clone()));
                    }
                    device = device.or(tensor.device);
                    Memory::Sized(tensor.pointer())
                }
                Some(Binding::Address(address)) => Memory::Address(*address, desc.dtype),
                Some(Binding::Host(array)) if is_input && is_shape_tensor(engine, profile, &name) => {
                    let values = convert::to_tensor(&name, array.bind(py)).map_err(error)?;
                    let integers = values.to_i64_vec().ok_or_else(|| error(format!("shape tensor `{name}` must hold integers")))?;
                    plan.shape_values.push((name, values.shape().to_vec(), integers));
                    continue;
                }
                Some(Binding::Host(_)) => return Err(mixed_inputs(&name)),
            };
            plan.memory.push((name, memory));
        }
        plan.device = device.unwrap_or(0);
        Ok(plan)
    }

    /// Runs on the bound device memory, ordered on `stream` (see `execute_async_v3`).
    fn enqueue(&self, py: Python<'_>, stream: u64) -> PyResult<DevicePlan> {
        let plan = self.device_plan(py)?;
        py.detach(|| {
            let mut context = self.lock();
            apply(&mut context, &plan)?;
            context.enqueue_on_device(Some(stream)).map_err(|e| e.to_string())
        })
        .map_err(error)?;
        Ok(plan)
    }
}

/// Sets the plan's shapes and memory on the context (raw addresses sized from the dims now).
fn apply(context: &mut kiln::ExecutionContext, plan: &DevicePlan) -> Result<(), String> {
    for (name, dims) in &plan.shapes {
        context.set_input_shape(name, dims).map_err(|e| e.to_string())?;
    }
    for (name, dims, values) in &plan.shape_values {
        context.set_input_shape(name, dims).map_err(|e| e.to_string())?;
        context.set_shape_tensor_values(name, values).map_err(|e| e.to_string())?;
    }
    for (name, memory) in &plan.memory {
        let pointer = match *memory {
            Memory::Sized(pointer) => pointer,
            Memory::Address(address, dtype) => DevicePointer { address, bytes: size_from_dims(context, name, dtype)? },
        };
        context.set_device_tensor_address(name, pointer).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The bytes of tensor `name` for the shapes set, for memory bound by a raw address.
fn size_from_dims(context: &kiln::ExecutionContext, name: &str, dtype: DataType) -> Result<usize, String> {
    let dims = context.tensor_shape(name).map_err(|e| e.to_string())?;
    let element = dtype.size_bytes().ok_or_else(|| RunError::StringInBuffer { tensor: name.to_string() }.to_string())?;
    if let Ok(dims) = dims.iter().map(|&d| usize::try_from(d)).collect::<Result<Vec<_>, _>>() {
        return Ok(dims.iter().product::<usize>() * element);
    }
    let net = context.engine().network();
    let is_input = net.inputs().iter().any(|&t| net.tensor(t).name == name);
    Err(if is_input || !context.all_input_shapes_specified() {
        format!("`{name}` is bound to a raw device address, sized from its dims, which are {dims:?}: set every input's shape first (set_input_shape)")
    } else {
        format!(
            "output `{name}` has dims {dims:?} known only after running: a raw device address has no size to check them against; bind a CUDA tensor large enough (e.g. a PyTorch tensor) instead"
        )
    })
}

fn not_bound(name: &str) -> PyErr {
    error(format!(
        "no device memory is bound to `{name}`: a device execution reads and writes every input and output in device memory; bind a CUDA tensor or a device address with set_tensor_address"
    ))
}

#[pymethods]
impl ExecutionContext {
    /// Makes profile `index` active (dynamic input shapes must be set again).
    fn set_optimization_profile(&mut self, index: usize) -> PyResult<()> {
        self.lock().set_optimization_profile(index).map_err(error)?;
        self.shapes_set.clear();
        Ok(())
    }

    #[getter]
    fn active_optimization_profile(&self) -> usize {
        self.lock().optimization_profile()
    }

    fn set_input_shape(&mut self, name: &str, shape: Vec<usize>) -> PyResult<()> {
        self.lock().set_input_shape(name, &shape).map_err(error)?;
        self.shapes_set.insert(name.to_string());
        Ok(())
    }

    /// Dims of `name` for the shapes set (-1 where not known yet). An output whose dims depend on
    /// the input values has those of the latest device execution.
    fn get_tensor_shape(&self, name: &str) -> PyResult<Vec<i64>> {
        let context = self.lock();
        let dims = context.tensor_shape(name).map_err(error)?;
        match context.device_output_dims(name) {
            Some(ran) if dims.contains(&-1) => Ok(ran.into_iter().map(|d| d as i64).collect()),
            _ => Ok(dims),
        }
    }

    /// Binds input or output `name` to `tensor`: a numpy array (for `execute()`), a CUDA tensor
    /// (DLPack or `__cuda_array_interface__`: a PyTorch or CuPy tensor, a `kiln.DeviceArray`;
    /// kept alive while bound) or a device address as an int (TensorRT's pointer; its size
    /// comes from the tensor's dims and dtype when executing). Device tensors must be
    /// contiguous and of the tensor's dtype.
    fn set_tensor_address(&mut self, name: &str, tensor: &Bound<'_, PyAny>) -> PyResult<()> {
        let (dtype, is_input) = {
            let context = self.lock();
            let net = context.engine().network();
            let find = |ts: &[kiln::TensorId]| ts.iter().find(|&&t| net.tensor(t).name == name).map(|&t| net.tensor(t).dtype);
            match (find(net.inputs()), find(net.outputs())) {
                (Some(dtype), _) => (dtype, true),
                (None, Some(dtype)) => (dtype, false),
                _ => return Err(error(RunError::UnknownTensor { name: name.into(), expected: crate::io_names(net).join(", ") })),
            }
        };
        let binding = if tensor.cast::<numpy::PyUntypedArray>().is_ok() {
            Binding::Host(tensor.clone().unbind())
        } else if tensor.cast::<PyInt>().is_ok() && !tensor.is_instance_of::<PyBool>() {
            let address: u64 = tensor.extract().map_err(|_| error(format!("`{name}`: a device address is a non-negative int")))?;
            if address == 0 {
                return Err(error(format!("`{name}`: the device address is 0 (NULL)")));
            }
            Binding::Address(address)
        } else if let Some(device) = device_tensor(name, tensor, None).map_err(error)? {
            device.check_dtype(name, dtype).map_err(error)?;
            if !is_input && device.readonly {
                return Err(error(format!("output `{name}` is bound to read-only device memory")));
            }
            Binding::Device(device)
        } else if let Some(array) = host_array(name, tensor).map_err(error)? {
            Binding::Host(array.unbind())
        } else {
            let kind = tensor.get_type().name().map(|n| n.to_string()).unwrap_or_default();
            return Err(error(format!(
                "`{name}` must be a numpy array, a CUDA tensor (DLPack or __cuda_array_interface__: a PyTorch or CuPy tensor, a kiln.DeviceArray) or a device address (int); got a {kind}"
            )));
        };
        self.bound.insert(name.to_string(), binding);
        Ok(())
    }

    /// Runs on the device memory bound to every input and output (TensorRT's
    /// `execute_async_v3`), ordered on `stream_handle` (a `CUstream` as an int, e.g.
    /// `torch.cuda.current_stream().cuda_stream`; 0 is the legacy default stream): the run starts
    /// after the work enqueued there so far and the outputs are complete for work enqueued there
    /// later. Dynamic inputs take the shapes set with `set_input_shape`, else their tensors' dims.
    /// Returns True; failures raise KilnError.
    fn execute_async_v3(&self, py: Python<'_>, stream_handle: u64) -> PyResult<bool> {
        self.enqueue(py, stream_handle)?;
        Ok(true)
    }

    /// `execute_async_v3` under its older name.
    fn execute_async(&self, py: Python<'_>, stream_handle: u64) -> PyResult<bool> {
        self.execute_async_v3(py, stream_handle)
    }

    /// Runs once, synchronously. With numpy arrays bound: reads the inputs (the shapes are the
    /// arrays'), writes the bound outputs and returns every output by name. With device memory
    /// bound: runs on it as `execute_async_v3` on the legacy default stream, waits for the run
    /// and returns an empty dict (the outputs are in their device memory).
    fn execute<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        if self.bound.values().any(|b| !matches!(b, Binding::Host(_))) {
            let plan = self.enqueue(py, streams::LEGACY_STREAM)?;
            py.detach(|| streams::synchronize(streams::LEGACY_STREAM, plan.device)).map_err(error)?;
            return Ok(PyDict::new(py));
        }
        let mut inputs = HashMap::new();
        for name in self.input_names() {
            let Some(Binding::Host(array)) = self.bound.get(&name) else {
                return Err(error(RunError::AddressNotSet { tensor: name }));
            };
            inputs.insert(name.clone(), convert::to_tensor(&name, array.bind(py)).map_err(error)?);
        }
        let outputs: BTreeMap<String, HostTensor> = py.detach(|| self.lock().run(&inputs)).map_err(error)?;
        let result = PyDict::new(py);
        for (name, tensor) in &outputs {
            if let Some(Binding::Host(array)) = self.bound.get(name) {
                write_output(name, array.bind(py), tensor)?;
            }
            result.set_item(name, convert::to_array(py, tensor).map_err(error)?)?;
        }
        Ok(result)
    }
}

impl ExecutionContext {
    fn input_names(&self) -> Vec<String> {
        let context = self.lock();
        let net = context.engine().network();
        net.inputs().iter().map(|&t| net.tensor(t).name.clone()).collect()
    }
}

/// Copies `tensor` into the bound numpy array, which must have its dtype and shape.
fn write_output(name: &str, array: &Bound<'_, PyAny>, tensor: &HostTensor) -> PyResult<()> {
    let dims: Vec<usize> = match array.cast::<numpy::PyUntypedArray>() {
        Ok(a) => a.shape().to_vec(),
        Err(_) => return Err(error(format!("output `{name}` is bound to something that is not a numpy array"))),
    };
    if dims != tensor.shape() {
        return Err(error(format!("output `{name}` is {:?} but its bound array has shape {dims:?}", tensor.shape())));
    }
    convert::write_into(name, array, tensor).map_err(error)
}

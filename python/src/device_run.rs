//! `Engine.run` on device memory: inputs read in place from the CUDA tensors given, outputs
//! written to new device memory and returned as `kiln.DeviceArray`s, ordered on the caller's
//! stream (or complete on return without one); no tensor is copied to or from the host.
//! Also `Engine.allocate_device` and `Engine.to_device`.

use crate::device_array::DeviceArray;
use crate::device_tensor::PyTensor;
use crate::{convert, streams, error};
use kiln::{DataType, HostTensor, PreparedEngine, RunError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::collections::HashMap;
use std::sync::Arc;

/// Whether input `name` is a shape tensor in `profile`: the engine reads its values on the
/// host, so it is given as a host array even when every other input is on the device.
pub(crate) fn is_shape_tensor(engine: &kiln::Engine, profile: usize, name: &str) -> bool {
    engine.profiles().get(profile).and_then(|p| p.shape_values(name)).is_some()
}

/// The error for a host array among device tensors.
pub(crate) fn mixed_inputs(name: &str) -> PyErr {
    error(format!(
        "`{name}` is a host array but other tensors are in CUDA device memory: give all inputs on the device or all on the host (only shape tensors, read on the host, may be host arrays in a device run)"
    ))
}

/// Runs `prepared` once on `inputs` (every network input by name, at least one of them
/// in device memory) and returns each output as a new DeviceArray. With `stream` (a
/// `CUstream`), the run is ordered on it: it starts after the work enqueued there so far and
/// the outputs are complete for work enqueued there later. Without, it waits for work on the
/// legacy default stream and is complete on return.
pub(crate) fn run<'py>(py: Python<'py>, prepared: &Arc<PreparedEngine>, inputs: &[(String, PyTensor)], stream: Option<u64>) -> PyResult<Bound<'py, PyDict>> {
    let net = prepared.engine().network();
    let names: Vec<&str> = net.inputs().iter().map(|&t| net.tensor(t).name.as_str()).collect();
    if let Some((extra, _)) = inputs.iter().find(|(n, _)| !names.contains(&n.as_str())) {
        return Err(error(RunError::UnknownInput { name: extra.clone(), expected: names.join(", ") }));
    }
    let given: HashMap<&str, &PyTensor> = inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let run_stream = stream.unwrap_or(streams::LEGACY_STREAM);
    let mut context = prepared.create_execution_context();
    // Streams that producers wrote inputs on, other than the run's: waited for first.
    let mut producers = Vec::new();
    for &t in net.inputs() {
        let desc = net.tensor(t);
        let name = desc.name.as_str();
        match given.get(name) {
            None => return Err(error(RunError::MissingInput(name.to_string()))),
            Some(PyTensor::Device(tensor)) => {
                tensor.check_dtype(name, desc.dtype).map_err(error)?;
                context.set_input_shape(name, &tensor.dims).map_err(error)?;
                context.set_device_tensor_address(name, tensor.pointer()).map_err(error)?;
                if let Some(s) = tensor.ready_on.filter(|&s| !streams::same_stream(s, run_stream)) {
                    producers.push((s, tensor.device));
                }
            }
            Some(PyTensor::Host(values)) if is_shape_tensor(prepared.engine(), 0, name) => {
                context.set_input_shape(name, values.shape()).map_err(error)?;
                let values = values.to_i64_vec().ok_or_else(|| error(format!("shape tensor `{name}` must hold integers")))?;
                context.set_shape_tensor_values(name, &values).map_err(error)?;
            }
            Some(PyTensor::Host(_)) => return Err(mixed_inputs(name)),
        }
    }
    let mut outputs = Vec::with_capacity(net.outputs().len());
    for &t in net.outputs() {
        let desc = net.tensor(t);
        let dims = output_dims(&context, &desc.name)?;
        let element = desc.dtype.size_bytes().ok_or_else(|| error(RunError::StringInBuffer { tensor: desc.name.clone() }))?;
        // A zero-byte allocation is refused by CUDA; an empty output gets one byte it never uses.
        let memory = prepared.allocate_device((dims.iter().product::<usize>() * element).max(1)).map_err(error)?;
        context.set_device_tensor_address(&desc.name, memory.pointer()).map_err(error)?;
        outputs.push((desc.name.clone(), desc.dtype, dims, memory));
    }
    let device = outputs.first().map_or(0, |(.., memory)| memory.device_ordinal());
    py.detach(|| {
        for (s, d) in producers {
            streams::synchronize(s, d.unwrap_or(device))?;
        }
        context.enqueue_on_device(Some(run_stream)).map_err(|e| e.to_string())?;
        match stream {
            Some(_) => Ok(()),
            None => streams::synchronize(run_stream, device),
        }
    })
    .map_err(error)?;
    let result = PyDict::new(py);
    for (name, dtype, dims, memory) in outputs {
        let dims = context.device_output_dims(&name).unwrap_or(dims);
        result.set_item(&name, DeviceArray::new(memory, dtype, dims, stream))?;
    }
    Ok(result)
}

/// The dims of output `name` for the input shapes set; an error where they depend on the
/// values (the device memory must be allocated before the run).
fn output_dims(context: &kiln::ExecutionContext, name: &str) -> PyResult<Vec<usize>> {
    let dims = context.tensor_shape(name).map_err(error)?;
    dims.iter().map(|&d| usize::try_from(d)).collect::<Result<Vec<_>, _>>().map_err(|_| {
        error(format!(
            "output `{name}` has dims {dims:?} that depend on the input values: Engine.run cannot allocate its device memory before running; bind a large enough tensor with ExecutionContext.set_tensor_address, or run on host arrays"
        ))
    })
}

/// The kiln type of a numpy dtype (a name such as "float32", a numpy type or dtype object).
pub(crate) fn parse_dtype(dtype: &Bound<'_, PyAny>) -> PyResult<DataType> {
    let name = match dtype.extract::<String>() {
        Ok(name) if name == "bfloat16" => name,
        _ => dtype.py().import("numpy")?.call_method1("dtype", (dtype,))?.getattr("name")?.extract()?,
    };
    DataType::ALL.into_iter().find(|&t| convert::numpy_dtype(t) == name).ok_or_else(|| error(format!("dtype {name} has no kiln type")))
}

/// New uninitialized device memory of `dims` elements of `dtype` on the engine's device.
pub(crate) fn allocate(prepared: &PreparedEngine, dims: Vec<usize>, dtype: DataType) -> PyResult<DeviceArray> {
    let element = dtype.size_bytes().ok_or_else(|| error(format!("{dtype} has no fixed size: it cannot live in device memory")))?;
    let memory = prepared.allocate_device((dims.iter().product::<usize>() * element).max(1)).map_err(error)?;
    Ok(DeviceArray::new(memory, dtype, dims, None))
}

/// A device copy of `tensor` on the engine's device.
pub(crate) fn upload(py: Python<'_>, prepared: &PreparedEngine, tensor: &HostTensor) -> PyResult<DeviceArray> {
    let array = allocate(prepared, tensor.shape().to_vec(), tensor.dtype())?;
    let bytes = tensor.data().le_bytes();
    py.detach(|| array.memory().write(&bytes)).map_err(error)?;
    Ok(array)
}

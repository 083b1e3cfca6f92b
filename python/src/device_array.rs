//! `kiln.DeviceArray`: device memory kiln allocated (the outputs of a device run,
//! `Engine.allocate_device`, `Engine.to_device`), shared with other libraries without a copy
//! through DLPack and the CUDA array interface, and copied to numpy on request.

use crate::device_tensor::typestr;
use crate::{convert, streams, dlpack, error};
use kiln::{DataType, DeviceAllocation, HostTensor};
use pyo3::exceptions::{PyAttributeError, PyBufferError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict, PyTuple};
use std::sync::{Arc, Mutex, PoisonError};

/// Row-major elements of one dtype in device memory, freed once neither this array nor a
/// DLPack consumer of it (a `torch.from_dlpack` tensor, say) holds it.
#[pyclass(module = "kiln", frozen)]
pub(crate) struct DeviceArray {
    memory: Arc<dyn DeviceAllocation>,
    dtype: DataType,
    dims: Vec<usize>,
    /// The caller's stream the values are being written on; None once they are complete.
    pending_on: Mutex<Option<u64>>,
}

impl DeviceArray {
    /// An array over `memory`, whose values are complete once `pending_on` (if any) is done.
    pub(crate) fn new(memory: Box<dyn DeviceAllocation>, dtype: DataType, dims: Vec<usize>, pending_on: Option<u64>) -> DeviceArray {
        DeviceArray { memory: Arc::from(memory), dtype, dims, pending_on: Mutex::new(pending_on) }
    }

    pub(crate) fn memory(&self) -> &Arc<dyn DeviceAllocation> {
        &self.memory
    }

    pub(crate) fn element_type(&self) -> DataType {
        self.dtype
    }

    pub(crate) fn dims(&self) -> &[usize] {
        &self.dims
    }

    pub(crate) fn pending_stream(&self) -> Option<u64> {
        *self.pending_on.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn bytes(&self) -> usize {
        self.dims.iter().product::<usize>() * self.dtype.size_bytes().unwrap_or(1)
    }

    /// Waits for the stream the values are written on, unless `consumer` (a stream that
    /// will read them, where given) is that stream: its later work is ordered after them.
    fn settle(&self, py: Python<'_>, consumer: Option<u64>) -> PyResult<()> {
        let Some(stream) = self.pending_stream() else { return Ok(()) };
        if consumer.is_some_and(|c| streams::same_stream(c, stream)) {
            return Ok(());
        }
        let device = self.memory.device_ordinal();
        // Not under the lock: another thread may wait for it while holding the GIL.
        py.detach(|| streams::synchronize(stream, device)).map_err(error)?;
        *self.pending_on.lock().unwrap_or_else(PoisonError::into_inner) = None;
        Ok(())
    }
}

#[pymethods]
impl DeviceArray {
    /// The dims.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.dims)
    }

    /// The numpy name of the element type ("float32", …; "bfloat16" where numpy has none).
    #[getter]
    fn dtype(&self) -> String {
        convert::numpy_dtype(self.dtype)
    }

    /// The CUDA device's ordinal.
    #[getter]
    fn device(&self) -> usize {
        self.memory.device_ordinal()
    }

    /// The size of the elements in bytes.
    #[getter]
    fn nbytes(&self) -> usize {
        self.bytes()
    }

    /// The device address of the first element (a `CUdeviceptr`).
    fn data_ptr(&self) -> u64 {
        self.memory.pointer().address
    }

    /// A numpy copy of the values (waiting for them where a run on a stream is writing them;
    /// bfloat16 comes back as float32).
    fn numpy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.settle(py, None)?;
        let (memory, bytes) = (&self.memory, self.bytes());
        let raw = py.detach(|| memory.read(bytes)).map_err(error)?;
        let tensor = HostTensor::from_le_bytes(self.dtype, self.dims.clone(), &raw).map_err(error)?;
        convert::to_array(py, &tensor).map_err(error)
    }

    /// The CUDA array interface (version 3). `stream` is the stream the values are written on
    /// while a run on it may still be going (consumers order their work after it), else None.
    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let typestr = typestr(self.dtype)
            .ok_or_else(|| PyAttributeError::new_err(format!("{} has no CUDA array interface type: use DLPack (__dlpack__)", self.dtype())))?;
        let interface = PyDict::new(py);
        interface.set_item("version", 3)?;
        interface.set_item("shape", PyTuple::new(py, &self.dims)?)?;
        interface.set_item("typestr", typestr)?;
        interface.set_item("data", (self.data_ptr(), false))?;
        interface.set_item("strides", py.None())?;
        interface.set_item("stream", self.pending_stream().map(streams::protocol_stream))?;
        Ok(interface)
    }

    /// A DLPack capsule sharing the memory (`torch.from_dlpack(array)` makes a CUDA tensor of it
    /// without a copy). `stream` is the consumer's (DLPack's numbering: None or 1 the legacy
    /// default stream, 2 the per-thread one, -1 for none): where a run on another stream may
    /// still be writing the values, this waits for them first.
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<i64>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        // The legacy capsule whatever `max_version` allows: consumers read both.
        let _ = max_version;
        if copy == Some(true) {
            return Err(PyBufferError::new_err("kiln.DeviceArray exports its memory only: copy=True is not offered"));
        }
        if dl_device.is_some_and(|d| d != self.__dlpack_device__()) {
            return Err(PyBufferError::new_err(format!("kiln.DeviceArray lives on {:?}, not {dl_device:?}", self.__dlpack_device__())));
        }
        // -1: the consumer orders its reads itself.
        if stream != Some(-1) {
            let consumer = match stream {
                None => streams::LEGACY_STREAM,
                Some(s) => u64::try_from(s).map_err(|_| PyValueError::new_err(format!("stream {s} is not a CUDA stream")))?,
            };
            self.settle(py, Some(consumer))?;
        }
        dlpack::export(py, Arc::clone(&self.memory), self.dtype, &self.dims)
    }

    /// `(2, device ordinal)`: DLPack's kDLCUDA.
    fn __dlpack_device__(&self) -> (i32, i32) {
        (dlpack::KDL_CUDA, i32::try_from(self.memory.device_ordinal()).unwrap_or(i32::MAX))
    }

    fn __repr__(&self) -> String {
        format!("kiln.DeviceArray(shape={:?}, dtype={}, device={}, data_ptr={:#x})", self.dims, self.dtype(), self.device(), self.data_ptr())
    }
}

//! Device tensors lent by Python objects, read without a copy: kiln's own `DeviceArray`, DLPack
//! producers (`__dlpack__` and `__dlpack_device__`: PyTorch, CuPy, JAX) and objects with a
//! `__cuda_array_interface__` (Numba, older CuPy). Each becomes an address, a dtype and dims,
//! with what keeps the memory alive while kiln may use it. Host objects are left to the host
//! path (numpy arrays as they are, host DLPack tensors through `numpy.from_dlpack`).

use crate::device_array::DeviceArray;
use crate::{convert, streams, dlpack};
use kiln::{DataType, DeviceAllocation, DevicePointer, HostTensor};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::Arc;

/// CUDA memory holding row-major elements, and its owner.
#[derive(Debug)]
pub(crate) struct DeviceTensor {
    pub address: u64,
    pub dtype: DataType,
    pub dims: Vec<usize>,
    /// The CUDA device's ordinal, where the producer says (the CUDA array interface does not).
    pub device: Option<usize>,
    /// The stream the producer wrote the values on, where it says (None: ready now, or
    /// ordered by the caller).
    pub ready_on: Option<u64>,
    pub readonly: bool,
    _owner: Owner,
}

/// What keeps a device tensor's memory alive (held for its Drop: never read).
#[derive(Debug)]
#[allow(dead_code)]
enum Owner {
    /// A consumed DLPack capsule: its deleter runs when this drops.
    DLPack(dlpack::ImportedTensor),
    /// The object exposing `__cuda_array_interface__`.
    Object(Py<PyAny>),
    /// A kiln `DeviceArray`'s memory.
    Allocation(Arc<dyn DeviceAllocation>),
}

impl DeviceTensor {
    /// The memory as kiln binds it: the address and the exact byte size of the elements.
    pub fn pointer(&self) -> DevicePointer {
        let element = self.dtype.size_bytes().unwrap_or(1);
        DevicePointer { address: self.address, bytes: self.dims.iter().product::<usize>() * element }
    }

    /// Refuses a tensor whose dtype is not the engine tensor's.
    pub fn check_dtype(&self, name: &str, expected: DataType) -> Result<(), String> {
        if self.dtype == expected {
            return Ok(());
        }
        let (got, want) = (convert::numpy_dtype(self.dtype), convert::numpy_dtype(expected));
        Err(format!("`{name}` is a {got} device tensor but the engine's `{name}` is {want}: convert it first (no conversion happens on the device path)"))
    }
}

/// A Python value given for a tensor: host data, or device memory.
pub(crate) enum PyTensor {
    Host(HostTensor),
    Device(DeviceTensor),
}

/// `value` as kiln reads it: a device tensor when it lives in CUDA memory, else a host tensor
/// (a copy of a numpy array, or of a host DLPack tensor). `consumer_stream` is the stream kiln
/// will read device memory on, which a DLPack producer orders its pending work before.
pub(crate) fn read_tensor(name: &str, value: &Bound<'_, PyAny>, consumer_stream: Option<u64>) -> Result<PyTensor, String> {
    if let Some(device) = device_tensor(name, value, consumer_stream)? {
        return Ok(PyTensor::Device(device));
    }
    let host = host_array(name, value)?;
    convert::to_tensor(name, host.as_ref().unwrap_or(value)).map(PyTensor::Host)
}

/// A numpy view of a host DLPack tensor that is not a numpy array already (a PyTorch CPU
/// tensor, say); None for anything else, numpy arrays included.
pub(crate) fn host_array<'py>(name: &str, value: &Bound<'py, PyAny>) -> Result<Option<Bound<'py, PyAny>>, String> {
    if is_numpy_array(value) || dlpack_device(name, value)?.is_none_or(|(kind, _)| kind != dlpack::KDL_CPU) {
        return Ok(None);
    }
    let numpy = value.py().import("numpy").map_err(|e| e.to_string())?;
    numpy.call_method1("from_dlpack", (value,)).map(Some).map_err(|e| format!("`{name}`: numpy.from_dlpack cannot read it: {e}"))
}

fn is_numpy_array(value: &Bound<'_, PyAny>) -> bool {
    value.cast::<numpy::PyUntypedArray>().is_ok()
}

/// `value` as a device tensor when it is CUDA memory; None for host objects.
pub(crate) fn device_tensor(name: &str, value: &Bound<'_, PyAny>, consumer_stream: Option<u64>) -> Result<Option<DeviceTensor>, String> {
    if is_numpy_array(value) {
        return Ok(None);
    }
    if let Ok(array) = value.cast::<DeviceArray>() {
        return Ok(Some(array.get().lend()));
    }
    match dlpack_device(name, value)? {
        Some((dlpack::KDL_CUDA, _)) => return from_dlpack(name, value, consumer_stream).map(Some),
        Some((dlpack::KDL_CPU, _)) => return Ok(None),
        Some((kind, _)) => {
            return Err(format!("`{name}` is on DLPack device type {kind}: kiln reads CUDA device memory (type 2) or host arrays"));
        }
        None => {}
    }
    if value.hasattr("__cuda_array_interface__").unwrap_or(false) {
        return from_cuda_array_interface(name, value).map(Some);
    }
    Ok(None)
}

/// `(device_type, device_id)` of a DLPack producer; None for an object that is not one.
fn dlpack_device(name: &str, value: &Bound<'_, PyAny>) -> Result<Option<(i32, i32)>, String> {
    if !value.hasattr("__dlpack__").unwrap_or(false) || !value.hasattr("__dlpack_device__").unwrap_or(false) {
        return Ok(None);
    }
    let device = value.call_method0("__dlpack_device__").map_err(|e| format!("`{name}`: its __dlpack_device__() fails: {e}"))?;
    let (kind, id): (i32, i32) = device.extract().map_err(|_| format!("`{name}`: its __dlpack_device__() did not return (device_type, device_id)"))?;
    Ok(Some((kind, id)))
}

fn from_dlpack(name: &str, value: &Bound<'_, PyAny>, consumer_stream: Option<u64>) -> Result<DeviceTensor, String> {
    let py = value.py();
    let capsule = match consumer_stream {
        Some(stream) => {
            let kwargs = PyDict::new(py);
            kwargs.set_item("stream", streams::protocol_stream(stream)).map_err(|e| e.to_string())?;
            value.call_method("__dlpack__", (), Some(&kwargs))
        }
        None => value.call_method0("__dlpack__"),
    }
    .map_err(|e| format!("`{name}`: its __dlpack__() fails: {e}"))?;
    let (view, owner) = dlpack::import(&capsule).map_err(|e| format!("`{name}`: {e}"))?;
    if view.device_type != dlpack::KDL_CUDA {
        return Err(format!("`{name}`: its DLPack tensor is on device type {}, not CUDA (2)", view.device_type));
    }
    let dtype = view.dtype.map_err(|t| format!("`{name}` is of {t}, which kiln has no type for"))?;
    let dims = dims(name, &view.shape)?;
    if let Some(strides) = &view.strides {
        check_row_major(name, &dims, strides, 1)?;
    }
    Ok(DeviceTensor {
        address: view.address,
        dtype,
        dims,
        device: usize::try_from(view.device_id).ok(),
        // The producer ordered its work before `consumer_stream`, as asked.
        ready_on: None,
        readonly: false,
        _owner: Owner::DLPack(owner),
    })
}

/// Reads `__cuda_array_interface__` (versions 2 and 3): data, shape, typestr, strides, stream.
fn from_cuda_array_interface(name: &str, value: &Bound<'_, PyAny>) -> Result<DeviceTensor, String> {
    let bad = |what: &str| format!("`{name}`: its __cuda_array_interface__ {what}");
    let interface = value.getattr("__cuda_array_interface__").map_err(|e| bad(&format!("cannot be read: {e}")))?;
    let interface = interface.cast::<PyDict>().map_err(|_| bad("is not a dict"))?;
    let item = |key: &str| interface.get_item(key).ok().flatten().filter(|v| !v.is_none());
    let (address, readonly): (u64, bool) = item("data").and_then(|d| d.extract().ok()).ok_or_else(|| bad("has no `data` (pointer, read-only flag)"))?;
    let shape: Vec<i64> = item("shape").and_then(|s| s.extract().ok()).ok_or_else(|| bad("has no `shape` tuple"))?;
    let typestr: String = item("typestr").and_then(|t| t.extract().ok()).ok_or_else(|| bad("has no `typestr`"))?;
    if item("mask").is_some() {
        return Err(bad("has a mask: masked arrays are not read"));
    }
    let dtype = dtype_of_typestr(&typestr).ok_or_else(|| format!("`{name}` is of typestr {typestr:?}, which kiln has no type for"))?;
    let dims = dims(name, &shape)?;
    if let Some(strides) = item("strides") {
        let strides: Vec<i64> = strides.extract().map_err(|_| bad("has `strides` that are not a tuple of ints"))?;
        check_row_major(name, &dims, &strides, dtype.size_bytes().unwrap_or(1) as i64)?;
    }
    let ready_on = match item("stream") {
        Some(s) => Some(s.extract::<u64>().map_err(|_| bad("has a `stream` that is not an int"))?),
        None => None,
    };
    Ok(DeviceTensor { address, dtype, dims, device: None, ready_on, readonly, _owner: Owner::Object(value.clone().unbind()) })
}

impl DeviceArray {
    /// This array's memory as a device tensor that keeps it alive.
    fn lend(&self) -> DeviceTensor {
        DeviceTensor {
            address: self.memory().pointer().address,
            dtype: self.element_type(),
            dims: self.dims().to_vec(),
            device: Some(self.memory().device_ordinal()),
            ready_on: self.pending_stream(),
            readonly: false,
            _owner: Owner::Allocation(Arc::clone(self.memory())),
        }
    }
}

fn dims(name: &str, shape: &[i64]) -> Result<Vec<usize>, String> {
    shape.iter().map(|&d| usize::try_from(d).map_err(|_| format!("`{name}` has a negative dim in shape {shape:?}"))).collect()
}

/// Refuses strides (in units of `unit` bytes: 1 for DLPack's element strides, the element size
/// for the CUDA array interface's byte strides) other than row-major. Dims of 1 may have any
/// stride, and an empty tensor has no layout to check.
fn check_row_major(name: &str, dims: &[usize], strides: &[i64], unit: i64) -> Result<(), String> {
    let mut expected = unit;
    let mut row_major = strides.len() == dims.len();
    if row_major && !dims.contains(&0) {
        for (&d, &s) in dims.iter().zip(strides).rev() {
            if d != 1 && s != expected {
                row_major = false;
                break;
            }
            expected *= d as i64;
        }
    }
    if row_major {
        return Ok(());
    }
    let units = if unit == 1 { "elements" } else { "bytes" };
    Err(format!(
        "`{name}` is not contiguous (shape {dims:?}, strides {strides:?} in {units}): kiln reads device tensors in row-major order without a copy; pass a contiguous tensor (e.g. x.contiguous())"
    ))
}

/// A numpy typestr's kiln type ('<f4', '|b1', …); little-endian or single-byte only.
fn dtype_of_typestr(typestr: &str) -> Option<DataType> {
    let mut chars = typestr.chars();
    let (order, kind) = (chars.next()?, chars.next()?);
    let size: usize = chars.as_str().parse().ok()?;
    if order == '>' && size != 1 {
        return None;
    }
    Some(match (kind, size) {
        ('f', 2) => DataType::F16,
        ('f', 4) => DataType::F32,
        ('f', 8) => DataType::F64,
        ('i', 1) => DataType::I8,
        ('i', 2) => DataType::I16,
        ('i', 4) => DataType::I32,
        ('i', 8) => DataType::I64,
        ('u', 1) => DataType::U8,
        ('u', 2) => DataType::U16,
        ('u', 4) => DataType::U32,
        ('u', 8) => DataType::U64,
        ('b', 1) => DataType::Bool,
        _ => return None,
    })
}

/// The typestr of a kiln type in the CUDA array interface; None where numpy has no type.
pub(crate) fn typestr(dtype: DataType) -> Option<&'static str> {
    Some(match dtype {
        DataType::F16 => "<f2",
        DataType::F32 => "<f4",
        DataType::F64 => "<f8",
        DataType::I8 => "|i1",
        DataType::I16 => "<i2",
        DataType::I32 => "<i4",
        DataType::I64 => "<i8",
        DataType::U8 => "|u1",
        DataType::U16 => "<u2",
        DataType::U32 => "<u4",
        DataType::U64 => "<u8",
        DataType::Bool => "|b1",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typestrs_round_trip() {
        for t in DataType::ALL.into_iter().filter(|&t| typestr(t).is_some()) {
            assert_eq!(dtype_of_typestr(typestr(t).unwrap()), Some(t));
        }
        assert_eq!(dtype_of_typestr(">f4"), None);
        assert_eq!(dtype_of_typestr("<c8"), None);
    }

    #[test]
    fn only_row_major_strides_pass() {
        assert!(check_row_major("x", &[2, 3], &[3, 1], 1).is_ok());
        assert!(check_row_major("x", &[2, 3], &[12, 4], 4).is_ok());
        assert!(check_row_major("x", &[2, 1, 3], &[3, 99, 1], 1).is_ok());
        assert!(check_row_major("x", &[0, 3], &[7, 7], 1).is_ok());
        let e = check_row_major("x", &[2, 3], &[1, 2], 1).unwrap_err();
        assert!(e.contains("`x` is not contiguous"), "{e}");
    }
}

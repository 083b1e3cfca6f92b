//! DLPack (the v0.8 ABI of the `dltensor` capsule) on both sides: device tensors imported from
//! a producer's `__dlpack__()` capsule, and kiln device memory exported as one, so that
//! `torch.from_dlpack(array)` shares it. The only module with `unsafe`:
//! the C structs and the capsule protocol stay here, behind safe functions.
#![allow(unsafe_code)]

use kiln::{DataType, DeviceAllocation};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods};
use std::ffi::{c_void, CStr};
use std::ptr::NonNull;
use std::sync::Arc;

/// DLPack's device types kiln meets: host memory and CUDA device memory.
pub const KDL_CPU: i32 = 1;
pub const KDL_CUDA: i32 = 2;

const UNUSED: &CStr = c"dltensor";
const USED: &CStr = c"used_dltensor";

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *mut i64,
    /// In elements; NULL for a row-major (C-contiguous) tensor.
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// DLPack's type codes (kDLInt, kDLUInt, kDLFloat, kDLBfloat, kDLBool) for kiln's types.
fn dl_dtype(dtype: DataType) -> Option<DLDataType> {
    let (code, bits) = match dtype {
        DataType::I8 => (0, 8),
        DataType::I16 => (0, 16),
        DataType::I32 => (0, 32),
        DataType::I64 => (0, 64),
        DataType::U8 => (1, 8),
        DataType::U16 => (1, 16),
        DataType::U32 => (1, 32),
        DataType::U64 => (1, 64),
        DataType::F16 => (2, 16),
        DataType::F32 => (2, 32),
        DataType::F64 => (2, 64),
        DataType::BF16 => (4, 16),
        DataType::Bool => (6, 8),
        _ => return None,
    };
    Some(DLDataType { code, bits, lanes: 1 })
}

fn kiln_dtype(dtype: DLDataType) -> Option<DataType> {
    if dtype.lanes != 1 {
        return None;
    }
    DataType::ALL.into_iter().find(|&t| dl_dtype(t) == Some(dtype))
}

/// What a consumed capsule describes, copied out of its `DLTensor`.
#[derive(Debug)]
pub struct DLPackView {
    /// `data + byte_offset`.
    pub address: u64,
    pub device_type: i32,
    pub device_id: i32,
    /// Err: a description of the DLPack type kiln has no type for.
    pub dtype: Result<DataType, String>,
    pub shape: Vec<i64>,
    /// In elements; None for a row-major tensor.
    pub strides: Option<Vec<i64>>,
}

/// A consumed capsule's tensor: the producer keeps its memory valid until this is dropped,
/// which calls the producer's deleter (the DLPack protocol's consumer side).
pub struct ImportedTensor {
    managed: NonNull<DLManagedTensor>,
}

// SAFETY: the managed tensor is only touched again by `Drop`, which calls the deleter with the
// interpreter attached (deleters may take the GIL, which any thread can do); `&self` gives
// no access to it.
unsafe impl Send for ImportedTensor {}
// SAFETY: as for Send: nothing is reachable through a shared reference.
unsafe impl Sync for ImportedTensor {}

impl std::fmt::Debug for ImportedTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ImportedTensor({:p})", self.managed)
    }
}

impl Drop for ImportedTensor {
    fn drop(&mut self) {
        let managed = self.managed.as_ptr();
        // During interpreter shutdown the producer's deleter cannot run safely: leak instead.
        Python::try_attach(|_| {
            // SAFETY: `managed` came from a capsule this consumer renamed to "used_dltensor",
            // so nothing else calls its deleter; it is called exactly once, here.
            unsafe {
                if let Some(deleter) = (*managed).deleter {
                    deleter(managed);
                }
            }
        });
    }
}

/// Takes ownership of the tensor in a `__dlpack__()` capsule (renaming it "used_dltensor", as
/// the protocol asks) and reads its description. The memory stays valid while the returned
/// [`ImportedTensor`] lives.
pub fn import(capsule: &Bound<'_, PyAny>) -> Result<(DLPackView, ImportedTensor), String> {
    let capsule = capsule.cast::<PyCapsule>().map_err(|_| "its __dlpack__() did not return a PyCapsule".to_string())?;
    if !capsule.is_valid_checked(Some(UNUSED)) {
        let why = if capsule.is_valid_checked(Some(USED)) { "consumed already" } else { "another name: a DLPack version kiln does not read" };
        return Err(format!("its __dlpack__() returned a capsule that is not a \"dltensor\" ({why})"));
    }
    let pointer = capsule.pointer_checked(Some(UNUSED)).map_err(|e| e.to_string())?;
    // SAFETY: the capsule is valid under the name "dltensor"; renaming it makes this consumer the
    // owner, whose duty it is to call the deleter (done by `ImportedTensor`'s Drop).
    if unsafe { ffi::PyCapsule_SetName(capsule.as_ptr(), USED.as_ptr()) } != 0 {
        return Err("cannot mark its DLPack capsule as used".into());
    }
    let imported = ImportedTensor { managed: pointer.cast() };
    // SAFETY: a "dltensor" capsule holds a live DLManagedTensor (DLPack's contract), owned by
    // `imported` from now on; the shape and strides arrays hold `ndim` elements each.
    let view = unsafe {
        let t = &imported.managed.as_ref().dl_tensor;
        let ndim = usize::try_from(t.ndim).map_err(|_| format!("its DLPack tensor has ndim {}", t.ndim))?;
        let read = |p: *const i64| if ndim == 0 { Vec::new() } else { std::slice::from_raw_parts(p, ndim).to_vec() };
        if ndim > 0 && t.shape.is_null() {
            return Err("its DLPack tensor has no shape array".into());
        }
        DLPackView {
            address: (t.data as u64).wrapping_add(t.byte_offset),
            device_type: t.device.device_type,
            device_id: t.device.device_id,
            dtype: kiln_dtype(t.dtype).ok_or_else(|| format!("DLPack type (code {}, {} bits, {} lanes)", t.dtype.code, t.dtype.bits, t.dtype.lanes)),
            shape: read(t.shape),
            strides: (!t.strides.is_null()).then(|| read(t.strides)),
        }
    };
    Ok((view, imported))
}

/// What an exported tensor owns; freed by [`delete_exported`].
struct ExportContext {
    shape: Vec<i64>,
    _memory: Arc<dyn DeviceAllocation>,
}

/// The deleter of the tensors kiln exports: frees the shape, the struct and one reference to
/// the device memory (the memory itself once no DeviceArray or other export holds it).
unsafe extern "C" fn delete_exported(managed: *mut DLManagedTensor) {
    if managed.is_null() {
        return;
    }
    // SAFETY: `managed` and its context were made by `Box::into_raw` in `export` and are freed
    // once: the consumer calls the deleter once, or the capsule's destructor does if unconsumed.
    unsafe {
        let managed = Box::from_raw(managed);
        drop(Box::from_raw(managed.manager_ctx as *mut ExportContext));
    }
}

/// The capsule's destructor: an export nobody consumed is deleted with the capsule.
unsafe extern "C" fn drop_unconsumed(capsule: *mut ffi::PyObject) {
    // SAFETY: called by Python with a live capsule; IsValid and GetPointer with the name it has
    // set no exception. A consumed capsule was renamed and its consumer calls the deleter.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, UNUSED.as_ptr()) == 1 {
            delete_exported(ffi::PyCapsule_GetPointer(capsule, UNUSED.as_ptr()) as *mut DLManagedTensor);
        }
    }
}

/// A "dltensor" capsule sharing `memory` (row-major `dtype` elements of `dims` on CUDA device
/// `device_id`); the export holds its own reference to the memory until the consumer's done.
pub fn export<'py>(py: Python<'py>, memory: Arc<dyn DeviceAllocation>, dtype: DataType, dims: &[usize]) -> PyResult<Bound<'py, PyCapsule>> {
    let dl_type = dl_dtype(dtype).ok_or_else(|| pyo3::exceptions::PyBufferError::new_err(format!("{dtype} has no DLPack type")))?;
    let address = memory.pointer().address;
    let device_id = i32::try_from(memory.device_ordinal()).unwrap_or(i32::MAX);
    let mut context = Box::new(ExportContext { shape: dims.iter().map(|&d| d as i64).collect(), _memory: memory });
    let managed = Box::new(DLManagedTensor {
        dl_tensor: DLTensor {
            data: address as *mut c_void,
            device: DLDevice { device_type: KDL_CUDA, device_id },
            ndim: dims.len() as i32,
            dtype: dl_type,
            // The Vec's buffer does not move when its Box does.
            shape: context.shape.as_mut_ptr(),
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        },
        manager_ctx: Box::into_raw(context) as *mut c_void,
        deleter: Some(delete_exported),
    });
    let pointer = NonNull::from(Box::leak(managed)).cast::<c_void>();
    // SAFETY: `pointer` is a DLManagedTensor that stays valid until its deleter runs: through the
    // consumer, or through `drop_unconsumed`, which runs only for a capsule still "dltensor".
    let capsule = unsafe { PyCapsule::new_with_pointer_and_destructor(py, pointer, UNUSED, Some(drop_unconsumed)) };
    if capsule.is_err() {
        // SAFETY: no capsule holds the tensor: it is still only ours to free.
        unsafe { delete_exported(pointer.as_ptr() as *mut DLManagedTensor) };
    }
    capsule
}

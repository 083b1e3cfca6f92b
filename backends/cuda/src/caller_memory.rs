//! Device memory and streams the caller owns, given to kiln as raw addresses and handles
//! (device-resident I/O, [`kiln::device_io`]): checked before kiln copies through them, and
//! ordered with kiln's own streams by events. Page-locked host memory (registered with
//! [`register_host_memory`], or allocated by [`HostAllocation`]) is accepted as well: the copy
//! engines reach it directly, so inputs go host → device in one DMA with no staging copy.
//! Also [`CallerAllocation`], device memory kiln allocates for callers without an allocator.

use crate::buffer::{DeviceBuffer, DeviceTensor};
use crate::device::Gpu;
use crate::error::{driver, GpuError};
use cudarc::driver::sys;
use kiln::{BackendError, DataType, DeviceAllocation, DevicePointer};
use std::sync::Arc;

impl Gpu {
    /// Checks that `bytes` bytes at `address` lie inside one allocation on this GPU: a caller's
    /// address that is host memory, freed, too short or on another device is an error naming
    /// what is wrong, not a copy into someone else's memory.
    pub fn check_caller_memory(&self, address: u64, bytes: usize) -> Result<(), GpuError> {
        let refused = |reason: String| GpuError::Driver { call: "device address", reason };
        if address == 0 {
            return Err(refused("the address is 0 (NULL)".into()));
        }
        self.ctx.bind_to_thread().map_err(driver("cuCtxSetCurrent"))?;
        if pointer_attribute::<u32>(address, sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE)
            == Some(sys::CUmemorytype::CU_MEMORYTYPE_HOST as u32)
        {
            return check_pinned_range(address, bytes).map_err(refused);
        }
        let (mut base, mut size) = (0u64, 0usize);
        // SAFETY: both out-pointers are valid locals; the driver only looks the address up.
        let found = unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, address) };
        if found != sys::cudaError_enum::CUDA_SUCCESS {
            return Err(refused(format!(
                "{address:#x} is not device memory of this process ({found:?}): pageable host memory (register it first), freed, or never allocated"
            )));
        }
        let end = address.checked_add(bytes as u64);
        if end.is_none_or(|end| end > base + size as u64) {
            let left = base + size as u64 - address;
            return Err(refused(format!("{bytes} bytes from {address:#x}, but its allocation has {left} bytes left from there")));
        }
        let mut ordinal: i32 = -1;
        // SAFETY: `ordinal` is a valid out-pointer of the attribute's type (int).
        let asked = unsafe {
            sys::cuPointerGetAttribute(
                &mut ordinal as *mut i32 as *mut _,
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                address,
            )
        };
        let mine = self.ctx.ordinal() as i32;
        if asked == sys::cudaError_enum::CUDA_SUCCESS && ordinal != mine {
            return Err(refused(format!("{address:#x} is memory of device {ordinal}, the engine runs on device {mine}")));
        }
        Ok(())
    }

    /// Enqueues a copy between addresses the caller checked ([`Gpu::check_caller_memory`]) or
    /// kiln allocated: device or page-locked host memory, the direction found by unified
    /// addressing.
    pub fn copy_address(&self, src: u64, dst: u64, bytes: usize) -> Result<(), GpuError> {
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: both ranges were checked to lie in live device or page-locked allocations of
        // `bytes` bytes.
        unsafe { sys::cuMemcpyAsync(dst, src, bytes, self.stream.cu_stream()) }.result().map_err(driver("cuMemcpyAsync"))
    }

    /// Enqueues a copy of host bytes to a checked device address (the driver stages pageable
    /// memory before returning, so `bytes` may go right after).
    pub fn write_address(&self, dst: u64, bytes: &[u8]) -> Result<(), GpuError> {
        if bytes.is_empty() {
            return Ok(());
        }
        // SAFETY: `dst` was checked to hold `bytes.len()` bytes; `bytes` is valid for the call.
        unsafe { sys::cuMemcpyHtoDAsync_v2(dst, bytes.as_ptr() as *const _, bytes.len(), self.stream.cu_stream()) }
            .result()
            .map_err(driver("cuMemcpyHtoDAsync"))
    }

    /// Makes this GPU's stream wait for the work enqueued so far on the caller's stream.
    pub fn wait_for_stream(&self, caller: u64) -> Result<(), GpuError> {
        let event = self.event()?;
        // SAFETY: `caller` is a stream handle of this context the caller vouches for (0 is the
        // legacy default stream); the event is live for both calls.
        unsafe {
            sys::cuEventRecord(event.cu_event(), caller as sys::CUstream).result().map_err(driver("cuEventRecord (caller's stream)"))?;
            sys::cuStreamWaitEvent(self.stream.cu_stream(), event.cu_event(), 0).result().map_err(driver("cuStreamWaitEvent"))
        }
    }

    /// Records the caller's `event` on this GPU's stream now.
    pub fn record_caller_event(&self, event: u64) -> Result<(), GpuError> {
        // SAFETY: `event` is an event handle of this context the caller vouches for.
        unsafe { sys::cuEventRecord(event as sys::CUevent, self.stream.cu_stream()) }.result().map_err(driver("cuEventRecord (caller's event)"))
    }

    /// Makes the caller's stream wait for the work enqueued so far on this GPU's stream.
    pub fn signal_stream(&self, caller: u64) -> Result<(), GpuError> {
        let event = self.event()?;
        self.record(&event)?;
        // SAFETY: as in `wait_for_stream`; the driver keeps what the wait needs after the
        // event is destroyed.
        unsafe { sys::cuStreamWaitEvent(caller as sys::CUstream, event.cu_event(), 0) }.result().map_err(driver("cuStreamWaitEvent (caller's stream)"))
    }
}

/// A pointer attribute of `address`, None where the driver does not know the address.
fn pointer_attribute<T: Default + Copy>(address: u64, attribute: sys::CUpointer_attribute) -> Option<T> {
    let mut value = T::default();
    // SAFETY: `value` is a valid out-pointer of the attribute's type (the callers pair them).
    let asked = unsafe { sys::cuPointerGetAttribute(&mut value as *mut T as *mut _, attribute, address) };
    (asked == sys::cudaError_enum::CUDA_SUCCESS).then_some(value)
}

/// Checks that `bytes` bytes from `address` lie in one page-locked host range.
fn check_pinned_range(address: u64, bytes: usize) -> Result<(), String> {
    use sys::CUpointer_attribute as A;
    let start = pointer_attribute::<u64>(address, A::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR);
    let size = pointer_attribute::<usize>(address, A::CU_POINTER_ATTRIBUTE_RANGE_SIZE);
    let (Some(start), Some(size)) = (start, size) else {
        return Err(format!("the driver gives no range for page-locked host memory at {address:#x}"));
    };
    let left = (start + size as u64).saturating_sub(address);
    if bytes as u64 > left {
        return Err(format!("{bytes} bytes from {address:#x}, but its page-locked range has {left} bytes left from there"));
    }
    Ok(())
}

/// Waits on the host until the work enqueued so far on the caller's `stream` (a `CUstream` of
/// device `device`'s primary context, the one kiln and PyTorch share; 0 the legacy default
/// stream) is done.
pub fn synchronize_stream(device: usize, stream: u64) -> Result<(), GpuError> {
    crate::probe::libraries().runtime_ready().map_err(GpuError::Unavailable)?;
    let ctx = cudarc::driver::CudaContext::new(device).map_err(driver("cuCtxCreate"))?;
    ctx.bind_to_thread().map_err(driver("cuCtxSetCurrent"))?;
    // SAFETY: a stream handle of this context the caller vouches for (or 0).
    unsafe { sys::cuStreamSynchronize(stream as sys::CUstream) }.result().map_err(driver("cuStreamSynchronize"))
}

/// Host memory the caller owns, page-locked and mapped for every device (`cuMemHostRegister`)
/// until dropped: bound by its address for device-resident I/O, it is copied straight to and
/// from the device.
#[derive(Debug)]
pub struct HostRegistration {
    address: u64,
    /// Keeps the driver loaded and a context current for the unregistration.
    ctx: Arc<cudarc::driver::CudaContext>,
}

impl HostRegistration {
    pub fn address(&self) -> u64 {
        self.address
    }
}

/// Page-locks `bytes` bytes of host memory at `address` for device `device`'s copies.
///
/// # Safety
/// The range is host memory the caller owns and keeps alive, unmoved, until the registration
/// is dropped; while an execution reads or writes it (bound as an input or output), the host
/// does not write (input) or touch (output) it.
pub unsafe fn register_host_memory(device: usize, address: u64, bytes: usize) -> Result<HostRegistration, GpuError> {
    crate::probe::libraries().runtime_ready().map_err(GpuError::Unavailable)?;
    let ctx = cudarc::driver::CudaContext::new(device).map_err(driver("cuCtxCreate"))?;
    ctx.bind_to_thread().map_err(driver("cuCtxSetCurrent"))?;
    let flags = sys::CU_MEMHOSTREGISTER_PORTABLE | sys::CU_MEMHOSTREGISTER_DEVICEMAP;
    // SAFETY: the caller owns the range and keeps it alive until the registration is dropped.
    unsafe { sys::cuMemHostRegister_v2(address as *mut _, bytes, flags) }.result().map_err(driver("cuMemHostRegister"))?;
    Ok(HostRegistration { address, ctx })
}

impl Drop for HostRegistration {
    /// Waits for the device first: a copy may still read or write the range.
    fn drop(&mut self) {
        let _ = self.ctx.synchronize();
        // SAFETY: the range was registered by `register_host_memory` and is unregistered once.
        let _ = unsafe { sys::cuMemHostUnregister(self.address as *mut _) };
    }
}

/// Page-locked host memory kiln allocated for a caller ([`kiln::Executable::allocate_host`]),
/// mapped for the device: what registered host memory gives, owned by kiln.
#[derive(Debug)]
pub struct HostAllocation {
    gpu: Arc<Gpu>,
    /// Locked for host reads and writes, which wait for the device first.
    memory: std::sync::Mutex<crate::arena::PinnedHost>,
    pointer: DevicePointer,
}

impl HostAllocation {
    pub fn new(gpu: Arc<Gpu>, bytes: usize) -> Result<HostAllocation, GpuError> {
        let memory = crate::arena::PinnedHost::new(&gpu.ctx, bytes.max(1))?;
        // Unified addressing maps page-locked allocations for the device at the host address.
        let pointer = DevicePointer { address: memory.as_ptr() as u64, bytes };
        Ok(HostAllocation { gpu, memory: std::sync::Mutex::new(memory), pointer })
    }

    /// The memory, once the device is idle (an execution may still read or write it).
    fn idle(&self) -> Result<std::sync::MutexGuard<'_, crate::arena::PinnedHost>, BackendError> {
        self.gpu.ctx.synchronize().map_err(|e| crate::error::gpu_error("(host memory)", driver("cuCtxSynchronize")(e)))?;
        Ok(self.memory.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

impl DeviceAllocation for HostAllocation {
    fn pointer(&self) -> DevicePointer {
        self.pointer
    }

    fn device_ordinal(&self) -> usize {
        self.gpu.ctx.ordinal()
    }

    fn write(&self, bytes: &[u8]) -> Result<(), BackendError> {
        if bytes.len() > self.pointer.bytes {
            return Err(too_many(bytes.len(), self.pointer.bytes));
        }
        self.idle()?.as_mut_slice()[..bytes.len()].copy_from_slice(bytes);
        Ok(())
    }

    fn read(&self, len: usize) -> Result<Vec<u8>, BackendError> {
        if len > self.pointer.bytes {
            return Err(too_many(len, self.pointer.bytes));
        }
        Ok(self.idle()?.as_slice()[..len].to_vec())
    }
}

impl Drop for HostAllocation {
    /// Waits for the device first: an execution may still read or write it.
    fn drop(&mut self) {
        let _ = self.gpu.ctx.synchronize();
    }
}

/// Device memory kiln allocated for a caller ([`kiln::Executable::allocate_device`]).
#[derive(Debug)]
pub struct CallerAllocation {
    gpu: Arc<Gpu>,
    /// Dropped after the device is idle (see `Drop`).
    buf: Option<Arc<DeviceBuffer>>,
    bytes: usize,
}

impl CallerAllocation {
    pub fn new(gpu: Arc<Gpu>, bytes: usize) -> Result<CallerAllocation, GpuError> {
        let buf = Arc::new(gpu.persistent(|| gpu.alloc(bytes))?);
        // The allocation is ordered on kiln's stream; the caller may use it on any other.
        gpu.synchronize()?;
        Ok(CallerAllocation { gpu, buf: Some(buf), bytes })
    }

    fn buffer(&self) -> &Arc<DeviceBuffer> {
        self.buf.as_ref().expect("present until dropped")
    }
}

impl DeviceAllocation for CallerAllocation {
    fn pointer(&self) -> DevicePointer {
        DevicePointer { address: self.buffer().ptr(), bytes: self.bytes }
    }

    fn device_ordinal(&self) -> usize {
        self.gpu.ctx.ordinal()
    }

    fn write(&self, bytes: &[u8]) -> Result<(), BackendError> {
        if bytes.len() > self.bytes {
            return Err(too_many(bytes.len(), self.bytes));
        }
        let error = |e| crate::error::gpu_error("(device memory)", e);
        self.gpu.write(self.buffer(), bytes).map_err(error)?;
        self.gpu.synchronize().map_err(error)
    }

    fn read(&self, len: usize) -> Result<Vec<u8>, BackendError> {
        if len > self.bytes {
            return Err(too_many(len, self.bytes));
        }
        let t = DeviceTensor::new(self.buffer().clone(), DataType::U8, vec![len]);
        let host = self.gpu.download(&t).map_err(|e| crate::error::gpu_error("(device memory)", e))?;
        Ok(host.data().le_bytes().into_owned())
    }
}

fn too_many(asked: usize, bytes: usize) -> BackendError {
    BackendError::Execution { layer: "(device memory)".into(), reason: format!("{asked} bytes asked of an allocation of {bytes}") }
}

impl Drop for CallerAllocation {
    /// As `cudaFree`, waits for the device first: work on any stream may still read it.
    fn drop(&mut self) {
        let _ = self.gpu.ctx.synchronize();
        drop(self.buf.take());
    }
}

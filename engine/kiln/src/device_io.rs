//! Device-resident I/O: inputs read from and outputs written to device memory the caller owns
//! (TensorRT's device tensor addresses), ordered on the caller's stream, with no host copy.
//!
//! Addresses and streams are plain integers (a `CUdeviceptr` and a `CUstream` on cuda), as in
//! TensorRT's C++ and Python APIs: they come from whatever allocated them (PyTorch, CuPy, the
//! caller's `cudaMalloc`, or [`DeviceAllocation`]). A backend that runs on host memory only
//! does not offer device I/O, and says so.

use crate::ir::dtype::DataType;
use crate::ir::tensor::HostTensor;
use std::sync::Arc;

/// Device memory by address and size, owned by the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DevicePointer {
    pub address: u64,
    pub bytes: usize,
}

/// One network input of a device execution.
#[derive(Clone, Debug)]
pub enum DeviceInput {
    /// Elements of `dtype` in `dims` (row-major, little-endian) in device memory.
    Device { memory: DevicePointer, dtype: DataType, dims: Vec<usize> },
    /// A shape tensor's values, which the engine reads on the host.
    Host(HostTensor),
}

impl DeviceInput {
    pub fn dtype(&self) -> DataType {
        match self {
            DeviceInput::Device { dtype, .. } => *dtype,
            DeviceInput::Host(t) => t.dtype(),
        }
    }

    pub fn dims(&self) -> &[usize] {
        match self {
            DeviceInput::Device { dims, .. } => dims,
            DeviceInput::Host(t) => t.shape(),
        }
    }
}

/// Gives device memory to an output whose size is known only once the execution has computed
/// it (data-dependent shapes; TensorRT's `IOutputAllocator`). Called on the thread that
/// enqueues, with the output's dims.
pub trait OutputAllocator: Send + Sync {
    /// Device memory of at least `bytes` bytes for output `name` of `dims`; None refuses (the
    /// execution fails naming the output).
    fn allocate(&self, name: &str, dims: &[usize], bytes: usize) -> Option<DevicePointer>;
}

/// Where one output of a device execution goes.
#[derive(Clone)]
pub enum DeviceOutput {
    /// Memory bound before the execution.
    Memory(DevicePointer),
    /// Memory asked of an allocator once the output's dims are known (the output's name).
    Allocator(Arc<dyn OutputAllocator>, String),
}

impl std::fmt::Debug for DeviceOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceOutput::Memory(p) => write!(f, "Memory({:#x}, {} bytes)", p.address, p.bytes),
            DeviceOutput::Allocator(_, name) => write!(f, "Allocator(`{name}`)"),
        }
    }
}

impl DeviceOutput {
    /// The memory for an output of `dims` and `bytes` bytes: the bound memory, or the
    /// allocator's. Err says why there is none.
    pub fn memory(&self, dims: &[usize], bytes: usize) -> Result<DevicePointer, String> {
        match self {
            DeviceOutput::Memory(p) => Ok(*p),
            DeviceOutput::Allocator(allocator, name) => allocator
                .allocate(name, dims, bytes)
                .ok_or_else(|| format!("the output allocator of `{name}` gave no memory for {bytes} bytes ({dims:?})")),
        }
    }
}

/// What a device execution reads, writes and is ordered after.
#[derive(Clone, Debug)]
pub struct DeviceIo<'a> {
    /// In network-input order.
    pub inputs: &'a [DeviceInput],
    /// Where each output goes, in network-output order.
    pub outputs: &'a [DeviceOutput],
    /// The caller's stream (a `CUstream` on cuda): the execution starts after the work
    /// enqueued on it so far, and work the caller enqueues on it later starts after the
    /// execution. None: the execution is complete when the call returns.
    pub stream: Option<u64>,
    /// The caller's event (a `CUevent` on cuda), recorded once the inputs have been read:
    /// from then on the caller may refill them (seed §6.11's input-consumed event).
    pub input_consumed: Option<u64>,
}

/// Memory a backend allocated for a caller's device executions (device memory, or page-locked
/// host memory the device reaches); freed when dropped.
pub trait DeviceAllocation: Send + Sync {
    /// The memory, as a [`DevicePointer`] for [`DeviceIo`].
    fn pointer(&self) -> DevicePointer;
    /// The device's ordinal (DLPack's `device_id`).
    fn device_ordinal(&self) -> usize;
    /// Copies `bytes` to the start of the memory (synchronously).
    fn write(&self, bytes: &[u8]) -> Result<(), crate::error::BackendError>;
    /// Copies the first `len` bytes to the host (synchronously).
    fn read(&self, len: usize) -> Result<Vec<u8>, crate::error::BackendError>;
}

impl std::fmt::Debug for dyn DeviceAllocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = self.pointer();
        write!(f, "DeviceAllocation({:#x}, {} bytes)", p.address, p.bytes)
    }
}

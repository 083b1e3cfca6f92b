//! Tensor buffers bound to an execution context by name (TensorRT's tensor addresses).
//!
//! A [`Buffer`] is memory the caller owns and the runtime reads inputs from and writes
//! outputs into. On the host backends it is host memory; a device backend maps it (or
//! stages it) when it runs. Every buffer has a distinct non-null address, empty ones
//! included (seed §6.10: an empty tensor still needs a unique, non-null address).

use crate::ir::dtype::DataType;
use crate::ir::tensor::{HostTensor, TensorData};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Addresses are handed out from here, 256-byte aligned and never reused, so no two live
/// buffers share one and none is 0.
static NEXT_ADDRESS: AtomicU64 = AtomicU64::new(0x1_0000);

#[derive(Debug)]
struct Inner {
    address: u64,
    bytes: Mutex<Vec<u8>>,
}

/// A shared handle to caller-owned tensor memory; clones refer to the same memory.
#[derive(Clone, Debug)]
pub struct Buffer(Arc<Inner>);

impl Buffer {
    /// A zero-filled buffer of `len` bytes (0 is legal: empty tensors).
    pub fn new(len: usize) -> Buffer {
        Buffer::from_bytes(vec![0; len])
    }

    pub fn from_bytes(bytes: Vec<u8>) -> Buffer {
        let span = (bytes.len().max(1) as u64).div_ceil(256) * 256;
        let address = NEXT_ADDRESS.fetch_add(span, Ordering::Relaxed);
        Buffer(Arc::new(Inner { address, bytes: Mutex::new(bytes) }))
    }

    /// A buffer holding a tensor's elements (little-endian, row-major).
    pub fn from_tensor(tensor: &HostTensor) -> Buffer {
        Buffer::from_bytes(tensor.data().to_le_bytes())
    }

    /// The buffer's address: distinct from every other buffer's and never 0.
    pub fn address(&self) -> u64 {
        self.0.address
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A copy of the contents.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.lock().clone()
    }

    /// Overwrites the start of the buffer; `false` when `bytes` does not fit.
    pub fn write_bytes(&self, bytes: &[u8]) -> bool {
        let mut guard = self.lock();
        match guard.get_mut(..bytes.len()) {
            Some(dst) => {
                dst.copy_from_slice(bytes);
                true
            }
            None => false,
        }
    }

    /// Reads the first `dims`-volume elements of type `dtype`; `None` when the buffer is too
    /// small or the bytes are not valid elements (a bool other than 0 or 1).
    pub fn read_tensor(&self, dtype: DataType, dims: &[usize]) -> Option<HostTensor> {
        let bytes = dims.iter().try_fold(dtype.size_bytes()?, |acc, &d| acc.checked_mul(d))?;
        let guard = self.lock();
        let data = TensorData::from_le_bytes(dtype, guard.get(..bytes)?)?;
        HostTensor::new(dims.to_vec(), data).ok()
    }

    /// Reads the first elements into `tensor` in place (its type and shape say how many);
    /// `false` when they do not fit or the type cannot be overwritten in place.
    pub fn read_into(&self, tensor: &mut HostTensor) -> bool {
        let guard = self.lock();
        guard.get(..tensor.size_bytes()).is_some_and(|bytes| tensor.overwrite_le_bytes(bytes))
    }

    /// Writes a tensor's elements at the start; `false` when it does not fit.
    pub fn write_tensor(&self, tensor: &HostTensor) -> bool {
        self.write_bytes(&tensor.data().le_bytes())
    }

    fn lock(&self) -> MutexGuard<'_, Vec<u8>> {
        // Bytes stay valid bytes even if a writer panicked: recover the guard.
        self.0.bytes.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

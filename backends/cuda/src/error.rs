//! The CUDA backend's errors: what the driver, NVRTC and the libraries report, and how a
//! kernel error reaches the runtime (out of memory stays out of memory).

use cudarc::driver::DriverError;
use kiln::DataType;
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum GpuError {
    #[error("CUDA is not available: {0}")]
    Unavailable(String),
    #[error("out of device memory allocating {bytes} bytes: {reason}")]
    OutOfMemory { bytes: usize, reason: String },
    #[error("CUDA driver call {call} failed: {reason}")]
    Driver { call: &'static str, reason: String },
    #[error("compiling kernels: {0}")]
    Compile(#[from] crate::nvrtc::CompileError),
    #[error("kernel `{0}` is not in kiln's kernel sources")]
    UnknownKernel(String),
    #[error("{0} tensors have no device representation here")]
    UnsupportedDtype(DataType),
    /// Something a CUDA graph cannot hold was asked for while capturing one.
    #[error("not capturable as a CUDA graph: {0}")]
    Capture(String),
}

pub(crate) fn driver(call: &'static str) -> impl Fn(DriverError) -> GpuError {
    move |e| GpuError::Driver { call, reason: format!("{e:?}") }
}
impl From<GpuError> for kiln::KernelError {
    fn from(e: GpuError) -> kiln::KernelError {
        match e {
            GpuError::OutOfMemory { .. } => kiln::KernelError::OutOfMemory(e.to_string()),
            GpuError::UnsupportedDtype(_) => kiln::KernelError::Unsupported(e.to_string()),
            other => kiln::KernelError::Invalid(other.to_string()),
        }
    }
}

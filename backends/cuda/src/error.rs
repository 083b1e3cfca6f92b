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
    /// A launch whose arguments do not match the kernel's parameters.
    #[error("{0}")]
    Launch(String),
    /// A cuDNN or cuBLASLt call failed.
    #[error("{call} failed: {reason}")]
    Library { call: &'static str, reason: String },
    /// A case a library or kernel does not handle (a layout, a window, a type).
    #[error("{0}")]
    Unsupported(String),
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
            GpuError::UnsupportedDtype(_) | GpuError::Unsupported(_) => kiln::KernelError::Unsupported(e.to_string()),
            other => kiln::KernelError::Invalid(other.to_string()),
        }
    }
}

/// A message from a library or kernel planner: a case it does not handle.
impl From<String> for GpuError {
    fn from(reason: String) -> GpuError {
        GpuError::Unsupported(reason)
    }
}

impl From<&str> for GpuError {
    fn from(reason: &str) -> GpuError {
        GpuError::Unsupported(reason.to_string())
    }
}

/// `e` as the runtime sees it, at `layer` (out of memory and a missing CUDA keep their kinds).
pub(crate) fn gpu_error(layer: &str, e: GpuError) -> kiln::BackendError {
    use kiln::BackendError;
    match e {
        GpuError::OutOfMemory { .. } => BackendError::OutOfMemory { backend: "cuda".into(), reason: format!("layer `{layer}`: {e}") },
        GpuError::Unavailable(reason) => BackendError::Unavailable { backend: "cuda".into(), reason },
        other => BackendError::Execution { layer: layer.into(), reason: other.to_string() },
    }
}

//! kiln's CUDA backend: NVRTC-compiled kernels (`/kernels/*.cu`) and cuBLASLt on NVIDIA GPUs.
//!
//! Nothing of CUDA is needed to build: the driver, NVRTC and cuBLASLt are opened at run time,
//! and [`probe`] checks for them before any cudarc call (cudarc panics on a missing library),
//! so a machine without them gets [`BackendError::Unavailable`] naming what is missing.
//! `unsafe` lives only in the FFI and device-memory modules ([`nvrtc`], `device`, `blas`),
//! each block with a `// SAFETY:` comment.

pub mod kernels;
pub mod nvrtc;
pub mod probe;

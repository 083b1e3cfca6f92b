//! kiln: builds optimized inference engines from neural networks and runs them.
//!
//! Data flow: a network (from the ONNX importer or the network-definition API in
//! [`Network`]) is validated as it is built, turned into an [`Engine`] for one backend by
//! the [`Builder`], serialized to an engine file, loaded back, and run through an
//! [`ExecutionContext`].
//!
//! `docs/embedding.md` in the repository is a guide to these steps, with examples that run
//! as doctests of the `kiln-examples` crate; `docs/tutorial.md` shows them through the
//! `kiln` command.
#![forbid(unsafe_code)]

/// The kiln version that wrote an engine or a timing cache; engines load only into the
/// same version (§6.7).
pub const KILN_VERSION: &str = env!("CARGO_PKG_VERSION");

pub mod backend;
pub mod build_report;
pub mod builder;
pub mod config;
pub mod device;
pub mod device_io;
pub mod engine;
pub mod error;
pub mod inspector;
pub mod io_format;
pub mod ir;
pub mod limits;
pub mod memory_plan;
pub mod passes;
pub mod plan;
pub mod plugin;
pub mod precision;
pub mod profile;
pub mod quant;
pub mod refit;
pub mod runtime;
pub mod sparsity;
pub mod tactics;

pub use backend::{Backend, DeviceRun, DeviceTimes, Executable, LayerTimes, MathMode, PrecisionSupport};
pub use device_io::{DeviceAllocation, DeviceInput, DeviceIo, DeviceOutput, DevicePointer, OutputAllocator};
pub use device::DeviceFingerprint;
pub use error::{BackendError, NetworkError};
pub use runtime::machine::KernelError;
pub use build_report::{BuildOutput, BuildSummary};
pub use builder::{calibrate, BuildError, Builder};
pub use config::{BuilderConfig, BuilderFlag, BuilderFlags, Optimization, ProfilingVerbosity};
pub use inspector::{EngineInspector, InspectorError, LayerInformationFormat};
pub use io_format::IoFormatError;
pub use ir::format::{FormatMask, TensorFormat};
pub use precision::PrecisionError;
pub use engine::{Engine, EngineLoadError};
pub use ir::dtype::DataType;
pub use ir::narrow::{bf16_from_f64, f16_from_f64, E8M0Rounding, F4E2M1, F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ, F8E8M0, I2, I4, U2, U4};
pub use ir::layer::*;
pub use ir::network::{Layer, LayerId, Network, TensorDesc, TensorId};
pub use ir::shape::{Dim, Shape};
pub use ir::tensor::{HostTensor, ShapeMismatch, TensorData};
pub use memory_plan::MemoryPlan;
pub use profile::{OptimizationProfile, ProfileError};
pub use tactics::{AlgorithmSelector, TacticDesc, TacticId, TimingCache};
pub use runtime::{Buffer, Event, ExecutionContext, PreparedEngine, RunError, Stream};

//! kiln: builds optimized inference engines from neural networks and runs them.
//!
//! Data flow: a network (from the ONNX importer or the network-definition API in
//! [`Network`]) is validated as it is built, turned into an [`Engine`] for one backend by
//! the [`Builder`], serialized to an engine file, loaded back, and run through an
//! [`ExecutionContext`].
#![forbid(unsafe_code)]

pub mod backend;
pub mod builder;
pub mod engine;
pub mod error;
pub mod ir;
pub mod passes;
pub mod memory_plan;
pub mod profile;
pub mod runtime;

pub use backend::{Backend, BackendError, DeviceFingerprint, Executable};
pub use builder::{BuildError, Builder, BuilderConfig, Optimization};
pub use engine::{Engine, EngineLoadError};
pub use error::NetworkError;
pub use ir::dtype::DataType;
pub use ir::format::TensorFormat;
pub use ir::layer::*;
pub use ir::network::{Layer, LayerId, Network, TensorDesc, TensorId};
pub use ir::shape::{Dim, Shape};
pub use ir::tensor::{HostTensor, ShapeMismatch, TensorData};
pub use memory_plan::MemoryPlan;
pub use profile::{OptimizationProfile, ProfileError};
pub use runtime::{Buffer, Event, ExecutionContext, PreparedEngine, RunError, Stream};

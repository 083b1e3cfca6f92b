//! Custom layers (TensorRT's IPluginV3 in kiln's terms): the safe interface a plugin
//! implements, split into core (outputs), build (formats, configuration, workspace,
//! tactics) and runtime (per-backend execution) capabilities.
//!
//! A Plugin layer carries its instance ([`PluginParams::plugin`]), so shape inference and
//! every backend (a backend library too) use the plugin the network was made with; the
//! process-wide registry (`crate::plugin`) only makes instances, at import and engine load.
//! Plugins from shared libraries reach this interface through the C ABI (`plugins/abi`,
//! loaded by `kiln-plugins`); Rust code may implement it directly.

mod infer;
mod shape;

pub(crate) use infer::infer_plugin;
pub use shape::DimExpr;

use crate::ir::dtype::DataType;
use crate::ir::format::TensorFormat;
use serde::{Deserialize, Serialize};
use crate::ir::tensor::HostTensor;
use std::fmt;
use std::sync::Arc;
use thiserror::Error;

/// `namespace::name@version`, the registry's key.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PluginKey {
    pub namespace: String,
    pub name: String,
    pub version: String,
}

impl PluginKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>, version: impl Into<String>) -> PluginKey {
        PluginKey { namespace: namespace.into(), name: name.into(), version: version.into() }
    }

    pub fn of(params: &PluginParams) -> PluginKey {
        PluginKey::new(&params.namespace, &params.name, &params.version)
    }
}

impl fmt::Display for PluginKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}::{}@{}", self.namespace, self.name, self.version)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum PluginError {
    #[error("plugin `{0}` is not registered (load the library that provides it: --plugins or KILN_PLUGIN_PATH)")]
    NotRegistered(String),
    #[error("plugin `{0}` is already registered")]
    Duplicate(String),
    #[error("plugin `{plugin}`: {message}")]
    Failed { plugin: String, message: String },
    #[error("plugin `{plugin}` is inconsistent: {message}")]
    Inconsistent { plugin: String, message: String },
    #[error("plugin library `{library}`: {message}")]
    Library { library: String, message: String },
    #[error("plugin `{plugin}` has no {backend} implementation")]
    NoImplementation { plugin: String, backend: String },
}

/// The type of a creator's field, as TensorRT's PluginFieldType.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldType {
    F32,
    F64,
    I32,
    I64,
    Bytes,
    Text,
}

impl FieldType {
    pub fn of(field: &PluginField) -> FieldType {
        match field {
            PluginField::F32(_) => FieldType::F32,
            PluginField::F64(_) => FieldType::F64,
            PluginField::I32(_) => FieldType::I32,
            PluginField::I64(_) => FieldType::I64,
            PluginField::Bytes(_) => FieldType::Bytes,
            PluginField::Text(_) => FieldType::Text,
        }
    }
}

/// A field a creator accepts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldSpec {
    pub name: String,
    pub ty: FieldType,
}

/// One input or output as the build capability sees it: type, format and dims (`None`
/// where the dim is not known until run time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginTensorDesc {
    pub dtype: DataType,
    pub format: TensorFormat,
    pub dims: Vec<Option<usize>>,
}

/// A WGSL kernel a plugin gives the wgpu backend: bindings 0.. are the inputs then the
/// outputs (storage buffers, in order), dispatched as `workgroups`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WgslKernel {
    pub source: String,
    pub entry_point: String,
    pub workgroups: [u32; 3],
}

/// A CUDA kernel a plugin gives the cuda backend, as PTX or CUBIN, launched with the
/// input then output device pointers followed by the element count (u64).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaKernel {
    pub image: CudaImage,
    pub entry_point: String,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_memory_bytes: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CudaImage {
    Ptx(String),
    Cubin(Vec<u8>),
    /// CUDA C++ source for NVRTC.
    Source(String),
}

/// A custom layer instance, created by its [`PluginCreator`] from fields.
pub trait LayerPlugin: Send + Sync + fmt::Debug {
    fn key(&self) -> PluginKey;

    // Core capability: what the layer produces.
    fn num_outputs(&self) -> usize;
    fn output_types(&self, inputs: &[DataType]) -> Result<Vec<DataType>, PluginError>;
    /// Output dims as expressions of the input dims (`input_ranks` per input).
    fn output_shapes(&self, input_ranks: &[usize]) -> Result<Vec<Vec<DimExpr>>, PluginError>;

    // Build capability.
    /// Whether position `pos` (inputs first, then outputs) may have `io[pos]`'s type and
    /// format, given the earlier positions.
    fn supports_format_combination(&self, pos: usize, io: &[PluginTensorDesc], num_inputs: usize) -> bool;
    fn configure(&self, io: &[PluginTensorDesc], num_inputs: usize) -> Result<(), PluginError>;
    fn workspace_size(&self, io: &[PluginTensorDesc], num_inputs: usize) -> u64;
    /// Tactic ids; 0 is the default.
    fn tactics(&self) -> Vec<u32> {
        vec![0]
    }
    /// What distinguishes instances in the timing cache (kiln adds the I/O description).
    fn timing_cache_id(&self) -> String;
    /// The fields that recreate this instance (stored in the engine).
    fn fields(&self) -> Vec<(String, PluginField)>;

    // Runtime capability, per backend; `None` when the plugin has no such implementation.
    /// Whether the plugin has an implementation for `backend` ("cpu", "wgpu", "cuda").
    fn runs_on(&self, backend: &str) -> bool;
    /// Runs on host tensors; `outputs` arrive sized and zeroed.
    fn enqueue_cpu(
        &self,
        tactic: u32,
        inputs: &[&HostTensor],
        outputs: &mut [HostTensor],
        workspace: &mut [u8],
    ) -> Option<Result<(), PluginError>>;
    fn wgsl_kernel(&self, io: &[PluginTensorDesc], num_inputs: usize) -> Option<Result<WgslKernel, PluginError>>;
    fn cuda_kernel(&self, io: &[PluginTensorDesc], num_inputs: usize) -> Option<Result<CudaKernel, PluginError>>;
}

/// Makes plugin instances from fields (TensorRT's IPluginCreatorV3One).
pub trait PluginCreator: Send + Sync + fmt::Debug {
    fn key(&self) -> PluginKey;
    fn field_specs(&self) -> Vec<FieldSpec>;
    fn create(&self, fields: &[(String, PluginField)]) -> Result<Arc<dyn LayerPlugin>, PluginError>;
    /// Where the creator came from (a library path, or "built in").
    fn origin(&self) -> String {
        "built in".into()
    }
}

/// A plugin field, as TensorRT's PluginField.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum PluginField {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    Bytes(Vec<u8>),
    Text(String),
}

/// A Plugin layer: the key and fields that recreate its instance, and the instance.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PluginParams {
    pub namespace: String,
    pub name: String,
    pub version: String,
    pub fields: Vec<(String, PluginField)>,
    pub num_outputs: usize,
    /// Not stored in engine files: loading one makes it anew from the registry
    /// (`crate::plugin::resolve`).
    #[serde(skip)]
    pub instance: PluginInstance,
}

impl PluginParams {
    /// The parameters of a layer running `plugin`.
    pub fn new(plugin: Arc<dyn LayerPlugin>) -> PluginParams {
        let key = plugin.key();
        PluginParams {
            namespace: key.namespace,
            name: key.name,
            version: key.version,
            fields: plugin.fields(),
            num_outputs: plugin.num_outputs(),
            instance: PluginInstance::new(plugin),
        }
    }

    /// The layer's plugin instance; an error when the layer was read without one being
    /// made (its creator is not registered).
    pub fn plugin(&self) -> Result<&Arc<dyn LayerPlugin>, PluginError> {
        self.instance.get().ok_or_else(|| PluginError::NotRegistered(PluginKey::of(self).to_string()))
    }
}

/// The instance a Plugin layer runs. Two layers' parameters are equal when their key and
/// fields are: the instance is what those fields make.
#[derive(Clone, Default)]
pub struct PluginInstance(Option<Arc<dyn LayerPlugin>>);

impl PluginInstance {
    pub fn new(plugin: Arc<dyn LayerPlugin>) -> PluginInstance {
        PluginInstance(Some(plugin))
    }

    pub fn get(&self) -> Option<&Arc<dyn LayerPlugin>> {
        self.0.as_ref()
    }
}

impl PartialEq for PluginInstance {
    fn eq(&self, _: &PluginInstance) -> bool {
        true
    }
}

impl fmt::Debug for PluginInstance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() { "PluginInstance(made)" } else { "PluginInstance(none)" })
    }
}

//! Write kiln plugins in safe Rust.
//!
//! Implement [`Plugin`] for the layer and [`Creator`] for what makes it from fields, then
//! export the library's creators with [`export_plugins!`]; build the crate as a `cdylib`
//! and load it with `kiln … --plugins libyours.so` or `KILN_PLUGIN_PATH`. The macro builds
//! the C vtables of `kiln_plugin.h` and catches panics at the boundary, so a panicking
//! plugin becomes an error kiln reports, never an abort. No kiln crate is needed.

#[doc(hidden)]
pub mod export;

pub use kiln_plugin_abi as abi;

/// Element types (ONNX's codes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum ElementType {
    F32 = 1,
    U8 = 2,
    I8 = 3,
    U16 = 4,
    I16 = 5,
    I32 = 6,
    I64 = 7,
    Bool = 9,
    F16 = 10,
    F64 = 11,
    U32 = 12,
    U64 = 13,
    BF16 = 16,
}

impl ElementType {
    pub fn from_code(code: i32) -> Option<ElementType> {
        use ElementType as E;
        [E::F32, E::U8, E::I8, E::U16, E::I16, E::I32, E::I64, E::Bool, E::F16, E::F64, E::U32, E::U64, E::BF16]
            .into_iter()
            .find(|e| *e as i32 == code)
    }
}

/// An input or output: type and dims (`None` where unknown until run time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorDesc {
    pub dtype: ElementType,
    pub dims: Vec<Option<usize>>,
}

impl TensorDesc {
    /// The element count, when every dim is known.
    pub fn volume(&self) -> Option<usize> {
        self.dims.iter().try_fold(1usize, |acc, d| d.map(|d| acc * d))
    }
}

/// An output dim as an expression of the input dims.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DimExpr {
    Const(i64),
    /// Dim `axis` of input `input`.
    Input {
        input: usize,
        axis: usize,
    },
    Add(Box<DimExpr>, Box<DimExpr>),
    Sub(Box<DimExpr>, Box<DimExpr>),
    Mul(Box<DimExpr>, Box<DimExpr>),
    FloorDiv(Box<DimExpr>, Box<DimExpr>),
    CeilDiv(Box<DimExpr>, Box<DimExpr>),
    Max(Box<DimExpr>, Box<DimExpr>),
    Min(Box<DimExpr>, Box<DimExpr>),
}

impl DimExpr {
    /// Every dim of input `input` (rank `rank`), unchanged: the common elementwise case.
    pub fn same_as_input(input: usize, rank: usize) -> Vec<DimExpr> {
        (0..rank).map(|axis| DimExpr::Input { input, axis }).collect()
    }
}

/// A plugin field value.
#[derive(Clone, Debug, PartialEq)]
pub enum Field {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    Bytes(Vec<u8>),
    Text(String),
}

/// The type of a field a creator accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum FieldType {
    F32 = 0,
    F64 = 1,
    I32 = 2,
    I64 = 3,
    Bytes = 4,
    Text = 5,
}

/// The fields a creator receives.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fields(pub Vec<(String, Field)>);

impl Fields {
    pub fn get(&self, name: &str) -> Option<&Field> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, f)| f)
    }

    /// A single f32 (an F32 or F64 field of one element), or `default` when absent.
    pub fn f32_or(&self, name: &str, default: f32) -> Result<f32, String> {
        match self.get(name) {
            None => Ok(default),
            Some(Field::F32(v)) if v.len() == 1 => Ok(v[0]),
            Some(Field::F64(v)) if v.len() == 1 => Ok(v[0] as f32),
            Some(other) => Err(format!("field `{name}` must be one float, got {other:?}")),
        }
    }
}

/// A host tensor an input arrives as.
#[derive(Debug)]
pub struct CpuTensor<'a> {
    pub desc: TensorDesc,
    pub(crate) bytes: &'a [u8],
}

/// A host tensor an output is written through.
#[derive(Debug)]
pub struct CpuTensorMut<'a> {
    pub desc: TensorDesc,
    pub(crate) bytes: &'a mut [u8],
}

impl CpuTensor<'_> {
    pub fn f32(&self) -> Result<&[f32], String> {
        export::typed(self.bytes, self.desc.dtype, ElementType::F32)
    }
}

impl CpuTensorMut<'_> {
    pub fn f32_mut(&mut self) -> Result<&mut [f32], String> {
        export::typed_mut(self.bytes, self.desc.dtype, ElementType::F32)
    }
}

/// A WGSL kernel for the wgpu backend: bindings 0.. are the inputs then the outputs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WgslKernel {
    pub source: String,
    pub entry_point: String,
    pub workgroups: [u32; 3],
}

/// A CUDA kernel for the cuda backend, launched with the input then output device
/// pointers followed by the element count (u64).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaKernel {
    /// CUDA C++ source for NVRTC (`CudaImage::Source`), PTX or CUBIN.
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
    Source(String),
}

/// A custom layer (core, build and runtime capabilities of TensorRT's IPluginV3).
/// Runtime entries a plugin does not have stay `None` through the `RUNS_ON_*` consts.
pub trait Plugin: Send + 'static {
    /// Whether [`Plugin::enqueue_cpu`] / [`Plugin::wgsl_kernel`] / [`Plugin::cuda_kernel`] exist.
    const RUNS_ON_CPU: bool;
    const RUNS_ON_WGPU: bool;
    const RUNS_ON_CUDA: bool;

    fn num_outputs(&self) -> usize;
    fn output_types(&self, inputs: &[ElementType]) -> Result<Vec<ElementType>, String>;
    fn output_shapes(&self, input_ranks: &[usize]) -> Result<Vec<Vec<DimExpr>>, String>;
    /// Whether position `pos` (inputs, then outputs) may have `io[pos]`'s type; formats
    /// are LINEAR in ABI 1.
    fn supports_format_combination(&self, pos: usize, io: &[TensorDesc], num_inputs: usize) -> bool {
        let _ = (pos, io, num_inputs);
        true
    }
    fn configure(&mut self, io: &[TensorDesc], num_inputs: usize) -> Result<(), String> {
        let _ = (io, num_inputs);
        Ok(())
    }
    fn workspace_size(&self, io: &[TensorDesc], num_inputs: usize) -> u64 {
        let _ = (io, num_inputs);
        0
    }
    fn tactics(&self) -> Vec<u32> {
        vec![0]
    }
    fn timing_cache_id(&self) -> String {
        String::new()
    }
    /// The fields that recreate this instance (stored in the engine).
    fn serialize(&self) -> Vec<(String, Field)>;
    fn enqueue_cpu(
        &mut self,
        tactic: u32,
        inputs: &[CpuTensor<'_>],
        outputs: &mut [CpuTensorMut<'_>],
        workspace: &mut [u8],
    ) -> Result<(), String> {
        let _ = (tactic, inputs, outputs, workspace);
        Err("no cpu implementation".into())
    }
    fn wgsl_kernel(&self, io: &[TensorDesc], num_inputs: usize) -> Result<WgslKernel, String> {
        let _ = (io, num_inputs);
        Err("no wgpu implementation".into())
    }
    fn cuda_kernel(&self, io: &[TensorDesc], num_inputs: usize) -> Result<CudaKernel, String> {
        let _ = (io, num_inputs);
        Err("no cuda implementation".into())
    }
}

/// Makes plugins from fields (TensorRT's IPluginCreatorV3One).
pub trait Creator: 'static {
    const NAMESPACE: &'static str;
    const NAME: &'static str;
    const VERSION: &'static str;
    type Plugin: Plugin;
    fn field_specs() -> Vec<(&'static str, FieldType)>;
    fn create(fields: &Fields) -> Result<Self::Plugin, String>;
}

/// Exports a plugin library: `export_plugins!("my-plugins", [CreatorA, CreatorB]);`
/// defines `kiln_plugin_library_v1`, the entry point kiln looks for.
#[macro_export]
macro_rules! export_plugins {
    ($library:expr, [$($creator:ty),* $(,)?]) => {
        #[no_mangle]
        pub extern "C" fn kiln_plugin_library_v1() -> *const $crate::abi::kiln_plugin_library {
            static LIBRARY: ::std::sync::OnceLock<$crate::export::Library> = ::std::sync::OnceLock::new();
            LIBRARY
                .get_or_init(|| $crate::export::Library::new($library, vec![$($crate::export::CreatorEntry::of::<$creator>()),*]))
                .raw()
        }
    };
}

//! The device-memory and launch layer (FFI module: `unsafe` lives here and in `blas`).
//!
//! A [`Gpu`] is one CUDA context with one stream, kiln's kernels loaded from CUBIN, and a
//! cuBLASLt handle. Everything above it works with [`DeviceTensor`]s and [`Arg`] lists and never
//! touches a raw pointer.

use crate::kernels::Source;
use crate::probe;
use cudarc::driver::{sys, CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DeviceRepr, DriverError, LaunchConfig};
use cudarc::driver::{DevicePtr, PushKernelArg};
use cudarc::nvrtc::Ptx;
use kiln::{DataType, DeviceFingerprint, HostTensor, TensorData};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
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
}

fn driver(call: &'static str) -> impl Fn(DriverError) -> GpuError {
    move |e| GpuError::Driver { call, reason: format!("{e:?}") }
}

/// A tensor in device memory: packed row-major bytes of `dtype` (bools as one byte each).
#[derive(Clone, Debug)]
pub struct DeviceTensor {
    pub buf: Arc<CudaSlice<u8>>,
    pub dtype: DataType,
    pub shape: Vec<usize>,
    /// The bytes are stored channels-last (NHWC) though `shape` stays NCHW: only the layers
    /// that know the layout (cuDNN convolution and pooling) ever see such a tensor;
    /// `ops::Ctx::dev` converts it for every other reader.
    pub channels_last: bool,
}

impl DeviceTensor {
    /// A row-major (channels-first) tensor.
    pub fn new(buf: Arc<CudaSlice<u8>>, dtype: DataType, shape: Vec<usize>) -> DeviceTensor {
        DeviceTensor { buf, dtype, shape, channels_last: false }
    }

    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The same bytes under another shape (a reshape costs nothing).
    pub fn reshaped(&self, shape: Vec<usize>) -> DeviceTensor {
        DeviceTensor::new(self.buf.clone(), self.dtype, shape)
    }
}

/// The strided view every data-movement and broadcasting kernel takes (`Layout` in common.cuh).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Layout {
    pub shape: [i64; 8],
    pub stride: [[i64; 8]; 3],
    pub offset: [i64; 3],
    pub rank: i32,
}

// SAFETY: plain `repr(C)` integers matching `struct Layout` in kernels/common.cuh field for field.
unsafe impl DeviceRepr for Layout {}

/// A convolution or pooling window (`Window` in kernels/spatial.cu).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Window {
    pub n: i64,
    pub c: i64,
    pub h: i64,
    pub w: i64,
    pub oc: i64,
    pub oh: i64,
    pub ow: i64,
    pub kh: i64,
    pub kw: i64,
    pub sh: i64,
    pub sw: i64,
    pub dh: i64,
    pub dw: i64,
    pub ph: i64,
    pub pw: i64,
    pub groups: i64,
    pub kind: i32,
    pub count_excludes_padding: i32,
    pub pad_end_h: i64,
    pub pad_end_w: i64,
}

// SAFETY: plain `repr(C)` scalars matching `struct Window` in kernels/spatial.cu field for field.
unsafe impl DeviceRepr for Window {}

/// Pointwise steps run in one pass (`Chain` in kernels/elementwise.cu; built by `ops::pointwise`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Chain {
    pub count: i32,
    pub kind: [i32; 8],
    pub code: [i32; 8],
    pub operand: [i32; 8],
    pub alpha: [f32; 8],
    pub beta: [f32; 8],
}

// SAFETY: plain `repr(C)` 32-bit scalars matching `struct Chain` in kernels/elementwise.cu field for field.
unsafe impl DeviceRepr for Chain {}

/// One kernel argument.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    I32(i32),
    I64(i64),
    F32(f32),
    Layout(Layout),
    Window(Window),
    Chain(Chain),
    /// A device address (from [`Gpu::ptr`]).
    Ptr(u64),
}

/// One context, stream, kernel set and cuBLASLt handle.
#[derive(Debug)]
pub struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub arch: String,
    modules: HashMap<Source, Arc<CudaModule>>,
    functions: Mutex<HashMap<String, CudaFunction>>,
    pub blas: crate::blas::Blas,
    /// cuDNN on this stream, opened on first use (Err: absent or failed; convolutions then
    /// run kiln's direct kernel).
    pub dnn: OnceLock<Result<crate::dnn::Dnn, String>>,
    /// Held by each execution: one stream, so runs on this device take turns.
    pub run_lock: Mutex<()>,
}

/// The CUBIN image of each source.
type Images = Vec<(Source, Arc<Vec<u8>>)>;

/// CUBIN per architecture and source, compiled once per process.
fn compiled(arch: &str) -> Result<Images, GpuError> {
    type Cache = Mutex<HashMap<String, Images>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(found) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(arch) {
        return Ok(found.clone());
    }
    let images = Source::ALL.iter().map(|&s| Ok((s, Arc::new(s.compile(arch)?)))).collect::<Result<Vec<_>, GpuError>>()?;
    cache.lock().unwrap_or_else(|p| p.into_inner()).insert(arch.to_string(), images.clone());
    Ok(images)
}

impl Gpu {
    /// Opens device `ordinal`, compiles (or reuses) kiln's kernels for its architecture and
    /// loads them.
    pub fn new(ordinal: usize) -> Result<Gpu, GpuError> {
        probe::libraries().runtime_ready().map_err(GpuError::Unavailable)?;
        let ctx = CudaContext::new(ordinal).map_err(driver("cuCtxCreate"))?;
        // One stream per Gpu: kernels are ordered by the stream, so cudarc's per-buffer
        // event tracking (meant for several streams) is pure overhead here.
        // SAFETY: no buffer of this context exists yet, so none has events to keep.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(driver("cuStreamCreate"))?;
        let (major, minor) = ctx.compute_capability().map_err(driver("cuDeviceGetAttribute"))?;
        let arch = format!("sm_{major}{minor}");
        let mut modules = HashMap::new();
        for (source, image) in compiled(&arch)? {
            let module = ctx.load_module(Ptx::from_binary(image.as_ref().clone())).map_err(driver("cuModuleLoadData"))?;
            modules.insert(source, module);
        }
        let blas = crate::blas::Blas::new(stream.clone())?;
        Ok(Gpu { ctx, stream, arch, modules, functions: Mutex::new(HashMap::new()), blas, dnn: OnceLock::new(), run_lock: Mutex::new(()) })
    }

    /// What identifies this device for engine compatibility.
    pub fn fingerprint(&self) -> Result<DeviceFingerprint, GpuError> {
        use sys::CUdevice_attribute as A;
        let attr = |a: A| self.ctx.attribute(a).map_err(driver("cuDeviceGetAttribute"));
        let mut version = 0i32;
        // SAFETY: `version` is a valid out-pointer; the driver library is loaded (probed).
        unsafe { sys::cuDriverGetVersion(&mut version) }.result().map_err(driver("cuDriverGetVersion"))?;
        let (major, minor) = self.ctx.compute_capability().map_err(driver("cuDeviceGetAttribute"))?;
        Ok(DeviceFingerprint {
            backend: "cuda".into(),
            name: self.ctx.name().map_err(driver("cuDeviceGetName"))?,
            compute_capability: format!("{major}.{minor}"),
            driver_version: format!("{}.{}", version / 1000, (version % 1000) / 10),
            memory_bytes: self.ctx.total_mem().map_err(driver("cuDeviceTotalMem"))? as u64,
            memory_bus_width_bits: attr(A::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)? as u32,
            l2_cache_bytes: attr(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as u64,
            shared_memory_per_block: attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)? as u64,
            shared_memory_per_multiprocessor: attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)? as u64,
            texture_alignment: attr(A::CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT)? as u64,
            multiprocessor_count: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
            integrated: attr(A::CU_DEVICE_ATTRIBUTE_INTEGRATED)? != 0,
        })
    }

    /// Uninitialized device bytes (at least one, so an empty tensor still has an address).
    pub fn alloc(&self, bytes: usize) -> Result<CudaSlice<u8>, GpuError> {
        // SAFETY: the memory is uninitialized; every kernel writing a fresh output covers all
        // of its `bytes` before anything reads them.
        unsafe { self.stream.alloc::<u8>(bytes.max(1)) }.map_err(|e| match e.0 {
            sys::cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY => GpuError::OutOfMemory { bytes, reason: format!("{e:?}") },
            _ => GpuError::Driver { call: "cuMemAllocAsync", reason: format!("{e:?}") },
        })
    }

    pub fn empty(&self, dtype: DataType, shape: Vec<usize>) -> Result<DeviceTensor, GpuError> {
        let bytes = storage_size(dtype)? * shape.iter().product::<usize>();
        Ok(DeviceTensor::new(Arc::new(self.alloc(bytes)?), dtype, shape))
    }

    pub fn upload(&self, t: &HostTensor) -> Result<DeviceTensor, GpuError> {
        storage_size(t.dtype())?;
        let bytes = t.data().to_le_bytes();
        let mut buf = self.alloc(bytes.len())?;
        if !bytes.is_empty() {
            self.stream.memcpy_htod(&bytes, &mut buf.slice_mut(..bytes.len())).map_err(driver("cuMemcpyHtoDAsync"))?;
        }
        Ok(DeviceTensor::new(Arc::new(buf), t.dtype(), t.shape().to_vec()))
    }

    /// Copies back to the host (synchronizes the stream).
    pub fn download(&self, t: &DeviceTensor) -> Result<HostTensor, GpuError> {
        let size = storage_size(t.dtype)? * t.len();
        let mut bytes = vec![0u8; size];
        if size > 0 {
            self.stream.memcpy_dtoh(&t.buf.slice(..size), &mut bytes).map_err(driver("cuMemcpyDtoHAsync"))?;
        }
        self.stream.synchronize().map_err(driver("cuStreamSynchronize"))?;
        let data = TensorData::from_le_bytes(t.dtype, &bytes).ok_or(GpuError::UnsupportedDtype(t.dtype))?;
        HostTensor::new(t.shape.clone(), data).map_err(|e| GpuError::Driver { call: "download", reason: e.to_string() })
    }

    /// A buffer's device address, for [`Arg::Ptr`].
    pub fn ptr(&self, buf: &CudaSlice<u8>) -> u64 {
        let (p, _guard) = buf.device_ptr(&self.stream);
        p
    }

    /// Device-to-device copy of `bytes` bytes.
    pub fn copy(&self, src: &CudaSlice<u8>, dst: &mut CudaSlice<u8>, bytes: usize) -> Result<(), GpuError> {
        if bytes > 0 {
            self.stream.memcpy_dtod(&src.slice(..bytes), &mut dst.slice_mut(..bytes)).map_err(driver("cuMemcpyDtoDAsync"))?;
        }
        Ok(())
    }

    /// Milliseconds of each of `reps` runs of `f` on this stream, between CUDA events recorded
    /// around each run (after one untimed warm-up run), sorted ascending. Runs are enqueued
    /// back to back and waited for once at the end, so host work overlaps device work as in a
    /// serving loop; a run whose host side is slower than its device side shows the gap.
    pub fn time_ms(&self, reps: usize, mut f: impl FnMut() -> Result<(), String>) -> Result<Vec<f32>, String> {
        let event = || self.ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(|e| format!("cuEventCreate: {e:?}"));
        f()?;
        self.synchronize().map_err(|e| e.to_string())?;
        let marks = (0..reps).map(|_| Ok((event()?, event()?))).collect::<Result<Vec<_>, String>>()?;
        for (start, end) in &marks {
            start.record(&self.stream).map_err(|e| format!("cuEventRecord: {e:?}"))?;
            f()?;
            end.record(&self.stream).map_err(|e| format!("cuEventRecord: {e:?}"))?;
        }
        self.synchronize().map_err(|e| e.to_string())?;
        let mut times = marks.iter().map(|(s, e)| s.elapsed_ms(e).map_err(|e| format!("cuEventElapsedTime: {e:?}"))).collect::<Result<Vec<f32>, _>>()?;
        times.sort_by(f32::total_cmp);
        Ok(times)
    }

    /// cuDNN on this device's stream, or why not.
    pub fn dnn(&self) -> Result<&crate::dnn::Dnn, String> {
        self.dnn.get_or_init(|| crate::dnn::Dnn::new(self)).as_ref().map_err(Clone::clone)
    }

    pub fn synchronize(&self) -> Result<(), GpuError> {
        self.stream.synchronize().map_err(driver("cuStreamSynchronize"))
    }

    fn function(&self, name: &str) -> Result<CudaFunction, GpuError> {
        let mut functions = self.functions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = functions.get(name) {
            return Ok(f.clone());
        }
        let source = Source::of_kernel(name).ok_or_else(|| GpuError::UnknownKernel(name.into()))?;
        let module = self.modules.get(&source).ok_or_else(|| GpuError::UnknownKernel(name.into()))?;
        let f = module.load_function(name).map_err(|_| GpuError::UnknownKernel(name.into()))?;
        functions.insert(name.to_string(), f.clone());
        Ok(f)
    }

    /// Launches `name` over `grid` x `block` threads with `args` in the kernel's parameter order.
    pub fn launch(&self, name: &str, grid: u32, block: u32, args: &[Arg]) -> Result<(), GpuError> {
        if grid == 0 {
            return Ok(());
        }
        let f = self.function(name)?;
        let mut b = self.stream.launch_builder(&f);
        for a in args {
            match a {
                Arg::I32(v) => b.arg(v),
                Arg::I64(v) => b.arg(v),
                Arg::F32(v) => b.arg(v),
                Arg::Layout(v) => b.arg(v),
                Arg::Window(v) => b.arg(v),
                Arg::Chain(v) => b.arg(v),
                Arg::Ptr(v) => b.arg(v),
            };
        }
        let cfg = LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (block, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: `args` match the kernel's parameters in order and type (each op module builds
        // them beside the kernel's signature); every pointer is to a live buffer of this context
        // that is large enough for the indices the kernel computes from the other arguments.
        unsafe { b.launch(cfg) }.map_err(driver("cuLaunchKernel"))?;
        Ok(())
    }

    /// A one-thread-per-element launch over `n` elements (grid-stride loops cap the grid).
    pub fn launch_elements(&self, name: &str, n: usize, args: &[Arg]) -> Result<(), GpuError> {
        let block = 256u32;
        let grid = n.div_ceil(block as usize).min(65_535 * 8) as u32;
        self.launch(name, grid, block, args)
    }
}

/// Bytes per element on the device; the types kiln's kernels handle.
pub fn storage_size(dtype: DataType) -> Result<usize, GpuError> {
    Ok(match dtype {
        DataType::F32 | DataType::I32 | DataType::U32 => 4,
        DataType::F16 | DataType::BF16 | DataType::I16 | DataType::U16 => 2,
        DataType::F64 | DataType::I64 | DataType::U64 => 8,
        DataType::I8 | DataType::U8 | DataType::Bool => 1,
        // Storage-only types: one element per byte, as kiln's host tensors hold them.
        DataType::F8E4M3FN
        | DataType::F8E4M3FNUZ
        | DataType::F8E5M2
        | DataType::F8E5M2FNUZ
        | DataType::F8E8M0
        | DataType::F4E2M1
        | DataType::I4
        | DataType::U4
        | DataType::I2
        | DataType::U2 => 1,
        #[allow(unreachable_patterns)]
        other => return Err(GpuError::UnsupportedDtype(other)),
    })
}

/// Kernel-name suffix of a float type (`f32`, `f16`, `bf16`).
pub fn float_suffix(dtype: DataType) -> Result<&'static str, GpuError> {
    match dtype {
        DataType::F32 => Ok("f32"),
        DataType::F16 => Ok("f16"),
        DataType::BF16 => Ok("bf16"),
        other => Err(GpuError::UnsupportedDtype(other)),
    }
}

/// Kernel-name suffix of a data-movement kernel by element width (`u8` … `u64`).
pub fn width_suffix(dtype: DataType) -> Result<&'static str, GpuError> {
    Ok(match storage_size(dtype)? {
        1 => "u8",
        2 => "u16",
        4 => "u32",
        _ => "u64",
    })
}

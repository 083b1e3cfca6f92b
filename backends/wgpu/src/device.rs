//! The device layer: one shared wgpu device per process, its limits, buffers, pipelines and
//! the errors a device can raise (no adapter, device lost, out of memory, limit exceeded).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use thiserror::Error;
use wgpu::util::DeviceExt;

/// What every launcher returns: device errors keep their kind (out of memory, device lost).
pub type KResult<T> = Result<T, kiln::KernelError>;

/// Errors of the device layer.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum DeviceError {
    #[error("no wgpu adapter: {reason}")]
    NoAdapter { reason: String },
    #[error("the adapter `{adapter}` refused to open a device: {reason}")]
    RequestDevice { adapter: String, reason: String },
    #[error("the device was lost: {reason}")]
    DeviceLost { reason: String },
    #[error("out of device memory while {what}")]
    OutOfMemory { what: String },
    #[error(
        "{what} needs {needed} bytes in one binding; the adapter allows {limit} (max_storage_buffer_binding_size)"
    )]
    LimitExceeded { what: String, needed: u64, limit: u64 },
    #[error("wgpu validation failed while {what}: {reason}")]
    Validation { what: String, reason: String },
    #[error("reading a buffer back failed: {reason}")]
    Readback { reason: String },
}

/// Workgroup size of every 1-D kernel (WGSL `@workgroup_size(256)`); the WebGPU default
/// limit on invocations per workgroup is 256, so it runs on every adapter.
pub const WORKGROUP: u32 = 256;

/// The shared device with its queue, limits and pipeline cache.
pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    pub limits: wgpu::Limits,
    pub features: wgpu::Features,
    /// Whether WGSL's `dot4I8Packed` is there (naga emits the adapter's integer dot product
    /// where it has one, shifts and multiplies elsewhere): INT8 products use it.
    pub packed_dot: bool,
    pipelines: Mutex<HashMap<String, Arc<wgpu::ComputePipeline>>>,
    lost: Arc<Mutex<Option<String>>>,
    /// Buffers created so far (tests check that steady-state executions create none).
    buffers_created: AtomicU64,
    /// Their bytes (tests check that a loop's memory does not grow with its trips).
    bytes_created: AtomicU64,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu").field("adapter", &self.info.name).field("backend", &self.info.backend).finish()
    }
}

static SHARED: OnceLock<Result<Gpu, DeviceError>> = OnceLock::new();

/// The process-wide device, opened on first use (tests share it rather than opening
/// hundreds of devices).
pub fn shared() -> Result<&'static Gpu, DeviceError> {
    SHARED.get_or_init(open).as_ref().map_err(Clone::clone)
}

/// The first adapter of `backends` (WGPU_BACKEND in the environment overrides them), and
/// the WGSL language features of its instance.
fn request_adapter(backends: wgpu::Backends) -> Result<(wgpu::Adapter, wgpu::WgslLanguageFeatures), DeviceError> {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    if wgpu::Backends::from_env().is_none() {
        desc.backends = backends;
    }
    let instance = wgpu::Instance::new(desc);
    let language = instance.wgsl_language_features();
    pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        force_fallback_adapter: false,
        compatible_surface: None,
        apply_limit_buckets: false,
    }))
    .map(|adapter| (adapter, language))
    .map_err(|e| DeviceError::NoAdapter { reason: e.to_string() })
}

fn open() -> Result<Gpu, DeviceError> {
    // Vulkan / Metal / DX12 first; GL only where none of them has an adapter.
    let (adapter, language) = request_adapter(wgpu::Backends::PRIMARY).or_else(|_| request_adapter(wgpu::Backends::GL))?;
    let info = adapter.get_info();
    let adapter_limits = adapter.limits();
    // Ask for everything the adapter offers that compute needs: bigger bindings and
    // workgroups than the WebGPU defaults.
    let limits = wgpu::Limits {
        max_storage_buffer_binding_size: adapter_limits.max_storage_buffer_binding_size,
        max_buffer_size: adapter_limits.max_buffer_size,
        max_storage_buffers_per_shader_stage: adapter_limits.max_storage_buffers_per_shader_stage,
        max_compute_workgroup_storage_size: adapter_limits.max_compute_workgroup_storage_size,
        max_compute_invocations_per_workgroup: adapter_limits.max_compute_invocations_per_workgroup,
        max_compute_workgroup_size_x: adapter_limits.max_compute_workgroup_size_x,
        max_compute_workgroup_size_y: adapter_limits.max_compute_workgroup_size_y,
        max_compute_workgroup_size_z: adapter_limits.max_compute_workgroup_size_z,
        max_compute_workgroups_per_dimension: adapter_limits.max_compute_workgroups_per_dimension,
        ..wgpu::Limits::downlevel_defaults()
    };
    let features = adapter.features() & (wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::SHADER_F16);
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("kiln-wgpu"),
        required_features: features,
        required_limits: limits.clone(),
        experimental_features: wgpu::ExperimentalFeatures::disabled(),
        memory_hints: wgpu::MemoryHints::Performance,
        trace: wgpu::Trace::Off,
    }))
    .map_err(|e| DeviceError::RequestDevice { adapter: info.name.clone(), reason: e.to_string() })?;
    let lost = Arc::new(Mutex::new(None));
    let lost_flag = lost.clone();
    device.set_device_lost_callback(move |reason, message| {
        if let Ok(mut slot) = lost_flag.lock() {
            *slot = Some(format!("{reason:?}: {message}"));
        }
    });
    // Errors are caught by error scopes around each operation; an uncaptured one is
    // reported at the next check rather than aborting the process.
    device.on_uncaptured_error(Arc::new(|e: wgpu::Error| eprintln!("kiln-wgpu: uncaptured wgpu error: {e}")));
    Ok(Gpu {
        device,
        queue,
        info,
        limits,
        features,
        packed_dot: language.contains(wgpu::WgslLanguageFeatures::Packed4x8IntegerDotProduct),
        pipelines: Mutex::new(HashMap::new()),
        lost,
        buffers_created: AtomicU64::new(0),
        bytes_created: AtomicU64::new(0),
    })
}

impl Gpu {
    /// Fails when the device has been lost since it was opened.
    pub fn check_alive(&self) -> Result<(), DeviceError> {
        match self.lost.lock().ok().and_then(|l| l.clone()) {
            Some(reason) => Err(DeviceError::DeviceLost { reason }),
            None => Ok(()),
        }
    }

    /// How many buffers this device has created (every creation goes through [`Gpu`]).
    pub fn buffers_created(&self) -> u64 {
        self.buffers_created.load(Ordering::Relaxed)
    }

    /// How many bytes the buffers this device has created hold, together.
    pub fn bytes_created(&self) -> u64 {
        self.bytes_created.load(Ordering::Relaxed)
    }

    fn count_buffer(&self, bytes: u64) {
        self.buffers_created.fetch_add(1, Ordering::Relaxed);
        self.bytes_created.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn max_binding(&self) -> u64 {
        self.limits.max_storage_buffer_binding_size.min(self.limits.max_buffer_size)
    }

    /// Runs `f` inside out-of-memory and validation error scopes and turns a captured
    /// error into a [`DeviceError`] naming `what`.
    pub fn scoped<T>(&self, what: &str, f: impl FnOnce() -> T) -> Result<T, DeviceError> {
        self.check_alive()?;
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let value = f();
        let validation = pollster::block_on(validation.pop());
        let oom = pollster::block_on(oom.pop());
        if oom.is_some() {
            return Err(DeviceError::OutOfMemory { what: what.to_string() });
        }
        if let Some(e) = validation {
            return Err(DeviceError::Validation { what: what.to_string(), reason: e.to_string() });
        }
        Ok(value)
    }

    fn check_size(&self, what: &str, bytes: u64) -> Result<(), DeviceError> {
        let limit = self.max_binding();
        if bytes > limit {
            return Err(DeviceError::LimitExceeded { what: what.to_string(), needed: bytes, limit });
        }
        Ok(())
    }

    /// A storage buffer of at least `bytes` (never empty: WebGPU refuses empty bindings).
    pub fn storage(&self, what: &str, bytes: u64) -> Result<wgpu::Buffer, DeviceError> {
        self.check_size(what, bytes)?;
        let size = bytes.max(4).next_multiple_of(4);
        self.count_buffer(size);
        self.scoped(what, || {
            self.device.create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        })
    }

    /// A storage buffer holding `words`.
    pub fn storage_init(&self, what: &str, words: &[u32]) -> Result<wgpu::Buffer, DeviceError> {
        self.check_size(what, words.len() as u64 * 4)?;
        let contents: &[u8] = if words.is_empty() { &[0; 4] } else { bytemuck::cast_slice(words) };
        self.count_buffer(contents.len() as u64);
        self.scoped(what, || {
            self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: None,
                contents,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            })
        })
    }

    /// The compute pipeline compiled from `source` (entry point `main`), cached by `key`.
    pub fn pipeline(
        &self,
        key: &str,
        source: impl FnOnce() -> String,
    ) -> Result<Arc<wgpu::ComputePipeline>, DeviceError> {
        if let Some(p) = self.pipelines.lock().map_err(|_| poisoned())?.get(key) {
            return Ok(p.clone());
        }
        let pipeline = Arc::new(self.compile(key, "main", source())?);
        self.pipelines.lock().map_err(|_| poisoned())?.insert(key.to_string(), pipeline.clone());
        Ok(pipeline)
    }

    /// Compiles `source` into a compute pipeline at `entry_point` (no caching; a WGSL or
    /// layout error is a [`DeviceError::Validation`] naming `label`).
    pub fn compile(&self, label: &str, entry_point: &str, source: String) -> Result<wgpu::ComputePipeline, DeviceError> {
        let what = format!("compiling shader `{label}`");
        self.scoped(&what, || {
            let module = self.device.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(label),
                source: wgpu::ShaderSource::Wgsl(source.into()),
            });
            self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(label),
                layout: None,
                module: &module,
                entry_point: Some(entry_point),
                compilation_options: wgpu::PipelineCompilationOptions::default(),
                cache: None,
            })
        })
    }

    /// Like [`Gpu::pipeline`], for kernels whose every index is in bounds by construction
    /// (guarded loads and stores, constant-bounded workgroup arrays): compiled without
    /// runtime bounds checks and without zero-filling workgroup memory (the kernel writes
    /// every stage before reading it). Cached in the same table under `key`.
    pub fn pipeline_trusted(
        &self,
        key: &str,
        source: impl FnOnce() -> String,
    ) -> Result<Arc<wgpu::ComputePipeline>, DeviceError> {
        if let Some(p) = self.pipelines.lock().map_err(|_| poisoned())?.get(key) {
            return Ok(p.clone());
        }
        let source = source();
        let what = format!("compiling shader `{key}`");
        let pipeline = self.scoped(&what, || {
            let desc = wgpu::ShaderModuleDescriptor { label: Some(key), source: wgpu::ShaderSource::Wgsl(source.into()) };
            // SAFETY: only called for kiln's generated matrix kernels (crate::gemm), whose
            // buffer indices are guarded against M, N, K and whose workgroup-array indices
            // are bounded by compile-time constants; wgpu still validates the WGSL.
            #[allow(unsafe_code)]
            let module =
                unsafe { self.device.create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked()) };
            self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(key),
                layout: None,
                module: &module,
                entry_point: Some("main"),
                compilation_options: wgpu::PipelineCompilationOptions {
                    zero_initialize_workgroup_memory: false,
                    ..Default::default()
                },
                cache: None,
            })
        })?;
        let pipeline = Arc::new(pipeline);
        self.pipelines.lock().map_err(|_| poisoned())?.insert(key.to_string(), pipeline.clone());
        Ok(pipeline)
    }

    /// A mappable buffer of `bytes` to read results back through.
    pub fn readback_buffer(&self, bytes: u64) -> Result<wgpu::Buffer, DeviceError> {
        let size = bytes.max(4).next_multiple_of(4);
        self.count_buffer(size);
        self.scoped("allocating a readback buffer", || {
            self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("readback"),
                size,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        })
    }

    /// Reads `words` 32-bit words of `buffer` back (submits `encoder` first, if any).
    pub fn read_words(
        &self,
        encoder: Option<wgpu::CommandEncoder>,
        buffer: &wgpu::Buffer,
        words: usize,
    ) -> Result<Vec<u32>, DeviceError> {
        let staging = self.readback_buffer(words as u64 * 4)?;
        self.read_words_via(encoder, buffer, 0, words, &staging)
    }

    /// Reads `words` 32-bit words of `buffer` from byte `offset` back through `staging`
    /// (at least that large; left unmapped), submitting `encoder` first, if any.
    pub fn read_words_via(
        &self,
        encoder: Option<wgpu::CommandEncoder>,
        buffer: &wgpu::Buffer,
        offset: u64,
        words: usize,
        staging: &wgpu::Buffer,
    ) -> Result<Vec<u32>, DeviceError> {
        let bytes = (words as u64 * 4).max(4).min(buffer.size() - offset);
        let mut encoder = encoder.unwrap_or_else(|| self.device.create_command_encoder(&Default::default()));
        encoder.copy_buffer_to_buffer(buffer, offset, staging, 0, bytes);
        self.scoped("submitting work", || self.queue.submit([encoder.finish()]))?;
        let (tx, rx) = std::sync::mpsc::channel();
        staging.map_async(wgpu::MapMode::Read, ..bytes, move |r| {
            let _ = tx.send(r);
        });
        self.device
            .poll(wgpu::PollType::Wait { submission_index: None, timeout: None })
            .map_err(|e| DeviceError::Readback { reason: e.to_string() })?;
        self.check_alive()?;
        rx.recv()
            .map_err(|e| DeviceError::Readback { reason: e.to_string() })?
            .map_err(|e| DeviceError::Readback { reason: e.to_string() })?;
        let view = staging.get_mapped_range(..bytes).map_err(|e| DeviceError::Readback { reason: e.to_string() })?;
        let out: Vec<u32> = bytemuck::cast_slice(&view[..words * 4]).to_vec();
        drop(view);
        staging.unmap();
        Ok(out)
    }
}

fn poisoned() -> DeviceError {
    DeviceError::Validation {
        what: "locking the pipeline cache".into(),
        reason: "a thread panicked while holding it".into(),
    }
}

impl From<DeviceError> for kiln::KernelError {
    fn from(e: DeviceError) -> kiln::KernelError {
        match e {
            DeviceError::OutOfMemory { .. } => kiln::KernelError::OutOfMemory(e.to_string()),
            DeviceError::DeviceLost { .. } => kiln::KernelError::DeviceLost(e.to_string()),
            other => kiln::KernelError::Invalid(other.to_string()),
        }
    }
}

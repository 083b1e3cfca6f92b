//! The device: a [`Gpu`] is one CUDA context with one stream, kiln's kernels loaded from
//! CUBIN, cuBLASLt and (on first use) cuDNN; it allocates (from the execution's arena when
//! one serves it), copies, captures and launches. [`Gpu::lane`] makes another on the same
//! context and kernels with a stream and handles of its own, so executions overlap. Everything above it works with
//! [`DeviceTensor`]s and [`Arg`] lists and never touches a raw pointer.

use crate::arena::{lock, Access, Arena, ArenaPlan, PinnedHost, Served, Session, Sessions, Tracer};
use crate::buffer::{storage_size, Arg, DeviceBuffer, DeviceTensor, Graph, TensorMap};
use crate::error::{driver, GpuError};
use crate::probe;
use crate::sources::{Kernel, Source};
use cudarc::driver::{result, sys, CudaContext, CudaFunction, CudaModule, CudaStream, LaunchConfig};
use cudarc::driver::{DevicePtr, PushKernelArg};
use cudarc::nvrtc::Ptx;
use kiln::{DataType, DeviceFingerprint, HostTensor, TensorData};
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread;

thread_local! {
    /// Set while this thread allocates values that outlive the run (see [`Gpu::persistent`]).
    static PERSISTENT: Cell<bool> = const { Cell::new(false) };
}

/// Each loaded kernel and the byte size of each of its parameters.
type Functions = HashMap<Kernel, (CudaFunction, Arc<[usize]>)>;
/// Blocks resident on one multiprocessor, by kernel, then block size and dynamic shared bytes
/// (looked up by reference: launchers ask on every enqueue).
type Residency = HashMap<Kernel, HashMap<(u32, u32), u32>>;

/// One context, stream, kernel set and cuBLASLt handle.
#[derive(Debug)]
pub struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub arch: String,
    /// Shared by every lane of the context (see [`Gpu::lane`]).
    modules: Arc<HashMap<Source, Arc<CudaModule>>>,
    functions: Arc<Mutex<Functions>>,
    residency: Arc<Mutex<Residency>>,
    /// The dynamic shared bytes each kernel has opted into beyond the default 48 KiB.
    shared_opt_in: Arc<Mutex<HashMap<Kernel, u32>>>,
    pub blas: crate::blas::Blas,
    /// cuDNN on this stream, opened on first use (Err: absent or failed; convolutions then
    /// run kiln's direct kernel).
    pub dnn: OnceLock<Result<crate::dnn::Dnn, GpuError>>,
    /// cuSPARSELt on this stream, opened on first use (Err: absent or failed; 2:4 sparse
    /// tactics are then not offered).
    sparse: OnceLock<Result<crate::sparse::SparseLt, GpuError>>,
    /// The traced execution and the run lock.
    pub sessions: Arc<Sessions>,
    /// Weights converted once for a kernel (see [`Gpu::converted_weights`]), shared by every
    /// lane: constants are the context's, whichever stream reads them.
    converted: Arc<Mutex<HashMap<(u64, String), Converted>>>,
    /// Small tables derived from constants (see [`Gpu::constant_table`]), by content.
    tables: Arc<Mutex<HashMap<(DataType, Vec<usize>, Vec<u8>), DeviceTensor>>>,
    /// Tables derived from parameters too large to key by content (see [`Gpu::named_table`]).
    named_tables: Arc<Mutex<HashMap<Vec<u8>, DeviceTensor>>>,
    /// The device's streaming multiprocessors, read once (see [`Gpu::multiprocessors`]).
    multiprocessors: u32,
    /// Whether kernels of [`Source::programmatic`] sources launch programmatically: sm_90 and
    /// later, unless `KILN_CUDA_PROGRAMMATIC_LAUNCH=0` (for A/B timing).
    programmatic_launch: bool,
}

/// One converted copy of constant weights, and what it was made from. The originals are held
/// weakly: while one lives its address names it (an address is not reused while it lives);
/// once one is dropped the entry is too, and a refit of one forgets it.
#[derive(Debug)]
struct Converted {
    originals: Vec<Original>,
    copy: DeviceTensor,
}

#[derive(Debug)]
struct Original {
    ptr: u64,
    buf: Weak<DeviceBuffer>,
    dtype: DataType,
    shape: Vec<usize>,
}

impl Original {
    fn of(w: &DeviceTensor) -> Original {
        Original { ptr: w.buf.ptr(), buf: Arc::downgrade(&w.buf), dtype: w.dtype, shape: w.shape.clone() }
    }

    /// Whether `w` is the tensor this was (the same live buffer, type and shape).
    fn is(&self, w: &DeviceTensor) -> bool {
        self.buf.upgrade().is_some_and(|o| Arc::ptr_eq(&o, &w.buf)) && self.shape == w.shape && self.dtype == w.dtype
    }
}

/// The CUBIN image of each source.
type Images = Vec<(Source, Arc<Vec<u8>>)>;

/// CUBIN per architecture and source, compiled once per machine (see `kernel_cache`) and read
/// once per process.
fn compiled(arch: &str) -> Result<Images, GpuError> {
    type Cache = Mutex<HashMap<String, Images>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(found) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(arch) {
        return Ok(found.clone());
    }
    let folder = crate::kernel_cache::folder();
    let images: Images = crate::kernel_cache::all(arch, folder.as_deref())?.into_iter().map(|(s, image)| (s, Arc::new(image))).collect();
    cache.lock().unwrap_or_else(|p| p.into_inner()).insert(arch.to_string(), images.clone());
    Ok(images)
}

impl Gpu {
    /// Opens device `ordinal`, compiles (or reuses) kiln's kernels for its architecture and
    /// loads them.
    pub fn new(ordinal: usize) -> Result<Gpu, GpuError> {
        probe::libraries().runtime_ready().map_err(GpuError::Unavailable)?;
        let count = CudaContext::device_count().map_err(driver("cuDeviceGetCount"))?;
        if ordinal >= count.max(0) as usize {
            return Err(GpuError::Unavailable(format!("there is no CUDA device {ordinal}: this machine shows {count} (ordinals from 0)")));
        }
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
        let multiprocessors = ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).map_err(driver("cuDeviceGetAttribute"))?.max(1) as u32;
        let programmatic_launch = major >= 9 && std::env::var("KILN_CUDA_PROGRAMMATIC_LAUNCH").as_deref() != Ok("0");
        if tracing::enabled!(tracing::Level::INFO) {
            let sources: Vec<&str> = Source::ALL.into_iter().filter(|s| s.programmatic()).map(Source::file_name).collect();
            let state = if programmatic_launch { "on" } else if major >= 9 { "off (KILN_CUDA_PROGRAMMATIC_LAUNCH=0)" } else { "off (before sm_90)" };
            tracing::info!("programmatic dependent launch {state} on {arch}: the kernels of {} and the generated chains", sources.join(", "));
        }
        Ok(Gpu {
            multiprocessors,
            programmatic_launch,
            ctx,
            stream,
            arch,
            modules: Arc::new(modules),
            functions: Arc::default(),
            residency: Arc::default(),
            shared_opt_in: Arc::default(),
            blas,
            dnn: OnceLock::new(),
            sparse: OnceLock::new(),
            sessions: Arc::default(),
            converted: Arc::default(),
            tables: Arc::default(),
            named_tables: Arc::default(),
        })
    }

    /// Another lane on this context: the same kernels and converted weights, a stream, cuBLASLt
    /// and cuDNN handles and run lock of its own, so its executions overlap this one's.
    /// Buffers stay ordered by their own lane's stream (event tracking is off): a value
    /// crosses lanes only once it is complete (constants are settled before a lane is made,
    /// converted weights are waited for when lanes exist).
    pub fn lane(&self) -> Result<Gpu, GpuError> {
        let stream = self.ctx.new_stream().map_err(driver("cuStreamCreate"))?;
        Ok(Gpu {
            ctx: self.ctx.clone(),
            blas: crate::blas::Blas::new(stream.clone())?,
            stream,
            arch: self.arch.clone(),
            modules: self.modules.clone(),
            functions: self.functions.clone(),
            residency: self.residency.clone(),
            shared_opt_in: self.shared_opt_in.clone(),
            dnn: OnceLock::new(),
            sparse: OnceLock::new(),
            sessions: Arc::default(),
            converted: self.converted.clone(),
            tables: self.tables.clone(),
            named_tables: self.named_tables.clone(),
            multiprocessors: self.multiprocessors,
            programmatic_launch: self.programmatic_launch,
        })
    }

    /// Whether other lanes share this one's context (see [`Gpu::lane`]).
    fn has_lanes(&self) -> bool {
        Arc::strong_count(&self.converted) > 1
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

    /// Uninitialized device bytes (at least one, so an empty tensor still has an address):
    /// from the arena when this thread's execution is served from one, else a plain
    /// (stream-ordered) allocation.
    pub fn alloc(&self, bytes: usize) -> Result<DeviceBuffer, GpuError> {
        let bytes = bytes.max(1);
        match self.sessions.access() {
            Access::Traced(tracer) if !PERSISTENT.with(Cell::get) => {
                let mut t = lock(&tracer);
                let (k, served) = t.alloc(bytes)?;
                let traced = Some((Arc::downgrade(&tracer), k));
                match served {
                    Served::Arena(arena, ptr) => Ok(DeviceBuffer {
                        ptr,
                        len: bytes,
                        own: None,
                        _arena: Some(arena),
                        _parent: None,
                        traced,
                        stream: self.stream.clone(),
                        sessions: self.sessions.clone(),
                    }),
                    Served::Plain => self.plain_alloc(bytes, traced).inspect_err(|e| {
                        if let GpuError::OutOfMemory { .. } = e {
                            t.out_of_memory = Some(e.to_string());
                        }
                    }),
                }
            }
            Access::Traced(_) => self.plain_alloc(bytes, None),
            Access::Plain(_guard) => self.plain_alloc(bytes, None),
        }
    }

    /// Runs `f` with every allocation it makes outside the current run's trace and arena: for
    /// values cached across runs (cuDNN's channels-last filters), which a later run neither
    /// allocates again nor may find overwritten by the arena.
    pub fn persistent<T>(&self, f: impl FnOnce() -> T) -> T {
        let was = PERSISTENT.with(|p| p.replace(true));
        let out = f();
        PERSISTENT.with(|p| p.set(was));
        out
    }

    /// `w` (constant weights) as `convert` lays it out for a kernel (`conversion` names the
    /// layout: "krsc", "depthwise_rsc"), converted on first use and cached across runs,
    /// outside every run's trace and arena. Where lanes share the cache, the conversion is
    /// waited for before another stream can read it. Weights a run computes (a Dequantize of
    /// INT8 weights, a network input) are converted in the run's memory, every run, never
    /// cached: a cached copy of them was freed under the CUDA graph that read it (Q/DQ
    /// ResNet-50's graph replay failed with CUDA_ERROR_INVALID_VALUE).
    pub fn converted_weights<E: From<GpuError>>(
        &self,
        w: &DeviceTensor,
        conversion: &str,
        convert: impl FnOnce(&DeviceTensor) -> Result<DeviceTensor, E>,
    ) -> Result<DeviceTensor, E> {
        match w.buf.outside_runs() {
            true => self.derived_from_weights(&[w], conversion, || convert(w)),
            false => convert(w),
        }
    }

    /// What `make` computes from the constant weights `from` alone (none: from what `what`
    /// names alone, such as a generated kernel and its parameters), made on first use and
    /// cached across runs as [`Gpu::converted_weights`] caches: dropped with any of the weights,
    /// forgotten when one is refitted. The caller checks that every one of `from` lives
    /// outside runs.
    pub fn derived_from_weights<E: From<GpuError>>(
        &self,
        from: &[&DeviceTensor],
        what: &str,
        make: impl FnOnce() -> Result<DeviceTensor, E>,
    ) -> Result<DeviceTensor, E> {
        // The first weight's address and the others' name the entry.
        let others: String = from.iter().skip(1).map(|w| format!(" {:#x}", w.buf.ptr())).collect();
        let key = (from.first().map_or(0, |w| w.buf.ptr()), format!("{what}{others}"));
        let mut cache = self.converted.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = cache.get(&key) {
            if c.originals.len() == from.len() && c.originals.iter().zip(from).all(|(o, w)| o.is(w)) {
                return Ok(c.copy.clone());
            }
        }
        cache.retain(|_, c| c.originals.iter().all(|o| o.buf.strong_count() > 0));
        let copy = self.persistent(make)?;
        if self.has_lanes() {
            self.synchronize()?;
        }
        cache.insert(key, Converted { originals: from.iter().map(|w| Original::of(w)).collect(), copy: copy.clone() });
        Ok(copy)
    }

    /// `t`, a small table computed on the host from constants alone (an integer layer's
    /// per-channel requantizing scales), on the device once and shared by content across runs
    /// and lanes: uploading it every run put a host-to-device copy on each replay of the
    /// run's CUDA graph. Entries live as long as the context (a few KB per distinct table).
    pub fn constant_table(&self, t: &HostTensor) -> Result<DeviceTensor, GpuError> {
        let key = (t.dtype(), t.shape().to_vec(), t.data().le_bytes().to_vec());
        self.kept_table(&self.tables, key, || self.upload(t))
    }

    /// A table computed on the host by `make` from the parameters `name` spells out (all of
    /// them: the name is its key), on the device once and shared across runs and lanes as
    /// [`Gpu::constant_table`]'s are, for tables too large to key by their content (a level for
    /// each of 65,536 values).
    pub fn named_table(&self, name: Vec<u8>, make: impl FnOnce() -> Result<HostTensor, String>) -> Result<DeviceTensor, GpuError> {
        self.kept_table(&self.named_tables, name, || self.upload(&make().map_err(GpuError::Unsupported)?))
    }

    /// The table `tables` holds under `key`, or the one `upload` puts on the device, kept there
    /// outside every run (and complete before another lane can read it).
    fn kept_table<K: std::hash::Hash + Eq>(
        &self,
        tables: &Mutex<HashMap<K, DeviceTensor>>,
        key: K,
        upload: impl FnOnce() -> Result<DeviceTensor, GpuError>,
    ) -> Result<DeviceTensor, GpuError> {
        let mut tables = tables.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(table) = tables.get(&key) {
            return Ok(table.clone());
        }
        let table = self.persistent(upload)?;
        if self.has_lanes() {
            self.synchronize()?;
        }
        tables.insert(key, table.clone());
        Ok(table)
    }

    /// Device memory in use on this GPU, by every process (total less free, cuMemGetInfo):
    /// how tests see growth across refits or runs.
    pub fn memory_in_use(&self) -> Result<u64, GpuError> {
        self.ctx.bind_to_thread().map_err(driver("cuCtxSetCurrent"))?;
        let (free, total) = result::mem_get_info().map_err(driver("cuMemGetInfo"))?;
        Ok(total.saturating_sub(free) as u64)
    }

    /// Drops the cached layouts of the weights at these device addresses (their values were
    /// overwritten by a refit): the next use converts them again.
    pub fn forget_converted(&self, buffers: &[u64]) {
        let mut cache = self.converted.lock().unwrap_or_else(|p| p.into_inner());
        cache.retain(|_, c| !c.originals.iter().any(|o| buffers.contains(&o.ptr)));
    }

    fn plain_alloc(&self, bytes: usize, traced: Option<(Weak<Mutex<Tracer>>, usize)>) -> Result<DeviceBuffer, GpuError> {
        // SAFETY: the memory is uninitialized; every kernel writing a fresh output covers all
        // of its `bytes` before anything reads them.
        let slice = unsafe { self.stream.alloc::<u8>(bytes) }.map_err(|e| match e.0 {
            sys::cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY => GpuError::OutOfMemory { bytes, reason: format!("{e:?}") },
            _ => GpuError::Driver { call: "cuMemAllocAsync", reason: format!("{e:?}") },
        })?;
        let ptr = slice.device_ptr(&self.stream).0;
        Ok(DeviceBuffer {
            ptr,
            len: bytes,
            own: Some(slice),
            _arena: None,
            _parent: None,
            traced,
            stream: self.stream.clone(),
            sessions: self.sessions.clone(),
        })
    }

    pub fn empty(&self, dtype: DataType, shape: Vec<usize>) -> Result<DeviceTensor, GpuError> {
        let bytes = storage_size(dtype)? * shape.iter().product::<usize>();
        Ok(DeviceTensor::new(Arc::new(self.alloc(bytes)?), dtype, shape))
    }

    pub fn upload(&self, t: &HostTensor) -> Result<DeviceTensor, GpuError> {
        storage_size(t.dtype())?;
        let bytes = t.data().le_bytes();
        let buf = self.alloc(bytes.len())?;
        self.write(&buf, &bytes)?;
        Ok(DeviceTensor::new(Arc::new(buf), t.dtype(), t.shape().to_vec()))
    }

    /// Enqueues a copy of `bytes` to the start of `dst`. While capturing, the bytes are kept in
    /// pinned memory for the graph's lifetime (a graph cannot copy from pageable memory).
    pub fn write(&self, dst: &DeviceBuffer, bytes: &[u8]) -> Result<(), GpuError> {
        if bytes.is_empty() {
            return Ok(());
        }
        if bytes.len() > dst.len {
            return Err(GpuError::Driver { call: "cuMemcpyHtoDAsync", reason: format!("{} bytes into a buffer of {}", bytes.len(), dst.len) });
        }
        let access = self.sessions.access();
        if let Access::Traced(tracer) = &access {
            let mut t = lock(tracer);
            if t.capturing {
                let src = t.stage(&self.ctx, bytes)?;
                // SAFETY: `src` is pinned memory of `bytes.len()` bytes that the tracer keeps
                // (then the graph) alive as long as the copy can run; `dst` holds at least as many.
                return unsafe { sys::cuMemcpyHtoDAsync_v2(dst.ptr, src as *const _, bytes.len(), self.stream.cu_stream()) }
                    .result()
                    .map_err(driver("cuMemcpyHtoDAsync"));
            }
        }
        // SAFETY: `dst` holds at least `bytes.len()` bytes (checked); a copy from pageable memory
        // is staged by the driver before the call returns, so `bytes` may go right after.
        unsafe { result::memcpy_htod_async(dst.ptr, bytes, self.stream.cu_stream()) }.map_err(driver("cuMemcpyHtoDAsync"))
    }

    /// Enqueues a copy from pinned host memory to `dst` (not allowed while capturing: the
    /// caller's pinned buffer may be refilled before a replay).
    pub fn write_pinned(&self, dst: u64, src: &PinnedHost, bytes: usize) -> Result<(), GpuError> {
        if bytes > src.len() {
            return Err(GpuError::Driver { call: "cuMemcpyHtoDAsync", reason: format!("{bytes} bytes from a pinned buffer of {}", src.len()) });
        }
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: `src` holds `bytes` bytes and outlives the copy (the caller synchronizes before
        // reusing or dropping it); `dst` is an address of this context holding `bytes` bytes.
        unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.as_ptr() as *const _, bytes, self.stream.cu_stream()) }
            .result()
            .map_err(driver("cuMemcpyHtoDAsync"))
    }

    /// Enqueues a copy of `bytes` bytes at `src` into pinned host memory.
    pub fn read_pinned(&self, src: u64, dst: &mut PinnedHost, bytes: usize) -> Result<(), GpuError> {
        if bytes > dst.len() {
            return Err(GpuError::Driver { call: "cuMemcpyDtoHAsync", reason: format!("{bytes} bytes into a pinned buffer of {}", dst.len()) });
        }
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: `dst` holds `bytes` bytes and is not read until the caller synchronizes; `src`
        // is an address of this context holding `bytes` bytes.
        unsafe { sys::cuMemcpyDtoHAsync_v2(dst.as_mut_ptr() as *mut _, src, bytes, self.stream.cu_stream()) }
            .result()
            .map_err(driver("cuMemcpyDtoHAsync"))
    }

    /// Copies back to the host (synchronizes the stream; not possible while capturing).
    pub fn download(&self, t: &DeviceTensor) -> Result<HostTensor, GpuError> {
        let size = storage_size(t.dtype)? * t.len();
        if size > t.buf.len {
            return Err(GpuError::Driver { call: "download", reason: format!("{size} bytes from a buffer of {}", t.buf.len) });
        }
        let _access = self.outside_capture("a read-back to the host")?;
        let mut bytes = vec![0u8; size];
        if size > 0 {
            // SAFETY: `bytes` holds `size` bytes and lives until the synchronization below.
            unsafe { result::memcpy_dtoh_async(&mut bytes, t.buf.ptr, self.stream.cu_stream()) }.map_err(driver("cuMemcpyDtoHAsync"))?;
        }
        self.stream.synchronize().map_err(driver("cuStreamSynchronize"))?;
        let data = TensorData::from_le_bytes(t.dtype, &bytes).ok_or(GpuError::UnsupportedDtype(t.dtype))?;
        HostTensor::new(t.shape.clone(), data).map_err(|e| GpuError::Driver { call: "download", reason: e.to_string() })
    }

    /// Access to the stream for `what`, which a capture cannot hold (a synchronization):
    /// an error while this thread captures; waits out another thread's capture.
    fn outside_capture(&self, what: &str) -> Result<Access<'_>, GpuError> {
        let access = self.sessions.access();
        if let Access::Traced(tracer) = &access {
            if lock(tracer).capturing {
                return Err(GpuError::Capture(what.to_string()));
            }
        }
        Ok(access)
    }

    /// A buffer's device address, for [`Arg::Ptr`].
    pub fn ptr(&self, buf: &DeviceBuffer) -> u64 {
        buf.ptr
    }

    /// Device-to-device copy of `bytes` bytes.
    pub fn copy(&self, src: &DeviceBuffer, dst: &DeviceBuffer, bytes: usize) -> Result<(), GpuError> {
        if bytes > src.len || bytes > dst.len {
            return Err(GpuError::Driver { call: "cuMemcpyDtoDAsync", reason: format!("{bytes} bytes between buffers of {} and {}", src.len, dst.len) });
        }
        if bytes > 0 {
            // SAFETY: both addresses hold at least `bytes` bytes (checked) on this context.
            unsafe { result::memcpy_dtod_async(dst.ptr, src.ptr, bytes, self.stream.cu_stream()) }.map_err(driver("cuMemcpyDtoDAsync"))?;
        }
        Ok(())
    }

    /// Enqueues zeroing the first `bytes` bytes of `dst`.
    pub fn zero(&self, dst: &DeviceBuffer, bytes: usize) -> Result<(), GpuError> {
        if bytes > dst.len {
            return Err(GpuError::Driver { call: "cuMemsetD8Async", reason: format!("{bytes} bytes of a buffer of {}", dst.len) });
        }
        if bytes > 0 {
            // SAFETY: `dst` holds at least `bytes` bytes (checked) on this context.
            unsafe { result::memset_d8_async(dst.ptr, 0, bytes, self.stream.cu_stream()) }.map_err(driver("cuMemsetD8Async"))?;
        }
        Ok(())
    }

    /// The activation arena of `plan` on this device's stream.
    pub fn new_arena(&self, plan: ArenaPlan) -> Result<Arena, GpuError> {
        Arena::new(plan, &self.stream, &self.sessions)
    }

    /// Starts tracing this thread's execution: allocations are recorded, and served from
    /// `arena` when given. The caller holds `sessions.run_lock`.
    pub fn begin_trace(&self, arena: Option<Arc<Arena>>) -> Arc<Mutex<Tracer>> {
        let tracer = Arc::new(Mutex::new(Tracer::new(arena)));
        let previous = lock(&self.sessions.current).replace(Session { thread: thread::current().id(), tracer: tracer.clone() });
        // Dropped outside the lock: a tracer may hold the last reference to an arena, whose
        // drop takes the lock.
        drop(previous);
        tracer
    }

    /// Stops tracing (the tracer keeps what it recorded; frees from now on are not traced).
    pub fn end_trace(&self, tracer: &Arc<Mutex<Tracer>>) -> crate::arena::TraceEnd {
        let mut current = lock(&self.sessions.current);
        let result = lock(tracer).close();
        let ended = current.take();
        drop(current);
        drop(ended);
        result
    }

    /// Begins capturing this thread's traced execution into a graph.
    pub fn begin_capture(&self, tracer: &Arc<Mutex<Tracer>>) -> Result<(), GpuError> {
        // Under the session lock, so no other thread's plain stream operation is in flight.
        let _current = lock(&self.sessions.current);
        // Relaxed: staging pinned memory (cuMemHostAlloc) is allowed while capturing.
        self.stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED).map_err(driver("cuStreamBeginCapture"))?;
        lock(tracer).capturing = true;
        Ok(())
    }

    /// Ends the capture: the instantiated graph (None when nothing was captured).
    pub fn end_capture(&self, tracer: &Arc<Mutex<Tracer>>) -> Result<Option<Graph>, GpuError> {
        lock(tracer).capturing = false;
        let flags = sys::CUgraphInstantiate_flags(0);
        Ok(self.stream.end_capture(flags).map_err(driver("cuStreamEndCapture"))?.map(Graph))
    }

    /// A CUDA event (for timing phases of an execution).
    pub fn event(&self) -> Result<cudarc::driver::CudaEvent, GpuError> {
        self.ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(driver("cuEventCreate"))
    }

    /// Records `event` on this device's stream now.
    pub fn record(&self, event: &cudarc::driver::CudaEvent) -> Result<(), GpuError> {
        event.record(&self.stream).map_err(driver("cuEventRecord"))
    }

    /// Milliseconds of each of `reps` runs of `f` on this stream, between CUDA events recorded
    /// around each run (after one untimed warm-up run), sorted ascending. Runs are enqueued
    /// back to back and waited for once at the end, so host work overlaps device work as in a
    /// serving loop; a run whose host side is slower than its device side shows the gap.
    pub fn time_ms(&self, reps: usize, f: impl FnMut() -> Result<(), String>) -> Result<Vec<f32>, String> {
        self.timed_runs(reps, false, f)
    }

    /// [`Gpu::time_ms`] of the device alone, as a replayed CUDA graph would see it: the runs
    /// are enqueued behind a device-side wait longer than enqueueing them takes (measured on a
    /// second warm-up run), so they execute back to back however slow their host side is and
    /// the events between them time kernels, not launches. Tactics are chosen so: at batch 1
    /// a layer's kernels take less time than their launches.
    pub fn device_time_ms(&self, reps: usize, f: impl FnMut() -> Result<(), String>) -> Result<Vec<f32>, String> {
        self.timed_runs(reps, true, f)
    }

    /// Enqueues a kernel that keeps the stream busy for at least `time` (cycles at the
    /// device's highest clock: longer at a lower one).
    pub fn spin(&self, time: std::time::Duration) -> Result<(), GpuError> {
        let khz = self.ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE).map_err(driver("cuDeviceGetAttribute"))?;
        let cycles = (time.as_nanos() * u128::from(khz.max(1) as u32) / 1_000_000).min(i64::MAX as u128) as i64;
        self.launch(&Source::Timing.kernel("spin_cycles"), 1, 1, &[Arg::I64(cycles)])
    }

    fn timed_runs(&self, reps: usize, behind_wait: bool, mut f: impl FnMut() -> Result<(), String>) -> Result<Vec<f32>, String> {
        const MAX_WAIT_NS: u128 = 1_000_000_000;
        f()?;
        self.synchronize().map_err(|e| e.to_string())?;
        let wait_ns = if behind_wait {
            let start = std::time::Instant::now();
            f()?;
            let enqueue = start.elapsed();
            self.synchronize().map_err(|e| e.to_string())?;
            // Twice the measured enqueue time per run, plus the events' own: ample, and bounded.
            Some((enqueue.as_nanos() * 2 * (reps as u128 + 1) + 50_000).min(MAX_WAIT_NS))
        } else {
            None
        };
        let event = || self.ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(|e| format!("cuEventCreate: {e:?}"));
        let marks = (0..reps).map(|_| Ok((event()?, event()?))).collect::<Result<Vec<_>, String>>()?;
        // Each record waits out another thread's graph capture (it would land in the graph).
        let record = |e: &cudarc::driver::CudaEvent| {
            let _access = self.sessions.access();
            e.record(&self.stream).map_err(|e| format!("cuEventRecord: {e:?}"))
        };
        if let Some(ns) = wait_ns {
            self.spin(std::time::Duration::from_nanos(ns as u64)).map_err(|e| e.to_string())?;
        }
        for (start, end) in &marks {
            record(start)?;
            f()?;
            record(end)?;
        }
        self.synchronize().map_err(|e| e.to_string())?;
        let mut times = marks.iter().map(|(s, e)| s.elapsed_ms(e).map_err(|e| format!("cuEventElapsedTime: {e:?}"))).collect::<Result<Vec<f32>, _>>()?;
        times.sort_by(f32::total_cmp);
        Ok(times)
    }

    /// cuDNN on this device's stream, or why not.
    pub fn dnn(&self) -> Result<&crate::dnn::Dnn, GpuError> {
        self.dnn.get_or_init(|| crate::dnn::Dnn::new(self)).as_ref().map_err(Clone::clone)
    }

    /// cuSPARSELt on this lane's stream (see [`crate::sparse`]).
    pub fn sparse(&self) -> Result<&crate::sparse::SparseLt, GpuError> {
        self.sparse.get_or_init(|| crate::sparse::SparseLt::new(self.stream.clone())).as_ref().map_err(Clone::clone)
    }

    /// Whether a CUDA graph is being captured on this lane's stream now.
    pub fn capturing(&self) -> bool {
        self.outside_capture("").is_err()
    }

    pub fn synchronize(&self) -> Result<(), GpuError> {
        let _access = self.outside_capture("a stream synchronization")?;
        self.stream.synchronize().map_err(driver("cuStreamSynchronize"))
    }

    /// The loaded kernel and the byte size of each of its parameters, as compiled.
    fn function(&self, kernel: &Kernel) -> Result<(CudaFunction, Arc<[usize]>), GpuError> {
        let mut functions = self.functions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = functions.get(kernel) {
            return Ok(f.clone());
        }
        let unknown = || GpuError::UnknownKernel(format!("{} (in {})", kernel.name, kernel.source.file_name()));
        let generated;
        let module = match kernel.source {
            Source::Generated(_) => {
                generated = self.generated_module(kernel.source)?;
                &generated
            }
            source => self.modules.get(&source).ok_or_else(unknown)?,
        };
        let f = module.load_function(&kernel.name).map_err(|_| unknown())?;
        let params: Arc<[usize]> = parameter_sizes(&f)?.into();
        functions.insert(kernel.clone(), (f.clone(), params.clone()));
        Ok((f, params))
    }

    /// A generated source's module: from the kernel cache, or compiled, then loaded (once per
    /// context: the functions that come from it are cached by the caller).
    fn generated_module(&self, source: Source) -> Result<Arc<CudaModule>, GpuError> {
        let (image, _) = crate::kernel_cache::cubin(source, &self.arch, crate::kernel_cache::folder().as_deref())?;
        // Loading a module is not a stream operation; it waits out another thread's capture.
        let _access = self.sessions.access();
        self.ctx.load_module(Ptx::from_binary(image)).map_err(driver("cuModuleLoadData"))
    }

    /// Launches `kernel` over `grid` x `block` threads with `args` in its parameter order.
    /// The arguments are checked against the compiled kernel's parameters (count and byte
    /// size of each), so a launcher out of step with its kernel is an error, not a launch.
    pub fn launch(&self, kernel: &Kernel, grid: u32, block: u32, args: &[Arg]) -> Result<(), GpuError> {
        self.launch_grid(kernel, (grid, 1, 1), (block, 1, 1), args)
    }

    /// [`Gpu::launch`] over a 3-D grid of 3-D blocks.
    pub fn launch_grid(&self, kernel: &Kernel, grid: (u32, u32, u32), block: (u32, u32, u32), args: &[Arg]) -> Result<(), GpuError> {
        self.launch_with_shared(kernel, grid, block, 0, args)
    }

    /// How many blocks of `kernel` (of `threads` threads, `shared_bytes` of dynamic shared
    /// memory) one multiprocessor holds at once: the driver's occupancy calculator, asked once
    /// per shape (launchers ask on every enqueue).
    pub fn resident_blocks(&self, kernel: &Kernel, threads: u32, shared_bytes: u32) -> Result<u32, GpuError> {
        if let Some(&n) = lock(&self.residency).get(kernel).and_then(|m| m.get(&(threads, shared_bytes))) {
            return Ok(n);
        }
        let (f, _) = self.function(kernel)?;
        // The calculator counts no more dynamic shared memory than the function is allowed.
        self.allow_dynamic_shared(kernel, &f, shared_bytes)?;
        let n = f.occupancy_max_active_blocks_per_multiprocessor(threads, shared_bytes as usize, None).map_err(driver("cuOccupancyMaxActiveBlocksPerMultiprocessor"))?;
        lock(&self.residency).entry(kernel.clone()).or_default().insert((threads, shared_bytes), n);
        Ok(n)
    }

    /// Lets `kernel`'s function `f` take `bytes` of dynamic shared memory: beyond the default
    /// 48 KiB a function must opt in. The limit only rises: every lane launches the same
    /// function, and lowering it for one launch could fail another lane's larger one set up
    /// between that lane's opt-in and its launch.
    fn allow_dynamic_shared(&self, kernel: &Kernel, f: &CudaFunction, bytes: u32) -> Result<(), GpuError> {
        if bytes <= 48 * 1024 {
            return Ok(());
        }
        let mut allowed = lock(&self.shared_opt_in);
        if allowed.get(kernel).is_none_or(|&b| b < bytes) {
            use sys::CUfunction_attribute_enum as F;
            f.set_attribute(F::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes as i32).map_err(driver("cuFuncSetAttribute"))?;
            allowed.insert(kernel.clone(), bytes);
        }
        Ok(())
    }

    /// The device's streaming multiprocessors (the grid a kernel with per-block set-up needs).
    /// The TMA map of a row-major byte matrix `t` (`rows` rows of `inner` bytes, `row_stride`
    /// bytes apart from its buffer's start) read in boxes of `box_rows` rows × `box_inner` bytes
    /// into shared memory in the 128-byte swizzle (`box_inner` ≤ 128), zeros past its edges.
    /// The driver wants the buffer 16-byte aligned and the stride a multiple of 16.
    pub fn tensor_map_2d_u8(&self, t: &DeviceTensor, inner: usize, rows: usize, row_stride: usize, box_inner: u32, box_rows: u32) -> Result<TensorMap, GpuError> {
        use sys::{CUtensorMapDataType as D, CUtensorMapFloatOOBfill as F, CUtensorMapInterleave as I, CUtensorMapL2promotion as L, CUtensorMapSwizzle as S};
        let end = rows.saturating_sub(1).saturating_mul(row_stride).saturating_add(inner);
        if !t.buf.ptr.is_multiple_of(16) || !row_stride.is_multiple_of(16) || end > t.buf.len || !(1..=128).contains(&box_inner) || !(1..=256).contains(&box_rows) {
            return Err(GpuError::Launch(format!("no TMA map for {rows} rows of {inner} bytes, {row_stride} apart, in a buffer of {} bytes", t.buf.len)));
        }
        let mut map = std::mem::MaybeUninit::<sys::CUtensorMap>::uninit();
        let (dims, strides, boxes, steps) = ([inner as u64, rows as u64], [row_stride as u64], [box_inner, box_rows], [1u32, 1]);
        // SAFETY: `map` is written by the driver; the dims, strides and box arrays live across
        // the call and have the rank's (2) and rank − 1's entries; the address is the live
        // buffer's (checked above to cover every row), which the caller keeps alive until the
        // kernel that reads through the map is ordered before the buffer's reuse.
        unsafe {
            sys::cuTensorMapEncodeTiled(
                map.as_mut_ptr(),
                D::CU_TENSOR_MAP_DATA_TYPE_UINT8,
                2,
                t.buf.ptr as *mut std::ffi::c_void,
                dims.as_ptr(),
                strides.as_ptr(),
                boxes.as_ptr(),
                steps.as_ptr(),
                I::CU_TENSOR_MAP_INTERLEAVE_NONE,
                S::CU_TENSOR_MAP_SWIZZLE_128B,
                L::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                F::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            )
        }
        .result()
        .map_err(driver("cuTensorMapEncodeTiled"))?;
        // SAFETY: the driver initialized the map on success.
        Ok(TensorMap(unsafe { map.assume_init() }.opaque))
    }

    pub fn multiprocessors(&self) -> u32 {
        self.multiprocessors
    }

    /// [`Gpu::launch_grid`] with `shared_bytes` of dynamic shared memory per block (past 48 KiB
    /// the kernel is allowed that much first).
    pub fn launch_with_shared(&self, kernel: &Kernel, grid: (u32, u32, u32), block: (u32, u32, u32), shared_bytes: u32, args: &[Arg]) -> Result<(), GpuError> {
        if grid.0 == 0 || grid.1 == 0 || grid.2 == 0 {
            return Ok(());
        }
        let (f, params) = self.function(kernel)?;
        self.allow_dynamic_shared(kernel, &f, shared_bytes)?;
        // Compared without allocating: this runs on every launch.
        if args.len() != params.len() || args.iter().zip(params.iter()).any(|(a, &size)| a.size() != size) {
            let passed: Vec<usize> = args.iter().map(Arg::size).collect();
            return Err(GpuError::Launch(format!(
                "kernel `{}` takes parameters of {:?} bytes, its launcher passed {passed:?}",
                kernel.name, &params[..]
            )));
        }
        if self.programmatic_launch && kernel.source.programmatic() {
            let _access = self.sessions.access();
            return self.launch_programmatic(&f, grid, block, shared_bytes, args);
        }
        let mut b = self.stream.launch_builder(&f);
        for a in args {
            match a {
                Arg::I32(v) => b.arg(v),
                Arg::I64(v) => b.arg(v),
                Arg::F32(v) => b.arg(v),
                Arg::Layout(v) => b.arg(v),
                Arg::Window(v) => b.arg(v),
                Arg::ChainLayout(v) => b.arg(v),
                Arg::TensorMap(v) => b.arg(v),
                Arg::Ptr(v) => b.arg(v),
            };
        }
        let cfg = LaunchConfig { grid_dim: grid, block_dim: block, shared_mem_bytes: shared_bytes };
        // A launch outside an execution waits out another thread's graph capture.
        let _access = self.sessions.access();
        // SAFETY: `args` match the compiled kernel's parameters in number and size (checked
        // above); every pointer is a live buffer of this context (`KernelPtr` is made only
        // from a `DeviceBuffer`) that the op sized for the indices the kernel computes from
        // the other arguments: the contract each op keeps with its kernel.
        unsafe { b.launch(cfg) }.map_err(driver("cuLaunchKernel"))?;
        Ok(())
    }

    /// A launch that may be scheduled before the stream's previous kernel has finished
    /// (programmatic dependent launch, [`Source::programmatic`]): the kernel waits for it on
    /// the device (kernels/common.cuh's `grid_dependency_wait`), where a plain launch is held
    /// back until that kernel has completed. Captured into a CUDA graph as a programmatic edge.
    fn launch_programmatic(&self, f: &CudaFunction, grid: (u32, u32, u32), block: (u32, u32, u32), shared_bytes: u32, args: &[Arg]) -> Result<(), GpuError> {
        let mut values: Vec<*mut std::ffi::c_void> = args.iter().map(Arg::value_address).collect();
        // SAFETY: the attribute value is a union of plain integers and structs of them, for which
        // all-zero bytes are valid; the one field this attribute reads is set below.
        let mut value: sys::CUlaunchAttributeValue = unsafe { std::mem::zeroed() };
        value.programmaticStreamSerializationAllowed = 1;
        let mut attribute = sys::CUlaunchAttribute {
            id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
            pad: [0; 4],
            value,
        };
        let config = sys::CUlaunchConfig {
            gridDimX: grid.0,
            gridDimY: grid.1,
            gridDimZ: grid.2,
            blockDimX: block.0,
            blockDimY: block.1,
            blockDimZ: block.2,
            sharedMemBytes: shared_bytes,
            hStream: self.stream.cu_stream(),
            attrs: &mut attribute,
            numAttrs: 1,
        };
        self.ctx.bind_to_thread().map_err(driver("cuCtxSetCurrent"))?;
        // SAFETY: `values` holds one address per kernel parameter, each of a value `args` keeps
        // alive through the call, matching the compiled kernel's parameters in number and size
        // (checked by the caller); the pointers among them are live buffers of this context, as
        // for a plain launch; `config` and its one attribute outlive the call.
        unsafe { sys::cuLaunchKernelEx(&config, f.cu_function(), values.as_mut_ptr(), std::ptr::null_mut()) }
            .result()
            .map_err(driver("cuLaunchKernelEx"))
    }

    /// A one-thread-per-element launch over `n` elements (grid-stride loops cap the grid).
    pub fn launch_elements(&self, kernel: &Kernel, n: usize, args: &[Arg]) -> Result<(), GpuError> {
        let block = 256u32;
        let grid = n.div_ceil(block as usize).min(65_535 * 8) as u32;
        self.launch(kernel, grid, block, args)
    }
}

/// The device time from `start` to `end`, two recorded events (once `end` has completed).
pub fn event_span(start: &cudarc::driver::CudaEvent, end: &cudarc::driver::CudaEvent) -> Result<std::time::Duration, GpuError> {
    let ms = start.elapsed_ms(end).map_err(driver("cuEventElapsedTime"))?;
    Ok(std::time::Duration::from_secs_f64(f64::from(ms.max(0.0)) * 1e-3))
}

/// The byte size of each parameter of a loaded kernel (`cuFuncGetParamInfo`).
fn parameter_sizes(f: &CudaFunction) -> Result<Vec<usize>, GpuError> {
    let mut sizes = Vec::new();
    loop {
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: `f` is a live function of a loaded module; the out-pointers are locals.
        let status = unsafe { sys::cuFuncGetParamInfo(f.cu_function(), sizes.len(), &mut offset, &mut size) };
        match status {
            sys::CUresult::CUDA_SUCCESS => sizes.push(size),
            // Past the last parameter.
            sys::CUresult::CUDA_ERROR_INVALID_VALUE => return Ok(sizes),
            other => return Err(GpuError::Driver { call: "cuFuncGetParamInfo", reason: format!("{other:?}") }),
        }
    }
}

impl crate::dnn::DnnDevice for Gpu {
    fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    fn alloc(&self, bytes: usize) -> Result<DeviceBuffer, GpuError> {
        Gpu::alloc(self, bytes)
    }

    fn persistent<T>(&self, f: impl FnOnce() -> T) -> T {
        Gpu::persistent(self, f)
    }
}

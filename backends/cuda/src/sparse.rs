//! 2:4 structured-sparse matrix products on cuSPARSELt (FFI module: `unsafe` lives here).
//!
//! cuSPARSELt is optional and opened at run time ([`CUSPARSELT`]): without it a SPARSE_WEIGHTS
//! build offers no sparse tactic and says so. A product `C[m, n] = X[m, k] · op(W)` with
//! constant 2:4 weights runs, as cuBLASLt's do (see `blas`), column-major as
//! `Cᵀ = op(W)ᵀ · Xᵀ`: the weights are cuSPARSELt's structured first operand, compressed once
//! (`Gpu::converted_weights`), and each shape's plan picks its kernel configuration by timing
//! them on its first run (cuSPARSELt's default one is often slower than the dense product).

use crate::buffer::{DeviceBuffer, DeviceTensor};
use crate::error::GpuError;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use kiln::DataType;
use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr};
use std::sync::{Arc, Mutex, OnceLock};

/// Sparse products enqueued by this process (what tests check a sparse tactic ran by).
static PRODUCTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many sparse products this process has enqueued.
pub fn products_enqueued() -> u64 {
    PRODUCTS.load(std::sync::atomic::Ordering::Relaxed)
}

/// The name the loader searches (the `nvidia-cusparselt-cu13` wheel's library).
pub const CUSPARSELT: &str = "libcusparseLt.so.0";

/// cuSPARSELt's opaque handle and descriptor objects: 512 bytes, 16-byte aligned (cusparseLt.h
/// 0.8; earlier versions used no more).
#[repr(C, align(16))]
struct Opaque([u8; 512]);

impl Opaque {
    fn boxed() -> Box<Opaque> {
        Box::new(Opaque([0; 512]))
    }
}

type Status = i32;
type Stream = cudarc::driver::sys::CUstream;

// cusparseLt.h / library_types.h / cusparse.h enumerators kiln passes.
const CUDA_R_16F: i32 = 2;
const CUDA_R_16BF: i32 = 14;
const ORDER_COL: i32 = 1;
const OP_N: i32 = 0;
const OP_T: i32 = 1;
const COMPUTE_32F: i32 = 2;
const SPARSITY_50_PERCENT: i32 = 0;
const ALG_DEFAULT: i32 = 0;
const ATTR_ACTIVATION_RELU: i32 = 0;
const ATTR_BIAS_POINTER: i32 = 8;
const ALG_CONFIG_ID: i32 = 0;
const ALG_CONFIG_MAX_ID: i32 = 1;
/// Byte alignment kiln's device buffers guarantee (the arena hands out 256-byte blocks).
const ALIGNMENT: u32 = 16;

/// The entry points kiln calls, resolved once.
struct Api {
    init: unsafe extern "C" fn(*mut Opaque) -> Status,
    destroy: unsafe extern "C" fn(*const Opaque) -> Status,
    error_name: unsafe extern "C" fn(Status) -> *const c_char,
    dense_init: unsafe extern "C" fn(*const Opaque, *mut Opaque, i64, i64, i64, u32, i32, i32) -> Status,
    structured_init: unsafe extern "C" fn(*const Opaque, *mut Opaque, i64, i64, i64, u32, i32, i32, i32) -> Status,
    mat_destroy: unsafe extern "C" fn(*const Opaque) -> Status,
    matmul_init: unsafe extern "C" fn(*const Opaque, *mut Opaque, i32, i32, *const Opaque, *const Opaque, *const Opaque, *const Opaque, i32) -> Status,
    matmul_set: unsafe extern "C" fn(*const Opaque, *mut Opaque, i32, *const c_void, usize) -> Status,
    alg_init: unsafe extern "C" fn(*const Opaque, *mut Opaque, *const Opaque, i32) -> Status,
    alg_destroy: unsafe extern "C" fn(*const Opaque) -> Status,
    alg_get: unsafe extern "C" fn(*const Opaque, *const Opaque, i32, *mut c_void, usize) -> Status,
    alg_set: unsafe extern "C" fn(*const Opaque, *mut Opaque, i32, *const c_void, usize) -> Status,
    plan_init: unsafe extern "C" fn(*const Opaque, *mut Opaque, *const Opaque, *const Opaque) -> Status,
    plan_destroy: unsafe extern "C" fn(*const Opaque) -> Status,
    workspace: unsafe extern "C" fn(*const Opaque, *const Opaque, *mut usize) -> Status,
    #[allow(clippy::type_complexity)]
    matmul: unsafe extern "C" fn(*const Opaque, *const Opaque, *const c_void, *const c_void, *const c_void, *const c_void, *const c_void, *mut c_void, *mut c_void, *mut Stream, i32) -> Status,
    compressed_size: unsafe extern "C" fn(*const Opaque, *const Opaque, *mut usize, *mut usize) -> Status,
    compress: unsafe extern "C" fn(*const Opaque, *const Opaque, i32, i32, *const c_void, *mut c_void, *mut c_void, Stream) -> Status,
    /// Kept open for the function pointers above.
    _library: libloading::Library,
}

/// The library, opened once per process (Err: why not).
fn api() -> Result<&'static Api, GpuError> {
    static API: OnceLock<Result<Api, String>> = OnceLock::new();
    API.get_or_init(|| {
        // SAFETY: NVIDIA's library, whose initializers have no preconditions.
        let library = unsafe { libloading::Library::new(CUSPARSELT) }
            .map_err(|e| format!("cannot open {CUSPARSELT} ({e}); install nvidia-cusparselt or add its folder to LD_LIBRARY_PATH"))?;
        macro_rules! resolve {
            ($name:literal) => {
                // SAFETY: each field's type is the C prototype of the symbol it is read from
                // (cusparseLt.h 0.8); the library stays open as long as `Api` lives.
                *unsafe { library.get(concat!($name, "\0").as_bytes()) }.map_err(|e| format!("{CUSPARSELT} lacks {}: {e}", $name))?
            };
        }
        Ok(Api {
            init: resolve!("cusparseLtInit"),
            destroy: resolve!("cusparseLtDestroy"),
            error_name: resolve!("cusparseLtGetErrorName"),
            dense_init: resolve!("cusparseLtDenseDescriptorInit"),
            structured_init: resolve!("cusparseLtStructuredDescriptorInit"),
            mat_destroy: resolve!("cusparseLtMatDescriptorDestroy"),
            matmul_init: resolve!("cusparseLtMatmulDescriptorInit"),
            matmul_set: resolve!("cusparseLtMatmulDescSetAttribute"),
            alg_init: resolve!("cusparseLtMatmulAlgSelectionInit"),
            alg_destroy: resolve!("cusparseLtMatmulAlgSelectionDestroy"),
            alg_get: resolve!("cusparseLtMatmulAlgGetAttribute"),
            alg_set: resolve!("cusparseLtMatmulAlgSetAttribute"),
            plan_init: resolve!("cusparseLtMatmulPlanInit"),
            plan_destroy: resolve!("cusparseLtMatmulPlanDestroy"),
            workspace: resolve!("cusparseLtMatmulGetWorkspace"),
            matmul: resolve!("cusparseLtMatmul"),
            compressed_size: resolve!("cusparseLtSpMMACompressedSize2"),
            compress: resolve!("cusparseLtSpMMACompress2"),
            _library: library,
        })
    })
    .as_ref()
    .map_err(|e| GpuError::Unavailable(e.clone()))
}

/// Ok, or the call and cuSPARSELt's name for its status.
fn check(api: &Api, call: &'static str, status: Status) -> Result<(), GpuError> {
    match status {
        0 => Ok(()),
        _ => Err(status_error(api, call, status)),
    }
}

fn status_error(api: &Api, call: &'static str, status: Status) -> GpuError {
    // SAFETY: cusparseLtGetErrorName returns a static string for any status value.
    let name = unsafe { (api.error_name)(status) };
    // SAFETY: a non-null result is a NUL-terminated static string.
    let reason = if name.is_null() { format!("status {status}") } else { unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned() };
    GpuError::Library { call, reason }
}

fn value_type(dtype: DataType) -> Result<i32, GpuError> {
    match dtype {
        DataType::F16 => Ok(CUDA_R_16F),
        DataType::BF16 => Ok(CUDA_R_16BF),
        other => Err(GpuError::Unsupported(format!("cuSPARSELt products here take f16 or bf16, not {other}"))),
    }
}

/// One sparse product: row-major `C[m, n] = X[m, k] · W` with W stored `[k, n]`, or
/// `X · Wᵀ` with W stored `[n, k]` (`w_transposed`), W 2:4 along k; then `+ bias` (`n`
/// values) and ReLU when asked, and `+ residual` (C's shape) when one is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SparseGemm {
    pub dtype: DataType,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub w_transposed: bool,
    pub relu: bool,
}

impl SparseGemm {
    /// cuSPARSELt's structured A: op(W)ᵀ column-major, `[n, k]` (W `[k, n]` row-major) or
    /// transposed `[k, n]` (W `[n, k]` row-major); the operation and `(rows, cols, ld)`.
    fn structured(&self) -> (i32, [i64; 3]) {
        let (n, k) = (self.n as i64, self.k as i64);
        if self.w_transposed {
            (OP_T, [k, n, k])
        } else {
            (OP_N, [n, k, n])
        }
    }

    /// Whether cuSPARSELt takes this shape: 16-bit operands with every dimension a multiple
    /// of 16 (its structured kernels' tile), checked before any call.
    pub fn supported(&self) -> bool {
        value_type(self.dtype).is_ok() && [self.m, self.n, self.k].iter().all(|d| *d > 0 && d.is_multiple_of(16))
    }
}

/// The plan of each product and bias address met so far, or why cuSPARSELt refused it.
type Plans = HashMap<(SparseGemm, u64), Result<Arc<Plan>, String>>;

/// A cuSPARSELt handle bound to one stream, and the plan of every product met so far.
pub struct SparseLt {
    api: &'static Api,
    handle: Box<Opaque>,
    stream: Arc<CudaStream>,
    plans: Mutex<Plans>,
}

impl std::fmt::Debug for SparseLt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SparseLt").finish_non_exhaustive()
    }
}

// SAFETY: the handle is only used through `&self` methods that enqueue on `stream`, and the
// owning executable serializes runs, as for cuBLASLt's handle.
unsafe impl Send for SparseLt {}
// SAFETY: as above.
unsafe impl Sync for SparseLt {}

impl Drop for SparseLt {
    fn drop(&mut self) {
        self.plans.lock().unwrap_or_else(|p| p.into_inner()).clear();
        // SAFETY: initialized in `new`, destroyed once, after every plan made with it.
        let _ = unsafe { (self.api.destroy)(&*self.handle) };
    }
}

/// A product's descriptors, and its configuration and workspace.
struct Plan {
    /// Declared first: its configuration is destroyed before the descriptors it was made from.
    state: Mutex<PlanState>,
    matmul: Box<Opaque>,
    _mats: Descriptors,
}

/// A product's matrix descriptors (those initialized so far), destroyed on drop.
struct Descriptors {
    api: &'static Api,
    /// Boxed: the matmul descriptor may keep their addresses, which a growing Vec would move.
    #[allow(clippy::vec_box)]
    mats: Vec<Box<Opaque>>,
}

impl Drop for Descriptors {
    fn drop(&mut self) {
        for m in &self.mats {
            // SAFETY: initialized in `new_plan`, destroyed once.
            let _ = unsafe { (self.api.mat_destroy)(&**m) };
        }
    }
}

struct PlanState {
    config: Config,
    /// Whether `config` was chosen by timing (else it is cuSPARSELt's default).
    chosen: bool,
    workspace: Option<CudaSlice<u8>>,
}

/// An algorithm selection (one kernel configuration) and the plan made from it.
struct Config {
    api: &'static Api,
    selection: Box<Opaque>,
    plan: Box<Opaque>,
    /// The workspace the plan asks for, read once (every run needs it).
    workspace_bytes: usize,
}

impl Drop for Config {
    fn drop(&mut self) {
        // SAFETY: both were initialized in `Config::new` and are destroyed once.
        unsafe {
            let _ = (self.api.plan_destroy)(&*self.plan);
            let _ = (self.api.alg_destroy)(&*self.selection);
        }
    }
}

// SAFETY: host-side descriptors, used under `state`'s lock and the executable's run
// serialization (see `SparseLt`).
unsafe impl Send for Plan {}
// SAFETY: as above.
unsafe impl Sync for Plan {}

impl Config {
    /// cuSPARSELt's default configuration of `matmul` (`id` None), or configuration `id`;
    /// also the number of configurations it has for the product.
    fn new(api: &'static Api, handle: &Opaque, matmul: &Opaque, id: Option<i32>) -> Result<(Config, i32), GpuError> {
        let mut selection = Opaque::boxed();
        // SAFETY (this block): handle and matmul descriptor initialized; the selection and
        // plan are writable, aligned objects of the header's size; attribute values point to
        // i32 locals and the workspace size to a usize field. A selection made is destroyed on
        // every path (by `Config`'s drop once the plan exists).
        unsafe {
            check(api, "cusparseLtMatmulAlgSelectionInit", (api.alg_init)(handle, &mut *selection, matmul, ALG_DEFAULT))?;
            let mut max_id = 0i32;
            let mut status = (api.alg_get)(handle, &*selection, ALG_CONFIG_MAX_ID, (&mut max_id as *mut i32).cast(), 4);
            if let (0, Some(id)) = (status, id) {
                status = (api.alg_set)(handle, &mut *selection, ALG_CONFIG_ID, (&id as *const i32).cast(), 4);
            }
            let mut plan = Opaque::boxed();
            if status == 0 {
                status = (api.plan_init)(handle, &mut *plan, matmul, &*selection);
            }
            if status != 0 {
                let _ = (api.alg_destroy)(&*selection);
                return Err(status_error(api, "cuSPARSELt configuration", status));
            }
            let mut config = Config { api, selection, plan, workspace_bytes: 0 };
            check(api, "cusparseLtMatmulGetWorkspace", (api.workspace)(handle, &*config.plan, &mut config.workspace_bytes))?;
            Ok((config, max_id))
        }
    }
}

/// cuSPARSELt 0.8.0 lists, at the end of every Hopper range measured (the H200: four product
/// shapes, both weight layouts), 16 configurations whose kernels stop on an illegal
/// instruction, which ends the CUDA context; its own `cusparseLtMatmulSearch` runs them and
/// fails so. kiln's search leaves them out.
const FAULTING_TAIL_CONFIGS: i32 = 16;
/// Timed runs per configuration, after one untimed.
const SEARCH_RUNS: usize = 3;

impl SparseLt {
    /// Opens cuSPARSELt (once per process) and makes a handle for `stream`.
    pub fn new(stream: Arc<CudaStream>) -> Result<SparseLt, GpuError> {
        let api = api()?;
        let mut handle = Opaque::boxed();
        // SAFETY: `handle` is a writable, aligned object of the header's size.
        check(api, "cusparseLtInit", unsafe { (api.init)(&mut *handle) })?;
        Ok(SparseLt { api, handle, stream, plans: Mutex::default() })
    }

    /// The structured descriptor of `g`'s weights (the caller destroys it).
    fn weights_descriptor(&self, g: &SparseGemm) -> Result<Box<Opaque>, GpuError> {
        let (_, [rows, cols, ld]) = g.structured();
        let mut desc = Opaque::boxed();
        // SAFETY: handle initialized; `desc` writable and aligned.
        let status = unsafe { (self.api.structured_init)(&*self.handle, &mut *desc, rows, cols, ld, ALIGNMENT, value_type(g.dtype)?, ORDER_COL, SPARSITY_50_PERCENT) };
        check(self.api, "cusparseLtStructuredDescriptorInit", status)?;
        Ok(desc)
    }

    /// `w` (2:4 along k, laid out as `g` says) compressed to cuSPARSELt's form: its kept values
    /// and their positions, as bytes in `out`'s storage (`out` made by `alloc(bytes)`).
    pub fn compress(&self, g: &SparseGemm, w: &DeviceBuffer, alloc: impl Fn(usize) -> Result<DeviceTensor, GpuError>) -> Result<DeviceTensor, GpuError> {
        let desc = self.weights_descriptor(g)?;
        let (op, _) = g.structured();
        let result = (|| {
            let (mut size, mut buffer_size) = (0usize, 0usize);
            // SAFETY: handle and descriptor initialized; the out-pointers are locals.
            check(self.api, "cusparseLtSpMMACompressedSize2", unsafe { (self.api.compressed_size)(&*self.handle, &*desc, &mut size, &mut buffer_size) })?;
            let out = alloc(size)?;
            let scratch = alloc(buffer_size.max(1))?;
            let (pw, po, ps) = (w.ptr(), out.buf.ptr(), scratch.buf.ptr());
            // SAFETY: `w` holds the dense weights the descriptor describes (the caller sized it
            // by the shape inference checks); `out` and `scratch` hold the sizes cuSPARSELt asked
            // for; the compression is enqueued on this handle's stream, which orders every use.
            let status = unsafe {
                (self.api.compress)(&*self.handle, &*desc, 1, op, pw as *const c_void, po as *mut c_void, ps as *mut c_void, self.stream.cu_stream())
            };
            check(self.api, "cusparseLtSpMMACompress2", status)?;
            // The scratch buffer is freed when this returns: wait for the compression first.
            self.stream.synchronize().map_err(crate::error::driver("cuStreamSynchronize"))?;
            Ok(out)
        })();
        // SAFETY: initialized above, destroyed once.
        let _ = unsafe { (self.api.mat_destroy)(&*desc) };
        result
    }

    /// The plan of `g` with `bias` (its device address: the descriptor holds it), made once.
    fn plan(&self, g: &SparseGemm, bias: u64) -> Result<Arc<Plan>, GpuError> {
        let mut plans = self.plans.lock().unwrap_or_else(|p| p.into_inner());
        let entry = plans.entry((*g, bias)).or_insert_with(|| self.new_plan(g, bias).map(Arc::new).map_err(|e| e.to_string()));
        entry.clone().map_err(|reason| GpuError::Library { call: "cuSPARSELt plan", reason })
    }

    fn new_plan(&self, g: &SparseGemm, bias: u64) -> Result<Plan, GpuError> {
        let api = self.api;
        let h: *const Opaque = &*self.handle;
        let ty = value_type(g.dtype)?;
        let (op_a, _) = g.structured();
        let (m, n, k) = (g.m as i64, g.n as i64, g.k as i64);
        // Destroyed on every path once initialized (an error drops them).
        let mut mats = Descriptors { api, mats: vec![self.weights_descriptor(g)?] };
        // SAFETY (this block): the handle is initialized; every descriptor is a writable,
        // aligned object of the header's size that outlives the calls reading it (the plan
        // keeps them all); attribute values point to locals of the documented types.
        unsafe {
            // X row-major [m, k] is column-major [k, m]; C row-major [m, n] column-major [n, m].
            for (rows, cols) in [(k, m), (n, m)] {
                let mut desc = Opaque::boxed();
                check(api, "cusparseLtDenseDescriptorInit", (api.dense_init)(h, &mut *desc, rows, cols, rows, ALIGNMENT, ty, ORDER_COL))?;
                mats.mats.push(desc);
            }
            let (a, b, c): (*const Opaque, *const Opaque, *const Opaque) = (&*mats.mats[0], &*mats.mats[1], &*mats.mats[2]);
            let mut matmul = Opaque::boxed();
            check(api, "cusparseLtMatmulDescriptorInit", (api.matmul_init)(h, &mut *matmul, op_a, OP_N, a, b, c, c, COMPUTE_32F))?;
            if g.relu {
                let on: i32 = 1;
                check(api, "cusparseLtMatmulDescSetAttribute(RELU)", (api.matmul_set)(h, &mut *matmul, ATTR_ACTIVATION_RELU, (&on as *const i32).cast(), 4))?;
            }
            if bias != 0 {
                let pointer = bias as *const c_void;
                check(api, "cusparseLtMatmulDescSetAttribute(BIAS_POINTER)", (api.matmul_set)(h, &mut *matmul, ATTR_BIAS_POINTER, (&pointer as *const *const c_void).cast(), 8))?;
            }
            let (config, _) = Config::new(api, &self.handle, &matmul, None)?;
            Ok(Plan { state: Mutex::new(PlanState { config, chosen: false, workspace: None }), matmul, _mats: mats })
        }
    }

    /// Enqueues `c = x · op(w) (+ bias, ReLU) (+ residual)` with `compressed` from
    /// [`SparseLt::compress`]. A plan's first run chooses its configuration by timing each
    /// (running the product several times: outside graph captures, `may_choose`; inside one
    /// the default configuration stays).
    #[allow(clippy::too_many_arguments)]
    pub fn matmul(
        &self,
        g: &SparseGemm,
        x: &DeviceBuffer,
        compressed: &DeviceBuffer,
        bias: Option<&DeviceBuffer>,
        residual: Option<&DeviceBuffer>,
        c: &DeviceBuffer,
        may_choose: bool,
    ) -> Result<(), GpuError> {
        let plan = self.plan(g, bias.map_or(0, |b| b.ptr()))?;
        let mut state = plan.state.lock().unwrap_or_else(|p| p.into_inner());
        let run = |config: &Config, workspace: &mut Option<CudaSlice<u8>>| -> Result<(), GpuError> {
            let (alpha, beta) = (1.0f32, if residual.is_some() { 1.0f32 } else { 0.0 });
            let workspace = self.workspace(config, workspace)?;
            let mut stream = self.stream.cu_stream();
            // SAFETY: `c` is written through its raw address only by this enqueued product; the
            // caller sized `x` `[m, k]`, `c` and the residual `[m, n]` and the bias `n` values
            // of `g.dtype` (the ops module checks shapes first); `compressed` was made for `g`'s
            // weights; alpha/beta are f32 locals (compute type 32F) outliving the call; the
            // workspace holds what the plan asked for.
            let status = unsafe {
                (self.api.matmul)(
                    &*self.handle,
                    &*config.plan,
                    (&alpha as *const f32).cast(),
                    compressed.ptr() as *const c_void,
                    x.ptr() as *const c_void,
                    (&beta as *const f32).cast(),
                    residual.unwrap_or(c).ptr() as *const c_void,
                    c.ptr() as *mut c_void,
                    workspace as *mut c_void,
                    &mut stream,
                    1,
                )
            };
            check(self.api, "cusparseLtMatmul", status)
        };
        if !state.chosen && may_choose {
            let (config, report) = self.choose_configuration(g, &plan, &mut state.workspace, &run)?;
            tracing::info!(target: "kiln::sparse", "cuSPARSELt {g:?}: {report}");
            state.config = config;
            state.chosen = true;
        }
        let state = &mut *state;
        run(&state.config, &mut state.workspace)?;
        PRODUCTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// The plan's workspace, grown to what its configuration asks for.
    fn workspace(&self, config: &Config, workspace: &mut Option<CudaSlice<u8>>) -> Result<u64, GpuError> {
        let bytes = config.workspace_bytes;
        if workspace.as_ref().is_none_or(|w| w.len() < bytes) {
            *workspace = Some(self.stream.alloc_zeros::<u8>(bytes.max(1)).map_err(crate::error::driver("cuMemAlloc"))?);
        }
        Ok(workspace.as_ref().map_or(0, |w| w.device_ptr(&self.stream).0))
    }

    /// Times each configuration cuSPARSELt offers for the plan (CUDA events, the median of
    /// [`SEARCH_RUNS`] after one untimed run): the fastest, and what the log says of it.
    #[allow(clippy::type_complexity)]
    fn choose_configuration(
        &self,
        g: &SparseGemm,
        plan: &Plan,
        workspace: &mut Option<CudaSlice<u8>>,
        run: &dyn Fn(&Config, &mut Option<CudaSlice<u8>>) -> Result<(), GpuError>,
    ) -> Result<(Config, String), GpuError> {
        let (_, max_id) = Config::new(self.api, &self.handle, &plan.matmul, None)?;
        let event = |what| self.stream.record_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(crate::error::driver(what));
        let mut best: Option<(f32, i32, Config)> = None;
        let (mut timed, mut default_ms) = (0, f32::NAN);
        for id in 0..(max_id - FAULTING_TAIL_CONFIGS).max(1) {
            // A configuration cuSPARSELt refuses for this product is not a candidate.
            let Ok((config, _)) = Config::new(self.api, &self.handle, &plan.matmul, Some(id)) else { continue };
            if run(&config, workspace).is_err() {
                continue;
            }
            let mut times = Vec::with_capacity(SEARCH_RUNS);
            for _ in 0..SEARCH_RUNS {
                let start = event("cuEventRecord")?;
                run(&config, workspace)?;
                let end = event("cuEventRecord")?;
                times.push(start.elapsed_ms(&end).map_err(crate::error::driver("cuEventElapsedTime"))?);
            }
            times.sort_by(f32::total_cmp);
            let ms = times[times.len() / 2];
            timed += 1;
            if id == 0 {
                default_ms = ms;
            }
            if best.as_ref().is_none_or(|b| ms < b.0) {
                best = Some((ms, id, config));
            }
        }
        let (ms, id, config) = best.ok_or_else(|| GpuError::Unsupported(format!("cuSPARSELt ran no configuration of {g:?}")))?;
        Ok((config, format!("configuration {id} of {timed} timed ({ms:.4} ms; the default {default_ms:.4} ms)")))
    }
}

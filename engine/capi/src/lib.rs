//! kiln's C runtime API, declared in `include/kiln.h` and built as `libkiln_capi.so`: load an
//! engine file, create execution contexts, set inputs from host memory, run, and read the
//! outputs back, with every failure a status and a message (`kiln_last_error`), never an
//! abort. The handles' logic is safe Rust in [`handles`]; this file only crosses the FFI.
//!
//! Threads: an engine may be shared; a context is used by one thread at a time.

pub mod handles;

use handles::{dtype_code, ContextHandle, EngineHandle};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// `KilnEngine` in the header.
#[derive(Debug)]
pub struct KilnEngine(EngineHandle);
/// `KilnContext` in the header: a context and the engine it runs (which must outlive it).
#[derive(Debug)]
pub struct KilnContext {
    handle: ContextHandle,
    engine: *const KilnEngine,
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(message: &str) {
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = text);
}

/// Runs `f`, turning an error or a panic into the thread's last error and `failed`.
fn guarded<T>(failed: T, f: impl FnOnce() -> Result<T, String>) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(value)) => value,
        Ok(Err(message)) => {
            set_error(&message);
            failed
        }
        Err(_) => {
            set_error("internal error (bug): kiln panicked");
            failed
        }
    }
}

/// A C string argument as UTF-8 text.
///
/// # Safety
/// `text` is null or points to a NUL-terminated string that stays valid for `'a`.
unsafe fn text<'a>(text: *const c_char, what: &str) -> Result<&'a str, String> {
    if text.is_null() {
        return Err(format!("{what} is NULL"));
    }
    // SAFETY: not null, and the caller promises a NUL-terminated string valid for 'a.
    let c = unsafe { CStr::from_ptr(text) };
    c.to_str().map_err(|_| format!("{what} is not UTF-8"))
}

/// The engine behind a handle.
///
/// # Safety
/// `engine` is null or a live pointer from `kiln_engine_load`.
unsafe fn engine_ref<'a>(engine: *const KilnEngine) -> Result<&'a EngineHandle, String> {
    // SAFETY: the caller promises null or a live handle from kiln_engine_load.
    unsafe { engine.as_ref() }.map(|e| &e.0).ok_or_else(|| "the engine is NULL".to_string())
}

/// The version of kiln, e.g. "0.1.0" (static storage).
#[no_mangle]
pub extern "C" fn kiln_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The message of this thread's last failed call; valid until its next failed call.
#[no_mangle]
pub extern "C" fn kiln_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// Loads an engine file and prepares it on the backend it was built for; NULL on failure.
///
/// # Safety
/// `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn kiln_engine_load(path: *const c_char) -> *mut KilnEngine {
    // SAFETY: the caller's promise, passed on.
    unsafe { kiln_engine_load_on_device(path, 0) }
}

/// `kiln_engine_load` on device `device` (cuda's ordinal; backends with one device take 0):
/// engines of one process may run on several GPUs. NULL on failure.
///
/// # Safety
/// `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn kiln_engine_load_on_device(path: *const c_char, device: c_int) -> *mut KilnEngine {
    guarded(std::ptr::null_mut(), || {
        // SAFETY: the caller passes a NUL-terminated path.
        let path = unsafe { text(path, "the path") }?;
        let device = usize::try_from(device).map_err(|_| format!("device {device} is negative"))?;
        let bytes = std::fs::read(path).map_err(|e| format!("cannot read engine file `{path}`: {e}"))?;
        let handle = EngineHandle::load(&bytes, device).map_err(|e| format!("`{path}`: {e}"))?;
        Ok(Box::into_raw(Box::new(KilnEngine(handle))))
    })
}

/// Frees an engine (NULL is ignored); its contexts must be freed first.
///
/// # Safety
/// `engine` is null or a pointer from `kiln_engine_load` not freed before.
#[no_mangle]
pub unsafe extern "C" fn kiln_engine_free(engine: *mut KilnEngine) {
    if !engine.is_null() {
        // SAFETY: the pointer came from Box::into_raw in kiln_engine_load and is freed once.
        drop(unsafe { Box::from_raw(engine) });
    }
}

/// How many inputs and outputs the engine has (inputs first); -1 on failure.
///
/// # Safety
/// `engine` is null or a live engine.
#[no_mangle]
pub unsafe extern "C" fn kiln_engine_io_count(engine: *const KilnEngine) -> c_int {
    // SAFETY: the caller passes null or a live engine.
    guarded(-1, || Ok(unsafe { engine_ref(engine) }?.io_names.len() as c_int))
}

/// The name of input or output `index` (inputs first), owned by the engine; NULL on failure.
///
/// # Safety
/// `engine` is null or a live engine.
#[no_mangle]
pub unsafe extern "C" fn kiln_engine_io_name(engine: *const KilnEngine, index: c_int) -> *const c_char {
    guarded(std::ptr::null(), || {
        // SAFETY: the caller passes null or a live engine.
        let engine = unsafe { engine_ref(engine) }?;
        let count = engine.io_names.len();
        let name = usize::try_from(index).ok().and_then(|i| engine.io_names.get(i));
        name.map(|n| n.as_ptr()).ok_or_else(|| format!("index {index} is not below the engine's {count} inputs and outputs"))
    })
}

/// 1 for an input, 0 for an output, -1 on failure (no such name).
///
/// # Safety
/// `engine` is null or a live engine; `name` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn kiln_engine_is_input(engine: *const KilnEngine, name: *const c_char) -> c_int {
    guarded(-1, || {
        // SAFETY: the caller passes null or a live engine, and a NUL-terminated name.
        let (engine, name) = unsafe { (engine_ref(engine)?, text(name, "the name")?) };
        engine.is_input(name).map(c_int::from)
    })
}

/// The `KilnDataType` of an input or output; -1 on failure or for a type the header lacks.
///
/// # Safety
/// `engine` is null or a live engine; `name` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn kiln_engine_io_dtype(engine: *const KilnEngine, name: *const c_char) -> c_int {
    guarded(-1, || {
        // SAFETY: as kiln_engine_is_input.
        let (engine, name) = unsafe { (engine_ref(engine)?, text(name, "the name")?) };
        Ok(dtype_code(engine.dtype(name)?))
    })
}

/// Copies `values` into `dims` (room for `max_rank`) and returns the rank; -1 on failure.
///
/// # Safety
/// `dims` is null or has room for `max_rank` values.
unsafe fn write_dims(values: &[i64], dims: *mut i64, max_rank: c_int) -> Result<c_int, String> {
    let room = usize::try_from(max_rank).map_err(|_| "max_rank is negative".to_string())?;
    if values.len() > room {
        return Err(format!("the rank is {} but max_rank is {max_rank}", values.len()));
    }
    if !values.is_empty() {
        if dims.is_null() {
            return Err("dims is NULL".into());
        }
        // SAFETY: dims has room for max_rank >= values.len() values (the caller's promise).
        unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), dims, values.len()) };
    }
    Ok(values.len() as c_int)
}

/// The declared dims of an input or output (-1 for a dynamic dim) into `dims`; returns the
/// rank, or -1 on failure (also when the rank exceeds `max_rank`).
///
/// # Safety
/// `engine` is null or a live engine; `name` a NUL-terminated string; `dims` has room for
/// `max_rank` values.
#[no_mangle]
pub unsafe extern "C" fn kiln_engine_io_shape(engine: *const KilnEngine, name: *const c_char, dims: *mut i64, max_rank: c_int) -> c_int {
    guarded(-1, || {
        // SAFETY: as kiln_engine_is_input.
        let (engine, name) = unsafe { (engine_ref(engine)?, text(name, "the name")?) };
        let values = engine.dims(name)?;
        // SAFETY: the caller gives room for max_rank values.
        unsafe { write_dims(&values, dims, max_rank) }
    })
}

/// The engine's optimization profiles (1 for an engine of fixed shapes); -1 on failure.
///
/// # Safety
/// `engine` is null or a live engine.
#[no_mangle]
pub unsafe extern "C" fn kiln_engine_profile_count(engine: *const KilnEngine) -> c_int {
    guarded(-1, || {
        // SAFETY: the caller passes null or a live engine.
        let engine = unsafe { engine_ref(engine) }?;
        Ok(engine.prepared.engine().num_optimization_profiles().max(1) as c_int)
    })
}

/// Makes optimization profile `index` the context's: its inputs' dims must lie within that
/// profile's min and max. Inputs set before are dropped. Returns 0, or -1 on failure.
///
/// # Safety
/// `context` is null or a live context.
#[no_mangle]
pub unsafe extern "C" fn kiln_context_set_profile(context: *mut KilnContext, index: c_int) -> c_int {
    guarded(-1, || {
        // SAFETY: the caller passes null or a live context used by this thread only.
        let context = unsafe { context.as_mut() }.ok_or("the context is NULL")?;
        let index = usize::try_from(index).map_err(|_| format!("profile index {index} is negative"))?;
        context.handle.context.set_optimization_profile(index).map_err(|e| e.to_string())?;
        context.handle.inputs.clear();
        Ok(0)
    })
}

/// A new execution context on `engine` (which must outlive it); NULL on failure.
///
/// # Safety
/// `engine` is null or a live engine.
#[no_mangle]
pub unsafe extern "C" fn kiln_context_create(engine: *const KilnEngine) -> *mut KilnContext {
    guarded(std::ptr::null_mut(), || {
        // SAFETY: the caller passes null or a live engine.
        let handle = unsafe { engine_ref(engine) }?.context();
        Ok(Box::into_raw(Box::new(KilnContext { handle, engine })))
    })
}

/// Frees a context (NULL is ignored).
///
/// # Safety
/// `context` is null or a pointer from `kiln_context_create` not freed before.
#[no_mangle]
pub unsafe extern "C" fn kiln_context_free(context: *mut KilnContext) {
    if !context.is_null() {
        // SAFETY: the pointer came from Box::into_raw in kiln_context_create and is freed once.
        drop(unsafe { Box::from_raw(context) });
    }
}

/// Sets input `name` to a copy of `bytes` bytes at `data`: its elements, little-endian, in
/// C order, of the input's type, in dims `dims[0..rank]`. Returns 0, or -1 on failure.
///
/// # Safety
/// `context` is null or a live context; `name` a NUL-terminated string; `dims` holds `rank`
/// values; `data` holds `bytes` bytes.
#[no_mangle]
pub unsafe extern "C" fn kiln_context_set_input(
    context: *mut KilnContext,
    name: *const c_char,
    dims: *const i64,
    rank: c_int,
    data: *const c_void,
    bytes: usize,
) -> c_int {
    guarded(-1, || {
        // SAFETY: the caller passes null or a live context used by this thread only.
        let context = unsafe { context.as_mut() }.ok_or("the context is NULL")?;
        // SAFETY: the engine outlives its contexts (the header's rule).
        let engine = unsafe { engine_ref(context.engine) }?;
        // SAFETY: a NUL-terminated name.
        let name = unsafe { text(name, "the name") }?;
        // SAFETY: dims holds rank values (the caller's promise).
        let dims = unsafe { dims_arg(dims, rank) }?;
        let data: &[u8] = match bytes {
            0 => &[],
            _ if data.is_null() => return Err("data is NULL".into()),
            // SAFETY: data holds `bytes` bytes (the caller's promise).
            _ => unsafe { std::slice::from_raw_parts(data.cast::<u8>(), bytes) },
        };
        context.handle.set_input(engine, name, &dims, data)?;
        Ok(0)
    })
}

/// Runs the engine on the inputs set, synchronously. Returns 0, or -1 on failure.
///
/// # Safety
/// `context` is null or a live context.
#[no_mangle]
pub unsafe extern "C" fn kiln_context_execute(context: *mut KilnContext) -> c_int {
    guarded(-1, || {
        // SAFETY: the caller passes null or a live context used by this thread only.
        let context = unsafe { context.as_mut() }.ok_or("the context is NULL")?;
        context.handle.execute()?;
        Ok(0)
    })
}

/// The dims of output `name` of the last run into `dims`; returns the rank, or -1.
///
/// # Safety
/// `context` is null or a live context; `name` a NUL-terminated string; `dims` has room for
/// `max_rank` values.
#[no_mangle]
pub unsafe extern "C" fn kiln_context_output_shape(context: *const KilnContext, name: *const c_char, dims: *mut i64, max_rank: c_int) -> c_int {
    guarded(-1, || {
        // SAFETY: null or a live context; a NUL-terminated name.
        let (context, name) = unsafe { (context.as_ref().ok_or("the context is NULL")?, text(name, "the name")?) };
        let shape: Vec<i64> = context.handle.output_dims(name)?.iter().map(|&d| d as i64).collect();
        // SAFETY: the caller gives room for max_rank values.
        unsafe { write_dims(&shape, dims, max_rank) }
    })
}

/// Copies output `name` of the last run (little-endian elements, C order) into `data`, which
/// has room for `bytes` bytes; returns the bytes copied, or -1 (also when they do not fit).
///
/// # Safety
/// `context` is null or a live context; `name` a NUL-terminated string; `data` has room for
/// `bytes` bytes.
#[no_mangle]
pub unsafe extern "C" fn kiln_context_copy_output(context: *const KilnContext, name: *const c_char, data: *mut c_void, bytes: usize) -> i64 {
    guarded(-1, || {
        // SAFETY: null or a live context; a NUL-terminated name.
        let (context, name) = unsafe { (context.as_ref().ok_or("the context is NULL")?, text(name, "the name")?) };
        let tensor = context.handle.output(name)?;
        let values = tensor.data().le_bytes();
        if values.len() > bytes {
            return Err(format!("output `{name}` takes {} bytes; the buffer has {bytes}", values.len()));
        }
        if !values.is_empty() {
            if data.is_null() {
                return Err("data is NULL".into());
            }
            // SAFETY: data has room for `bytes` >= values.len() bytes (the caller's promise).
            unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), data.cast::<u8>(), values.len()) };
        }
        Ok(values.len() as i64)
    })
}

/// `dims[0..rank]` as dims, refusing a negative rank or dim and a NULL array.
///
/// # Safety
/// `dims` holds `rank` values when `rank` > 0.
unsafe fn dims_arg(dims: *const i64, rank: c_int) -> Result<Vec<usize>, String> {
    let rank = usize::try_from(rank).map_err(|_| "rank is negative".to_string())?;
    let dims: &[i64] = match rank {
        0 => &[],
        _ if dims.is_null() => return Err("dims is NULL".into()),
        // SAFETY: dims holds rank values (the caller's promise).
        _ => unsafe { std::slice::from_raw_parts(dims, rank) },
    };
    dims.iter().map(|&d| usize::try_from(d).map_err(|_| format!("dim {d} is negative"))).collect()
}

/// Sets the dims of input `name` for `kiln_context_enqueue` (device-resident I/O; host inputs
/// take their dims from `kiln_context_set_input`). Returns 0, or -1 on failure.
///
/// # Safety
/// `context` is null or a live context; `name` a NUL-terminated string; `dims` holds `rank`
/// values.
#[no_mangle]
pub unsafe extern "C" fn kiln_context_set_input_shape(context: *mut KilnContext, name: *const c_char, dims: *const i64, rank: c_int) -> c_int {
    guarded(-1, || {
        // SAFETY: the caller passes null or a live context used by this thread only.
        let context = unsafe { context.as_mut() }.ok_or("the context is NULL")?;
        // SAFETY: a NUL-terminated name; dims holds rank values.
        let (name, dims) = unsafe { (text(name, "the name")?, dims_arg(dims, rank)?) };
        context.handle.context.set_input_shape(name, &dims).map_err(|e| e.to_string())?;
        Ok(0)
    })
}

/// Binds `bytes` bytes of device memory at `address` (a `CUdeviceptr` on the engine's device)
/// to input or output `name`, for `kiln_context_enqueue`. Returns 0, or -1 on failure.
///
/// # Safety
/// `context` is null or a live context; `name` a NUL-terminated string. The address is not
/// read here; the backend checks it when enqueueing.
#[no_mangle]
pub unsafe extern "C" fn kiln_context_set_device_address(context: *mut KilnContext, name: *const c_char, address: u64, bytes: usize) -> c_int {
    guarded(-1, || {
        // SAFETY: the caller passes null or a live context used by this thread only.
        let context = unsafe { context.as_mut() }.ok_or("the context is NULL")?;
        // SAFETY: a NUL-terminated name.
        let name = unsafe { text(name, "the name") }?;
        let memory = kiln_core::DevicePointer { address, bytes };
        context.handle.context.set_device_tensor_address(name, memory).map_err(|e| e.to_string())?;
        Ok(0)
    })
}

/// Runs the engine on the device memory bound to every input and output, ordered on `stream`
/// (a `CUstream`; NULL is the legacy default stream), recording `input_consumed` (a `CUevent`,
/// or NULL) once the inputs have been read. Returns once enqueued: the outputs are ready when
/// the stream reaches this point. Returns 0, or -1 on failure (also on a backend that runs on
/// host memory).
///
/// # Safety
/// `context` is null or a live context; `stream` and `input_consumed` are NULL or handles of
/// the engine device's primary context.
#[no_mangle]
pub unsafe extern "C" fn kiln_context_enqueue(context: *mut KilnContext, stream: *mut c_void, input_consumed: *mut c_void) -> c_int {
    guarded(-1, || {
        // SAFETY: the caller passes null or a live context used by this thread only.
        let context = unsafe { context.as_mut() }.ok_or("the context is NULL")?;
        let event = (!input_consumed.is_null()).then_some(input_consumed as u64);
        context.handle.enqueue(stream as u64, event)?;
        Ok(0)
    })
}

/// Page-locked registrations by address (`kiln_register_host_memory`).
fn registrations() -> &'static std::sync::Mutex<std::collections::HashMap<u64, kiln_builtin_backends::HostRegistration>> {
    static REGISTERED: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<u64, kiln_builtin_backends::HostRegistration>>> =
        std::sync::OnceLock::new();
    REGISTERED.get_or_init(Default::default)
}

/// Page-locks `bytes` bytes of the caller's host memory at `data` for cuda device `device`, so
/// that bound with `kiln_context_set_device_address` it is copied straight to and from the
/// device. Returns 0, or -1 (no CUDA, a range the driver refuses, already registered).
///
/// # Safety
/// `data` holds `bytes` bytes the caller owns and keeps alive until
/// `kiln_unregister_host_memory`; the host does not touch them while an execution uses them.
#[no_mangle]
pub unsafe extern "C" fn kiln_register_host_memory(data: *mut c_void, bytes: usize, device: c_int) -> c_int {
    guarded(-1, || {
        if data.is_null() || bytes == 0 {
            return Err("data is NULL or bytes is 0".into());
        }
        let device = usize::try_from(device).map_err(|_| format!("device {device} is negative"))?;
        let mut registered = registrations().lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if registered.contains_key(&(data as u64)) {
            return Err(format!("{data:p} is registered already"));
        }
        // SAFETY: the caller's promise about the range, passed on.
        let registration = unsafe { kiln_builtin_backends::register_host_memory(device, data as u64, bytes) }.map_err(|e| e.to_string())?;
        registered.insert(data as u64, registration);
        Ok(0)
    })
}

/// Undoes `kiln_register_host_memory(data, …)` once the device is idle. Returns 0, or -1 when
/// `data` is not registered.
///
/// # Safety
/// None beyond the C API's rules: `data` is only compared.
#[no_mangle]
pub unsafe extern "C" fn kiln_unregister_host_memory(data: *mut c_void) -> c_int {
    guarded(-1, || {
        let removed = registrations().lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&(data as u64));
        removed.map(|_| 0).ok_or_else(|| format!("{data:p} is not registered (kiln_register_host_memory)"))
    })
}

/// `KilnOutputAllocator` of `include/kiln.h`.
type OutputAllocatorFn = unsafe extern "C" fn(user: *mut c_void, name: *const c_char, dims: *const i64, rank: c_int, bytes: usize) -> u64;

/// A C output allocator and its user pointer (kept as an address: the caller vouches that the
/// function may be called from the thread that enqueues, with that pointer).
struct CallbackAllocator {
    allocate: OutputAllocatorFn,
    user: usize,
}

impl kiln_core::OutputAllocator for CallbackAllocator {
    fn allocate(&self, name: &str, dims: &[usize], bytes: usize) -> Option<kiln_core::DevicePointer> {
        let name = std::ffi::CString::new(name).ok()?;
        let dims: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        // SAFETY: the function and user pointer came from kiln_context_set_output_allocator,
        // whose caller promised they stay valid while the context runs; the name and dims live
        // for the call.
        let address = unsafe { (self.allocate)(self.user as *mut c_void, name.as_ptr(), dims.as_ptr(), dims.len() as c_int, bytes) };
        (address != 0).then_some(kiln_core::DevicePointer { address, bytes })
    }
}

/// Makes output `name` of `kiln_context_enqueue` take its device memory from `allocate`,
/// called during the enqueue once the output's dims are known (outputs whose size depends on
/// the data): `allocate(user, name, dims, rank, bytes)` returns a `CUdeviceptr` with room for
/// `bytes` bytes, or 0 to refuse. Returns 0, or -1 on failure.
///
/// # Safety
/// `context` is null or a live context; `name` a NUL-terminated string; `allocate` may be
/// called with `user` from the thread that enqueues while the context lives.
#[no_mangle]
pub unsafe extern "C" fn kiln_context_set_output_allocator(
    context: *mut KilnContext,
    name: *const c_char,
    allocate: Option<OutputAllocatorFn>,
    user: *mut c_void,
) -> c_int {
    guarded(-1, || {
        // SAFETY: the caller passes null or a live context used by this thread only.
        let context = unsafe { context.as_mut() }.ok_or("the context is NULL")?;
        // SAFETY: a NUL-terminated name.
        let name = unsafe { text(name, "the name") }?;
        let allocate = allocate.ok_or("the allocator function is NULL")?;
        let allocator = std::sync::Arc::new(CallbackAllocator { allocate, user: user as usize });
        context.handle.context.set_output_allocator(name, allocator).map_err(|e| e.to_string())?;
        Ok(0)
    })
}

//! The unsafe edge: calling a plugin library's C entries and wrapping them in kiln's
//! safe `PluginCreator` / `LayerPlugin` traits. Every pointer a library hands over is
//! checked (null, ABI version, struct size) before use, and data is copied out at once.

use crate::convert::{dim_expr, dtype_code, dtype_of, field_data, field_type_code, field_type_of, tensor_desc};
use kiln::plugin::{
    CudaImage, CudaKernel, DimExpr, FieldSpec, LayerPlugin, PluginCreator, PluginError, PluginKey, PluginTensorDesc,
    WgslKernel,
};
use kiln::{dispatch_data, DataType, HostTensor, PluginField};
use kiln_plugin_abi as abi;
use libloading::Library;
use std::ffi::{c_char, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

const MESSAGE_CAPACITY: usize = 2048;
const MAX_DIM_NODES: usize = 256;

/// A caller-owned error buffer for one call.
struct ErrorBuf {
    bytes: Vec<u8>,
}

impl ErrorBuf {
    fn new() -> ErrorBuf {
        ErrorBuf { bytes: vec![0; MESSAGE_CAPACITY] }
    }

    fn raw(&mut self) -> abi::kiln_error {
        abi::kiln_error { message: self.bytes.as_mut_ptr().cast(), capacity: MESSAGE_CAPACITY as u32 }
    }

    /// The status as a result, with the plugin's message (its last byte is always a terminator).
    fn check(mut self, status: abi::kiln_status, what: &str) -> Result<(), String> {
        if status == abi::KILN_OK {
            return Ok(());
        }
        *self.bytes.last_mut().expect("non-empty buffer") = 0;
        let message =
            CStr::from_bytes_until_nul(&self.bytes).map(|m| m.to_string_lossy().into_owned()).unwrap_or_default();
        let message = if message.is_empty() { "(no message)".to_string() } else { message };
        Err(match status {
            abi::KILN_UNSUPPORTED => format!("{what} is not supported: {message}"),
            _ => format!("{what} failed: {message}"),
        })
    }
}

/// Copies a NUL-terminated string the library owns.
fn string_at(ptr: *const c_char, what: &str) -> Result<String, String> {
    if ptr.is_null() {
        return Err(format!("{what} is NULL"));
    }
    // SAFETY: the header requires a NUL-terminated string valid for this call; non-null checked.
    Ok(unsafe { CStr::from_ptr(ptr) }.to_string_lossy().into_owned())
}

/// Copies a field the library passes.
fn read_field(f: &abi::kiln_field) -> Result<(String, PluginField), String> {
    let name = string_at(f.name, "a field name")?;
    let len = usize::try_from(f.length).map_err(|_| format!("field `{name}` has a negative length"))?;
    if f.data.is_null() && len > 0 {
        return Err(format!("field `{name}` has {len} elements but no data"));
    }
    fn copy<T: Copy>(data: *const c_void, len: usize) -> Vec<T> {
        if len == 0 {
            return Vec::new();
        }
        // SAFETY: the header makes `data` point to `length` elements of the field's type,
        // valid for this call; null was refused above for a non-empty field.
        unsafe { std::slice::from_raw_parts(data.cast::<T>(), len) }.to_vec()
    }
    let value = match f.r#type {
        abi::KILN_FIELD_F32 => PluginField::F32(copy(f.data, len)),
        abi::KILN_FIELD_F64 => PluginField::F64(copy(f.data, len)),
        abi::KILN_FIELD_I32 => PluginField::I32(copy(f.data, len)),
        abi::KILN_FIELD_I64 => PluginField::I64(copy(f.data, len)),
        abi::KILN_FIELD_BYTES => PluginField::Bytes(copy(f.data, len)),
        abi::KILN_FIELD_TEXT => PluginField::Text(
            String::from_utf8(copy(f.data, len)).map_err(|_| format!("text field `{name}` is not UTF-8"))?,
        ),
        other => return Err(format!("field `{name}` has unknown type code {other}")),
    };
    Ok((name, value))
}

/// Why [`open_library`] refused a library.
#[derive(Debug)]
pub enum OpenError {
    /// The library does not define the entry point.
    NoEntryPoint,
    /// Anything else, as a message (`is truncated …`, `cannot be loaded: …`).
    Refused(String),
}

/// Loads a shared library whose function `entry` kiln will call, once its file passed the
/// checks of [`crate::elf`] (complete, for this process, `entry` a function), so a broken
/// file is an error rather than a crash inside `dlopen` or at the call.
pub fn open_library(path: &Path, entry: &str) -> Result<Library, OpenError> {
    #[cfg(all(unix, not(target_vendor = "apple")))]
    crate::elf::check_library(path, entry).map_err(|m| {
        if m.starts_with("does not export") {
            OpenError::NoEntryPoint
        } else {
            OpenError::Refused(m)
        }
    })?;
    // SAFETY: loading runs the library's initialisers; loading a library is what the
    // user asked for by naming it, and its file was checked to be a complete library.
    let lib = unsafe { Library::new(path) }.map_err(|e| OpenError::Refused(format!("cannot be loaded: {e}")))?;
    // SAFETY: only the symbol's address is read (as a pointer), nothing is called.
    unsafe { lib.get::<*const c_void>(entry.as_bytes()) }.map_err(|_| OpenError::NoEntryPoint)?;
    Ok(lib)
}

/// Loads a plugin library and wraps its creators (registering is the caller's step).
pub fn load_creators(path: &Path) -> Result<Vec<Arc<dyn PluginCreator>>, PluginError> {
    let library_error = |message: String| PluginError::Library { library: path.display().to_string(), message };
    let lib = open_library(path, abi::KILN_ENTRY_POINT).map_err(|e| {
        library_error(match e {
            OpenError::NoEntryPoint => {
                format!("does not export `{}`: it is not a kiln plugin library", abi::KILN_ENTRY_POINT)
            }
            OpenError::Refused(message) => message,
        })
    })?;
    let lib = Arc::new(lib);
    // SAFETY: the symbol exists (checked when opening) and its type is the header's
    // kiln_plugin_library_fn.
    let entry = unsafe { lib.get::<abi::kiln_plugin_library_fn>(abi::KILN_ENTRY_POINT.as_bytes()) }
        .map_err(|e| library_error(format!("lost `{}`: {e}", abi::KILN_ENTRY_POINT)))?;
    // SAFETY: calling the library's entry point, which takes no arguments; a panic cannot
    // cross a C ABI function (the header requires the library to catch its own).
    let description = unsafe { entry() };
    if description.is_null() {
        return Err(library_error(format!("`{}` returned NULL", abi::KILN_ENTRY_POINT)));
    }
    // SAFETY: non-null, and the header makes it a static kiln_plugin_library; only the
    // two leading u32 fields are read before the version and size are checked.
    let (version, size) = unsafe { ((*description).abi_version, (*description).struct_size) };
    if version != abi::KILN_PLUGIN_ABI_VERSION {
        return Err(library_error(format!(
            "was built for plugin ABI version {version}; this kiln supports version {}",
            abi::KILN_PLUGIN_ABI_VERSION
        )));
    }
    if (size as usize) < std::mem::size_of::<abi::kiln_plugin_library>() {
        return Err(library_error(format!("its library description is {size} bytes, smaller than ABI 1's")));
    }
    // SAFETY: version and size checked: the whole v1 struct is there.
    let description = unsafe { &*description };
    let count =
        usize::try_from(description.creator_count).map_err(|_| library_error("a negative creator count".into()))?;
    if count > 0 && description.creators.is_null() {
        return Err(library_error("lists creators but gives no array".into()));
    }
    let origin = path.display().to_string();
    (0..count)
        .map(|i| {
            // SAFETY: `creators` points to `creator_count` static creators (checked non-null).
            let raw = unsafe { &*description.creators.add(i) };
            CreatorAdapter::new(lib.clone(), raw, origin.clone())
                .map(|c| Arc::new(c) as Arc<dyn PluginCreator>)
                .map_err(|m| library_error(format!("creator #{i}: {m}")))
        })
        .collect()
}

/// A library's creator.
struct CreatorAdapter {
    _lib: Arc<Library>,
    raw: *const abi::kiln_plugin_creator,
    key: PluginKey,
    specs: Vec<FieldSpec>,
    origin: String,
}

// SAFETY: the creator is static data of a library kept loaded by `_lib`, and the header
// allows creators to be called from several threads at once.
unsafe impl Send for CreatorAdapter {}
// SAFETY: as above.
unsafe impl Sync for CreatorAdapter {}

impl std::fmt::Debug for CreatorAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CreatorAdapter({} from {})", self.key, self.origin)
    }
}

impl CreatorAdapter {
    fn new(lib: Arc<Library>, raw: &abi::kiln_plugin_creator, origin: String) -> Result<CreatorAdapter, String> {
        if raw.abi_version != abi::KILN_PLUGIN_ABI_VERSION {
            return Err(format!("was built for plugin ABI version {}", raw.abi_version));
        }
        if (raw.struct_size as usize) < std::mem::size_of::<abi::kiln_plugin_creator>() {
            return Err(format!("its struct is {} bytes, smaller than ABI 1's", raw.struct_size));
        }
        if raw.create.is_none() {
            return Err("has no create entry".into());
        }
        let key = PluginKey::new(
            string_at(raw.plugin_namespace, "the namespace")?,
            string_at(raw.name, "the name")?,
            string_at(raw.version, "the version")?,
        );
        let count = usize::try_from(raw.field_count).map_err(|_| "a negative field count".to_string())?;
        if count > 0 && raw.fields.is_null() {
            return Err("lists fields but gives no array".into());
        }
        let specs = (0..count)
            .map(|i| {
                // SAFETY: `fields` points to `field_count` static specs (checked non-null).
                let spec = unsafe { &*raw.fields.add(i) };
                Ok(FieldSpec { name: string_at(spec.name, "a field name")?, ty: field_type_of(spec.r#type)? })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(CreatorAdapter { _lib: lib, raw, key, specs, origin })
    }
}

impl PluginCreator for CreatorAdapter {
    fn key(&self) -> PluginKey {
        self.key.clone()
    }

    fn field_specs(&self) -> Vec<FieldSpec> {
        self.specs.clone()
    }

    fn origin(&self) -> String {
        self.origin.clone()
    }

    fn create(&self, fields: &[(String, PluginField)]) -> Result<Arc<dyn LayerPlugin>, PluginError> {
        let fail = |message: String| PluginError::Failed { plugin: self.key.to_string(), message };
        let names = fields.iter().map(|(n, _)| CString::new(n.as_str())).collect::<Result<Vec<_>, _>>();
        let names = names.map_err(|_| fail("a field name contains a NUL byte".into()))?;
        let raw_fields: Vec<abi::kiln_field> = fields
            .iter()
            .zip(&names)
            .map(|((_, f), name)| {
                let (length, data) = field_data(f);
                abi::kiln_field { name: name.as_ptr(), r#type: field_type_code(f), length, data }
            })
            .collect();
        let mut out = abi::kiln_plugin::empty();
        let mut err = ErrorBuf::new();
        // SAFETY: the creator is valid (see CreatorAdapter's Send/Sync note); the field
        // array and `out` live across the call; `create` was checked non-null.
        let status = unsafe {
            let raw = &*self.raw;
            let f = raw.create.expect("checked when the creator was wrapped");
            f(raw.self_, raw_fields.as_ptr(), raw_fields.len() as i32, &mut out, &mut err.raw())
        };
        err.check(status, "create").map_err(fail)?;
        PluginAdapter::new(self._lib.clone(), self.key.clone(), out)
            .map(|p| Arc::new(p) as Arc<dyn LayerPlugin>)
            .map_err(fail)
    }
}

/// An instance a library created; destroyed with the adapter.
struct RawPlugin(abi::kiln_plugin);

// SAFETY: the header lets kiln call an instance from any thread, never from two at once,
// which the Mutex around RawPlugin ensures.
unsafe impl Send for RawPlugin {}

impl Drop for RawPlugin {
    fn drop(&mut self) {
        if let Some(destroy) = self.0.destroy {
            // SAFETY: called once, last, on the instance the library created.
            unsafe { destroy(self.0.self_) };
        }
    }
}

struct PluginAdapter {
    /// Declared before `_lib`: fields drop in order, and `destroy` lives in the library.
    raw: Mutex<RawPlugin>,
    key: PluginKey,
    num_outputs: usize,
    _lib: Arc<Library>,
}

impl std::fmt::Debug for PluginAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PluginAdapter({})", self.key)
    }
}

/// A required entry of the instance, or an error naming it.
macro_rules! entry {
    ($raw:expr, $name:ident) => {
        $raw.0.$name.ok_or_else(|| format!("the plugin has no `{}` entry", stringify!($name)))
    };
}

impl PluginAdapter {
    fn new(lib: Arc<Library>, key: PluginKey, raw: abi::kiln_plugin) -> Result<PluginAdapter, String> {
        let raw = RawPlugin(raw);
        if raw.0.abi_version != abi::KILN_PLUGIN_ABI_VERSION
            || (raw.0.struct_size as usize) < std::mem::size_of::<abi::kiln_plugin>()
        {
            return Err(format!(
                "create filled an instance of ABI version {} and {} bytes (expected version {} and at least {})",
                raw.0.abi_version,
                raw.0.struct_size,
                abi::KILN_PLUGIN_ABI_VERSION,
                std::mem::size_of::<abi::kiln_plugin>()
            ));
        }
        let num_outputs = entry!(raw, num_outputs)?;
        let mut count = 0i32;
        let mut err = ErrorBuf::new();
        // SAFETY: a valid instance; `count` lives across the call.
        let status = unsafe { num_outputs(raw.0.self_, &mut count, &mut err.raw()) };
        err.check(status, "num_outputs")?;
        let num_outputs = usize::try_from(count).map_err(|_| format!("num_outputs reported {count}"))?;
        Ok(PluginAdapter { raw: Mutex::new(raw), key, num_outputs, _lib: lib })
    }

    fn fail(&self, message: String) -> PluginError {
        PluginError::Failed { plugin: self.key.to_string(), message }
    }

    fn inconsistent(&self, message: String) -> PluginError {
        PluginError::Inconsistent { plugin: self.key.to_string(), message }
    }

    fn descs(&self, io: &[PluginTensorDesc]) -> Result<Vec<abi::kiln_tensor_desc>, PluginError> {
        io.iter().map(tensor_desc).collect::<Result<_, _>>().map_err(|m| self.fail(m))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RawPlugin> {
        self.raw.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl LayerPlugin for PluginAdapter {
    fn key(&self) -> PluginKey {
        self.key.clone()
    }

    fn num_outputs(&self) -> usize {
        self.num_outputs
    }

    fn output_types(&self, inputs: &[DataType]) -> Result<Vec<DataType>, PluginError> {
        let codes = inputs.iter().map(|&d| dtype_code(d)).collect::<Result<Vec<_>, _>>().map_err(|m| self.fail(m))?;
        let mut out = vec![0i32; self.num_outputs];
        let raw = self.lock();
        let f = entry!(raw, output_types).map_err(|m| self.fail(m))?;
        let mut err = ErrorBuf::new();
        // SAFETY: a valid instance; `codes` and `out` (num_outputs entries) live across the call.
        let status = unsafe { f(raw.0.self_, codes.as_ptr(), codes.len() as i32, out.as_mut_ptr(), &mut err.raw()) };
        err.check(status, "output_types").map_err(|m| self.fail(m))?;
        out.iter().map(|&c| dtype_of(c).map_err(|m| self.inconsistent(format!("output_types: {m}")))).collect()
    }

    fn output_shapes(&self, input_ranks: &[usize]) -> Result<Vec<Vec<DimExpr>>, PluginError> {
        let ranks: Vec<i32> = input_ranks.iter().map(|&r| r as i32).collect();
        let mut nodes = vec![abi::kiln_dim_expr::default(); MAX_DIM_NODES];
        let mut out_ranks = vec![-1i32; self.num_outputs];
        let mut out_dims = vec![-1i32; self.num_outputs * abi::KILN_MAX_RANK];
        let mut exprs = abi::kiln_shape_exprs {
            struct_size: std::mem::size_of::<abi::kiln_shape_exprs>() as u32,
            node_capacity: MAX_DIM_NODES as i32,
            node_count: 0,
            nodes: nodes.as_mut_ptr(),
            output_capacity: self.num_outputs as i32,
            output_ranks: out_ranks.as_mut_ptr(),
            output_dims: out_dims.as_mut_ptr(),
        };
        {
            let raw = self.lock();
            let f = entry!(raw, output_shapes).map_err(|m| self.fail(m))?;
            let mut err = ErrorBuf::new();
            // SAFETY: a valid instance; every array `exprs` points to lives across the call
            // with the capacities it states.
            let status = unsafe { f(raw.0.self_, ranks.as_ptr(), ranks.len() as i32, &mut exprs, &mut err.raw()) };
            err.check(status, "output_shapes").map_err(|m| self.fail(m))?;
        }
        let count = usize::try_from(exprs.node_count).ok().filter(|&n| n <= MAX_DIM_NODES);
        let count =
            count.ok_or_else(|| self.inconsistent(format!("output_shapes reported {} dim nodes", exprs.node_count)))?;
        let nodes = &nodes[..count];
        (0..self.num_outputs)
            .map(|o| {
                let rank =
                    usize::try_from(out_ranks[o]).ok().filter(|&r| r <= abi::KILN_MAX_RANK).ok_or_else(|| {
                        self.inconsistent(format!(
                            "output_shapes gave output {o} rank {} (not set or over {})",
                            out_ranks[o],
                            abi::KILN_MAX_RANK
                        ))
                    })?;
                (0..rank)
                    .map(|d| {
                        dim_expr(nodes, out_dims[o * abi::KILN_MAX_RANK + d])
                            .map_err(|m| self.inconsistent(format!("output {o} dim {d}: {m}")))
                    })
                    .collect()
            })
            .collect()
    }

    fn supports_format_combination(&self, pos: usize, io: &[PluginTensorDesc], num_inputs: usize) -> bool {
        let Ok(descs) = self.descs(io) else { return false };
        let raw = self.lock();
        let Some(f) = raw.0.supports_format_combination else { return true };
        let mut supported = 0i32;
        let mut err = ErrorBuf::new();
        let outputs = (io.len() - num_inputs) as i32;
        // SAFETY: a valid instance; `descs` and `supported` live across the call.
        let status = unsafe {
            f(raw.0.self_, pos as i32, descs.as_ptr(), num_inputs as i32, outputs, &mut supported, &mut err.raw())
        };
        err.check(status, "supports_format_combination").is_ok() && supported != 0
    }

    fn configure(&self, io: &[PluginTensorDesc], num_inputs: usize) -> Result<(), PluginError> {
        let descs = self.descs(io)?;
        let raw = self.lock();
        let Some(f) = raw.0.configure else { return Ok(()) };
        let mut err = ErrorBuf::new();
        let outputs = (io.len() - num_inputs) as i32;
        // SAFETY: a valid instance; `descs` lives across the call.
        let status = unsafe { f(raw.0.self_, descs.as_ptr(), num_inputs as i32, outputs, &mut err.raw()) };
        err.check(status, "configure").map_err(|m| self.fail(m))
    }

    fn workspace_size(&self, io: &[PluginTensorDesc], num_inputs: usize) -> u64 {
        let Ok(descs) = self.descs(io) else { return 0 };
        let raw = self.lock();
        let Some(f) = raw.0.workspace_size else { return 0 };
        let (mut bytes, mut err) = (0u64, ErrorBuf::new());
        let outputs = (io.len() - num_inputs) as i32;
        // SAFETY: a valid instance; `descs` and `bytes` live across the call.
        let status = unsafe { f(raw.0.self_, descs.as_ptr(), num_inputs as i32, outputs, &mut bytes, &mut err.raw()) };
        if err.check(status, "workspace_size").is_ok() {
            bytes
        } else {
            0
        }
    }

    fn tactics(&self) -> Vec<u32> {
        let raw = self.lock();
        let Some(f) = raw.0.tactics else { return vec![0] };
        let mut tactics = vec![0u32; 64];
        let (mut count, mut err) = (0i32, ErrorBuf::new());
        // SAFETY: a valid instance; `tactics` holds the 64 entries the capacity states.
        let status = unsafe { f(raw.0.self_, tactics.as_mut_ptr(), 64, &mut count, &mut err.raw()) };
        match (err.check(status, "tactics"), usize::try_from(count)) {
            (Ok(()), Ok(n)) if (1..=64).contains(&n) => tactics[..n].to_vec(),
            _ => vec![0],
        }
    }

    fn timing_cache_id(&self) -> String {
        let raw = self.lock();
        let Some(f) = raw.0.timing_cache_id else { return String::new() };
        let mut id = vec![0u8; 512];
        let mut err = ErrorBuf::new();
        // SAFETY: a valid instance; `id` holds the 512 bytes the capacity states.
        let status = unsafe { f(raw.0.self_, id.as_mut_ptr().cast(), 512, &mut err.raw()) };
        id[511] = 0;
        match err.check(status, "timing_cache_id") {
            Ok(()) => CStr::from_bytes_until_nul(&id).map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    fn fields(&self) -> Vec<(String, PluginField)> {
        unsafe extern "C" fn add(host: *mut c_void, field: *const abi::kiln_field) {
            // A panic must not unwind into the library: catch and record it.
            let _ = catch_unwind(AssertUnwindSafe(|| {
                // SAFETY: `host` is the Vec passed below and `field` the plugin's field,
                // both valid during this callback.
                let (sink, field) =
                    unsafe { (&mut *host.cast::<Vec<Result<(String, PluginField), String>>>(), &*field) };
                sink.push(read_field(field));
            }));
        }
        let mut collected: Vec<Result<(String, PluginField), String>> = Vec::new();
        let raw = self.lock();
        let Some(f) = raw.0.serialize else { return Vec::new() };
        let sink = abi::kiln_field_sink { host: (&mut collected as *mut Vec<_>).cast(), add: Some(add) };
        let mut err = ErrorBuf::new();
        // SAFETY: a valid instance; `sink` and `collected` live across the call.
        let status = unsafe { f(raw.0.self_, &sink, &mut err.raw()) };
        if err.check(status, "serialize").is_err() {
            return Vec::new();
        }
        collected.into_iter().filter_map(Result::ok).collect()
    }

    fn runs_on(&self, backend: &str) -> bool {
        let raw = self.lock();
        match backend {
            "cpu" => raw.0.enqueue_cpu.is_some(),
            "wgpu" => raw.0.wgsl_kernel.is_some(),
            "cuda" => raw.0.cuda_kernel.is_some() || raw.0.enqueue_cuda.is_some(),
            _ => false,
        }
    }

    fn enqueue_cpu(
        &self,
        tactic: u32,
        inputs: &[&HostTensor],
        outputs: &mut [HostTensor],
        workspace: &mut [u8],
    ) -> Option<Result<(), PluginError>> {
        let raw = self.lock();
        let f = raw.0.enqueue_cpu?;
        let descs = inputs
            .iter()
            .map(|t| host_desc(t))
            .chain(outputs.iter().map(host_desc))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|m| self.fail(m));
        let descs = match descs {
            Ok(d) => d,
            Err(e) => return Some(Err(e)),
        };
        // String tensors have no ABI code: host_desc refused them above, so no String
        // storage is ever handed to C.
        let in_ptrs: Vec<*const c_void> = inputs
            .iter()
            .map(|t| dispatch_data!(t.data(), v => v.as_ptr().cast(), string _s => std::ptr::null()))
            .collect();
        let out_shapes: Vec<Vec<usize>> = outputs.iter().map(|t| t.shape().to_vec()).collect();
        let mut out_data: Vec<kiln::TensorData> = outputs
            .iter_mut()
            .map(|t| std::mem::replace(t, HostTensor::zeros(t.dtype(), vec![0])).into_data())
            .collect();
        let out_ptrs: Vec<*mut c_void> =
            out_data.iter_mut().map(|d| dispatch_data!(d, v => v.as_mut_ptr().cast(), string _s => std::ptr::null_mut())).collect();
        let mut err = ErrorBuf::new();
        // SAFETY: a valid instance; every input and output buffer holds the elements its
        // descriptor states and lives across the call; outputs are written only through
        // `out_ptrs`; the workspace holds the bytes workspace_size asked for.
        let status = unsafe {
            f(
                raw.0.self_,
                tactic,
                descs.as_ptr(),
                inputs.len() as i32,
                outputs.len() as i32,
                in_ptrs.as_ptr(),
                out_ptrs.as_ptr(),
                workspace.as_mut_ptr().cast(),
                &mut err.raw(),
            )
        };
        for ((slot, data), shape) in outputs.iter_mut().zip(out_data).zip(out_shapes) {
            if let Ok(t) = HostTensor::new(shape, data) {
                *slot = t;
            }
        }
        Some(err.check(status, "enqueue_cpu").map_err(|m| self.fail(m)))
    }

    fn wgsl_kernel(&self, io: &[PluginTensorDesc], num_inputs: usize) -> Option<Result<WgslKernel, PluginError>> {
        let raw = self.lock();
        let f = raw.0.wgsl_kernel?;
        Some((|| {
            let descs = self.descs(io)?;
            let mut out =
                abi::kiln_wgsl_kernel { source: std::ptr::null(), entry_point: std::ptr::null(), workgroups: [0; 3] };
            let mut err = ErrorBuf::new();
            let outputs = (io.len() - num_inputs) as i32;
            // SAFETY: a valid instance; `descs` and `out` live across the call.
            let status =
                unsafe { f(raw.0.self_, descs.as_ptr(), num_inputs as i32, outputs, &mut out, &mut err.raw()) };
            err.check(status, "wgsl_kernel").map_err(|m| self.fail(m))?;
            Ok(WgslKernel {
                source: string_at(out.source, "the WGSL source").map_err(|m| self.inconsistent(m))?,
                entry_point: string_at(out.entry_point, "the WGSL entry point").map_err(|m| self.inconsistent(m))?,
                workgroups: out.workgroups,
            })
        })())
    }

    fn cuda_kernel(&self, io: &[PluginTensorDesc], num_inputs: usize) -> Option<Result<CudaKernel, PluginError>> {
        let raw = self.lock();
        let f = raw.0.cuda_kernel?;
        Some((|| {
            let descs = self.descs(io)?;
            let mut out = abi::kiln_cuda_kernel {
                image_kind: 0,
                image: std::ptr::null(),
                image_size: 0,
                entry_point: std::ptr::null(),
                grid: [0; 3],
                block: [0; 3],
                shared_memory_bytes: 0,
            };
            let mut err = ErrorBuf::new();
            let outputs = (io.len() - num_inputs) as i32;
            // SAFETY: a valid instance; `descs` and `out` live across the call.
            let status =
                unsafe { f(raw.0.self_, descs.as_ptr(), num_inputs as i32, outputs, &mut out, &mut err.raw()) };
            err.check(status, "cuda_kernel").map_err(|m| self.fail(m))?;
            let size = usize::try_from(out.image_size).map_err(|_| self.inconsistent("image size overflows".into()))?;
            if out.image.is_null() || size == 0 {
                return Err(self.inconsistent("cuda_kernel returned no image".into()));
            }
            // SAFETY: the plugin owns `image_size` bytes at `image`, valid until its next call.
            let bytes = unsafe { std::slice::from_raw_parts(out.image.cast::<u8>(), size) }.to_vec();
            let text = |b: Vec<u8>| {
                String::from_utf8(b).map_err(|_| self.inconsistent("the PTX or source is not UTF-8".into()))
            };
            let image = match out.image_kind {
                abi::KILN_CUDA_PTX => CudaImage::Ptx(text(bytes)?),
                abi::KILN_CUDA_CUBIN => CudaImage::Cubin(bytes),
                abi::KILN_CUDA_SOURCE => CudaImage::Source(text(bytes)?),
                other => return Err(self.inconsistent(format!("unknown CUDA image kind {other}"))),
            };
            Ok(CudaKernel {
                image,
                entry_point: string_at(out.entry_point, "the CUDA entry point").map_err(|m| self.inconsistent(m))?,
                grid: out.grid,
                block: out.block,
                shared_memory_bytes: out.shared_memory_bytes,
            })
        })())
    }
}

fn host_desc(t: &HostTensor) -> Result<abi::kiln_tensor_desc, String> {
    tensor_desc(&PluginTensorDesc {
        dtype: t.dtype(),
        format: kiln::TensorFormat::Linear,
        dims: t.shape().iter().map(|&d| Some(d)).collect(),
    })
}

//! Backend plugins: a kiln backend (wgpu, cuda, a third party's) built as a shared library
//! `libkiln_backend_<name>.so` exporting one C entry point, `kiln_backend_entry`, that
//! returns a versioned [`kiln_backend_descriptor`].
//!
//! The `Backend` trait object itself crosses the boundary as Rust (a boxed trait object),
//! which is sound only when both sides were built by the same compiler from the same kiln.
//! The descriptor therefore carries the kiln version and the rustc version string for a
//! handshake, and a library that differs in either is refused with both versions named.
//! Loaded backend libraries stay loaded for the life of the process (their code backs every
//! backend, executable and error value they create).

use kiln::{Backend, BackendError};
use crate::ffi::OpenError;
use std::ffi::{c_char, c_void, CStr};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// The version of [`kiln_backend_descriptor`]'s layout.
pub const KILN_BACKEND_ABI_VERSION: u32 = 1;
/// The symbol a backend library exports: `extern "C" fn() -> *const kiln_backend_descriptor`.
pub const KILN_BACKEND_ENTRY_POINT: &str = "kiln_backend_entry";
/// Backend libraries are found by this file-name prefix (`libkiln_backend_wgpu.so`).
pub const BACKEND_LIBRARY_PREFIX: &str = "libkiln_backend_";
/// The kiln version both sides of the handshake must share.
pub const KILN_VERSION: &CStr = match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
    Ok(v) => v,
    Err(_) => panic!("the version has no interior NUL"),
};
/// The `rustc --version` that built this crate (see build.rs).
pub const RUSTC_VERSION: &CStr = match CStr::from_bytes_with_nul(concat!(env!("KILN_RUSTC_VERSION"), "\0").as_bytes()) {
    Ok(v) => v,
    Err(_) => panic!("the rustc version has no interior NUL"),
};

/// What `kiln_backend_entry` returns; static for the library's lifetime. Begins with the
/// ABI version and struct size and only grows at its end, like the plugin ABI's structs.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug)]
pub struct kiln_backend_descriptor {
    pub abi_version: u32,
    pub struct_size: u32,
    /// The backend's name (`Backend::name`), NUL-terminated.
    pub name: *const c_char,
    /// The kiln version the library was built against, NUL-terminated.
    pub kiln_version: *const c_char,
    /// `rustc --version` of the compiler that built the library, NUL-terminated.
    pub rustc_version: *const c_char,
    /// Makes a backend: a `Box<Box<dyn kiln::Backend>>` as a raw pointer, or null when
    /// making it panicked. Called only after the handshake succeeded.
    pub create: Option<extern "C" fn() -> *mut c_void>,
}

/// A descriptor in a `static` (its pointers are to static strings).
#[derive(Debug)]
pub struct ExportedBackend(pub kiln_backend_descriptor);

// SAFETY: the descriptor is immutable and its pointers are to static, immutable strings.
unsafe impl Sync for ExportedBackend {}

impl ExportedBackend {
    /// The descriptor of this build (kiln and rustc versions of the crate being compiled).
    pub const fn new(name: &'static CStr, create: extern "C" fn() -> *mut c_void) -> ExportedBackend {
        ExportedBackend(kiln_backend_descriptor {
            abi_version: KILN_BACKEND_ABI_VERSION,
            struct_size: std::mem::size_of::<kiln_backend_descriptor>() as u32,
            name: name.as_ptr(),
            kiln_version: KILN_VERSION.as_ptr(),
            rustc_version: RUSTC_VERSION.as_ptr(),
            create: Some(create),
        })
    }
}

/// Boxes a backend for [`kiln_backend_descriptor::create`], catching a panic (null).
pub fn boxed_backend(make: impl FnOnce() -> Box<dyn Backend>) -> *mut c_void {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(make)) {
        Ok(backend) => Box::into_raw(Box::new(backend)).cast(),
        Err(_) => std::ptr::null_mut(),
    }
}

/// Exports a backend from a cdylib crate: `export_backend!(c"wgpu", kiln_wgpu::WgpuBackend::new());`
#[macro_export]
macro_rules! export_backend {
    ($name:expr, $make:expr) => {
        extern "C" fn kiln_backend_create() -> *mut ::std::ffi::c_void {
            $crate::backend::boxed_backend(|| ::std::boxed::Box::new($make))
        }
        static KILN_BACKEND: $crate::backend::ExportedBackend =
            $crate::backend::ExportedBackend::new($name, kiln_backend_create);
        /// The backend library's entry point (see `kiln_plugins::backend`).
        #[no_mangle]
        pub extern "C" fn kiln_backend_entry() -> *const $crate::backend::kiln_backend_descriptor {
            &KILN_BACKEND.0
        }
    };
}

/// Why a backend library was refused.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum BackendLoadError {
    #[error("backend library `{library}` cannot be loaded: {reason}")]
    CannotLoad { library: String, reason: String },
    #[error("`{library}` does not export `kiln_backend_entry`: it is not a kiln backend library")]
    NoEntryPoint { library: String },
    #[error("backend library `{library}` is malformed: {reason}")]
    Malformed { library: String, reason: String },
    #[error(
        "backend library `{library}` was built for backend ABI version {found}; this kiln supports version {supported}"
    )]
    AbiVersion { library: String, found: u32, supported: u32 },
    #[error(
        "backend library `{library}` was built with {what} `{library_has}`, this kiln with `{kiln_has}`: \
         rebuild the library from the same kiln source with the same compiler"
    )]
    Mismatch { library: String, what: &'static str, library_has: String, kiln_has: String },
}

/// A loaded backend library: its name and where it came from; [`BackendLibrary::open`]
/// makes a backend.
#[derive(Debug, Clone)]
pub struct BackendLibrary {
    pub name: String,
    pub path: PathBuf,
    create: extern "C" fn() -> *mut c_void,
}

impl BackendLibrary {
    /// A new backend from the library.
    pub fn open(&self) -> Result<Box<dyn Backend>, BackendError> {
        let raw = (self.create)();
        if raw.is_null() {
            return Err(BackendError::Unavailable {
                backend: self.name.clone(),
                reason: format!("the backend library `{}` panicked while creating it", self.path.display()),
            });
        }
        // SAFETY: the handshake established that the library was built by this compiler from
        // this kiln, so its `create` returns what `boxed_backend` made: a leaked
        // `Box<Box<dyn Backend>>` of identical layout, owned by the caller from here on.
        Ok(*unsafe { Box::from_raw(raw.cast::<Box<dyn Backend>>()) })
    }
}

/// Copies a static string the library owns.
fn text(ptr: *const c_char, what: &str, library: &str) -> Result<String, BackendLoadError> {
    if ptr.is_null() {
        return Err(BackendLoadError::Malformed { library: library.into(), reason: format!("{what} is NULL") });
    }
    // SAFETY: non-null; the descriptor's strings are static and NUL-terminated.
    Ok(unsafe { CStr::from_ptr(ptr) }.to_string_lossy().into_owned())
}

/// Loads a backend library and checks its handshake; the library then stays loaded.
pub fn load_backend(path: &Path) -> Result<BackendLibrary, BackendLoadError> {
    let path = &crate::file_path(path);
    let library = path.display().to_string();
    let lib = crate::ffi::open_library(path, KILN_BACKEND_ENTRY_POINT).map_err(|e| match e {
        OpenError::NoEntryPoint => BackendLoadError::NoEntryPoint { library: library.clone() },
        OpenError::Refused(reason) => BackendLoadError::CannotLoad { library: library.clone(), reason },
    })?;
    type Entry = extern "C" fn() -> *const kiln_backend_descriptor;
    // SAFETY: the symbol exists (checked when opening) and its type is the documented
    // entry point's.
    let entry = *unsafe { lib.get::<Entry>(KILN_BACKEND_ENTRY_POINT.as_bytes()) }
        .map_err(|_| BackendLoadError::NoEntryPoint { library: library.clone() })?;
    let desc = entry();
    if desc.is_null() {
        return Err(BackendLoadError::Malformed { library, reason: "kiln_backend_entry returned NULL".into() });
    }
    // SAFETY: non-null and static; only the two leading u32 fields are read before the
    // version and size are checked.
    let (version, size) = unsafe { ((*desc).abi_version, (*desc).struct_size) };
    if version != KILN_BACKEND_ABI_VERSION {
        return Err(BackendLoadError::AbiVersion { library, found: version, supported: KILN_BACKEND_ABI_VERSION });
    }
    if (size as usize) < std::mem::size_of::<kiln_backend_descriptor>() {
        return Err(BackendLoadError::Malformed {
            library,
            reason: format!("its descriptor is {size} bytes, smaller than ABI 1's"),
        });
    }
    // SAFETY: version and size checked: the whole v1 descriptor is there.
    let desc = unsafe { &*desc };
    let handshake = [
        ("kiln version", text(desc.kiln_version, "the kiln version", &library)?, KILN_VERSION),
        ("compiler", text(desc.rustc_version, "the rustc version", &library)?, RUSTC_VERSION),
    ];
    for (what, library_has, ours) in handshake {
        let kiln_has = ours.to_string_lossy().into_owned();
        if library_has != kiln_has {
            return Err(BackendLoadError::Mismatch { library, what, library_has, kiln_has });
        }
    }
    let name = text(desc.name, "the backend name", &library)?;
    let create = desc
        .create
        .ok_or_else(|| BackendLoadError::Malformed { library: library.clone(), reason: "no create entry".into() })?;
    // Never unloaded: the backends it makes and everything they return run its code.
    std::mem::forget(lib);
    Ok(BackendLibrary { name, path: path.to_path_buf(), create })
}

/// Whether a path's file name is a backend library's (`libkiln_backend_*.so`).
pub fn is_backend_library(path: &Path) -> bool {
    let dll = format!(".{}", std::env::consts::DLL_EXTENSION);
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with(BACKEND_LIBRARY_PREFIX) && n.ends_with(&dll))
}

/// Backend libraries to load: `libkiln_backend_*.so` in `exe_dir` (the folder of the
/// `kiln` binary), then those KILN_PLUGIN_PATH names (files by that name, or in folders).
pub fn backend_library_paths(exe_dir: Option<&Path>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let folder = |dir: &Path| {
        let Ok(listing) = std::fs::read_dir(dir) else { return Vec::new() };
        let mut libs: Vec<PathBuf> =
            listing.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_file() && is_backend_library(p)).collect();
        libs.sort();
        libs
    };
    if let Some(dir) = exe_dir {
        out.extend(folder(dir));
    }
    if let Some(value) = std::env::var_os(crate::PLUGIN_PATH_VAR) {
        for entry in std::env::split_paths(&value).filter(|p| !p.as_os_str().is_empty()) {
            if entry.is_dir() {
                out.extend(folder(&entry));
            } else if is_backend_library(&entry) {
                out.push(entry);
            }
        }
    }
    out.dedup();
    out
}

//! kiln's plugin host: loads plugin libraries through the C ABI (`kiln_plugin.h`) and
//! registers their creators in kiln's process-wide registry, all or nothing.
//!
//! `unsafe` lives in `ffi.rs` (and `backend.rs`, whose libraries cross as Rust), where
//! the libraries' entries are called; `elf.rs` checks a library's file before it is loaded.
//!
//! A library named by a path with a folder (`./libx.so`, `/opt/libx.so`) is that file; a
//! bare file name (`libx.so`) is the file of that name in the current directory. kiln never
//! lets the system's library search (`LD_LIBRARY_PATH`, `/usr/lib`) pick a plugin.

pub mod backend;
mod convert;
#[cfg(all(unix, not(target_vendor = "apple")))]
mod elf;
#[cfg(feature = "example-builds")]
pub mod examples;
mod ffi;

use kiln::plugin::{registry, PluginError, PluginKey};
use std::path::{Path, PathBuf};

/// The environment variable listing plugin libraries or folders of them (`:`-separated).
pub const PLUGIN_PATH_VAR: &str = "KILN_PLUGIN_PATH";

/// What one library registered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadedLibrary {
    pub path: PathBuf,
    pub plugins: Vec<PluginKey>,
}

/// Loads a plugin library and registers every creator it lists. Nothing is registered
/// when any creator is malformed or already registered.
pub fn load_library(path: &Path) -> Result<LoadedLibrary, PluginError> {
    let path = &file_path(path);
    let creators = ffi::load_creators(path)?;
    let plugins = creators.iter().map(|c| c.key()).collect();
    registry()
        .register_all(creators)
        .map_err(|e| PluginError::Library { library: path.display().to_string(), message: e.to_string() })?;
    Ok(LoadedLibrary { path: path.to_path_buf(), plugins })
}

/// The libraries `KILN_PLUGIN_PATH` names: files as given, and in folders every shared
/// library (sorted), so a folder of plugins loads in a stable order.
pub fn plugin_path_libraries(value: &str) -> Result<Vec<PathBuf>, PluginError> {
    let mut out = Vec::new();
    for entry in std::env::split_paths(value).filter(|p| !p.as_os_str().is_empty()) {
        if entry.is_dir() {
            let listing = std::fs::read_dir(&entry).map_err(|e| PluginError::Library {
                library: entry.display().to_string(),
                message: format!("cannot list the folder: {e}"),
            })?;
            let mut libs: Vec<PathBuf> =
                listing.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| is_shared_library(p)).collect();
            libs.sort();
            out.extend(libs);
        } else {
            out.push(entry);
        }
    }
    Ok(out)
}

/// The file a library name means (see the crate docs): a bare file name becomes
/// `./name`, so `dlopen` opens that file instead of searching the system's folders.
pub(crate) fn file_path(path: &Path) -> PathBuf {
    let mut components = path.components();
    match (components.next(), components.next()) {
        (Some(std::path::Component::Normal(_)), None) => Path::new(".").join(path),
        _ => path.to_path_buf(),
    }
}

fn is_shared_library(path: &Path) -> bool {
    path.is_file() && path.extension().is_some_and(|e| e == std::env::consts::DLL_EXTENSION)
}

/// Loads the libraries of `KILN_PLUGIN_PATH` (none when unset). Libraries in a listed
/// folder that are not kiln plugin libraries (no entry point) are skipped and reported
/// in the second list; backend libraries (`libkiln_backend_*`, see [`backend`]) are left
/// to the backend loader; any other failure is an error.
pub fn load_from_env() -> Result<(Vec<LoadedLibrary>, Vec<String>), PluginError> {
    let Some(value) = std::env::var_os(PLUGIN_PATH_VAR) else { return Ok((Vec::new(), Vec::new())) };
    let value = value.to_string_lossy().into_owned();
    let (mut loaded, mut skipped) = (Vec::new(), Vec::new());
    let named_files: Vec<PathBuf> = std::env::split_paths(&value).filter(|p| p.is_file()).collect();
    for path in plugin_path_libraries(&value)?.into_iter().filter(|p| !backend::is_backend_library(p)) {
        match load_library(&path) {
            Ok(lib) => loaded.push(lib),
            Err(PluginError::Library { message, .. })
                if !named_files.contains(&path) && message.contains("does not export") =>
            {
                skipped.push(format!("{}: {message}", path.display()))
            }
            Err(e) => return Err(e),
        }
    }
    Ok((loaded, skipped))
}

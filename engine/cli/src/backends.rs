//! The backends this kiln knows, in `--backend auto` preference order.
//!
//! cpu, wgpu and cuda are compiled in; backend libraries (`libkiln_backend_<name>.so` next
//! to the binary or on KILN_PLUGIN_PATH) add theirs at start. A built-in backend wins over a
//! library's of the same name unless KILN_PREFER_PLUGIN_BACKENDS=1. A backend whose device
//! probe fails (no CUDA driver, no Vulkan adapter) reports why, so `--backend cuda` on a
//! machine without CUDA is a clear error.

use anyhow::bail;
use kiln::{Backend, BackendError, DeviceFingerprint, Engine, EngineLoadError};

/// `--backend`: `auto` or a backend's name (built in, or from a backend library).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendChoice {
    /// The first available of cuda, wgpu, cpu (then backend libraries), passing over a wgpu
    /// software adapter (for an engine: the backend it was built for).
    Auto,
    /// A backend by name. `'static` so the choice stays `Copy`: the one name a command line
    /// gives is leaked once.
    Named(&'static str),
}

impl BackendChoice {
    /// The backend's registry name; `None` for `auto`.
    fn name(self) -> Option<&'static str> {
        match self {
            BackendChoice::Auto => None,
            BackendChoice::Named(name) => Some(name),
        }
    }
}

impl std::str::FromStr for BackendChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<BackendChoice, String> {
        match s {
            "" => Err("a backend name is empty".into()),
            "auto" => Ok(BackendChoice::Auto),
            name => Ok(BackendChoice::Named(Box::leak(name.to_string().into_boxed_str()))),
        }
    }
}

impl std::fmt::Display for BackendChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name().unwrap_or("auto"))
    }
}

/// Set to 1 to use a backend library's backend over the built-in one of the same name.
pub const PREFER_PLUGIN_BACKENDS_VAR: &str = "KILN_PREFER_PLUGIN_BACKENDS";

/// Backend libraries (`libkiln_backend_*.so` next to the binary or on KILN_PLUGIN_PATH),
/// loaded once at start by [`load_plugin_backends`].
static PLUGIN_BACKENDS: std::sync::OnceLock<Vec<kiln_plugins::backend::BackendLibrary>> = std::sync::OnceLock::new();

/// Loads every backend library found; one that fails its handshake fails the command (no
/// silently partial registry).
pub fn load_plugin_backends() -> anyhow::Result<()> {
    let exe_dir = std::env::current_exe().ok().and_then(|p| p.parent().map(std::path::Path::to_path_buf));
    let libraries = kiln_plugins::backend::backend_library_paths(exe_dir.as_deref())
        .iter()
        .map(|path| kiln_plugins::backend::load_backend(path))
        .collect::<Result<Vec<_>, _>>()?;
    let _ = PLUGIN_BACKENDS.set(libraries);
    Ok(())
}

/// `--device`: the device every backend of this process opens on.
static DEVICE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();

/// Sets `--device` (once, at start).
pub fn set_device(device: usize) {
    let _ = DEVICE.set(device);
}

fn device() -> usize {
    DEVICE.get().copied().unwrap_or(0)
}

fn plugin_backends() -> &'static [kiln_plugins::backend::BackendLibrary] {
    PLUGIN_BACKENDS.get().map_or(&[], Vec::as_slice)
}

fn prefer_plugins() -> bool {
    std::env::var(PREFER_PLUGIN_BACKENDS_VAR).is_ok_and(|v| v == "1")
}

/// Where a backend comes from: compiled in, or a backend library's path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    BuiltIn,
    Library(std::path::PathBuf),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::BuiltIn => f.write_str("built in"),
            Origin::Library(path) => write!(f, "backend library {}", path.display()),
        }
    }
}

/// Makes a backend (a built-in's constructor, or a backend library's `create`).
type Opener = Box<dyn Fn() -> Result<Box<dyn Backend>, BackendError>>;

/// The backend `name` resolves to: the built-in one unless KILN_PREFER_PLUGIN_BACKENDS=1
/// and a library provides it too, else the first library of that name.
fn resolve(name: &str) -> Option<(Origin, Opener)> {
    let library = plugin_backends().iter().find(|l| l.name == name);
    let builtin = kiln_builtin_backends::BUILT_IN.iter().find(|e| e.name == name);
    match (builtin, library) {
        (Some(_), Some(lib)) | (None, Some(lib)) if prefer_plugins() || builtin.is_none() => {
            let (lib, path) = (lib.clone(), lib.path.clone());
            let open = move || match device() {
                0 => lib.open(),
                n => Err(BackendError::Unavailable {
                    backend: lib.name.clone(),
                    reason: format!("a backend library opens its own device; --device {n} applies to built-in backends"),
                }),
            };
            Some((Origin::Library(path), Box::new(open)))
        }
        (Some(entry), _) => {
            let entry = *entry;
            Some((Origin::BuiltIn, Box::new(move || entry.open_device(device()))))
        }
        _ => None,
    }
}

/// How a backend came to be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Selection {
    /// Named with `--backend`.
    Requested,
    /// The first available one, for `--backend auto`.
    Auto,
    /// The backend an engine file was built for.
    FromEngine,
}

/// A backend whose device probe succeeded.
pub struct SelectedBackend {
    pub backend: Box<dyn Backend>,
    pub device: DeviceFingerprint,
    pub selection: Selection,
}

impl SelectedBackend {
    pub fn name(&self) -> &str {
        self.backend.name()
    }

    /// How the summary names the choice, e.g. `cpu (chosen by --backend auto)`.
    pub fn describe(&self) -> String {
        match self.selection {
            Selection::Requested => self.name().to_string(),
            Selection::Auto => format!("{} (chosen by --backend auto)", self.name()),
            Selection::FromEngine => format!("{} (the engine's backend)", self.name()),
        }
    }
}

/// Opens a backend by name and probes its device.
fn open(name: &str, selection: Selection) -> Result<SelectedBackend, BackendError> {
    let (_, open) = resolve(name).ok_or_else(|| BackendError::Unavailable {
        backend: name.to_string(),
        reason: format!("kiln has no backend of that name (known: {})", known_names()),
    })?;
    let backend = open()?;
    let device = backend.device()?;
    Ok(SelectedBackend { backend, device, selection })
}

/// Every backend name: built-ins in preference order, then backend libraries' own names.
fn all_names() -> Vec<String> {
    let mut names: Vec<String> = kiln_builtin_backends::BUILT_IN.iter().map(|e| e.name.to_string()).collect();
    for lib in plugin_backends() {
        if !names.contains(&lib.name) {
            names.push(lib.name.clone());
        }
    }
    names
}

fn known_names() -> String {
    all_names().join(", ")
}

/// The backend to build on: the one asked for, or for `auto` the first available one.
pub fn select(choice: BackendChoice) -> anyhow::Result<SelectedBackend> {
    if let Some(name) = choice.name() {
        return Ok(open(name, Selection::Requested)?);
    }
    let mut reasons = Vec::new();
    for name in all_names() {
        match open(&name, Selection::Auto) {
            Ok(selected) => match kiln_builtin_backends::passed_over_by_auto(&selected.device) {
                Some(reason) => reasons.push(reason),
                None => return Ok(selected),
            },
            Err(e) => reasons.push(e.to_string()),
        }
    }
    bail!("no backend is available: {}", reasons.join("; "))
}

/// The backend to run an engine file on: the one it was built for. An explicit other
/// backend is refused, since engines are specific to the backend that built them.
pub fn select_for_engine(engine: &Engine, choice: BackendChoice) -> anyhow::Result<SelectedBackend> {
    let built_for = engine.backend();
    match choice.name() {
        Some(requested) if requested != built_for => {
            let mismatch =
                EngineLoadError::BackendMismatch { engine: built_for.to_string(), requested: requested.to_string() };
            bail!("{mismatch}: run it with --backend {built_for} (or auto), or rebuild it with `kiln build --backend {requested}`")
        }
        _ => Ok(open(built_for, Selection::FromEngine)?),
    }
}

/// Whether the registry has a backend of this name (available or not).
pub fn is_known(name: &str) -> bool {
    resolve(name).is_some()
}

/// The registry's names, comma-separated, for error messages.
pub fn known_names_text() -> String {
    known_names()
}

/// Opens a backend named on the command line (`kiln compare --backends`).
pub fn open_requested(name: &str) -> Result<SelectedBackend, BackendError> {
    open(name, Selection::Requested)
}

/// One line of `kiln devices`: a backend, where it comes from, and its device or why it has none.
pub struct Probe {
    pub name: String,
    pub origin: Origin,
    /// A library's backend that a built-in one of the same name shadows (not probed).
    pub shadowed: bool,
    pub device: Result<DeviceFingerprint, BackendError>,
}

/// Every backend in preference order (built-ins, then backend libraries), probed.
pub fn probe_all() -> Vec<Probe> {
    let mut out = Vec::new();
    for name in all_names() {
        if let Some((origin, open)) = resolve(&name) {
            out.push(Probe { name, origin, shadowed: false, device: open().and_then(|b| b.device()) });
        }
    }
    for lib in plugin_backends() {
        let used = out.iter().any(|p| p.origin == Origin::Library(lib.path.clone()));
        if !used {
            let reason = format!("shadowed by the built-in `{}` (set {PREFER_PLUGIN_BACKENDS_VAR}=1 to use it)", lib.name);
            out.push(Probe {
                name: lib.name.clone(),
                origin: Origin::Library(lib.path.clone()),
                shadowed: true,
                device: Err(BackendError::Unavailable { backend: lib.name.clone(), reason }),
            });
        }
    }
    out
}

//! The backends this kiln knows, in `--backend auto` preference order.
//!
//! Every backend is compiled in; one whose device probe fails (no CUDA driver, no Vulkan
//! adapter) reports why, so `--backend cuda` on a machine without CUDA is a clear error.

use anyhow::bail;
use kiln::{Backend, BackendError, DeviceFingerprint, Engine, EngineLoadError};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendChoice {
    /// The first available of cuda, wgpu, cpu, passing over a wgpu software adapter (for an
    /// engine: the backend it was built for).
    Auto,
    Cpu,
    Wgpu,
    Cuda,
}

impl BackendChoice {
    /// The backend's registry name; `None` for `auto`.
    fn name(self) -> Option<&'static str> {
        match self {
            BackendChoice::Auto => None,
            BackendChoice::Cpu => Some("cpu"),
            BackendChoice::Wgpu => Some("wgpu"),
            BackendChoice::Cuda => Some("cuda"),
        }
    }
}

struct RegistryEntry {
    name: &'static str,
    open: fn() -> Result<Box<dyn Backend>, BackendError>,
}

/// Fastest first: `auto` takes the first entry whose device probe succeeds.
const REGISTRY: [RegistryEntry; 3] = [
    RegistryEntry { name: "cuda", open: || Ok(Box::new(kiln_cuda::CudaBackend::new())) },
    RegistryEntry { name: "wgpu", open: || Ok(Box::new(kiln_wgpu::WgpuBackend::new())) },
    RegistryEntry { name: "cpu", open: || Ok(Box::new(kiln_cpu::CpuBackend::new())) },
];

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
    let entry = REGISTRY.iter().find(|e| e.name == name).ok_or_else(|| BackendError::Unavailable {
        backend: name.to_string(),
        reason: format!("kiln has no backend of that name (known: {})", known_names()),
    })?;
    let backend = (entry.open)()?;
    let device = backend.device()?;
    Ok(SelectedBackend { backend, device, selection })
}

fn known_names() -> String {
    REGISTRY.iter().map(|e| e.name).collect::<Vec<_>>().join(", ")
}

/// The backend to build on: the one asked for, or for `auto` the first available one.
pub fn select(choice: BackendChoice) -> anyhow::Result<SelectedBackend> {
    if let Some(name) = choice.name() {
        return Ok(open(name, Selection::Requested)?);
    }
    let mut reasons = Vec::new();
    for entry in &REGISTRY {
        match open(entry.name, Selection::Auto) {
            Ok(selected) if kiln_wgpu::is_software_adapter(&selected.device) => {
                reasons.push(format!("wgpu runs on a software adapter ({}), slower than cpu", selected.device.name))
            }
            Ok(selected) => return Ok(selected),
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
    REGISTRY.iter().any(|e| e.name == name)
}

/// The registry's names, comma-separated, for error messages.
pub fn known_names_text() -> String {
    known_names()
}

/// Opens a backend named on the command line (`kiln compare --backends`).
pub fn open_requested(name: &str) -> Result<SelectedBackend, BackendError> {
    open(name, Selection::Requested)
}

/// Every registry backend in preference order, with its device or why it has none.
pub fn probe_all() -> Vec<(&'static str, Result<DeviceFingerprint, BackendError>)> {
    REGISTRY.iter().map(|entry| (entry.name, (entry.open)().and_then(|backend| backend.device()))).collect()
}

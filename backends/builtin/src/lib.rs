//! The backends compiled into kiln, fastest first: the one list the CLI, the C API and the
//! Python package open backends from (the CLI adds backend libraries after them).
#![forbid(unsafe_code)]

use kiln::{Backend, BackendError, DeviceFingerprint};

/// A compiled-in backend: its name and constructor (which probes nothing).
#[derive(Debug, Clone, Copy)]
pub struct BuiltIn {
    pub name: &'static str,
    pub open: fn() -> Box<dyn Backend>,
}

/// In `auto` preference order: the first whose device probe succeeds wins.
pub const BUILT_IN: [BuiltIn; 3] = [
    BuiltIn { name: "cuda", open: || Box::new(kiln_cuda::CudaBackend::new()) },
    BuiltIn { name: "wgpu", open: || Box::new(kiln_wgpu::WgpuBackend::new()) },
    BuiltIn { name: "cpu", open: || Box::new(kiln_cpu::CpuBackend::new()) },
];

/// The compiled-in backend `name`, if kiln has one (its device not probed).
pub fn built_in(name: &str) -> Option<Box<dyn Backend>> {
    BUILT_IN.iter().find(|b| b.name == name).map(|b| (b.open)())
}

/// `cuda, wgpu, cpu`, for error messages.
pub fn names_text() -> String {
    BUILT_IN.iter().map(|b| b.name).collect::<Vec<_>>().join(", ")
}

/// Backend `name` with a usable device, or an error saying why there is none.
pub fn open(name: &str) -> Result<Box<dyn Backend>, BackendError> {
    let backend = built_in(name).ok_or_else(|| BackendError::Unavailable {
        backend: name.to_string(),
        reason: format!("kiln has no backend of that name (it has {})", names_text()),
    })?;
    backend.device()?;
    Ok(backend)
}

/// Why `auto` passes over a backend whose device works, if it does: wgpu on a software
/// adapter (lavapipe) is slower than the cpu backend.
pub fn passed_over_by_auto(device: &DeviceFingerprint) -> Option<String> {
    kiln_wgpu::is_software_adapter(device).then(|| format!("wgpu runs on a software adapter ({}), slower than cpu", device.name))
}

/// The first compiled-in backend with a usable device (`auto`), or every reason there is none.
pub fn open_auto() -> Result<Box<dyn Backend>, String> {
    let mut reasons = Vec::new();
    for b in BUILT_IN {
        let backend = (b.open)();
        match backend.device() {
            Ok(device) => match passed_over_by_auto(&device) {
                Some(reason) => reasons.push(reason),
                None => return Ok(backend),
            },
            Err(e) => reasons.push(e.to_string()),
        }
    }
    Err(format!("no backend is available: {}", reasons.join("; ")))
}

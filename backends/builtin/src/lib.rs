//! The backends compiled into kiln, fastest first: the one list the CLI, the C API and the
//! Python package open backends from (the CLI adds backend libraries after them).
#![forbid(unsafe_code)]

use kiln::{Backend, BackendError, DeviceFingerprint};

/// Page-locking caller-owned host memory for cuda's device-resident I/O (the C API's
/// `kiln_register_host_memory`).
pub use kiln_cuda::caller_memory::{register_host_memory, synchronize_stream, HostRegistration};

/// A compiled-in backend: its name and constructors (which probe nothing).
#[derive(Debug, Clone, Copy)]
pub struct BuiltIn {
    pub name: &'static str,
    pub open: fn() -> Box<dyn Backend>,
    /// On device `N` of several (None: the backend has one device).
    pub open_on: Option<fn(usize) -> Box<dyn Backend>>,
}

impl BuiltIn {
    /// The backend on device `device` (0 is the default one).
    pub fn open_device(&self, device: usize) -> Result<Box<dyn Backend>, BackendError> {
        match (self.open_on, device) {
            (Some(open_on), _) => Ok(open_on(device)),
            (None, 0) => Ok((self.open)()),
            (None, _) => Err(BackendError::Unavailable {
                backend: self.name.into(),
                reason: format!("it runs on one device, 0; there is no device {device} to choose"),
            }),
        }
    }
}

/// In `auto` preference order: the first whose device probe succeeds wins.
pub const BUILT_IN: [BuiltIn; 3] = [
    BuiltIn {
        name: "cuda",
        open: || Box::new(kiln_cuda::CudaBackend::new()),
        open_on: Some(|device| Box::new(kiln_cuda::CudaBackend::on_device(device))),
    },
    BuiltIn { name: "wgpu", open: || Box::new(kiln_wgpu::WgpuBackend::new()), open_on: None },
    BuiltIn { name: "cpu", open: || Box::new(kiln_cpu::CpuBackend::new()), open_on: None },
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
    open_on_device(name, 0)
}

/// Backend `name` on device `device` (cuda's ordinal; the other backends have only 0), probed.
pub fn open_on_device(name: &str, device: usize) -> Result<Box<dyn Backend>, BackendError> {
    let entry = BUILT_IN.iter().find(|b| b.name == name).ok_or_else(|| BackendError::Unavailable {
        backend: name.to_string(),
        reason: format!("kiln has no backend of that name (it has {})", names_text()),
    })?;
    let backend = entry.open_device(device)?;
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
    open_auto_on_device(0)
}

/// `open_auto` among the backends that have device `device` (for 1 and up: cuda's ordinals).
pub fn open_auto_on_device(device: usize) -> Result<Box<dyn Backend>, String> {
    let mut reasons = Vec::new();
    for b in BUILT_IN {
        let backend = match b.open_device(device) {
            Ok(backend) => backend,
            Err(e) => {
                reasons.push(e.to_string());
                continue;
            }
        };
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

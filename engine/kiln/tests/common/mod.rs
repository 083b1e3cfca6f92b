//! A backend for core tests that needs no device: it accepts every network and refuses to
//! execute, so tests of the builder and the engine file run without kiln-cpu.

use kiln::{Backend, BackendError, DeviceFingerprint, Executable, Network};

#[derive(Debug)]
pub struct RecordOnlyBackend {
    pub fingerprint: DeviceFingerprint,
}

impl RecordOnlyBackend {
    pub fn new() -> RecordOnlyBackend {
        RecordOnlyBackend {
            fingerprint: DeviceFingerprint {
                backend: "record-only".into(),
                name: "test device".into(),
                compute_capability: "1.0".into(),
                multiprocessor_count: 4,
                ..Default::default()
            },
        }
    }
}

impl Backend for RecordOnlyBackend {
    fn name(&self) -> &str {
        "record-only"
    }
    fn device(&self) -> Result<DeviceFingerprint, BackendError> {
        Ok(self.fingerprint.clone())
    }
    fn check_support(&self, _: &Network) -> Result<(), BackendError> {
        Ok(())
    }
    fn prepare_plan(
        &self,
        _: &Network,
        _: &kiln::ir::control::ControlFlow,
        _: &[Option<kiln::tactics::TacticId>],
        _: kiln::MathMode,
    ) -> Result<Box<dyn Executable>, BackendError> {
        Err(BackendError::Unavailable { backend: "record-only".into(), reason: "executes nothing".into() })
    }
}

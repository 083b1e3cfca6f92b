//! Any byte string given to the engine loader is an error or a valid engine, never a
//! panic, hang or huge allocation; a loaded engine also prepares on the cpu backend.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(engine) = kiln::Engine::deserialize(data) {
        let backend = kiln_cpu::CpuBackend::new();
        let _ = kiln::ExecutionContext::new(engine, &backend);
    }
});

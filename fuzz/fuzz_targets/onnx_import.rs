//! Any byte string given to the ONNX importer is an error or a network, never a panic;
//! an imported network also builds for the cpu backend, and the capability check (which
//! goes on past failed nodes with stand-ins) never panics either.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(network) = kiln_onnx::import_bytes(data, None) {
        let backend = kiln_cpu::CpuBackend::new();
        let _ = kiln::Builder::new(&backend).build(&network, &kiln::BuilderConfig::default());
    }
    let _ = kiln_onnx::check_bytes(data, None);
});

//! Any byte string given to the engine loader is an error or a valid engine, never a
//! panic, hang or huge allocation; a loaded engine also prepares on the cpu backend.
//!
//! Checksums guard the header and every section, so a mutated file would almost never get
//! past them: each input is also loaded resealed (its sections' checksums recomputed), so
//! the plan decoder and the load-time checks see the mutations.
#![no_main]

use kiln::engine::format::{self, BuildFlags, EngineHeader, SectionKind};
use kiln::DeviceFingerprint;
use libfuzzer_sys::fuzz_target;
use serde::Deserialize;

/// The engine header as the file stores it (`format::WireHeader`, private there): offsets
/// and lengths as fixed 8-byte values.
#[derive(Deserialize)]
struct WireHeader {
    kiln_version: String,
    backend: String,
    device: DeviceFingerprint,
    build_flags: BuildFlags,
    sections: Vec<(SectionKind, [u8; 8], [u8; 8], u32)>,
}

/// The file with its header's sections cut out of it and written again with true
/// checksums; `None` when the header does not decode or a section lies outside.
fn resealed(data: &[u8]) -> Option<Vec<u8>> {
    let header_len = u32::from_le_bytes(data.get(12..16)?.try_into().ok()?) as usize;
    let wire: WireHeader = postcard::from_bytes(data.get(16..16usize.checked_add(header_len)?)?).ok()?;
    let mut sections = Vec::new();
    for (kind, offset, len, _) in wire.sections {
        let start = usize::try_from(u64::from_le_bytes(offset)).ok()?;
        let end = start.checked_add(usize::try_from(u64::from_le_bytes(len)).ok()?)?;
        sections.push((kind, data.get(start..end)?.to_vec()));
    }
    let header = EngineHeader {
        kiln_version: wire.kiln_version,
        backend: wire.backend,
        device: wire.device,
        build_flags: wire.build_flags,
        sections: Vec::new(),
    };
    Some(format::write_file(header, &sections))
}

fn load_and_prepare(bytes: &[u8]) {
    if let Ok(engine) = kiln::Engine::deserialize(bytes) {
        let backend = kiln_cpu::CpuBackend::new();
        let _ = kiln::ExecutionContext::new(engine, &backend);
    }
}

fuzz_target!(|data: &[u8]| {
    load_and_prepare(data);
    if let Some(file) = resealed(data) {
        load_and_prepare(&file);
    }
});

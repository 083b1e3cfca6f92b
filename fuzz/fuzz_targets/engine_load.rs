//! Any byte string given to the engine loader is an error or a valid engine, never a
//! panic, hang or huge allocation; a loaded engine also prepares on the cpu backend, and a
//! refittable one replays its build in a refit.
//!
//! Checksums guard the header and every section, so a mutated file would almost never get
//! past them: each input is also loaded resealed (its sections' checksums recomputed), so
//! the plan decoder and the load-time checks see the mutations.
#![no_main]

use kiln::engine::format::{self, WireHeader};
use libfuzzer_sys::fuzz_target;

/// The file with its header's sections cut out of it and written again with true
/// checksums; `None` when the header does not decode or a section lies outside.
fn resealed(data: &[u8]) -> Option<Vec<u8>> {
    let header_len = u32::from_le_bytes(data.get(12..16)?.try_into().ok()?) as usize;
    let mut header = WireHeader::decode(data.get(16..16usize.checked_add(header_len)?)?).ok()?.into_header();
    let mut sections = Vec::new();
    for entry in std::mem::take(&mut header.sections) {
        let start = usize::try_from(entry.offset).ok()?;
        let end = start.checked_add(usize::try_from(entry.len).ok()?)?;
        sections.push((entry.kind, data.get(start..end)?.to_vec()));
    }
    Some(format::write_file(header, &sections))
}

fn load_and_prepare(bytes: &[u8]) {
    if let Ok(mut engine) = kiln::Engine::deserialize(bytes) {
        let backend = kiln_cpu::CpuBackend::new();
        let _ = kiln::ExecutionContext::new(engine.clone(), &backend);
        // A refittable engine's source network replays the build's rewrites in a refit.
        if let Ok(mut refitter) = kiln::refit::Refitter::new(&engine) {
            let _ = refitter.refit_engine(&mut engine, &backend);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    load_and_prepare(data);
    if let Some(file) = resealed(data) {
        load_and_prepare(&file);
    }
});

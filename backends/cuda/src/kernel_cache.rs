//! kiln's compiled kernels, kept on disk between processes. NVRTC takes about 100 s of CPU to
//! compile every source for one architecture, which every process paid at start; with the
//! cache it pays once per machine and source text. An image's file name hashes all it is
//! compiled from: the source and header texts, the architecture, the options and NVRTC's
//! version. Images are written whole under a temporary name and renamed into place, so
//! concurrent processes never read a partial one.
//!
//! `KILN_KERNEL_CACHE` names the folder (`off`: no cache); by default it is
//! `$XDG_CACHE_HOME/kiln/kernels`, else `$HOME/.cache/kiln/kernels`.

use crate::nvrtc::{self, CompileError};
use crate::sources::{headers, Source};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

pub const CACHE_ENV: &str = "KILN_KERNEL_CACHE";

/// A source's image and whether it came from the cache.
type Found = (Source, Vec<u8>, bool);

/// The cache folder, or `None` where the cache is off or no home folder is known.
pub fn folder() -> Option<PathBuf> {
    let set = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    match set(CACHE_ENV) {
        Some(v) if v == "off" => None,
        Some(v) => Some(PathBuf::from(v)),
        None => {
            let base = set("XDG_CACHE_HOME").map(PathBuf::from).or_else(|| set("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
            Some(base.join("kiln").join("kernels"))
        }
    }
}

/// The file an image of `source` for `arch` is kept in: `sm_90-spatial-<hash>.cubin`.
pub fn file_name(source: Source, arch: &str) -> String {
    let mut bytes = Vec::new();
    let mut put = |part: &[u8]| {
        bytes.extend_from_slice(&(part.len() as u64).to_le_bytes());
        bytes.extend_from_slice(part);
    };
    put(format!("{:?}", nvrtc::version()).as_bytes());
    nvrtc::options(&source.target(arch)).iter().for_each(|o| put(o.as_bytes()));
    put(source.file_name().as_bytes());
    put(source.text().as_bytes());
    for (name, text) in headers() {
        put(name.as_bytes());
        put(text.as_bytes());
    }
    let stem = source.file_name().trim_end_matches(".cu");
    format!("{arch}-{stem}-{:016x}.cubin", kiln::tactics::fnv1a64(&bytes))
}

/// `source`'s CUBIN for `arch`, read from `folder` when a whole image is there, else compiled
/// and stored there (a failure to store is logged, not an error). The flag says whether it
/// came from the cache.
pub fn cubin(source: Source, arch: &str, folder: Option<&Path>) -> Result<(Vec<u8>, bool), CompileError> {
    let path = folder.map(|f| f.join(file_name(source, arch)));
    if let Some(image) = path.as_ref().and_then(|p| std::fs::read(p).ok()).filter(|i| whole_elf(i)) {
        return Ok((image, true));
    }
    let started = Instant::now();
    let image = source.compile(arch)?;
    tracing::info!("compiled kernels/{} for {arch} in {:.1} s", source.file_name(), started.elapsed().as_secs_f64());
    if let Some(path) = &path {
        if let Err(e) = store(path, &image) {
            tracing::warn!("could not keep kernels/{} in the kernel cache {}: {e} (set {CACHE_ENV} to a writable folder, or to `off`)", source.file_name(), path.display());
        }
    }
    Ok((image, false))
}

/// Every source's CUBIN for `arch`, those not in `folder` compiled in parallel.
pub fn all(arch: &str, folder: Option<&Path>) -> Result<Vec<(Source, Vec<u8>)>, CompileError> {
    let started = Instant::now();
    let results: Vec<Result<Found, CompileError>> = std::thread::scope(|s| {
        let jobs: Vec<_> = Source::ALL.iter().map(|&source| s.spawn(move || cubin(source, arch, folder).map(|(i, hit)| (source, i, hit)))).collect();
        jobs.into_iter().map(|j| j.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))).collect()
    });
    let images = results.into_iter().collect::<Result<Vec<_>, _>>()?;
    let compiled = images.iter().filter(|(_, _, hit)| !hit).count();
    if compiled > 0 {
        let kept = folder.map_or("no kernel cache".to_string(), |f| format!("kept in {}", f.display()));
        tracing::info!("compiled {compiled} of {} kernel sources for {arch} in {:.1} s ({kept})", images.len(), started.elapsed().as_secs_f64());
    }
    Ok(images.into_iter().map(|(s, i, _)| (s, i)).collect())
}

/// Whether `image` is a whole 64-bit ELF file: its section header table lies inside it (a
/// truncated file is compiled again, not loaded).
fn whole_elf(image: &[u8]) -> bool {
    let u64_at = |o: usize| image.get(o..o + 8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
    let u16_at = |o: usize| image.get(o..o + 2).map(|b| u16::from_le_bytes(b.try_into().expect("2 bytes")));
    let header_ok = image.starts_with(b"\x7fELF\x02\x01");
    match (u64_at(0x28), u16_at(0x3a), u16_at(0x3c)) {
        (Some(offset), Some(entry), Some(count)) => header_ok && offset.checked_add(u64::from(entry) * u64::from(count)).is_some_and(|end| end <= image.len() as u64),
        _ => false,
    }
}

/// Writes `image` to `path` under a temporary name first, then renames it into place.
fn store(path: &Path, image: &[u8]) -> std::io::Result<()> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let folder = path.parent().ok_or_else(|| std::io::Error::other("no parent folder"))?;
    std::fs::create_dir_all(folder)?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("image");
    let temporary = folder.join(format!(".{name}.{}.{}.tmp", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)));
    std::fs::write(&temporary, image)?;
    std::fs::rename(&temporary, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&temporary);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal 64-bit ELF header whose section table is `count` entries of 64 bytes at 64.
    fn elf(count: u16, len: usize) -> Vec<u8> {
        let mut image = vec![0u8; len];
        image[..6].copy_from_slice(b"\x7fELF\x02\x01");
        image[0x28..0x30].copy_from_slice(&64u64.to_le_bytes());
        image[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        image[0x3c..0x3e].copy_from_slice(&count.to_le_bytes());
        image
    }

    #[test]
    fn only_a_whole_elf_image_counts() {
        assert!(whole_elf(&elf(2, 64 + 128)));
        assert!(!whole_elf(&elf(2, 64 + 127)), "a truncated section table");
        assert!(!whole_elf(b"\x7fELF"), "a header cut short");
        let mut not_elf = elf(2, 64 + 128);
        not_elf[0] = 0;
        assert!(!whole_elf(&not_elf));
    }

    #[test]
    fn the_file_name_changes_with_the_architecture_and_source() {
        let a = file_name(Source::Timing, "sm_90");
        assert!(a.starts_with("sm_90-timing-") && a.ends_with(".cubin"), "{a}");
        assert_eq!(a, file_name(Source::Timing, "sm_90"), "stable within a process");
        assert_ne!(a, file_name(Source::Timing, "sm_80"));
        assert_ne!(a.rsplit('-').next(), file_name(Source::Copy, "sm_90").rsplit('-').next());
    }

    #[test]
    fn a_stored_image_replaces_the_old_one_whole() {
        let folder = std::env::temp_dir().join(format!("kiln-kernel-cache-{}", std::process::id()));
        let path = folder.join("sm_90-test.cubin");
        store(&path, &elf(1, 200)).expect("stored");
        store(&path, &elf(2, 300)).expect("stored again");
        assert_eq!(std::fs::read(&path).expect("read"), elf(2, 300));
        let leftovers = std::fs::read_dir(&folder).expect("folder").filter(|e| e.as_ref().is_ok_and(|e| e.file_name() != "sm_90-test.cubin")).count();
        assert_eq!(leftovers, 0, "no temporary file is left behind");
        std::fs::remove_dir_all(&folder).expect("cleaned up");
    }
}

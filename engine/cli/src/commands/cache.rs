//! `kiln cache show|merge|edit`: the timing cache files `kiln build --timing-cache` keeps.
//!
//! Writers of a cache file (builds, `kiln cache edit` and `merge`) hold an exclusive lock on
//! `FILE.lock` beside it while they read what is on disk, combine and write the result
//! (through a temporary renamed over it), so concurrent builds never lose each other's
//! entries. Readers need no lock: a rename replaces the file whole.

use crate::output_file;
use crate::summary::emit;
use crate::CacheCommand;
use anyhow::{bail, Context};
use kiln::TimingCache;
use std::fmt::Write;
use std::fs::File;
use std::path::{Path, PathBuf};

pub fn cache(command: &CacheCommand) -> anyhow::Result<()> {
    match command {
        CacheCommand::Show { file, json } => {
            let cache = read(file)?;
            if let Some(path) = json {
                crate::summary::write_json(path, &show_json(&cache))?;
                if output_file::is_stdout(path) {
                    return Ok(());
                }
            }
            emit(&show(&cache))
        }
        CacheCommand::Merge { a, b, output } => {
            // Under the output's lock, like every writer of a cache file: a build saving to it
            // finishes its read-merge-write first, and one after merges this result in. The
            // output is replaced with A + B, as before: what it held is not merged in.
            let written = locked(output, || {
                let mut merged = read(a)?;
                merged.merge(&read(b)?).with_context(|| format!("cannot merge `{}` into `{}`", b.display(), a.display()))?;
                write(output, &merged)?;
                Ok(merged.len())
            })?;
            emit(&format!("{written} entries written to `{}`\n", output.display()))
        }
        CacheCommand::Edit { file, key, tactic } => {
            let chosen = locked(file, || {
                let mut cache = read(file)?;
                let chosen = cache.set_tactic(key, tactic)?;
                write(file, &cache)?;
                Ok(chosen)
            })?;
            emit(&format!("{key}: {chosen}\n"))
        }
    }
}

/// The cache in `path`, or an empty one when the file does not exist yet.
pub fn read_or_empty(path: &Path) -> anyhow::Result<TimingCache> {
    if !path.exists() {
        return Ok(TimingCache::new());
    }
    read(path)
}

/// Adds what is in `path` now to `cache` (its own entries win) and writes the result
/// there, under the lock; returns the number of entries written.
pub fn save_merged(path: &Path, mut cache: TimingCache) -> anyhow::Result<usize> {
    locked(path, || {
        let on_disk = read_or_empty(path)?;
        cache.merge(&on_disk).with_context(|| format!("`{}` changed to another device's cache meanwhile", path.display()))?;
        write(path, &cache)?;
        Ok(cache.len())
    })
}

/// Replaces the cache in `path` with `cache`, under the lock.
pub fn replace(path: &Path, cache: &TimingCache) -> anyhow::Result<usize> {
    locked(path, || write(path, cache).map(|()| cache.len()))
}

/// Runs `body` holding the exclusive lock of the cache `path` (on `path.lock`, a file
/// that is never replaced, unlike the cache).
fn locked<T>(path: &Path, body: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<T> {
    let lock_path = lock_path(path);
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .with_context(|| format!("cannot open the lock file `{}`", lock_path.display()))?;
    lock.lock().with_context(|| format!("cannot lock `{}`", lock_path.display()))?;
    // Closing `lock` after the body releases it.
    body()
}

/// `FILE.lock` beside the file a link names, so every name of one cache shares a lock.
fn lock_path(path: &Path) -> PathBuf {
    let file = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mut name = file.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    file.with_file_name(name)
}

fn read(path: &Path) -> anyhow::Result<TimingCache> {
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
        bail!("timing cache `{}` is not a regular file", path.display());
    }
    let bytes = std::fs::read(path).with_context(|| format!("cannot read timing cache `{}`", path.display()))?;
    TimingCache::from_bytes(&bytes).with_context(|| format!("`{}` is not a usable timing cache", path.display()))
}

fn write(path: &Path, cache: &TimingCache) -> anyhow::Result<()> {
    output_file::write_bytes(path, &cache.serialize()).with_context(|| format!("cannot write timing cache `{}`", path.display()))
}

fn show_json(cache: &TimingCache) -> serde_json::Value {
    let header = cache.header().map(|h| {
        serde_json::json!({ "backend": h.backend, "device": h.device.name, "kiln": h.kiln_version })
    });
    let entries: Vec<serde_json::Value> = cache
        .entries()
        .map(|(key, entry)| {
            let candidates: Vec<serde_json::Value> = entry
                .candidates
                .iter()
                .map(|(id, ns)| serde_json::json!({ "tactic": id.to_string(), "median_ns": ns }))
                .collect();
            serde_json::json!({ "key": key, "layer_kind": entry.layer_kind, "chosen": entry.chosen.to_string(), "candidates": candidates })
        })
        .collect();
    serde_json::json!({ "header": header, "entries": entries })
}

fn show(cache: &TimingCache) -> String {
    let mut s = String::new();
    match cache.header() {
        Some(h) => {
            let _ = writeln!(s, "backend: {}\ndevice:  {}\nkiln:    {}", h.backend, h.device.name, h.kiln_version);
        }
        None => s.push_str("(a fresh cache: no device yet)\n"),
    }
    let _ = writeln!(s, "entries: {}", cache.len());
    for (key, entry) in cache.entries() {
        let _ = writeln!(s, "{key}\n  chosen: {}", entry.chosen);
        for (id, ns) in &entry.candidates {
            let _ = writeln!(s, "  {:>12.3} µs  {id}", *ns as f64 / 1000.0);
        }
    }
    s
}

//! `kiln cache show|merge|edit`: the timing cache files `kiln build --timing-cache` keeps.

use crate::output_file;
use crate::summary::emit;
use crate::CacheCommand;
use anyhow::Context;
use kiln::TimingCache;
use std::fmt::Write;
use std::path::Path;

pub fn cache(command: &CacheCommand) -> anyhow::Result<()> {
    match command {
        CacheCommand::Show { file } => emit(&show(&read(file)?)),
        CacheCommand::Merge { a, b, output } => {
            let mut merged = read(a)?;
            merged.merge(&read(b)?).with_context(|| format!("cannot merge `{}` into `{}`", b.display(), a.display()))?;
            write(output, &merged)?;
            emit(&format!("{} entries written to `{}`\n", merged.len(), output.display()))
        }
        CacheCommand::Edit { file, key, tactic } => {
            let mut cache = read(file)?;
            let chosen = cache.set_tactic(key, tactic)?;
            write(file, &cache)?;
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

fn read(path: &Path) -> anyhow::Result<TimingCache> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read timing cache `{}`", path.display()))?;
    TimingCache::from_bytes(&bytes).with_context(|| format!("`{}` is not a usable timing cache", path.display()))
}

fn write(path: &Path, cache: &TimingCache) -> anyhow::Result<()> {
    output_file::write_bytes(path, &cache.serialize()).with_context(|| format!("cannot write timing cache `{}`", path.display()))
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

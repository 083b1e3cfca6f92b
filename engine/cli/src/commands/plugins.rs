//! Plugin libraries on the command line: `--plugins LIB` (any command) and
//! `KILN_PLUGIN_PATH` load before the command runs; `kiln plugins list` shows the registry.

use crate::summary::emit;
use anyhow::Context;
use kiln::plugin::{registry, FieldType};
use kiln_plugins::LoadedLibrary;
use std::fmt::Write;
use std::path::PathBuf;

/// Loads `KILN_PLUGIN_PATH`'s libraries, then each `--plugins` library; any failure is
/// the command's error (nothing runs with a partial set). Returns what was loaded and,
/// for the listing, folder entries skipped as not being kiln plugin libraries.
pub fn load(explicit: &[PathBuf]) -> anyhow::Result<Loaded> {
    let (mut libraries, skipped) =
        kiln_plugins::load_from_env().context(format!("loading {}", kiln_plugins::PLUGIN_PATH_VAR))?;
    for path in explicit {
        libraries.push(kiln_plugins::load_library(path).with_context(|| format!("--plugins {}", path.display()))?);
    }
    Ok(Loaded { libraries, skipped })
}

#[derive(Debug, Default)]
pub struct Loaded {
    pub libraries: Vec<LoadedLibrary>,
    pub skipped: Vec<String>,
}

pub fn list(loaded: &Loaded) -> anyhow::Result<()> {
    let mut text = String::new();
    let creators = registry().creators();
    if creators.is_empty() {
        let _ = writeln!(
            text,
            "no plugins loaded (load libraries with --plugins LIB or {})",
            kiln_plugins::PLUGIN_PATH_VAR
        );
    }
    for c in creators {
        let _ = writeln!(text, "{}  (from {})", c.key(), c.origin());
        for spec in c.field_specs() {
            let ty = match spec.ty {
                FieldType::F32 => "f32",
                FieldType::F64 => "f64",
                FieldType::I32 => "i32",
                FieldType::I64 => "i64",
                FieldType::Bytes => "bytes",
                FieldType::Text => "text",
            };
            let _ = writeln!(text, "    field {}: {ty}", spec.name);
        }
    }
    let _ = writeln!(
        text,
        "{} librar{} loaded",
        loaded.libraries.len(),
        if loaded.libraries.len() == 1 { "y" } else { "ies" }
    );
    for s in &loaded.skipped {
        let _ = writeln!(text, "skipped {s}");
    }
    emit(&text)
}

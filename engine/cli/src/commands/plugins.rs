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

pub fn list(loaded: &Loaded, json_path: Option<&std::path::Path>) -> anyhow::Result<()> {
    let mut text = String::new();
    let mut listed = Vec::new();
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
        let mut fields = Vec::new();
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
            fields.push(serde_json::json!({ "name": spec.name, "type": ty }));
        }
        listed.push(serde_json::json!({ "plugin": c.key().to_string(), "from": c.origin().to_string(), "fields": fields }));
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
    if let Some(path) = json_path {
        let libraries: Vec<String> = loaded.libraries.iter().map(|l| l.path.display().to_string()).collect();
        let skipped: Vec<String> = loaded.skipped.iter().map(|s| s.to_string()).collect();
        let report = serde_json::json!({ "plugins": listed, "libraries": libraries, "skipped": skipped });
        crate::summary::write_json(path, &report)?;
        if crate::output_file::is_stdout(path) {
            return Ok(());
        }
    }
    emit(&text)
}

//! `kiln devices`: every backend kiln knows (built in or from a backend library, with its
//! path), whether it can run here, and its device and capabilities.

use crate::backends;
use crate::output_file;
use crate::summary::{self, emit};
use kiln::{BackendError, DeviceFingerprint};
use serde_json::{json, Value};
use std::fmt::Write;
use std::path::Path;

pub fn devices(json_path: Option<&Path>) -> anyhow::Result<()> {
    let mut text = String::new();
    let mut listed = Vec::new();
    for probe in backends::probe_all() {
        let origin = format!("  from:               {}", probe.origin);
        let (state, reason, device) = match probe.device {
            Ok(device) => {
                let _ = writeln!(text, "{}: available\n{origin}", probe.name);
                write_device(&mut text, &device);
                ("available", None, Some(device_json(&device)))
            }
            Err(BackendError::Unavailable { reason, .. }) => {
                let state = if probe.shadowed { "not used" } else { "not available" };
                let _ = writeln!(text, "{}: {state}: {reason}\n{origin}", probe.name);
                (state, Some(reason), None)
            }
            Err(other) => {
                let _ = writeln!(text, "{}: not available: {other}\n{origin}", probe.name);
                ("not available", Some(other.to_string()), None)
            }
        };
        listed.push(json!({
            "backend": probe.name,
            "state": state,
            "reason": reason,
            "from": probe.origin.to_string(),
            "device": device,
        }));
    }
    if let Some(path) = json_path {
        crate::summary::write_json(path, &Value::Array(listed))?;
        if output_file::is_stdout(path) {
            return Ok(());
        }
    }
    emit(&text)
}

fn device_json(d: &DeviceFingerprint) -> Value {
    json!({
        "name": d.name,
        "compute_capability": d.compute_capability,
        "memory_bytes": d.memory_bytes,
        "multiprocessors": d.multiprocessor_count,
        "l2_cache_bytes": d.l2_cache_bytes,
        "driver": d.driver_version,
        "shared_memory_per_block": d.shared_memory_per_block,
        "integrated": d.integrated,
    })
}

fn write_device(text: &mut String, d: &DeviceFingerprint) {
    let known = |value: &str| if value.is_empty() { "n/a".to_string() } else { value.to_string() };
    let count = |n: u64, unit: fn(u64) -> String| if n == 0 { "n/a".to_string() } else { unit(n) };
    let bytes = |n: u64| summary::byte_size(usize::try_from(n).unwrap_or(usize::MAX));
    let _ = writeln!(text, "  device:             {}", known(&d.name));
    let _ = writeln!(text, "  compute capability: {}", known(&d.compute_capability));
    let _ = writeln!(text, "  memory:             {}", count(d.memory_bytes, bytes));
    let _ = writeln!(text, "  multiprocessors:    {}", count(u64::from(d.multiprocessor_count), |n| n.to_string()));
    let _ = writeln!(text, "  L2 cache:           {}", count(d.l2_cache_bytes, bytes));
    let _ = writeln!(text, "  driver:             {}", known(&d.driver_version));
    let _ = writeln!(text, "  shared memory/block: {}", count(d.shared_memory_per_block, bytes));
    let _ = writeln!(text, "  integrated:         {}", if d.integrated { "yes" } else { "no" });
}

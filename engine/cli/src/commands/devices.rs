//! `kiln devices`: every backend kiln knows (built in or from a backend library, with its
//! path), whether it can run here, and its device and capabilities.

use crate::backends;
use crate::summary::{self, emit};
use kiln::{BackendError, DeviceFingerprint};
use std::fmt::Write;

pub fn devices() -> anyhow::Result<()> {
    let mut text = String::new();
    for probe in backends::probe_all() {
        let origin = format!("  from:               {}", probe.origin);
        match probe.device {
            Ok(device) => {
                let _ = writeln!(text, "{}: available\n{origin}", probe.name);
                write_device(&mut text, &device);
            }
            Err(BackendError::Unavailable { reason, .. }) => {
                let state = if probe.shadowed { "not used" } else { "not available" };
                let _ = writeln!(text, "{}: {state}: {reason}\n{origin}", probe.name);
            }
            Err(other) => {
                let _ = writeln!(text, "{}: not available: {other}\n{origin}", probe.name);
            }
        }
    }
    emit(&text)
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

//! What identifies a device: the fingerprint an engine records and checks when it loads
//! (seed §6.7) and a timing cache records with its times.

use serde::{Deserialize, Serialize};

/// What identifies a device for engine compatibility (seed §6.7). Fields a backend does
/// not know stay at their defaults.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceFingerprint {
    /// "cpu", "wgpu", "cuda" or a plugin backend's name.
    pub backend: String,
    /// Human-readable device name, e.g. "NVIDIA H200" or "x86_64 (2 threads)".
    pub name: String,
    /// Compute capability ("9.0"), adapter id or CPU architecture: must match to load.
    pub compute_capability: String,
    pub driver_version: String,
    pub memory_bytes: u64,
    pub memory_bus_width_bits: u32,
    pub l2_cache_bytes: u64,
    pub shared_memory_per_block: u64,
    pub shared_memory_per_multiprocessor: u64,
    pub texture_alignment: u64,
    pub multiprocessor_count: u32,
    pub integrated: bool,
}

impl DeviceFingerprint {
    /// Differences that only cost performance (seed §6.7): reported as warnings.
    pub fn soft_differences(&self, other: &DeviceFingerprint) -> Vec<String> {
        let mut out = Vec::new();
        let mut check = |what: &str, a: String, b: String| {
            if a != b {
                out.push(format!("{what}: engine built with {a}, this device has {b}"));
            }
        };
        check("memory bus width", self.memory_bus_width_bits.to_string(), other.memory_bus_width_bits.to_string());
        check("L2 cache size", self.l2_cache_bytes.to_string(), other.l2_cache_bytes.to_string());
        check("shared memory per block", self.shared_memory_per_block.to_string(), other.shared_memory_per_block.to_string());
        check(
            "shared memory per multiprocessor",
            self.shared_memory_per_multiprocessor.to_string(),
            other.shared_memory_per_multiprocessor.to_string(),
        );
        check("texture alignment", self.texture_alignment.to_string(), other.texture_alignment.to_string());
        check("multiprocessor count", self.multiprocessor_count.to_string(), other.multiprocessor_count.to_string());
        check("integrated GPU", self.integrated.to_string(), other.integrated.to_string());
        out
    }
}


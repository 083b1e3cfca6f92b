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

/// The fields that only cost performance when they differ (seed §6.7).
const SOFT_FIELDS: [&str; 7] = [
    "memory bus width",
    "L2 cache size",
    "shared memory per block",
    "shared memory per multiprocessor",
    "texture alignment",
    "multiprocessor count",
    "integrated GPU",
];

impl DeviceFingerprint {
    /// Every field as (readable name, value).
    fn fields(&self) -> [(&'static str, String); 12] {
        [
            ("backend", self.backend.clone()),
            ("device", self.name.clone()),
            ("compute capability", self.compute_capability.clone()),
            ("driver version", self.driver_version.clone()),
            ("memory", self.memory_bytes.to_string()),
            ("memory bus width", self.memory_bus_width_bits.to_string()),
            ("L2 cache size", self.l2_cache_bytes.to_string()),
            ("shared memory per block", self.shared_memory_per_block.to_string()),
            ("shared memory per multiprocessor", self.shared_memory_per_multiprocessor.to_string()),
            ("texture alignment", self.texture_alignment.to_string()),
            ("multiprocessor count", self.multiprocessor_count.to_string()),
            ("integrated GPU", self.integrated.to_string()),
        ]
    }

    /// The fields that differ, as (readable name, this value, the other's value).
    pub fn differences(&self, other: &DeviceFingerprint) -> Vec<(&'static str, String, String)> {
        self.fields().into_iter().zip(other.fields()).filter(|((_, a), (_, b))| a != b).map(|((what, a), (_, b))| (what, a, b)).collect()
    }

    /// Differences that only cost performance (seed §6.7): reported as warnings.
    pub fn soft_differences(&self, other: &DeviceFingerprint) -> Vec<String> {
        self.differences(other)
            .into_iter()
            .filter(|(what, _, _)| SOFT_FIELDS.contains(what))
            .map(|(what, a, b)| format!("{what}: engine built with {a}, this device has {b}"))
            .collect()
    }
}

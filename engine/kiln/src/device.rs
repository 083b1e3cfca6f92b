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
    /// Every field as (readable name, value, whether a difference only costs performance
    /// (seed §6.7)).
    fn fields(&self) -> [(&'static str, String, bool); 12] {
        [
            ("backend", self.backend.clone(), false),
            ("device", self.name.clone(), false),
            ("compute capability", self.compute_capability.clone(), false),
            ("driver version", self.driver_version.clone(), false),
            ("memory", self.memory_bytes.to_string(), false),
            ("memory bus width", self.memory_bus_width_bits.to_string(), true),
            ("L2 cache size", self.l2_cache_bytes.to_string(), true),
            ("shared memory per block", self.shared_memory_per_block.to_string(), true),
            ("shared memory per multiprocessor", self.shared_memory_per_multiprocessor.to_string(), true),
            ("texture alignment", self.texture_alignment.to_string(), true),
            ("multiprocessor count", self.multiprocessor_count.to_string(), true),
            ("integrated GPU", self.integrated.to_string(), true),
        ]
    }

    /// The fields that differ, as (readable name, this value, the other's value).
    pub fn differences(&self, other: &DeviceFingerprint) -> Vec<(&'static str, String, String)> {
        self.differing(other).map(|(what, a, b, _)| (what, a, b)).collect()
    }

    fn differing(&self, other: &DeviceFingerprint) -> impl Iterator<Item = (&'static str, String, String, bool)> {
        self.fields()
            .into_iter()
            .zip(other.fields())
            .filter(|((_, a, _), (_, b, _))| a != b)
            .map(|((what, a, soft), (_, b, _))| (what, a, b, soft))
    }

    /// Differences that only cost performance (seed §6.7): reported as warnings.
    pub fn soft_differences(&self, other: &DeviceFingerprint) -> Vec<String> {
        self.differing(other)
            .filter(|(_, _, _, soft)| *soft)
            .map(|(what, a, b, _)| format!("{what}: engine built with {a}, this device has {b}"))
            .collect()
    }
}

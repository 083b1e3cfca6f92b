//! The timing cache (seed §6.1): per layer signature and implementation-changing builder
//! settings, the chosen tactic and every candidate's median time, for one backend, device
//! and kiln version.
//!
//! File layout: magic `KILNTCH\0`, format version (u32 LE), payload length (u32 LE),
//! CRC-32 of the payload (u32 LE), payload (postcard). Entries live in a `BTreeMap`, so
//! the bytes never depend on hash-map order.

use super::TacticId;
use crate::device::DeviceFingerprint;
use crate::KILN_VERSION;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use thiserror::Error;

const MAGIC: &[u8; 8] = b"KILNTCH\0";
/// Bumped when the payload layout changes.
pub const CACHE_FORMAT_VERSION: u32 = 1;
const PREFIX_LEN: usize = 20;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TimingCacheError {
    #[error("timing cache is truncated: {0}")]
    Truncated(String),
    #[error("not a kiln timing cache (bad magic)")]
    BadMagic,
    #[error("timing cache format version {found} is not supported (this kiln reads {supported})")]
    FormatVersion { found: u32, supported: u32 },
    #[error("timing cache checksum mismatch: the file is corrupted")]
    Checksum,
    #[error("timing cache payload does not decode: {0}")]
    Decode(String),
    /// The differences, one `what: A (cache) vs B (this machine)` each, `; `-separated.
    #[error("timing cache was made for another device or kiln version: {0}")]
    Mismatch(String),
    #[error("timing cache has no entry `{0}`")]
    NoSuchKey(String),
    #[error("tactic `{tactic}` is not a candidate of entry `{key}` (candidates: {candidates})")]
    NotACandidate { key: String, tactic: String, candidates: String },
}

/// What a cache was measured on; `None` in a fresh cache until its first build.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheHeader {
    pub backend: String,
    pub device: DeviceFingerprint,
    pub kiln_version: String,
}

/// One timed layer signature.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheEntry {
    /// The layer type, for people reading the cache.
    pub layer_kind: String,
    pub chosen: TacticId,
    /// Every timed candidate with its median time in nanoseconds, in the backend's order.
    pub candidates: Vec<(TacticId, u64)>,
}

/// A timing cache; see the module docs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimingCache {
    header: Option<CacheHeader>,
    entries: BTreeMap<String, CacheEntry>,
}

impl TimingCache {
    pub fn new() -> TimingCache {
        TimingCache::default()
    }

    /// Loads a serialized cache; empty bytes give an empty cache (seed §6.1).
    pub fn from_bytes(bytes: &[u8]) -> Result<TimingCache, TimingCacheError> {
        if bytes.is_empty() {
            return Ok(TimingCache::new());
        }
        let prefix = bytes
            .get(..PREFIX_LEN)
            .ok_or_else(|| TimingCacheError::Truncated(format!("{} bytes, the prefix alone takes {PREFIX_LEN}", bytes.len())))?;
        if &prefix[..8] != MAGIC {
            return Err(TimingCacheError::BadMagic);
        }
        let word = |at: usize| u32::from_le_bytes([prefix[at], prefix[at + 1], prefix[at + 2], prefix[at + 3]]);
        let version = word(8);
        if version != CACHE_FORMAT_VERSION {
            return Err(TimingCacheError::FormatVersion { found: version, supported: CACHE_FORMAT_VERSION });
        }
        let (len, crc) = (word(12) as usize, word(16));
        let payload = &bytes[PREFIX_LEN..];
        if payload.len() != len {
            return Err(TimingCacheError::Truncated(format!("payload is {} bytes, the prefix says {len}", payload.len())));
        }
        if crc32fast::hash(payload) != crc {
            return Err(TimingCacheError::Checksum);
        }
        postcard::from_bytes(payload).map_err(|e| TimingCacheError::Decode(e.to_string()))
    }

    pub fn serialize(&self) -> Vec<u8> {
        let payload = postcard::to_stdvec(self).expect("serializing plain data cannot fail");
        let mut out = Vec::with_capacity(PREFIX_LEN + payload.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&CACHE_FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        out.extend_from_slice(&payload);
        out
    }

    pub fn header(&self) -> Option<&CacheHeader> {
        self.header.as_ref()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries in key order.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &CacheEntry)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Query one key.
    pub fn get(&self, key: &str) -> Option<&CacheEntry> {
        self.entries.get(key)
    }

    pub fn insert(&mut self, key: String, entry: CacheEntry) {
        self.entries.insert(key, entry);
    }

    /// How this cache's header differs from `current`, one readable line per field
    /// (`device: NVIDIA H100 (cache) vs NVIDIA H200 (this machine)`); empty when it matches
    /// or the cache is fresh.
    pub fn differences(&self, current: &CacheHeader) -> Vec<String> {
        self.header.as_ref().map_or_else(Vec::new, |h| differences(h, current, "cache", "this machine"))
    }

    /// Checks the cache against the backend and device of a build. A fresh cache adopts
    /// them. A mismatch is an error, or with `ignore_mismatch` a warning (returned) and the
    /// cache is re-labelled for the current device.
    pub fn check_and_adopt(&mut self, current: &CacheHeader, ignore_mismatch: bool) -> Result<Option<String>, TimingCacheError> {
        let Some(mismatch) = mismatch(&self.differences(current)) else {
            self.header = Some(current.clone());
            return Ok(None);
        };
        if !ignore_mismatch {
            return Err(mismatch);
        }
        self.header = Some(current.clone());
        Ok(Some(format!("using the timing cache anyway: {mismatch}")))
    }

    /// Adds `other`'s entries; on a key both hold, this cache's entry stays. Caches from
    /// different backends, devices or kiln versions do not combine.
    pub fn merge(&mut self, other: &TimingCache) -> Result<(), TimingCacheError> {
        match (&self.header, &other.header) {
            (Some(a), Some(b)) => {
                if let Some(e) = mismatch(&differences(a, b, "this cache", "the other")) {
                    return Err(e);
                }
            }
            (None, Some(b)) => self.header = Some(b.clone()),
            _ => {}
        }
        for (k, v) in &other.entries {
            self.entries.entry(k.clone()).or_insert_with(|| v.clone());
        }
        Ok(())
    }

    /// Edits an entry's chosen tactic; `tactic` is a full id (`cpu/name@hash`) or a
    /// candidate's name. Returns the new choice.
    pub fn set_tactic(&mut self, key: &str, tactic: &str) -> Result<TacticId, TimingCacheError> {
        let entry = self.entries.get_mut(key).ok_or_else(|| TimingCacheError::NoSuchKey(key.to_string()))?;
        let found = entry.candidates.iter().map(|(id, _)| id).find(|id| id.to_string() == tactic || id.name == tactic).cloned();
        let Some(id) = found else {
            let candidates = entry.candidates.iter().map(|(id, _)| id.to_string()).collect::<Vec<_>>().join(", ");
            return Err(TimingCacheError::NotACandidate { key: key.into(), tactic: tactic.into(), candidates });
        };
        entry.chosen = id.clone();
        Ok(id)
    }
}

/// The header a build on `backend` / `device` expects.
pub fn current_header(backend: &str, device: &DeviceFingerprint) -> CacheHeader {
    CacheHeader { backend: backend.to_string(), device: device.clone(), kiln_version: KILN_VERSION.to_string() }
}

/// One `what: A (a_label) vs B (b_label)` line per differing header field.
fn differences(a: &CacheHeader, b: &CacheHeader, a_label: &str, b_label: &str) -> Vec<String> {
    let mut fields = Vec::new();
    if a.backend != b.backend {
        fields.push(("backend", a.backend.clone(), b.backend.clone()));
    }
    if a.kiln_version != b.kiln_version {
        fields.push(("kiln version", a.kiln_version.clone(), b.kiln_version.clone()));
    }
    // The backend shows once even when the fingerprints carry it too.
    fields.extend(a.device.differences(&b.device).into_iter().filter(|(what, _, _)| *what != "backend" || a.backend == b.backend));
    fields.into_iter().map(|(what, x, y)| format!("{what}: {x} ({a_label}) vs {y} ({b_label})")).collect()
}

fn mismatch(differences: &[String]) -> Option<TimingCacheError> {
    (!differences.is_empty()).then(|| TimingCacheError::Mismatch(differences.join("; ")))
}

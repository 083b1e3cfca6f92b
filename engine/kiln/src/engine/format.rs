//! The engine file: a header followed by checksummed sections.
//!
//! ```text
//! 0   magic "KILNENG\0"
//! 8   format version (u32 LE)
//! 12  header length H (u32 LE)
//! 16  header (postcard: EngineHeader), then its CRC-32 (u32 LE)
//! …   sections, each at the offset and with the length and CRC-32 the header lists
//! ```
//! Every length and offset is checked before use, so a truncated, corrupted or hostile file
//! is an error, never a panic or an allocation of a size the file chooses.

use crate::config::{BuilderFlags, ProfilingVerbosity};
use crate::KILN_VERSION;
use crate::device::DeviceFingerprint;
use serde::{Deserialize, Serialize};
use thiserror::Error;

pub const MAGIC: &[u8; 8] = b"KILNENG\0";
/// The layout version. 2: the plan records optimization profiles, layers carry precision
/// constraints, tensors allowed formats, the plan kernel names and the header builder flags
/// and profiling verbosity; 3: the current layout; 4: the lowered control flow is the plan's,
/// beside the network, not inside it; 5: the plan records the tactic candidates timed per layer; 6: the control flow
/// records the memory budget (`BuilderConfig::max_memory_bytes`); 7: a refittable engine's
/// Refit section (the source network and its weights, some possibly stripped); 8: fused
/// layers record the inputs they read dequantized, and their steps may quantize; 9: a
/// Dequantize layer records the type it writes; 10: an integer layer may read a residual (three
/// more input slots); 11: an integer layer may requantize its levels once more
/// (`QuantizedParams::then`, two more slots); 12: attention may pass its scores and
/// probabilities through a quantization's levels (`AttentionParams::product_levels`,
/// `scores_levels`, `probs_levels`; absent in an 11, which still reads); 13: a fused layer's
/// steps may normalize its rows (`PostOp::Normalization`; a 12 has none, and still reads); 14:
/// an integer layer may join a skip connection at its second quantization (three more slots);
/// 15: attention may read Q, K and V as levels (`AttentionParams::input_levels`); 16: an
/// integer layer may map its levels through a per-channel table (`QuantizedParams::lookup`,
/// one more slot); 17: an integer layer's output scale may hold one value per channel
/// (sibling products side by side), which a 16 reader would take as one (the layout is 16's);
/// 18: a fused layer's last step may reduce (`PostOp::Reduce`; a 17 has none, and still reads);
/// 19: a fused layer may be headed by a max pooling of levels (`FusedAnchor::Pooling`; an 18 has
/// none, and still reads).
pub const FORMAT_VERSION: u32 = 19;
/// The oldest layout this kiln still reads (a version 15 integer layer lacks the field 16
/// added, which the plan's encoding does not skip).
pub const OLDEST_READABLE_VERSION: u32 = 16;
/// Upper bound on the header, far above any real one.
const MAX_HEADER_BYTES: u32 = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SectionKind {
    /// The built network and the weights index.
    Plan,
    /// Weights blobs, each 64-byte aligned.
    Weights,
    /// A refittable engine's source network and where its weights lie (format 7).
    Refit,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SectionEntry {
    pub kind: SectionKind,
    pub offset: u64,
    pub len: u64,
    pub crc32: u32,
}

/// Builder settings recorded in the engine (shown by `kiln inspect`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildFlags {
    pub flags: Vec<String>,
    /// The builder flags the build used (after `NVIDIA_TF32_OVERRIDE`).
    #[serde(default)]
    pub builder_flags: BuilderFlags,
    /// How much the engine inspector may show (seed §6.12).
    #[serde(default)]
    pub profiling_verbosity: ProfilingVerbosity,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineHeader {
    pub kiln_version: String,
    pub backend: String,
    pub device: DeviceFingerprint,
    pub build_flags: BuildFlags,
    pub sections: Vec<SectionEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EngineFileError {
    #[error("not a kiln engine file (bad magic bytes)")]
    BadMagic,
    #[error("engine file is truncated: {0}")]
    Truncated(String),
    #[error("engine file is corrupted: {0}")]
    Corrupted(String),
    #[error("engine format version {found} is not supported: this kiln reads versions {} to {supported}", OLDEST_READABLE_VERSION)]
    FormatVersion { found: u32, supported: u32 },
    #[error("engine was built by kiln {found}; this is kiln {current}: rebuild the engine")]
    KilnVersion { found: String, current: String },
}

/// Writes header and sections into one file image.
pub fn write_file(mut header: EngineHeader, sections: &[(SectionKind, Vec<u8>)]) -> Vec<u8> {
    // The header's size depends on the offsets it lists: lay out with placeholder offsets,
    // measure, then fix the offsets (their encoding is fixed-width below).
    header.sections = sections
        .iter()
        .map(|(kind, bytes)| SectionEntry { kind: *kind, offset: 0, len: bytes.len() as u64, crc32: crc32fast::hash(bytes) })
        .collect();
    let header_len = postcard_fixed_len(&header);
    let mut offset = align64(16 + header_len + 4);
    for (entry, (_, bytes)) in header.sections.iter_mut().zip(sections) {
        entry.offset = offset as u64;
        offset = align64(offset + bytes.len());
    }
    let header_bytes = encode_header(&header);
    debug_assert_eq!(header_bytes.len(), header_len);
    let mut out = Vec::with_capacity(offset);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(header_bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(&header_bytes);
    out.extend_from_slice(&crc32fast::hash(&header_bytes).to_le_bytes());
    for (entry, (_, bytes)) in header.sections.iter().zip(sections) {
        out.resize(entry.offset as usize, 0);
        out.extend_from_slice(bytes);
    }
    out
}

fn align64(n: usize) -> usize {
    n.div_ceil(64) * 64
}

/// The header as the file stores it. Offsets are written as fixed 8-byte values so the
/// header length does not depend on them. Public for tools that rewrite engine files (the
/// loader fuzz target reseals mutated files with true checksums).
#[derive(Debug, Serialize, Deserialize)]
pub struct WireHeader {
    pub kiln_version: String,
    pub backend: String,
    pub device: DeviceFingerprint,
    pub build_flags: BuildFlags,
    /// (kind, offset, length, crc32) per section, offset and length little-endian.
    pub sections: Vec<(SectionKind, [u8; 8], [u8; 8], u32)>,
}

impl WireHeader {
    /// Decodes the postcard header bytes (between the length field and the checksum).
    pub fn decode(header_bytes: &[u8]) -> Result<Self, EngineFileError> {
        postcard::from_bytes(header_bytes).map_err(|e| EngineFileError::Corrupted(format!("header does not decode: {e}")))
    }

    pub fn into_header(self) -> EngineHeader {
        EngineHeader {
            kiln_version: self.kiln_version,
            backend: self.backend,
            device: self.device,
            build_flags: self.build_flags,
            sections: self
                .sections
                .into_iter()
                .map(|(kind, o, l, crc32)| SectionEntry { kind, offset: u64::from_le_bytes(o), len: u64::from_le_bytes(l), crc32 })
                .collect(),
        }
    }
}

fn encode_header(h: &EngineHeader) -> Vec<u8> {
    let wire = WireHeader {
        kiln_version: h.kiln_version.clone(),
        backend: h.backend.clone(),
        device: h.device.clone(),
        build_flags: h.build_flags.clone(),
        sections: h.sections.iter().map(|s| (s.kind, s.offset.to_le_bytes(), s.len.to_le_bytes(), s.crc32)).collect(),
    };
    postcard::to_stdvec(&wire).expect("serializing plain data cannot fail")
}

fn postcard_fixed_len(h: &EngineHeader) -> usize {
    encode_header(h).len()
}

fn take<'a>(bytes: &'a [u8], at: usize, len: usize, what: &str) -> Result<&'a [u8], EngineFileError> {
    at.checked_add(len)
        .and_then(|end| bytes.get(at..end))
        .ok_or_else(|| EngineFileError::Truncated(format!("{what} needs bytes {at}..{} of {}", at.saturating_add(len), bytes.len())))
}

fn read_u32(bytes: &[u8], at: usize, what: &str) -> Result<u32, EngineFileError> {
    let b = take(bytes, at, 4, what)?;
    Ok(u32::from_le_bytes(b.try_into().expect("4 bytes")))
}

/// The sections of a file, in header order, borrowing its bytes.
pub type Sections<'a> = Vec<(SectionKind, &'a [u8])>;

/// Parses and checks the header and every section's bounds and checksum; returns the
/// header and the sections' bytes in header order.
pub fn read_file(bytes: &[u8]) -> Result<(EngineHeader, Sections<'_>), EngineFileError> {
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        return if bytes.len() < MAGIC.len() && MAGIC.starts_with(bytes) {
            Err(EngineFileError::Truncated(format!("only {} bytes", bytes.len())))
        } else {
            Err(EngineFileError::BadMagic)
        };
    }
    let version = read_u32(bytes, 8, "format version")?;
    if !(OLDEST_READABLE_VERSION..=FORMAT_VERSION).contains(&version) {
        return Err(EngineFileError::FormatVersion { found: version, supported: FORMAT_VERSION });
    }
    let header_len = read_u32(bytes, 12, "header length")?;
    if header_len > MAX_HEADER_BYTES {
        return Err(EngineFileError::Corrupted(format!("header length {header_len} is implausible")));
    }
    let header_bytes = take(bytes, 16, header_len as usize, "header")?;
    let crc = read_u32(bytes, 16 + header_len as usize, "header checksum")?;
    if crc32fast::hash(header_bytes) != crc {
        return Err(EngineFileError::Corrupted("header checksum mismatch".into()));
    }
    let wire = WireHeader::decode(header_bytes)?;
    if wire.kiln_version != KILN_VERSION {
        return Err(EngineFileError::KilnVersion { found: wire.kiln_version, current: KILN_VERSION.to_string() });
    }
    let header = wire.into_header();
    let mut sections = Vec::with_capacity(header.sections.len());
    for s in &header.sections {
        let what = format!("{:?} section", s.kind);
        let (Ok(offset), Ok(len)) = (usize::try_from(s.offset), usize::try_from(s.len)) else {
            return Err(EngineFileError::Corrupted(format!("{what} bounds overflow")));
        };
        let data = take(bytes, offset, len, &what)?;
        if crc32fast::hash(data) != s.crc32 {
            return Err(EngineFileError::Corrupted(format!("{what} checksum mismatch")));
        }
        sections.push((s.kind, data));
    }
    Ok((header, sections))
}

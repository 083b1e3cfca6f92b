//! Tactics (alternative implementations of one layer), the timing cache that remembers
//! which one is fastest, and the algorithm selector that lets a user steer the choice
//! (seed §6.1, §6.3).
//!
//! Everything persisted here is hashed with FNV-1a over a canonical postcard encoding, so
//! a key or id is the same from run to run and machine to machine (never `DefaultHasher`,
//! whose output may change between Rust releases).

pub mod cache;
pub mod select;

pub use cache::{CacheEntry, CacheHeader, TimingCache, TimingCacheError};
pub use select::{
    AlgorithmChoice, AlgorithmContext, AlgorithmSelector, ProgressHandle, SelectorHandle, TacticError, TacticOptions,
    TacticPlan,
};

use crate::ir::dtype::DataType;
use crate::ir::format::TensorFormat;
use crate::ir::network::{LayerId, Network};
use crate::ir::shape::Shape;
use serde::{Deserialize, Serialize};
use std::fmt;

/// 64-bit FNV-1a: a fixed, portable hash for persisted keys and ids.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A stable tactic id: backend, readable name and a hash of the kernel's source and
/// parameters; printed `cpu/conv_im2col_gemm@9c1e04a7d3b2f110`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TacticId {
    pub backend: String,
    pub name: String,
    pub hash: u64,
}

impl TacticId {
    /// An id whose hash covers `source` (the kernel's source text and parameters).
    pub fn new(backend: &str, name: &str, source: &[u8]) -> TacticId {
        let mut bytes = Vec::with_capacity(name.len() + source.len() + 1);
        bytes.extend_from_slice(name.as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(source);
        TacticId { backend: backend.to_string(), name: name.to_string(), hash: fnv1a64(&bytes) }
    }

    /// The tactic a backend without alternatives runs every layer with.
    pub fn default_for(backend: &str) -> TacticId {
        TacticId::new(backend, "default", b"")
    }

    /// Parses `backend/name@hash` (the hash in hex).
    pub fn parse(text: &str) -> Option<TacticId> {
        let (backend, rest) = text.split_once('/')?;
        let (name, hash) = rest.rsplit_once('@')?;
        let hash = u64::from_str_radix(hash, 16).ok()?;
        (!backend.is_empty() && !name.is_empty()).then(|| TacticId { backend: backend.into(), name: name.into(), hash })
    }
}

impl fmt::Display for TacticId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}@{:016x}", self.backend, self.name, self.hash)
    }
}

/// One implementation a backend offers for a layer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TacticDesc {
    pub id: TacticId,
    /// Scratch memory the tactic needs beyond inputs and outputs.
    pub workspace_bytes: u64,
    /// Layouts it reads and writes (LINEAR for every cpu kernel).
    pub formats: Vec<TensorFormat>,
    /// Element types it computes in.
    pub dtypes: Vec<DataType>,
}

impl TacticDesc {
    /// The single tactic of a backend without alternatives.
    pub fn default_for(backend: &str) -> TacticDesc {
        TacticDesc { id: TacticId::default_for(backend), workspace_bytes: 0, formats: vec![TensorFormat::Linear], dtypes: Vec::new() }
    }
}

/// What makes two layers interchangeable for timing: kind and parameters, and the type,
/// shape and format of every input and output. Hashed deterministically.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerSignature {
    /// The layer type ("Convolution", "Fused", …), for people reading a cache.
    pub kind: String,
    pub hash: u64,
}

#[derive(Serialize)]
struct TensorSig<'a> {
    dtype: DataType,
    shape: &'a Shape,
    format: TensorFormat,
}

impl LayerSignature {
    pub fn of(network: &Network, layer: LayerId) -> LayerSignature {
        let l = network.layer(layer);
        let sig = |t: crate::ir::network::TensorId| {
            let d = network.tensor(t);
            TensorSig { dtype: d.dtype, shape: &d.shape, format: d.format }
        };
        let inputs: Vec<Option<TensorSig>> = l.inputs.iter().map(|t| t.map(sig)).collect();
        let outputs: Vec<TensorSig> = l.outputs.iter().map(|&t| sig(t)).collect();
        // Postcard encodes structs field by field in declaration order: canonical bytes.
        let bytes = postcard::to_stdvec(&(&l.kind, &inputs, &outputs)).unwrap_or_default();
        LayerSignature { kind: l.kind.type_name().to_string(), hash: fnv1a64(&bytes) }
    }
}

impl fmt::Display for LayerSignature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{:016x}", self.kind, self.hash)
    }
}

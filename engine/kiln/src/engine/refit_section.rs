//! The Refit section of a refittable engine file: the source network (structure), where
//! each of its weights lies, and which built weights a weight-stripped file left out.
//! Weights the source shares with the built network are stored once.

use super::{read_weights, WeightsEntry};
use crate::config::Optimization;
use crate::ir::dtype::DataType;
use crate::ir::layer::WeightsId;
use crate::ir::network::Network;
use crate::ir::tensor::HostTensor;
use super::refit_source::{strippable, RefitSource};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Serialize, Deserialize)]
pub(super) struct RefitSection {
    network: Network,
    optimization: Optimization,
    weights: Vec<SourceWeights>,
    /// Built weights blobs the file leaves out (their plan entries hold no bytes).
    stripped_built: Vec<u64>,
}

#[derive(Serialize, Deserialize)]
enum SourceWeights {
    /// The same blob as built weights blob #i.
    Shared(u64),
    /// Its own bytes in the weights section.
    Stored(WeightsEntry),
    /// Left out of a weight-stripped file: a refit supplies it.
    Stripped { dtype: DataType, shape: Vec<u64> },
}

/// Which built weights a file of `built` leaves out: the strippable ones when `strip`.
pub(super) fn stripped_built(built: &Network, strip: bool) -> Vec<bool> {
    built.weights().iter().map(|w| strip && strippable(w)).collect()
}

/// The section for `source`, appending the weights it does not share with `built` to
/// `weights_bytes` (through `store`).
pub(super) fn write(
    source: &RefitSource,
    built: &Network,
    stripped: &[bool],
    strip: bool,
    mut store: impl FnMut(&HostTensor) -> WeightsEntry,
) -> RefitSection {
    let shared: HashMap<*const HostTensor, usize> =
        built.weights().iter().enumerate().filter(|(i, _)| !stripped[*i]).map(|(i, w)| (Arc::as_ptr(w), i)).collect();
    let weights = source
        .network
        .weights()
        .iter()
        .enumerate()
        .map(|(i, w)| {
            if (strip && strippable(w)) || source.missing.contains(&WeightsId(i)) {
                SourceWeights::Stripped { dtype: w.dtype(), shape: w.shape().iter().map(|&d| d as u64).collect() }
            } else if let Some(&i) = shared.get(&Arc::as_ptr(w)) {
                SourceWeights::Shared(i as u64)
            } else {
                SourceWeights::Stored(store(w))
            }
        })
        .collect();
    let stripped_built = stripped.iter().enumerate().filter(|(_, &s)| s).map(|(i, _)| i as u64).collect();
    RefitSection { network: source.network.clone(), optimization: source.optimization, weights, stripped_built }
}

impl RefitSection {
    /// The built weights blobs the file left out, as a set to look each blob up in.
    pub(super) fn stripped_built_set(&self) -> std::collections::HashSet<usize> {
        self.stripped_built.iter().filter_map(|&i| usize::try_from(i).ok()).collect()
    }

    /// The source network with its weights (zeros where stripped), checked like the plan.
    pub(super) fn read(self, built: &Network, weights_bytes: &[u8]) -> Result<RefitSource, String> {
        let mut missing = Vec::new();
        let mut weights = Vec::with_capacity(self.weights.len());
        for (i, w) in self.weights.into_iter().enumerate() {
            weights.push(match w {
                SourceWeights::Shared(b) => {
                    let blob = usize::try_from(b).ok().and_then(|b| built.weights().get(b));
                    blob.ok_or_else(|| format!("source weights #{i} share missing blob #{b}"))?.as_ref().clone()
                }
                SourceWeights::Stored(entry) => read_weights(weights_bytes, &entry).map_err(|r| format!("source weights #{i}: {r}"))?,
                SourceWeights::Stripped { dtype, shape } => {
                    missing.push(WeightsId(i));
                    placeholder(dtype, &shape).map_err(|r| format!("source weights #{i}: {r}"))?
                }
            });
        }
        let mut network = self.network;
        network.check_structure()?;
        network.set_weights(weights)?;
        crate::plugin::resolve(&mut network).map_err(|e| e.to_string())?;
        super::recheck_layers(&network).map_err(|e| format!("source network: {e}"))?;
        network.restore_inferred_facts().map_err(|e| format!("source network: {e}"))?;
        Ok(RefitSource { network, optimization: self.optimization, missing })
    }
}

/// Zeros standing in for stripped weights until a refit: float types only, no larger than
/// host memory (a hostile file cannot make kiln allocate what the machine lacks).
pub(super) fn placeholder(dtype: DataType, shape: &[u64]) -> Result<HostTensor, String> {
    if !dtype.is_float() {
        return Err(format!("stripped weights must be float, not {dtype}"));
    }
    let dims: Vec<usize> = shape.iter().map(|&d| usize::try_from(d).map_err(|_| "dims overflow".to_string())).collect::<Result<_, _>>()?;
    crate::limits::check_tensor(dtype, &dims, crate::limits::host_memory_bytes())?;
    Ok(HostTensor::zeros(dtype, dims))
}

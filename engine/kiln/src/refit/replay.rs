//! A refit replays the build's network rewrites (precision, formats, folding, fusion) on
//! the source network with the new weights, so folded weights (a BatchNorm folded into a
//! convolution, fused QKV projections, casts to f16) come out exactly as a fresh build
//! would make them. Tactics are not timed again and kernels not compiled: the rewritten
//! network must be the built one, weights aside, or the refit is refused.

use super::RefitError;
use crate::backend::Backend;
use crate::engine::Engine;
use crate::ir::layer::WeightsId;
use crate::ir::network::Network;
use crate::ir::tensor::HostTensor;
use std::sync::Arc;

/// The built network's weights after the replay: the blobs whose values changed.
pub(crate) struct Replayed {
    pub changes: Vec<(WeightsId, Arc<HostTensor>)>,
}

/// Rewrites `source` as the build of `engine` did and returns the built weights that differ.
/// `changed` names the refitted weights, for the error when the structure moves.
pub(crate) fn replay(engine: &Engine, source: &Network, backend: &dyn Backend, changed: &[String], all: bool) -> Result<Replayed, RefitError> {
    let flags = engine.build_flags().builder_flags;
    let optimization = engine.refit_source().map(|s| s.optimization).unwrap_or_default();
    let fail = |reason: String| RefitError::Replay(reason);
    let (typed, _) = crate::builder::typed_network(source, flags, optimization, backend, backend).map_err(|e| fail(e.to_string()))?;
    let rebuilt =
        crate::builder::optimize_typed(&typed, flags, optimization, backend, backend).map_err(|e| fail(e.to_string()))?;
    let built = engine.network();
    if let Some(difference) = first_difference(built, &rebuilt) {
        return Err(RefitError::StructureChanged { weights: changed.to_vec(), difference });
    }
    let changes = built
        .weights()
        .iter()
        .zip(rebuilt.weights())
        .enumerate()
        .filter(|(_, (old, new))| all || (!Arc::ptr_eq(old, new) && old != new))
        .map(|(i, (_, new))| (WeightsId(i), new.clone()))
        .collect();
    Ok(Replayed { changes })
}

/// Where the rebuilt network's structure departs from the built one's (weights values
/// aside): `None` when they are the same network.
fn first_difference(built: &Network, rebuilt: &Network) -> Option<String> {
    // Weights blobs are not part of the encoding: their count, types and dims are checked here.
    if built.weights().len() != rebuilt.weights().len() {
        return Some(format!("the network has {} weights blobs, the engine {}", rebuilt.weights().len(), built.weights().len()));
    }
    for (i, (old, new)) in built.weights().iter().zip(rebuilt.weights()).enumerate() {
        if old.dtype() != new.dtype() || old.shape() != new.shape() {
            return Some(format!("weights blob #{i} is {}{:?}, the engine's {}{:?}", new.dtype(), new.shape(), old.dtype(), old.shape()));
        }
    }
    if encode(built) == encode(rebuilt) {
        return None;
    }
    // They differ: name the first layer or tensor that does.
    if built.layers().len() != rebuilt.layers().len() {
        return Some(format!("the network has {} layers, the engine {}", rebuilt.layers().len(), built.layers().len()));
    }
    if let Some((old, new)) = built.layers().iter().zip(rebuilt.layers()).find(|(old, new)| encode(*old) != encode(*new)) {
        return Some(format!("layer `{}` of the engine becomes `{}` ({})", old.name, new.name, new.kind.type_name()));
    }
    if built.tensors().len() != rebuilt.tensors().len() {
        return Some(format!("the network has {} tensors, the engine {}", rebuilt.tensors().len(), built.tensors().len()));
    }
    if let Some((old, new)) = built.tensors().iter().zip(rebuilt.tensors()).find(|(old, new)| encode(*old) != encode(*new)) {
        return Some(format!("tensor `{}` is {}{}, the engine's {}{}", new.name, new.dtype, new.shape, old.dtype, old.shape));
    }
    Some("the network's inputs, outputs or settings differ".into())
}

/// Structural equality through the engine file's own encoding (weights values are not
/// part of it), so no field can be forgotten.
fn encode<T: serde::Serialize>(value: &T) -> Vec<u8> {
    postcard::to_stdvec(value).expect("serializing plain data cannot fail")
}

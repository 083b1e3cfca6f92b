//! What a refittable engine keeps: the network as the builder was given it, whose float
//! Constant layers are the weights a refit may replace.

use crate::config::Optimization;
use crate::ir::layer::{LayerKind, WeightsId};
use crate::ir::network::{LayerId, Network};
use crate::ir::tensor::HostTensor;

/// Float weights of at least this many elements are left out of a weight-stripped engine
/// file (with every float weight of the built network this large). Smaller ones (scalars,
/// epsilons, small biases) stay: they cost nothing, and shape inference may read them.
pub const STRIP_MIN_ELEMENTS: usize = 1024;

/// Whether a weight-stripped engine file leaves `weights` out.
pub(crate) fn strippable(weights: &HostTensor) -> bool {
    weights.dtype().is_float() && weights.len() >= STRIP_MIN_ELEMENTS
}

/// The network a refittable engine was built from, and the build settings a refit replays.
#[derive(Clone, Debug)]
pub struct RefitSource {
    pub(crate) network: Network,
    pub(crate) optimization: Optimization,
    /// Weights blobs of `network` that a weight-stripped engine file left out and no refit
    /// has supplied yet (their blobs hold zeros).
    pub(crate) missing: Vec<WeightsId>,
}

/// One refittable weight: a float Constant layer of the source network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefittableWeight {
    /// The Constant layer's name: an ONNX model's initializer name.
    pub name: String,
    pub(crate) layer: LayerId,
    pub(crate) blob: WeightsId,
}

impl RefitSource {
    pub(crate) fn new(network: Network, optimization: Optimization) -> RefitSource {
        RefitSource { network, optimization, missing: Vec::new() }
    }

    /// The weights a refit may replace, in layer order: the float constants, less those a
    /// layer reads as a shape or a bound (a Resize's scales), which decide tensor shapes.
    pub fn weights(&self) -> Vec<RefittableWeight> {
        let net = &self.network;
        let mut shape_deciding = vec![false; net.tensors().len()];
        for l in net.layers() {
            for &slot in l.kind.host_slots() {
                if let Some(Some(t)) = l.inputs.get(slot) {
                    shape_deciding[t.0] = true;
                }
            }
        }
        net.layers()
            .iter()
            .enumerate()
            .filter_map(|(i, l)| match l.kind {
                LayerKind::Constant { weights }
                    if net.weights_blob(weights).is_some_and(|w| w.dtype().is_float())
                        && !l.outputs.iter().any(|t| shape_deciding[t.0]) =>
                {
                    Some(RefittableWeight { name: l.name.clone(), layer: LayerId(i), blob: weights })
                }
                _ => None,
            })
            .collect()
    }

    /// The source network (its weights are the engine's current ones).
    pub fn network(&self) -> &Network {
        &self.network
    }

    /// Whether some weights are still missing (a weight-stripped engine not yet refitted).
    pub fn is_stripped(&self) -> bool {
        !self.missing.is_empty()
    }
}

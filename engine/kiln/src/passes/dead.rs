//! Dead-layer elimination: layers no network output depends on go (Assertions stay).

use super::{Pass, PassContext, PassError};
use crate::ir::control;
use crate::ir::network::{LayerId, TensorId};
use crate::ir::network::Network;

#[derive(Clone, Copy, Debug, Default)]
pub struct DeadLayerElimination;

impl Pass for DeadLayerElimination {
    fn name(&self) -> &'static str {
        "dead-layer-elimination"
    }

    fn run(&self, network: &Network, _: &PassContext<'_>) -> Result<Option<Network>, PassError> {
        let live = live_layers(network);
        Ok((!live.iter().all(|&l| l)).then(|| network.retain_layers(&live)))
    }
}

/// Keeps only the layers that network outputs depend on (and Assertion layers, which
/// matter for their effect), renumbering tensors, layers and weights. A live loop keeps its
/// trip limits and a live conditional its condition; a loop with no live output goes.
pub fn remove_dead_layers(network: &Network) -> Network {
    let live = live_layers(network);
    if live.iter().all(|&l| l) {
        return network.clone();
    }
    network.retain_layers(&live)
}

/// Per layer, whether a network output depends on it (or it is an Assertion, or a live
/// construct needs it).
fn live_layers(network: &Network) -> Vec<bool> {
    let layers = network.layers();
    let mut live = vec![false; layers.len()];
    let mut stack: Vec<TensorId> = network.outputs().to_vec();
    for (i, l) in layers.iter().enumerate() {
        if matches!(l.kind, crate::ir::layer::LayerKind::Assertion { .. }) {
            live[i] = true;
            stack.extend(l.inputs.iter().flatten());
        }
    }
    loop {
        while let Some(t) = stack.pop() {
            if let Some((LayerId(p), _)) = network.tensor(t).producer {
                if !std::mem::replace(&mut live[p], true) {
                    stack.extend(layers[p].inputs.iter().flatten());
                }
            }
        }
        for i in control::structural_layers(network, &live) {
            live[i] = true;
            stack.extend(layers[i].inputs.iter().flatten());
        }
        if stack.is_empty() {
            break;
        }
    }
    live
}

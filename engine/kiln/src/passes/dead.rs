//! Dead-layer elimination: layers no network output depends on go (Assertions stay).

use super::{Pass, PassContext, PassError};
use crate::builder::remove_dead_layers;
use crate::ir::network::Network;

#[derive(Clone, Copy, Debug, Default)]
pub struct DeadLayerElimination;

impl Pass for DeadLayerElimination {
    fn name(&self) -> &'static str {
        "dead-layer-elimination"
    }

    fn run(&self, network: &Network, _: &PassContext<'_>) -> Result<Option<Network>, PassError> {
        let pruned = remove_dead_layers(network);
        Ok((pruned.layers().len() != network.layers().len()).then_some(pruned))
    }
}

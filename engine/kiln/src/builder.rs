//! The builder: network + configuration → engine for one backend.

use crate::backend::{Backend, BackendError};
use crate::engine::format::BuildFlags;
use crate::engine::Engine;
use crate::error::NetworkError;
use crate::ir::network::{LayerId, Network, TensorId};
use thiserror::Error;

/// Builder settings. Reduced precision, profiles and the timing cache arrive with the
/// builder issue; the fields here are what the foundation honours.
#[derive(Clone, Debug, Default)]
pub struct BuilderConfig {
    /// Free-form flags recorded in the engine (shown by `kiln inspect`).
    pub flags: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BuildError {
    #[error(transparent)]
    Network(#[from] NetworkError),
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// Builds engines for one backend.
pub struct Builder<'b> {
    backend: &'b dyn Backend,
}

impl std::fmt::Debug for Builder<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder").field("backend", &self.backend.name()).finish()
    }
}

impl<'b> Builder<'b> {
    pub fn new(backend: &'b dyn Backend) -> Builder<'b> {
        Builder { backend }
    }

    /// Validates the network, drops layers no output depends on, checks that the backend
    /// runs every remaining layer, and records the device the engine is for.
    pub fn build(&self, network: &Network, config: &BuilderConfig) -> Result<Engine, BuildError> {
        network.validate()?;
        let device = self.backend.device()?;
        let pruned = remove_dead_layers(network);
        self.backend.check_support(&pruned)?;
        Ok(Engine::new(pruned, self.backend.name().to_string(), device, BuildFlags { flags: config.flags.clone() }))
    }
}

/// Keeps only the layers that network outputs depend on (and Assertion layers, which
/// matter for their effect), renumbering tensors, layers and weights.
pub fn remove_dead_layers(network: &Network) -> Network {
    let layers = network.layers();
    let mut live = vec![false; layers.len()];
    let mut stack: Vec<TensorId> = network.outputs().to_vec();
    for (i, l) in layers.iter().enumerate() {
        if matches!(l.kind, crate::ir::layer::LayerKind::Assertion { .. }) {
            live[i] = true;
            stack.extend(l.inputs.iter().flatten());
        }
    }
    while let Some(t) = stack.pop() {
        if let Some((LayerId(p), _)) = network.tensor(t).producer {
            if !std::mem::replace(&mut live[p], true) {
                stack.extend(layers[p].inputs.iter().flatten());
            }
        }
    }
    if live.iter().all(|&l| l) {
        return network.clone();
    }
    network.retain_layers(&live)
}

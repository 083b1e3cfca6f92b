//! The process-wide plugin registry (TensorRT's getPluginRegistry()) and the resolution of
//! Plugin layers to instances through it. The plugin interface itself is part of the IR
//! ([`crate::ir::plugin`], re-exported here).

mod registry;

pub use crate::ir::plugin::*;
pub use registry::{registry, PluginRegistry};

use crate::ir::layer::LayerKind;
use crate::ir::network::Network;

/// Gives every Plugin layer of `network` that has no instance (a network read from an
/// engine file) the one this process's registry makes from its fields.
pub fn resolve(network: &mut Network) -> Result<(), PluginError> {
    for layer in network.parts_mut().layers.iter_mut() {
        if let LayerKind::Plugin(params) = &mut layer.kind {
            if params.instance.get().is_none() {
                let plugin = registry().instance(params)?;
                params.instance = PluginInstance::new(plugin);
            }
        }
    }
    Ok(())
}

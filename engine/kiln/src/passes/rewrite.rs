//! Rebuilding a network layer by layer: the one mechanism every pass uses to change it.
//!
//! A pass walks the source network in order and, per layer, keeps it, replaces it by new
//! layers, or maps its outputs onto tensors that already exist. Every layer added goes
//! through [`Network::add_layer`], so the result is re-validated and re-inferred (a folded
//! shape makes the reshapes after it static). Tensors keep their names: network inputs and
//! outputs are found by name at run time, and golden dumps stay readable.

use super::PassError;
use crate::ir::layer::LayerKind;
use crate::ir::network::{LayerId, Network, TensorId};
use crate::ir::tensor::HostTensor;
use std::sync::Arc;

pub(crate) struct Rebuild<'s> {
    pub src: &'s Network,
    pub dst: Network,
    /// Source tensor → the tensor that now carries its value.
    map: Vec<Option<TensorId>>,
}

impl<'s> Rebuild<'s> {
    pub fn new(src: &'s Network) -> Result<Rebuild<'s>, PassError> {
        let mut dst = Network::new(src.name.clone());
        dst.control_ids = src.control_ids;
        let mut map = vec![None; src.tensors().len()];
        for &t in src.inputs() {
            let d = src.tensor(t);
            let id = dst.add_input(&d.name, d.dtype, d.shape.clone())?;
            dst.set_tensor_format(id, d.format)?;
            map[t.0] = Some(id);
        }
        Ok(Rebuild { src, dst, map })
    }

    /// The tensor of the new network that carries source tensor `t`.
    pub fn get(&self, t: TensorId) -> Result<TensorId, PassError> {
        self.map[t.0].ok_or_else(|| {
            PassError::Internal(format!(
                "tensor `{}` has no value yet",
                self.src.tensor(t).name
            ))
        })
    }

    pub fn get_slots(
        &self,
        slots: &[Option<TensorId>],
    ) -> Result<Vec<Option<TensorId>>, PassError> {
        slots
            .iter()
            .map(|t| t.map(|t| self.get(t)).transpose())
            .collect()
    }

    /// Source tensor `t` is now carried by `to` (a tensor of the new network).
    pub fn alias(&mut self, t: TensorId, to: TensorId) {
        self.map[t.0] = Some(to);
    }

    /// Copies source layer `index` unchanged (apart from its inputs' new ids).
    pub fn keep(&mut self, index: usize) -> Result<LayerId, PassError> {
        let l = &self.src.layers()[index];
        let kind = match &l.kind {
            LayerKind::Constant { weights } => {
                let blob = self.src.weights().get(weights.0).cloned().ok_or_else(|| {
                    PassError::Internal(format!(
                        "layer `{}` refers to a missing weights blob",
                        l.name
                    ))
                })?;
                LayerKind::Constant {
                    weights: self.dst.add_shared_weights(blob),
                }
            }
            other => other.clone(),
        };
        let inputs = self.get_slots(&l.inputs)?;
        self.add(&l.name, kind, inputs, &l.outputs)
    }

    /// Adds a layer to the new network whose outputs carry the source tensors `carries`
    /// (and take their names).
    pub fn add(
        &mut self,
        name: &str,
        kind: LayerKind,
        inputs: Vec<Option<TensorId>>,
        carries: &[TensorId],
    ) -> Result<LayerId, PassError> {
        let id = self.dst.add_layer(name, kind, inputs)?;
        let outputs = self.dst.layer(id).outputs.clone();
        if outputs.len() != carries.len() {
            return Err(PassError::Internal(format!(
                "layer `{name}` has {} outputs, the rewrite expected {}",
                outputs.len(),
                carries.len()
            )));
        }
        for (&new, &old) in outputs.iter().zip(carries) {
            let name = self.src.tensor(old).name.clone();
            self.claim_name(new, &name)?;
            self.map[old.0] = Some(new);
        }
        Ok(id)
    }

    /// Adds a Constant layer holding `value`; returns its output.
    pub fn constant(&mut self, name: &str, value: HostTensor) -> Result<TensorId, PassError> {
        let weights = self.dst.add_shared_weights(Arc::new(value));
        let id = self
            .dst
            .add_layer(name, LayerKind::Constant { weights }, vec![])?;
        Ok(self.dst.output(id, 0))
    }

    /// Gives `t` the name `name`; a tensor of the new network already holding it (a name
    /// generated for an intermediate) is renamed out of the way.
    fn claim_name(&mut self, t: TensorId, name: &str) -> Result<(), PassError> {
        if let Some(other) = self.dst.find_tensor(name) {
            if other == t {
                return Ok(());
            }
            let moved = self.dst.unique_tensor_name(&format!("{name} (moved)"));
            self.dst.set_tensor_name(other, &moved)?;
        }
        self.dst.set_tensor_name(t, name)?;
        Ok(())
    }

    /// Marks the network outputs (with their formats) and returns the new network.
    pub fn finish(mut self) -> Result<Network, PassError> {
        for &t in self.src.outputs() {
            let new = self.get(t)?;
            let d = self.src.tensor(t);
            if self.dst.tensor(new).name != d.name {
                return Err(PassError::Internal(format!(
                    "network output `{}` lost its name in a rewrite",
                    d.name
                )));
            }
            self.dst.mark_output(new)?;
            self.dst.set_tensor_format(new, d.format)?;
        }
        Ok(self.dst)
    }
}

/// Per tensor, the (layer, slot) pairs that read it.
pub(crate) fn consumers(net: &Network) -> Vec<Vec<(usize, usize)>> {
    let mut out = vec![Vec::new(); net.tensors().len()];
    for (i, l) in net.layers().iter().enumerate() {
        for (slot, t) in l.inputs.iter().enumerate() {
            if let Some(t) = t {
                out[t.0].push((i, slot));
            }
        }
    }
    out
}

/// Whether the network has loops or conditionals. The rewriting passes leave such
/// networks alone: a rewrite must not move a layer across a loop or branch boundary, and
/// a recurrence's back edge cannot be replayed in order.
pub(crate) fn has_control_flow(net: &Network) -> bool {
    net.layers().iter().any(|l| l.kind.is_control_boundary())
}

/// The value of a tensor known at build time (constants and folded shapes).
pub(crate) fn known_value(net: &Network, t: TensorId) -> Option<&HostTensor> {
    net.tensor(t).value.as_deref()
}

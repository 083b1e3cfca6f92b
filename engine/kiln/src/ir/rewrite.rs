//! The one network-rewrite mechanism: a new network is built from the source one, layer by
//! layer in the source order, with layers kept, replaced or inserted (casts, reformats,
//! converted or folded constants) where a pass asks. Source tensors map to the tensors that
//! now carry their values; weights are shared (`Arc`) and only those still referenced are
//! carried over. The result is re-checked by shape inference before it is returned.
//!
//! Two ways to place a layer's outputs: [`Rewriter::copy_layer`] / [`Rewriter::add_layer`]
//! give them unique names and leave the mapping to the caller (the precision and I/O-format
//! passes), while [`Rewriter::keep`] / [`Rewriter::add`] map them to source tensors whose
//! names they take (the optimizer's passes, which finish with [`Rewriter::finish_as_source`]).

use super::dtype::DataType;
use super::infer::{infer_layer, Fact};
use super::layer::{LayerKind, WeightsId};
use super::network::{Layer, LayerId, Network, TensorDesc, TensorId};
use super::tensor::HostTensor;
use crate::error::NetworkError;
use std::collections::HashMap;
use std::sync::Arc;

pub(crate) struct Rewriter<'s> {
    pub src: &'s Network,
    out: Network,
    /// Source tensor → the tensor of `out` that source consumers now read.
    map: Vec<Option<TensorId>>,
    /// Source weights → the same blob in `out`, once a copied layer references it.
    weights: Vec<Option<WeightsId>>,
    /// Input slots left open because they read a tensor produced later (a recurrence's
    /// next value): (layer in `out`, slot, source tensor).
    back_edges: Vec<(LayerId, usize, TensorId)>,
}

impl<'s> Rewriter<'s> {
    /// Starts a copy holding the source's inputs (as they are), no layers.
    pub fn new(src: &'s Network) -> Rewriter<'s> {
        let mut out = Network::new(src.name.clone());
        out.control_ids = src.control_ids;
        out.strongly_typed = src.strongly_typed;
        let mut map = vec![None; src.tensors().len()];
        for &t in src.inputs() {
            let id = out.push_tensor(src.tensor(t).clone());
            out.parts_mut().inputs.push(id);
            map[t.0] = Some(id);
        }
        Rewriter { src, out, map, weights: vec![None; src.weights().len()], back_edges: Vec::new() }
    }

    pub fn out(&self) -> &Network {
        &self.out
    }

    /// The new network, for what the helpers here do not cover (adding shared weights).
    pub fn out_mut(&mut self) -> &mut Network {
        &mut self.out
    }

    pub fn mapped(&self, src: TensorId) -> Option<TensorId> {
        self.map[src.0]
    }

    /// The tensor of the new network that carries source tensor `t` (an error when no
    /// layer produced it yet: a pass visiting layers out of order).
    pub fn get(&self, t: TensorId) -> Result<TensorId, NetworkError> {
        self.map[t.0].ok_or_else(|| NetworkError::Layer {
            layer: "(rewrite)".into(),
            tensor: self.src.tensor(t).name.clone(),
            rule: "the tensor has no value yet".into(),
        })
    }

    pub fn get_slots(&self, slots: &[Option<TensorId>]) -> Result<Vec<Option<TensorId>>, NetworkError> {
        slots.iter().map(|t| t.map(|t| self.get(t)).transpose()).collect()
    }

    /// Source tensor `t` is now carried by `to` (a tensor of the new network).
    pub fn alias(&mut self, t: TensorId, to: TensorId) {
        self.map[t.0] = Some(to);
    }

    pub fn set_mapped(&mut self, src: TensorId, out: TensorId) {
        self.map[src.0] = Some(out);
    }

    /// Direct access to a tensor of the new network (boundary layout changes).
    pub fn tensor_mut(&mut self, t: TensorId) -> &mut TensorDesc {
        &mut self.out.parts_mut().tensors[t.0]
    }

    /// Renames a tensor of the new network to a unique name built from `base`.
    pub fn rename(&mut self, t: TensorId, base: &str) -> Result<(), NetworkError> {
        let name = self.out.unique_tensor_name(base);
        self.out.set_tensor_name(t, &name)
    }

    /// Copies source layer `layer`, reading `substitutes` (slot → tensor of the new network)
    /// where given and the mapped tensors elsewhere. Its outputs keep their source names
    /// and boundary settings with types and shapes inferred anew; they are not mapped.
    pub fn copy_layer(&mut self, layer: LayerId, substitutes: &HashMap<usize, TensorId>) -> Result<Vec<TensorId>, NetworkError> {
        let l = self.src.layer(layer);
        let new_id = LayerId(self.out.layers().len());
        let mut inputs = Vec::with_capacity(l.inputs.len());
        for (slot, t) in l.inputs.iter().enumerate() {
            inputs.push(match (substitutes.get(&slot), t) {
                (Some(&s), _) => Some(s),
                (None, None) => None,
                (None, Some(t)) => match self.map[t.0] {
                    Some(m) => Some(m),
                    None => {
                        self.back_edges.push((new_id, slot, *t));
                        None
                    }
                },
            });
        }
        let names: Vec<String> = l.outputs.iter().map(|&t| self.src.tensor(t).name.clone()).collect();
        let kind = self.carried_kind(&l.kind, &l.name)?;
        let outputs = self.push_layer(Layer { inputs: inputs.clone(), outputs: vec![], kind, ..l.clone() }, &names)?;
        for (&src_t, &out_t) in l.outputs.iter().zip(&outputs) {
            let s = self.src.tensor(src_t);
            let d = self.tensor_mut(out_t);
            d.format = s.format;
            d.allowed_formats = s.allowed_formats;
            d.requested_type = s.requested_type;
        }
        Ok(outputs)
    }

    /// `kind` with a Constant's weights carried into the new network.
    pub fn carried_kind(&mut self, kind: &LayerKind, layer: &str) -> Result<LayerKind, NetworkError> {
        let LayerKind::Constant { weights } = kind else { return Ok(kind.clone()) };
        if let Some(id) = self.weights.get(weights.0).copied().flatten() {
            return Ok(LayerKind::Constant { weights: id });
        }
        let blob = self.src.weights().get(weights.0).cloned().ok_or_else(|| NetworkError::Layer {
            layer: layer.into(),
            tensor: String::new(),
            rule: "refers to a missing weights blob".into(),
        })?;
        let id = self.out.add_shared_weights(blob);
        self.weights[weights.0] = Some(id);
        Ok(LayerKind::Constant { weights: id })
    }

    /// Copies source layer `index` unchanged (apart from its inputs' new ids); its outputs
    /// carry the source outputs and keep their names.
    pub fn keep(&mut self, index: usize) -> Result<LayerId, NetworkError> {
        let l = &self.src.layers()[index];
        let kind = self.carried_kind(&l.kind, &l.name)?;
        let inputs = self.get_slots(&l.inputs)?;
        let id = self.add(&l.name, kind, inputs, &l.outputs)?;
        // The same layer keeps the user's precision constraints: the Q/DQ rewrites run before
        // the precision pass reads them.
        let kept = &mut self.out.parts_mut().layers[id.0];
        kept.precision = l.precision;
        kept.output_types = l.output_types.clone();
        Ok(id)
    }

    /// Adds a layer whose outputs carry the source tensors `carries` (and take their names).
    pub fn add(&mut self, name: &str, kind: LayerKind, inputs: Vec<Option<TensorId>>, carries: &[TensorId]) -> Result<LayerId, NetworkError> {
        let id = self.out.add_layer(name, kind, inputs)?;
        let outputs = self.out.layer(id).outputs.clone();
        if outputs.len() != carries.len() {
            return Err(NetworkError::Layer {
                layer: name.into(),
                tensor: String::new(),
                rule: format!("has {} outputs, the rewrite expected {}", outputs.len(), carries.len()),
            });
        }
        for (&new, &old) in outputs.iter().zip(carries) {
            let name = self.src.tensor(old).name.clone();
            self.claim_name(new, &name)?;
            self.map[old.0] = Some(new);
        }
        Ok(id)
    }

    /// Adds a Constant layer holding `value`; returns its output.
    pub fn constant(&mut self, name: &str, value: HostTensor) -> Result<TensorId, NetworkError> {
        let weights = self.out.add_shared_weights(Arc::new(value));
        let id = self.out.add_layer(name, LayerKind::Constant { weights }, vec![])?;
        Ok(self.out.output(id, 0))
    }

    /// Gives `t` the name `name`; a tensor of the new network already holding it (a name
    /// generated for an intermediate) is renamed out of the way.
    fn claim_name(&mut self, t: TensorId, name: &str) -> Result<(), NetworkError> {
        if let Some(other) = self.out.find_tensor(name) {
            if other == t {
                return Ok(());
            }
            let moved = self.out.unique_tensor_name(&format!("{name} (moved)"));
            self.out.set_tensor_name(other, &moved)?;
        }
        self.out.set_tensor_name(t, name)
    }

    /// [`Rewriter::finish`] with the source's outputs (under their names and formats).
    pub fn finish_as_source(self) -> Result<Network, NetworkError> {
        let mut outputs = Vec::with_capacity(self.src.outputs().len());
        for &t in self.src.outputs() {
            let new = self.get(t)?;
            if self.out.tensor(new).name != self.src.tensor(t).name {
                return Err(NetworkError::Layer {
                    layer: "(rewrite)".into(),
                    tensor: self.src.tensor(t).name.clone(),
                    rule: "the network output lost its name in a rewrite".into(),
                });
            }
            outputs.push(new);
        }
        let formats: Vec<_> = self.src.outputs().iter().map(|&t| self.src.tensor(t).format).collect();
        let mut net = self.finish(outputs)?;
        for (t, format) in net.outputs().to_vec().into_iter().zip(formats) {
            net.set_tensor_format(t, format)?;
        }
        Ok(net)
    }

    /// Adds a new layer without constraints; its outputs get unique names built from
    /// `output_names`.
    pub fn add_layer(&mut self, name: &str, kind: LayerKind, inputs: Vec<Option<TensorId>>, output_names: &[String]) -> Result<Vec<TensorId>, NetworkError> {
        self.push_layer(Layer::new(name.to_string(), kind, inputs, vec![]), output_names)
    }

    /// Adds a Constant layer holding `weights`.
    pub fn add_constant(&mut self, name: &str, weights: HostTensor, output_name: &str) -> Result<TensorId, NetworkError> {
        let id = self.out.add_shared_weights(Arc::new(weights));
        Ok(self.add_layer(name, LayerKind::Constant { weights: id }, vec![], &[output_name.to_string()])?[0])
    }

    fn push_layer(&mut self, mut layer: Layer, output_names: &[String]) -> Result<Vec<TensorId>, NetworkError> {
        let layer_id = LayerId(self.out.layers().len());
        let facts: Vec<Option<Fact>> = layer.inputs.iter().map(|t| t.map(|t| self.out.fact(t))).collect();
        let inferred = infer_layer(&layer.kind, &facts, &|w| self.out.weights_blob(w))
            .map_err(|e| NetworkError::Layer { layer: layer.name.clone(), tensor: String::new(), rule: e.rule })?;
        let mut outputs = Vec::with_capacity(inferred.len());
        for (slot, o) in inferred.into_iter().enumerate() {
            let base = output_names.get(slot).cloned().unwrap_or_else(|| format!("{} output {slot}", layer.name));
            let name = self.out.unique_tensor_name(&base);
            outputs.push(self.out.push_tensor(TensorDesc {
                name,
                dtype: o.dtype,
                shape: o.shape,
                producer: Some((layer_id, slot)),
                format: Default::default(),
                allowed_formats: Default::default(),
                requested_type: None,
                value: o.value.map(Arc::new),
                symbolic: o.symbolic,
            }));
        }
        layer.outputs = outputs.clone();
        self.out.parts_mut().layers.push(layer);
        Ok(outputs)
    }

    /// Closes back edges, sets the outputs (tensors of the new network) and re-checks
    /// every layer's types and ranks.
    pub fn finish(mut self, outputs: Vec<TensorId>) -> Result<Network, NetworkError> {
        for (layer, slot, src_t) in std::mem::take(&mut self.back_edges) {
            let t = self.map[src_t.0].ok_or_else(|| NetworkError::Layer {
                layer: self.out.layer(layer).name.clone(),
                tensor: self.src.tensor(src_t).name.clone(),
                rule: "reads a tensor the rewrite never produced".into(),
            })?;
            self.out.parts_mut().layers[layer.0].inputs[slot] = Some(t);
        }
        *self.out.parts_mut().outputs = outputs;
        recheck(&self.out)?;
        Ok(self.out)
    }
}

/// Every layer must infer the types and ranks its outputs carry.
fn recheck(net: &Network) -> Result<(), NetworkError> {
    for l in net.layers() {
        let facts: Vec<Option<Fact>> = l.inputs.iter().map(|t| t.map(|t| net.fact(t))).collect();
        let out = infer_layer(&l.kind, &facts, &|w| net.weights_blob(w))
            .map_err(|e| NetworkError::Layer { layer: l.name.clone(), tensor: String::new(), rule: e.rule })?;
        for (o, &t) in out.iter().zip(&l.outputs) {
            let d = net.tensor(t);
            if o.dtype != d.dtype || o.shape.rank() != d.shape.rank() {
                return Err(NetworkError::Layer {
                    layer: l.name.clone(),
                    tensor: d.name.clone(),
                    rule: format!("after rewriting, the layer gives {}{} for a tensor stored as {}{}", o.dtype, o.shape, d.dtype, d.shape),
                });
            }
        }
    }
    Ok(())
}

/// Converts float weights to another float type (f32, f16, bf16, f64); `None` for other
/// types.
pub(crate) fn convert_float(w: &HostTensor, to: DataType) -> Option<HostTensor> {
    use super::tensor::TensorData as T;
    if !w.dtype().is_float() || !to.is_float() {
        return None;
    }
    let values = w.to_f64_vec();
    let data = match to {
        DataType::F32 => T::F32(values.iter().map(|&v| v as f32).collect()),
        DataType::F16 => T::F16(values.iter().map(|&v| crate::ir::narrow::f16_from_f64(v)).collect()),
        DataType::BF16 => T::BF16(values.iter().map(|&v| crate::ir::narrow::bf16_from_f64(v)).collect()),
        DataType::F64 => T::F64(values),
        _ => return None,
    };
    HostTensor::new(w.shape().to_vec(), data).ok()
}

//! The network: tensors, layers, inputs and outputs, with eager validation.

use super::dtype::DataType;
use super::format::{FormatMask, TensorFormat};
use super::infer::{infer_layer, Fact, InferError};
use super::layer::{LayerKind, WeightsId};
use super::shape::{Dim, Shape, SymInt};
use super::tensor::HostTensor;
use crate::error::NetworkError;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TensorId(pub usize);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LayerId(pub usize);

/// A tensor of the network as known at build time.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TensorDesc {
    pub name: String,
    pub dtype: DataType,
    pub shape: Shape,
    /// The layer and output slot that produce it; `None` for network inputs.
    pub producer: Option<(LayerId, usize)>,
    /// Memory layout at the network boundary (inputs and outputs only); chosen by the
    /// builder from `allowed_formats`.
    pub format: TensorFormat,
    /// Layouts the user allows at the network boundary (seed §6.6); LINEAR by default.
    #[serde(default)]
    pub allowed_formats: FormatMask,
    /// For a network output: the type the user receives, when it differs from the type
    /// its layer produces (the builder inserts a Cast, seed §6.5.2).
    #[serde(default)]
    pub requested_type: Option<DataType>,
    /// The value, where it is known at build time (constants, shapes of fixed tensors).
    #[serde(skip)]
    pub value: Option<Arc<HostTensor>>,
    /// A small integer tensor's elements where its value is only partly known (shapes of
    /// tensors with dynamic dims).
    #[serde(skip)]
    pub symbolic: Option<Vec<SymInt>>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Layer {
    pub name: String,
    pub kind: LayerKind,
    /// Input slots; `None` is an absent optional input.
    pub inputs: Vec<Option<TensorId>>,
    pub outputs: Vec<TensorId>,
    /// Precision constraint (seed §6.5.2), see [`Network::set_layer_precision`].
    #[serde(default)]
    pub precision: Option<DataType>,
    /// Output type constraints by output slot; shorter than `outputs` when the last ones
    /// are unset.
    #[serde(default)]
    pub output_types: Vec<Option<DataType>>,
}

impl Layer {
    /// A layer without precision constraints.
    pub fn new(name: String, kind: LayerKind, inputs: Vec<Option<TensorId>>, outputs: Vec<TensorId>) -> Layer {
        Layer { name, kind, inputs, outputs, precision: None, output_types: Vec::new() }
    }
}

/// Mutable access to a network's tables (see [`Network::parts_mut`]). Tensors are added
/// with [`Network::push_tensor`] and renamed with [`Network::set_tensor_name`] only, which
/// keep the name index up to date.
pub(crate) struct NetworkParts<'n> {
    pub tensors: &'n mut [TensorDesc],
    pub layers: &'n mut Vec<Layer>,
    pub inputs: &'n mut Vec<TensorId>,
    pub outputs: &'n mut Vec<TensorId>,
}

/// A network definition: the IR every frontend produces and every backend consumes.
///
/// Layers are stored in a valid execution order: a layer's inputs exist before it is added.
/// Every `add_*` call validates at once, so an invalid network cannot be built; the error
/// names the layer, the tensor and the rule.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Network {
    pub name: String,
    tensors: Vec<TensorDesc>,
    layers: Vec<Layer>,
    inputs: Vec<TensorId>,
    outputs: Vec<TensorId>,
    /// Weights blobs referenced by Constant layers (stored in their own engine section).
    #[serde(skip)]
    weights: Vec<Arc<HostTensor>>,
    /// How many loop and conditional ids `add_loop` / `add_if_conditional` handed out.
    pub(crate) control_ids: (usize, usize),
    /// Strongly typed (TensorRT 10's network-creation flag): types follow the inputs and
    /// explicit casts only; the builder refuses reduced-precision flags and constraints.
    #[serde(default)]
    pub(crate) strongly_typed: bool,
    /// Tensor ids by name, so that finding a name is not a scan of every tensor.
    #[serde(skip)]
    names: NameIndex,
    /// Per-tensor dynamic ranges `(min, max)` for INT8 ([`Network::set_dynamic_range`]): the
    /// builder's INT8 step reads them from the network as given; engines do not store them.
    #[serde(skip)]
    dynamic_ranges: std::collections::BTreeMap<usize, (f32, f32)>,
}

/// Tensor names → ids, built on the first lookup (a deserialized or cloned network starts
/// without one) and kept up to date by [`Network::push_tensor`] and
/// [`Network::set_tensor_name`]. Where names repeat (a network read from a file is checked
/// by [`Network::validate`] later), a name maps to its first tensor, as a scan in id order
/// would find it.
#[derive(Default)]
struct NameIndex(OnceLock<Names>);

struct Names {
    ids: HashMap<String, TensorId>,
    /// Whether some name belongs to more than one tensor: renaming one of those must
    /// rebuild the index to find the next holder.
    repeated: bool,
}

impl NameIndex {
    fn get(&self, tensors: &[TensorDesc], name: &str) -> Option<TensorId> {
        self.0.get_or_init(|| Self::build(tensors)).ids.get(name).copied()
    }

    fn build(tensors: &[TensorDesc]) -> Names {
        let mut names = Names { ids: HashMap::with_capacity(tensors.len()), repeated: false };
        for (i, t) in tensors.iter().enumerate() {
            names.add(&t.name, TensorId(i));
        }
        names
    }

    /// Records tensor `id` (the newest) under `name`.
    fn added(&mut self, name: &str, id: TensorId) {
        if let Some(names) = self.0.get_mut() {
            names.add(name, id);
        }
    }

    /// Tensor `id` is renamed from `old` to `new` (a name no other tensor has).
    fn renamed(&mut self, old: &str, new: &str, id: TensorId) {
        let Some(names) = self.0.get_mut() else { return };
        if names.repeated {
            self.0 = OnceLock::new();
            return;
        }
        if names.ids.get(old) == Some(&id) {
            names.ids.remove(old);
        }
        names.ids.insert(new.to_string(), id);
    }
}

impl Names {
    fn add(&mut self, name: &str, id: TensorId) {
        match self.ids.entry(name.to_string()) {
            std::collections::hash_map::Entry::Occupied(_) => self.repeated = true,
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(id);
            }
        }
    }
}

/// A copy rebuilds its index when it first needs one (most copies are read, not searched).
impl Clone for NameIndex {
    fn clone(&self) -> NameIndex {
        NameIndex::default()
    }
}

impl std::fmt::Debug for NameIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NameIndex")
    }
}

impl Network {
    pub fn new(name: impl Into<String>) -> Network {
        Network { name: name.into(), ..Network::default() }
    }

    pub fn tensors(&self) -> &[TensorDesc] {
        &self.tensors
    }

    pub fn tensor(&self, id: TensorId) -> &TensorDesc {
        &self.tensors[id.0]
    }

    pub fn layers(&self) -> &[Layer] {
        &self.layers
    }

    pub fn layer(&self, id: LayerId) -> &Layer {
        &self.layers[id.0]
    }

    pub fn inputs(&self) -> &[TensorId] {
        &self.inputs
    }

    pub fn outputs(&self) -> &[TensorId] {
        &self.outputs
    }

    pub fn weights(&self) -> &[Arc<HostTensor>] {
        &self.weights
    }

    pub fn weights_blob(&self, id: WeightsId) -> Option<&HostTensor> {
        self.weights.get(id.0).map(|w| w.as_ref())
    }

    /// Output `index` of `layer`.
    ///
    /// # Panics
    /// If the layer has no such output: a programming error in the caller, since layer
    /// arity is fixed by its kind.
    pub fn output(&self, layer: LayerId, index: usize) -> TensorId {
        self.layers[layer.0].outputs[index]
    }

    pub fn find_tensor(&self, name: &str) -> Option<TensorId> {
        self.names.get(&self.tensors, name)
    }

    /// Adds a network input with a unique name.
    pub fn add_input(
        &mut self,
        name: &str,
        dtype: DataType,
        shape: impl Into<Shape>,
    ) -> Result<TensorId, NetworkError> {
        if self.find_tensor(name).is_some() {
            return Err(NetworkError::DuplicateTensorName { name: name.to_string() });
        }
        let id = self.push_tensor(TensorDesc {
            name: name.to_string(),
            dtype,
            shape: shape.into(),
            producer: None,
            format: TensorFormat::Linear,
            allowed_formats: FormatMask::default(),
            requested_type: None,
            value: None,
            symbolic: None,
        });
        self.inputs.push(id);
        Ok(id)
    }

    /// Sets the range a tensor's values take, for INT8 (seed §6.5.3, `ITensor::setDynamicRange`):
    /// INT8 keeps `[-a, a]` with `a = max(|min|, |max|)`. A range set here wins over calibration.
    pub fn set_dynamic_range(&mut self, tensor: TensorId, min: f32, max: f32) -> Result<(), NetworkError> {
        self.check_tensor(tensor)?;
        if !(min.is_finite() && max.is_finite() && min <= max) {
            return Err(NetworkError::Layer {
                layer: "(dynamic range)".into(),
                tensor: self.tensors[tensor.0].name.clone(),
                rule: format!("the range [{min}, {max}] is not finite and ordered"),
            });
        }
        self.dynamic_ranges.insert(tensor.0, (min, max));
        Ok(())
    }

    /// The range set by [`Network::set_dynamic_range`], if any.
    pub fn dynamic_range(&self, tensor: TensorId) -> Option<(f32, f32)> {
        self.dynamic_ranges.get(&tensor.0).copied()
    }

    /// Marks a tensor as a network output. A network input cannot be an output directly.
    pub fn mark_output(&mut self, tensor: TensorId) -> Result<(), NetworkError> {
        self.check_tensor(tensor)?;
        if self.outputs.contains(&tensor) {
            return Ok(());
        }
        self.outputs.push(tensor);
        Ok(())
    }

    /// Renames a tensor; names stay unique.
    pub fn set_tensor_name(&mut self, tensor: TensorId, name: &str) -> Result<(), NetworkError> {
        self.check_tensor(tensor)?;
        if let Some(other) = self.find_tensor(name) {
            if other != tensor {
                return Err(NetworkError::DuplicateTensorName { name: name.to_string() });
            }
        }
        let old = std::mem::replace(&mut self.tensors[tensor.0].name, name.to_string());
        self.names.renamed(&old, name, tensor);
        Ok(())
    }

    pub fn set_layer_name(&mut self, layer: LayerId, name: &str) {
        self.layers[layer.0].name = name.to_string();
    }

    /// Sets the boundary format of a network input or output.
    pub fn set_tensor_format(&mut self, tensor: TensorId, format: TensorFormat) -> Result<(), NetworkError> {
        self.check_tensor(tensor)?;
        self.tensors[tensor.0].format = format;
        Ok(())
    }

    /// Registers a weights blob (for Constant layers).
    pub fn add_weights(&mut self, weights: HostTensor) -> WeightsId {
        self.weights.push(Arc::new(weights));
        WeightsId(self.weights.len() - 1)
    }

    /// Registers a weights blob shared with another network (the optimizer's rewrites).
    pub(crate) fn add_shared_weights(&mut self, weights: Arc<HostTensor>) -> WeightsId {
        self.weights.push(weights);
        WeightsId(self.weights.len() - 1)
    }

    /// Adds a layer of any kind after validating it; the general form behind every
    /// `add_*` helper. `name` may be empty: a unique name is generated.
    pub fn add_layer(
        &mut self,
        name: &str,
        kind: LayerKind,
        inputs: Vec<Option<TensorId>>,
    ) -> Result<LayerId, NetworkError> {
        let layer_name = if name.is_empty() {
            format!("({}) [{}]", kind.type_name(), self.layers.len())
        } else {
            name.to_string()
        };
        for t in inputs.iter().flatten() {
            self.check_tensor(*t).map_err(|_| NetworkError::Layer {
                layer: layer_name.clone(),
                tensor: format!("#{}", t.0),
                rule: "input tensor does not belong to this network".into(),
            })?;
        }
        if let LayerKind::Constant { weights } = &kind {
            if weights.0 >= self.weights.len() {
                return Err(NetworkError::Layer {
                    layer: layer_name,
                    tensor: String::new(),
                    rule: format!("weights blob #{} does not exist", weights.0),
                });
            }
        }
        let facts: Vec<Option<Fact>> = inputs
            .iter()
            .map(|t| t.map(|t| self.fact(t)))
            .collect();
        let out = infer_layer(&kind, &facts, &|w| self.weights_blob(w)).map_err(|e: InferError| {
            NetworkError::Layer {
                layer: layer_name.clone(),
                tensor: e
                    .input
                    .and_then(|i| inputs.get(i).copied().flatten())
                    .map(|t| self.tensors[t.0].name.clone())
                    .unwrap_or_default(),
                rule: e.rule,
            }
        })?;
        let layer_id = LayerId(self.layers.len());
        let mut outputs = Vec::with_capacity(out.len());
        for (i, o) in out.into_iter().enumerate() {
            let suffix = if i == 0 { "output".to_string() } else { format!("output {i}") };
            let id = self.push_tensor(TensorDesc {
                name: self.unique_tensor_name(&format!("{layer_name} {suffix}")),
                dtype: o.dtype,
                shape: o.shape,
                producer: Some((layer_id, i)),
                format: TensorFormat::Linear,
                allowed_formats: FormatMask::default(),
                requested_type: None,
                value: o.value.map(Arc::new),
                symbolic: o.symbolic,
            });
            outputs.push(id);
        }
        self.layers.push(Layer::new(layer_name, kind, inputs, outputs));
        Ok(layer_id)
    }

    /// Replaces a layer's input slots (TensorRT's `setInput`) and re-validates it. Outputs
    /// already read keep the type and shape their readers saw: the new inputs may only
    /// leave them as they are or make them more precise.
    pub(crate) fn set_layer_inputs(&mut self, layer: LayerId, inputs: Vec<Option<TensorId>>) -> Result<(), NetworkError> {
        let l = &self.layers[layer.0];
        let name = l.name.clone();
        for t in inputs.iter().flatten() {
            self.check_tensor(*t).map_err(|_| NetworkError::Layer {
                layer: name.clone(),
                tensor: format!("#{}", t.0),
                rule: "input tensor does not belong to this network".into(),
            })?;
        }
        let facts: Vec<Option<Fact>> = inputs.iter().map(|t| t.map(|t| self.fact(t))).collect();
        let out = infer_layer(&l.kind, &facts, &|w| self.weights_blob(w)).map_err(|e| NetworkError::Layer {
            layer: name.clone(),
            tensor: e.input.and_then(|i| inputs.get(i).copied().flatten()).map(|t| self.tensors[t.0].name.clone()).unwrap_or_default(),
            rule: e.rule,
        })?;
        if out.len() != l.outputs.len() {
            return Err(NetworkError::Layer { layer: name, tensor: String::new(), rule: "the new inputs change the number of outputs".into() });
        }
        let consumed = |t: TensorId| self.layers.iter().any(|o| o.inputs.contains(&Some(t))) || self.outputs.contains(&t);
        let mut updates = Vec::new();
        for (&t, o) in l.outputs.iter().zip(out) {
            let d = &self.tensors[t.0];
            let keeps = o.dtype == d.dtype
                && o.shape.rank() == d.shape.rank()
                && d.shape.dims().iter().zip(o.shape.dims()).all(|(old, new)| *old == Dim::Unknown || old.same_as(new));
            if consumed(t) && !keeps {
                return Err(NetworkError::Layer {
                    layer: name,
                    tensor: d.name.clone(),
                    rule: format!("the new inputs change the output from {}{} to {}{}, which layers already read", d.dtype, d.shape, o.dtype, o.shape),
                });
            }
            updates.push((t, o));
        }
        for (t, o) in updates {
            let d = &mut self.tensors[t.0];
            d.dtype = o.dtype;
            d.shape = o.shape;
            d.value = o.value.map(Arc::new);
            d.symbolic = o.symbolic;
        }
        self.layers[layer.0].inputs = inputs;
        Ok(())
    }

    /// Infers every layer's outputs again, in order, restoring what a file does not hold:
    /// the known values and symbolic elements of shape arithmetic, which the optimizer
    /// folds on (a loaded refit source must rewrite as the original did). Constants keep
    /// their values, shared with the weights table.
    pub(crate) fn restore_inferred_facts(&mut self) -> Result<(), NetworkError> {
        for i in 0..self.layers.len() {
            if !matches!(self.layers[i].kind, LayerKind::Constant { .. }) {
                self.reinfer_layer(LayerId(i), self.layers[i].kind.clone())?;
            }
        }
        Ok(())
    }

    /// Re-validates a layer under a new kind and updates its outputs in place.
    pub(crate) fn reinfer_layer(&mut self, layer: LayerId, kind: LayerKind) -> Result<(), NetworkError> {
        let l = &self.layers[layer.0];
        let facts: Vec<Option<Fact>> = l.inputs.iter().map(|t| t.map(|t| self.fact(t))).collect();
        let out = infer_layer(&kind, &facts, &|w| self.weights_blob(w)).map_err(|e| NetworkError::Layer {
            layer: l.name.clone(),
            tensor: String::new(),
            rule: e.rule,
        })?;
        if out.len() != l.outputs.len() {
            return Err(NetworkError::Layer {
                layer: l.name.clone(),
                tensor: String::new(),
                rule: "the new parameters change the number of outputs".into(),
            });
        }
        for (t, o) in l.outputs.clone().into_iter().zip(out) {
            let d = &mut self.tensors[t.0];
            d.dtype = o.dtype;
            d.shape = o.shape;
            d.value = o.value.map(Arc::new);
            d.symbolic = o.symbolic;
        }
        self.layers[layer.0].kind = kind;
        Ok(())
    }

    /// The raw tables, for whole-network rewrites ([`crate::ir::rewrite`]), which re-check
    /// every layer before handing the result on.
    pub(crate) fn parts_mut(&mut self) -> NetworkParts<'_> {
        NetworkParts {
            tensors: &mut self.tensors,
            layers: &mut self.layers,
            inputs: &mut self.inputs,
            outputs: &mut self.outputs,
        }
    }

    /// The build-time fact (type, shape, known value) of a tensor.
    pub fn fact(&self, t: TensorId) -> Fact<'_> {
        let d = &self.tensors[t.0];
        Fact { dtype: d.dtype, shape: &d.shape, value: d.value.as_deref(), symbolic: d.symbolic.as_deref() }
    }

    pub(crate) fn push_tensor(&mut self, desc: TensorDesc) -> TensorId {
        let id = TensorId(self.tensors.len());
        self.names.added(&desc.name, id);
        self.tensors.push(desc);
        id
    }

    pub(crate) fn unique_tensor_name(&self, base: &str) -> String {
        if self.find_tensor(base).is_none() {
            return base.to_string();
        }
        (1..).map(|i| format!("{base} ({i})")).find(|n| self.find_tensor(n).is_none()).expect("unbounded")
    }

    fn check_tensor(&self, t: TensorId) -> Result<(), NetworkError> {
        if t.0 < self.tensors.len() {
            Ok(())
        } else {
            Err(NetworkError::UnknownTensor { id: t.0 })
        }
    }

    /// Checks the whole network: at least one output, every output produced by a layer,
    /// names unique.
    pub fn validate(&self) -> Result<(), NetworkError> {
        if self.outputs.is_empty() {
            return Err(NetworkError::NoOutputs);
        }
        let mut names = std::collections::HashSet::new();
        for t in &self.tensors {
            if !names.insert(t.name.as_str()) {
                return Err(NetworkError::DuplicateTensorName { name: t.name.clone() });
            }
        }
        Ok(())
    }

    /// A copy holding only the layers marked in `keep` (which must be closed under
    /// "inputs of kept layers"), every network input, and the weights still referenced.
    pub(crate) fn retain_layers(&self, keep: &[bool]) -> Network {
        let mut out = Network::new(self.name.clone());
        out.control_ids = self.control_ids;
        out.strongly_typed = self.strongly_typed;
        let mut tensor_map: Vec<Option<TensorId>> = vec![None; self.tensors.len()];
        let mut weights_map: Vec<Option<WeightsId>> = vec![None; self.weights.len()];
        // Numbered up front: a recurrence's next value is produced after the recurrence.
        let mut next_id = self.inputs.len();
        for (_, l) in self.layers.iter().enumerate().filter(|(i, _)| keep[*i]) {
            for &t in &l.outputs {
                tensor_map[t.0] = Some(TensorId(next_id));
                next_id += 1;
            }
        }
        for &t in &self.inputs {
            let id = out.push_tensor(self.tensors[t.0].clone());
            out.inputs.push(id);
            tensor_map[t.0] = Some(id);
        }
        for (_, l) in self.layers.iter().enumerate().filter(|(i, _)| keep[*i]) {
            let mut kind = l.kind.clone();
            if let LayerKind::Constant { weights } = &mut kind {
                let new = *weights_map[weights.0].get_or_insert_with(|| {
                    out.weights.push(self.weights[weights.0].clone());
                    WeightsId(out.weights.len() - 1)
                });
                *weights = new;
            }
            let layer_id = LayerId(out.layers.len());
            let inputs = l.inputs.iter().map(|t| t.map(|t| tensor_map[t.0].expect("kept layers read kept tensors"))).collect();
            let outputs = l
                .outputs
                .iter()
                .enumerate()
                .map(|(slot, &t)| {
                    let mut desc = self.tensors[t.0].clone();
                    desc.producer = Some((layer_id, slot));
                    let id = out.push_tensor(desc);
                    debug_assert_eq!(tensor_map[t.0], Some(id));
                    id
                })
                .collect();
            out.layers.push(Layer { name: l.name.clone(), kind, inputs, outputs, ..l.clone() });
        }
        out.outputs = self.outputs.iter().map(|t| tensor_map[t.0].expect("outputs are live")).collect();
        out
    }

    /// Restores the weights table after deserializing a plan (engine loading).
    pub(crate) fn set_weights(&mut self, weights: Vec<HostTensor>) -> Result<(), String> {
        self.weights = weights.into_iter().map(Arc::new).collect();
        for (i, l) in self.layers.iter().enumerate() {
            if let LayerKind::Constant { weights } = l.kind {
                if weights.0 >= self.weights.len() {
                    return Err(format!("layer #{i} refers to missing weights blob #{}", weights.0));
                }
            }
        }
        for t in &mut self.tensors {
            if let Some((lid, _)) = t.producer {
                if let Some(LayerKind::Constant { weights }) = self.layers.get(lid.0).map(|l| &l.kind) {
                    t.value = Some(self.weights[weights.0].clone());
                }
            }
        }
        Ok(())
    }

    /// Replaces weights blobs in place (a refit): each new blob must have the old one's type
    /// and dims, so shapes and kernels stay valid; the Constant layers' known values follow.
    pub fn replace_weights(&mut self, changes: &[(WeightsId, Arc<HostTensor>)]) -> Result<(), String> {
        for (id, new) in changes {
            let old = self.weights.get(id.0).ok_or_else(|| format!("weights blob #{} does not exist", id.0))?;
            if old.dtype() != new.dtype() || old.shape() != new.shape() {
                return Err(format!(
                    "weights blob #{} is {}{:?}; its replacement is {}{:?}",
                    id.0,
                    old.dtype(),
                    old.shape(),
                    new.dtype(),
                    new.shape()
                ));
            }
        }
        for (id, new) in changes {
            self.weights[id.0] = new.clone();
        }
        for l in &self.layers {
            if let (LayerKind::Constant { weights }, Some(&out)) = (&l.kind, l.outputs.first()) {
                if changes.iter().any(|(id, _)| id == weights) {
                    self.tensors[out.0].value = Some(self.weights[weights.0].clone());
                }
            }
        }
        Ok(())
    }

    /// Checks the structural invariants a deserialized plan must hold, so that a hostile
    /// file cannot make later stages index out of bounds.
    pub(crate) fn check_structure(&self) -> Result<(), String> {
        let nt = self.tensors.len();
        for (i, l) in self.layers.iter().enumerate() {
            for t in l.inputs.iter().flatten() {
                if t.0 >= nt {
                    return Err(format!("layer #{i} `{}` reads missing tensor #{}", l.name, t.0));
                }
                if let Some((p, _)) = self.tensors[t.0].producer {
                    // A recurrence's next value (input 1) is the one legal back edge.
                    let back_edge = matches!(l.kind, LayerKind::Recurrence { .. }) && l.inputs.get(1) == Some(&Some(*t));
                    if p.0 >= i && !back_edge {
                        return Err(format!("layer #{i} `{}` reads a tensor produced later", l.name));
                    }
                }
            }
            for (slot, t) in l.outputs.iter().enumerate() {
                if t.0 >= nt || self.tensors[t.0].producer != Some((LayerId(i), slot)) {
                    return Err(format!("layer #{i} `{}` has an inconsistent output #{slot}", l.name));
                }
            }
        }
        for t in self.inputs.iter().chain(&self.outputs) {
            if t.0 >= nt {
                return Err(format!("network I/O refers to missing tensor #{}", t.0));
            }
        }
        for t in &self.tensors {
            if let Some((p, slot)) = t.producer {
                if self.layers.get(p.0).and_then(|l| l.outputs.get(slot)).is_none() {
                    return Err(format!("tensor `{}` names a missing producer", t.name));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(net: &Network, name: &str) -> TensorDesc {
        TensorDesc { name: name.to_string(), ..net.tensor(TensorId(0)).clone() }
    }

    #[test]
    fn names_are_found_after_renames_copies_and_repeats() {
        let mut net = Network::new("names");
        let x = net.add_input("x", DataType::F32, &[2usize][..]).expect("input");
        let copy = net.add_identity(x).expect("identity");
        let y = net.output(copy, 0);
        assert_eq!(net.find_tensor("x"), Some(x));
        net.set_tensor_name(y, "y").expect("free name");
        assert_eq!((net.find_tensor("y"), net.find_tensor(&net.tensor(x).name)), (Some(y), Some(x)));
        assert!(net.set_tensor_name(y, "x").is_err(), "names stay unique");

        // Two tensors sharing a name (added before or after the index is built): the first
        // is found, then the other once the first is renamed.
        for index_first in [false, true] {
            let mut copied = net.clone();
            if index_first {
                assert_eq!(copied.find_tensor("x"), Some(x));
            }
            let twin = copied.push_tensor(desc(&copied, "y"));
            assert_eq!(copied.find_tensor("y"), Some(y));
            copied.set_tensor_name(y, "z").expect("free name");
            assert_eq!((copied.find_tensor("y"), copied.find_tensor("z")), (Some(twin), Some(y)));
        }
        assert_eq!(net.find_tensor("z"), None, "the original keeps its names");
    }
}

//! Refitting engines with new weights without rebuilding them (seed §6.2), and
//! weight-stripped engines, which run only once refitted.
//!
//! An engine built with [`crate::BuilderFlag::Refit`] keeps the network it was built from
//! ([`RefitSource`]). A [`Refitter`] collects new values for that network's float weights,
//! by name or by layer and role, and a refit replays the build's rewrites on the network
//! with the new weights (`replay.rs`): the refitted engine computes what an engine built
//! from the new weights computes, folded and fused weights included, with the tactics and
//! kernels it has.
//!
//! ```no_run
//! use kiln::refit::{RefitError, Refitter, WeightsRole};
//! use kiln::{Backend, Engine, HostTensor};
//!
//! /// Gives `engine` (built with the REFIT flag) a new first-convolution filter and fc bias.
//! fn update(engine: &mut Engine, backend: &dyn Backend, filter: HostTensor, bias: HostTensor) -> Result<(), RefitError> {
//!     let mut refitter = Refitter::new(engine)?;
//!     refitter.set_weights("conv1", WeightsRole::Kernel, filter)?;
//!     refitter.set_named_weights("fc.bias", bias)?;
//!     assert!(refitter.get_missing_weights().is_empty());
//!     refitter.refit_engine(engine, backend)?;
//!     Ok(())
//! }
//! //! ```

mod replay;

pub use crate::engine::refit_source::{RefitSource, RefittableWeight, STRIP_MIN_ELEMENTS};

use crate::backend::{Backend, Executable};
use crate::engine::Engine;
use crate::error::BackendError;
use crate::ir::layer::{LayerKind, WeightsId};
use crate::ir::tensor::HostTensor;
use crate::runtime::PreparedEngine;
use std::collections::BTreeMap;
use std::sync::Arc;
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RefitError {
    #[error("the engine was built without the REFIT builder flag: it keeps no weights to refit (build it with --flag refit)")]
    NotRefittable,
    #[error("`{0}` is not a refittable weight of this engine (the float constants of the network it was built from; `kiln inspect` lists them)")]
    UnknownWeights(String),
    #[error("layer `{0}` is not a layer of the network this engine was built from")]
    UnknownLayer(String),
    #[error("layer `{layer}` ({kind}) has no {role} weights")]
    NoSuchRole { layer: String, kind: String, role: String },
    #[error("the {role} of layer `{layer}` is computed by layer `{producer}`, not a weight: refit the weights it is computed from")]
    NotAWeight { layer: String, role: String, producer: String },
    #[error("`{0}` names more than one constant of the network: refit them by layer and role")]
    AmbiguousName(String),
    #[error("weights `{name}` are {expected}; the new ones are {actual}")]
    Mismatch { name: String, expected: String, actual: String },
    #[error("weights are missing: {} (a weight-stripped engine needs all of them)", .0.join(", "))]
    Missing(Vec<String>),
    #[error("this refitter was made for another engine (its weights differ): make one with Refitter::new for this engine")]
    OtherEngine,
    #[error("the engine is in use: drop its execution contexts (and finish their enqueued work) before refitting it")]
    InUse,
    #[error("the new values of {} change the built network ({difference}): these weights decide the engine's structure and cannot be refitted; rebuild instead", .weights.join(", "))]
    StructureChanged { weights: Vec<String>, difference: String },
    #[error("replaying the build on the new weights fails: {0}")]
    Replay(String),
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// Where a weight sits in a layer (TensorRT's `WeightsRole`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WeightsRole {
    /// A convolution's or deconvolution's filter (input 1).
    Kernel,
    /// A convolution's or deconvolution's bias (input 2).
    Bias,
    /// A normalization's scale (input 1).
    Scale,
    /// A normalization's shift (input 2).
    Shift,
    /// A Constant layer's value.
    Constant,
}

impl WeightsRole {
    pub const ALL: [WeightsRole; 5] =
        [WeightsRole::Kernel, WeightsRole::Bias, WeightsRole::Scale, WeightsRole::Shift, WeightsRole::Constant];

    pub fn name(self) -> &'static str {
        match self {
            WeightsRole::Kernel => "kernel",
            WeightsRole::Bias => "bias",
            WeightsRole::Scale => "scale",
            WeightsRole::Shift => "shift",
            WeightsRole::Constant => "constant",
        }
    }

    /// The input slot that holds this role in a layer of `kind`, if the kind has it.
    fn slot(self, kind: &LayerKind) -> Option<usize> {
        use WeightsRole as R;
        match (kind, self) {
            (LayerKind::Convolution(_) | LayerKind::Deconvolution(_), R::Kernel) => Some(1),
            (LayerKind::Convolution(_) | LayerKind::Deconvolution(_), R::Bias) => Some(2),
            (LayerKind::Normalization { .. } | LayerKind::RmsNormalization { .. }, R::Scale) => Some(1),
            (LayerKind::Normalization { .. }, R::Shift) => Some(2),
            _ => None,
        }
    }
}

impl std::fmt::Display for WeightsRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// New weights for a refittable engine (TensorRT's `IRefitter`).
#[derive(Debug)]
pub struct Refitter {
    weights: Vec<RefittableWeight>,
    /// The engine's current value of each weight (dtype and dims a new one must match).
    current: Vec<Arc<HostTensor>>,
    /// Indices into `weights` that a weight-stripped engine lacks.
    stripped: Vec<usize>,
    /// New values by index into `weights`.
    pending: BTreeMap<usize, Arc<HostTensor>>,
    source: crate::ir::network::Network,
}

impl Refitter {
    /// A refitter for `engine`, which must have been built with the REFIT flag.
    pub fn new(engine: &Engine) -> Result<Refitter, RefitError> {
        let source = engine.refit_source().ok_or(RefitError::NotRefittable)?;
        let weights = source.weights();
        let net = source.network();
        let current = weights.iter().map(|w| net.weights()[w.blob.0].clone()).collect();
        let stripped = (0..weights.len()).filter(|&i| source.missing.contains(&weights[i].blob)).collect();
        Ok(Refitter { weights, current, stripped, pending: BTreeMap::new(), source: net.clone() })
    }

    /// Sets the weights named `name` (an ONNX initializer's name; the Constant layer's name
    /// for a network built through the API).
    pub fn set_named_weights(&mut self, name: &str, weights: HostTensor) -> Result<(), RefitError> {
        let mut found = self.weights.iter().enumerate().filter(|(_, w)| w.name == name).map(|(i, _)| i);
        let index = found.next().ok_or_else(|| RefitError::UnknownWeights(name.to_string()))?;
        if found.next().is_some() {
            return Err(RefitError::AmbiguousName(name.to_string()));
        }
        self.set(index, weights)
    }

    /// Sets every refittable weight that `network` (the model imported again, e.g. from a
    /// new checkpoint's ONNX file) has a float constant of the same name for; returns how
    /// many. Weights it lacks keep their values (or stay missing).
    pub fn set_weights_from_network(&mut self, network: &crate::ir::network::Network) -> Result<usize, RefitError> {
        let mut by_name: std::collections::HashMap<&str, &HostTensor> = std::collections::HashMap::new();
        for l in network.layers() {
            if let LayerKind::Constant { weights } = l.kind {
                if let Some(w) = network.weights_blob(weights).filter(|w| w.dtype().is_float()) {
                    by_name.entry(l.name.as_str()).or_insert(w);
                }
            }
        }
        let mut set = 0;
        for index in 0..self.weights.len() {
            if let Some(w) = by_name.get(self.weights[index].name.as_str()) {
                self.set(index, (*w).clone())?;
                set += 1;
            }
        }
        Ok(set)
    }

    /// Sets the `role` weights of layer `layer` (a layer of the network the engine was built
    /// from): a convolution's kernel or bias, a normalization's scale or shift, a Constant
    /// layer's value.
    pub fn set_weights(&mut self, layer: &str, role: WeightsRole, weights: HostTensor) -> Result<(), RefitError> {
        let index = self.index_of(layer, role)?;
        self.set(index, weights)
    }

    /// The current value of the weights named `name`: the pending new one where set, else
    /// the engine's (zeros for a stripped weight not yet set).
    pub fn get_named_weights(&self, name: &str) -> Option<&HostTensor> {
        let index = self.weights.iter().position(|w| w.name == name)?;
        Some(self.pending.get(&index).unwrap_or(&self.current[index]).as_ref())
    }

    /// The names of every refittable weight, in network order.
    pub fn get_all_weights(&self) -> Vec<String> {
        self.weights.iter().map(|w| w.name.clone()).collect()
    }

    /// Every (layer, role) pair that holds a refittable weight: each weight as its Constant
    /// layer's value, and in the kernel, bias, scale and shift slots that read it directly.
    pub fn get_all(&self) -> Vec<(String, WeightsRole)> {
        self.pairs((0..self.weights.len()).collect())
    }

    /// The weights that must still be set before [`Refitter::refit_engine`]: those a
    /// weight-stripped engine lacks and no call has set. Setting exactly these makes the
    /// list empty (an engine with its weights needs none: a refit keeps what is not set).
    pub fn get_missing_weights(&self) -> Vec<String> {
        self.missing().into_iter().map(|i| self.weights[i].name.clone()).collect()
    }

    /// [`Refitter::get_missing_weights`] as (layer, role) pairs.
    pub fn get_missing(&self) -> Vec<(String, WeightsRole)> {
        self.pairs(self.missing())
    }

    /// Refits a host engine (an engine file's contents): its weights become what a build
    /// from the new weights would make. `backend` is the engine's backend: the refit
    /// replays the build's rewrites on it.
    pub fn refit_engine(&mut self, engine: &mut Engine, backend: &dyn Backend) -> Result<usize, RefitError> {
        let (source, replayed) = self.replay(engine, backend)?;
        engine.apply_refit(source, &replayed.changes).map_err(RefitError::Replay)?;
        self.finish(engine);
        Ok(replayed.changes.len())
    }

    /// Refits a prepared engine in place: its executable's device weights are overwritten
    /// (no kernel is compiled, no tactic timed). Refused while execution contexts of the
    /// engine exist. Returns how many weights blobs of the built network changed.
    pub fn refit_prepared(&mut self, prepared: &mut Arc<PreparedEngine>, backend: &dyn Backend) -> Result<usize, RefitError> {
        let prepared = Arc::get_mut(prepared).ok_or(RefitError::InUse)?;
        let (source, replayed) = self.replay(prepared.engine(), backend)?;
        let (engine, executable): (&mut Engine, &mut dyn Executable) = prepared.parts_mut();
        executable.refit(&replayed.changes)?;
        engine.apply_refit(source, &replayed.changes).map_err(RefitError::Replay)?;
        self.finish(engine);
        Ok(replayed.changes.len())
    }

    fn replay(&self, engine: &Engine, backend: &dyn Backend) -> Result<(crate::ir::network::Network, replay::Replayed), RefitError> {
        let start = std::time::Instant::now();
        let result = self.replay_inner(engine, backend);
        match &result {
            Ok((_, replayed)) => tracing::info!(
                target: "kiln::refit",
                "refit: {} of {} weights set, {} weights blobs of the engine changed (replay on `{}`: {:.1} ms)",
                self.pending.len(),
                self.weights.len(),
                replayed.changes.len(),
                backend.name(),
                start.elapsed().as_secs_f64() * 1e3
            ),
            Err(e) => tracing::warn!(target: "kiln::refit", "refit refused: {e}"),
        }
        result
    }

    fn replay_inner(&self, engine: &Engine, backend: &dyn Backend) -> Result<(crate::ir::network::Network, replay::Replayed), RefitError> {
        let missing = self.get_missing_weights();
        if !missing.is_empty() {
            return Err(RefitError::Missing(missing));
        }
        // The engine's own source, as it is now (another refitter may have refitted it since
        // this one was made); its weights must be the ones this refitter was made for.
        let current = engine.refit_source().ok_or(RefitError::NotRefittable)?;
        if current.weights() != self.weights {
            return Err(RefitError::OtherEngine);
        }
        let mut source = current.network.clone();
        let changes: Vec<(WeightsId, Arc<HostTensor>)> =
            self.pending.iter().map(|(&i, w)| (self.weights[i].blob, w.clone())).collect();
        source.replace_weights(&changes).map_err(RefitError::Replay)?;
        let names: Vec<String> = self.pending.keys().map(|&i| self.weights[i].name.clone()).collect();
        let stripped = engine.refit_source().is_some_and(RefitSource::is_stripped);
        let replayed = replay::replay(engine, &source, backend, &names, stripped)?;
        Ok((source, replayed))
    }

    /// After a refit the engine's weights are the current ones and nothing is pending.
    fn finish(&mut self, engine: &Engine) {
        if let Ok(fresh) = Refitter::new(engine) {
            *self = fresh;
        }
    }

    fn set(&mut self, index: usize, weights: HostTensor) -> Result<(), RefitError> {
        let current = &self.current[index];
        if current.dtype() != weights.dtype() || current.shape() != weights.shape() {
            return Err(RefitError::Mismatch {
                name: self.weights[index].name.clone(),
                expected: format!("{}{:?}", current.dtype(), current.shape()),
                actual: format!("{}{:?}", weights.dtype(), weights.shape()),
            });
        }
        self.pending.insert(index, Arc::new(weights));
        Ok(())
    }

    fn missing(&self) -> Vec<usize> {
        self.stripped.iter().copied().filter(|i| !self.pending.contains_key(i)).collect()
    }

    /// The weight in `role` of source layer `layer`.
    fn index_of(&self, layer: &str, role: WeightsRole) -> Result<usize, RefitError> {
        let net = &self.source;
        let (id, l) = net
            .layers()
            .iter()
            .enumerate()
            .find(|(_, l)| l.name == layer)
            .ok_or_else(|| RefitError::UnknownLayer(layer.to_string()))?;
        let constant = if role == WeightsRole::Constant && matches!(l.kind, LayerKind::Constant { .. }) {
            id
        } else {
            let no_role =
                || RefitError::NoSuchRole { layer: layer.to_string(), kind: l.kind.type_name().to_string(), role: role.to_string() };
            let slot = role.slot(&l.kind).ok_or_else(no_role)?;
            let tensor = l.inputs.get(slot).copied().flatten().ok_or_else(no_role)?;
            let (producer, _) = net.tensor(tensor).producer.ok_or_else(|| RefitError::NotAWeight {
                layer: layer.to_string(),
                role: role.to_string(),
                producer: format!("network input `{}`", net.tensor(tensor).name),
            })?;
            producer.0
        };
        self.weights.iter().position(|w| w.layer.0 == constant).ok_or_else(|| RefitError::NotAWeight {
            layer: layer.to_string(),
            role: role.to_string(),
            producer: net.layers()[constant].name.clone(),
        })
    }

    fn pairs(&self, indices: Vec<usize>) -> Vec<(String, WeightsRole)> {
        let net = &self.source;
        let mut pairs = Vec::new();
        for i in indices {
            let w = &self.weights[i];
            pairs.push((w.name.clone(), WeightsRole::Constant));
            let Some(&out) = net.layers()[w.layer.0].outputs.first() else { continue };
            for l in net.layers() {
                for role in WeightsRole::ALL {
                    if role.slot(&l.kind).and_then(|s| l.inputs.get(s).copied().flatten()) == Some(out) {
                        pairs.push((l.name.clone(), role));
                    }
                }
            }
        }
        pairs
    }
}

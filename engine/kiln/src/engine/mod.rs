//! Engines: a built network for one backend and device, serializable to an engine file.

pub mod format;
pub(crate) mod refit_source;
mod refit_section;

use crate::device::DeviceFingerprint;
use crate::ir::control::ControlFlow;
use crate::ir::dtype::DataType;
use crate::ir::infer::{infer_layer, Fact};
use crate::ir::network::Network;
use crate::ir::tensor::{HostTensor, TensorData};
use crate::memory_plan::{plan_profiles, MemoryPlan};
use crate::profile::{validate_profiles, OptimizationProfile};
use refit_source::RefitSource;
use crate::tactics::TacticId;
use format::{BuildFlags, EngineFileError, EngineHeader, SectionKind};
use crate::KILN_VERSION;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// A built engine: the optimized network plus what it was built for.
#[derive(Clone, Debug)]
pub struct Engine {
    network: Network,
    /// The network's loops and conditionals, lowered by the builder; checked against the
    /// layers on load.
    control: ControlFlow,
    backend: String,
    device: DeviceFingerprint,
    build_flags: BuildFlags,
    /// Optimization profiles; empty when every input is fixed (or none was given).
    profiles: Vec<OptimizationProfile>,
    /// The activation arena, one plan per profile (one plan when there is no profile);
    /// recomputed from the plan on load, never trusted from the file.
    memory_plans: Vec<MemoryPlan>,
    /// Per layer, the name of the backend kernel that runs it (the inspector's tactic).
    kernels: Vec<String>,
    /// Per layer, the tactic the builder chose (empty when none was chosen).
    tactics: Vec<Option<TacticId>>,
    /// Per layer, the candidates the builder timed and their times in nanoseconds (empty
    /// when it recorded none).
    tactic_times: Vec<Vec<(TacticId, u64)>>,
    /// What a refit needs (engines built with the REFIT flag).
    refit: Option<RefitSource>,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EngineLoadError {
    #[error(transparent)]
    File(#[from] EngineFileError),
    #[error("engine was built for backend `{engine}`, not `{requested}`")]
    BackendMismatch { engine: String, requested: String },
    #[error("engine was built for {what} {engine}, but this device has {device}")]
    DeviceMismatch { what: String, engine: String, device: String },
    #[error("engine plan is invalid: {0}")]
    InvalidPlan(String),
    #[error("the engine needs plugins that are not loaded: {} (load their libraries with --plugins or KILN_PLUGIN_PATH)", .0.join(", "))]
    MissingPlugins(Vec<String>),
}

/// Where one weights blob lies in the weights section.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct WeightsEntry {
    dtype: DataType,
    shape: Vec<u64>,
    offset: u64,
    len: u64,
}

#[derive(Serialize, Deserialize)]
struct PlanSection {
    network: Network,
    control: ControlFlow,
    weights: Vec<WeightsEntry>,
    profiles: Vec<OptimizationProfile>,
    kernels: Vec<String>,
    tactics: Vec<Option<TacticId>>,
    tactic_times: Vec<Vec<(TacticId, u64)>>,
}

/// The plugins a network's layers use, each once, in key order.
pub fn plugin_keys(network: &Network) -> Vec<crate::plugin::PluginKey> {
    let keys: std::collections::BTreeSet<_> = network
        .layers()
        .iter()
        .filter_map(|l| match &l.kind {
            crate::ir::layer::LayerKind::Plugin(p) => Some(crate::plugin::PluginKey::of(p)),
            _ => None,
        })
        .collect();
    keys.into_iter().collect()
}

impl Engine {
    /// The plugins this engine needs loaded to run (`namespace::name@version`).
    pub fn plugins(&self) -> Vec<crate::plugin::PluginKey> {
        plugin_keys(&self.network)
    }

    /// An engine without profiles or memory plans yet: every caller goes on with
    /// [`Engine::with_profiles`], which plans the arena (once).
    pub(crate) fn new(
        network: Network,
        control: ControlFlow,
        backend: String,
        device: DeviceFingerprint,
        build_flags: BuildFlags,
    ) -> Engine {
        let (profiles, memory_plans, kernels, tactics) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        Engine {
            network,
            control,
            backend,
            device,
            build_flags,
            profiles,
            memory_plans,
            kernels,
            tactics,
            tactic_times: Vec::new(),
            refit: None,
        }
    }

    /// Keeps the source network of a refittable build.
    pub(crate) fn with_refit_source(mut self, refit: Option<RefitSource>) -> Engine {
        self.refit = refit;
        self
    }

    /// The network the engine was built from, when it was built with the REFIT flag.
    pub fn refit_source(&self) -> Option<&RefitSource> {
        self.refit.as_ref()
    }

    /// Whether the engine lacks its weights (a weight-stripped file not yet refitted): it
    /// cannot run until a [`crate::refit::Refitter`] supplies them.
    pub fn is_weight_stripped(&self) -> bool {
        self.refit.as_ref().is_some_and(RefitSource::is_stripped)
    }

    /// Takes a refit's outcome: the source network with the new weights and the built
    /// weights blobs that changed.
    pub(crate) fn apply_refit(
        &mut self,
        source: Network,
        changes: &[(crate::ir::layer::WeightsId, std::sync::Arc<HostTensor>)],
    ) -> Result<(), String> {
        let refit = self.refit.as_mut().ok_or("the engine is not refittable")?;
        self.network.replace_weights(changes)?;
        refit.network = source;
        refit.missing.clear();
        // The refitted engine holds its weights: its file keeps them.
        self.build_flags.builder_flags.clear(crate::BuilderFlag::StripWeights);
        Ok(())
    }

    /// Most bytes one tensor may take when this engine runs (recorded from
    /// [`crate::BuilderConfig::max_memory_bytes`]; `None`: what the machine has). A runner
    /// may change it before creating an execution context.
    pub fn set_max_memory_bytes(&mut self, bytes: Option<u64>) {
        self.control.max_memory_bytes = bytes;
    }

    /// The lowered loops and conditionals every backend runs (one block of every layer when
    /// the network has none).
    pub fn control_flow(&self) -> &ControlFlow {
        &self.control
    }

    /// Attaches validated optimization profiles and plans the arena for each.
    pub(crate) fn with_profiles(mut self, profiles: Vec<OptimizationProfile>) -> Result<Engine, String> {
        validate_profiles(&self.network, &profiles).map_err(|e| e.to_string())?;
        self.memory_plans = plan_profiles(&self.network, &self.control, &profiles)
            .map_err(|f| format!("shape inference at a profile's max shapes fails at layer `{}`: {}", f.layer, f.rule))?;
        self.profiles = profiles;
        Ok(self)
    }

    /// The optimization profiles, in the order the builder config listed them.
    pub fn profiles(&self) -> &[OptimizationProfile] {
        &self.profiles
    }

    pub fn num_optimization_profiles(&self) -> usize {
        self.profiles.len()
    }

    /// The activation arena of each profile (a single plan when the engine has none).
    pub fn memory_plans(&self) -> &[MemoryPlan] {
        &self.memory_plans
    }

    /// Device memory the activations need: the largest arena over the profiles. Tensors
    /// whose size no profile bounds are not included (see [`MemoryPlan::unplanned`]).
    pub fn peak_activation_bytes(&self) -> u64 {
        self.memory_plans.iter().map(|p| p.peak_bytes).max().unwrap_or(0)
    }

    /// Records the kernel that runs each layer (one name per layer).
    pub(crate) fn with_kernels(mut self, kernels: Vec<String>) -> Engine {
        debug_assert_eq!(kernels.len(), self.network.layers().len());
        self.kernels = kernels;
        self
    }

    /// Records the tactic chosen for each layer (one entry per layer).
    pub(crate) fn with_tactics(mut self, tactics: Vec<Option<TacticId>>) -> Engine {
        debug_assert_eq!(tactics.len(), self.network.layers().len());
        self.tactics = tactics;
        self
    }

    /// Per layer, the tactic the builder chose; empty when the engine records none.
    pub fn tactics(&self) -> &[Option<TacticId>] {
        &self.tactics
    }

    /// What runs layer `index`, for people: the chosen tactic's name, or the backend's kernel
    /// name where the backend has a single "default" tactic (or none was recorded).
    pub fn tactic_name(&self, index: usize) -> String {
        match self.tactics.get(index).cloned().flatten() {
            Some(t) if t.name != "default" => t.name,
            _ => self.kernel_name(index).unwrap_or("").to_string(),
        }
    }

    /// The chosen tactic's id hash for layer `index` (TensorRT's tactic value); 0 where none
    /// was recorded.
    pub fn tactic_value(&self, index: usize) -> u64 {
        self.tactics.get(index).and_then(Option::as_ref).map_or(0, |t| t.hash)
    }

    /// Records the candidates timed for each layer (one entry per layer).
    pub(crate) fn with_tactic_times(mut self, times: Vec<Vec<(TacticId, u64)>>) -> Engine {
        debug_assert_eq!(times.len(), self.network.layers().len());
        self.tactic_times = times;
        self
    }

    /// The candidates the builder timed for layer `index`, with their times in nanoseconds
    /// (empty for a layer with one candidate, or an engine that records none).
    pub fn tactic_times(&self, index: usize) -> &[(TacticId, u64)] {
        self.tactic_times.get(index).map_or(&[], Vec::as_slice)
    }

    /// The name of the backend kernel that runs layer `index`, when the builder recorded it.
    pub fn kernel_name(&self, index: usize) -> Option<&str> {
        self.kernels.get(index).map(String::as_str)
    }

    pub fn network(&self) -> &Network {
        &self.network
    }

    pub fn backend(&self) -> &str {
        &self.backend
    }

    pub fn device(&self) -> &DeviceFingerprint {
        &self.device
    }

    pub fn build_flags(&self) -> &BuildFlags {
        &self.build_flags
    }

    /// How the engine's f32 arithmetic may be computed (its TF32 builder flag).
    pub fn math(&self) -> crate::backend::MathMode {
        self.build_flags.builder_flags.math_mode()
    }

    /// Total bytes of weights the engine holds.
    pub fn weights_bytes(&self) -> usize {
        self.network.weights().iter().map(|w| w.size_bytes()).sum()
    }

    /// The engine file image. An engine built with STRIP_WEIGHTS (and REFIT) leaves out its
    /// large float weights, and so does one whose weights are still missing.
    pub fn serialize(&self) -> Vec<u8> {
        let strip = self.refit.is_some()
            && (self.build_flags.builder_flags.contains(crate::BuilderFlag::StripWeights) || self.is_weight_stripped());
        let stripped = refit_section::stripped_built(&self.network, strip);
        let mut weights_bytes = Vec::new();
        let mut store = |w: &HostTensor| {
            let offset = weights_bytes.len().div_ceil(64) * 64;
            weights_bytes.resize(offset, 0);
            let bytes = w.data().to_le_bytes();
            weights_bytes.extend_from_slice(&bytes);
            WeightsEntry { dtype: w.dtype(), shape: w.shape().iter().map(|&d| d as u64).collect(), offset: offset as u64, len: bytes.len() as u64 }
        };
        let mut index = Vec::with_capacity(self.network.weights().len());
        for (w, &left_out) in self.network.weights().iter().zip(&stripped) {
            index.push(if left_out {
                WeightsEntry { dtype: w.dtype(), shape: w.shape().iter().map(|&d| d as u64).collect(), offset: 0, len: 0 }
            } else {
                store(w)
            });
        }
        let refit = self.refit.as_ref().map(|source| {
            let section = refit_section::write(source, &self.network, &stripped, strip, &mut store);
            postcard::to_stdvec(&section).expect("serializing plain data cannot fail")
        });
        let plan = PlanSection {
            network: self.network.clone(),
            control: self.control.clone(),
            weights: index,
            profiles: self.profiles.clone(),
            kernels: self.kernels.clone(),
            tactics: self.tactics.clone(),
            tactic_times: self.tactic_times.clone(),
        };
        let plan_bytes = postcard::to_stdvec(&plan).expect("serializing plain data cannot fail");
        let header = EngineHeader {
            kiln_version: KILN_VERSION.to_string(),
            backend: self.backend.clone(),
            device: self.device.clone(),
            build_flags: self.build_flags.clone(),
            sections: vec![],
        };
        let mut sections = vec![(SectionKind::Plan, plan_bytes), (SectionKind::Weights, weights_bytes)];
        sections.extend(refit.map(|bytes| (SectionKind::Refit, bytes)));
        format::write_file(header, &sections)
    }

    /// Loads an engine file image, checking format, version, checksums and the plan's
    /// consistency. Device compatibility is checked separately by [`Engine::check_device`].
    pub fn deserialize(bytes: &[u8]) -> Result<Engine, EngineLoadError> {
        let (header, sections) = format::read_file(bytes)?;
        let section = |kind: SectionKind| {
            let mut found = sections.iter().filter(|(k, _)| *k == kind);
            match (found.next(), found.next()) {
                (Some((_, b)), None) => Ok(*b),
                (None, _) => Err(EngineLoadError::InvalidPlan(format!("the {kind:?} section is missing"))),
                (Some(_), Some(_)) => Err(EngineLoadError::InvalidPlan(format!("the {kind:?} section appears twice"))),
            }
        };
        let plan: PlanSection = postcard::from_bytes(section(SectionKind::Plan)?)
            .map_err(|e| EngineLoadError::InvalidPlan(format!("plan does not decode: {e}")))?;
        let weights_bytes = section(SectionKind::Weights)?;
        let refit: Option<refit_section::RefitSection> = match sections.iter().filter(|(k, _)| *k == SectionKind::Refit).count() {
            0 => None,
            1 => Some(
                postcard::from_bytes(section(SectionKind::Refit)?)
                    .map_err(|e| EngineLoadError::InvalidPlan(format!("the Refit section does not decode: {e}")))?,
            ),
            _ => return Err(EngineLoadError::InvalidPlan("the Refit section appears twice".into())),
        };
        let stripped = refit.as_ref().map(refit_section::RefitSection::stripped_built_set).unwrap_or_default();
        let weights = plan
            .weights
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let w = if stripped.contains(&i) { refit_section::placeholder(e.dtype, &e.shape) } else { read_weights(weights_bytes, e) };
                w.map_err(|r| EngineLoadError::InvalidPlan(format!("weights #{i}: {r}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut network = plan.network;
        network.check_structure().map_err(EngineLoadError::InvalidPlan)?;
        network.set_weights(weights).map_err(EngineLoadError::InvalidPlan)?;
        let missing = crate::plugin::registry().missing(&plugin_keys(&network));
        if !missing.is_empty() {
            return Err(EngineLoadError::MissingPlugins(missing));
        }
        crate::plugin::resolve(&mut network).map_err(|e| EngineLoadError::InvalidPlan(e.to_string()))?;
        recheck_plan(&network, &plan.control).map_err(EngineLoadError::InvalidPlan)?;
        if !plan.kernels.is_empty() && plan.kernels.len() != network.layers().len() {
            return Err(EngineLoadError::InvalidPlan(format!(
                "{} kernel names for {} layers",
                plan.kernels.len(),
                network.layers().len()
            )));
        }
        if !plan.tactics.is_empty() && plan.tactics.len() != network.layers().len() {
            return Err(EngineLoadError::InvalidPlan(format!(
                "{} tactics for {} layers",
                plan.tactics.len(),
                network.layers().len()
            )));
        }
        if !plan.tactic_times.is_empty() && plan.tactic_times.len() != network.layers().len() {
            return Err(EngineLoadError::InvalidPlan(format!(
                "{} tactic timings for {} layers",
                plan.tactic_times.len(),
                network.layers().len()
            )));
        }
        let refit = refit
            .map(|r| r.read(&network, weights_bytes))
            .transpose()
            .map_err(|e| EngineLoadError::InvalidPlan(format!("refit data: {e}")))?;
        let engine = Engine::new(network, plan.control, header.backend, header.device, header.build_flags)
            .with_refit_source(refit)
            .with_profiles(plan.profiles)
            .map_err(EngineLoadError::InvalidPlan)?;
        Ok(Engine { kernels: plan.kernels, tactics: plan.tactics, tactic_times: plan.tactic_times, ..engine })
    }

    /// Refuses a device whose backend or compute capability differs from the engine's;
    /// returns warnings for differences that only affect performance (seed §6.7).
    pub fn check_device(&self, device: &DeviceFingerprint) -> Result<Vec<String>, EngineLoadError> {
        if device.backend != self.backend {
            return Err(EngineLoadError::BackendMismatch { engine: self.backend.clone(), requested: device.backend.clone() });
        }
        if device.compute_capability != self.device.compute_capability {
            return Err(EngineLoadError::DeviceMismatch {
                what: "compute capability".into(),
                engine: self.device.compute_capability.clone(),
                device: device.compute_capability.clone(),
            });
        }
        Ok(self.device.soft_differences(device))
    }
}

fn read_weights(section: &[u8], e: &WeightsEntry) -> Result<HostTensor, String> {
    // Strings are length-prefixed: their count is checked against the shape after parsing.
    let volume = e
        .shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .and_then(|v| v.checked_mul(e.dtype.size_bytes().unwrap_or(0) as u64))
        .ok_or("shape volume overflows")?;
    if e.dtype.size_bytes().is_some() && volume != e.len {
        return Err(format!("{} bytes do not match shape {:?} of {}", e.len, e.shape, e.dtype));
    }
    let end = e.offset.checked_add(e.len).ok_or("bounds overflow")?;
    let bytes = usize::try_from(e.offset)
        .ok()
        .zip(usize::try_from(end).ok())
        .and_then(|(a, b)| section.get(a..b))
        .ok_or_else(|| format!("bytes {}..{end} lie outside the weights section ({} bytes)", e.offset, section.len()))?;
    let data = TensorData::from_le_bytes(e.dtype, bytes).ok_or("malformed element bytes")?;
    let shape = e.shape.iter().map(|&d| d as usize).collect();
    HostTensor::new(shape, data).map_err(|e| e.to_string())
}

/// Re-runs inference over a loaded plan: every layer must validate and reproduce the
/// stored output types and ranks, so backends can trust layer parameters; the stored
/// control-flow regions must be the ones the layers define.
fn recheck_plan(network: &Network, stored: &ControlFlow) -> Result<(), String> {
    recheck_layers(network)?;
    let mut lowered = crate::ir::control::lower(network, stored.max_trip_count).map_err(|e| e.to_string())?;
    lowered.max_memory_bytes = stored.max_memory_bytes;
    if *stored != lowered {
        return Err("the stored loop and conditional regions do not match the layers".into());
    }
    Ok(())
}

fn recheck_layers(network: &Network) -> Result<(), String> {
    for l in network.layers() {
        let facts: Vec<Option<Fact>> = l.inputs.iter().map(|t| t.map(|t| network.fact(t))).collect();
        let out = infer_layer(&l.kind, &facts, &|w| network.weights_blob(w))
            .map_err(|e| format!("layer `{}`: {}", l.name, e.rule))?;
        if out.len() != l.outputs.len() {
            return Err(format!("layer `{}` has {} outputs, its kind gives {}", l.name, l.outputs.len(), out.len()));
        }
        for (o, &t) in out.iter().zip(&l.outputs) {
            let d = network.tensor(t);
            if o.dtype != d.dtype || o.shape.rank() != d.shape.rank() {
                return Err(format!("tensor `{}` is stored as {}{} but its layer gives {}{}", d.name, d.dtype, d.shape, o.dtype, o.shape));
            }
        }
    }
    Ok(())
}

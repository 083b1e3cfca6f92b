//! Choosing one tactic per layer: the backend offers candidates, the algorithm selector
//! filters them (seed §6.3), the timing cache supplies known times and the backend times
//! the rest (warm-up, median of repetitions).

use super::cache::{current_header, CacheEntry, TimingCache, TimingCacheError};
use super::{LayerSignature, TacticDesc, TacticId};
use crate::backend::{Backend, BackendError, DeviceFingerprint};
use crate::ir::dtype::DataType;
use crate::ir::network::{LayerId, Network};
use crate::ir::shape::Shape;
use std::fmt;
use std::sync::{Arc, Mutex};
use thiserror::Error;

/// What the selector sees of one (possibly fused) layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlgorithmContext {
    pub layer: String,
    /// The layer type; "Fused" for a fused layer (its anchor is in `anchor`).
    pub kind: String,
    /// The anchor's type for a fused layer.
    pub anchor: Option<String>,
    pub inputs: Vec<(DataType, Shape)>,
    pub outputs: Vec<(DataType, Shape)>,
}

/// One candidate as the selector sees it; `time_ns` is known when the cache has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlgorithmChoice {
    pub tactic: TacticDesc,
    pub time_ns: Option<u64>,
}

/// Steers tactic choice (seed §6.3).
pub trait AlgorithmSelector: Send + Sync {
    /// Indices into `choices` the builder may use; empty means "any" unless
    /// [`TacticOptions::reject_empty_algorithms`] is set.
    fn select_algorithms(&self, context: &AlgorithmContext, choices: &[AlgorithmChoice]) -> Vec<usize>;
    /// Called once after the build with the final choice of every layer, in layer order.
    fn report_algorithms(&self, choices: &[(AlgorithmContext, TacticId)]);
}

/// A shared selector in a [`crate::BuilderConfig`].
#[derive(Clone)]
pub struct SelectorHandle(pub Arc<dyn AlgorithmSelector>);

impl fmt::Debug for SelectorHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AlgorithmSelector")
    }
}

/// Told, before each layer's tactic is chosen, how many layers are done, how many there
/// are and the layer's name (a progress bar, say); once more at the end.
#[derive(Clone)]
pub struct ProgressHandle(pub Arc<ProgressFn>);

/// `(layers done, layers in all, name of the next layer)`.
pub type ProgressFn = dyn Fn(usize, usize, &str) + Send + Sync;

impl fmt::Debug for ProgressHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Progress")
    }
}

/// Tactic-selection settings of a build.
#[derive(Clone, Debug, Default)]
pub struct TacticOptions {
    /// The attached cache: read, grown on misses, readable after the build.
    pub timing_cache: Option<Arc<Mutex<TimingCache>>>,
    /// Use the cache even if it was made on another device or kiln version (warning).
    pub ignore_mismatch: bool,
    /// DISABLE_TIMING_CACHE: use a temporary local cache, leave the attached one alone.
    pub disable_timing_cache: bool,
    /// ERROR_ON_TIMING_CACHE_MISS: a layer the cache lacks fails the build.
    pub error_on_timing_cache_miss: bool,
    /// REJECT_EMPTY_ALGORITHMS: a selector returning nothing fails the build.
    pub reject_empty_algorithms: bool,
    pub selector: Option<SelectorHandle>,
    /// Timed repetitions per candidate (after one warm-up); 0 means 5.
    pub repetitions: usize,
    pub progress: Option<ProgressHandle>,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TacticError {
    #[error(transparent)]
    Cache(#[from] TimingCacheError),
    #[error("layer `{layer}` ({signature}) is not in the timing cache and ERROR_ON_TIMING_CACHE_MISS is set")]
    CacheMiss { layer: String, signature: String },
    #[error("the algorithm selector chose no tactic for layer `{layer}` and REJECT_EMPTY_ALGORITHMS is set")]
    EmptySelection { layer: String },
    #[error("the algorithm selector returned index {index} for layer `{layer}`, which has {count} choices")]
    BadSelection { layer: String, index: usize, count: usize },
    #[error("backend offers no tactic for layer `{layer}`")]
    NoTactic { layer: String },
    #[error("timing tactic `{tactic}` of layer `{layer}` failed: {source}")]
    Timing { layer: String, tactic: String, source: Box<BackendError> },
}

/// The outcome of tactic selection.
#[derive(Clone, Debug, Default)]
pub struct TacticPlan {
    /// Per layer, the chosen tactic.
    pub chosen: Vec<Option<TacticId>>,
    /// Layer signatures timed in this build.
    pub layers_timed: usize,
    /// Layers with a choice whose timing came from the cache.
    pub layers_from_cache: usize,
    pub warnings: Vec<String>,
}

/// Chooses a tactic for every layer of `network` (see the module docs).
pub fn choose_tactics(
    backend: &dyn Backend,
    device: &DeviceFingerprint,
    network: &Network,
    settings: &str,
    options: &TacticOptions,
) -> Result<TacticPlan, TacticError> {
    let mut plan = TacticPlan::default();
    let header = current_header(backend.name(), device);
    let attached = options.timing_cache.as_ref().filter(|_| !options.disable_timing_cache);
    let mut local = TimingCache::new();
    // Lock once for the whole build; a poisoned lock still holds a usable cache.
    let mut guard = attached.map(|c| c.lock().unwrap_or_else(|e| e.into_inner()));
    let cache: &mut TimingCache = match guard.as_deref_mut() {
        Some(c) => c,
        None => &mut local,
    };
    if let Some(w) = cache.check_and_adopt(&header, options.ignore_mismatch)? {
        plan.warnings.push(w);
    }
    let repetitions = if options.repetitions == 0 { 5 } else { options.repetitions };
    let mut reported = Vec::new();
    let report_progress = |done: usize, name: &str| {
        if let Some(p) = &options.progress {
            (p.0)(done, network.layers().len(), name);
        }
    };
    for (i, layer) in network.layers().iter().enumerate() {
        report_progress(i, &layer.name);
        let id = LayerId(i);
        let offered = backend.tactics(network, id);
        if offered.is_empty() {
            return Err(TacticError::NoTactic { layer: layer.name.clone() });
        }
        let signature = LayerSignature::of(network, id);
        let key = format!("{signature}/{settings}");
        let cached = cache.get(&key).cloned();
        let time_of = |t: &TacticId| cached.as_ref().and_then(|e| e.candidates.iter().find(|(c, _)| c == t).map(|(_, ns)| *ns));
        let choices: Vec<AlgorithmChoice> =
            offered.iter().map(|t| AlgorithmChoice { tactic: t.clone(), time_ns: time_of(&t.id) }).collect();
        let context = context_of(network, id);
        let allowed = select(options, &context, &choices)?;
        let pick = if allowed.len() == 1 {
            allowed[0].tactic.id.clone()
        } else if let Some(hit) = cached.as_ref().and_then(|e| pick_from_cache(e, &allowed)) {
            plan.layers_from_cache += 1;
            hit
        } else if options.error_on_timing_cache_miss {
            return Err(TacticError::CacheMiss { layer: layer.name.clone(), signature: key });
        } else {
            let entry = time_candidates(backend, network, id, &signature.kind, &allowed, repetitions)?;
            plan.layers_timed += 1;
            let chosen = entry.chosen.clone();
            cache.insert(key, merge_entry(cached, entry));
            chosen
        };
        reported.push((context, pick.clone()));
        plan.chosen.push(Some(pick));
    }
    report_progress(network.layers().len(), "");
    if let Some(s) = &options.selector {
        s.0.report_algorithms(&reported);
    }
    Ok(plan)
}

fn select<'c>(options: &TacticOptions, context: &AlgorithmContext, choices: &'c [AlgorithmChoice]) -> Result<Vec<&'c AlgorithmChoice>, TacticError> {
    let Some(selector) = &options.selector else { return Ok(choices.iter().collect()) };
    let picked = selector.0.select_algorithms(context, choices);
    if picked.is_empty() {
        if options.reject_empty_algorithms {
            return Err(TacticError::EmptySelection { layer: context.layer.clone() });
        }
        return Ok(choices.iter().collect());
    }
    let mut out = Vec::with_capacity(picked.len());
    for index in picked {
        let c = choices.get(index).ok_or_else(|| TacticError::BadSelection {
            layer: context.layer.clone(),
            index,
            count: choices.len(),
        })?;
        if !out.iter().any(|o: &&AlgorithmChoice| o.tactic.id == c.tactic.id) {
            out.push(c);
        }
    }
    Ok(out)
}

/// The cached choice when allowed, else the fastest allowed candidate when the cache
/// timed them all; `None` is a miss.
fn pick_from_cache(entry: &CacheEntry, allowed: &[&AlgorithmChoice]) -> Option<TacticId> {
    if allowed.iter().any(|c| c.tactic.id == entry.chosen) {
        return Some(entry.chosen.clone());
    }
    let times: Option<Vec<(u64, &TacticId)>> = allowed.iter().map(|c| c.time_ns.map(|t| (t, &c.tactic.id))).collect();
    // Ties go to the earlier candidate: min_by_key keeps the first minimum.
    times?.into_iter().min_by_key(|(t, _)| *t).map(|(_, id)| id.clone())
}

fn time_candidates(
    backend: &dyn Backend,
    network: &Network,
    layer: LayerId,
    kind: &str,
    allowed: &[&AlgorithmChoice],
    repetitions: usize,
) -> Result<CacheEntry, TacticError> {
    let mut candidates = Vec::with_capacity(allowed.len());
    for c in allowed {
        let time = backend.time_tactic(network, layer, &c.tactic, repetitions).map_err(|source| TacticError::Timing {
            layer: network.layer(layer).name.clone(),
            tactic: c.tactic.id.to_string(),
            source: Box::new(source),
        })?;
        candidates.push((c.tactic.id.clone(), u64::try_from(time.as_nanos()).unwrap_or(u64::MAX)));
    }
    let chosen = candidates.iter().min_by_key(|(_, t)| *t).map(|(id, _)| id.clone()).expect("at least two candidates");
    Ok(CacheEntry { layer_kind: kind.to_string(), chosen, candidates })
}

/// Keeps times an earlier build measured for candidates this one did not time.
fn merge_entry(old: Option<CacheEntry>, mut new: CacheEntry) -> CacheEntry {
    if let Some(old) = old {
        for (id, t) in old.candidates {
            if !new.candidates.iter().any(|(c, _)| *c == id) {
                new.candidates.push((id, t));
            }
        }
    }
    new
}

fn context_of(network: &Network, id: LayerId) -> AlgorithmContext {
    let l = network.layer(id);
    let io = |t: crate::ir::network::TensorId| (network.tensor(t).dtype, network.tensor(t).shape.clone());
    let anchor = match &l.kind {
        crate::ir::layer::LayerKind::Fused(p) => Some(p.anchor.kind().type_name().to_string()),
        _ => None,
    };
    AlgorithmContext {
        layer: l.name.clone(),
        kind: l.kind.type_name().to_string(),
        anchor,
        inputs: l.inputs.iter().flatten().map(|&t| io(t)).collect(),
        outputs: l.outputs.iter().map(|&t| io(t)).collect(),
    }
}

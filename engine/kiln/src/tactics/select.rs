//! What steers tactic selection: the algorithm selector (seed §6.3), the build's tactic
//! options, the outcome and its errors. The builder chooses (`builder::tactic_selection`).

use super::cache::{TimingCache, TimingCacheError};
use super::{TacticDesc, TacticId};
use crate::error::BackendError;
use crate::ir::dtype::DataType;
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
    /// Per layer, the candidates timed for it (in this build or an earlier one, from the
    /// cache) with their times in nanoseconds; empty where there was one candidate.
    pub timed: Vec<Vec<(TacticId, u64)>>,
    /// Layer signatures timed in this build.
    pub layers_timed: usize,
    /// Layers with a choice whose timing came from the cache.
    pub layers_from_cache: usize,
    pub warnings: Vec<String>,
}


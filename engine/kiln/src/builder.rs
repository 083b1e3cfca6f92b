//! The builder: network + configuration → engine for one backend.

use crate::backend::{Backend, BackendError};
use crate::build_report::{BuildOutput, BuildSummary};
use crate::engine::format::BuildFlags;
use crate::engine::Engine;
use crate::error::NetworkError;
use crate::inspector::ProfilingVerbosity;
use crate::io_format::{self, IoFormatError};
use crate::ir::control::{self, DEFAULT_MAX_TRIP_COUNT};
use crate::ir::network::{LayerId, Network, TensorId};
use crate::passes::{PassContext, PassError, Pipeline};
use crate::profile::{validate_profiles, OptimizationProfile, ProfileError};
use crate::precision::{self, BuilderFlag, BuilderFlags, PrecisionError};
use crate::tactics::{choose_tactics, AlgorithmSelector, SelectorHandle, TacticError, TacticOptions, TimingCache};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use thiserror::Error;

/// Builder settings. Reduced precision, profiles and the timing cache arrive with the
/// builder issue; the fields here are what the foundation honours.
#[derive(Clone, Debug, Default)]
pub struct BuilderConfig {
    /// Free-form flags recorded in the engine (shown by `kiln inspect`).
    pub flags: Vec<String>,
    /// Most iterations one run of a loop may take before execution fails (a runaway WHILE
    /// loop becomes an error, not a hang); `None`: [`DEFAULT_MAX_TRIP_COUNT`]. Recorded in
    /// the engine.
    pub max_trip_count: Option<u64>,
    /// Optimization profiles (min / opt / max shapes of the dynamic inputs); an engine can
    /// hold several and a context picks one. See [`crate::profile`] for a network with
    /// dynamic inputs and none.
    pub profiles: Vec<OptimizationProfile>,
    /// Most bytes the activation arena may take (at any profile's max shapes); `None`: no
    /// limit. A plan that needs more fails the build.
    pub workspace_limit_bytes: Option<u64>,
    /// Whether the optimization passes run ([`crate::passes::Pipeline::standard`]); off,
    /// the network is built as given (dead layers aside), e.g. to compare results.
    pub optimization: Optimization,
    /// Precision, constraint and I/O flags (TF32 on by default); see
    /// [`BuilderConfig::set_flag`].
    pub builder_flags: BuilderFlags,
    /// How much the engine inspector shows (recorded in the engine).
    pub profiling_verbosity: ProfilingVerbosity,
    /// Timing cache, algorithm selector and the tactic flags (DISABLE_TIMING_CACHE,
    /// ERROR_ON_TIMING_CACHE_MISS, REJECT_EMPTY_ALGORITHMS); see [`crate::tactics`].
    pub tactics: TacticOptions,
}

impl BuilderConfig {
    /// Attaches a timing cache (seed §6.1); the build reads and grows it. Returns the
    /// shared handle, whose cache can be serialized after the build.
    pub fn set_timing_cache(&mut self, cache: TimingCache, ignore_mismatch: bool) -> Arc<Mutex<TimingCache>> {
        let shared = Arc::new(Mutex::new(cache));
        self.tactics.timing_cache = Some(Arc::clone(&shared));
        self.tactics.ignore_mismatch = ignore_mismatch;
        shared
    }

    /// A copy of the attached timing cache, as the last build left it.
    pub fn timing_cache(&self) -> Option<TimingCache> {
        self.tactics.timing_cache.as_ref().map(|c| c.lock().unwrap_or_else(|e| e.into_inner()).clone())
    }

    /// Attaches an algorithm selector (seed §6.3).
    pub fn set_algorithm_selector(&mut self, selector: Arc<dyn AlgorithmSelector>) {
        self.tactics.selector = Some(SelectorHandle(selector));
    }
}

/// Whether the builder rewrites the network before building.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Optimization {
    /// Dead-layer elimination only.
    None,
    /// Folding, pattern recognition and fusion.
    #[default]
    Full,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BuildError {
    #[error(transparent)]
    Network(#[from] NetworkError),
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error(transparent)]
    Pass(#[from] PassError),
    #[error(transparent)]
    Profile(#[from] ProfileError),
    #[error("the network does not infer at the profiles' shapes: {0}")]
    ProfileShapes(String),
    #[error("activations need {needed} bytes (profile {profile}) but the workspace limit is {limit} bytes")]
    WorkspaceLimit { needed: u64, limit: u64, profile: usize },
    #[error(transparent)]
    Precision(#[from] PrecisionError),
    #[error(transparent)]
    IoFormat(#[from] IoFormatError),
    #[error(transparent)]
    Tactic(#[from] TacticError),
}

/// Builds engines for one backend.
pub struct Builder<'b> {
    backend: &'b dyn Backend,
    /// Evaluates constant subgraphs; the target backend unless set.
    folding_backend: Option<&'b dyn Backend>,
}

impl std::fmt::Debug for Builder<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder").field("backend", &self.backend.name()).finish()
    }
}

impl<'b> Builder<'b> {
    pub fn new(backend: &'b dyn Backend) -> Builder<'b> {
        Builder { backend, folding_backend: None }
    }

    /// Folds constant subgraphs with `backend` instead of the target backend.
    pub fn with_constant_folding(mut self, backend: &'b dyn Backend) -> Builder<'b> {
        self.folding_backend = Some(backend);
        self
    }

    /// Validates the network, decides layer precisions (inserting casts), picks I/O
    /// formats (inserting reformats), drops layers no output depends on, runs the
    /// optimization passes (folding, fusion), lowers loops and conditionals to regions (checking their rules), checks that the backend runs every
    /// remaining layer, and records the device the engine is for.
    pub fn build(&self, network: &Network, config: &BuilderConfig) -> Result<Engine, BuildError> {
        Ok(self.build_with_report(network, config)?.engine)
    }

    /// [`Builder::build`], also returning warnings, log lines and a summary.
    pub fn build_with_report(&self, network: &Network, config: &BuilderConfig) -> Result<BuildOutput, BuildError> {
        let mut summary = BuildSummary { layers_before: network.layers().len(), ..BuildSummary::default() };
        let mut log = Vec::new();
        let start = Instant::now();
        network.validate()?;
        validate_profiles(network, &config.profiles)?;
        let device = self.backend.device()?;
        summary.phase("validate", start);

        let start = Instant::now();
        let tf32_override = std::env::var("NVIDIA_TF32_OVERRIDE").ok();
        let (flags, note) = precision::effective_flags(config.builder_flags, tf32_override.as_deref());
        log.extend(note);
        let (typed, report) = precision::apply(network, flags, self.backend)?;
        log.extend(report.changed.iter().map(|(layer, t)| format!("layer `{layer}` computes in {t}")));
        let formatted = io_format::apply(&typed, self.backend, flags.contains(BuilderFlag::DirectIo))?;
        let mut pruned = remove_dead_layers(&formatted);
        if config.optimization == Optimization::Full {
            let context = PassContext { folding_backend: Some(self.folding_backend.unwrap_or(self.backend)) };
            pruned = Pipeline::standard().run(&pruned, &context)?;
        }
        summary.phase("passes", start);

        let start = Instant::now();
        let max_trip_count = config.max_trip_count.unwrap_or(DEFAULT_MAX_TRIP_COUNT);
        pruned.control = Some(control::lower(&pruned, max_trip_count)?);
        summary.phase("lowering", start);

        let start = Instant::now();
        self.backend.check_support(&pruned)?;
        let kernels = (0..pruned.layers().len()).map(|i| self.backend.kernel_name(&pruned, LayerId(i))).collect();
        summary.phase("support check", start);
        summary.layers_after = pruned.layers().len();

        let start = Instant::now();
        // Builder settings that change implementations are part of every cache key.
        let settings = if flags.contains(BuilderFlag::Tf32) { "tf32" } else { "no-tf32" };
        let tactics = choose_tactics(self.backend, &device, &timing_view(&pruned, &config.profiles), settings, &config.tactics)?;
        summary.layers_timed = tactics.layers_timed;
        summary.layers_from_cache = tactics.layers_from_cache;
        summary.phase("tactics", start);
        let mut warnings = report.warnings;
        warnings.extend(tactics.warnings);

        let build_flags = BuildFlags { flags: config.flags.clone(), builder_flags: flags, profiling_verbosity: config.profiling_verbosity };
        let engine = Engine::new(pruned, self.backend.name().to_string(), device, build_flags)
            .with_kernels(kernels)
            .with_tactics(tactics.chosen)
            .with_profiles(config.profiles.clone())
            .map_err(BuildError::ProfileShapes)?;
        check_workspace_limit(&engine, config.workspace_limit_bytes)?;
        Ok(BuildOutput { engine, warnings, log, summary })
    }
}

/// The network as tactics are timed: dynamic dims resolved at the first profile's opt
/// shapes (as TensorRT tunes for them); the network itself without profiles, or when
/// inference at those shapes fails (the layers then keep their first tactic).
fn timing_view(network: &Network, profiles: &[OptimizationProfile]) -> Network {
    let mut view = network.clone();
    let Some(profile) = profiles.first() else { return view };
    let bound = crate::memory_plan::profile_inputs(network, profile, crate::memory_plan::ProfilePoint::Opt);
    if let Ok(shapes) = crate::runtime::shapes::infer_shapes(network, &bound) {
        for (desc, shape) in view.parts_mut().tensors.iter_mut().zip(shapes) {
            desc.shape = shape;
        }
    }
    view
}

fn check_workspace_limit(engine: &Engine, limit: Option<u64>) -> Result<(), BuildError> {
    let Some(limit) = limit else { return Ok(()) };
    match engine.memory_plans().iter().enumerate().find(|(_, p)| p.peak_bytes > limit) {
        Some((profile, p)) => Err(BuildError::WorkspaceLimit { needed: p.peak_bytes, limit, profile }),
        None => Ok(()),
    }
}

/// Keeps only the layers that network outputs depend on (and Assertion layers, which
/// matter for their effect), renumbering tensors, layers and weights. A live loop keeps its
/// trip limits and a live conditional its condition; a loop with no live output goes.
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
    loop {
        while let Some(t) = stack.pop() {
            if let Some((LayerId(p), _)) = network.tensor(t).producer {
                if !std::mem::replace(&mut live[p], true) {
                    stack.extend(layers[p].inputs.iter().flatten());
                }
            }
        }
        for i in control::structural_layers(network, &live) {
            live[i] = true;
            stack.extend(layers[i].inputs.iter().flatten());
        }
        if stack.is_empty() {
            break;
        }
    }
    if live.iter().all(|&l| l) {
        return network.clone();
    }
    network.retain_layers(&live)
}

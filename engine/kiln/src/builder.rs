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
use crate::precision::{self, BuilderFlag, BuilderFlags, PrecisionError};
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
    /// Precision, constraint and I/O flags (TF32 on by default); see
    /// [`BuilderConfig::set_flag`].
    pub builder_flags: BuilderFlags,
    /// How much the engine inspector shows (recorded in the engine).
    pub profiling_verbosity: ProfilingVerbosity,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BuildError {
    #[error(transparent)]
    Network(#[from] NetworkError),
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error(transparent)]
    Precision(#[from] PrecisionError),
    #[error(transparent)]
    IoFormat(#[from] IoFormatError),
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

    /// Validates the network, decides layer precisions (inserting casts), picks I/O
    /// formats (inserting reformats), drops layers no output depends on, lowers loops and
    /// conditionals to regions (checking their rules), checks that the backend runs every
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

        let build_flags = BuildFlags { flags: config.flags.clone(), builder_flags: flags, profiling_verbosity: config.profiling_verbosity };
        let engine = Engine::new(pruned, self.backend.name().to_string(), device, build_flags).with_kernels(kernels);
        Ok(BuildOutput { engine, warnings: report.warnings, log, summary })
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

//! What a build reports besides the engine: warnings, log lines and a summary with the
//! time each phase took (what `kiln build` prints).

use crate::engine::Engine;
use std::time::{Duration, Instant};

/// The result of [`crate::Builder::build_with_report`].
#[derive(Debug)]
pub struct BuildOutput {
    pub engine: Engine,
    /// Things the user may want to fix: unmet PREFER constraints, ignored precision hints.
    pub warnings: Vec<String>,
    /// Informational lines (TF32 override, layers whose precision changed).
    pub log: Vec<String>,
    pub summary: BuildSummary,
}

/// Layer counts and phase times of one build.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BuildSummary {
    /// Layers in the network given to the builder.
    pub layers_before: usize,
    /// Layers in the engine.
    pub layers_after: usize,
    /// Layer signatures whose tactics this build timed.
    pub layers_timed: usize,
    /// Layers with several tactics whose choice the timing cache served.
    pub layers_from_cache: usize,
    /// Phases in order: validate, passes, lowering, support check, tactics (callers that serialize
    /// add "serialize").
    pub phases: Vec<(String, Duration)>,
    /// With the SPARSE_WEIGHTS flag: the layers that qualify for 2:4 sparse kernels and those
    /// that run sparse.
    pub sparsity: Option<crate::sparsity::SparsityReport>,
}

impl BuildSummary {
    /// Records a phase that started at `start` and ends now.
    pub fn phase(&mut self, name: &str, start: Instant) {
        let took = start.elapsed();
        tracing::info!(target: "kiln::builder", "{name}: {:.1} ms", took.as_secs_f64() * 1e3);
        self.phases.push((name.to_string(), took));
    }

    pub fn total(&self) -> Duration {
        self.phases.iter().map(|(_, d)| *d).sum()
    }
}

//! Cross-checking backends, in the manner of Polygraphy: build one network for each
//! backend (or take an engine already built), run each on the same inputs and compare every
//! output with the reference element by element: the last backend, or outputs loaded from a
//! file (golden outputs).
//!
//! With `mark_all`, every top-level tensor a layer computes becomes an output (built
//! without optimization passes, so that none is fused away), and the first layer in
//! topological order whose output diverges is named.

pub mod stats;
#[cfg(test)]
mod tests;

use kiln::ir::control::{self, Step, DEFAULT_MAX_TRIP_COUNT};
use kiln::{
    Backend, Builder, BuilderConfig, ExecutionContext, HostTensor, LayerKind, Network, NetworkError, Optimization,
    TensorId,
};
use stats::{compare_tensor, TensorComparison, ToleranceSet};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};
use thiserror::Error;

/// How to compare.
#[derive(Clone, Debug)]
pub struct CompareOptions {
    /// Builder settings shared by every backend (flags, profiles). With `mark_all`, the
    /// optimization level is overridden to [`Optimization::None`].
    pub config: BuilderConfig,
    pub tolerances: ToleranceSet,
    pub mark_all: bool,
}

/// What a compared run comes from.
pub enum Runner<'a> {
    /// The network, built for this backend.
    Build(&'a dyn Backend),
    /// An engine built before, run on this backend (its own).
    Engine(Box<kiln::Engine>, &'a dyn Backend),
}

impl<'a> Runner<'a> {
    fn backend(&self) -> &'a dyn Backend {
        match self {
            Runner::Build(b) | Runner::Engine(_, b) => *b,
        }
    }
}

impl std::fmt::Debug for Runner<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = if matches!(self, Runner::Build(_)) { "Build" } else { "Engine" };
        f.debug_tuple(what).field(&self.backend().name()).finish()
    }
}

/// What the runs are compared with.
#[derive(Debug)]
pub enum Reference {
    /// The last runner's results.
    LastRun,
    /// Outputs computed elsewhere (`--load-outputs`), named by where they came from.
    Loaded { label: String, outputs: BTreeMap<String, HostTensor> },
}

/// Which step of a backend's work failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Build,
    Prepare,
    Run,
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Stage::Build => "build the network",
            Stage::Prepare => "prepare the engine",
            Stage::Run => "run the engine",
        })
    }
}

#[derive(Debug, Error)]
pub enum CompareError {
    #[error("a comparison needs at least two backends, or one and loaded outputs (got {0} backends)")]
    TooFewBackends(usize),
    #[error("--mark-all needs the network: an engine's outputs are fixed when it is built")]
    MarkAllOnEngine,
    /// A backend could not build or run the network: no results to compare.
    #[error("backend `{backend}` could not {stage}: {reason}")]
    BackendFailed { backend: String, stage: Stage, reason: String },
    #[error("cannot mark the intermediate tensors as outputs: {0}")]
    MarkAll(#[from] NetworkError),
}

/// One backend's results.
#[derive(Debug)]
pub struct BackendRun {
    pub backend: String,
    pub outputs: BTreeMap<String, HostTensor>,
    pub build_time: Duration,
    pub run_time: Duration,
}

/// Where a compared tensor comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorOrigin {
    /// Index of the producing layer in the network's (topological) layer order.
    pub layer_index: usize,
    pub layer_name: String,
    pub layer_type: &'static str,
    /// Whether the tensor is an output of the network as given (not only marked).
    pub is_network_output: bool,
}

/// One backend against the reference.
#[derive(Debug)]
pub struct PairComparison {
    pub backend: String,
    /// In network order: the outputs, or with `mark_all` every marked tensor.
    pub tensors: Vec<(TensorComparison, Option<TensorOrigin>)>,
}

impl PairComparison {
    pub fn passed(&self) -> bool {
        self.tensors.iter().all(|(t, _)| t.passed())
    }

    /// The failing tensor whose layer comes first in topological order.
    pub fn first_divergence(&self) -> Option<&(TensorComparison, Option<TensorOrigin>)> {
        self.tensors
            .iter()
            .filter(|(t, _)| !t.passed())
            .min_by_key(|(_, origin)| origin.as_ref().map_or(usize::MAX, |o| o.layer_index))
    }
}

/// Everything `kiln compare` reports.
#[derive(Debug)]
pub struct Comparison {
    pub reference: String,
    pub optimization: Optimization,
    /// Tensors compared per backend (the network's outputs, or every marked tensor).
    pub compared_tensors: usize,
    pub runs: Vec<BackendRun>,
    /// One per backend but the reference, in the order given.
    pub pairs: Vec<PairComparison>,
}

impl Comparison {
    pub fn passed(&self) -> bool {
        self.pairs.iter().all(PairComparison::passed)
    }
}

/// Builds `network` for every backend, runs each on `inputs`, and compares each backend's
/// results with the last backend's (the tests' entry; the command uses [`compare_runs`]).
#[cfg(test)]
pub fn compare(
    network: &Network,
    backends: &[&dyn Backend],
    inputs: &HashMap<String, HostTensor>,
    options: &CompareOptions,
) -> Result<Comparison, CompareError> {
    let runners: Vec<Runner> = backends.iter().map(|&b| Runner::Build(b)).collect();
    compare_runs(network, runners, inputs, options, Reference::LastRun)
}

/// Runs every runner on `inputs` and compares each run's results with the reference: the
/// last run, or loaded outputs (then every runner is a candidate).
pub fn compare_runs(
    network: &Network,
    runners: Vec<Runner<'_>>,
    inputs: &HashMap<String, HostTensor>,
    options: &CompareOptions,
    reference: Reference,
) -> Result<Comparison, CompareError> {
    let needed = if matches!(reference, Reference::LastRun) { 2 } else { 1 };
    if runners.len() < needed {
        return Err(CompareError::TooFewBackends(runners.len()));
    }
    if options.mark_all && runners.iter().any(|r| matches!(r, Runner::Engine(..))) {
        return Err(CompareError::MarkAllOnEngine);
    }
    let mut config = options.config.clone();
    let (network, origins) = if options.mark_all {
        config.optimization = Optimization::None;
        mark_all_outputs(network)?
    } else {
        let origins = network.outputs().iter().map(|&t| origin_of(network, t, true)).collect();
        (network.clone(), origins)
    };
    let mut runs = Vec::with_capacity(runners.len());
    for runner in runners {
        runs.push(run_on(runner, &network, inputs, &config)?);
    }
    let (reference_name, reference_outputs, candidate_count) = match &reference {
        Reference::LastRun => {
            let last = runs.last().expect("at least two runs");
            (last.backend.clone(), &last.outputs, runs.len() - 1)
        }
        Reference::Loaded { label, outputs } => (label.clone(), outputs, runs.len()),
    };
    let pairs = runs[..candidate_count]
        .iter()
        .map(|run| PairComparison {
            backend: run.backend.clone(),
            tensors: network
                .outputs()
                .iter()
                .zip(&origins)
                .filter_map(|(&t, origin)| {
                    let name = &network.tensor(t).name;
                    let expected = reference_outputs.get(name)?;
                    let result = match run.outputs.get(name) {
                        Some(actual) => compare_tensor(name, actual, expected, options.tolerances.of(name)),
                        None => TensorComparison::missing(name, expected),
                    };
                    Some((result, origin.clone()))
                })
                .collect(),
        })
        .collect();
    let compared_tensors = network.outputs().iter().filter(|&&t| reference_outputs.contains_key(&network.tensor(t).name)).count();
    Ok(Comparison {
        reference: reference_name,
        optimization: config.optimization,
        compared_tensors,
        runs,
        pairs,
    })
}

fn run_on(
    runner: Runner<'_>,
    network: &Network,
    inputs: &HashMap<String, HostTensor>,
    config: &BuilderConfig,
) -> Result<BackendRun, CompareError> {
    let backend = runner.backend();
    let name = backend.name().to_string();
    let failed = |stage: Stage, reason: String| CompareError::BackendFailed { backend: name.clone(), stage, reason };
    let spinner = crate::progress::spinner(format!("building for {name}"));
    let start = Instant::now();
    let engine = match runner {
        Runner::Build(backend) => Builder::new(backend).build(network, config).map_err(|e| failed(Stage::Build, e.to_string()))?,
        Runner::Engine(engine, _) => *engine,
    };
    let build_time = start.elapsed();
    spinner.set_message(format!("running on {name}"));
    let context = ExecutionContext::new(engine, backend).map_err(|e| failed(Stage::Prepare, e.to_string()))?;
    let start = Instant::now();
    let outputs = context.run(inputs).map_err(|e| failed(Stage::Run, e.to_string()))?;
    spinner.finish_and_clear();
    Ok(BackendRun { backend: name, outputs, build_time, run_time: start.elapsed() })
}

fn origin_of(network: &Network, tensor: TensorId, is_network_output: bool) -> Option<TensorOrigin> {
    let (layer, _) = network.tensor(tensor).producer?;
    let l = network.layer(layer);
    Some(TensorOrigin {
        layer_index: layer.0,
        layer_name: l.name.clone(),
        layer_type: l.kind.type_name(),
        is_network_output,
    })
}

/// A copy of `network` whose outputs are its own outputs followed by every other tensor a
/// layer computes at the top level, in layer order, with where each comes from. Left out:
/// constants and values known at build time (nothing for a backend to get wrong), and
/// tensors inside loops and conditional branches (they have no single value per run).
pub fn mark_all_outputs(network: &Network) -> Result<(Network, Vec<Option<TensorOrigin>>), NetworkError> {
    let plan = control::lower(network, DEFAULT_MAX_TRIP_COUNT)?;
    let mut top_level: Vec<usize> = plan
        .body
        .steps
        .iter()
        .flat_map(|step| match step {
            Step::Layer(id) => vec![id.0],
            Step::Loop(region) => region.outputs.iter().map(|l| l.0).collect(),
            Step::Conditional(region) => region.outputs.iter().map(|l| l.0).collect(),
        })
        .collect();
    top_level.sort_unstable();
    let mut marked = network.clone();
    let mut origins: Vec<Option<TensorOrigin>> =
        network.outputs().iter().map(|&t| origin_of(network, t, true)).collect();
    for &index in &top_level {
        let layer = &network.layers()[index];
        if matches!(layer.kind, LayerKind::Constant { .. }) {
            continue;
        }
        for &t in &layer.outputs {
            if network.outputs().contains(&t) || network.tensor(t).value.is_some() {
                continue;
            }
            marked.mark_output(t)?;
            origins.push(origin_of(network, t, false));
        }
    }
    Ok((marked, origins))
}

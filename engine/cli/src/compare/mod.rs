//! Cross-checking backends, in the manner of Polygraphy: build one network for each
//! backend, run each on the same inputs and compare every output with the reference (the
//! last backend) element by element.
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
use stats::{compare_tensor, TensorComparison, Tolerances};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};
use thiserror::Error;

/// How to compare.
#[derive(Clone, Debug)]
pub struct CompareOptions {
    /// Builder settings shared by every backend (flags, profiles). With `mark_all`, the
    /// optimization level is overridden to [`Optimization::None`].
    pub config: BuilderConfig,
    pub tolerances: Tolerances,
    pub mark_all: bool,
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
    #[error("a comparison needs at least two backends (got {0})")]
    TooFewBackends(usize),
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
/// results with the last backend's.
pub fn compare(
    network: &Network,
    backends: &[&dyn Backend],
    inputs: &HashMap<String, HostTensor>,
    options: &CompareOptions,
) -> Result<Comparison, CompareError> {
    let Some((reference, candidates)) = backends.split_last().filter(|_| backends.len() >= 2) else {
        return Err(CompareError::TooFewBackends(backends.len()));
    };
    let mut config = options.config.clone();
    let (network, origins) = if options.mark_all {
        config.optimization = Optimization::None;
        mark_all_outputs(network)?
    } else {
        let origins = network.outputs().iter().map(|&t| origin_of(network, t, true)).collect();
        (network.clone(), origins)
    };
    let runs: Vec<BackendRun> =
        backends.iter().map(|b| run_on(*b, &network, inputs, &config)).collect::<Result<_, _>>()?;
    let (reference_run, candidate_runs) = runs.split_last().expect("at least two runs");
    let pairs = candidates
        .iter()
        .zip(candidate_runs)
        .map(|(backend, run)| PairComparison {
            backend: backend.name().to_string(),
            tensors: network
                .outputs()
                .iter()
                .zip(&origins)
                .filter_map(|(&t, origin)| {
                    let name = &network.tensor(t).name;
                    let expected = reference_run.outputs.get(name)?;
                    let result = match run.outputs.get(name) {
                        Some(actual) => compare_tensor(name, actual, expected, options.tolerances),
                        None => TensorComparison::missing(name, expected),
                    };
                    Some((result, origin.clone()))
                })
                .collect(),
        })
        .collect();
    Ok(Comparison {
        reference: reference.name().to_string(),
        optimization: config.optimization,
        compared_tensors: network.outputs().len(),
        runs,
        pairs,
    })
}

fn run_on(
    backend: &dyn Backend,
    network: &Network,
    inputs: &HashMap<String, HostTensor>,
    config: &BuilderConfig,
) -> Result<BackendRun, CompareError> {
    let name = backend.name().to_string();
    let failed = |stage: Stage, reason: String| CompareError::BackendFailed { backend: name.clone(), stage, reason };
    let start = Instant::now();
    let engine = Builder::new(backend).build(network, config).map_err(|e| failed(Stage::Build, e.to_string()))?;
    let build_time = start.elapsed();
    let context = ExecutionContext::new(engine, backend).map_err(|e| failed(Stage::Prepare, e.to_string()))?;
    let start = Instant::now();
    let outputs = context.run(inputs).map_err(|e| failed(Stage::Run, e.to_string()))?;
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

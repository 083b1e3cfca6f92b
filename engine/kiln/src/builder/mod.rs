//! The builder: network + configuration → engine for one backend.

mod calibration;
mod pinned_shapes;
mod tactic_selection;
mod tensor_sizes;

use crate::backend::Backend;
use crate::error::BackendError;
use crate::build_report::{BuildOutput, BuildSummary};
use crate::engine::format::BuildFlags;
use crate::engine::Engine;
use crate::error::NetworkError;
use crate::config::{BuilderConfig, BuilderFlag, Optimization};
use crate::io_format::{self, IoFormatError};
use crate::ir::control::{self, DEFAULT_MAX_TRIP_COUNT};
use crate::ir::layer::LayerKind;
use crate::ir::network::{LayerId, Network};
use crate::passes::{remove_dead_layers, PassContext, PassError, Pipeline};
use crate::profile::{validate_profiles, OptimizationProfile, ProfileError};
use crate::precision::{self, PrecisionError};
use crate::engine::refit_source::RefitSource;
use crate::tactics::TacticError;
pub use calibration::calibrate;
use pinned_shapes::{pin_single_point, restore_declared_dims};
use tactic_selection::choose_tactics;
use std::time::Instant;
use thiserror::Error;

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
    /// A tensor the engine would compute does not fit the memory budget.
    #[error("{0}")]
    TensorTooLarge(String),
    /// Builder settings that contradict each other.
    #[error("{0}")]
    Config(String),
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
        let (flags, note) = crate::config::effective_flags(config.builder_flags, tf32_override.as_deref());
        if flags.contains(BuilderFlag::StripWeights) && !flags.contains(BuilderFlag::Refit) {
            return Err(BuildError::Config(
                "builder flag STRIP_WEIGHTS needs REFIT: a weight-stripped engine runs only once refitted".into(),
            ));
        }
        log.extend(note);
        // A refit replays the build on the network as given: it stays general there.
        let pinned = if flags.contains(BuilderFlag::Refit) { None } else { pin_single_point(network, &config.profiles) };
        let declared = network;
        let network = match &pinned {
            Some((pinned, line)) => {
                log.push(line.clone());
                pinned
            }
            None => network,
        };
        let quantized = int8_step(network, flags, config, &mut log)?;
        let network = quantized.as_ref().unwrap_or(network);
        let folding = self.folding_backend.unwrap_or(self.backend);
        let (typed, mut report) = typed_network(network, flags, config.optimization, self.backend, folding)?;
        for (layer, t) in &report.changed {
            tracing::debug!(target: "kiln::precision", "layer `{layer}` computes in {t}");
            log.push(format!("layer `{layer}` computes in {t}"));
        }
        let counts = precision::compute_type_counts(&typed);
        log.push(precision_line(&counts));
        log.extend(tf32_line(&typed, flags));
        report.warnings.extend(unhonoured_precisions(&typed, flags, &counts, self.backend.name()));
        let mut pruned = optimize_typed(&typed, flags, config.optimization, self.backend, folding)?;
        if pinned.is_some() {
            restore_declared_dims(&mut pruned, declared);
        }
        summary.phase("passes", start);

        // Before anything allocates a tensor: tactic timing and the arena plan.
        let budget = tensor_sizes::build_budget(config.max_memory_bytes, &device);
        tensor_sizes::check_tensor_sizes(&pruned, &config.profiles, budget)?;

        let start = Instant::now();
        let max_trip_count = config.max_trip_count.unwrap_or(DEFAULT_MAX_TRIP_COUNT);
        let mut control = control::lower(&pruned, max_trip_count)?;
        control.max_memory_bytes = config.max_memory_bytes;
        summary.phase("lowering", start);

        let start = Instant::now();
        self.backend.check_support(&pruned)?;
        let kernels = (0..pruned.layers().len()).map(|i| self.backend.kernel_name(&pruned, LayerId(i))).collect();
        summary.phase("support check", start);
        summary.layers_after = pruned.layers().len();

        let start = Instant::now();
        let math = flags.math_mode();
        let timed = timing_view(&pruned, &config.profiles);
        let tactics = choose_tactics(self.backend, &device, &timed, math, &config.tactics)?;
        summary.layers_timed = tactics.layers_timed;
        summary.layers_from_cache = tactics.layers_from_cache;
        summary.phase("tactics", start);
        let mut warnings = report.warnings;
        warnings.extend(tactics.warnings);
        if math.sparse_weights {
            let sparsity = sparsity_report(self.backend, &pruned, &timed, &tactics.chosen, math);
            log.extend(sparsity.lines());
            warnings.extend(sparsity.warning(self.backend.name()));
            summary.sparsity = Some(sparsity);
        }

        let build_flags = BuildFlags { flags: config.flags.clone(), builder_flags: flags, profiling_verbosity: config.profiling_verbosity };
        let refit = flags.contains(BuilderFlag::Refit).then(|| RefitSource::new(network.clone(), config.optimization));
        let engine = Engine::new(pruned, control, self.backend.name().to_string(), device, build_flags)
            .with_refit_source(refit)
            .with_kernels(kernels)
            .with_tactics(tactics.chosen)
            .with_tactic_times(tactics.timed)
            .with_profiles(config.profiles.clone())
            .map_err(BuildError::ProfileShapes)?;
        check_workspace_limit(&engine, config.workspace_limit_bytes)?;
        log_outcome(&engine, &log, &warnings);
        Ok(BuildOutput { engine, warnings, log, summary })
    }
}

/// Which layers qualify for 2:4 sparse kernels, which the backend offers one for (asked on
/// `timed`, the network as tactics were timed) and which run sparse.
fn sparsity_report(
    backend: &dyn Backend,
    network: &Network,
    timed: &Network,
    chosen: &[Option<crate::tactics::TacticId>],
    math: crate::backend::MathMode,
) -> crate::sparsity::SparsityReport {
    crate::sparsity::SparsityReport::of(network, chosen, |layer| {
        backend.tactics(timed, layer, math).iter().any(|t| crate::sparsity::is_sparse_tactic(&t.id))
    })
}

/// Q/DQ propagation and fusion, then the precision pass. The integer layers are made first,
/// as TensorRT processes Q/DQ before choosing precisions: the Casts an FP16 build puts around
/// the float layers of a Q/DQ region (a reshape between two pairs included) would hide its
/// pattern from the passes.
pub(crate) fn typed_network(
    network: &Network,
    flags: crate::BuilderFlags,
    optimization: Optimization,
    backend: &dyn Backend,
    folding: &dyn Backend,
) -> Result<(Network, precision::PrecisionReport), BuildError> {
    let fused = match optimization == Optimization::Full && backend.runs_quantized_layers() {
        true => {
            use crate::passes::{run_logged, DeadLayerElimination, NoOpRemoval, Pass, QdqPropagation, QuantizedAttentionFusion, QuantizedFusion, ShapeTensorResolution, ShapeValueFolding, WindowedAttentionRegrouping};
            let context = PassContext { folding_backend: None, quantized_layers: true };
            // Values computed from shapes folded (the exported attention's scale of Q), reshapes
            // whose dims the graph computes made static, one-index Gathers Slices: a packed
            // in-projection's split (reshape, transpose, slices) is then layout layers the
            // propagation moves onto the levels, past a known scale. (No other folding here: it
            // would fold the casts of an integer layer's expansion that the Q/DQ fusion looks for.)
            // Only Q/DQ networks, which the propagation serves (a layer a rewrite replaces
            // loses its precision constraints; one it keeps keeps them).
            let tidy: [&dyn Pass; 4] = [&ShapeValueFolding, &ShapeTensorResolution, &NoOpRemoval, &DeadLayerElimination];
            let mut current: Option<Network> = None;
            if network.layers().iter().any(|l| matches!(l.kind, LayerKind::Dequantize { .. })) {
                for pass in tidy {
                    current = run_logged(pass, current.as_ref().unwrap_or(network), &context)?.or(current);
                }
            }
            // Before the propagation, which then moves the regrouping reshapes onto the levels.
            // Its mask may still be computed from constants: the folding backend evaluates it.
            let evaluating = PassContext { folding_backend: Some(folding), ..context };
            current = run_logged(&WindowedAttentionRegrouping, current.as_ref().unwrap_or(network), &evaluating)?.or(current);
            let mut current = run_logged(&QdqPropagation, current.as_ref().unwrap_or(network), &context)?.or(current);
            // Attention first: the Q/DQ fusion would take its two products as integer layers.
            if let Some(fused) = run_logged(&QuantizedAttentionFusion, current.as_ref().unwrap_or(network), &context)? {
                let count = fused.layers().iter().filter(|l| matches!(&l.kind, LayerKind::Attention(p) if p.has_levels())).count();
                tracing::info!(target: "kiln::builder", "Q/DQ attention: {count} fused with the levels of their scores and probabilities (kiln inspect shows each grid)");
                current = Some(run_logged(&DeadLayerElimination, &fused, &context)?.unwrap_or(fused));
            }
            run_logged(&QuantizedFusion, current.as_ref().unwrap_or(network), &context)?.or(current)
        }
        false => None,
    };
    Ok(precision::apply(fused.as_ref().unwrap_or(network), flags, backend)?)
}

/// The network after the precision pass, rewritten as the build runs it: boundary
/// formats, dead layers dropped, then (with full optimization) the standard passes. A refit
/// replays it on the network with new weights (`crate::refit`).
pub(crate) fn optimize_typed(
    typed: &Network,
    flags: crate::BuilderFlags,
    optimization: Optimization,
    backend: &dyn Backend,
    folding: &dyn Backend,
) -> Result<Network, BuildError> {
    let formatted = io_format::apply(typed, backend, flags.contains(BuilderFlag::DirectIo))?;
    let mut pruned = remove_dead_layers(&formatted);
    if optimization == Optimization::Full {
        // Q/DQ propagation and fusion already ran in `typed_network`, before the precision
        // pass: nothing is left for the pipeline's copies of them to find. The pointwise islands between integer
        // tensors fuse here, after the float chains.
        let context = PassContext { folding_backend: Some(folding), quantized_layers: backend.runs_quantized_layers() };
        pruned = Pipeline::standard().run(&pruned, &context)?;
    }
    Ok(pruned)
}

/// `layer precisions: 40 f16, 2 f32` (layers whose precision the flags can change).
fn precision_line(counts: &[(crate::DataType, usize)]) -> String {
    let parts: Vec<String> = counts.iter().map(|(t, n)| format!("{n} {t}")).collect();
    let text = if parts.is_empty() { "no layer computes in a float type".to_string() } else { parts.join(", ") };
    format!("layer precisions: {text}")
}

/// What the TF32 flag lets the backend do, when the network has an f32 product or convolution.
fn tf32_line(typed: &Network, flags: crate::BuilderFlags) -> Option<String> {
    let f32_products = typed
        .layers()
        .iter()
        .filter(|l| matches!(l.kind, LayerKind::MatrixMultiply { .. } | LayerKind::Convolution(_) | LayerKind::Deconvolution(_)))
        .filter(|l| l.outputs.first().is_some_and(|&t| typed.tensor(t).dtype == crate::DataType::F32))
        .count();
    (f32_products > 0).then(|| {
        if flags.contains(BuilderFlag::Tf32) {
            format!("TF32: {f32_products} f32 products and convolutions may round their inputs to TF32 where the backend has TF32 tensor cores (cuda); --no-tf32 keeps them exact")
        } else {
            format!("TF32 off: {f32_products} f32 products and convolutions compute in f32")
        }
    })
}

/// A warning for each reduced-precision flag that changes nothing: no layer computes in its
/// type and no tensor is stored in it (the backend runs no layer faster in it, as cpu has
/// no f16 arithmetic), so the user, who asked for it, should know.
fn unhonoured_precisions(
    typed: &Network,
    flags: crate::BuilderFlags,
    counts: &[(crate::DataType, usize)],
    backend: &str,
) -> Vec<String> {
    let float_layers: usize = counts.iter().map(|(_, n)| n).sum();
    let unused = |t: crate::DataType| !counts.iter().any(|&(c, _)| c == t) && !typed.tensors().iter().any(|d| d.dtype == t);
    [(BuilderFlag::Fp16, crate::DataType::F16), (BuilderFlag::Bf16, crate::DataType::BF16)]
        .into_iter()
        .filter(|&(flag, t)| flags.contains(flag) && float_layers > 0 && unused(t))
        .map(|(flag, t)| {
            format!(
                "builder flag {} is set but backend `{backend}` runs none of the network's layers in {t}; {}",
                flag.name(),
                precision_line(counts)
            )
        })
        .collect()
}

/// What the build decided, as log events: the log lines (precisions), the warnings and each
/// profile's memory plan.
fn log_outcome(engine: &Engine, log: &[String], warnings: &[String]) {
    for line in log {
        tracing::info!(target: "kiln::builder", "{line}");
    }
    for warning in warnings {
        tracing::warn!(target: "kiln::builder", "{warning}");
    }
    for (i, plan) in engine.memory_plans().iter().enumerate() {
        tracing::info!(
            target: "kiln::memory",
            "memory plan, profile {i}: {} bytes peak for {} tensors ({} bytes unshared), {} sized per run",
            plan.peak_bytes,
            plan.tensors.len(),
            plan.unshared_bytes,
            plan.unplanned.len()
        );
    }
}

/// The network as tactics are timed: dynamic dims resolved at the first profile's opt
/// shapes (as TensorRT tunes for them); the network itself without profiles, or when
/// inference at those shapes fails (the layers then keep their first tactic).
fn timing_view(network: &Network, profiles: &[OptimizationProfile]) -> Network {
    profiles.first().and_then(|p| shapes_at_opt(network, p)).unwrap_or_else(|| network.clone())
}

/// `network` with every tensor's shape inferred at `profile`'s opt shapes; `None` when
/// inference fails there.
fn shapes_at_opt(network: &Network, profile: &OptimizationProfile) -> Option<Network> {
    let bound = crate::memory_plan::profile_inputs(network, profile, crate::memory_plan::ProfilePoint::Opt);
    let shapes = crate::ir::infer::network_shapes::infer_shapes(network, &bound).ok()?;
    let mut view = network.clone();
    for (desc, shape) in view.parts_mut().tensors.iter_mut().zip(shapes) {
        desc.shape = shape;
    }
    Some(view)
}

fn check_workspace_limit(engine: &Engine, limit: Option<u64>) -> Result<(), BuildError> {
    let Some(limit) = limit else { return Ok(()) };
    match engine.memory_plans().iter().enumerate().find(|(_, p)| p.peak_bytes > limit) {
        Some((profile, p)) => Err(BuildError::WorkspaceLimit { needed: p.peak_bytes, limit, profile }),
        None => Ok(()),
    }
}

/// The INT8 step ([`crate::quant::implicit`]) when the flag is set: the network with its
/// convolutions and products reading INT8, and what it did in the log.
fn int8_step(network: &Network, flags: crate::config::BuilderFlags, config: &BuilderConfig, log: &mut Vec<String>) -> Result<Option<Network>, BuildError> {
    if !flags.contains(BuilderFlag::Int8) {
        return Ok(None);
    }
    if flags.contains(BuilderFlag::Refit) {
        return Err(BuildError::Config("builder flags INT8 and REFIT together are not supported yet: a refit replays the network without its ranges".into()));
    }
    let table = config.int8_calibration.as_deref();
    let amax_of = |t: crate::ir::network::TensorId| {
        network.dynamic_range(t).map(|(lo, hi)| lo.abs().max(hi.abs())).or_else(|| table.and_then(|c| c.amax.get(&network.tensor(t).name).copied()))
    };
    let (quantized, report) = crate::quant::implicit::apply(network, &amax_of)?;
    let mut say = |line: String| {
        tracing::debug!(target: "kiln::int8", "{line}");
        log.push(line);
    };
    if let Some(why) = &report.skipped {
        say(format!("INT8: nothing quantized: {why}"));
    }
    let source = table.map_or("ranges set on the network".to_string(), |c| format!("calibration ({})", c.method));
    say(format!("INT8: {} layers read INT8 inputs ({source}); {} stay in float without a range", report.quantized.len(), report.without_range.len()));
    for (layer, tensor) in &report.without_range {
        say(format!("layer `{layer}` stays in float: tensor `{tensor}` has no dynamic range"));
    }
    for layer in &report.quantized {
        say(format!("layer `{layer}` reads INT8 inputs"));
    }
    Ok(Some(quantized))
}

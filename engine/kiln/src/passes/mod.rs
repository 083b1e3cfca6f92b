//! The optimizer: passes that rewrite a validated network into a faster equivalent one.
//!
//! Each pass is a plain value implementing [`Pass`]; a [`Pipeline`] is a `Vec` of them run
//! in order (tract style). A pass returns `Ok(None)` when it changes nothing, so a
//! [`Pipeline::run_traced`] caller sees exactly which passes did something, with the IR
//! dump before and after each (golden tests are built on that).
//!
//! Passes rewrite only networks without loops or conditionals (see
//! `graph::has_control_flow`); those are kept as they are apart from dead-layer
//! elimination, which the builder has always done.

mod attention;
mod cse;
mod dead;
mod einsum;
mod fold;
mod fuse;
mod horizontal;
mod horizontal_quantized;
mod integer_sums;
mod island_reduction;
mod level_tables;
mod noop;
mod patterns;
mod pointwise;
mod qdq_propagation;
mod quantized;
mod quantized_chain;
mod shape_tensors;
mod shuffle_chains;
mod windowed_attention;
pub(crate) mod graph;

pub use attention::{AttentionFusion, AttentionInputLevels, AttentionOutputLevels, QuantizedAttentionFusion};
pub use cse::CommonSubexpressionElimination;
pub use dead::{remove_dead_layers, DeadLayerElimination};
pub use einsum::EinsumLowering;
pub use fold::{ConstantFolding, ShapeValueFolding, MAX_FOLDED_ELEMENTS};
pub use fuse::EpilogueFusion;
pub use horizontal::HorizontalMatMulFusion;
pub use horizontal_quantized::QuantizedHorizontalFusion;
pub use island_reduction::IslandReduction;
pub use level_tables::LevelTables;
pub use noop::NoOpRemoval;
pub use shuffle_chains::ShuffleChainComposition;
pub use windowed_attention::WindowedAttentionRegrouping;
pub use patterns::{GeluFusion, NormalizationFusion, RmsNormalizationFusion, SoftMaxFusion, SwishFusion};
pub use pointwise::PointwiseChainFusion;
pub use qdq_propagation::QdqPropagation;
pub use quantized::QuantizedFusion;
pub use quantized_chain::QuantizedChainFusion;
pub use shape_tensors::ShapeTensorResolution;

use crate::backend::Backend;
use crate::error::NetworkError;
use crate::ir::network::Network;
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PassError {
    /// A rewrite produced a layer that does not validate: a bug in the pass, reported with
    /// the rule broken instead of a wrong engine.
    #[error("pass produced an invalid network: {0}")]
    Network(#[from] NetworkError),
    /// An inconsistency inside a pass.
    #[error("internal optimizer error: {0}")]
    Internal(String),
}

/// What a pass may use besides the network.
#[derive(Clone, Copy, Default)]
pub struct PassContext<'b> {
    /// Evaluates layers whose inputs are all known (constant folding); without one only
    /// the small integer shape arithmetic kiln evaluates itself is folded.
    pub folding_backend: Option<&'b dyn Backend>,
    /// The target backend runs [`crate::LayerKind::Quantized`] layers, so Q/DQ fusion may
    /// make them ([`Backend::runs_quantized_layers`]).
    pub quantized_layers: bool,
}

impl std::fmt::Debug for PassContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PassContext")
            .field("folding_backend", &self.folding_backend.map(|b| b.name()))
            .field("quantized_layers", &self.quantized_layers)
            .finish()
    }
}

/// One rewrite of the network.
pub trait Pass: Send + Sync {
    /// A short stable name ("constant-folding"), shown in traces and build summaries.
    fn name(&self) -> &'static str;
    /// The rewritten network, or `None` when the pass finds nothing to change.
    fn run(
        &self,
        network: &Network,
        context: &PassContext<'_>,
    ) -> Result<Option<Network>, PassError>;
}

/// What one pass did, for tests and build summaries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassTrace {
    pub pass: &'static str,
    /// Layer count before and after.
    pub layers: (usize, usize),
    /// IR dumps before and after; equal when the pass changed nothing.
    pub before: String,
    pub after: String,
}

impl PassTrace {
    pub fn changed(&self) -> bool {
        self.before != self.after
    }
}

/// Passes run in order.
pub struct Pipeline {
    pub passes: Vec<Box<dyn Pass>>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.passes.iter().map(|p| p.name()))
            .finish()
    }
}

impl Default for Pipeline {
    fn default() -> Pipeline {
        Pipeline::standard()
    }
}

impl Pipeline {
    /// The builder's pipeline: fold first (static shapes let the pattern matchers see fixed
    /// dims), recognize patterns before generic fusion (an attention's MatMul must not be
    /// swallowed by an epilogue first), fuse, merge what is computed twice, and clean up.
    pub fn standard() -> Pipeline {
        Pipeline {
            passes: vec![
                // Layout layers onto the integers first, so the fusions below see the Q/DQ
                // pairs around them meet.
                Box::new(QdqPropagation),
                // Before folding turns the weights' DequantizeLinear into float constants.
                Box::new(QuantizedFusion),
                Box::new(ConstantFolding),
                Box::new(ShapeTensorResolution),
                Box::new(NoOpRemoval),
                // After reshapes of reshapes merge: what is left of a chain is transposes between them.
                Box::new(ShuffleChainComposition),
                Box::new(EinsumLowering),
                Box::new(DeadLayerElimination),
                Box::new(SoftMaxFusion),
                Box::new(NormalizationFusion),
                // Layer normalization is RMS normalization of `x - mean`: drop what the
                // layer-norm match replaced before looking for RMS norms.
                Box::new(DeadLayerElimination),
                Box::new(RmsNormalizationFusion),
                Box::new(GeluFusion),
                Box::new(SwishFusion),
                // A mask that differs from window to window broadcasts once windows are heads.
                Box::new(WindowedAttentionRegrouping),
                Box::new(AttentionFusion),
                Box::new(DeadLayerElimination),
                Box::new(EpilogueFusion),
                Box::new(HorizontalMatMulFusion),
                Box::new(PointwiseChainFusion),
                // After the float chains, which it extends to the integers around them.
                Box::new(QuantizedChainFusion),
                // After the islands form and the layers they replaced are gone (a DequantizeLinear
                // left unread still reads a product's levels): islands after a product's levels
                // become its tables.
                Box::new(DeadLayerElimination),
                Box::new(LevelTables),
                // After the islands are whole: a reduction reading one becomes its last step.
                Box::new(IslandReduction),
                // After the chains fold a DequantizeLinear's Cast into the type it writes.
                Box::new(AttentionInputLevels),
                Box::new(AttentionOutputLevels),
                // Last, so no pattern above sees a value shared that the graph computed twice.
                Box::new(CommonSubexpressionElimination),
                // After CSE, so products of one input quantized twice alike read one tensor.
                Box::new(QuantizedHorizontalFusion),
                Box::new(DeadLayerElimination),
            ],
        }
    }

    pub fn new(passes: Vec<Box<dyn Pass>>) -> Pipeline {
        Pipeline { passes }
    }

    /// Runs every pass; networks with loops or conditionals only lose dead layers.
    pub fn run(&self, network: &Network, context: &PassContext<'_>) -> Result<Network, PassError> {
        self.run_inner(network, context, None)
    }

    /// Runs every pass and records, per pass, the layer counts and IR dumps around it.
    pub fn run_traced(
        &self,
        network: &Network,
        context: &PassContext<'_>,
    ) -> Result<(Network, Vec<PassTrace>), PassError> {
        let mut traces = Vec::new();
        let out = self.run_inner(network, context, Some(&mut traces))?;
        Ok((out, traces))
    }

    fn run_inner(
        &self,
        network: &Network,
        context: &PassContext<'_>,
        mut traces: Option<&mut Vec<PassTrace>>,
    ) -> Result<Network, PassError> {
        let mut current = network.clone();
        for pass in &self.passes {
            let next = run_logged(pass.as_ref(), &current, context)?;
            if let Some(traces) = traces.as_deref_mut() {
                let before = current.dump();
                let after = next.as_ref().map_or_else(|| before.clone(), Network::dump);
                let layers = (
                    current.layers().len(),
                    next.as_ref()
                        .map_or(current.layers().len(), |n| n.layers().len()),
                );
                traces.push(PassTrace {
                    pass: pass.name(),
                    layers,
                    before,
                    after,
                });
            }
            if let Some(next) = next {
                current = next;
            }
        }
        Ok(current)
    }
}

/// `pass` on `network`, logged as the pipeline's passes are (`-vv`: what it made; `-vvv`: the
/// network after it): for the passes the builder runs before the precision pass.
pub(crate) fn run_logged(pass: &dyn Pass, network: &Network, context: &PassContext<'_>) -> Result<Option<Network>, PassError> {
    let next = pass.run(network, context)?;
    if let Some(next) = &next {
        log_changes(pass.name(), network, next);
    }
    Ok(next)
}

/// Debug events naming what a pass made: its layer counts, and each layer whose name is new
/// (a fused layer is named after what it replaced, so this says what fused into what).
fn log_changes(pass: &str, before: &Network, after: &Network) {
    if !tracing::enabled!(target: "kiln::passes", tracing::Level::DEBUG) {
        return;
    }
    let old: std::collections::HashSet<&str> = before.layers().iter().map(|l| l.name.as_str()).collect();
    tracing::debug!(target: "kiln::passes", "{pass}: {} layers -> {}", before.layers().len(), after.layers().len());
    for layer in after.layers().iter().filter(|l| !old.contains(l.name.as_str())) {
        tracing::debug!(target: "kiln::passes", "{pass}: made `{}` [{}]", layer.name, kind_text(layer));
    }
    // `-vvv`: the whole network after each pass that changed it, to see why a rewrite did not apply.
    tracing::trace!(target: "kiln::passes", "{pass}: the network after it:\n{}", after.dump());
}

/// `Convolution + [Activation(Relu)]` for a fused layer, else the kind's name.
fn kind_text(layer: &crate::ir::network::Layer) -> String {
    match &layer.kind {
        crate::ir::layer::LayerKind::Fused(p) if !p.dequantized.is_empty() => {
            format!("{} + {:?}, {} inputs read dequantized", p.anchor.kind().type_name(), p.epilogue, p.dequantized.len())
        }
        crate::ir::layer::LayerKind::Fused(p) => format!("{} + {:?}", p.anchor.kind().type_name(), p.epilogue),
        crate::ir::layer::LayerKind::Quantized(p) => {
            let then = match p.then {
                Some(t) => {
                    let join = layer.inputs.get(crate::QuantizedParams::JOIN).copied().flatten().is_some();
                    format!(" -> requantized{}{} -> {}", if join { " + join" } else { "" }, if t.relu { " + Relu" } else { "" }, t.to)
                }
                None => String::new(),
            };
            let lookup = p.lookup.map_or(String::new(), |to| format!(" -> level table -> {to}"));
            format!("integer {}{} -> {}{then}{lookup}", p.anchor.kind().type_name(), if p.relu { " + Relu" } else { "" }, p.output)
        }
        other => other.type_name().to_string(),
    }
}

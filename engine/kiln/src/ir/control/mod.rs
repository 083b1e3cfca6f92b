//! Loops and if-conditionals, lowered from boundary layers to structured regions.
//!
//! A network describes control flow the TensorRT way: flat layers plus boundary layers
//! (TripLimit, Iterator, Recurrence, LoopOutput; Condition, IfConditionalInput,
//! IfConditionalOutput) that name their loop or conditional. [`lower`] infers from the data
//! flow which layers run inside which loop or branch (a layer belongs to the innermost
//! construct whose values it reads; a construct that reads another's interior values is
//! nested in it), checks every rule of the seeds, and returns a [`ControlFlow`]: a tree of
//! blocks that backends execute. Layers that read no loop or branch value run once, outside
//! (loop-invariant tensors are replicated, per the seeds' formal semantics), and layers that
//! read no IfConditionalInput run eagerly; only layers that depend on an
//! IfConditionalInput run lazily in their branch.
//!
//! The tree is part of the engine plan; loading an engine recomputes it from the layers and
//! refuses a plan whose stored tree differs.

mod blocks;
mod rules;
mod scopes;

use crate::error::NetworkError;
use crate::ir::layer::{ConditionalId, LoopId};
use crate::ir::network::{LayerId, Network};
use serde::{Deserialize, Serialize};

/// The default cap on the iterations of one loop run: a runaway WHILE loop becomes a
/// run-time error instead of a hang. [`crate::BuilderConfig::max_trip_count`] changes it.
pub const DEFAULT_MAX_TRIP_COUNT: u64 = 1 << 20;

/// How many times [`ControlFlow::max_trip_count`] all the loops of one execution may
/// iterate together: nested loops, each under the per-loop guard, cannot multiply into
/// a hang (two nested loops at the default guard would run 2^40 iterations).
pub const RUN_TRIPS_PER_LOOP_TRIPS: u64 = 16;

/// How a network executes: the top-level block and the limits that apply while it runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlFlow {
    /// Most iterations one execution of any loop may run; one more is a run-time error.
    pub max_trip_count: u64,
    /// Most bytes one tensor may take ([`crate::BuilderConfig::max_memory_bytes`]);
    /// `None`: what the machine running the engine has.
    pub max_memory_bytes: Option<u64>,
    pub body: Block,
}

impl ControlFlow {
    /// Most iterations all loops of one execution may run together.
    pub fn max_run_trips(&self) -> u64 {
        self.max_trip_count.saturating_mul(RUN_TRIPS_PER_LOOP_TRIPS)
    }
}

/// Steps run in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Block {
    pub steps: Vec<Step>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Step {
    /// An ordinary layer, or an Iterator of the enclosing loop (its slice for the current
    /// iteration).
    Layer(LayerId),
    Loop(Box<LoopRegion>),
    Conditional(Box<ConditionalRegion>),
}

/// One loop. Each iteration `i` binds every recurrence to its current value (the initial
/// value when `i = 0`), runs `condition` and stops when the WHILE limit reads false, runs
/// `body`, records the loop outputs' inputs, and moves each recurrence to its next value.
/// The trip count `n` is the first `i` where the COUNT limit is reached or the WHILE limit
/// reads false.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoopRegion {
    pub id: LoopId,
    /// The TripLimit COUNT layer.
    pub count_limit: Option<LayerId>,
    /// The TripLimit WHILE layer.
    pub while_limit: Option<LayerId>,
    pub recurrences: Vec<LayerId>,
    /// LoopOutput layers: computed once the loop ends.
    pub outputs: Vec<LayerId>,
    /// The layers the WHILE limit needs, run first in each iteration.
    pub condition: Block,
    /// The other layers of the loop.
    pub body: Block,
}

/// One if-conditional: the condition picks a branch, only that branch's block runs, and each
/// IfConditionalOutput takes its input from that branch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConditionalRegion {
    pub id: ConditionalId,
    /// The Condition layer.
    pub condition: LayerId,
    /// IfConditionalInput layers: bound (to their input's value) before the branch runs.
    pub inputs: Vec<LayerId>,
    pub then_branch: Block,
    pub else_branch: Block,
    /// IfConditionalOutput layers.
    pub outputs: Vec<LayerId>,
}

/// Infers nesting and branches, checks every loop and conditional rule, and lowers the
/// network's control flow to regions. A network without boundary layers gives one block
/// of every layer in network order.
pub fn lower(network: &Network, max_trip_count: u64) -> Result<ControlFlow, NetworkError> {
    rules::check_back_edges(network)?;
    let scopes = scopes::Scopes::infer(network)?;
    rules::check(&scopes)?;
    let body = blocks::build(&scopes)?;
    Ok(ControlFlow { max_trip_count, max_memory_bytes: None, body })
}

impl Block {
    /// Every layer the block runs or drives, nested regions included, boundary layers of
    /// those regions included; in no particular order.
    pub fn layers(&self) -> Vec<LayerId> {
        let mut out = Vec::new();
        self.collect_layers(&mut out);
        out
    }

    fn collect_layers(&self, out: &mut Vec<LayerId>) {
        for step in &self.steps {
            match step {
                Step::Layer(l) => out.push(*l),
                Step::Loop(r) => {
                    out.extend(r.count_limit.iter().chain(&r.while_limit).chain(&r.recurrences).chain(&r.outputs));
                    r.condition.collect_layers(out);
                    r.body.collect_layers(out);
                }
                Step::Conditional(r) => {
                    out.push(r.condition);
                    out.extend(r.inputs.iter().chain(&r.outputs));
                    r.then_branch.collect_layers(out);
                    r.else_branch.collect_layers(out);
                }
            }
        }
    }
}

/// The boundary layers that a live loop or conditional cannot run without although no
/// output reads them (a loop's trip limits, a conditional's condition), where some boundary
/// layer of their construct is live and they are not yet.
pub fn structural_layers(network: &Network, live: &[bool]) -> Vec<usize> {
    let layers = network.layers();
    let live_constructs: Vec<scopes::ConstructId> = layers
        .iter()
        .enumerate()
        .filter(|(i, _)| live[*i])
        .filter_map(|(_, l)| scopes::boundary_of(&l.kind))
        .collect();
    layers
        .iter()
        .enumerate()
        .filter(|(i, l)| {
            !live[*i]
                && matches!(l.kind, crate::ir::layer::LayerKind::TripLimit { .. } | crate::ir::layer::LayerKind::Condition { .. })
                && scopes::boundary_of(&l.kind).is_some_and(|c| live_constructs.contains(&c))
        })
        .map(|(i, _)| i)
        .collect()
}

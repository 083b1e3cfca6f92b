//! The op registry: ONNX op type → builder, one module per op family.
//!
//! Each op is registered with the `since_version`s of its definitions in the default
//! domain; a node is built with the newest definition not newer than the model's opset,
//! and builders branch on that version where conventions changed.

mod activation;
mod attention;
mod bitwise;
mod build;
mod control;
mod conv;
mod crop;
mod einsum;
mod gather;
mod index;
mod layout;
mod loss;
mod math;
mod misc;
mod norm;
mod normalize;
pub(crate) mod plugin;
mod pool;
mod quant;
mod reduce;
mod resize;
mod rnn;
mod roi;
mod sampling;
mod sequence;
mod shape;
mod signal;
mod text;
mod unary;

use crate::context::NodeContext;
use crate::error::ImportError;
use kiln::TensorId;
use std::collections::HashMap;
use std::sync::OnceLock;

/// The newest default-domain opset whose definitions the builders know (ONNX 1.23).
pub(crate) const MAX_OPSET: i64 = 28;

/// Builds the layers of one node; returns one tensor per ONNX output it supports.
pub(crate) type BuildFn = fn(&mut NodeContext<'_>) -> Result<Vec<TensorId>, ImportError>;

pub(crate) struct OpDef {
    /// `since_version` of each definition, ascending.
    since: &'static [i64],
    pub build: BuildFn,
}

impl OpDef {
    /// The definition in effect at `opset`; `None` before the op existed.
    pub fn version_at(&self, opset: i64) -> Option<i64> {
        self.since.iter().rev().copied().find(|&v| v <= opset)
    }
}

#[derive(Default)]
pub(crate) struct Registry {
    ops: HashMap<&'static str, OpDef>,
}

impl Registry {
    fn add(&mut self, op_type: &'static str, since: &'static [i64], build: BuildFn) {
        debug_assert!(since.windows(2).all(|w| w[0] < w[1]), "{op_type}: versions must ascend");
        let previous = self.ops.insert(op_type, OpDef { since, build });
        debug_assert!(previous.is_none(), "{op_type} registered twice");
    }

    pub fn get(&self, op_type: &str) -> Option<&OpDef> {
        self.ops.get(op_type)
    }

    /// Every registered op type, sorted.
    pub fn op_types(&self) -> Vec<&'static str> {
        let mut ops: Vec<_> = self.ops.keys().copied().collect();
        ops.sort_unstable();
        ops
    }
}

pub(crate) fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut r = Registry::default();
        activation::register(&mut r);
        attention::register(&mut r);
        bitwise::register(&mut r);
        control::register(&mut r);
        conv::register(&mut r);
        crop::register(&mut r);
        einsum::register(&mut r);
        gather::register(&mut r);
        index::register(&mut r);
        layout::register(&mut r);
        loss::register(&mut r);
        math::register(&mut r);
        misc::register(&mut r);
        norm::register(&mut r);
        normalize::register(&mut r);
        pool::register(&mut r);
        quant::register(&mut r);
        reduce::register(&mut r);
        resize::register(&mut r);
        rnn::register(&mut r);
        roi::register(&mut r);
        sampling::register(&mut r);
        sequence::register(&mut r);
        shape::register(&mut r);
        signal::register(&mut r);
        text::register(&mut r);
        unary::register(&mut r);
        r
    })
}

/// Whether op `op_type` takes sequence inputs (the others take tensors only).
pub(crate) fn takes_sequences(op_type: &str) -> bool {
    sequence::SEQUENCE_INPUT_OPS.contains(&op_type)
}

/// A single-output result.
fn one(t: TensorId) -> Result<Vec<TensorId>, ImportError> {
    Ok(vec![t])
}

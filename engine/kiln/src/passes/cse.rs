//! Common-subexpression elimination: a layer computing what an earlier layer already computed
//! (same kind and parameters, same inputs) reads that layer's outputs instead. Small constants
//! of equal value count as the same input. Exported transformers rebuild the attention mask
//! from the same inputs in every layer; afterwards it is computed once.

use super::graph::{has_control_flow};
use crate::ir::rewrite::Rewriter;
use super::{Pass, PassContext, PassError};
use crate::ir::layer::LayerKind;
use crate::ir::network::{Network, TensorId};
use crate::ir::tensor::{HostTensor, TensorData};
use std::collections::HashMap;

/// Constants up to this many elements are compared by value; larger ones only by blob.
const VALUE_COMPARED_ELEMENTS: usize = 4096;

#[derive(Clone, Copy, Debug, Default)]
pub struct CommonSubexpressionElimination;

impl Pass for CommonSubexpressionElimination {
    fn name(&self) -> &'static str {
        "common-subexpression-elimination"
    }

    fn run(&self, network: &Network, _: &PassContext<'_>) -> Result<Option<Network>, PassError> {
        if has_control_flow(network) {
            return Ok(None);
        }
        let mut rb = Rewriter::new(network);
        let mut seen: HashMap<String, Vec<TensorId>> = HashMap::new();
        let mut changed = false;
        for (i, l) in network.layers().iter().enumerate() {
            // A network output keeps its producer: its name lives on it.
            let is_output = l.outputs.iter().any(|t| network.outputs().contains(t));
            let Some(key) = key(network, &rb, &l.kind, &l.inputs, &l.outputs)? else {
                rb.keep(i)?;
                continue;
            };
            match seen.get(&key) {
                Some(earlier) if !is_output => {
                    for (&t, &to) in l.outputs.iter().zip(earlier) {
                        rb.alias(t, to);
                    }
                    changed = true;
                }
                _ => {
                    rb.keep(i)?;
                    let outputs = l.outputs.iter().map(|&t| rb.get(t)).collect::<Result<Vec<_>, _>>()?;
                    seen.entry(key).or_insert(outputs);
                }
            }
        }
        Ok(if changed { Some(rb.finish_as_source()?) } else { None })
    }
}

/// What identifies the layer's computation: its kind and parameters, its inputs as they are in
/// the new network, and its outputs' types and shapes. `None` for layers never merged: those
/// with effects or opaque state (assertions, plugins).
fn key(
    net: &Network,
    rb: &Rewriter<'_>,
    kind: &LayerKind,
    inputs: &[Option<TensorId>],
    outputs: &[TensorId],
) -> Result<Option<String>, PassError> {
    let what = match kind {
        LayerKind::Assertion { .. } | LayerKind::Plugin(_) => return Ok(None),
        LayerKind::Constant { weights } => match net.weights_blob(*weights) {
            Some(w) if w.len() <= VALUE_COMPARED_ELEMENTS => {
                format!("Constant {} {:?} {:?}", w.dtype(), w.shape(), value_key(w))
            }
            _ => format!("{kind:?}"),
        },
        _ => format!("{kind:?}"),
    };
    let inputs = rb.get_slots(inputs)?;
    let outs: Vec<String> =
        outputs.iter().map(|&t| format!("{}{}", net.tensor(t).dtype, net.tensor(t).shape)).collect();
    Ok(Some(format!("{what} <- {inputs:?} -> {outs:?}")))
}

/// The exact value: its bytes, or its strings.
fn value_key(w: &HostTensor) -> String {
    match w.data() {
        TensorData::String(v) => format!("{v:?}"),
        data => format!("{:?}", data.to_le_bytes()),
    }
}

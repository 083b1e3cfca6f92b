//! ONNX sequences, which kiln's engines do not have as values: the importer tracks each
//! sequence at build time and lowers the ops on it to tensor layers.
//!
//! A sequence is either a list of tensors known one by one (`SequenceConstruct`,
//! `SplitToSequence` along a fixed-length axis, inserts at constant positions), or the
//! slices along axis 0 of one tensor, whose count is known only at run time: what a loop
//! that appends to a list produces (PyTorch's exporter emits `SequenceEmpty` before the
//! loop, `SequenceInsert` in its body and `ConcatFromSequence` after it). Such a loop is
//! rewritten before import so that the appended tensor becomes a scan output, which kiln
//! concatenates along a new axis 0 (a CONCATENATE loop output).

use crate::error::ImportError;
use crate::graph::GraphImporter;
use crate::proto::{GraphProto, NodeProto, ValueInfoProto};
use kiln::{DataType, LayerKind, ShuffleParams, TensorId};

#[derive(Clone, Debug)]
pub(crate) enum Sequence {
    /// Elements known one by one at build time (possibly none); `dtype` is the element type
    /// an empty sequence was declared with.
    Elements { dtype: Option<DataType>, items: Vec<TensorId> },
    /// The slices along axis 0 of one tensor.
    Stacked(TensorId),
}

/// A loop-carried sequence the rewrite turned into a scan output.
struct Appended {
    /// The sequence's value before the loop.
    initial: Sequence,
    /// The Loop output that names the final sequence (may be empty: unused).
    output: String,
    /// The name the rewritten Loop gives the stacked tensor.
    stacked: String,
}

/// Whether `graph` or any subgraph inside it reads the value `name`.
fn reads(graph: &GraphProto, name: &str) -> bool {
    graph.output.iter().any(|o| o.name() == name)
        || graph.node.iter().any(|n| {
            n.input.iter().any(|i| i == name)
                || n.attribute.iter().any(|a| a.g.as_ref().is_some_and(|g| reads(g, name)) || a.graphs.iter().any(|g| reads(g, name)))
        })
}

impl GraphImporter<'_> {
    /// A Loop with loop-carried sequences: each must start as a sequence the importer knows
    /// and grow by one append per iteration (`SequenceInsert(carried, t)` with no position
    /// being the body's next value, the carried value read nowhere else). The Loop is
    /// imported with `t` as an extra scan output; the final sequence is the initial elements
    /// followed by the stacked appends.
    pub(crate) fn import_loop_with_sequences(&mut self, index: usize, node: &NodeProto, name: &str) -> Result<(), ImportError> {
        let invalid = |reason: String| ImportError::UnsupportedFeature {
            node: name.to_string(),
            op_type: "Loop".into(),
            feature: reason,
        };
        let mut node = node.clone();
        let Some(body_attr) = node.attribute.iter_mut().find(|a| a.name() == "body") else {
            return Err(ImportError::InvalidModel { node: name.into(), reason: "Loop needs a body".into() });
        };
        let Some(body) = body_attr.g.as_mut() else {
            return Err(ImportError::InvalidModel { node: name.into(), reason: "the body attribute is not a graph".into() });
        };
        let carried = node.input.len().saturating_sub(2);
        if body.input.len() != 2 + carried || body.output.len() < 1 + carried {
            return Err(ImportError::InvalidModel {
                node: name.into(),
                reason: "the body's inputs and outputs do not match the loop-carried values".into(),
            });
        }
        // Every output slot named, so that removing and appending keeps positions right.
        let total_outputs = body.output.len() - 1;
        node.output.resize(node.output.len().max(total_outputs), String::new());
        let mut appended = Vec::new();
        for c in (0..carried).rev() {
            let Some(initial) = self.sequences.get(&node.input[2 + c]).cloned() else {
                continue;
            };
            let seq_in = body.input[2 + c].name().to_string();
            let seq_out = body.output[1 + c].name().to_string();
            let insert = body.node.iter().position(|n| n.output.first().is_some_and(|o| *o == seq_out));
            let appended_value = insert.and_then(|i| {
                let n = &body.node[i];
                let plain = n.op_type() == "SequenceInsert"
                    && n.input.first().is_some_and(|s| *s == seq_in)
                    && n.input.get(2).is_none_or(String::is_empty);
                plain.then(|| (i, n.input.get(1).cloned().unwrap_or_default()))
            });
            let Some((insert, value)) = appended_value.filter(|(_, v)| !v.is_empty()) else {
                return Err(invalid(format!(
                    "loop-carried sequence `{seq_in}` is not grown by one SequenceInsert at its end per iteration \
                     (kiln lowers sequences in loops only for that pattern)"
                )));
            };
            body.node.remove(insert);
            if reads(body, &seq_in) {
                return Err(invalid(format!(
                    "loop-carried sequence `{seq_in}` is read in the body besides being appended to \
                     (kiln lowers sequences in loops only when they are appended to and read after the loop)"
                )));
            }
            body.input.remove(2 + c);
            body.output.remove(1 + c);
            body.output.push(ValueInfoProto { name: Some(value), ..Default::default() });
            node.input.remove(2 + c);
            let output = node.output.remove(c);
            let stacked = format!("{} (stacked {c})", if output.is_empty() { name } else { output.as_str() });
            node.output.push(stacked.clone());
            appended.push(Appended { initial, output, stacked });
        }
        self.import_node(index, &node)?;
        for a in appended {
            let stacked = self.values.remove(&a.stacked).ok_or_else(|| invalid("the rewritten loop lost its scan output".into()))?;
            let full = self.prepend(name, &a.initial, stacked)?;
            if !a.output.is_empty() {
                self.sequences.insert(a.output, Sequence::Stacked(full));
            }
        }
        Ok(())
    }

    /// `initial`'s elements followed by the slices of `stacked`, as one stacked tensor.
    fn prepend(&mut self, node: &str, initial: &Sequence, stacked: TensorId) -> Result<TensorId, ImportError> {
        let net_error = |source| ImportError::Network { node: node.to_string(), source };
        let dtype = self.net.tensor(stacked).dtype;
        let mut parts = match initial {
            Sequence::Elements { dtype: Some(d), items } if items.is_empty() && *d != dtype => {
                return Err(ImportError::InvalidModel {
                    node: node.to_string(),
                    reason: format!("a sequence of {d} is appended {dtype} values"),
                })
            }
            Sequence::Elements { items, .. } if items.is_empty() => return Ok(stacked),
            Sequence::Elements { items, .. } => {
                let mut parts = Vec::with_capacity(items.len() + 1);
                for &item in items {
                    let Some(dims) = self.net.tensor(item).shape.as_fixed() else {
                        return Err(ImportError::UnsupportedFeature {
                            node: node.to_string(),
                            op_type: "Loop".into(),
                            feature: "appending to a non-empty sequence whose elements have dynamic shapes".into(),
                        });
                    };
                    let reshape = std::iter::once(1).chain(dims.iter().map(|&d| d as i64)).collect();
                    let kind = LayerKind::Shuffle(ShuffleParams { reshape: Some(reshape), ..Default::default() });
                    let layer = self.net.add_layer(&format!("{node}/initial element"), kind, vec![Some(item)]).map_err(net_error)?;
                    parts.push(Some(self.net.output(layer, 0)));
                }
                parts
            }
            Sequence::Stacked(t) => vec![Some(*t)],
        };
        parts.push(Some(stacked));
        let layer = self
            .net
            .add_layer(&format!("{node}/with initial elements"), LayerKind::Concatenation { axis: 0 }, parts)
            .map_err(net_error)?;
        Ok(self.net.output(layer, 0))
    }
}

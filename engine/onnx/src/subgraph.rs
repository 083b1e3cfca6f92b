//! Subgraphs: Loop and Scan bodies and If branches, imported into the same flat network.
//!
//! A subgraph sees its own values first, then those of the enclosing graphs (ONNX's outer
//! scope references). In an If branch, every outer value is read through an
//! IfConditionalInput of that conditional, so the branch's layers run lazily, only when the
//! branch is taken; in a loop body outer values are loop invariants and are read directly.
//!
//! While a node's builder runs, the network lives in its `NodeContext` (the importer holds an
//! empty one); [`Subgraphs::import_subgraph`] moves it back into the importer for the
//! duration of the subgraph's import.

use crate::error::ImportError;
use crate::graph::{execution_order, node_name, GraphImporter};
use crate::proto::{GraphProto, NodeProto};
use crate::sequence::Sequence;
use crate::tensor::host_tensor;
use kiln::{ConditionalId, LayerKind, Network, TensorId};
use std::collections::HashMap;

/// What a node builder may import its graph attributes with.
pub(crate) trait Subgraphs {
    /// Imports `graph` into `net`, binding its inputs in order to `inputs`. With
    /// `branch_of`, the graph is a branch of that conditional. Returns its outputs' tensors.
    fn import_subgraph(
        &mut self,
        net: &mut Network,
        graph: &GraphProto,
        inputs: &[TensorId],
        branch_of: Option<ConditionalId>,
        node: &str,
    ) -> Result<Vec<TensorId>, ImportError>;
}

/// An enclosing graph's state while one of its subgraphs imports.
pub(crate) struct OuterScope {
    values: HashMap<String, TensorId>,
    branch_of: Option<ConditionalId>,
    sequences: HashMap<String, Sequence>,
    /// The node whose attribute is being imported (names the subgraph's layers).
    node: String,
}

impl Subgraphs for GraphImporter<'_> {
    fn import_subgraph(
        &mut self,
        net: &mut Network,
        graph: &GraphProto,
        inputs: &[TensorId],
        branch_of: Option<ConditionalId>,
        node: &str,
    ) -> Result<Vec<TensorId>, ImportError> {
        std::mem::swap(&mut self.net, net);
        self.outer.push(OuterScope {
            values: std::mem::take(&mut self.values),
            branch_of: std::mem::replace(&mut self.branch_of, branch_of),
            sequences: std::mem::take(&mut self.sequences),
            node: node.to_string(),
        });
        let result = self.import_scope(graph, inputs, node);
        if let Some(scope) = self.outer.pop() {
            self.values = scope.values;
            self.branch_of = scope.branch_of;
            self.sequences = scope.sequences;
        }
        std::mem::swap(&mut self.net, net);
        result
    }
}

impl GraphImporter<'_> {
    fn import_scope(&mut self, graph: &GraphProto, inputs: &[TensorId], node: &str) -> Result<Vec<TensorId>, ImportError> {
        let invalid = |reason: String| ImportError::InvalidModel { node: node.to_string(), reason };
        if graph.input.len() != inputs.len() {
            return Err(invalid(format!(
                "subgraph `{}` declares {} inputs but the node provides {}",
                graph.name(),
                graph.input.len(),
                inputs.len()
            )));
        }
        for (info, &t) in graph.input.iter().zip(inputs) {
            self.values.insert(info.name().to_string(), t);
        }
        // A subgraph's own initializers are constants: made at once, hoisted by the builder.
        for init in &graph.initializer {
            let value = host_tensor(init, "", self.model_dir)?;
            let weights = self.net.add_weights(value);
            let layer = self
                .net
                .add_layer(&format!("{node}/{}", init.name()), LayerKind::Constant { weights }, vec![])
                .map_err(|source| ImportError::Network { node: node.to_string(), source })?;
            let t = self.net.output(layer, 0);
            self.values.insert(init.name().to_string(), t);
        }
        for index in execution_order(&graph.node)? {
            self.import_node(index, &graph.node[index])?;
        }
        graph
            .output
            .iter()
            .map(|o| {
                if self.sequences.contains_key(o.name()) {
                    return Err(invalid(format!(
                        "subgraph output `{}` is a sequence (kiln lowers a loop's sequences only when each iteration appends one element)",
                        o.name()
                    )));
                }
                self.lookup(o.name())?.ok_or_else(|| {
                    invalid(format!("subgraph output `{}` is not produced by any node, input or outer value", o.name()))
                })
            })
            .collect()
    }

    /// A value of an enclosing graph (or a main-graph initializer), read through an
    /// IfConditionalInput for each conditional branch between its scope and this one.
    pub(crate) fn lookup_outer(&mut self, name: &str) -> Result<Option<TensorId>, ImportError> {
        let depth = self.outer.len();
        let found = (0..depth).rev().find_map(|level| self.outer[level].values.get(name).map(|&t| (level, t)));
        let (level, mut t) = match found {
            Some(hit) => hit,
            None => match self.lookup_initializer(name)? {
                Some(t) => (0, t),
                None => return Ok(None),
            },
        };
        // The scope at level `l` is a branch when the importer recorded one on entering it:
        // scope l's own `branch_of` is saved in outer[l] for l < depth, current otherwise.
        for inner in level + 1..=depth {
            let branch = if inner == depth { self.branch_of } else { self.outer[inner].branch_of };
            if let Some(conditional) = branch {
                t = self.capture(conditional, t, name)?;
            }
        }
        Ok(Some(t))
    }

    fn capture(&mut self, conditional: ConditionalId, t: TensorId, name: &str) -> Result<TensorId, ImportError> {
        if let Some(&captured) = self.captures.get(&(conditional.0, t)) {
            return Ok(captured);
        }
        let node = self.outer.last().map(|o| o.node.clone()).unwrap_or_default();
        let layer = self
            .net
            .add_if_input(conditional, t)
            .map_err(|source| ImportError::Network { node: node.clone(), source })?;
        self.net.set_layer_name(layer, &format!("{node}/input {name}"));
        let captured = self.net.output(layer, 0);
        self.captures.insert((conditional.0, t), captured);
        Ok(captured)
    }

    /// Names a subgraph value. Subgraph values never take a name from a tensor of the main
    /// graph: its inputs and outputs keep their ONNX names.
    pub(crate) fn bind_in_subgraph(&mut self, t: TensorId, name: &str, node: &str) -> Result<(), ImportError> {
        if self.values.contains_key(name) {
            return Err(ImportError::InvalidModel {
                node: node.to_string(),
                reason: format!("value `{name}` is defined more than once in its subgraph"),
            });
        }
        if !self.onnx_named.contains(&t) && !self.net.inputs().contains(&t) {
            let scoped = format!("{node}:{name}");
            if self.net.find_tensor(&scoped).is_none() {
                self.net
                    .set_tensor_name(t, &scoped)
                    .map_err(|source| ImportError::Network { node: node.to_string(), source })?;
            }
            self.onnx_named.insert(t);
        }
        self.values.insert(name.to_string(), t);
        Ok(())
    }

    /// A node's name, prefixed inside a subgraph with the node that holds the subgraph.
    pub(crate) fn node_name_in_scope(&self, node: &NodeProto, index: usize) -> String {
        match self.outer.last() {
            Some(scope) if node.name().is_empty() => format!("{}/{}", scope.node, node_name(node, index)),
            _ => node_name(node, index),
        }
    }
}

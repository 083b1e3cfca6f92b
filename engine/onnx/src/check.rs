//! The import capability check: imports a model node by node as [`crate::import_model`]
//! does, but records each node that fails and goes on, so that one pass names every node
//! kiln cannot import (for `kiln inspect`, and for `kiln build`'s error), not only the first.
//!
//! A failed node's outputs become placeholder network inputs, of the type and shape the
//! model declares for them (`value_info` or the graph outputs), else f32 scalars, so that the
//! nodes after it are still checked. A later node that fails while reading a value computed
//! from a placeholder may fail only because the placeholder's shape is a guess: it is
//! reported apart, as downstream, unless its op is unknown (which no input changes).
//! Initializers whose external data cannot be read get stand-ins the same way, so that a
//! missing data file is reported once, not as a failure of every node that reads a weight.

use crate::error::ImportError;
use crate::graph::{execution_order, is_default_domain, node_name, opset_versions, tensor_type, GraphImporter};
use crate::proto::{ModelProto, NodeProto, ValueInfoProto};
use kiln::{DataType, Network, Shape};
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// What the capability check found.
#[derive(Debug)]
pub struct CheckReport {
    /// How many nodes the main graph has.
    pub nodes: usize,
    /// The nodes kiln cannot import, in import order.
    pub unsupported: Vec<NodeIssue>,
    /// Nodes that failed reading a value computed from a failed node's placeholder: they may
    /// import once the nodes before them do.
    pub downstream: Vec<NodeIssue>,
    /// Initializers whose external data could not be read, with why: the nodes were checked
    /// with stand-ins of their declared type and dims (an import fails on the first).
    pub unreadable_data: Vec<(String, ImportError)>,
    /// Why the graph as a whole fails after its nodes (an output nothing produces), if it does.
    pub graph_error: Option<ImportError>,
    /// The network imported with placeholders for failed nodes' outputs: a backend can check
    /// its layers, but it is not the model's network unless [`CheckReport::imports`].
    pub network: Network,
}

impl CheckReport {
    /// Whether the model imports: no node failed and the graph is whole.
    pub fn imports(&self) -> bool {
        self.unsupported.is_empty()
            && self.downstream.is_empty()
            && self.graph_error.is_none()
            && self.unreadable_data.is_empty()
    }
}

/// One node that failed to import.
#[derive(Debug)]
pub struct NodeIssue {
    /// The node's name (`op_type` + index when the model leaves it empty).
    pub node: String,
    pub op_type: String,
    /// The node's domain as the model spells it ("" for the default domain).
    pub domain: String,
    /// Why it failed: the error a plain import would stop at.
    pub error: ImportError,
}

impl NodeIssue {
    /// Whether the node is an op of a custom domain that no loaded plugin provides (a
    /// plugin library may).
    pub fn wants_plugin(&self) -> bool {
        !is_default_domain(&self.domain) && matches!(self.error, ImportError::UnsupportedOp { .. })
    }
}

/// Checks a decoded model; fails only where no node can be checked (no graph, bad opset
/// imports or graph inputs, a cycle).
pub(crate) fn check_model(model: &ModelProto, model_dir: Option<&Path>) -> Result<CheckReport, ImportError> {
    let graph = model.graph.as_ref().ok_or_else(|| ImportError::graph("the model has no graph"))?;
    let opsets = opset_versions(model)?;
    let name = if graph.name().is_empty() { "onnx" } else { graph.name() };
    let mut importer = GraphImporter::new(name, graph, model_dir, opsets);
    importer.unreadable_data = Some(Vec::new());
    importer.add_graph_inputs(graph)?;
    let mut unsupported = Vec::new();
    let mut downstream = Vec::new();
    // ONNX values computed from placeholders (placeholders included).
    let mut guessed: HashSet<String> = HashSet::new();
    let mut unread_seen = 0;
    // Declared types of every value, looked up once per failed node's output.
    let declared: HashMap<&str, &ValueInfoProto> =
        graph.value_info.iter().chain(&graph.output).map(|v| (v.name(), v)).rev().collect();
    for index in execution_order(&graph.node)? {
        let node = &graph.node[index];
        let result = importer.import_graph_node(&graph.node, index);
        // Initializers this node made whose data could not be read are guesses too.
        let unread = importer.unreadable_data.as_deref().unwrap_or_default();
        guessed.extend(unread[unread_seen..].iter().map(|(name, _)| name.clone()));
        unread_seen = unread.len();
        let reads_guess = reads_any(node, &guessed);
        let Err(error) = result else {
            if reads_guess {
                guessed.extend(node.output.iter().filter(|o| !o.is_empty()).cloned());
            }
            continue;
        };
        let name = node_name(node, index);
        for output in node.output.iter().filter(|o| !o.is_empty()) {
            if !importer.values.contains_key(output) && !importer.sequences.contains_key(output) {
                add_placeholder(&mut importer, declared.get(output.as_str()).copied(), output, &name)?;
            }
            guessed.insert(output.clone());
        }
        let issue = NodeIssue { node: name, op_type: node.op_type().to_string(), domain: node.domain().to_string(), error };
        if reads_guess && !matches!(issue.error, ImportError::UnsupportedOp { .. }) {
            downstream.push(issue);
        } else {
            unsupported.push(issue);
        }
    }
    let mut graph_error = importer.mark_outputs(graph).err();
    // Declared output types are compared only against a network computed without guesses.
    if graph_error.is_none() && unsupported.is_empty() && downstream.is_empty() {
        graph_error = crate::declared::check_outputs(graph, &importer.net).err();
    }
    let unreadable_data = importer.unreadable_data.take().unwrap_or_default();
    Ok(CheckReport { nodes: graph.node.len(), unsupported, downstream, graph_error, unreadable_data, network: importer.net })
}

/// Whether the node reads one of `values`, directly or from a subgraph (an If branch or a
/// loop body may read outer values without listing them as the node's inputs).
fn reads_any(node: &NodeProto, values: &HashSet<String>) -> bool {
    node.input.iter().any(|i| values.contains(i))
        || node
            .attribute
            .iter()
            .flat_map(|a| a.g.iter().chain(&a.graphs))
            .flat_map(|g| &g.node)
            .any(|n| reads_any(n, values))
}

/// Defines ONNX value `name`, an output of failed node `node`, as a stand-in of the type and
/// shape the model declares for it, else an f32 scalar.
fn add_placeholder(
    importer: &mut GraphImporter<'_>,
    declared: Option<&ValueInfoProto>,
    name: &str,
    node: &str,
) -> Result<(), ImportError> {
    let (dtype, shape) = declared.and_then(|v| tensor_type(v).ok()).unwrap_or((DataType::F32, Shape(Vec::new())));
    importer.add_stand_in(name, dtype, shape, node).map(drop)
}

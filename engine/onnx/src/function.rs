//! ONNX function bodies: ops the standard defines as a graph of other ops (AffineGrid, the
//! window functions, SwiGLU, …) are inlined when kiln has no builder of its own for them.
//!
//! The bodies come from the onnx package (`scripts/onnx_functions.py` writes
//! `onnx_functions.pb`), so the importer needs no Python. Inlining renames the body's values
//! into the node's scope (`node/value`), binds its formal inputs and outputs to the node's,
//! resolves attribute references (`ref_attr_name`) against the node's attributes or the
//! function's defaults, and imports the body's nodes at the function's own opset.

use crate::context_function::{self, Call, InputType};
use crate::error::ImportError;
use crate::graph::GraphImporter;
use crate::proto::{AttributeProto, FunctionProto, GraphProto, ModelProto, NodeProto};
use prost::Message;
use std::collections::HashMap;
use std::sync::OnceLock;

const BODIES: &[u8] = include_bytes!("onnx_functions.pb");

/// How deep function bodies may inline into one another.
const MAX_DEPTH: usize = 8;

/// Each op's bodies, by ascending `since_version`.
fn library() -> &'static HashMap<String, Vec<(i64, FunctionProto)>> {
    static LIBRARY: OnceLock<HashMap<String, Vec<(i64, FunctionProto)>>> = OnceLock::new();
    LIBRARY.get_or_init(|| {
        let mut ops: HashMap<String, Vec<(i64, FunctionProto)>> = HashMap::new();
        // The file is kiln's own, written by the script; an undecodable one gives no bodies.
        for f in ModelProto::decode(BODIES).map(|m| m.functions).unwrap_or_default() {
            let Some((op, since)) = f.name().split_once(':') else { continue };
            let Ok(since) = since.parse::<i64>() else { continue };
            ops.entry(op.to_string()).or_default().push((since, f));
        }
        for bodies in ops.values_mut() {
            bodies.sort_by_key(|(since, _)| *since);
        }
        ops
    })
}

/// The body of default-domain op `op_type` in effect at `opset`, if the standard gives one.
pub(crate) fn body(op_type: &str, opset: i64) -> Option<&'static FunctionProto> {
    library().get(op_type)?.iter().rev().find(|(since, _)| *since <= opset).map(|(_, f)| f)
}

/// The names a body's values take in the calling graph.
struct Renaming<'a> {
    names: HashMap<String, String>,
    call: &'a NodeProto,
    function: &'a FunctionProto,
}

impl Renaming<'_> {
    fn name(&self, value: &str) -> String {
        self.names.get(value).cloned().unwrap_or_else(|| value.to_string())
    }

    /// An attribute of a body node: a reference resolves to the call's attribute or the
    /// function's default (`None`: neither, the attribute is left out).
    fn attribute(&self, a: &AttributeProto) -> Option<AttributeProto> {
        let mut resolved = match a.ref_attr_name.as_deref().filter(|r| !r.is_empty()) {
            Some(reference) => {
                let source = self
                    .call
                    .attribute
                    .iter()
                    .chain(&self.function.attribute_proto)
                    .find(|c| c.name() == reference)?;
                AttributeProto { name: a.name.clone(), ref_attr_name: None, ..source.clone() }
            }
            None => a.clone(),
        };
        if let Some(g) = resolved.g.as_mut() {
            self.graph(g);
        }
        for g in &mut resolved.graphs {
            self.graph(g);
        }
        Some(resolved)
    }

    fn node(&self, n: &NodeProto) -> NodeProto {
        NodeProto {
            input: n.input.iter().map(|i| if i.is_empty() { String::new() } else { self.name(i) }).collect(),
            output: n.output.iter().map(|o| if o.is_empty() { String::new() } else { self.name(o) }).collect(),
            attribute: n.attribute.iter().filter_map(|a| self.attribute(a)).collect(),
            ..n.clone()
        }
    }

    /// A subgraph inside the body reads the body's values under their new names.
    fn graph(&self, g: &mut GraphProto) {
        for n in &mut g.node {
            *n = self.node(n);
        }
        for o in &mut g.output {
            o.name = Some(self.name(o.name()));
        }
    }
}

impl GraphImporter<'_> {
    /// Imports `node` by inlining the body [`crate::context_function`] writes for it from
    /// its attributes and its inputs' types.
    pub(crate) fn import_context_function(&mut self, node: &NodeProto, name: &str, domain: &str) -> Result<(), ImportError> {
        let mut inputs = Vec::with_capacity(node.input.len());
        for value in &node.input {
            if value.is_empty() {
                inputs.push(None);
                continue;
            }
            let t = self.lookup(value)?.ok_or_else(|| ImportError::InvalidModel {
                node: name.to_string(),
                reason: format!("input `{value}` is not produced by any node, initializer or graph input"),
            })?;
            let tensor = self.net.tensor(t);
            inputs.push(Some(InputType { dtype: tensor.dtype, dims: tensor.shape.dims().to_vec() }));
        }
        // Bodies use default-domain ops; a model that imports only the op's own domain
        // gets the body's opset.
        let opset = self.default_opset().unwrap_or(0);
        let call = Call { node, inputs, opset };
        let function = context_function::body(domain, &call).map_err(|feature| ImportError::UnsupportedFeature {
            node: name.to_string(),
            op_type: node.op_type().to_string(),
            feature,
        })?;
        let previous = self.default_opset();
        let result = self.import_function(node, name, &function);
        if previous.is_none() {
            self.clear_default_opset();
        }
        result
    }

    /// Imports `node` by inlining `function`, its op's body.
    pub(crate) fn import_function(&mut self, node: &NodeProto, name: &str, function: &FunctionProto) -> Result<(), ImportError> {
        if self.inline_depth >= MAX_DEPTH {
            return Err(ImportError::InvalidModel {
                node: name.to_string(),
                reason: format!("function bodies nest deeper than {MAX_DEPTH}"),
            });
        }
        let mut names = HashMap::new();
        for (i, formal) in function.input.iter().enumerate() {
            names.insert(formal.clone(), node.input.get(i).cloned().unwrap_or_default());
        }
        for (i, formal) in function.output.iter().enumerate() {
            let actual = node.output.get(i).filter(|o| !o.is_empty()).cloned();
            names.insert(formal.clone(), actual.unwrap_or_else(|| format!("{name}/{formal}")));
        }
        for n in &function.node {
            for o in n.output.iter().filter(|o| !o.is_empty()) {
                names.entry(o.clone()).or_insert_with(|| format!("{name}/{o}"));
            }
        }
        let renaming = Renaming { names, call: node, function };
        let body: Vec<NodeProto> = function
            .node
            .iter()
            .enumerate()
            .map(|(k, n)| {
                let mut renamed = renaming.node(n);
                renamed.name = Some(format!("{name}/{}{k}", n.op_type()));
                renamed
            })
            .collect();
        let opset = function.opset_import.iter().find(|o| o.domain().is_empty() || o.domain() == "ai.onnx");
        let saved = opset.map(|o| self.set_default_opset(o.version()));
        self.inline_depth += 1;
        let result = body.iter().enumerate().try_for_each(|(k, n)| self.import_node(k, n));
        self.inline_depth -= 1;
        if let Some(previous) = saved {
            self.set_default_opset(previous);
        }
        result
    }
}

//! The graph walk: opsets, graph inputs, initializers, nodes in dependency order, outputs.

use crate::attributes::Attributes;
use crate::context::NodeContext;
use crate::error::ImportError;
use crate::ops::{registry, MAX_OPSET};
use crate::sequence::Sequence;
use crate::proto::tensor_shape_proto::dimension::Value as DimValue;
use crate::proto::type_proto::Value as TypeValue;
use crate::proto::{GraphProto, ModelProto, NodeProto, TensorProto, ValueInfoProto};
use crate::tensor::{dtype_from_onnx, host_tensor};
use kiln::{Dim, LayerKind, Network, Shape, TensorId};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::path::Path;

/// What turns one node into layers: an op's builder, or a plugin's.
type NodeBuilder = dyn Fn(&mut NodeContext<'_>) -> Result<Vec<TensorId>, ImportError>;

/// The default ONNX domain, as nodes and opset imports may spell it.
pub(crate) fn is_default_domain(domain: &str) -> bool {
    domain.is_empty() || domain == "ai.onnx"
}

/// Opset version per domain (the default domain under the key "").
pub(crate) fn opset_versions(model: &ModelProto) -> Result<HashMap<String, i64>, ImportError> {
    let mut versions = HashMap::new();
    for import in &model.opset_import {
        let domain = if is_default_domain(import.domain()) { "" } else { import.domain() };
        let version = import.version();
        if version < 1 {
            return Err(ImportError::graph(format!("opset_import of domain `{domain}` has version {version}")));
        }
        let entry = versions.entry(domain.to_string()).or_insert(version);
        *entry = (*entry).max(version);
    }
    // Models before IR version 3 had no opset_import: they mean opset 1. Later models may
    // use other domains only; a default-domain node in them is an error at that node.
    if !versions.contains_key("") && model.ir_version() < 3 {
        versions.insert(String::new(), 1);
    }
    Ok(versions)
}

/// The network, and warnings about what the model declares that kiln does not follow.
pub(crate) fn import_model(model: &ModelProto, model_dir: Option<&Path>) -> Result<(Network, Vec<String>), ImportError> {
    let graph = model.graph.as_ref().ok_or_else(|| ImportError::graph("the model has no graph"))?;
    let opsets = opset_versions(model)?;
    let name = if graph.name().is_empty() { "onnx" } else { graph.name() };
    let mut importer = GraphImporter::new(name, graph, model_dir, opsets);
    importer.add_graph_inputs(graph)?;
    for index in execution_order(&graph.node)? {
        importer.import_graph_node(&graph.node, index)?;
    }
    importer.mark_outputs(graph)?;
    let warnings = crate::declared::check_outputs(graph, &importer.net)?;
    Ok((importer.net, warnings))
}

/// Node indices in an order where every node follows the producers of its inputs: the
/// model's own order when it is already valid, else a stable topological sort.
pub(crate) fn execution_order(nodes: &[NodeProto]) -> Result<Vec<usize>, ImportError> {
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (i, node) in nodes.iter().enumerate() {
        for out in node.output.iter().filter(|o| !o.is_empty()) {
            if producer.insert(out.as_str(), i).is_some() {
                return Err(ImportError::InvalidModel {
                    node: node_name(node, i),
                    reason: format!("value `{out}` is produced by more than one node"),
                });
            }
        }
    }
    let producers_of = |node: &NodeProto| -> Vec<usize> {
        node.input.iter().filter_map(|name| producer.get(name.as_str()).copied()).collect()
    };
    let in_order = nodes.iter().enumerate().all(|(i, n)| producers_of(n).iter().all(|&p| p < i));
    if in_order {
        return Ok((0..nodes.len()).collect());
    }
    let mut waiting: Vec<usize> = vec![0; nodes.len()];
    let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (i, node) in nodes.iter().enumerate() {
        for p in producers_of(node) {
            waiting[i] += 1;
            consumers[p].push(i);
        }
    }
    let mut ready: BinaryHeap<Reverse<usize>> = (0..nodes.len()).filter(|&i| waiting[i] == 0).map(Reverse).collect();
    let mut order = Vec::with_capacity(nodes.len());
    while let Some(Reverse(i)) = ready.pop() {
        order.push(i);
        for &c in &consumers[i] {
            waiting[c] -= 1;
            if waiting[c] == 0 {
                ready.push(Reverse(c));
            }
        }
    }
    if let Some(stuck) = (0..nodes.len()).find(|&i| waiting[i] > 0) {
        return Err(ImportError::InvalidModel {
            node: node_name(&nodes[stuck], stuck),
            reason: "the node is part of a cycle".into(),
        });
    }
    Ok(order)
}

/// The node's name, or `op_type` + index when the model leaves it empty.
pub(crate) fn node_name(node: &NodeProto, index: usize) -> String {
    if node.name().is_empty() {
        format!("{}{index}", node.op_type())
    } else {
        node.name().to_string()
    }
}

pub(crate) struct GraphImporter<'m> {
    /// The network being built. While a node's builder runs, the network lives in its
    /// `NodeContext` and this holds an empty one (see [`crate::subgraph`]).
    pub(crate) net: Network,
    /// Every ONNX value of the graph being imported (the innermost subgraph), by name.
    pub(crate) values: HashMap<String, TensorId>,
    /// The enclosing graphs' values while a subgraph imports, outermost first.
    pub(crate) outer: Vec<crate::subgraph::OuterScope>,
    /// The conditional whose branch is being imported, when it is one.
    pub(crate) branch_of: Option<kiln::ConditionalId>,
    /// IfConditionalInput layers made for outer values read in a branch, by conditional
    /// and outer tensor.
    pub(crate) captures: HashMap<(usize, TensorId), TensorId>,
    /// The sequences of the graph being imported, by ONNX value name.
    pub(crate) sequences: HashMap<String, Sequence>,
    /// How many function bodies are being inlined one inside the other.
    pub(crate) inline_depth: usize,
    opsets: HashMap<String, i64>,
    /// Initializers not yet turned into Constant layers (they are, on first use).
    initializers: HashMap<&'m str, &'m TensorProto>,
    sparse_initializers: HashSet<&'m str>,
    /// Tensors that carry an ONNX value name.
    pub(crate) onnx_named: HashSet<TensorId>,
    pub(crate) model_dir: Option<&'m Path>,
    /// Capability checks only ([`crate::check`]): initializers whose external data cannot
    /// be read, with why. Each becomes a network input of its declared type and dims, so a
    /// missing data file does not hide what the nodes themselves would do. `None` in an
    /// import, where such an initializer is an error.
    pub(crate) unreadable_data: Option<Vec<(String, ImportError)>>,
}

impl<'m> GraphImporter<'m> {
    pub(crate) fn new(name: &str, graph: &'m GraphProto, model_dir: Option<&'m Path>, opsets: HashMap<String, i64>) -> Self {
        GraphImporter {
            net: Network::new(name),
            values: HashMap::new(),
            outer: Vec::new(),
            branch_of: None,
            captures: HashMap::new(),
            sequences: HashMap::new(),
            inline_depth: 0,
            opsets,
            initializers: graph.initializer.iter().map(|t| (t.name(), t)).collect(),
            sparse_initializers: graph
                .sparse_initializer
                .iter()
                .filter_map(|s| s.values.as_ref())
                .map(|v| v.name())
                .collect(),
            onnx_named: HashSet::new(),
            model_dir,
            unreadable_data: None,
        }
    }

    /// Graph inputs become network inputs, except those an initializer provides (the
    /// IR < 4 convention of listing every initializer as an input).
    pub(crate) fn add_graph_inputs(&mut self, graph: &GraphProto) -> Result<(), ImportError> {
        for input in &graph.input {
            let name = input.name();
            if self.initializers.contains_key(name) {
                continue;
            }
            if name.is_empty() {
                return Err(ImportError::graph("a graph input has no name"));
            }
            let (dtype, shape) = tensor_type(input)?;
            let id = self
                .net
                .add_input(name, dtype, shape)
                .map_err(|e| ImportError::graph(format!("graph input `{name}`: {e}")))?;
            self.values.insert(name.to_string(), id);
            self.onnx_named.insert(id);
        }
        Ok(())
    }

    /// The model's default-domain opset, if it imports that domain.
    pub(crate) fn default_opset(&self) -> Option<i64> {
        self.opsets.get("").copied()
    }

    /// Forgets the default domain's opset (after a body imported into a model without one).
    pub(crate) fn clear_default_opset(&mut self) {
        self.opsets.remove("");
    }

    /// Sets the default domain's opset (function bodies import at their own); returns the
    /// previous one.
    pub(crate) fn set_default_opset(&mut self, version: i64) -> i64 {
        self.opsets.insert(String::new(), version).unwrap_or(version)
    }

    /// The tensor of an ONNX value, materializing an initializer on first use; in a
    /// subgraph, enclosing graphs' values are visible too.
    pub(crate) fn lookup(&mut self, name: &str) -> Result<Option<TensorId>, ImportError> {
        if let Some(&t) = self.values.get(name) {
            return Ok(Some(t));
        }
        if !self.outer.is_empty() {
            return self.lookup_outer(name);
        }
        self.lookup_initializer(name)
    }

    /// An initializer of the main graph as a Constant layer (made on first use).
    pub(crate) fn lookup_initializer(&mut self, name: &str) -> Result<Option<TensorId>, ImportError> {
        if self.sparse_initializers.contains(name) {
            return Err(ImportError::graph(format!(
                "initializer `{name}` is sparse; sparse tensors are not supported"
            )));
        }
        let Some(proto) = self.initializers.remove(name) else {
            return Ok(None);
        };
        let value = match host_tensor(proto, "", self.model_dir) {
            Ok(value) => value,
            Err(error @ ImportError::ExternalData { .. }) if self.unreadable_data.is_some() => {
                return self.stand_in_for_unreadable(proto, error).map(Some);
            }
            Err(error) => return Err(error),
        };
        let weights = self.net.add_weights(value);
        let layer = self
            .net
            .add_layer(name, LayerKind::Constant { weights }, vec![])
            .map_err(|e| ImportError::graph(format!("initializer `{name}`: {e}")))?;
        let t = self.net.output(layer, 0);
        self.claim_name(t, name, name)?;
        Ok(Some(t))
    }

    /// A network input standing in for initializer `proto`, whose data cannot be read
    /// (capability checks only); the error is recorded in `unreadable_data`.
    fn stand_in_for_unreadable(&mut self, proto: &TensorProto, error: ImportError) -> Result<TensorId, ImportError> {
        let name = proto.name();
        let Ok(dtype) = crate::tensor::dtype_from_onnx(proto.data_type()) else { return Err(error) };
        let Ok(dims) = proto.dims.iter().map(|&d| usize::try_from(d).map(Dim::Fixed)).collect::<Result<Vec<_>, _>>() else {
            return Err(error);
        };
        let t = self.add_stand_in(name, dtype, Shape(dims), name)?;
        self.unreadable_data.get_or_insert_with(Vec::new).push((name.to_string(), error));
        Ok(t)
    }

    /// Defines ONNX value `name` as a network input of `dtype` and `shape`: a stand-in for a
    /// value that could not be imported, while a capability check goes on past it.
    pub(crate) fn add_stand_in(&mut self, name: &str, dtype: kiln::DataType, shape: Shape, node: &str) -> Result<TensorId, ImportError> {
        // A free name first: the value's own name may be held by a helper tensor, which
        // claim_name moves aside.
        let free = (0..)
            .map(|i| format!("{name} (stand-in {i})"))
            .find(|n| self.net.find_tensor(n).is_none())
            .expect("some suffix is free");
        let t = self
            .net
            .add_input(&free, dtype, shape)
            .map_err(|source| ImportError::Network { node: node.to_string(), source })?;
        self.claim_name(t, name, node)?;
        Ok(t)
    }

    /// Imports node `index` of a main graph's `nodes`; a Gradient node differentiates the
    /// nodes before it.
    pub(crate) fn import_graph_node(&mut self, nodes: &[NodeProto], index: usize) -> Result<(), ImportError> {
        let node = &nodes[index];
        if crate::gradient::is_gradient(node) {
            return self.import_gradient(nodes, index, node);
        }
        self.import_node(index, node)
    }

    pub(crate) fn import_node(&mut self, index: usize, node: &NodeProto) -> Result<(), ImportError> {
        let name = self.node_name_in_scope(node, index);
        let op_type = node.op_type();
        let domain = if is_default_domain(node.domain()) { "" } else { node.domain() };
        let Some(&opset) = self.opsets.get(domain) else {
            return Err(ImportError::InvalidModel {
                node: name,
                reason: format!("domain `{domain}` of op `{op_type}` is not declared in the model's opset_import"),
            });
        };
        let unsupported = || ImportError::UnsupportedOp {
            op_type: op_type.to_string(),
            domain: if domain.is_empty() { "ai.onnx".to_string() } else { domain.to_string() },
            opset,
            node: name.clone(),
        };
        let has_builder = domain.is_empty() && registry().get(op_type).is_some();
        if !has_builder && crate::context_function::has_body(domain, op_type, opset) {
            return self.import_context_function(node, &name, domain);
        }
        // A custom domain's node runs as the registered plugin of that namespace and name.
        let plugin = match domain {
            "" => None,
            _ => {
                let plugins = kiln::plugin::registry();
                plugins.find(domain, op_type, Some(&opset.to_string())).or_else(|| plugins.find(domain, op_type, None))
            }
        };
        let (build, version): (Box<NodeBuilder>, i64) = match plugin {
            Some(creator) => (Box::new(move |ctx| crate::ops::plugin::build(ctx, &creator)), opset),
            None => {
                if !domain.is_empty() || opset > MAX_OPSET {
                    return Err(unsupported());
                }
                let Some(def) = registry().get(op_type) else {
                    // An op the standard defines by a function body: its body is imported instead.
                    return match crate::function::body(op_type, opset) {
                        Some(function) => self.import_function(node, &name, function),
                        None => Err(unsupported()),
                    };
                };
                (Box::new(def.build), def.version_at(opset).ok_or_else(unsupported)?)
            }
        };
        let reads_sequence = node.input.iter().any(|i| self.sequences.contains_key(i));
        if reads_sequence && op_type == "Loop" {
            return self.import_loop_with_sequences(index, node, &name);
        }
        if reads_sequence && op_type == "Identity" {
            let copy = self.sequences[&node.input[0]].clone();
            return self.bind_sequence(node.output.first().map_or("", String::as_str), copy, &name);
        }
        let mut inputs = Vec::with_capacity(node.input.len());
        for input in &node.input {
            if input.is_empty() {
                inputs.push(None);
                continue;
            }
            if self.sequences.contains_key(input) {
                if !crate::ops::takes_sequences(op_type) {
                    return Err(ImportError::UnsupportedFeature {
                        node: name.clone(),
                        op_type: op_type.to_string(),
                        feature: format!(
                            "input `{input}`, a sequence (kiln lowers sequences through the Sequence* ops, \
                             ConcatFromSequence and appending loops only)"
                        ),
                    });
                }
                inputs.push(None);
                continue;
            }
            let t = self.lookup(input)?.ok_or_else(|| ImportError::InvalidModel {
                node: name.clone(),
                reason: format!("input `{input}` is not produced by any node, initializer or graph input"),
            })?;
            inputs.push(Some(t));
        }
        let model_dir = self.model_dir;
        // The network moves into the context; a subgraph import moves it back meanwhile.
        let mut net = std::mem::take(&mut self.net);
        let sequences = std::mem::take(&mut self.sequences);
        let mut ctx = NodeContext {
            net: &mut net,
            node,
            name: &name,
            opset,
            version,
            attrs: Attributes { node: &name, list: &node.attribute },
            inputs,
            model_dir,
            subgraphs: self,
            sequences: &sequences,
            made_sequences: Vec::new(),
            inputs_read: std::cell::Cell::new(0),
        };
        let mut built = build(&mut ctx);
        if let (Ok(_), Some((i, extra))) = (&built, ctx.unread_input()) {
            let read = ctx.inputs_read.get();
            built = Err(ctx.invalid(format!(
                "{} takes {read} input{} here, but input #{i} (`{extra}`) is given too",
                node.op_type(),
                if read == 1 { "" } else { "s" }
            )));
        }
        let made = std::mem::take(&mut ctx.made_sequences);
        self.net = net;
        self.sequences = sequences;
        let outputs = built?;
        for (i, seq) in made {
            self.bind_sequence(node.output.get(i).map_or("", String::as_str), seq, &name)?;
        }
        for (i, out_name) in node.output.iter().enumerate() {
            if out_name.is_empty() || self.sequences.contains_key(out_name) {
                continue;
            }
            let Some(&t) = outputs.get(i) else {
                return Err(ImportError::UnsupportedFeature {
                    node: name.clone(),
                    op_type: op_type.to_string(),
                    feature: format!("output #{i} (`{out_name}`)"),
                });
            };
            self.bind(t, out_name, &name)?;
        }
        Ok(())
    }

    /// Names a sequence value (an unused output, the empty name, is dropped).
    pub(crate) fn bind_sequence(&mut self, name: &str, seq: Sequence, node: &str) -> Result<(), ImportError> {
        if name.is_empty() {
            return Ok(());
        }
        if self.values.contains_key(name) || self.sequences.insert(name.to_string(), seq).is_some() {
            return Err(ImportError::InvalidModel {
                node: node.to_string(),
                reason: format!("value `{name}` is defined more than once"),
            });
        }
        Ok(())
    }

    /// Gives a node output its ONNX name. A tensor that already carries another ONNX name
    /// (an op that passes its input through) gets an Identity copy first.
    pub(crate) fn bind(&mut self, t: TensorId, name: &str, node: &str) -> Result<(), ImportError> {
        if !self.outer.is_empty() {
            return self.bind_in_subgraph(t, name, node);
        }
        if self.values.contains_key(name) || self.initializers.contains_key(name) {
            return Err(ImportError::InvalidModel {
                node: node.to_string(),
                reason: format!("value `{name}` is defined more than once"),
            });
        }
        let t = if self.onnx_named.contains(&t) || self.net.inputs().contains(&t) {
            let layer = self
                .net
                .add_layer(&format!("{node}/copy"), LayerKind::Identity, vec![Some(t)])
                .map_err(|source| ImportError::Network { node: node.to_string(), source })?;
            self.net.output(layer, 0)
        } else {
            t
        };
        self.claim_name(t, name, node)
    }

    /// Names `t` after an ONNX value, moving a helper tensor that happens to hold the name.
    pub(crate) fn claim_name(&mut self, t: TensorId, name: &str, node: &str) -> Result<(), ImportError> {
        if let Some(other) = self.net.find_tensor(name).filter(|&o| o != t) {
            let free = (1..)
                .map(|i| format!("{name} ({i})"))
                .find(|n| self.net.find_tensor(n).is_none())
                .expect("some suffix is free");
            self.net
                .set_tensor_name(other, &free)
                .map_err(|source| ImportError::Network { node: node.to_string(), source })?;
        }
        self.net.set_tensor_name(t, name).map_err(|source| ImportError::Network { node: node.to_string(), source })?;
        self.values.insert(name.to_string(), t);
        self.onnx_named.insert(t);
        Ok(())
    }

    /// Marks graph outputs. Graph inputs and constants pass through an Identity layer so
    /// that every output is computed by the engine.
    pub(crate) fn mark_outputs(&mut self, graph: &GraphProto) -> Result<(), ImportError> {
        if graph.output.is_empty() {
            return Err(ImportError::graph("the graph has no outputs"));
        }
        for output in &graph.output {
            let name = output.name();
            if self.sequences.contains_key(name) {
                return Err(ImportError::graph(format!(
                    "graph output `{name}` is a sequence; kiln engines have tensor outputs only"
                )));
            }
            let t = self.lookup(name)?.ok_or_else(|| {
                ImportError::graph(format!("graph output `{name}` is not produced by any node, initializer or input"))
            })?;
            let is_input = self.net.inputs().contains(&t);
            let is_constant = self
                .net
                .tensor(t)
                .producer
                .is_some_and(|(layer, _)| matches!(self.net.layer(layer).kind, LayerKind::Constant { .. }));
            let t = if is_input || is_constant {
                let layer = self
                    .net
                    .add_layer(&format!("{name}/output"), LayerKind::Identity, vec![Some(t)])
                    .map_err(|source| ImportError::Network { node: format!("{name}/output"), source })?;
                let copy = self.net.output(layer, 0);
                if is_input {
                    // The input keeps its name (callers feed it by name); the copy gets a derived one.
                    let derived = format!("{name} (output)");
                    self.claim_output_name(copy, &derived)?;
                } else {
                    self.move_name(t, copy, name)?;
                }
                copy
            } else {
                t
            };
            self.net.mark_output(t).map_err(|e| ImportError::graph(format!("graph output `{name}`: {e}")))?;
        }
        Ok(())
    }

    fn claim_output_name(&mut self, t: TensorId, name: &str) -> Result<(), ImportError> {
        self.net.set_tensor_name(t, name).map_err(|e| ImportError::graph(format!("graph output `{name}`: {e}")))
    }

    /// Moves an ONNX name from constant `from` to its copy `to`.
    fn move_name(&mut self, from: TensorId, to: TensorId, name: &str) -> Result<(), ImportError> {
        let free = (1..)
            .map(|i| format!("{name} (constant {i})"))
            .find(|n| self.net.find_tensor(n).is_none())
            .expect("some suffix is free");
        self.net.set_tensor_name(from, &free).map_err(|e| ImportError::graph(e.to_string()))?;
        self.claim_output_name(to, name)
    }
}

/// The element type and shape of a graph input.
pub(crate) fn tensor_type(info: &ValueInfoProto) -> Result<(kiln::DataType, Shape), ImportError> {
    let name = info.name();
    let invalid = |reason: String| ImportError::graph(format!("graph input `{name}`: {reason}"));
    let Some(TypeValue::TensorType(tensor)) = info.r#type.as_ref().and_then(|t| t.value.as_ref()) else {
        return Err(invalid("only tensor inputs are supported (not sequences, maps or optionals)".into()));
    };
    let dtype = dtype_from_onnx(tensor.elem_type()).map_err(invalid)?;
    let shape =
        tensor.shape.as_ref().ok_or_else(|| invalid("the shape (at least the rank) must be declared".into()))?;
    let dims = shape
        .dim
        .iter()
        .map(|d| match &d.value {
            Some(DimValue::DimValue(v)) => {
                usize::try_from(*v).map(Dim::Fixed).map_err(|_| invalid(format!("negative dim {v}")))
            }
            Some(DimValue::DimParam(p)) if !p.is_empty() => Ok(Dim::Named(p.clone())),
            _ => Ok(Dim::Unknown),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((dtype, Shape(dims)))
}

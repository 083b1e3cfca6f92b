//! `kiln inspect MODEL.onnx`: what an ONNX model holds (inputs, outputs, opsets, ops,
//! initializers) and a capability report: every node kiln cannot import, with the reason,
//! and with `--backend`, the imported layer that backend refuses.
//!
//! The description comes from the model's protobuf alone ([`crate::onnx_summary`]), so it
//! needs no external data file; the capability report imports the model node by node
//! ([`kiln_onnx::check_model`]).
//!
//! JSON structure (stable; a shape is an array of dims: a number, the dim's name, or -1 for
//! an unknown one; null where the model declares no shape):
//! `{"format": "onnx", "ir_version", "producer", "graph", "nodes",
//!   "inputs": [{"name", "dtype", "shape"}], "outputs": [..],
//!   "opsets": [{"domain", "version"}], "ops": [{"op", "domain", "count"}] (most used first),
//!   "initializers": {"count", "bytes", "external"},
//!   "unsupported": [{"node", "op", "domain", "reason", "hint"}], "downstream": [..],
//!   "unreadable_data": [{"tensor", "reason"}],
//!   "graph_error", "backend": null or {"name", "layers", "checked", "unsupported": [{"layer", "kind", "reason"}], "error"}}`

use crate::backends::{self, BackendChoice};
use crate::summary::{byte_size, emit};
use crate::InspectFormat;
use kiln::{Backend, BackendError, Network};
use crate::onnx_summary::{domain_name, dtype_name, graph_inputs, json_shape, op_histogram, opsets, qualified, type_text, Initializers};
use kiln_onnx::proto::{GraphProto, ModelProto, ValueInfoProto};
use kiln_onnx::{CheckReport, ImportError, NodeIssue};
use serde_json::{json, Value};
use std::fmt::Write;
use std::path::Path;

pub fn inspect(path: &Path, model: &ModelProto, format: InspectFormat, backend: Option<BackendChoice>) -> anyhow::Result<()> {
    let empty = GraphProto::default();
    let graph = model.graph.as_ref().unwrap_or(&empty);
    let check = kiln_onnx::check_model(model, Some(kiln_onnx::model_dir(path)));
    let backend = backend.map(|choice| check_backend(choice, check.as_ref().ok().map(|r| &r.network)));
    let report = Report { path, model, graph, check: &check, backend: backend.as_ref() };
    match format {
        InspectFormat::Text => emit(&report.text()),
        InspectFormat::Json => {
            let mut text = serde_json::to_string_pretty(&report.json())?;
            text.push('\n');
            emit(&text)
        }
    }
}

/// One line about a node kiln cannot import: its error, and for a custom-domain op no
/// loaded plugin provides, how to load one. Also used in `kiln build`'s error.
pub fn issue_text(issue: &NodeIssue) -> String {
    match plugin_hint(issue) {
        Some(hint) => format!("{} ({hint})", issue.error),
        None => issue.error.to_string(),
    }
}

fn plugin_hint(issue: &NodeIssue) -> Option<String> {
    issue.wants_plugin().then(|| {
        format!("no loaded plugin provides `{}::{}`; load its library with --plugins LIB", issue.domain, issue.op_type)
    })
}

struct Report<'a> {
    path: &'a Path,
    model: &'a ModelProto,
    graph: &'a GraphProto,
    check: &'a Result<CheckReport, ImportError>,
    backend: Option<&'a BackendCheck>,
}

impl Report<'_> {
    fn text(&self) -> String {
        let mut s = String::new();
        let producer = match (self.model.producer_name(), self.model.producer_version()) {
            ("", _) => String::new(),
            (name, "") => format!(", producer `{name}`"),
            (name, version) => format!(", producer `{name}` {version}"),
        };
        let _ = writeln!(s, "ONNX model:   {} (IR version {}{producer})", self.path.display(), self.model.ir_version());
        let _ = writeln!(s, "graph:        `{}`, {} nodes", self.graph.name(), self.graph.node.len());
        let opsets: Vec<String> = opsets(self.model).iter().map(|(d, v)| format!("{d} {v}")).collect();
        let _ = writeln!(s, "opsets:       {}", if opsets.is_empty() { "(none)".to_string() } else { opsets.join(", ") });
        let inputs = graph_inputs(self.graph);
        let _ = writeln!(s, "inputs ({}):", inputs.len());
        for input in inputs {
            let _ = writeln!(s, "  `{}`: {}", input.name(), type_text(input));
        }
        let _ = writeln!(s, "outputs ({}):", self.graph.output.len());
        for output in &self.graph.output {
            let _ = writeln!(s, "  `{}`: {}", output.name(), type_text(output));
        }
        let init = Initializers::of(self.graph);
        let _ = writeln!(
            s,
            "initializers: {}, {} ({} in external data, counted by declared size)",
            init.count,
            byte_size(usize::try_from(init.bytes).unwrap_or(usize::MAX)),
            init.external
        );
        let ops = op_histogram(self.graph);
        let _ = writeln!(s, "ops ({}):", count(ops.len(), "type", "types"));
        for ((domain, op), count) in &ops {
            let _ = writeln!(s, "  {count:>5}  {}", qualified(domain, op));
        }
        self.capability_text(&mut s);
        s
    }

    fn capability_text(&self, s: &mut String) {
        let report = match self.check {
            Ok(report) => report,
            Err(error) => {
                let _ = writeln!(s, "import:       fails before any node: {error}");
                return self.backend_text(s);
            }
        };
        if let Some((_, first)) = report.unreadable_data.first() {
            let _ = writeln!(
                s,
                "data:         the external data of {} cannot be read (first: {first}); nodes were checked with stand-ins of their declared type and dims",
                count(report.unreadable_data.len(), "initializer", "initializers")
            );
        }
        if report.unsupported.is_empty() && report.downstream.is_empty() {
            let _ = writeln!(s, "import:       every node imports ({})", count(report.nodes, "node", "nodes"));
        }
        if !report.unsupported.is_empty() {
            let _ = writeln!(s, "import:       {} of {} kiln cannot import:", report.unsupported.len(), count(report.nodes, "node", "nodes"));
            issue_lines(s, &report.unsupported);
        }
        if !report.downstream.is_empty() {
            let _ = writeln!(
                s,
                "downstream:   {} reading what a node above would compute (they may import once it does):",
                count(report.downstream.len(), "node fails", "nodes fail")
            );
            issue_lines(s, &report.downstream);
        }
        if let Some(error) = &report.graph_error {
            let _ = writeln!(s, "graph:        {error}");
        }
        self.backend_text(s);
    }

    fn backend_text(&self, s: &mut String) {
        let Some(check) = self.backend else {
            let _ = writeln!(s, "backend:      not checked (--backend NAME checks the imported layers against a backend)");
            return;
        };
        match &check.outcome {
            BackendOutcome::Unavailable(reason) => {
                let _ = writeln!(s, "backend {}:  not checked: {reason}", check.name);
            }
            BackendOutcome::NothingImported => {
                let _ = writeln!(s, "backend {}:  not checked: the model imports no layers", check.name);
            }
            BackendOutcome::Supported => {
                let layers = count(check.layers, "imported layer", "imported layers");
                let _ = writeln!(s, "backend {}:  runs all {layers} (checked before the builder's passes)", check.name);
            }
            BackendOutcome::Refuses { layer, kind, reason } => {
                let _ = writeln!(s, "backend {}:  cannot run layer `{layer}` ({kind}): {reason}", check.name);
                let _ = writeln!(s, "              (a backend reports its first unsupported layer only; the layers after it are not checked)");
            }
            BackendOutcome::Failed(error) => {
                let _ = writeln!(s, "backend {}:  check failed: {error}", check.name);
            }
        }
    }

    fn json(&self) -> Value {
        let tensor = |v: &ValueInfoProto| json!({"name": v.name(), "dtype": dtype_name(v), "shape": json_shape(v)});
        let init = Initializers::of(self.graph);
        let (unsupported, downstream, unreadable, graph_error) = match self.check {
            Ok(r) => (
                r.unsupported.iter().map(json_issue).collect(),
                r.downstream.iter().map(json_issue).collect(),
                r.unreadable_data.iter().map(|(t, e)| json!({"tensor": t, "reason": e.to_string()})).collect(),
                r.graph_error.as_ref().map(ToString::to_string),
            ),
            Err(error) => (Vec::new(), Vec::new(), Vec::new(), Some(format!("fails before any node: {error}"))),
        };
        json!({
            "format": "onnx",
            "ir_version": self.model.ir_version(),
            "producer": {"name": self.model.producer_name(), "version": self.model.producer_version()},
            "graph": self.graph.name(),
            "nodes": self.graph.node.len(),
            "inputs": graph_inputs(self.graph).into_iter().map(tensor).collect::<Vec<_>>(),
            "outputs": self.graph.output.iter().map(tensor).collect::<Vec<_>>(),
            "opsets": opsets(self.model).iter().map(|(d, v)| json!({"domain": d, "version": v})).collect::<Vec<_>>(),
            "ops": op_histogram(self.graph)
                .iter()
                .map(|((domain, op), count)| json!({"op": op, "domain": domain, "count": count}))
                .collect::<Vec<_>>(),
            "initializers": {"count": init.count, "bytes": init.bytes, "external": init.external},
            "unsupported": unsupported,
            "downstream": downstream,
            "unreadable_data": unreadable,
            "graph_error": graph_error,
            "backend": self.backend.map(BackendCheck::json),
        })
    }
}

/// `1 node`, `3 nodes`.
fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn issue_lines(s: &mut String, issues: &[NodeIssue]) {
    for issue in issues {
        let _ = writeln!(s, "  `{}` {}: {}", issue.node, qualified(&domain_name(&issue.domain), &issue.op_type), issue.error);
        if let Some(hint) = plugin_hint(issue) {
            let _ = writeln!(s, "      hint: {hint}");
        }
    }
}

fn json_issue(issue: &NodeIssue) -> Value {
    json!({
        "node": issue.node,
        "op": issue.op_type,
        "domain": domain_name(&issue.domain),
        "reason": issue.error.to_string(),
        "hint": plugin_hint(issue),
    })
}

/// What `--backend` found.
struct BackendCheck {
    name: String,
    /// Layers of the checked network (stand-ins for failed nodes are inputs, not layers).
    layers: usize,
    outcome: BackendOutcome,
}

enum BackendOutcome {
    Unavailable(String),
    /// The model failed before any node, so there is no network to check.
    NothingImported,
    Supported,
    /// The first layer the backend cannot run (its API reports no more).
    Refuses { layer: String, kind: String, reason: String },
    Failed(String),
}

/// Asks the backend's support check about the imported network (placeholders stand in for
/// the nodes that failed to import; they are network inputs, which every backend takes).
fn check_backend(choice: BackendChoice, network: Option<&Network>) -> BackendCheck {
    let selected = match backends::select(choice) {
        Ok(selected) => selected,
        Err(error) => {
            let outcome = BackendOutcome::Unavailable(format!("{error:#}"));
            return BackendCheck { name: choice.to_string(), layers: 0, outcome };
        }
    };
    let backend: &dyn Backend = selected.backend.as_ref();
    let outcome = match network.map(|n| backend.check_support(n)) {
        None => BackendOutcome::NothingImported,
        Some(Ok(())) => BackendOutcome::Supported,
        Some(Err(BackendError::Unsupported { layer, kind, reason, .. })) => BackendOutcome::Refuses { layer, kind, reason },
        Some(Err(other)) => BackendOutcome::Failed(other.to_string()),
    };
    BackendCheck { name: selected.name().to_string(), layers: network.map_or(0, |n| n.layers().len()), outcome }
}

impl BackendCheck {
    fn json(&self) -> Value {
        let (unsupported, error, checked) = match &self.outcome {
            BackendOutcome::Unavailable(reason) => (vec![], Some(reason.clone()), "none"),
            BackendOutcome::NothingImported => (vec![], Some("the model imports no layers".into()), "none"),
            BackendOutcome::Supported => (vec![], None, "every imported layer"),
            BackendOutcome::Refuses { layer, kind, reason } => (
                vec![json!({"layer": layer, "kind": kind, "reason": reason})],
                None,
                "up to the first unsupported layer",
            ),
            BackendOutcome::Failed(reason) => (vec![], Some(reason.clone()), "none"),
        };
        json!({"name": self.name, "layers": self.layers, "checked": checked, "unsupported": unsupported, "error": error})
    }
}

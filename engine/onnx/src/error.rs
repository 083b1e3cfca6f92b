//! The importer's error type.

use std::path::PathBuf;
use thiserror::Error;

/// Why an ONNX model could not be imported.
#[derive(Debug, Error)]
pub enum ImportError {
    #[error("cannot read `{}`: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The bytes are not a valid ONNX `ModelProto`.
    #[error("malformed ONNX model: {0}")]
    Decode(String),
    /// An operator kiln does not import (or that does not exist at the model's opset).
    #[error("unsupported ONNX op `{op_type}` (domain `{domain}`, opset {opset}) at node `{node}`")]
    UnsupportedOp { op_type: String, domain: String, opset: i64, node: String },
    /// A valid use of a supported operator that kiln cannot express (an optional output,
    /// an attribute value without a kiln equivalent, a parameter that must be constant).
    #[error("node `{node}` ({op_type}): {feature} is not supported")]
    UnsupportedFeature { node: String, op_type: String, feature: String },
    /// The model breaks an ONNX rule: dangling inputs, bad attributes, unsupported types.
    #[error("invalid ONNX model{}: {reason}", node_clause(.node))]
    InvalidModel { node: String, reason: String },
    /// kiln rejected a layer built for this node.
    #[error("node `{node}`: {source}")]
    Network {
        node: String,
        #[source]
        source: kiln::NetworkError,
    },
    /// An initializer's external data could not be located or read.
    #[error("external data of tensor `{tensor}`: {reason}")]
    ExternalData { tensor: String, reason: String },
}

fn node_clause(node: &str) -> String {
    if node.is_empty() {
        String::new()
    } else {
        format!(" at node `{node}`")
    }
}

impl ImportError {
    /// An [`ImportError::InvalidModel`] about the graph rather than one node.
    pub(crate) fn graph(reason: impl Into<String>) -> ImportError {
        ImportError::InvalidModel { node: String::new(), reason: reason.into() }
    }
}

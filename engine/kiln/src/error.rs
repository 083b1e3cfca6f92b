//! Error types of the core crate: one enum per operation, composed with `#[from]`.

use thiserror::Error;

/// A network that breaks a rule of the IR.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NetworkError {
    #[error("layer `{layer}`{}: {rule}", tensor_clause(.tensor))]
    Layer { layer: String, tensor: String, rule: String },
    #[error("tensor name `{name}` is already used in this network")]
    DuplicateTensorName { name: String },
    #[error("tensor #{id} does not belong to this network")]
    UnknownTensor { id: usize },
    #[error("the network has no outputs: mark at least one tensor with mark_output")]
    NoOutputs,
}

fn tensor_clause(tensor: &str) -> String {
    if tensor.is_empty() {
        String::new()
    } else {
        format!(", tensor `{tensor}`")
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BackendError {
    /// The backend cannot run here (no device, no driver, not compiled in).
    #[error("backend `{backend}` is not available: {reason}")]
    Unavailable { backend: String, reason: String },
    /// A layer kind or type the backend has no implementation for.
    #[error("backend `{backend}` cannot run layer `{layer}` ({kind}): {reason}")]
    Unsupported { backend: String, layer: String, kind: String, reason: String },
    /// A failure while executing a layer.
    #[error("layer `{layer}` failed: {reason}")]
    Execution { layer: String, reason: String },
    #[error("out of memory on `{backend}`: {reason}")]
    OutOfMemory { backend: String, reason: String },
    /// An operation on a prepared network the backend does not offer (a refit).
    #[error("backend `{backend}` cannot {operation}: {reason}")]
    NotOffered { backend: String, operation: String, reason: String },
}


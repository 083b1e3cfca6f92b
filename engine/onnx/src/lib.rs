//! ONNX importer: ONNX protobuf → kiln [`Network`].
//!
//! Every ONNX value keeps its name on the kiln tensor that holds it, so graph outputs and
//! intermediate values can be found by their ONNX names. Graph inputs that an initializer
//! provides are constants, not network inputs. Ops are imported with the conventions of
//! the definition in effect at the model's opset (attributes that later became inputs and
//! so on); run-time parameters stay tensor inputs of the kiln layers.
#![forbid(unsafe_code)]

mod attributes;
mod check;
mod context;
mod context_function;
mod declared;
mod error;
mod function;
mod gradient;
mod graph;
mod ops;
pub mod proto;
mod sequence;
mod subgraph;
mod tensor;

pub use check::{CheckReport, NodeIssue};
pub use error::ImportError;

use kiln::Network;
use prost::Message;
use std::path::Path;

/// Imports an ONNX model file; external data is resolved next to it.
pub fn import_file(path: &Path) -> Result<Network, ImportError> {
    let bytes = std::fs::read(path).map_err(|source| ImportError::Io { path: path.to_path_buf(), source })?;
    import_bytes(&bytes, Some(model_dir(path)))
}

/// The folder whose files a model file's external data locations are relative to (the
/// ONNX rule): the model file's parent, `.` for a bare file name.
pub fn model_dir(model_path: &Path) -> &Path {
    match model_path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// Imports a serialized ONNX model. `model_dir` is where external data files live; without
/// it, a model with external data fails with [`ImportError::ExternalData`].
pub fn import_bytes(bytes: &[u8], model_dir: Option<&Path>) -> Result<Network, ImportError> {
    Ok(import_bytes_with_warnings(bytes, model_dir)?.0)
}

/// [`import_bytes`], also returning what the model declares that kiln does not follow
/// (graph output shapes that differ from the inferred ones), one line each.
pub fn import_bytes_with_warnings(bytes: &[u8], model_dir: Option<&Path>) -> Result<(Network, Vec<String>), ImportError> {
    let model = proto::ModelProto::decode(bytes).map_err(|e| ImportError::Decode(e.to_string()))?;
    graph::import_model(&model, model_dir)
}

/// Imports a decoded ONNX model.
pub fn import_model(model: &proto::ModelProto, model_dir: Option<&Path>) -> Result<Network, ImportError> {
    Ok(graph::import_model(model, model_dir)?.0)
}

/// Decodes a serialized ONNX model without importing it (to describe it).
pub fn decode_model(bytes: &[u8]) -> Result<proto::ModelProto, ImportError> {
    proto::ModelProto::decode(bytes).map_err(|e| ImportError::Decode(e.to_string()))
}

/// Checks which nodes of a serialized ONNX model kiln can import, going on past failures
/// where [`import_bytes`] stops at the first. Fails only when the bytes are not an ONNX
/// model or no node can be checked (no graph, bad opset imports or graph inputs, a cycle).
pub fn check_bytes(bytes: &[u8], model_dir: Option<&Path>) -> Result<CheckReport, ImportError> {
    check_model(&decode_model(bytes)?, model_dir)
}

/// [`check_bytes`] for a decoded model.
pub fn check_model(model: &proto::ModelProto, model_dir: Option<&Path>) -> Result<CheckReport, ImportError> {
    check::check_model(model, model_dir)
}

/// Converts an ONNX tensor (typed fields, raw data or external data under `model_dir`),
/// e.g. the `input_0.pb` files of ONNX test cases.
pub fn tensor_from_proto(tensor: &proto::TensorProto, model_dir: Option<&Path>) -> Result<kiln::HostTensor, ImportError> {
    tensor::host_tensor(tensor, "", model_dir)
}

/// The ONNX op types this importer supports (default domain), sorted.
pub fn supported_ops() -> Vec<&'static str> {
    ops::registry().op_types()
}

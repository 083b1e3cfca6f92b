//! Loading the MODEL argument: an ONNX model or a kiln engine file, told apart by the
//! engine file's magic bytes (never by the file name).

use crate::commands::inspect_onnx::issue_text;
use anyhow::{anyhow, bail, Context};
use kiln_onnx::proto::ModelProto;
use kiln::engine::format::MAGIC;
use kiln::{Engine, Network};
use std::path::Path;
use std::time::{Duration, Instant};

pub enum Model {
    /// An imported ONNX model, not yet built.
    Onnx { network: Network, import_time: Duration },
    /// A deserialized engine file.
    Engine { engine: Box<Engine>, load_time: Duration },
}

/// Whether the bytes are (or, when very short, begin like) a kiln engine file; a truncated
/// engine must be reported as a truncated engine, not as malformed ONNX.
pub fn is_engine_file(bytes: &[u8]) -> bool {
    bytes.starts_with(MAGIC) || (!bytes.is_empty() && bytes.len() < MAGIC.len() && MAGIC.starts_with(bytes))
}

pub fn read_model_file(path: &Path) -> anyhow::Result<Vec<u8>> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read model file `{}`", path.display()))?;
    if bytes.is_empty() {
        bail!("model file `{}` is empty", path.display());
    }
    Ok(bytes)
}

pub fn load(path: &Path) -> anyhow::Result<Model> {
    let bytes = read_model_file(path)?;
    let start = Instant::now();
    if is_engine_file(&bytes) {
        let engine = load_engine(path, &bytes)?;
        Ok(Model::Engine { engine: Box::new(engine), load_time: start.elapsed() })
    } else {
        let network = import_onnx(path, &bytes)?;
        Ok(Model::Onnx { network, import_time: start.elapsed() })
    }
}

pub fn load_engine(path: &Path, bytes: &[u8]) -> anyhow::Result<Engine> {
    Engine::deserialize(bytes).with_context(|| format!("cannot load engine file `{}`", path.display()))
}

/// Imports the bytes of the ONNX model at `path`; external data resolves against the
/// model's folder (the ONNX rule), whatever the working directory.
/// What the model declares that kiln does not follow is a warning on stderr.
/// When several nodes cannot be imported, the error lists every one of them, not only the
/// first that stopped the import.
pub fn import_onnx(path: &Path, bytes: &[u8]) -> anyhow::Result<Network> {
    let model_dir = kiln_onnx::model_dir(path);
    let context = || format!("cannot import ONNX model `{}`", path.display());
    let spinner = crate::progress::spinner(format!("importing `{}`", path.display()));
    let imported = kiln_onnx::import_bytes_with_warnings(bytes, Some(model_dir));
    spinner.finish_and_clear();
    let (network, warnings) = match imported {
        Ok(imported) => imported,
        Err(first) => {
            let error = match every_failed_node(bytes, model_dir) {
                Some(list) => anyhow!(list),
                None => anyhow::Error::new(first),
            };
            return Err(error.context(context()));
        }
    };
    for warning in warnings {
        tracing::warn!("{warning}");
    }
    Ok(network)
}

/// `3 nodes kiln cannot import: …; …; …`, one clause per node, when the capability check
/// finds more than one (else the import's own error says it all).
fn every_failed_node(bytes: &[u8], model_dir: &Path) -> Option<String> {
    let report = kiln_onnx::check_bytes(bytes, Some(model_dir)).ok()?;
    let failed = report.unsupported.len() + report.downstream.len();
    let single_plugin_hint = report.unsupported.len() == 1 && report.unsupported[0].wants_plugin();
    if failed < 2 && !single_plugin_hint {
        return None;
    }
    let listed = |issues: &[kiln_onnx::NodeIssue]| -> String {
        issues.iter().map(issue_text).collect::<Vec<_>>().join("; ")
    };
    let mut text = match report.unsupported.len() {
        1 => listed(&report.unsupported),
        n => format!("{n} nodes kiln cannot import: {}", listed(&report.unsupported)),
    };
    if !report.downstream.is_empty() {
        text += &format!(
            "; then {} more that fail{} reading their outputs: {}",
            report.downstream.len(),
            if report.downstream.len() == 1 { "s" } else { "" },
            listed(&report.downstream)
        );
    }
    text += " (`kiln inspect MODEL.onnx` reports every node)";
    Some(text)
}

/// The ONNX model in `bytes`: a decodable `ModelProto` with a graph or an IR version (an
/// arbitrary file often decodes as an empty message).
pub fn decode_onnx(bytes: &[u8]) -> anyhow::Result<ModelProto> {
    let model = kiln_onnx::decode_model(bytes)?;
    if model.graph.is_none() && model.ir_version.is_none() {
        bail!("it has neither a graph nor an IR version");
    }
    Ok(model)
}

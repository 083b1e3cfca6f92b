//! Loading the MODEL argument: an ONNX model or a kiln engine file, told apart by the
//! engine file's magic bytes (never by the file name).

use anyhow::{bail, Context};
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
pub fn import_onnx(path: &Path, bytes: &[u8]) -> anyhow::Result<Network> {
    let (network, warnings) = kiln_onnx::import_bytes_with_warnings(bytes, Some(kiln_onnx::model_dir(path)))
        .with_context(|| format!("cannot import ONNX model `{}`", path.display()))?;
    for warning in warnings {
        eprintln!("warning: {warning}");
    }
    Ok(network)
}

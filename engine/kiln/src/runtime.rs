//! Running engines: execution contexts bind inputs by name and validate them.

use crate::backend::{Backend, BackendError, Executable};
use crate::engine::{Engine, EngineLoadError};
use crate::ir::shape::Dim;
use crate::ir::tensor::HostTensor;
use std::collections::{BTreeMap, HashMap};
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RunError {
    #[error(transparent)]
    Load(#[from] EngineLoadError),
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("input `{0}` is missing")]
    MissingInput(String),
    #[error("`{name}` is not an input of this engine (inputs: {expected})")]
    UnknownInput { name: String, expected: String },
    #[error("input `{name}` must be {expected}, got {actual}")]
    InputType { name: String, expected: String, actual: String },
    #[error("input `{name}` has shape {actual:?} but the engine expects {expected}: {reason}")]
    InputShape { name: String, expected: String, actual: Vec<usize>, reason: String },
}

/// An engine prepared on a backend, ready to run; usable from several threads.
pub struct ExecutionContext {
    engine: Engine,
    executable: Box<dyn Executable>,
    warnings: Vec<String>,
}

impl std::fmt::Debug for ExecutionContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutionContext").field("backend", &self.engine.backend()).finish()
    }
}

impl ExecutionContext {
    /// Checks the engine against the backend's device and prepares it.
    pub fn new(engine: Engine, backend: &dyn Backend) -> Result<ExecutionContext, RunError> {
        let device = backend.device()?;
        let warnings = engine.check_device(&device)?;
        let executable = backend.prepare(engine.network())?;
        Ok(ExecutionContext { engine, executable, warnings })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Device differences that may cost performance (seed §6.7).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Runs the engine. Every network input must be given by name, with the declared type,
    /// rank and fixed dims; dims with the same name must agree. Returns outputs by name.
    /// An input or output in a vectorized format (see [`crate::ir::format`]) is passed in
    /// its physical shape: a CHW4 input of logical `N×3×H×W` is `N×1×H×W×4`, padding zeroed.
    pub fn run(&self, inputs: &HashMap<String, HostTensor>) -> Result<BTreeMap<String, HostTensor>, RunError> {
        let net = self.engine.network();
        let names: Vec<&str> = net.inputs().iter().map(|&t| net.tensor(t).name.as_str()).collect();
        if let Some(extra) = inputs.keys().find(|k| !names.contains(&k.as_str())) {
            return Err(RunError::UnknownInput { name: extra.clone(), expected: names.join(", ") });
        }
        let mut named_dims: HashMap<&str, (usize, &str)> = HashMap::new();
        let mut ordered = Vec::with_capacity(names.len());
        for &t in net.inputs() {
            let desc = net.tensor(t);
            let value = inputs.get(&desc.name).ok_or_else(|| RunError::MissingInput(desc.name.clone()))?;
            if value.dtype() != desc.dtype {
                return Err(RunError::InputType {
                    name: desc.name.clone(),
                    expected: desc.dtype.to_string(),
                    actual: value.dtype().to_string(),
                });
            }
            let shape_error = |reason: String| RunError::InputShape {
                name: desc.name.clone(),
                expected: desc.shape.text(),
                actual: value.shape().to_vec(),
                reason,
            };
            if value.shape().len() != desc.shape.rank() {
                return Err(shape_error(format!("rank {} instead of {}", value.shape().len(), desc.shape.rank())));
            }
            for (axis, (d, &n)) in desc.shape.dims().iter().zip(value.shape()).enumerate() {
                match d {
                    Dim::Fixed(f) if *f != n => return Err(shape_error(format!("axis {axis} must be {f}"))),
                    Dim::Named(sym) => {
                        if let Some((prev, who)) = named_dims.insert(sym.as_str(), (n, desc.name.as_str())) {
                            if prev != n {
                                return Err(shape_error(format!(
                                    "dim `{sym}` is {n} here but {prev} in input `{who}`"
                                )));
                            }
                        }
                    }
                    _ => {}
                }
            }
            ordered.push(value.clone());
        }
        let outputs = self.executable.execute(&ordered)?;
        Ok(net.outputs().iter().map(|&t| net.tensor(t).name.clone()).zip(outputs).collect())
    }
}

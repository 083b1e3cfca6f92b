//! Running one case in-process: import, build, feed the data set, compare.

use crate::compare::compare_outputs;
use crate::discover::{load_model, Case, CaseInputs};
use kiln::{Backend, Builder, BuilderConfig, ExecutionContext, HostTensor};
use kiln_onnx::proto::tensor_shape_proto::dimension::Value as DimValue;
use kiln_onnx::proto::type_proto::Value as TypeValue;
use kiln_onnx::proto::{TensorProto, ValueInfoProto};
use prost::Message;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::Path;

/// Why a case did not pass, by stage.
#[derive(Clone, Debug, PartialEq)]
pub enum CaseError {
    /// The test data could not be read (a problem of the data, not of kiln).
    Data(String),
    Import(String),
    Build(String),
    Run(String),
    /// kiln ran but an output differs from the reference.
    Values(String),
}

impl fmt::Display for CaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaseError::Data(m) => write!(f, "test data: {m}"),
            CaseError::Import(m) => write!(f, "import: {m}"),
            CaseError::Build(m) => write!(f, "build: {m}"),
            CaseError::Run(m) => write!(f, "run: {m}"),
            CaseError::Values(m) => f.write_str(m),
        }
    }
}

/// An error and its sources on one line.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text.replace('\n', " ")
}

fn read_tensor(path: &Path) -> Result<HostTensor, CaseError> {
    let data = |m: String| CaseError::Data(format!("`{}`: {m}", path.display()));
    let bytes = std::fs::read(path).map_err(|e| data(e.to_string()))?;
    let proto = TensorProto::decode(bytes.as_slice()).map_err(|e| data(e.to_string()))?;
    kiln_onnx::tensor_from_proto(&proto, path.parent()).map_err(|e| data(chain(&e)))
}

/// The runner's dummy input: `arange(n) / n` in f32, unknown dims taken as 1.
fn arange_input(info: &ValueInfoProto) -> Result<HostTensor, CaseError> {
    let Some(TypeValue::TensorType(t)) = info.r#type.as_ref().and_then(|t| t.value.as_ref()) else {
        return Err(CaseError::Data(format!("input `{}` is not a tensor", info.name())));
    };
    let dims: Vec<usize> = t
        .shape
        .as_ref()
        .map(|s| {
            s.dim
                .iter()
                .map(|d| match d.value {
                    Some(DimValue::DimValue(v)) if v > 0 => v as usize,
                    _ => 1,
                })
                .collect()
        })
        .unwrap_or_default();
    let n: usize = dims.iter().product();
    let values = (0..n).map(|i| (i as f64 / n as f64) as f32).collect();
    HostTensor::from_f32(dims, values).map_err(|e| CaseError::Data(e.to_string()))
}

/// Runs `case` on `backend` and compares with its reference outputs.
pub fn run_case(case: &Case, backend: &dyn Backend) -> Result<(), CaseError> {
    let model = load_model(&case.model).map_err(CaseError::Data)?;
    let graph = model.graph.clone().unwrap_or_default();
    // IR < 4 lists initializers among the graph inputs; those are not fed.
    let initializers: HashSet<&str> = graph.initializer.iter().map(|t| t.name()).collect();
    let mut feeds = HashMap::new();
    match &case.inputs {
        CaseInputs::Files(files) => {
            for (i, path) in files.iter().enumerate() {
                let info = graph.input.get(i).ok_or_else(|| {
                    CaseError::Data(format!("input_{i}.pb has no graph input (the graph has {})", graph.input.len()))
                })?;
                if !initializers.contains(info.name()) {
                    feeds.insert(info.name().to_string(), read_tensor(path)?);
                }
            }
        }
        CaseInputs::Arange => {
            for info in graph.input.iter().filter(|i| !initializers.contains(i.name())) {
                feeds.insert(info.name().to_string(), arange_input(info)?);
            }
        }
    }
    let references = case.expected.iter().map(|p| read_tensor(p)).collect::<Result<Vec<_>, _>>()?;

    let network = kiln_onnx::import_model(&model, case.model.parent()).map_err(|e| CaseError::Import(chain(&e)))?;
    let engine =
        Builder::new(backend).build(&network, &BuilderConfig::default()).map_err(|e| CaseError::Build(chain(&e)))?;
    let context = ExecutionContext::new(engine, backend).map_err(|e| CaseError::Run(chain(&e)))?;
    let mut by_name = context.run(&feeds).map_err(|e| CaseError::Run(chain(&e)))?;
    // Graph outputs in order; the engine's outputs follow the graph's.
    let net = context.engine().network();
    let outputs = net
        .outputs()
        .iter()
        .map(|&t| {
            let name = net.tensor(t).name.clone();
            let value = by_name.remove(&name).ok_or_else(|| CaseError::Run(format!("output `{name}` is missing")))?;
            Ok((name, value))
        })
        .collect::<Result<Vec<_>, CaseError>>()?;
    compare_outputs(&outputs, &references, case.tolerance).map_err(CaseError::Values)
}

//! Finding the cases: the classic on-disk layout (`<suite>/<test>/model.onnx` +
//! `test_data_set_0/{input,output}_*.pb`) and the `real` suite, whose `data.json` points
//! at a `light/` model with a stored expected output and runner-generated inputs.

use crate::compare::Tolerance;
use kiln_onnx::proto::type_proto::Value as TypeValue;
use kiln_onnx::proto::{ModelProto, ValueInfoProto};
use prost::Message;
use std::fs;
use std::path::{Path, PathBuf};

/// The official runner's defaults (`onnx/backend/test/loader/__init__.py`).
pub const DEFAULT_TOLERANCE: Tolerance = Tolerance { rtol: 1e-3, atol: 1e-7 };

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Suite {
    Node,
    PytorchConverted,
    PytorchOperator,
    Simple,
    Real,
}

impl Suite {
    pub const ALL: [Suite; 5] =
        [Suite::Node, Suite::PytorchConverted, Suite::PytorchOperator, Suite::Simple, Suite::Real];

    pub fn name(self) -> &'static str {
        match self {
            Suite::Node => "node",
            Suite::PytorchConverted => "pytorch-converted",
            Suite::PytorchOperator => "pytorch-operator",
            Suite::Simple => "simple",
            Suite::Real => "real",
        }
    }
}

/// Where the two kinds of suite data live; either may be absent.
#[derive(Clone, Debug, Default)]
pub struct SuiteData {
    /// The materialized `node` directory.
    pub node_dir: Option<PathBuf>,
    /// The onnx package's `backend/test/data` directory.
    pub data_dir: Option<PathBuf>,
}

impl SuiteData {
    /// From `KILN_ONNX_NODE_DATA` and `KILN_ONNX_DATA`; an unset or empty variable is absent.
    pub fn from_env() -> SuiteData {
        let dir = |var: &str| std::env::var_os(var).filter(|v| !v.is_empty()).map(PathBuf::from);
        SuiteData { node_dir: dir("KILN_ONNX_NODE_DATA"), data_dir: dir("KILN_ONNX_DATA") }
    }
}

#[derive(Clone, Debug)]
pub enum CaseInputs {
    /// `input_<i>.pb` feeds the model's `graph.input[i]`.
    Files(Vec<PathBuf>),
    /// The runner's dummy data: `arange(n) / n` as f32 for every non-initializer input.
    Arange,
}

#[derive(Clone, Debug)]
pub struct Case {
    pub suite: Suite,
    pub name: String,
    pub model: PathBuf,
    pub inputs: CaseInputs,
    /// One `.pb` per graph output, in order.
    pub expected: Vec<PathBuf>,
    pub tolerance: Tolerance,
    /// Why the case cannot be run (sequence/optional graph I/O), as the harness skips it.
    pub skip: Option<String>,
}

impl Case {
    /// `suite/test_name`, the key of the expectations file.
    pub fn id(&self) -> String {
        format!("{}/{}", self.suite.name(), self.name)
    }
}

/// Every case of the suites whose data is present, sorted by id.
pub fn discover(data: &SuiteData) -> Result<Vec<Case>, String> {
    let mut cases = Vec::new();
    if let Some(node) = &data.node_dir {
        cases.extend(file_suite(Suite::Node, node)?);
    }
    if let Some(dir) = &data.data_dir {
        for suite in [Suite::PytorchConverted, Suite::PytorchOperator, Suite::Simple] {
            cases.extend(file_suite(suite, &dir.join(suite.name()))?);
        }
        cases.extend(real_suite(dir)?);
    }
    cases.sort_by_key(Case::id);
    Ok(cases)
}

fn sorted_entries(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let entries = fs::read_dir(dir).map_err(|e| format!("cannot list `{}`: {e}", dir.display()))?;
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    Ok(paths)
}

/// `prefix_0.pb`, `prefix_1.pb`, … up to the first missing index.
fn numbered(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    (0..).map(|i| dir.join(format!("{prefix}_{i}.pb"))).take_while(|p| p.is_file()).collect()
}

fn file_suite(suite: Suite, root: &Path) -> Result<Vec<Case>, String> {
    if !root.is_dir() {
        return Err(format!("suite `{}` is missing: `{}` is not a directory", suite.name(), root.display()));
    }
    let mut cases = Vec::new();
    for case_dir in sorted_entries(root)? {
        let model = case_dir.join("model.onnx");
        if !model.is_file() {
            continue;
        }
        let name = case_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let data_set = case_dir.join("test_data_set_0");
        let inputs = numbered(&data_set, "input");
        let expected = numbered(&data_set, "output");
        let skip = if data_set.is_dir() {
            non_tensor_io(&model, inputs.len(), expected.len())?
        } else {
            Some("no test_data_set_0".into())
        };
        let tolerance = read_tolerance(&case_dir.join("data.json"))?;
        cases.push(Case { suite, name, model, inputs: CaseInputs::Files(inputs), expected, tolerance, skip });
    }
    Ok(cases)
}

fn real_suite(data_dir: &Path) -> Result<Vec<Case>, String> {
    let root = data_dir.join("real");
    if !root.is_dir() {
        return Err(format!("suite `real` is missing: `{}` is not a directory", root.display()));
    }
    let mut cases = Vec::new();
    for case_dir in sorted_entries(&root)? {
        let json_path = case_dir.join("data.json");
        if !json_path.is_file() {
            continue;
        }
        let name = case_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let json = read_json(&json_path)?;
        let url = json.get("url").and_then(|u| u.as_str()).unwrap_or_default();
        let file = url
            .strip_prefix("onnx/backend/test/data/light/")
            .ok_or_else(|| format!("`{}`: url `{url}` is not a light model shipped with onnx", json_path.display()))?;
        let model = data_dir.join("light").join(file);
        let stem = model.with_extension("");
        let expected = vec![PathBuf::from(format!("{}_output_0.pb", stem.display()))];
        let tolerance = read_tolerance(&json_path)?;
        cases.push(Case {
            suite: Suite::Real,
            name,
            model,
            inputs: CaseInputs::Arange,
            expected,
            tolerance,
            skip: None,
        });
    }
    Ok(cases)
}

fn read_json(path: &Path) -> Result<serde_json::Value, String> {
    let text = fs::read_to_string(path).map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("`{}` is not JSON: {e}", path.display()))
}

fn read_tolerance(path: &Path) -> Result<Tolerance, String> {
    if !path.is_file() {
        return Ok(DEFAULT_TOLERANCE);
    }
    let json = read_json(path)?;
    let get = |key: &str, default: f64| json.get(key).and_then(|v| v.as_f64()).unwrap_or(default);
    Ok(Tolerance { rtol: get("rtol", DEFAULT_TOLERANCE.rtol), atol: get("atol", DEFAULT_TOLERANCE.atol) })
}

pub fn load_model(path: &Path) -> Result<ModelProto, String> {
    let bytes = fs::read(path).map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    ModelProto::decode(bytes.as_slice()).map_err(|e| format!("`{}` is not an ONNX model: {e}", path.display()))
}

/// The harness's skip rule: a fed input or checked output that is not a tensor.
fn non_tensor_io(model: &Path, inputs: usize, outputs: usize) -> Result<Option<String>, String> {
    let model = load_model(model)?;
    let graph = model.graph.unwrap_or_default();
    let kind = |info: &ValueInfoProto| match info.r#type.as_ref().and_then(|t| t.value.as_ref()) {
        Some(TypeValue::SequenceType(_)) => Some("a sequence"),
        Some(TypeValue::OptionalType(_)) => Some("an optional"),
        Some(TypeValue::MapType(_)) => Some("a map"),
        _ => None,
    };
    let mut reasons = Vec::new();
    for (what, list, n) in [("input", &graph.input, inputs), ("output", &graph.output, outputs)] {
        for info in list.iter().take(n) {
            if let Some(k) = kind(info) {
                reasons.push(format!("{what} `{}` is {k}", info.name()));
            }
        }
    }
    Ok((!reasons.is_empty()).then(|| reasons.join("; ")))
}

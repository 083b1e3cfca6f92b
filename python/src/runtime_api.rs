//! The TensorRT-shaped API: `Builder`, `Network`, `OnnxParser`, `BuilderConfig`,
//! `OptimizationProfile` and `Runtime` (with `Engine`'s I/O queries in lib.rs and
//! `ExecutionContext` in execution_context.rs), so that code written against `tensorrt` ports
//! line by line.

use crate::{error, open_backend, Engine};
use kiln::{BuilderFlag, Dim, Network as KilnNetwork, OptimizationProfile as KilnProfile};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::path::Path;

fn flag(name: &str) -> PyResult<BuilderFlag> {
    BuilderFlag::from_name(name).ok_or_else(|| {
        let known: Vec<String> = BuilderFlag::ALL.iter().map(|f| f.name().to_lowercase()).collect();
        error(format!("unknown builder flag `{name}` (known: {})", known.join(", ")))
    })
}

/// A network definition, filled by an [`OnnxParser`].
#[pyclass(module = "kiln")]
pub(crate) struct Network {
    pub(crate) network: KilnNetwork,
}

#[pymethods]
impl Network {
    #[getter]
    fn name(&self) -> String {
        self.network.name.clone()
    }
    #[getter]
    fn num_layers(&self) -> usize {
        self.network.layers().len()
    }
    #[getter]
    fn num_inputs(&self) -> usize {
        self.network.inputs().len()
    }
    #[getter]
    fn num_outputs(&self) -> usize {
        self.network.outputs().len()
    }
    /// `[(name, dtype, dims)]` of the inputs; a dynamic dim is None.
    #[getter]
    fn inputs(&self) -> Vec<crate::TensorInfo> {
        crate::tensor_infos(&self.network, self.network.inputs())
    }
    /// `[(name, dtype, dims)]` of the outputs.
    #[getter]
    fn outputs(&self) -> Vec<crate::TensorInfo> {
        crate::tensor_infos(&self.network, self.network.outputs())
    }
}

/// Imports an ONNX model into a [`Network`]; failures are kept as errors to read, as
/// TensorRT's parser keeps them (each names the node).
#[pyclass(module = "kiln")]
pub(crate) struct OnnxParser {
    network: Py<Network>,
    errors: Vec<String>,
}

#[pymethods]
impl OnnxParser {
    #[new]
    fn new(network: Py<Network>) -> OnnxParser {
        OnnxParser { network, errors: Vec::new() }
    }

    /// Imports the model at `path` (external data from its folder); False on failure.
    fn parse_from_file(&mut self, py: Python<'_>, path: &str) -> PyResult<bool> {
        let result = kiln_onnx::import_file(Path::new(path)).map_err(|e| format!("cannot import ONNX model `{path}`: {e}"));
        self.take(py, result)
    }

    /// Imports a model from its bytes; `path` is where its external data lies relative to.
    #[pyo3(signature = (model, path=None))]
    fn parse(&mut self, py: Python<'_>, model: &[u8], path: Option<&str>) -> PyResult<bool> {
        let dir = path.map(|p| kiln_onnx::model_dir(Path::new(p)));
        let result = kiln_onnx::import_bytes(model, dir).map_err(|e| format!("cannot import the ONNX model: {e}"));
        self.take(py, result)
    }

    #[getter]
    fn num_errors(&self) -> usize {
        self.errors.len()
    }

    fn get_error(&self, index: usize) -> PyResult<String> {
        self.errors.get(index).cloned().ok_or_else(|| error(format!("error #{index} does not exist: the parser has {}", self.errors.len())))
    }

    fn clear_errors(&mut self) {
        self.errors.clear();
    }
}

impl OnnxParser {
    fn take(&mut self, py: Python<'_>, result: Result<KilnNetwork, String>) -> PyResult<bool> {
        match result {
            Ok(network) => {
                self.network.borrow_mut(py).network = network;
                Ok(true)
            }
            Err(e) => {
                self.errors.push(e);
                Ok(false)
            }
        }
    }
}

/// Min, opt and max dims of each dynamic input: one optimization profile.
#[pyclass(module = "kiln")]
#[derive(Clone, Default)]
pub(crate) struct OptimizationProfile {
    profile: KilnProfile,
}

#[pymethods]
impl OptimizationProfile {
    #[new]
    fn new() -> OptimizationProfile {
        OptimizationProfile::default()
    }

    fn set_shape(&mut self, input: &str, min: Vec<usize>, opt: Vec<usize>, max: Vec<usize>) {
        self.profile.set_dimensions(input, &min, &opt, &max);
    }

    /// `(min, opt, max)` of `input`, or None where the profile does not set it.
    fn get_shape(&self, input: &str) -> Option<(Vec<usize>, Vec<usize>, Vec<usize>)> {
        self.profile.dimensions(input).map(|r| (r.min.clone(), r.opt.clone(), r.max.clone()))
    }
}

/// Builder settings: flags (by name: "fp16", "refit", …), profiles, the memory budget.
#[pyclass(module = "kiln")]
#[derive(Clone, Default)]
pub(crate) struct BuilderConfig {
    config: kiln::BuilderConfig,
}

#[pymethods]
impl BuilderConfig {
    #[new]
    fn new() -> BuilderConfig {
        BuilderConfig::default()
    }

    fn set_flag(&mut self, name: &str) -> PyResult<()> {
        self.config.set_flag(flag(name)?);
        Ok(())
    }

    fn clear_flag(&mut self, name: &str) -> PyResult<()> {
        self.config.clear_flag(flag(name)?);
        Ok(())
    }

    fn get_flag(&self, name: &str) -> PyResult<bool> {
        Ok(self.config.get_flag(flag(name)?))
    }

    /// Adds a profile; returns its index.
    fn add_optimization_profile(&mut self, profile: &OptimizationProfile) -> usize {
        self.config.profiles.push(profile.profile.clone());
        self.config.profiles.len() - 1
    }

    #[getter]
    fn num_optimization_profiles(&self) -> usize {
        self.config.profiles.len()
    }

    /// Most bytes one tensor may take (None: the device's memory).
    #[getter]
    fn get_max_memory(&self) -> Option<u64> {
        self.config.max_memory_bytes
    }

    #[setter]
    fn set_max_memory(&mut self, bytes: Option<u64>) {
        self.config.max_memory_bytes = bytes;
    }
}

/// Builds engines for one backend ("auto": the first available of cuda, wgpu, cpu).
#[pyclass(module = "kiln")]
pub(crate) struct Builder {
    backend: Box<dyn kiln::Backend>,
    device: usize,
}

#[pymethods]
impl Builder {
    #[new]
    #[pyo3(signature = (backend="auto", device=0))]
    fn new(backend: &str, device: usize) -> PyResult<Builder> {
        Ok(Builder { backend: open_backend(backend, device)?, device })
    }

    #[getter]
    fn backend(&self) -> String {
        self.backend.name().to_string()
    }

    fn create_network(&self) -> Network {
        Network { network: KilnNetwork::new("network") }
    }

    fn create_builder_config(&self) -> BuilderConfig {
        BuilderConfig::default()
    }

    fn create_optimization_profile(&self) -> OptimizationProfile {
        OptimizationProfile::default()
    }

    /// The engine file's bytes for `network` built with `config`.
    fn build_serialized_network<'py>(&self, py: Python<'py>, network: &Network, config: &BuilderConfig) -> PyResult<Bound<'py, PyBytes>> {
        Ok(PyBytes::new(py, &self.build(py, network, config)?.serialize()))
    }

    /// `network` built with `config`, prepared to run.
    fn build_engine(&self, py: Python<'_>, network: &Network, config: &BuilderConfig) -> PyResult<Engine> {
        Engine::prepare(self.build(py, network, config)?, Some(self.backend.name()), self.device)
    }
}

impl Builder {
    fn build(&self, py: Python<'_>, network: &Network, config: &BuilderConfig) -> PyResult<kiln::Engine> {
        let backend = self.backend.as_ref();
        py.detach(|| kiln::Builder::new(backend).build(&network.network, &config.config))
            .map_err(|e| error(format!("cannot build an engine for `{}`: {e}", backend.name())))
    }
}

/// Loads engines (TensorRT's `Runtime`); `backend` must be the engine's own when given.
#[pyclass(module = "kiln")]
pub(crate) struct Runtime {
    backend: Option<String>,
    device: usize,
}

#[pymethods]
impl Runtime {
    #[new]
    #[pyo3(signature = (backend=None, device=0))]
    fn new(backend: Option<String>, device: usize) -> Runtime {
        Runtime { backend, device }
    }

    fn deserialize_engine(&self, data: &[u8]) -> PyResult<Engine> {
        let engine = kiln::Engine::deserialize(data).map_err(|e| error(format!("cannot load the engine: {e}")))?;
        Engine::prepare(engine, self.backend.as_deref(), self.device)
    }

    /// [`Runtime::deserialize_engine`] under TensorRT's name.
    fn deserialize_cuda_engine(&self, data: &[u8]) -> PyResult<Engine> {
        self.deserialize_engine(data)
    }
}

/// The profile dims of an engine input: `(min, opt, max)` in profile `profile`, the fixed
/// dims three times for an input without dynamic dims.
pub(crate) fn profile_shape(engine: &kiln::Engine, name: &str, profile: usize) -> PyResult<(Vec<usize>, Vec<usize>, Vec<usize>)> {
    let net = engine.network();
    let t = net.inputs().iter().copied().find(|&t| net.tensor(t).name == name).ok_or_else(|| {
        error(kiln::RunError::UnknownInput {
            name: name.into(),
            expected: net.inputs().iter().map(|&t| net.tensor(t).name.clone()).collect::<Vec<_>>().join(", "),
        })
    })?;
    if let Some(fixed) = net.tensor(t).shape.as_fixed() {
        return Ok((fixed.clone(), fixed.clone(), fixed));
    }
    let count = engine.num_optimization_profiles();
    let p = engine.profiles().get(profile).ok_or_else(|| error(kiln::RunError::NoSuchProfile { index: profile, count }))?;
    let r = p.dimensions(name).ok_or_else(|| error(format!("profile {profile} does not give the dims of `{name}`")))?;
    Ok((r.min.clone(), r.opt.clone(), r.max.clone()))
}

/// `-1` for a dynamic dim.
pub(crate) fn declared_dims(dims: &[Dim]) -> Vec<i64> {
    dims.iter().map(|d| d.fixed().map_or(-1, |n| n as i64)).collect()
}

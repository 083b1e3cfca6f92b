//! `kiln._kiln`, the extension module behind the `kiln` Python package: compile an ONNX
//! model into an engine, load and save engine files, and run an engine on numpy arrays or, with
//! no host copy, on CUDA device tensors (DLPack, CUDA array interface). Every failure is a
//! `kiln.KilnError` carrying kiln's message.

// `unsafe` lives in the FFI modules (dlpack.rs, streams.rs) alone, which allow it.
#![deny(unsafe_code)]

mod convert;
mod streams;
mod device_array;
mod device_run;
mod device_tensor;
mod dlpack;
mod execution_context;
mod runtime_api;

use device_tensor::PyTensor;
use kiln::{Backend, Builder, BuilderConfig, BuilderFlag, Engine as KilnEngine, PreparedEngine};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

pyo3::create_exception!(kiln, KilnError, pyo3::exceptions::PyException, "A kiln failure; the message says what is wrong.");

fn error(message: impl std::fmt::Display) -> PyErr {
    KilnError::new_err(message.to_string())
}

/// The backend of this name on device `device` (cuda's ordinal; the others have only 0);
/// `auto` takes the first available of cuda, wgpu, cpu (passing over wgpu on a software
/// adapter, slower than cpu).
fn open_backend(name: &str, device: usize) -> PyResult<Box<dyn Backend>> {
    if name == "auto" {
        return kiln_builtin_backends::open_auto_on_device(device).map_err(error);
    }
    kiln_builtin_backends::open_on_device(name, device).map_err(error)
}

/// One input or output: name, numpy dtype name, and dims (None for a dynamic dim).
type TensorInfo = (String, String, Vec<Option<usize>>);

/// A built engine, prepared on its backend for running (or, loaded from a weight-stripped
/// file, waiting for a [`Refitter`] to give it its weights).
#[pyclass(module = "kiln", frozen)]
struct Engine {
    state: Mutex<State>,
    /// The device it runs on (cuda's ordinal).
    device: usize,
}

enum State {
    Prepared(Arc<PreparedEngine>),
    /// A weight-stripped engine before its refit: it cannot be prepared yet.
    Stripped(Box<KilnEngine>),
}

impl Engine {
    fn prepare(engine: KilnEngine, backend: Option<&str>, device: usize) -> PyResult<Engine> {
        if let Some(requested) = backend.filter(|b| *b != "auto" && *b != engine.backend()) {
            return Err(error(format!("the engine was built for backend `{}`, not `{requested}`", engine.backend())));
        }
        let state = if engine.is_weight_stripped() {
            State::Stripped(Box::new(engine))
        } else {
            State::Prepared(prepare_on_own_backend(engine, device)?)
        };
        Ok(Engine { state: Mutex::new(state), device })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `f` of the host engine (the prepared engine's, or the stripped one).
    fn with_engine<T>(&self, f: impl FnOnce(&KilnEngine) -> T) -> T {
        match &*self.lock() {
            State::Prepared(p) => f(p.engine()),
            State::Stripped(e) => f(e),
        }
    }

    fn prepared(&self) -> PyResult<Arc<PreparedEngine>> {
        match &*self.lock() {
            State::Prepared(p) => Ok(p.clone()),
            State::Stripped(_) => Err(error(kiln::RunError::WeightStripped)),
        }
    }

    fn infos(&self, outputs: bool) -> Vec<TensorInfo> {
        self.with_engine(|engine| {
            let network = engine.network();
            tensor_infos(network, if outputs { network.outputs() } else { network.inputs() })
        })
    }

    /// The engine's description of I/O tensor `name`, or an error naming the tensors.
    fn io_tensor<T>(&self, name: &str, f: impl FnOnce(&kiln::TensorDesc, bool) -> T) -> PyResult<T> {
        self.with_engine(|engine| {
            let net = engine.network();
            let is_input = |t: &kiln::TensorId| net.tensor(*t).name == name;
            match (net.inputs().iter().find(|t| is_input(t)), net.outputs().iter().find(|t| is_input(t))) {
                (Some(&t), _) => Ok(f(net.tensor(t), true)),
                (None, Some(&t)) => Ok(f(net.tensor(t), false)),
                _ => Err(error(kiln::RunError::UnknownTensor { name: name.into(), expected: io_names(net).join(", ") })),
            }
        })
    }
}

/// `(name, numpy dtype, dims)` of each tensor; a dynamic dim is None.
fn tensor_infos(network: &kiln::Network, tensors: &[kiln::TensorId]) -> Vec<TensorInfo> {
    tensors
        .iter()
        .map(|&t| {
            let d = network.tensor(t);
            (d.name.clone(), convert::numpy_dtype(d.dtype), d.shape.dims().iter().map(|x| x.fixed()).collect())
        })
        .collect()
}

/// The names of the inputs, then the outputs.
fn io_names(network: &kiln::Network) -> Vec<String> {
    network.inputs().iter().chain(network.outputs()).map(|&t| network.tensor(t).name.clone()).collect()
}

/// Prepares `engine` on device `device` of the backend it was built for.
fn prepare_on_own_backend(engine: KilnEngine, device: usize) -> PyResult<Arc<PreparedEngine>> {
    let backend = open_backend(engine.backend(), device)?;
    PreparedEngine::new(engine, backend.as_ref()).map_err(error)
}

#[pymethods]
impl Engine {
    /// Loads an engine file (`kiln build`) and prepares it on device `device` (cuda's
    /// ordinal) of the backend it was built for.
    #[staticmethod]
    #[pyo3(signature = (path, backend=None, device=0))]
    fn load(path: &str, backend: Option<&str>, device: usize) -> PyResult<Engine> {
        let bytes = std::fs::read(path).map_err(|e| error(format!("cannot read engine file `{path}`: {e}")))?;
        let engine = KilnEngine::deserialize(&bytes).map_err(|e| error(format!("cannot load engine file `{path}`: {e}")))?;
        Engine::prepare(engine, backend, device)
    }

    /// An engine from the bytes of an engine file.
    #[staticmethod]
    #[pyo3(signature = (data, backend=None, device=0))]
    fn deserialize(data: &[u8], backend: Option<&str>, device: usize) -> PyResult<Engine> {
        Engine::prepare(KilnEngine::deserialize(data).map_err(|e| error(format!("cannot load the engine: {e}")))?, backend, device)
    }

    /// The device the engine runs on (cuda's ordinal; 0 on the other backends).
    #[getter]
    fn device(&self) -> usize {
        self.device
    }

    /// The engine file's bytes.
    fn serialize<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.with_engine(KilnEngine::serialize))
    }

    /// Writes the engine file.
    fn save(&self, path: &str) -> PyResult<()> {
        std::fs::write(path, self.with_engine(KilnEngine::serialize)).map_err(|e| error(format!("cannot write `{path}`: {e}")))
    }

    /// The backend the engine runs on.
    #[getter]
    fn backend(&self) -> String {
        self.with_engine(|e| e.backend().to_string())
    }

    /// `[(name, dtype, dims)]` of the inputs; a dynamic dim is None.
    #[getter]
    fn inputs(&self) -> Vec<TensorInfo> {
        self.infos(false)
    }

    /// `[(name, dtype, dims)]` of the outputs; a dynamic dim is None.
    #[getter]
    fn outputs(&self) -> Vec<TensorInfo> {
        self.infos(true)
    }

    /// Whether the engine still lacks its weights (a weight-stripped file not yet refitted).
    #[getter]
    fn weight_stripped(&self) -> bool {
        self.with_engine(KilnEngine::is_weight_stripped)
    }

    /// Runs the engine once on `{input name: array}` and returns `{output name: array}`. Numpy
    /// arrays give numpy outputs. CUDA tensors (DLPack or `__cuda_array_interface__`: PyTorch,
    /// CuPy, `kiln.DeviceArray`) are read in place and give `kiln.DeviceArray` outputs in new
    /// device memory, ordered on `stream` (a `CUstream` int) where given, else complete on
    /// return; all inputs on the device or all on the host.
    #[pyo3(signature = (inputs, stream=None))]
    fn run<'py>(&self, py: Python<'py>, inputs: &Bound<'py, PyDict>, stream: Option<u64>) -> PyResult<Bound<'py, PyDict>> {
        let prepared = self.prepared()?;
        let consumer_stream = Some(stream.unwrap_or(streams::LEGACY_STREAM));
        let mut given = Vec::with_capacity(inputs.len());
        for (key, value) in inputs.iter() {
            let name: String = key.extract().map_err(|_| error("input names must be strings"))?;
            let tensor = device_tensor::read_tensor(&name, &value, consumer_stream).map_err(error)?;
            given.push((name, tensor));
        }
        if given.iter().any(|(_, t)| matches!(t, PyTensor::Device(_))) {
            return device_run::run(py, &prepared, &given, stream);
        }
        let mut tensors = HashMap::with_capacity(given.len());
        for (name, tensor) in given {
            if let PyTensor::Host(tensor) = tensor {
                tensors.insert(name, tensor);
            }
        }
        let context = prepared.create_execution_context();
        // The run holds no Python object: other Python threads go on meanwhile.
        let outputs = py.detach(|| context.run(&tensors)).map_err(error)?;
        let result = PyDict::new(py);
        let network = prepared.engine().network();
        for &t in network.outputs() {
            let name = &network.tensor(t).name;
            if let Some(tensor) = outputs.get(name) {
                result.set_item(name, convert::to_array(py, tensor).map_err(error)?)?;
            }
        }
        Ok(result)
    }

    /// A new execution context with profile 0 active (TensorRT's
    /// `create_execution_context`).
    fn create_execution_context(&self) -> PyResult<execution_context::ExecutionContext> {
        Ok(execution_context::ExecutionContext::new(&self.prepared()?))
    }

    /// New uninitialized device memory for `shape` elements of `dtype` (a numpy dtype or its
    /// name; float32 by default) on the engine's device; an error on backends that run on
    /// host memory.
    #[pyo3(signature = (shape, dtype=None))]
    fn allocate_device(&self, shape: Vec<usize>, dtype: Option<&Bound<'_, PyAny>>) -> PyResult<device_array::DeviceArray> {
        let dtype = dtype.map_or(Ok(kiln::DataType::F32), device_run::parse_dtype)?;
        device_run::allocate(&*self.prepared()?, shape, dtype)
    }

    /// A device copy of a numpy array on the engine's device; an error on backends that run on
    /// host memory.
    fn to_device(&self, py: Python<'_>, array: &Bound<'_, PyAny>) -> PyResult<device_array::DeviceArray> {
        let tensor = convert::to_tensor("array", array).map_err(error)?;
        device_run::upload(py, &*self.prepared()?, &tensor)
    }

    #[getter]
    fn num_optimization_profiles(&self) -> usize {
        self.with_engine(|e| e.num_optimization_profiles().max(1))
    }

    #[getter]
    fn num_io_tensors(&self) -> usize {
        self.with_engine(|e| io_names(e.network()).len())
    }

    /// The name of I/O tensor `index` (inputs first).
    fn get_tensor_name(&self, index: usize) -> PyResult<String> {
        let names = self.with_engine(|e| io_names(e.network()));
        names.get(index).cloned().ok_or_else(|| error(format!("I/O tensor #{index} does not exist: the engine has {}", names.len())))
    }

    /// "input" or "output".
    fn get_tensor_mode(&self, name: &str) -> PyResult<&'static str> {
        self.io_tensor(name, |_, input| if input { "input" } else { "output" })
    }

    /// The numpy dtype name of `name`.
    fn get_tensor_dtype(&self, name: &str) -> PyResult<String> {
        self.io_tensor(name, |d, _| convert::numpy_dtype(d.dtype))
    }

    /// The declared dims of `name`; -1 for a dynamic dim.
    fn get_tensor_shape(&self, name: &str) -> PyResult<Vec<i64>> {
        self.io_tensor(name, |d, _| runtime_api::declared_dims(d.shape.dims()))
    }

    /// `(min, opt, max)` dims of input `name` in optimization profile `profile`.
    fn get_tensor_profile_shape(&self, name: &str, profile: usize) -> PyResult<(Vec<usize>, Vec<usize>, Vec<usize>)> {
        self.with_engine(|e| runtime_api::profile_shape(e, name, profile))
    }

    fn __repr__(&self) -> String {
        let names = |infos: Vec<TensorInfo>| infos.into_iter().map(|(n, ..)| n).collect::<Vec<_>>().join(", ");
        format!("kiln.Engine(backend={:?}, inputs=[{}], outputs=[{}])", self.backend(), names(self.inputs()), names(self.outputs()))
    }
}

/// New weights for an engine built with `refit=True` (TensorRT's `Refitter`): set them by
/// name or by layer and role, then `refit_engine()` updates the engine in place.
#[pyclass(module = "kiln")]
struct Refitter {
    engine: Py<Engine>,
    refitter: kiln::refit::Refitter,
}

#[pymethods]
impl Refitter {
    #[new]
    fn new(engine: Py<Engine>) -> PyResult<Refitter> {
        let refitter = engine.get().with_engine(kiln::refit::Refitter::new).map_err(error)?;
        Ok(Refitter { engine, refitter })
    }

    /// Sets the weights named `name` (an ONNX initializer's name) to `weights`.
    fn set_named_weights(&mut self, name: &str, weights: &Bound<'_, PyAny>) -> PyResult<()> {
        let tensor = convert::to_tensor(name, weights).map_err(error)?;
        self.refitter.set_named_weights(name, tensor).map_err(error)
    }

    /// Sets the `role` weights ("kernel", "bias", "scale", "shift", "constant") of `layer`.
    fn set_weights(&mut self, layer: &str, role: &str, weights: &Bound<'_, PyAny>) -> PyResult<()> {
        let role = kiln::refit::WeightsRole::ALL
            .into_iter()
            .find(|r| r.name() == role)
            .ok_or_else(|| error(format!("`{role}` is not a weights role (kernel, bias, scale, shift, constant)")))?;
        let tensor = convert::to_tensor(layer, weights).map_err(error)?;
        self.refitter.set_weights(layer, role, tensor).map_err(error)
    }

    /// Sets every weight the ONNX model at `path` has an initializer of the same name for
    /// (TensorRT's `OnnxParserRefitter`): a new checkpoint's export, or the model a
    /// weight-stripped engine was built from. Returns how many were set.
    fn set_weights_from_onnx(&mut self, path: &str) -> PyResult<usize> {
        let network = kiln_onnx::import_file(Path::new(path)).map_err(|e| error(format!("cannot import ONNX model `{path}`: {e}")))?;
        self.refitter.set_weights_from_network(&network).map_err(error)
    }

    /// The current value of weights `name` (the new one where set), as a numpy array.
    fn get_named_weights<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        let tensor = self.refitter.get_named_weights(name).ok_or_else(|| error(kiln::refit::RefitError::UnknownWeights(name.into())))?;
        convert::to_array(py, tensor).map_err(error)
    }

    /// The names of every refittable weight.
    fn get_all_weights(&self) -> Vec<String> {
        self.refitter.get_all_weights()
    }

    /// The weights still to set before `refit_engine()` (a weight-stripped engine's).
    fn get_missing_weights(&self) -> Vec<String> {
        self.refitter.get_missing_weights()
    }

    /// `[(layer, role)]` of every refittable weight.
    fn get_all(&self) -> Vec<(String, String)> {
        self.refitter.get_all().into_iter().map(|(l, r)| (l, r.name().to_string())).collect()
    }

    /// `[(layer, role)]` of the weights still to set.
    fn get_missing(&self) -> Vec<(String, String)> {
        self.refitter.get_missing().into_iter().map(|(l, r)| (l, r.name().to_string())).collect()
    }

    /// Refits the engine in place (refused while another thread runs it); returns how many
    /// of its weights blobs changed. A weight-stripped engine is prepared afterwards.
    fn refit_engine(&mut self) -> PyResult<usize> {
        let engine = self.engine.get();
        let backend = open_backend(&engine.backend(), engine.device)?;
        let mut state = engine.lock();
        match &mut *state {
            State::Prepared(prepared) => self.refitter.refit_prepared(prepared, backend.as_ref()).map_err(error),
            State::Stripped(stripped) => {
                let changed = self.refitter.refit_engine(stripped, backend.as_ref()).map_err(error)?;
                let prepared = PreparedEngine::new((**stripped).clone(), backend.as_ref()).map_err(error)?;
                *state = State::Prepared(prepared);
                Ok(changed)
            }
        }
    }
}

/// Imports an ONNX model (external data from its folder) and builds an engine for `backend`.
/// Dynamic input dims are fixed by `shapes` ({name: dims}) when given.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
#[pyo3(signature = (model, backend="auto", fp16=false, bf16=false, tf32=true, shapes=None, refit=false, device=0))]
fn compile(
    model: &str,
    backend: &str,
    fp16: bool,
    bf16: bool,
    tf32: bool,
    shapes: Option<HashMap<String, Vec<usize>>>,
    refit: bool,
    device: usize,
) -> PyResult<Engine> {
    let network = kiln_onnx::import_file(Path::new(model)).map_err(|e| error(format!("cannot import ONNX model `{model}`: {e}")))?;
    let target = open_backend(backend, device)?;
    let mut config = BuilderConfig::default();
    for (flag, on) in [(BuilderFlag::Fp16, fp16), (BuilderFlag::Bf16, bf16), (BuilderFlag::Refit, refit)] {
        if on {
            config.set_flag(flag);
        }
    }
    if !tf32 {
        config.clear_flag(BuilderFlag::Tf32);
    }
    if let Some(shapes) = shapes {
        let mut profile = kiln::OptimizationProfile::new();
        for (name, dims) in shapes {
            profile.set_dimensions(&name, &dims, &dims, &dims);
        }
        config.profiles.push(profile);
    }
    let engine = Builder::new(target.as_ref()).build(&network, &config).map_err(|e| error(format!("cannot build an engine for `{}`: {e}", target.name())))?;
    Engine::prepare(engine, Some(target.name()), device)
}

#[pymodule]
fn _kiln(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Engine>()?;
    m.add_class::<device_array::DeviceArray>()?;
    m.add_class::<Refitter>()?;
    m.add_class::<runtime_api::Builder>()?;
    m.add_class::<runtime_api::BuilderConfig>()?;
    m.add_class::<execution_context::ExecutionContext>()?;
    m.add_class::<runtime_api::Network>()?;
    m.add_class::<runtime_api::OnnxParser>()?;
    m.add_class::<runtime_api::OptimizationProfile>()?;
    m.add_class::<runtime_api::Runtime>()?;
    m.add_function(wrap_pyfunction!(compile, m)?)?;
    m.add("KilnError", m.py().get_type::<KilnError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

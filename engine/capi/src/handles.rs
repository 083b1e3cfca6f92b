//! The safe half of the C API: what a `KilnEngine` and a `KilnContext` hold, and the type
//! codes of `include/kiln.h`. No raw pointer is seen here.

use kiln_core::{Backend, DataType, Engine, ExecutionContext, HostTensor, PreparedEngine};
use std::collections::{BTreeMap, HashMap};
use std::ffi::CString;
use std::sync::Arc;

/// A loaded engine, prepared on the backend it was built for.
#[derive(Debug)]
pub struct EngineHandle {
    pub prepared: Arc<PreparedEngine>,
    /// Inputs first, then outputs, in network order; NUL-terminated for `kiln_engine_io_name`.
    pub io_names: Vec<CString>,
    pub inputs: usize,
}

/// A context: the inputs set so far and the last run's outputs.
#[derive(Debug)]
pub struct ContextHandle {
    pub context: ExecutionContext,
    pub inputs: HashMap<String, HostTensor>,
    pub outputs: BTreeMap<String, HostTensor>,
}

/// The backend an engine names, on `device`, as the `kiln` command opens it.
fn backend_for(name: &str, device: usize) -> Result<Box<dyn Backend>, String> {
    let entry = kiln_builtin_backends::BUILT_IN.iter().find(|b| b.name == name).ok_or_else(|| {
        format!("the engine was built for backend `{name}`, which this libkiln does not have (it has {})", kiln_builtin_backends::names_text())
    })?;
    entry.open_device(device).map_err(|e| e.to_string())
}

impl EngineHandle {
    /// Loads an engine file's bytes and prepares it on device `device` of its backend.
    pub fn load(bytes: &[u8], device: usize) -> Result<EngineHandle, String> {
        let engine = Engine::deserialize(bytes).map_err(|e| format!("cannot load the engine: {e}"))?;
        let backend = backend_for(engine.backend(), device)?;
        let network = engine.network();
        let names: Vec<&str> = network.inputs().iter().chain(network.outputs()).map(|&t| network.tensor(t).name.as_str()).collect();
        let io_names = names
            .iter()
            .map(|n| CString::new(*n).map_err(|_| format!("tensor name `{n}` holds a NUL byte")))
            .collect::<Result<_, _>>()?;
        let inputs = network.inputs().len();
        let prepared = PreparedEngine::new(engine, backend.as_ref()).map_err(|e| format!("cannot prepare the engine: {e}"))?;
        Ok(EngineHandle { prepared, io_names, inputs })
    }

    fn desc(&self, name: &str) -> Result<&kiln_core::TensorDesc, String> {
        let network = self.prepared.engine().network();
        network
            .inputs()
            .iter()
            .chain(network.outputs())
            .map(|&t| network.tensor(t))
            .find(|d| d.name == name)
            .ok_or_else(|| format!("the engine has no input or output named `{name}`"))
    }

    pub fn is_input(&self, name: &str) -> Result<bool, String> {
        self.desc(name)?;
        Ok(self.io_names[..self.inputs].iter().any(|n| n.to_bytes() == name.as_bytes()))
    }

    pub fn dtype(&self, name: &str) -> Result<DataType, String> {
        Ok(self.desc(name)?.dtype)
    }

    /// Dims as declared: -1 for a dynamic dim.
    pub fn dims(&self, name: &str) -> Result<Vec<i64>, String> {
        Ok(self.desc(name)?.shape.dims().iter().map(|d| d.fixed().map_or(-1, |n| n as i64)).collect())
    }

    pub fn context(&self) -> ContextHandle {
        ContextHandle { context: self.prepared.create_execution_context(), inputs: HashMap::new(), outputs: BTreeMap::new() }
    }
}

impl ContextHandle {
    /// Keeps a copy of input `name`: `bytes` are its elements, little-endian, in C order.
    pub fn set_input(&mut self, engine: &EngineHandle, name: &str, dims: &[usize], bytes: &[u8]) -> Result<(), String> {
        if !engine.is_input(name)? {
            return Err(format!("`{name}` is an output of the engine, not an input"));
        }
        let dtype = engine.dtype(name)?;
        let tensor = HostTensor::from_le_bytes(dtype, dims.to_vec(), bytes).map_err(|e| format!("input `{name}`: {e}"))?;
        self.inputs.insert(name.to_string(), tensor);
        Ok(())
    }

    pub fn execute(&mut self) -> Result<(), String> {
        self.outputs = self.context.run(&self.inputs).map_err(|e| e.to_string())?;
        Ok(())
    }

    /// Runs on the device memory bound to every input and output (device-resident I/O),
    /// ordered on the caller's stream; the outputs stay in device memory.
    pub fn enqueue(&mut self, stream: u64, input_consumed: Option<u64>) -> Result<(), String> {
        self.outputs.clear();
        self.context.enqueue_on_device_with(Some(stream), input_consumed).map_err(|e| e.to_string())
    }

    /// The dims of output `name` of the last run, host or device.
    pub fn output_dims(&self, name: &str) -> Result<Vec<usize>, String> {
        match self.context.device_output_dims(name).filter(|_| self.outputs.is_empty()) {
            Some(dims) => Ok(dims),
            None => Ok(self.output(name)?.shape().to_vec()),
        }
    }

    pub fn output(&self, name: &str) -> Result<&HostTensor, String> {
        self.outputs.get(name).ok_or_else(|| {
            if self.outputs.is_empty() {
                "no outputs yet: kiln_context_execute first".to_string()
            } else {
                format!("the engine has no output named `{name}`")
            }
        })
    }
}

/// `KilnDataType` of `include/kiln.h`; -1 for types the header does not name.
pub fn dtype_code(dtype: DataType) -> i32 {
    match dtype {
        DataType::F32 => 0,
        DataType::F16 => 1,
        DataType::BF16 => 2,
        DataType::F64 => 3,
        DataType::I8 => 4,
        DataType::I16 => 5,
        DataType::I32 => 6,
        DataType::I64 => 7,
        DataType::U8 => 8,
        DataType::U16 => 9,
        DataType::U32 => 10,
        DataType::U64 => 11,
        DataType::Bool => 12,
        _ => -1,
    }
}

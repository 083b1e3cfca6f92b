//! Device-resident I/O through the context (`set_device_tensor_address`,
//! `enqueue_on_device`): what the context checks and passes to the backend, on a simulated
//! device whose "device memory" is a table of host bytes; and the clear refusal of a backend
//! that runs on host memory.

use crate::*;
use std::collections::HashMap;
use std::sync::Mutex;

/// Simulated device memory: address → bytes.
#[derive(Default)]
struct FakeMemory(Mutex<HashMap<u64, Vec<u8>>>);

impl FakeMemory {
    fn put(&self, address: u64, bytes: Vec<u8>) -> DevicePointer {
        let len = bytes.len();
        self.0.lock().unwrap().insert(address, bytes);
        DevicePointer { address, bytes: len }
    }

    fn get(&self, address: u64) -> Vec<u8> {
        self.0.lock().unwrap()[&address].clone()
    }
}

/// The cpu executable, run on inputs read from and outputs written to [`FakeMemory`]; records
/// the streams it was given.
struct FakeDevice {
    inner: Box<dyn Executable>,
    memory: Arc<FakeMemory>,
    streams: Arc<Mutex<Vec<Option<u64>>>>,
}

impl Executable for FakeDevice {
    fn execute(&self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>, BackendError> {
        self.inner.execute(inputs)
    }

    fn execute_on_device(&self, io: &DeviceIo<'_>, _timed: bool) -> Result<DeviceRun, BackendError> {
        self.streams.lock().unwrap().push(io.stream);
        let inputs: Vec<HostTensor> = io
            .inputs
            .iter()
            .map(|x| match x {
                DeviceInput::Host(t) => t.clone(),
                DeviceInput::Device { memory, dtype, dims } => {
                    let bytes = self.memory.get(memory.address);
                    let volume: usize = dims.iter().product();
                    let data = TensorData::from_le_bytes(*dtype, &bytes[..volume * 4]).unwrap();
                    HostTensor::new(dims.clone(), data).unwrap()
                }
            })
            .collect();
        let outputs = self.inner.execute(&inputs)?;
        for (t, dst) in outputs.iter().zip(io.outputs) {
            let memory = dst.memory(t.shape(), t.size_bytes()).map_err(|reason| BackendError::Execution { layer: "(outputs)".into(), reason })?;
            self.memory.put(memory.address, t.data().to_le_bytes());
        }
        Ok((outputs.iter().map(|t| t.shape().to_vec()).collect(), None))
    }
}

struct FakeDeviceBackend {
    cpu: CpuBackend,
    memory: Arc<FakeMemory>,
    streams: Arc<Mutex<Vec<Option<u64>>>>,
}

impl Backend for FakeDeviceBackend {
    fn name(&self) -> &str {
        "cpu"
    }
    fn device(&self) -> Result<DeviceFingerprint, BackendError> {
        self.cpu.device()
    }
    fn check_support(&self, network: &Network) -> Result<(), BackendError> {
        self.cpu.check_support(network)
    }
    fn prepare_plan(
        &self,
        network: &Network,
        control: &kiln::ir::control::ControlFlow,
        tactics: &[Option<TacticId>],
        math: MathMode,
    ) -> Result<Box<dyn Executable>, BackendError> {
        let inner = self.cpu.prepare_plan(network, control, tactics, math)?;
        Ok(Box::new(FakeDevice { inner, memory: self.memory.clone(), streams: self.streams.clone() }))
    }
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn fake_device_context() -> (ExecutionContext, Arc<FakeMemory>, Arc<Mutex<Vec<Option<u64>>>>) {
    let backend = FakeDeviceBackend { cpu: CpuBackend::new(), memory: Arc::default(), streams: Arc::default() };
    let config = BuilderConfig { profiles: vec![profile(1, 4, 8)], ..BuilderConfig::default() };
    let engine = Builder::new(&backend).build(&chain_net(n()), &config).expect("build");
    let (memory, streams) = (backend.memory.clone(), backend.streams.clone());
    let prepared = PreparedEngine::new(engine, &backend).expect("prepare");
    (prepared.create_execution_context(), memory, streams)
}

#[test]
fn a_device_execution_reads_and_writes_the_bound_device_memory_on_the_callers_stream() {
    let (mut ctx, memory, streams) = fake_device_context();
    let x = input_values(3 * 16, 0.5);
    ctx.set_input_shape("x", &[3, 16]).unwrap();
    ctx.set_device_tensor_address("x", memory.put(0x1000, f32_bytes(&x))).unwrap();
    ctx.set_device_tensor_address("y", memory.put(0x9000, vec![0; 3 * 16 * 4])).unwrap();
    assert_eq!(ctx.device_tensor_address("y"), Some(DevicePointer { address: 0x9000, bytes: 192 }));
    ctx.enqueue_on_device(Some(77)).unwrap();
    let y: Vec<f32> = memory.get(0x9000).chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(y, expected_chain(&x));
    assert_eq!(ctx.device_output_dims("y"), Some(vec![3, 16]));
    assert_eq!(*streams.lock().unwrap(), vec![Some(77)]);
}

#[test]
fn a_device_execution_checks_every_binding_and_size_before_running() {
    let (mut ctx, memory, streams) = fake_device_context();
    ctx.set_input_shape("x", &[4, 16]).unwrap();
    ctx.set_device_tensor_address("x", memory.put(0x1000, vec![0; 4 * 16 * 4])).unwrap();
    let missing = ctx.enqueue_on_device(None).unwrap_err();
    assert_eq!(missing, RunError::DeviceAddressNotSet { tensor: "y".into() });
    assert!(missing.to_string().contains("set_device_tensor_address"), "{missing}");
    ctx.set_device_tensor_address("y", memory.put(0x9000, vec![0; 100])).unwrap();
    let small = ctx.enqueue_on_device(None).unwrap_err();
    assert_eq!(small, RunError::BufferTooSmall { tensor: "y".into(), needed: 256, available: 100 });
    ctx.set_device_tensor_address("y", memory.put(0x9000, vec![0; 256])).unwrap();
    ctx.set_input_shape("x", &[8, 16]).unwrap();
    let short_input = ctx.enqueue_on_device(None).unwrap_err();
    assert_eq!(short_input, RunError::BufferTooSmall { tensor: "x".into(), needed: 512, available: 256 });
    // A host buffer bound to a name replaces its device memory.
    ctx.set_input_shape("x", &[4, 16]).unwrap();
    ctx.set_tensor_address("y", Buffer::new(256)).unwrap();
    assert_eq!(ctx.device_tensor_address("y"), None);
    assert_eq!(ctx.enqueue_on_device(None).unwrap_err(), RunError::DeviceAddressNotSet { tensor: "y".into() });
    assert!(streams.lock().unwrap().is_empty(), "nothing ran");
}

#[test]
fn a_host_memory_backend_refuses_device_io_by_name() {
    let prepared = prepare(&chain_net(n()), vec![profile(1, 4, 8)]);
    let mut ctx = prepared.create_execution_context();
    ctx.set_input_shape("x", &[2, 16]).unwrap();
    ctx.set_device_tensor_address("x", DevicePointer { address: 0x1000, bytes: 128 }).unwrap();
    ctx.set_device_tensor_address("y", DevicePointer { address: 0x2000, bytes: 128 }).unwrap();
    let refused = ctx.enqueue_on_device(Some(0)).unwrap_err().to_string();
    assert!(refused.contains("backend `cpu` cannot run on device memory"), "{refused}");
    let no_memory = prepared.allocate_device(64).unwrap_err().to_string();
    assert!(no_memory.contains("backend `cpu` cannot allocate device memory"), "{no_memory}");
    let unknown = ctx.set_device_tensor_address("z", DevicePointer { address: 0x3000, bytes: 4 }).unwrap_err();
    assert!(matches!(unknown, RunError::UnknownTensor { .. }), "{unknown:?}");
}

/// Hands out one address and records what it was asked for.
struct RecordingAllocator {
    asked: Mutex<Vec<(String, Vec<usize>, usize)>>,
    give: Option<u64>,
}

impl OutputAllocator for RecordingAllocator {
    fn allocate(&self, name: &str, dims: &[usize], bytes: usize) -> Option<DevicePointer> {
        self.asked.lock().unwrap().push((name.to_string(), dims.to_vec(), bytes));
        self.give.map(|address| DevicePointer { address, bytes })
    }
}

#[test]
fn an_output_allocator_is_asked_for_memory_once_the_dims_are_known() {
    let (mut ctx, memory, _) = fake_device_context();
    let x = input_values(2 * 16, 1.5);
    ctx.set_input_shape("x", &[2, 16]).unwrap();
    ctx.set_device_tensor_address("x", memory.put(0x1000, f32_bytes(&x))).unwrap();
    let allocator = Arc::new(RecordingAllocator { asked: Mutex::default(), give: Some(0x7000) });
    ctx.set_output_allocator("y", allocator.clone()).unwrap();
    assert_eq!(ctx.device_tensor_address("y"), None, "an allocator is not bound memory");
    ctx.enqueue_on_device(None).unwrap();
    assert_eq!(*allocator.asked.lock().unwrap(), vec![("y".to_string(), vec![2, 16], 128)]);
    let y: Vec<f32> = memory.get(0x7000).chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(y, expected_chain(&x));

    let refusing = Arc::new(RecordingAllocator { asked: Mutex::default(), give: None });
    ctx.set_output_allocator("y", refusing).unwrap();
    let refused = ctx.enqueue_on_device(None).unwrap_err().to_string();
    assert!(refused.contains("the output allocator of `y` gave no memory for 128 bytes"), "{refused}");
    let input = ctx.set_output_allocator("x", allocator).unwrap_err();
    assert_eq!(input, RunError::NotAnOutput { name: "x".into() });
}

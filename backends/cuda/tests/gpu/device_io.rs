//! Device-resident I/O (`set_device_tensor_address`, `enqueue_on_device`): inputs read from and
//! outputs written to device memory, with the answers of host I/O in every execution mode
//! (recorded, captured, replayed), on kiln's stream and on the caller's, and caller addresses
//! checked before anything is copied through them.

use crate::common::backend;
use crate::execution::{fixture, prepare};
use cudarc::driver::CudaContext;
use kiln::{DataType, DeviceAllocation, DevicePointer, ExecutionContext, HostTensor, PreparedEngine, TensorData};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Device memory bound to every input (holding `inputs`) and output of `ctx`.
struct Bound {
    inputs: Vec<(String, Box<dyn DeviceAllocation>)>,
    outputs: Vec<(String, DataType, Box<dyn DeviceAllocation>)>,
}

fn bind(prepared: &Arc<PreparedEngine>, ctx: &mut ExecutionContext, inputs: &HashMap<String, HostTensor>, outputs: &BTreeMap<String, HostTensor>) -> Bound {
    let mut bound = Bound { inputs: Vec::new(), outputs: Vec::new() };
    for (name, x) in inputs {
        let bytes = x.data().to_le_bytes();
        let memory = prepared.allocate_device(bytes.len()).expect("device memory");
        memory.write(&bytes).expect("fill");
        assert_eq!(memory.device_ordinal(), 0);
        ctx.set_input_shape(name, x.shape()).unwrap();
        ctx.set_device_tensor_address(name, memory.pointer()).unwrap();
        bound.inputs.push((name.clone(), memory));
    }
    for (name, y) in outputs {
        let memory = prepared.allocate_device(y.size_bytes()).expect("device memory");
        ctx.set_device_tensor_address(name, memory.pointer()).unwrap();
        bound.outputs.push((name.clone(), y.dtype(), memory));
    }
    bound
}

impl Bound {
    fn refill(&self, inputs: &HashMap<String, HostTensor>) {
        for (name, memory) in &self.inputs {
            memory.write(&inputs[name].data().to_le_bytes()).unwrap();
        }
    }

    /// The outputs, read back, in the dims the context reports.
    fn read(&self, ctx: &ExecutionContext) -> BTreeMap<String, HostTensor> {
        self.outputs
            .iter()
            .map(|(name, dtype, memory)| {
                let dims = ctx.device_output_dims(name).expect("output dims after a device run");
                let bytes = memory.read(dims.iter().product::<usize>() * dtype.size_bytes().unwrap()).unwrap();
                let tensor = HostTensor::new(dims, TensorData::from_le_bytes(*dtype, &bytes).unwrap()).unwrap();
                (name.clone(), tensor)
            })
            .collect()
    }
}

fn scaled(inputs: &HashMap<String, HostTensor>, factor: f32) -> HashMap<String, HostTensor> {
    inputs
        .iter()
        .map(|(n, x)| match x.data() {
            TensorData::F32(v) => (n.clone(), HostTensor::from_f32(x.shape().to_vec(), v.iter().map(|a| a * factor).collect()).unwrap()),
            _ => (n.clone(), x.clone()),
        })
        .collect()
}

#[test]
fn device_memory_io_gives_the_host_answer_in_every_execution_mode() {
    let Some(cuda) = backend() else { return };
    for (name, f16) in [("cnn_torchscript", true), ("bert_torchscript", false)] {
        let f = fixture(name);
        let prepared = prepare(cuda, &f.net, f16);
        let mut ctx = prepared.create_execution_context();
        let host = ctx.run(&f.inputs).expect("host run");
        let bound = bind(&prepared, &mut ctx, &f.inputs, &host);
        let mut modes = Vec::new();
        for round in 0..4 {
            ctx.enqueue_on_device(None).expect("device run");
            modes.push(ctx.execution_mode().unwrap_or_default());
            assert_eq!(bound.read(&ctx), host, "{name}: round {round} ({})", modes.last().unwrap());
        }
        eprintln!("{name}: device runs went {modes:?}");
        assert!(modes.iter().any(|m| m == "graph replay"), "{name}: {modes:?}");

        // On the caller's stream, with new inputs and an input-consumed event of its own.
        let cuda_ctx = CudaContext::new(0).unwrap();
        let stream = cuda_ctx.new_stream().unwrap();
        let consumed = cuda_ctx.new_event(None).unwrap();
        let changed = scaled(&f.inputs, 0.5);
        bound.refill(&changed);
        ctx.enqueue_on_device_with(Some(stream.cu_stream() as u64), Some(consumed.cu_event() as u64)).expect("enqueue on the caller's stream");
        stream.synchronize().unwrap();
        consumed.synchronize().unwrap();
        assert_eq!(bound.read(&ctx), ctx.run(&changed).expect("host run"), "{name}: on the caller's stream");
    }
}

/// The PyTorch CNN in f32, its context with device memory bound, and its host outputs.
fn bound_cnn(cuda: &kiln_cuda::CudaBackend) -> (Arc<PreparedEngine>, ExecutionContext, Bound, BTreeMap<String, HostTensor>) {
    let f = fixture("cnn_torchscript");
    let prepared = prepare(cuda, &f.net, false);
    let mut ctx = prepared.create_execution_context();
    let host = ctx.run(&f.inputs).expect("host run");
    let bound = bind(&prepared, &mut ctx, &f.inputs, &host);
    (prepared, ctx, bound, host)
}

/// `bytes` as a tensor of `like`'s type and dims.
fn tensor_like(like: &HostTensor, bytes: &[u8]) -> HostTensor {
    HostTensor::new(like.shape().to_vec(), TensorData::from_le_bytes(like.dtype(), bytes).unwrap()).unwrap()
}

#[test]
fn caller_addresses_are_checked_before_any_copy() {
    let Some(cuda) = backend() else { return };
    let (_prepared, mut ctx, bound, host) = bound_cnn(cuda);
    let (input, memory) = &bound.inputs[0];
    let real = memory.pointer();
    let refused = |ctx: &ExecutionContext| ctx.enqueue_on_device(None).expect_err("refused").to_string();

    ctx.set_device_tensor_address(input, DevicePointer { address: 0x1000, bytes: real.bytes }).unwrap();
    let not_device = refused(&ctx);
    assert!(not_device.contains(&format!("device memory of `{input}`")) && not_device.contains("is not device memory"), "{not_device}");

    let host_vec = vec![0u8; real.bytes];
    ctx.set_device_tensor_address(input, DevicePointer { address: host_vec.as_ptr() as u64, bytes: real.bytes }).unwrap();
    assert!(refused(&ctx).contains("is not device memory"), "host memory");

    let past_end = DevicePointer { address: real.address, bytes: real.bytes + (4 << 20) };
    ctx.set_device_tensor_address(input, past_end).unwrap();
    let short = refused(&ctx);
    assert!(short.contains("its allocation has"), "{short}");

    ctx.set_device_tensor_address(input, real).unwrap();
    ctx.enqueue_on_device(None).expect("the real memory runs");
    assert_eq!(bound.read(&ctx), host);
}

/// Page-locked host memory, kiln's (`allocate_host`) or the caller's registered
/// (`register_host_memory`), binds as device memory does and gives the same answers.
#[test]
fn page_locked_host_memory_is_copied_straight_to_and_from_the_device() {
    let Some(cuda) = backend() else { return };
    let f = fixture("cnn_torchscript");
    let prepared = prepare(cuda, &f.net, true);
    let mut ctx = prepared.create_execution_context();
    let host = ctx.run(&f.inputs).expect("host run");
    let net = prepared.engine().network();
    let mut pinned = Vec::new();
    for (name, x) in &f.inputs {
        let memory = prepared.allocate_host(x.size_bytes()).expect("pinned memory");
        memory.write(&x.data().to_le_bytes()).unwrap();
        ctx.set_input_shape(name, x.shape()).unwrap();
        ctx.set_device_tensor_address(name, memory.pointer()).unwrap();
        pinned.push(memory);
    }
    let (out_name, out) = host.iter().next().unwrap();
    let out_memory = prepared.allocate_host(out.size_bytes()).expect("pinned memory");
    ctx.set_device_tensor_address(out_name, out_memory.pointer()).unwrap();
    for round in 0..3 {
        ctx.enqueue_on_device(None).expect("run on pinned memory");
        let got = tensor_like(out, &out_memory.read(out.size_bytes()).unwrap());
        assert_eq!(&got, out, "round {round} ({:?})", ctx.execution_mode());
    }

    // The caller's own vectors, registered.
    let (in_name, x) = f.inputs.iter().next().unwrap();
    assert_eq!(net.inputs().len(), 1, "one input");
    let mut input = x.data().to_le_bytes().to_vec();
    let mut output = vec![0u8; out.size_bytes()];
    // SAFETY: both vectors outlive their registrations (dropped first, below) and are neither
    // moved nor touched while the execution runs (it is waited for).
    let registered = unsafe {
        [
            kiln_cuda::caller_memory::register_host_memory(0, input.as_mut_ptr() as u64, input.len()).expect("register the input"),
            kiln_cuda::caller_memory::register_host_memory(0, output.as_mut_ptr() as u64, output.len()).expect("register the output"),
        ]
    };
    ctx.set_device_tensor_address(in_name, DevicePointer { address: input.as_ptr() as u64, bytes: input.len() }).unwrap();
    ctx.set_device_tensor_address(out_name, DevicePointer { address: output.as_ptr() as u64, bytes: output.len() }).unwrap();
    ctx.enqueue_on_device(None).expect("run on registered memory");
    drop(registered);
    let got = tensor_like(out, &output);
    assert_eq!(&got, out, "registered host memory");
    // Unregistered, the same vector is refused by name.
    let refused = ctx.enqueue_on_device(None).expect_err("pageable memory").to_string();
    assert!(refused.contains("register it first"), "{refused}");
}

/// Gives one allocation of kiln's to every request, counting them.
struct OneAllocation {
    memory: Box<dyn DeviceAllocation>,
    asked: std::sync::Mutex<Vec<Vec<usize>>>,
}

impl kiln::OutputAllocator for OneAllocation {
    fn allocate(&self, _name: &str, dims: &[usize], bytes: usize) -> Option<DevicePointer> {
        self.asked.lock().unwrap().push(dims.to_vec());
        (bytes <= self.memory.pointer().bytes).then(|| self.memory.pointer())
    }
}

/// An output allocator's memory receives the output in every execution mode, and an address
/// it gives is checked as a bound one is.
#[test]
fn an_output_allocator_gives_the_memory_once_the_dims_are_known() {
    let Some(cuda) = backend() else { return };
    let (prepared, mut ctx, bound, host) = bound_cnn(cuda);
    let (out_name, out) = host.iter().next().unwrap();
    let allocator = Arc::new(OneAllocation { memory: prepared.allocate_device(out.size_bytes()).unwrap(), asked: Default::default() });
    ctx.set_output_allocator(out_name, allocator.clone()).unwrap();
    for round in 0..3 {
        ctx.enqueue_on_device(None).expect("device run with an allocator");
        let bytes = allocator.memory.read(out.size_bytes()).unwrap();
        let got = tensor_like(out, &bytes);
        assert_eq!(&got, out, "round {round} ({:?})", ctx.execution_mode());
    }
    assert_eq!(*allocator.asked.lock().unwrap(), vec![out.shape().to_vec(); 3]);
    drop(bound);
}

//! Per input-shape signature: the activation arena placed from the first execution's trace,
//! and the CUDA graph captured from the second (when the engine allows one), replayed after.

use kiln::{invalid, DataType, DeviceInput, DeviceIo, DeviceOutput, DevicePointer, DeviceTimes, HostTensor, KernelError, TensorData};
use crate::ops::KResult;
use crate::arena::{Arena, PinnedHost};
use crate::buffer::{storage_size, Graph};
use crate::device::{event_span, Gpu};
use crate::error::GpuError;
use cudarc::driver::CudaEvent;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// The dtype and shape of each network input.
pub type Signature = Vec<(DataType, Vec<usize>)>;

pub fn signature(inputs: &[HostTensor]) -> Signature {
    inputs.iter().map(|x| (x.dtype(), x.shape().to_vec())).collect()
}

/// Where an execution's inputs come from and its outputs go: host tensors, or the caller's
/// device memory (device-resident I/O). Both run in the same arenas and graphs: a device
/// input is copied into the arena address a host input would be uploaded to.
#[derive(Clone, Copy, Debug)]
pub enum Io<'a> {
    Host(&'a [HostTensor]),
    Device(&'a DeviceIo<'a>),
}

impl Io<'_> {
    pub fn signature(&self) -> Signature {
        match self {
            Io::Host(inputs) => signature(inputs),
            Io::Device(io) => io.inputs.iter().map(|x| (x.dtype(), x.dims().to_vec())).collect(),
        }
    }

    fn count(&self) -> usize {
        match self {
            Io::Host(inputs) => inputs.len(),
            Io::Device(io) => io.inputs.len(),
        }
    }
}

/// An execution's outputs: host tensors, or the dims of those written to device memory.
#[derive(Debug)]
pub enum Delivered {
    Host(Vec<HostTensor>),
    Device(Vec<Vec<usize>>),
}

/// The caller's memory for output #`index` of `dims` and `bytes` bytes: the bound memory, or an
/// output allocator's (checked as bound memory was before the run); refused when too small.
fn output_memory(gpu: &Gpu, index: usize, dims: &[usize], bytes: usize, dst: &DeviceOutput) -> KResult<DevicePointer> {
    let memory = dst.memory(dims, bytes).map_err(KernelError::Invalid)?;
    if let DeviceOutput::Allocator(_, name) = dst {
        gpu.check_caller_memory(memory.address, memory.bytes.max(bytes))
            .map_err(|e| invalid!("the output allocator's memory for `{name}`: {e}"))?;
    }
    if bytes > memory.bytes {
        return Err(invalid!("output #{index} has {bytes} bytes, the device memory for it {}", memory.bytes));
    }
    Ok(memory)
}

/// Copies output #`index` (`bytes` bytes of `dims` at device address `src`) into the caller's
/// memory.
pub fn deliver_device(gpu: &Gpu, index: usize, src: u64, dims: &[usize], bytes: usize, dst: &DeviceOutput) -> KResult<()> {
    let memory = output_memory(gpu, index, dims, bytes, dst)?;
    gpu.copy_address(src, memory.address, bytes).map_err(KernelError::from)
}

/// Copies an output computed on the host into the caller's memory.
pub fn deliver_host(gpu: &Gpu, index: usize, tensor: &HostTensor, dst: &DeviceOutput) -> KResult<()> {
    let bytes = tensor.data().le_bytes();
    let memory = output_memory(gpu, index, tensor.shape(), bytes.len(), dst)?;
    gpu.write_address(memory.address, &bytes).map_err(KernelError::from)
}

/// What one signature's executions reuse.
#[derive(Debug)]
pub struct State {
    pub arena: Arc<Arena>,
    pub replay: Option<Replay>,
    /// Why this signature is not captured (capture failed once).
    pub no_graph: Option<String>,
}

/// The signatures seen most recently, each with its arena (and graph).
#[derive(Debug, Default)]
pub struct Signatures {
    states: HashMap<Signature, State>,
    order: VecDeque<Signature>,
}

/// Arenas kept per executable: a new signature beyond this evicts the oldest.
const KEPT_SIGNATURES: usize = 4;

impl Signatures {
    pub fn get_mut(&mut self, key: &Signature) -> Option<&mut State> {
        self.states.get_mut(key)
    }

    pub fn insert(&mut self, key: Signature, state: State) {
        if self.states.insert(key.clone(), state).is_none() {
            self.order.push_back(key);
        }
        while self.order.len() > KEPT_SIGNATURES {
            if let Some(old) = self.order.pop_front() {
                self.states.remove(&old);
            }
        }
    }

    /// Drops every captured graph (graph capture was turned off).
    pub fn drop_graphs(&mut self) {
        for state in self.states.values_mut() {
            state.replay = None;
        }
    }
}

/// A network output as the replay produces it.
#[derive(Debug)]
pub enum Output {
    /// Read back from the device address (in the arena, or a constant's buffer).
    Device { address: u64, dtype: DataType, shape: Vec<usize>, bytes: usize, staging: PinnedHost },
    /// Computed on the host from shapes and constants: the same for every run of the signature.
    Host(HostTensor),
}

/// A captured execution: refill the inputs, launch, read the outputs and the kernels' flags.
#[derive(Debug)]
pub struct Replay {
    pub graph: Graph,
    /// Per network input: its arena address, size and pinned staging.
    pub inputs: Vec<(u64, usize, PinnedHost)>,
    pub outputs: Vec<Output>,
    /// Flags kernels set on bad input (i32), with the error each one means.
    pub checks: Vec<(u64, String, PinnedHost)>,
    /// Host data the graph's own copies read: only kept alive with it.
    pub _staged: Vec<PinnedHost>,
}

/// Events around an execution's phases.
pub struct PhaseEvents([CudaEvent; 4]);

impl PhaseEvents {
    pub fn new(gpu: &Gpu) -> Result<PhaseEvents, GpuError> {
        Ok(PhaseEvents([gpu.event()?, gpu.event()?, gpu.event()?, gpu.event()?]))
    }

    /// Marks the end of phase `i` (0: start, 1: inputs copied, 2: computed, 3: outputs copied).
    pub fn mark(&self, gpu: &Gpu, i: usize) -> Result<(), GpuError> {
        gpu.record(&self.0[i])
    }

    /// The phases' durations (after the last mark has completed).
    pub fn times(&self) -> Result<DeviceTimes, GpuError> {
        let span = |a: usize, b: usize| event_span(&self.0[a], &self.0[b]);
        Ok(DeviceTimes { host_to_device: span(0, 1)?, compute: span(1, 2)?, device_to_host: span(2, 3)? })
    }
}

impl Replay {
    /// Replays the graph on `io`'s inputs (of the captured signature); Err names the kernel
    /// check that failed or the driver call. Host outputs are waited for; device ones are
    /// enqueued, waited for only where kernel checks or `events` need it.
    pub fn run(&mut self, gpu: &Gpu, io: Io<'_>, events: Option<&PhaseEvents>) -> KResult<Delivered> {
        let mark = |i: usize| events.map_or(Ok(()), |e| e.mark(gpu, i)).map_err(KernelError::from);
        if io.count() != self.inputs.len() {
            return Err(invalid!("{} inputs, the graph was captured with {}", io.count(), self.inputs.len()));
        }
        match io {
            Io::Host(inputs) => {
                // The previous replay was waited for, so the staging buffers are free to refill.
                for (x, (_, bytes, staging)) in inputs.iter().zip(&mut self.inputs) {
                    let data = x.data().le_bytes();
                    if data.len() != *bytes {
                        return Err(invalid!("an input of {} bytes, the graph was captured with {bytes}", data.len()));
                    }
                    copy_in_parallel(&mut staging.as_mut_slice()[..data.len()], &data);
                }
                mark(0)?;
                for (address, bytes, staging) in &self.inputs {
                    gpu.write_pinned(*address, staging, *bytes).map_err(KernelError::from)?;
                }
            }
            Io::Device(device) => {
                mark(0)?;
                // A device replay may still be running: the pinned staging is not reused here.
                for (x, (address, bytes, _)) in device.inputs.iter().zip(&self.inputs) {
                    match x {
                        DeviceInput::Device { memory, .. } => gpu.copy_address(memory.address, *address, *bytes),
                        DeviceInput::Host(t) => gpu.write_address(*address, &t.data().le_bytes()),
                    }
                    .map_err(KernelError::from)?;
                }
                if let Some(event) = device.input_consumed {
                    gpu.record_caller_event(event).map_err(KernelError::from)?;
                }
            }
        }
        mark(1)?;
        self.graph.launch().map_err(KernelError::from)?;
        mark(2)?;
        let host = matches!(io, Io::Host(_));
        if let Io::Device(device) = io {
            for (i, (out, dst)) in self.outputs.iter().zip(device.outputs).enumerate() {
                match out {
                    Output::Device { address, bytes, shape, .. } => deliver_device(gpu, i, *address, shape, *bytes, dst)?,
                    Output::Host(t) => deliver_host(gpu, i, t, dst)?,
                }
            }
        } else {
            for out in &mut self.outputs {
                if let Output::Device { address, bytes, staging, .. } = out {
                    gpu.read_pinned(*address, staging, *bytes).map_err(KernelError::from)?;
                }
            }
        }
        for (address, _, staging) in &mut self.checks {
            gpu.read_pinned(*address, staging, 4).map_err(KernelError::from)?;
        }
        mark(3)?;
        if host || events.is_some() || !self.checks.is_empty() {
            gpu.synchronize().map_err(KernelError::from)?;
        }
        for (_, message, staging) in &self.checks {
            if staging.as_slice()[..4] != [0; 4] {
                return Err(KernelError::Invalid(message.clone()));
            }
        }
        if !host {
            return Ok(Delivered::Device(self.outputs.iter().map(|out| out.shape().to_vec()).collect()));
        }
        let outputs = self
            .outputs
            .iter()
            .map(|out| match out {
                Output::Host(t) => Ok(t.clone()),
                Output::Device { dtype, shape, bytes, staging, .. } => {
                    let data = TensorData::from_le_bytes(*dtype, &staging.as_slice()[..*bytes]).ok_or(format!("no host form of {dtype}"))?;
                    HostTensor::new(shape.clone(), data).map_err(KernelError::from)
                }
            })
            .collect::<KResult<Vec<_>>>()?;
        Ok(Delivered::Host(outputs))
    }
}

impl Output {
    fn shape(&self) -> &[usize] {
        match self {
            Output::Device { shape, .. } => shape,
            Output::Host(t) => t.shape(),
        }
    }
}

/// `dst.copy_from_slice(src)`, split over a few threads when large: one thread's memcpy into
/// pinned memory moves ~10 GB/s, slower than the transfer that follows (a ResNet-50 batch of
/// 128 is 77 MB).
pub fn copy_in_parallel(dst: &mut [u8], src: &[u8]) {
    const CHUNK: usize = 8 << 20;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(8).min(src.len().div_ceil(CHUNK));
    if threads <= 1 {
        dst.copy_from_slice(src);
        return;
    }
    let part = src.len().div_ceil(threads);
    std::thread::scope(|scope| {
        for (d, s) in dst.chunks_mut(part).zip(src.chunks(part)) {
            scope.spawn(move || d.copy_from_slice(s));
        }
    });
}

/// Bytes of a `dtype` tensor of `shape` on the device.
pub fn device_bytes(dtype: DataType, shape: &[usize]) -> Result<usize, GpuError> {
    Ok(storage_size(dtype)? * shape.iter().product::<usize>())
}

//! The executable: kiln's shared control-flow interpreter driving device kernels.
//!
//! Values live on the device, except small shape tensors: Shape outputs, small constants and
//! the shape arithmetic computed only from them stay on the host, evaluated by shape
//! inference (as TensorRT's shape tensors are), so reshapes and slices never wait for the
//! device.

use kiln::{invalid, BackendError, DataType, DeviceAllocation, DeviceInput, DeviceIo, DeviceOutput, DeviceRun, DeviceTimes, Executable, FusedAnchor, HostTensor, KernelError, LayerId, LayerKind, LayerTimes, Network};
use crate::ops::KResult;
use crate::arena::{lock, Arena, ArenaPlan, PinnedHost, Tracer};
use crate::device::Gpu;
use crate::ops::{self, Ctx, Value};
use crate::caller_memory::{CallerAllocation, HostAllocation};
use crate::replay::{self, Delivered, Io, Output, PhaseEvents, Replay, Signatures, State};
use kiln::ir::control::{ControlFlow, Step};
use kiln::ir::infer::{Fact, OutFact};
use kiln::runtime::interp;
use kiln::runtime::layer_profile::LayerProfiler;
use kiln::runtime::machine::Machine;
use crate::layer_events::LayerEvents;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// Set to 0 to turn CUDA graph capture off for every executable of the process.
pub const CUDA_GRAPHS_VAR: &str = "KILN_CUDA_GRAPHS";

/// Constants up to this many elements are also kept on the host, for shape arithmetic.
const HOST_CONSTANT_LIMIT: usize = 4096;

/// Where each layer runs, decided once from the network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Placement {
    /// Constant: served from the values uploaded at prepare time.
    Constant,
    /// Shape: the dims of its input, known without the device.
    Shape,
    /// A cpu kernel on host values.
    Host,
    /// kiln's CUDA kernels.
    Device,
}

/// A network prepared for one CUDA device.
#[derive(Debug)]
pub struct CudaExecutable {
    network: Network,
    plan: ControlFlow,
    frees: Vec<Vec<usize>>,
    placement: Vec<Placement>,
    /// Per layer, the Constant's value (device copy, plus host copy when small).
    constants: Vec<Option<Value>>,
    gpu: Arc<Gpu>,
    tf32: bool,
    /// Per layer, the cuBLASLt heuristic rank its tactic chose (empty: rank 0 everywhere).
    gemm_ranks: Vec<usize>,
    /// Per layer, whether its output may be a view (see [`view_outputs`]).
    view_output: Vec<bool>,
    /// Per layer, the order it writes its output packed in (see [`write_orders`]).
    write_orders: Vec<Option<Vec<usize>>>,
    /// Why executions of this network are never captured as a graph (None: they can be).
    graph_blocker: Option<String>,
    graphs_enabled: AtomicBool,
    /// Where executions run: one lane per execution in flight.
    lanes: Lanes,
    /// How the latest execution ran, for reports.
    last_mode: Mutex<String>,
}

/// One stream's execution state: a [`Gpu`] lane (the device's own stream for the first)
/// with the activation arena and captured graph of each input-shape signature it ran.
#[derive(Debug)]
struct Lane {
    gpu: Arc<Gpu>,
    signatures: Mutex<Signatures>,
}

/// Most lanes of one executable: past this many executions in flight, more wait for a lane.
/// Each costs a stream, cuBLASLt's workspace, a cuDNN handle and its own arenas; the device
/// schedules few more streams side by side (CUDA_DEVICE_MAX_CONNECTIONS is 8 by default).
pub const MAX_LANES: usize = 16;

/// The lanes of an executable: executions on several threads at once (contexts of one
/// engine) each take their own, so they overlap on the device instead of taking turns.
/// An execution on its own always finds the first lane, the device's stream.
#[derive(Debug)]
struct Lanes {
    all: Mutex<Vec<Arc<Lane>>>,
    idle: Mutex<Vec<Arc<Lane>>>,
    returned: Condvar,
}

impl Lanes {
    fn new(gpu: Arc<Gpu>) -> Lanes {
        let first = Arc::new(Lane { gpu, signatures: Mutex::default() });
        Lanes { all: Mutex::new(vec![first.clone()]), idle: Mutex::new(vec![first]), returned: Condvar::new() }
    }

    /// An idle lane, a new one while fewer than [`MAX_LANES`] exist, else the next returned.
    fn take(&self, device: &Arc<Gpu>) -> Result<LaneGuard<'_>, BackendError> {
        let mut idle = lock(&self.idle);
        loop {
            if let Some(lane) = idle.pop() {
                return Ok(LaneGuard { lanes: self, lane: Some(lane) });
            }
            if lock(&self.all).len() < MAX_LANES {
                break;
            }
            idle = self.returned.wait(idle).unwrap_or_else(|p| p.into_inner());
        }
        drop(idle);
        // The constants were uploaded on the device's stream: settled before another reads them.
        device.synchronize().map_err(|e| gpu_error("(new stream)", e))?;
        let gpu = Arc::new(device.lane().map_err(|e| gpu_error("(new stream)", e))?);
        let lane = Arc::new(Lane { gpu, signatures: Mutex::default() });
        lock(&self.all).push(lane.clone());
        Ok(LaneGuard { lanes: self, lane: Some(lane) })
    }

    fn each(&self, mut f: impl FnMut(&Lane)) {
        for lane in lock(&self.all).iter() {
            f(lane);
        }
    }

    fn count(&self) -> usize {
        lock(&self.all).len()
    }
}

/// A lane taken for one execution, given back when dropped.
struct LaneGuard<'l> {
    lanes: &'l Lanes,
    lane: Option<Arc<Lane>>,
}

impl std::ops::Deref for LaneGuard<'_> {
    type Target = Lane;
    fn deref(&self) -> &Lane {
        self.lane.as_ref().expect("a lane until dropped")
    }
}

impl Drop for LaneGuard<'_> {
    fn drop(&mut self) {
        if let Some(lane) = self.lane.take() {
            lock(&self.lanes.idle).push(lane);
            self.lanes.returned.notify_one();
        }
    }
}

/// Per layer, whether its output may be a view ([`crate::DeviceTensor::strides`]): a Shuffle,
/// Slice or attention whose every reader reads views in place ([`reads_views`]), or that has
/// one reader, which makes it row-major itself, so the one copy moves there, where it is
/// often not needed at all (BERT's head split and merge, the slices of a fused QKV
/// projection, ConvNeXt's permute back to NCHW before a pointwise layer). A network output
/// and a value crossing into control flow are never views.
fn view_outputs(network: &Network) -> Vec<bool> {
    let n = network.tensors().len();
    let (mut in_place, mut reads, mut may_view) = (vec![true; n], vec![0usize; n], vec![true; n]);
    for t in network.outputs() {
        may_view[t.0] = false;
    }
    for layer in network.layers() {
        for (slot, t) in layer.inputs.iter().enumerate() {
            let Some(t) = t else { continue };
            reads[t.0] += 1;
            in_place[t.0] &= reads_views(&layer.kind, slot);
            may_view[t.0] &= !layer.kind.is_control_boundary();
        }
    }
    network
        .layers()
        .iter()
        .map(|l| {
            matches!(l.kind, LayerKind::Shuffle(_) | LayerKind::Slice | LayerKind::Attention(_))
                && l.outputs.iter().all(|t| may_view[t.0] && (in_place[t.0] || reads[t.0] <= 1))
        })
        .collect()
}

/// Per layer, the axis order (outermost first) a QuantizeLinear, or an attention writing its
/// output's levels, writes its output packed in where that output's one reader is a Shuffle
/// that first transposes it: the transpose's own order, so the transposed levels are row-major
/// and the Shuffle and the reshape after it copy nothing (a Q/DQ attention's context, quantized
/// into the head merge's order, whatever order the exporter merges the heads in).
fn write_orders(network: &Network) -> Vec<Option<Vec<usize>>> {
    let mut readers: Vec<Vec<usize>> = vec![Vec::new(); network.tensors().len()];
    for (i, layer) in network.layers().iter().enumerate() {
        for t in layer.inputs.iter().flatten() {
            readers[t.0].push(i);
        }
    }
    let outputs: Vec<usize> = network.outputs().iter().map(|t| t.0).collect();
    network
        .layers()
        .iter()
        .map(|l| {
            let writes_levels = match &l.kind {
                LayerKind::Quantize { .. } => true,
                LayerKind::Attention(p) => p.output_levels.is_some(),
                _ => false,
            };
            let [out] = &l.outputs[..] else { return None };
            if !writes_levels {
                return None;
            }
            let [reader] = readers[out.0][..] else { return None };
            match &network.layers()[reader].kind {
                LayerKind::Shuffle(p) if !outputs.contains(&out.0) && p.first_transpose.iter().enumerate().any(|(i, &a)| i != a) => Some(p.first_transpose.clone()),
                _ => None,
            }
        })
        .collect()
}

/// Whether input `slot` of a `kind` layer is read through its strides, with no copy first.
fn reads_views(kind: &LayerKind, slot: usize) -> bool {
    match kind {
        LayerKind::Shuffle(_) | LayerKind::Slice | LayerKind::Activation { .. } | LayerKind::Convolution(_) | LayerKind::Pooling(_) => slot == 0,
        LayerKind::Attention(_) => slot < 3,
        LayerKind::Elementwise { .. } => slot < 2,
        // A pointwise chain reads every operand through its own strides (ops::fused_chain; its
        // fallbacks pack what they cannot read).
        LayerKind::Fused(p) => match p.anchor {
            FusedAnchor::Elementwise(_) | FusedAnchor::Activation(_) | FusedAnchor::Unary(_) => true,
            // The channels-last kernel pools a view's levels (ops::pooled_levels).
            FusedAnchor::Pooling(_) => slot == 0,
            _ => false,
        },
        _ => false,
    }
}

/// Per tensor, whether a layer reads it on the host whatever its size: an integer layer's
/// scales, zero points and bias ([`kiln::QuantizedParams::HOST_READ`]; 8192 per-channel scales
/// would otherwise be read back on every run, which also keeps the run out of a CUDA graph).
fn read_on_host(network: &Network) -> Vec<bool> {
    let mut read = vec![false; network.tensors().len()];
    for layer in network.layers() {
        if let LayerKind::Quantized(_) = layer.kind {
            for t in kiln::QuantizedParams::HOST_READ.iter().filter_map(|&slot| layer.inputs.get(slot).copied().flatten()) {
                read[t.0] = true;
            }
        }
    }
    read
}

/// Which layers run on the host: those whose every input is host-available (small
/// constants, Shape outputs, other host layers' outputs) and that inference evaluates.
fn place(network: &Network) -> Vec<Placement> {
    place_with_host_tensors(network).0
}

/// Why a whole execution of `network` cannot be one CUDA graph: control flow (its conditions
/// and trip counts are read on the host), or a device layer whose shape-deciding input is a
/// device value (read back to the host during the run).
fn graph_blocker(network: &Network, plan: &ControlFlow) -> Option<String> {
    if plan.body.steps.iter().any(|s| !matches!(s, Step::Layer(_))) {
        return Some("the network has loops or conditionals".into());
    }
    let (placement, on_host) = place_with_host_tensors(network);
    for (layer, p) in network.layers().iter().zip(&placement) {
        if *p != Placement::Device {
            continue;
        }
        if ops::data_dependent::reads_back(&layer.kind) {
            return Some(format!("layer `{}` reads a count back to the host (it decides the output shape)", layer.name));
        }
        for &slot in layer.kind.host_slots() {
            if let Some(Some(t)) = layer.inputs.get(slot) {
                if !on_host[t.0] {
                    let name = &network.tensor(*t).name;
                    return Some(format!("layer `{}` reads its input `{name}` back to the host (it decides the output shape)", layer.name));
                }
            }
        }
    }
    None
}

/// [`place`], and per tensor whether its value is on the host.
fn place_with_host_tensors(network: &Network) -> (Vec<Placement>, Vec<bool>) {
    let mut on_host = vec![false; network.tensors().len()];
    let mut placement = Vec::with_capacity(network.layers().len());
    for layer in network.layers() {
        let p = match &layer.kind {
            LayerKind::Constant { weights } => {
                let small = network.weights().get(weights.0).is_some_and(|w| w.len() <= HOST_CONSTANT_LIMIT);
                for t in &layer.outputs {
                    on_host[t.0] = small;
                }
                placement.push(Placement::Constant);
                continue;
            }
            LayerKind::Shape => Placement::Shape,
            k if k.is_control_boundary() => Placement::Device,
            _ if layer.inputs.iter().flatten().all(|t| on_host[t.0]) && evaluated_on_host(network, layer) => Placement::Host,
            _ => Placement::Device,
        };
        if p != Placement::Device {
            for t in &layer.outputs {
                on_host[t.0] = true;
            }
        }
        placement.push(p);
    }
    (placement, on_host)
}

/// Whether the layer driver computes `layer` on the host once its inputs are there: an
/// Assertion, or shape arithmetic that inference evaluates (`kiln::ir::infer::evaluates_on_host`).
fn evaluated_on_host(network: &Network, layer: &kiln::Layer) -> bool {
    if matches!(layer.kind, LayerKind::Assertion { .. }) {
        return true;
    }
    let [out] = layer.outputs[..] else { return false };
    let inputs: Vec<Option<(DataType, usize)>> =
        layer.inputs.iter().map(|t| t.map(|t| (network.tensor(t).dtype, network.tensor(t).shape.rank()))).collect();
    let out = network.tensor(out);
    kiln::ir::infer::evaluates_on_host(&layer.kind, &inputs, out.dtype, out.shape.volume())
}

/// Per layer, whether it runs on the host (Constant, Shape and shape arithmetic): such layers
/// need no device kernel.
pub(crate) fn host_layers(network: &Network) -> Vec<bool> {
    place(network).into_iter().map(|p| p != Placement::Device).collect()
}

impl CudaExecutable {
    /// Prepares a network to run its lowered control flow `plan` on `gpu` (its constants are
    /// uploaded here).
    pub fn new(network: Network, plan: ControlFlow, gpu: Arc<Gpu>, tf32: bool) -> Result<CudaExecutable, BackendError> {
        let frees = interp::top_level_frees(&network, &plan.body.steps);
        let placement = place(&network);
        let read_on_host = read_on_host(&network);
        let mut constants = vec![None; network.layers().len()];
        for (i, layer) in network.layers().iter().enumerate() {
            if let LayerKind::Constant { weights } = &layer.kind {
                let w = network.weights().get(weights.0).ok_or_else(|| BackendError::Execution {
                    layer: layer.name.clone(),
                    reason: format!("weights blob #{} is missing", weights.0),
                })?;
                let device = gpu.upload(w).map_err(|e| gpu_error(&layer.name, e))?;
                let host = (w.len() <= HOST_CONSTANT_LIMIT || layer.outputs.iter().any(|t| read_on_host[t.0])).then(|| w.clone());
                constants[i] = Some(Value { device: Some(device), host });
            }
        }
        let graph_blocker = graph_blocker(&network, &plan);
        let view_output = view_outputs(&network);
        let write_orders = write_orders(&network);
        let graphs_enabled = AtomicBool::new(std::env::var(CUDA_GRAPHS_VAR).map_or(true, |v| v != "0"));
        Ok(CudaExecutable {
            network,
            plan,
            frees,
            placement,
            constants,
            tf32,
            gemm_ranks: Vec::new(),
            view_output,
            write_orders,
            graph_blocker,
            lanes: Lanes::new(gpu.clone()),
            gpu,
            graphs_enabled,
            last_mode: Mutex::new("not run yet".into()),
        })
    }

    /// Allows or forbids capturing executions as CUDA graphs (on unless `KILN_CUDA_GRAPHS=0`).
    pub fn set_cuda_graphs(&self, enabled: bool) {
        self.graphs_enabled.store(enabled, Ordering::Relaxed);
        if !enabled {
            self.lanes.each(|lane| lock(&lane.signatures).drop_graphs());
        }
    }

    /// Why this network's executions are never captured as a graph (None: they are, from the
    /// second execution with a given input-shape signature).
    pub fn graph_blocker(&self) -> Option<&str> {
        self.graph_blocker.as_deref()
    }

    /// How the latest execution ran: "recorded …", "arena …", "captured …", "graph replay".
    pub fn last_mode(&self) -> String {
        lock(&self.last_mode).clone()
    }

    /// The activation arena planned for inputs of these shapes (after a first execution with
    /// them): its size, and what its allocations would take unshared, in bytes.
    pub fn arena_bytes(&self, inputs: &[HostTensor]) -> Option<(usize, usize)> {
        let key = replay::signature(inputs);
        let mut found = None;
        self.lanes.each(|lane| {
            if let Some(s) = lock(&lane.signatures).get_mut(&key) {
                found = found.or(Some((s.arena.bytes(), s.arena.plan.unshared_bytes as usize)));
            }
        });
        found
    }

    /// How many streams this executable's executions have used so far (one per execution
    /// that overlapped others, at most [`MAX_LANES`]).
    pub fn streams_used(&self) -> usize {
        self.lanes.count()
    }

    /// Runs each matrix product with the cuBLASLt algorithm its tactic chose.
    pub fn with_gemm_ranks(mut self, ranks: Vec<usize>) -> CudaExecutable {
        self.gemm_ranks = ranks;
        self
    }

    /// How many layers run on the host and on the device (for reports and tests).
    pub fn placement_counts(&self) -> (usize, usize) {
        let host = self.placement.iter().filter(|p| matches!(p, Placement::Host | Placement::Shape)).count();
        let device = self.placement.iter().filter(|p| **p == Placement::Device).count();
        (host, device)
    }
}

pub(crate) use crate::error::gpu_error;

/// One execution: the interpreter's view of the executable.
struct Run<'e> {
    exe: &'e CudaExecutable,
    cx: Ctx<'e>,
    /// Brackets each layer with events in a profile run.
    events: Option<&'e LayerEvents<'e>>,
}

impl Run<'_> {
    /// The network inputs as values on the device: host tensors uploaded, the caller's device
    /// memory copied into buffers of the execution's own (the arena's, so a graph replays on
    /// fixed addresses).
    fn input_values(&self, io: Io<'_>) -> KResult<Vec<Value>> {
        let device = match io {
            Io::Host(inputs) => return inputs.iter().map(|x| self.from_host(Arc::new(x.clone()))).collect(),
            Io::Device(device) => device,
        };
        let gpu = self.cx.gpu;
        device
            .inputs
            .iter()
            .map(|x| match x {
                DeviceInput::Host(t) => self.from_host(Arc::new(t.clone())),
                DeviceInput::Device { memory, dtype, dims } => {
                    let t = gpu.empty(*dtype, dims.clone()).map_err(KernelError::from)?;
                    let bytes = replay::device_bytes(*dtype, dims).map_err(KernelError::from)?;
                    gpu.copy_address(memory.address, t.buf.ptr(), bytes).map_err(KernelError::from)?;
                    Ok(Value::device(t))
                }
            })
            .collect::<KResult<Vec<_>>>()
            .and_then(|values| {
                if let Some(event) = device.input_consumed {
                    gpu.record_caller_event(event).map_err(KernelError::from)?;
                }
                Ok(values)
            })
    }

    /// Device outputs kept in another order (channels-last, a view) packed row-major. Every
    /// mode does it before its trace ends, so a capture allocates what the recording run did
    /// (a channels-last output used to be packed after the recording's trace, and its graph
    /// capture failed with "allocation … where the recorded trace has None").
    fn packed(&self, outputs: Vec<Value>) -> KResult<Vec<Value>> {
        outputs.into_iter().map(|v| Ok(if v.device.is_some() { Value::device(self.cx.dev(&v)?) } else { v })).collect()
    }

    /// The outputs as `io` wants them: read back to the host, or copied (row-major) into the
    /// caller's device memory.
    fn deliver(&self, io: Io<'_>, outputs: &[Value]) -> KResult<Delivered> {
        let device = match io {
            Io::Host(_) => return Ok(Delivered::Host(outputs.iter().map(|v| self.cx.host(v).map(|h| (*h).clone())).collect::<KResult<_>>()?)),
            Io::Device(device) => device,
        };
        let mut dims = Vec::with_capacity(outputs.len());
        for (i, (v, dst)) in outputs.iter().zip(device.outputs).enumerate() {
            match (&v.device, &v.host) {
                (Some(_), _) => {
                    let d = self.cx.dev(v)?;
                    let bytes = replay::device_bytes(d.dtype, &d.shape).map_err(KernelError::from)?;
                    replay::deliver_device(self.cx.gpu, i, d.buf.ptr(), &d.shape, bytes, dst)?;
                    dims.push(d.shape.clone());
                }
                (None, Some(h)) => {
                    replay::deliver_host(self.cx.gpu, i, h, dst)?;
                    dims.push(h.shape().to_vec());
                }
                (None, None) => return Err("an output is neither on the device nor on the host".into()),
            }
        }
        Ok(Delivered::Device(dims))
    }
}

impl Machine for Run<'_> {
    type Value = Value;

    fn network(&self) -> &Network {
        &self.exe.network
    }

    fn backend_name(&self) -> &str {
        "cuda"
    }

    fn meta(&self, value: &Value) -> (DataType, Vec<usize>) {
        value.meta()
    }

    fn host_copy(&self, value: &Value) -> Option<Arc<HostTensor>> {
        value.host.clone()
    }

    fn host_value(&self, tensor: Arc<HostTensor>) -> Value {
        Value::host(tensor)
    }

    /// Keeps the device copy: the kernels read it, shape inference reads the host one.
    fn with_host_copy(&self, value: &Value) -> KResult<Value> {
        let mut v = value.clone();
        v.host = Some(self.cx.host(value)?);
        Ok(v)
    }

    /// Served from the values uploaded at prepare time.
    fn constant(&self, id: LayerId, _weights: &Arc<HostTensor>) -> KResult<Value> {
        Ok(self.exe.constants.get(id.0).cloned().flatten().ok_or("the constant was not uploaded")?)
    }

    fn profiler(&self) -> Option<&dyn LayerProfiler> {
        self.events.map(|e| e as &dyn LayerProfiler)
    }

    fn run_kernel(&self, id: LayerId, inputs: &[Option<Value>], _facts: &[Option<Fact>], expected: &[OutFact]) -> KResult<Vec<Value>> {
        let kind = &self.exe.network.layer(id).kind;
        // A host layer reaches here only when inference declined a value at run time (an
        // overflow, a division by zero): its device kernel decides.
        self.cx.gemm_rank.set(self.exe.gemm_ranks.get(id.0).copied().unwrap_or(0));
        self.cx.view_output.set(self.exe.view_output.get(id.0).copied().unwrap_or(false));
        *self.cx.write_order.borrow_mut() = self.exe.write_orders.get(id.0).cloned().flatten();
        Ok(ops::run(&self.cx, kind, inputs, expected)?.into_iter().map(Value::device).collect())
    }

    fn to_host(&self, value: &Value) -> KResult<Arc<HostTensor>> {
        self.cx.host(value)
    }

    fn from_host(&self, tensor: Arc<HostTensor>) -> KResult<Value> {
        Ok(Value::device(self.cx.gpu.upload(&tensor).map_err(KernelError::from)?))
    }

    fn slice_along(&self, value: &Value, axis: usize, index: usize) -> KResult<Value> {
        if let (None, Some(h)) = (&value.device, &value.host) {
            return Ok(Value::host(Arc::new(kiln::plan::loops::slice_along(h, axis, index)?)));
        }
        let x = self.cx.dev(value)?;
        let mut bounds_shape = x.shape.clone();
        if axis >= bounds_shape.len() || index >= bounds_shape[axis] {
            return Err(invalid!("slice {index} along axis {axis} of {:?}", x.shape));
        }
        let st = ops::contiguous_strides(&x.shape);
        bounds_shape[axis] = 1;
        let part = ops::movement::gather_strided(&self.cx, &x, &bounds_shape, &st, index as i64 * st[axis])?;
        bounds_shape.remove(axis);
        Ok(Value::device(part.reshaped(bounds_shape)))
    }

    fn stack_along(&self, parts: &[Value], axis: usize, length: usize, reverse: bool, dtype: DataType, slice_shape: &[usize]) -> KResult<Value> {
        let mut shape = slice_shape.to_vec();
        if axis > shape.len() {
            return Err(invalid!("stack axis {axis} of rank {}", shape.len()));
        }
        shape.insert(axis, length);
        let out = ops::zeros(&self.cx, self.cx.gpu.empty(dtype, shape.clone()).map_err(KernelError::from)?)?;
        let out_strides = ops::contiguous_strides(&shape);
        for (i, part) in parts.iter().enumerate() {
            let at = if reverse { parts.len() - 1 - i } else { i };
            let x = self.cx.dev(part)?;
            let mut view = slice_shape.to_vec();
            view.insert(axis, 1);
            let src_strides = ops::contiguous_strides(&view);
            ops::movement::copy_into(&self.cx, &x, &view, &src_strides, 0, &out, &out_strides, at as i64 * out_strides[axis])?;
        }
        Ok(Value::device(out))
    }
}

impl CudaExecutable {
    /// The device this executable runs on.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// Runs on inputs already on the device and leaves the outputs there (enqueued, not
    /// waited for): what timing with device events measures.
    pub fn execute_device(&self, inputs: &[crate::DeviceTensor]) -> Result<Vec<crate::DeviceTensor>, BackendError> {
        let _one_run_at_a_time = lock(&self.gpu.sessions.run_lock);
        let run = Run { exe: self, cx: Ctx::new(&self.gpu, self.tf32), events: None };
        let values = inputs.iter().cloned().map(Value::device).collect();
        let outputs = interp::run_plan(&run, &self.plan, &self.frees, values)?;
        let end = |e: KernelError| e.at_layer("cuda", "(network outputs)", "");
        let device = outputs.iter().map(|v| run.cx.dev(v)).collect::<Result<Vec<_>, _>>().map_err(end)?;
        if !run.cx.pending_checks.borrow().is_empty() {
            run.cx.finish().map_err(end)?;
        }
        Ok(device)
    }
}

/// An interpreted execution's outputs, its allocation trace and where it left the arena's.
type Interpreted = (Delivered, Vec<crate::arena::Event>, Option<String>);

/// The outputs' values (kept alive until the trace ends, as in every mode) and where they are.
type Captured = (crate::buffer::Graph, Vec<(u64, usize, PinnedHost)>, Vec<Value>);

impl CudaExecutable {
    fn set_mode(&self, mode: String) {
        *lock(&self.last_mode) = mode;
    }

    /// Places a recorded trace in a new arena (the arena's allocation failing is out of memory).
    fn arena_for(&self, lane: &Lane, trace: Vec<crate::arena::Event>) -> Result<Arc<Arena>, BackendError> {
        lane.gpu.new_arena(ArenaPlan::place(trace)).map(Arc::new).map_err(|e| gpu_error("(activation arena)", e))
    }

    /// One interpreted execution on `io`, its allocations traced (and served from `arena`
    /// when given): the outputs, the trace, and where it left the arena's (if it did).
    fn interpret(&self, gpu: &Gpu, io: Io<'_>, arena: Option<Arc<Arena>>, events: Option<&PhaseEvents>) -> Result<Interpreted, BackendError> {
        self.interpret_profiled(gpu, io, arena, events, None)
    }

    /// [`CudaExecutable::interpret`], each layer bracketed by `layers` when given.
    fn interpret_profiled(
        &self,
        gpu: &Gpu,
        io: Io<'_>,
        arena: Option<Arc<Arena>>,
        events: Option<&PhaseEvents>,
        layers: Option<&LayerEvents>,
    ) -> Result<Interpreted, BackendError> {
        let mark = |i: usize| events.map_or(Ok(()), |e| e.mark(gpu, i)).map_err(|e| gpu_error("(timing)", e));
        let tracer = gpu.begin_trace(arena);
        let run = Run { exe: self, cx: Ctx::new(gpu, self.tf32), events: layers };
        let outputs = (|| {
            mark(0)?;
            let boundary = |e: KernelError| e.at_layer("cuda", "(network inputs)", "");
            let values = run.input_values(io).map_err(boundary)?;
            mark(1)?;
            let outputs = interp::run_plan(&run, &self.plan, &self.frees, values)?;
            let outputs = run.packed(outputs).map_err(|e| e.at_layer("cuda", "(network outputs)", ""))?;
            mark(2)?;
            Ok::<_, BackendError>(outputs)
        })();
        // Every mode ends the trace here, with the outputs still alive.
        let end = gpu.end_trace(&tracer);
        let outputs = outputs.map_err(|e| match (e, end.out_of_memory) {
            (BackendError::Execution { layer, reason }, Some(_)) => {
                BackendError::OutOfMemory { backend: "cuda".into(), reason: format!("layer `{layer}`: {reason}") }
            }
            (e, _) => e,
        })?;
        let (trace, diverged) = (end.events, end.diverged);
        let end = |e: KernelError| e.at_layer("cuda", "(network outputs)", "");
        let delivered = run.deliver(io, &outputs).map_err(end)?;
        mark(3)?;
        run.cx.finish().map_err(end)?;
        if events.is_some() {
            gpu.synchronize().map_err(|e| gpu_error("(timing)", e))?;
        }
        Ok((delivered, trace, diverged))
    }

    /// Captures one execution on `inputs` as a graph over `arena`'s addresses. Err says why it
    /// cannot be captured (the caller runs it interpreted instead).
    fn capture(&self, gpu: &Gpu, io: Io<'_>, arena: Arc<Arena>) -> KResult<Replay> {
        let tracer = gpu.begin_trace(Some(arena));
        let run = Run { exe: self, cx: Ctx::new(gpu, self.tf32), events: None };
        let captured = self.capture_plan(&run, &tracer, io);
        let end = gpu.end_trace(&tracer);
        let (graph, input_slots, values) = captured?;
        if let Some(d) = end.diverged {
            return Err(invalid!("the execution left the recorded allocation trace: {d}"));
        }
        let ctx = &gpu.ctx;
        let mut outputs = Vec::with_capacity(values.len());
        for v in &values {
            outputs.push(match (&v.device, &v.host) {
                (Some(d), _) => {
                    let bytes = replay::device_bytes(d.dtype, &d.shape).map_err(KernelError::from)?;
                    let staging = PinnedHost::new(ctx, bytes).map_err(KernelError::from)?;
                    Output::Device { address: d.buf.ptr(), dtype: d.dtype, shape: d.shape.clone(), bytes, staging }
                }
                (None, Some(h)) => Output::Host((**h).clone()),
                (None, None) => return Err("an output is neither on the device nor on the host".into()),
            });
        }
        let mut checks = Vec::new();
        for (flag, message) in run.cx.pending_checks.borrow_mut().drain(..) {
            checks.push((flag.buf.ptr(), message, PinnedHost::new(ctx, 4).map_err(KernelError::from)?));
        }
        graph.upload().map_err(KernelError::from)?;
        Ok(Replay { graph, inputs: input_slots, outputs, checks, _staged: end.staged })
    }

    /// Uploads the inputs (outside the graph: each replay refills them), then runs the plan
    /// under capture. The capture is always ended.
    fn capture_plan(&self, run: &Run, tracer: &Arc<Mutex<Tracer>>, io: Io<'_>) -> KResult<Captured> {
        let values = run.input_values(io)?;
        let mut slots = Vec::with_capacity(values.len());
        for (v, (dtype, shape)) in values.iter().zip(io.signature()) {
            let d = v.device.as_ref().ok_or("an input is not on the device")?;
            let bytes = replay::device_bytes(dtype, &shape).map_err(KernelError::from)?;
            slots.push((d.buf.ptr(), bytes, PinnedHost::new(&run.cx.gpu.ctx, bytes).map_err(KernelError::from)?));
        }
        run.cx.gpu.begin_capture(tracer).map_err(KernelError::from)?;
        // Replays copy the outputs' bytes out as they are: packed inside the graph.
        let result = interp::run_plan(run, &self.plan, &self.frees, values).map_err(|e| invalid!("{e}")).and_then(|outputs| run.packed(outputs));
        let graph = run.cx.gpu.end_capture(tracer);
        let outputs = result?;
        let graph = graph.map_err(KernelError::from)?.ok_or("the driver captured no graph")?;
        Ok((graph, slots, outputs))
    }

    /// One execution on `io`: the first with a signature records its allocations, the next
    /// ones run in its arena, captured as a CUDA graph (second run) and replayed (later runs)
    /// where the network and the settings allow. Device I/O is ordered on the caller's stream.
    fn run_io(&self, io: Io<'_>, timed: bool) -> Result<(Delivered, Option<DeviceTimes>), BackendError> {
        let lane = self.lanes.take(&self.gpu)?;
        let gpu = &*lane.gpu;
        let _one_run_at_a_time = lock(&gpu.sessions.run_lock);
        let caller_stream = match io {
            Io::Device(device) => device.stream,
            Io::Host(_) => None,
        };
        if let Some(stream) = caller_stream {
            gpu.wait_for_stream(stream).map_err(|e| gpu_error("(caller's stream)", e))?;
        }
        let events = if timed { Some(PhaseEvents::new(gpu).map_err(|e| gpu_error("(timing)", e))?) } else { None };
        let events = events.as_ref();
        let key = io.signature();
        let mut signatures = lock(&lane.signatures);
        let graphs_on = self.graphs_enabled.load(Ordering::Relaxed);
        let graphs = graphs_on && self.graph_blocker.is_none();
        let replay_error = |e: KernelError| e.at_layer("cuda", "(graph replay)", "");
        let outputs = match signatures.get_mut(&key) {
            None => {
                let (outputs, trace, _) = self.interpret(gpu, io, None, events)?;
                let arena = self.arena_for(&lane, trace)?;
                self.set_mode(format!("recorded the allocations of these shapes (arena of {} bytes planned)", arena.bytes()));
                signatures.insert(key, State { arena, replay: None, no_graph: None });
                outputs
            }
            Some(state) => match &mut state.replay {
                Some(replay) if graphs => {
                    let outputs = replay.run(gpu, io, events).map_err(replay_error)?;
                    self.set_mode("graph replay".into());
                    outputs
                }
                _ if graphs && state.no_graph.is_none() => match self.capture(gpu, io, state.arena.clone()) {
                    Ok(mut replay) => {
                        let outputs = replay.run(gpu, io, events).map_err(replay_error)?;
                        state.replay = Some(replay);
                        self.set_mode("captured a CUDA graph".into());
                        outputs
                    }
                    Err(reason) => {
                        let (outputs, trace, diverged) = self.interpret(gpu, io, Some(state.arena.clone()), events)?;
                        if diverged.is_some() {
                            state.arena = self.arena_for(&lane, trace)?;
                        }
                        self.set_mode(format!("interpreted in the arena (graph capture failed: {reason})"));
                        state.no_graph = Some(reason.to_string());
                        outputs
                    }
                },
                _ => {
                    let (outputs, trace, diverged) = self.interpret(gpu, io, Some(state.arena.clone()), events)?;
                    let why = if !graphs_on {
                        "graph capture is off".to_string()
                    } else {
                        self.graph_blocker.clone().or_else(|| state.no_graph.clone()).unwrap_or_default()
                    };
                    match diverged {
                        Some(d) => {
                            state.arena = self.arena_for(&lane, trace)?;
                            state.replay = None;
                            self.set_mode(format!("interpreted, re-planned the arena ({d}); no graph: {why}"));
                        }
                        None => self.set_mode(format!("interpreted in the arena; no graph: {why}")),
                    }
                    outputs
                }
            },
        };
        drop(signatures);
        if let Io::Device(device) = io {
            match device.stream {
                Some(stream) => gpu.signal_stream(stream),
                None => gpu.synchronize(),
            }
            .map_err(|e| gpu_error("(caller's stream)", e))?;
        }
        let times = events.map(PhaseEvents::times).transpose().map_err(|e| gpu_error("(timing)", e))?;
        Ok((outputs, times))
    }

    /// Host outputs of a host execution.
    fn run_host(&self, inputs: &[HostTensor], timed: bool) -> Result<(Vec<HostTensor>, Option<DeviceTimes>), BackendError> {
        match self.run_io(Io::Host(inputs), timed)? {
            (Delivered::Host(outputs), times) => Ok((outputs, times)),
            (Delivered::Device(_), _) => Err(BackendError::Execution { layer: "(network outputs)".into(), reason: "a host execution delivered device outputs".into() }),
        }
    }

    /// Checks every caller address of `io` before anything is copied through it.
    fn check_device_io(&self, io: &DeviceIo<'_>) -> Result<(), BackendError> {
        let net = &self.network;
        let inputs = net.inputs().iter().zip(io.inputs).filter_map(|(&t, x)| match x {
            DeviceInput::Device { memory, dtype, dims } => Some((t, *memory, replay::device_bytes(*dtype, dims))),
            DeviceInput::Host(_) => None,
        });
        // An allocator's memory is checked when it gives it.
        let outputs = net.outputs().iter().zip(io.outputs).filter_map(|(&t, output)| match output {
            DeviceOutput::Memory(memory) => Some((t, *memory, Ok(0))),
            DeviceOutput::Allocator(..) => None,
        });
        for (t, memory, bytes) in inputs.chain(outputs) {
            let name = &net.tensor(t).name;
            let bytes = bytes.map_err(|e| gpu_error(name, e))?;
            self.gpu.check_caller_memory(memory.address, bytes.max(memory.bytes)).map_err(|e| BackendError::Execution {
                layer: format!("(device memory of `{name}`)"),
                reason: e.to_string(),
            })?;
        }
        Ok(())
    }
}

impl Executable for CudaExecutable {
    fn execute(&self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>, BackendError> {
        Ok(self.run_host(inputs, false)?.0)
    }

    fn execute_timed(&self, inputs: &[HostTensor]) -> Result<(Vec<HostTensor>, Option<DeviceTimes>), BackendError> {
        self.run_host(inputs, true)
    }

    /// Interpreted (never a graph replay), in the arena of earlier runs with these shapes
    /// when there is one; each layer between CUDA events.
    fn execute_profiled(&self, inputs: &[HostTensor]) -> Result<(Vec<HostTensor>, Option<LayerTimes>), BackendError> {
        let lane = self.lanes.take(&self.gpu)?;
        let gpu = &*lane.gpu;
        let _one_run_at_a_time = lock(&gpu.sessions.run_lock);
        let arena = lock(&lane.signatures).get_mut(&replay::signature(inputs)).map(|s| s.arena.clone());
        let layers = LayerEvents::new(gpu);
        let (outputs, _, _) = self.interpret_profiled(gpu, Io::Host(inputs), arena, None, Some(&layers))?;
        let Delivered::Host(outputs) = outputs else { unreachable!("host inputs deliver host outputs") };
        let times = layers.times(self.network.layers().len()).map_err(|e| gpu_error("(profiling)", e))?;
        self.set_mode("interpreted for a per-layer profile".into());
        Ok((outputs, Some(times)))
    }

    fn set_graph_capture(&self, enabled: bool) -> bool {
        self.set_cuda_graphs(enabled);
        true
    }

    /// Overwrites the constants' device buffers in place (same sizes: a refit keeps types
    /// and dims), forgets the layouts converted from them (cuDNN's channels-last filters) and
    /// the captured graphs and arenas that read those, then waits for the copies.
    fn refit(&mut self, changes: &[(kiln::WeightsId, Arc<HostTensor>)]) -> Result<(), BackendError> {
        self.network.replace_weights(changes).map_err(|reason| BackendError::Execution { layer: "(refit)".into(), reason })?;
        let mut rewritten = Vec::new();
        for (i, layer) in self.network.layers().iter().enumerate() {
            let LayerKind::Constant { weights } = &layer.kind else { continue };
            let Some((_, new)) = changes.iter().find(|(id, _)| id == weights) else { continue };
            let Some(Some(value)) = self.constants.get_mut(i) else { continue };
            if let Some(device) = &value.device {
                self.gpu.write(&device.buf, &new.data().le_bytes()).map_err(|e| gpu_error(&layer.name, e))?;
                rewritten.push(device.buf.ptr());
            }
            if value.host.is_some() {
                value.host = Some(new.clone());
            }
        }
        self.gpu.forget_converted(&rewritten);
        self.lanes.each(|lane| *lock(&lane.signatures) = Signatures::default());
        self.gpu.synchronize().map_err(|e| gpu_error("(refit)", e))
    }

    fn execution_mode(&self) -> Option<String> {
        Some(self.last_mode())
    }

    fn execute_on_device(&self, io: &DeviceIo<'_>, timed: bool) -> Result<DeviceRun, BackendError> {
        if io.inputs.len() != self.network.inputs().len() || io.outputs.len() != self.network.outputs().len() {
            return Err(BackendError::Execution {
                layer: "(network inputs)".into(),
                reason: format!("{} inputs and {} outputs given, the network has {} and {}", io.inputs.len(), io.outputs.len(), self.network.inputs().len(), self.network.outputs().len()),
            });
        }
        self.check_device_io(io)?;
        match self.run_io(Io::Device(io), timed)? {
            (Delivered::Device(dims), times) => Ok((dims, times)),
            (Delivered::Host(_), _) => Err(BackendError::Execution { layer: "(network outputs)".into(), reason: "a device execution delivered host outputs".into() }),
        }
    }

    fn allocate_device(&self, bytes: usize) -> Result<Box<dyn DeviceAllocation>, BackendError> {
        Ok(Box::new(CallerAllocation::new(self.gpu.clone(), bytes).map_err(|e| gpu_error("(device memory)", e))?))
    }

    fn allocate_host(&self, bytes: usize) -> Result<Box<dyn DeviceAllocation>, BackendError> {
        Ok(Box::new(HostAllocation::new(self.gpu.clone(), bytes).map_err(|e| gpu_error("(host memory)", e))?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln::{ActivationKind, Shape, ShuffleParams};

    fn blocker_of(net: &Network) -> Option<String> {
        let plan = kiln::ir::control::lower(net, kiln::ir::control::DEFAULT_MAX_TRIP_COUNT).expect("lowered");
        graph_blocker(net, &plan)
    }

    #[test]
    fn static_shapes_are_capturable() {
        let mut net = Network::new("static");
        let x = net.add_input("x", DataType::F32, Shape::fixed(&[2, 3])).unwrap();
        let r = net.add_reshape(x, &[3, 2]).unwrap();
        let a = net.add_activation(net.layer(r).outputs[0], ActivationKind::Relu).unwrap();
        net.mark_output(net.layer(a).outputs[0]).unwrap();
        assert_eq!(blocker_of(&net), None);
    }

    #[test]
    fn shapes_computed_on_the_host_are_capturable() {
        // Reshape to Shape(x): the shape is host arithmetic, never read back from the device.
        let mut net = Network::new("shape");
        let x = net.add_input("x", DataType::F32, Shape::fixed(&[2, 3])).unwrap();
        let s = net.add_shape(x).unwrap();
        let params = ShuffleParams { reshape: Some(Vec::new()), ..Default::default() };
        let r = net.add_layer("reshape", LayerKind::Shuffle(params), vec![Some(x), Some(net.layer(s).outputs[0])]).unwrap();
        net.mark_output(net.layer(r).outputs[0]).unwrap();
        assert_eq!(blocker_of(&net), None);
    }

    #[test]
    fn a_shape_from_a_network_input_blocks_capture() {
        let mut net = Network::new("dynamic");
        let x = net.add_input("x", DataType::F32, Shape::fixed(&[2, 3])).unwrap();
        let dims = net.add_input("dims", DataType::I64, Shape::fixed(&[2])).unwrap();
        let params = ShuffleParams { reshape: Some(Vec::new()), ..Default::default() };
        let r = net.add_layer("reshape", LayerKind::Shuffle(params), vec![Some(x), Some(dims)]).unwrap();
        net.mark_output(net.layer(r).outputs[0]).unwrap();
        let why = blocker_of(&net).expect("blocked");
        assert!(why.contains("`reshape`") && why.contains("`dims`"), "{why}");
    }
}

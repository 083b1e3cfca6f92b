//! The executable: one execution records every layer's dispatches into one command
//! encoder, reading values back only where the control flow or a shape needs them.
//!
//! Each layer: concrete facts from its input values → kiln's `infer_layer` (which also
//! evaluates small integer shape arithmetic on the host, TensorRT's shape tensors) → the
//! layer's kernels → a check that the outputs have the inferred types and shapes.

use crate::arena::Arena;
use crate::device::Gpu;
use crate::ops::{
    einsum, half, indexing, layout, linalg, lrn, pointwise, quant, reduce, resize, roi, sampling, scan, scatter, signal, sort,
    KResult,
};
use crate::wgsl::CastMode;
use crate::value::{to_words, DeviceTensor, Recorder, Value};
use kiln::ir::control::ControlFlow;
use kiln::{invalid, KernelError};
use kiln::ir::infer::{infer_layer, resolve_slice, Fact, OutFact};
use kiln::runtime::interp::{run_plan, top_level_frees};
use kiln::runtime::layer_profile::{HostClock, LayerProfiler};
use kiln::{BackendError, DataType, Executable, GatherMode, HostTensor, LayerId, LayerKind, LayerTimes, Network, PaddingMode};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Constants up to this many elements stay on the host (shape parameters, scalars) and
/// are uploaded only where a kernel reads them.
const HOST_CONSTANT_ELEMENTS: usize = 1024;

/// A network prepared for the wgpu backend.
#[derive(Debug)]
pub struct WgpuExecutable {
    pub(crate) network: Network,
    pub(crate) gpu: &'static Gpu,
    /// The steps to run: the engine's lowered control flow.
    pub(crate) plan: ControlFlow,
    /// Per top-level step, the tensors no longer needed once it has run.
    pub(crate) frees: Vec<Vec<usize>>,
    /// Constants on the device by weights blob: large ones uploaded on first use, small
    /// ones where a kernel reads them; kept for later executions.
    constants: Mutex<HashMap<usize, DeviceTensor>>,
    /// The weights blob of each host value that is one, by the address of its tensor: a
    /// small constant a loop body reads is uploaded once, not every trip.
    weight_blobs: HashMap<usize, usize>,
    /// Idle per-execution memory: an execution checks one arena out and returns it, so
    /// concurrent executions (several contexts) never share memory.
    arenas: Mutex<Vec<Arena>>,
    /// False: a buffer per tensor and dispatch, no arenas (see `WgpuBackend::without_memory_reuse`).
    reuse_memory: bool,
    /// f16 tensors stored as halves where the device has SHADER_F16 (see
    /// `WgpuBackend::without_f16_storage`).
    half_storage: bool,
    /// The matrix-kernel variants this engine's tactics chose.
    gemm_choices: Arc<crate::gemm::GemmChoices>,
}

impl WgpuExecutable {
    /// Prepares a network to run its lowered control flow `plan`.
    pub fn new(network: Network, plan: ControlFlow, gpu: &'static Gpu, reuse_memory: bool, half_storage: bool) -> WgpuExecutable {
        let frees = top_level_frees(&network, &plan.body.steps);
        let weight_blobs = network.weights().iter().enumerate().map(|(k, w)| (Arc::as_ptr(w) as usize, k)).collect();
        WgpuExecutable {
            network,
            gpu,
            plan,
            frees,
            constants: Mutex::new(HashMap::new()),
            weight_blobs,
            arenas: Mutex::new(Vec::new()),
            reuse_memory,
            half_storage,
            gemm_choices: Arc::default(),
        }
    }

    /// Runs each product with the matrix-kernel variant its tactic chose.
    pub fn with_gemm_choices(mut self, choices: crate::gemm::GemmChoices) -> WgpuExecutable {
        self.gemm_choices = Arc::new(choices);
        self
    }
}

/// One execution's state.
#[derive(Debug)]
pub struct Run<'e> {
    pub exe: &'e WgpuExecutable,
    pub rec: Recorder,
    /// Times each layer in a profile run (see [`Run::profiled`]).
    pub clock: Option<HostClock>,
}

impl<'e> Run<'e> {
    /// A run taking its memory from `arena`, or creating buffers as it goes without one.
    pub fn new(exe: &'e WgpuExecutable, arena: Option<Arena>) -> Run<'e> {
        let rec = match arena {
            Some(arena) => Recorder::with_arena(exe.gpu, arena),
            None => Recorder::new(exe.gpu),
        };
        let rec = rec.with_half_storage(exe.half_storage).with_gemm_choices(exe.gemm_choices.clone());
        Run { exe, rec, clock: None }
    }

    /// This run timing each layer: on the host clock, between waits for the device.
    pub fn profiled(mut self) -> Run<'e> {
        self.clock = Some(HostClock::new(self.exe.network.layers().len()));
        self
    }

    pub fn to_host(&self, v: &Value) -> KResult<Arc<HostTensor>> {
        match v {
            Value::Host(t) => Ok(t.clone()),
            Value::Device(t) => Ok(Arc::new(self.rec.read(t)?)),
        }
    }

    pub fn to_device(&self, v: &Value) -> KResult<DeviceTensor> {
        match v {
            Value::Device(t) => Ok(t.clone()),
            Value::Host(t) => match self.exe.weight_blobs.get(&(Arc::as_ptr(t) as usize)) {
                Some(&blob) => self.weights_on_device(blob, t),
                None => self.rec.upload(t),
            },
        }
    }

    /// Weights blob `blob` (holding `w`) on the device, uploaded once per executable.
    fn weights_on_device(&self, blob: usize, w: &HostTensor) -> KResult<DeviceTensor> {
        let mut cache = self.exe.constants.lock().map_err(|_| "the constant cache is poisoned")?;
        if let Some(t) = cache.get(&blob) {
            return Ok(t.clone());
        }
        let t = self.rec.upload_owned(w)?;
        cache.insert(blob, t.clone());
        Ok(t)
    }

    /// A Constant's value: small ones stay on the host, large ones are uploaded once and
    /// kept for later executions.
    pub(crate) fn constant(&self, id: LayerId, w: &Arc<HostTensor>) -> KResult<Value> {
        if w.len() <= HOST_CONSTANT_ELEMENTS {
            return Ok(Value::Host(w.clone()));
        }
        // Keyed by weights blob: Constant layers sharing a blob share the upload.
        let key = match &self.exe.network.layer(id).kind {
            LayerKind::Constant { weights } => weights.0,
            _ => return Err(invalid!("layer #{} is not a Constant", id.0)),
        };
        self.weights_on_device(key, w).map(Value::Device)
    }

    /// Runs the kernels of one layer (see [`kiln::runtime::machine::Machine::run_kernel`]).
    pub(crate) fn run_kernel(
        &self,
        id: LayerId,
        values: &[Option<Value>],
        facts: &[Option<Fact>],
        expected: &[OutFact],
    ) -> KResult<Vec<Value>> {
        let kind = &self.exe.network.layer(id).kind;
        match kind {
            // Data-dependent output shapes: computed on the host (kiln::plan::dynamic).
            LayerKind::NonZero | LayerKind::Unique { .. } => return self.data_dependent(kind, values),
            LayerKind::Quantized(p) => return self.quantized(p, values, expected),
            // A data-dependent output length: computed on the host (one read-back).
            LayerKind::NonMaxSuppression { center_point_box } => {
                let host = |slot: usize| -> KResult<Option<Arc<HostTensor>>> {
                    values.get(slot).cloned().flatten().map(|v| self.to_host(&v)).transpose()
                };
                let (boxes, scores) = (host(0)?.ok_or("boxes are missing")?, host(1)?.ok_or("scores are missing")?);
                let (limit, iou, score) = (host(2)?, host(3)?, host(4)?);
                let t = kiln::plan::nms::non_max_suppression(
                    &boxes,
                    &scores,
                    limit.as_deref(),
                    iou.as_deref(),
                    score.as_deref(),
                    *center_point_box,
                )?;
                return Ok(vec![Value::Host(Arc::new(t))]);
            }
            _ => {}
        }
        let outs = expected
            .iter()
            .map(|o| o.shape.as_fixed().map(|s| (o.dtype, s)).ok_or_else(|| invalid!("inference left {} unresolved", o.shape)))
            .collect::<KResult<Vec<_>>>()?;
        let host_slots = kind.host_slots();
        let mut device = Vec::with_capacity(values.len());
        let mut hosts = Vec::with_capacity(values.len());
        for (slot, v) in values.iter().enumerate() {
            match v {
                Some(Value::Host(t)) if host_slots.contains(&slot) => {
                    device.push(None);
                    hosts.push(Some(t.clone()));
                }
                Some(v) => {
                    device.push(Some(self.to_device(v)?));
                    hosts.push(None);
                }
                None => {
                    device.push(None);
                    hosts.push(None);
                }
            }
        }
        // The generic widen/narrow path: f16 tensors stored as halves reach a kernel
        // without an f16 instantiation as f32 words (one conversion kernel each), and its
        // f16 outputs, written as words, are stored as halves again (another). So every
        // layer runs with f16 storage; native f16 kernels skip the conversions.
        let native = |t: &Option<DeviceTensor>| t.as_ref().is_none_or(|t| t.packing == crate::value::Packing::Half);
        let device = match half::native(kind) && device.iter().all(native) {
            true => device,
            false => self.words(device)?,
        };
        let outputs = self.device_layer(kind, &device, &hosts, facts, &outs)?;
        Ok(self.stored(outputs)?.into_iter().map(Value::Device).collect())
    }

    /// An integer layer: its scales and the zero points of x and y read on the host (small
    /// constants, as a rule), the tensors on the device.
    fn quantized(&self, p: &kiln::QuantizedParams, values: &[Option<Value>], expected: &[OutFact]) -> KResult<Vec<Value>> {
        use kiln::QuantizedParams as Q;
        let host = |slot: usize| -> KResult<Option<Vec<f64>>> {
            values.get(slot).cloned().flatten().map(|v| self.to_host(&v).map(|t| t.to_f64_vec())).transpose()
        };
        let device = |slot: usize| -> KResult<Option<DeviceTensor>> {
            values.get(slot).cloned().flatten().map(|v| self.to_device(&v)).transpose()
        };
        let scalar = |slot: usize| -> KResult<Option<f64>> { Ok(host(slot)?.and_then(|v| v.first().copied())) };
        // The int32 sums (ConvInteger, MatMulInteger) have no scales: 1 stands in, unused.
        let unscaled = p.sums_output().then_some(1.0);
        let scales = crate::ops::quant::QuantizedScales {
            x_scale: scalar(Q::X_SCALE)?.or(unscaled).ok_or_else(|| invalid!("the integer layer has no x scale"))? as f32,
            x_zero: scalar(Q::X_ZERO)?.unwrap_or(0.0) as i64,
            w_scale: host(Q::W_SCALE)?.or(unscaled.map(|s| vec![s])).ok_or_else(|| invalid!("the integer layer has no weight scale"))?.iter().map(|&s| s as f32).collect(),
            y_scale: host(Q::Y_SCALE)?.unwrap_or_default().iter().map(|&s| s as f32).collect(),
            y_zero: scalar(Q::Y_ZERO)?.unwrap_or(0.0) as i64,
        };
        let inputs = self.words([Q::X, Q::W, Q::BIAS, Q::W_ZERO].iter().map(|&s| device(s)).collect::<KResult<Vec<_>>>()?)?;
        let [x, w, bias, w_zero] = <[Option<DeviceTensor>; 4]>::try_from(inputs).map_err(|_| invalid!("integer layer inputs"))?;
        let (x, w) = (x.ok_or_else(|| invalid!("input x is missing"))?, w.ok_or_else(|| invalid!("input w is missing"))?);
        // Weight zero points that are all 0 subtract nothing: the product is symmetric.
        let w_zero = match w_zero {
            Some(_) if host(Q::W_ZERO)?.is_some_and(|v| v.iter().all(|&z| z == 0.0)) => None,
            other => other,
        };
        let shape = expected
            .first()
            .and_then(|o| o.shape.as_fixed())
            .ok_or_else(|| invalid!("the integer layer's output shape is not resolved"))?;
        // The residual as f32: an 8-bit one dequantized as DequantizeLinear does.
        let residual = match device(Q::RESIDUAL)? {
            Some(r) if r.dtype.is_8bit_integer() => {
                let scale = device(Q::RESIDUAL_SCALE)?.ok_or_else(|| invalid!("the 8-bit residual has no scale"))?;
                Some(crate::ops::quant::dequantize(&self.rec, &r, &scale, device(Q::RESIDUAL_ZERO)?.as_ref(), None, DataType::F32)?)
            }
            Some(r) => Some(crate::ops::pointwise::cast(&self.rec, &half::widen(&self.rec, &r)?, DataType::F32, crate::wgsl::CastMode::default())?),
            None => None,
        };
        let out = crate::ops::quant::quantized(&self.rec, p, &x, &w, bias.as_ref(), w_zero.as_ref(), residual.as_ref(), &scales, &shape)?;
        let out = match p.then {
            Some(then) => self.requantized(&out, then, &device)?,
            None => out,
        };
        let out = match p.lookup {
            Some(to) => {
                let table = device(Q::LOOKUP)?.ok_or_else(|| invalid!("the layer's lookup has no table"))?;
                crate::ops::quant::looked_up(&self.rec, p, &out, &table, to)?
            }
            None => out,
        };
        Ok(self.stored(vec![out])?.into_iter().map(Value::Device).collect())
    }

    /// An integer layer's second quantization of its levels `y`, as the layers it stands for:
    /// DequantizeLinear, the join's DequantizeLinear and Add where it has one, Relu and
    /// QuantizeLinear.
    fn requantized(&self, y: &DeviceTensor, then: kiln::Requantization, device: &dyn Fn(usize) -> KResult<Option<DeviceTensor>>) -> KResult<DeviceTensor> {
        use crate::ops::{pointwise, quant};
        use kiln::QuantizedParams as Q;
        let required = |slot: usize| device(slot)?.ok_or_else(|| invalid!("the second quantization has no input {slot}"));
        let mut u = quant::dequantize(&self.rec, y, &required(Q::Y_SCALE)?, device(Q::Y_ZERO)?.as_ref(), None, DataType::F32)?;
        if let Some(join) = device(Q::JOIN)? {
            let j = quant::dequantize(&self.rec, &join, &required(Q::JOIN_SCALE)?, device(Q::JOIN_ZERO)?.as_ref(), None, DataType::F32)?;
            if j.shape != u.shape {
                return Err(invalid!("the join's shape {:?} is not the output's {:?}", j.shape, u.shape));
            }
            u = pointwise::binary(&self.rec, kiln::ElementwiseOp::Sum, &u, &j, &u.shape.clone(), DataType::F32)?;
        }
        if then.relu {
            u = pointwise::activation(&self.rec, &kiln::ActivationKind::Relu, &u)?;
        }
        quant::quantize(&self.rec, &u, &required(Q::THEN_SCALE)?, device(Q::THEN_ZERO)?.as_ref(), None, then.to)
    }

    /// Device inputs as the word kernels read them (f16 halves widened).
    fn words(&self, device: Vec<Option<DeviceTensor>>) -> KResult<Vec<Option<DeviceTensor>>> {
        device.into_iter().map(|t| t.map(|t| half::widen(&self.rec, &t)).transpose()).collect()
    }

    /// Layer outputs as this run stores them (f16 words as halves where the run does).
    pub(crate) fn stored(&self, outputs: Vec<DeviceTensor>) -> KResult<Vec<DeviceTensor>> {
        match self.rec.half_storage() {
            true => outputs.into_iter().map(|t| half::to_halves(&self.rec, t)).collect(),
            false => Ok(outputs),
        }
    }

    fn device_layer(
        &self,
        kind: &LayerKind,
        ins: &[Option<DeviceTensor>],
        hosts: &[Option<Arc<HostTensor>>],
        facts: &[Option<Fact>],
        outs: &[(DataType, Vec<usize>)],
    ) -> KResult<Vec<DeviceTensor>> {
        use LayerKind as K;
        let rec = &self.rec;
        let req =
            |slot: usize| ins.get(slot).and_then(Option::as_ref).ok_or_else(|| kiln::invalid!("input {slot} is missing"));
        let host = |slot: usize| hosts.get(slot).and_then(Option::as_ref);
        let ints = |slot: usize| -> KResult<Option<Vec<i64>>> {
            host(slot).map(|t| t.to_i64_vec().ok_or_else(|| kiln::invalid!("input {slot} must be integer"))).transpose()
        };
        let (dtype, shape) = outs.first().cloned().ok_or("the layer has no output")?;
        let one = |t: DeviceTensor| Ok(vec![t]);
        match kind {
            K::Identity => one(req(0)?.clone()),
            K::Cast { to } => {
                let x = req(0)?;
                // A same-type Cast is the identity, but for float8 NaN codes (canonicalised).
                if x.dtype == *to && !to.is_narrow_float() {
                    return one(x.clone());
                }
                one(pointwise::cast(rec, x, *to, CastMode::default())?)
            }
            K::CastNarrow { to, saturate, e8m0_rounding } => {
                let mode = CastMode { saturate: *saturate, e8m0_rounding: *e8m0_rounding };
                one(pointwise::cast(rec, req(0)?, *to, mode)?)
            }
            K::BitCast { to } => {
                let x = req(0)?;
                if x.dtype.size_bytes() != Some(4) || to.size_bytes() != Some(4) {
                    return Err(invalid!(
                        "BitCast {} -> {to}: only 32-bit types are stored bit-exact on the device",
                        x.dtype
                    ));
                }
                one(DeviceTensor { buffer: x.buffer.clone(), dtype: *to, shape, packing: x.packing })
            }
            K::Elementwise { op } => one(pointwise::binary(rec, *op, req(0)?, req(1)?, &shape, dtype)?),
            K::Activation { kind } => one(pointwise::activation(rec, kind, req(0)?)?),
            K::Unary { op } => one(pointwise::unary(rec, *op, req(0)?, dtype)?),
            K::ParametricRelu => one(pointwise::parametric_relu(rec, req(0)?, req(1)?, &shape)?),
            K::Select => one(pointwise::select(rec, req(0)?, req(1)?, req(2)?, &shape)?),
            K::MatrixMultiply { op_a, op_b } => {
                one(linalg::matmul(rec, req(0)?, *op_a, req(1)?, *op_b, &shape, dtype)?)
            }
            K::Convolution(p) => {
                one(linalg::convolution(rec, p, req(0)?, req(1)?, ins.get(2).and_then(Option::as_ref), &shape)?)
            }
            K::Deconvolution(p) => {
                one(linalg::deconvolution(rec, p, req(0)?, req(1)?, ins.get(2).and_then(Option::as_ref), &shape)?)
            }
            K::Pooling(p) => one(linalg::pooling(rec, p, req(0)?, &shape)?),
            K::Reduce { op, axes, .. } => {
                let x = req(0)?;
                let axes = match ints(1)? {
                    None => axes.clone(),
                    Some(v) => kiln::plan::reduce::run_time_axes(&v, x.shape.len())?,
                };
                one(reduce::reduce(rec, *op, x, &axes, &shape, dtype)?)
            }
            K::SoftMax { axis } => one(reduce::softmax(rec, req(0)?, *axis)?),
            K::Normalization { axes, epsilon, num_groups } => {
                one(reduce::normalization(rec, req(0)?, req(1)?, Some(req(2)?), axes, *epsilon, *num_groups)?)
            }
            K::RmsNormalization { axes, epsilon } => {
                one(reduce::normalization(rec, req(0)?, req(1)?, None, axes, *epsilon, 1)?)
            }
            K::Shuffle(p) => {
                let x = req(0)?;
                let first = layout::transpose(rec, x, &p.first_transpose)?;
                if p.second_transpose.is_empty() {
                    return one(first.reshaped(shape));
                }
                // The reshaped value's dims, before the second transpose permutes them.
                let mut reshaped = vec![0; shape.len()];
                for (i, &s) in p.second_transpose.iter().enumerate() {
                    *reshaped.get_mut(s).ok_or("second transpose is not a permutation")? = shape[i];
                }
                one(layout::transpose(rec, &first.reshaped(reshaped), &p.second_transpose)?)
            }
            K::Concatenation { axis } => {
                let parts = (0..ins.len()).map(|i| req(i).cloned()).collect::<KResult<Vec<_>>>()?;
                one(layout::concatenation(rec, &parts, *axis, &shape, dtype)?)
            }
            K::Slice => {
                let x = req(0)?;
                let (starts, ends) = (ints(1)?.ok_or("starts are missing")?, ints(2)?.ok_or("ends are missing")?);
                let plan = resolve_slice(&x.shape, &starts, &ends, ints(3)?.as_deref(), ints(4)?.as_deref())?;
                one(layout::slice(rec, x, &plan)?)
            }
            K::Expand => one(layout::expand(rec, req(0)?, &shape)?),
            K::Padding { mode: PaddingMode::Constant } => {
                let x = req(0)?;
                let pads = ints(1)?.ok_or("pads are missing")?;
                let word = match host(2) {
                    Some(v) => scalar_word(v, x.dtype)?,
                    None => 0,
                };
                one(layout::pad_constant(rec, x, &pads, word, &shape)?)
            }
            K::Gather { mode: GatherMode::Default { axis } } => {
                one(layout::gather(rec, req(0)?, &indices(req(1)?)?, *axis, &shape)?)
            }
            K::Gather { mode: GatherMode::Elements { axis } } => {
                one(layout::gather_elements(rec, req(0)?, &indices(req(1)?)?, *axis)?)
            }
            K::Fill { value } => one(pointwise::fill(rec, dtype, &shape, scalar_word(value, dtype)?)?),
            K::Fused(p) => {
                // Inputs read dequantized: DequantizeLinear first, as the unfused graph did.
                let mut ins = ins.to_vec();
                let mut facts = facts.to_vec();
                for d in &p.dequantized {
                    let slot = |i: usize| ins.get(i).and_then(Option::as_ref).ok_or_else(|| kiln::invalid!("dequantized input {} is missing a slot", d.input));
                    let scale = slot(d.scale)?;
                    let zero = d.zero.map(slot).transpose()?;
                    let x = quant::dequantize(rec, slot(d.input)?, scale, zero, None, scale.dtype)?;
                    let shape = facts.get(d.input).copied().flatten().ok_or("a dequantized input has no fact")?.shape;
                    facts[d.input] = Some(Fact::new(x.dtype, shape, None));
                    ins[d.input] = Some(x);
                }
                let (ins, facts) = (&ins[..], &facts[..]);
                let anchor = p.anchor.kind();
                let anchor_facts = facts.get(..p.anchor_inputs).ok_or("fused layer inputs are missing")?;
                let anchor_out = infer_layer(&anchor, anchor_facts, &|w| self.exe.network.weights_blob(w))
                    .map_err(|e| format!("shape inference of the fused anchor: {}", e.rule))?;
                let anchor_outs = anchor_out
                    .iter()
                    .map(|o| o.shape.as_fixed().map(|s| (o.dtype, s)).ok_or(invalid!("unresolved anchor shape")))
                    .collect::<KResult<Vec<_>>>()?;
                let head = self.device_layer(
                    &anchor,
                    &ins[..p.anchor_inputs],
                    &hosts[..p.anchor_inputs],
                    anchor_facts,
                    &anchor_outs,
                )?;
                let running = head.into_iter().next().ok_or("the anchor produced no output")?;
                one(pointwise::epilogue(rec, running, &p.epilogue, ins, &shape, dtype)?)
            }
            K::Attention(p) => one(linalg::attention(
                rec,
                p,
                [req(0)?, req(1)?, req(2)?],
                ins.get(3).and_then(Option::as_ref),
                &shape,
                dtype,
            )?),
            K::TopK { largest, axis, .. } => sort::top_k(rec, req(0)?, *axis, *largest, &shape),
            K::CumulativeSum { exclusive, reverse } | K::CumulativeProduct { exclusive, reverse } => {
                let x = req(0)?;
                let raw = ints(1)?.and_then(|v| v.first().copied()).ok_or("the axis is missing")?;
                let axis = kiln::ir::shape::normalize_axis(raw, x.shape.len())
                    .ok_or_else(|| kiln::invalid!("axis {raw} is out of range for rank {}", x.shape.len()))?;
                let product = matches!(kind, K::CumulativeProduct { .. });
                one(scan::cumulative(rec, x, axis, product, *exclusive, *reverse)?)
            }
            K::Einsum { equation } => {
                let operands = (0..ins.len()).map(req).collect::<KResult<Vec<_>>>()?;
                one(einsum::einsum(rec, equation, &operands, &shape)?)
            }
            K::Lrn { window, alpha, beta, k } => one(lrn::lrn(rec, req(0)?, *window, *alpha, *beta, *k)?),
            K::Scatter { mode, reduction } => {
                one(scatter::scatter(rec, *mode, *reduction, req(0)?, req(1)?, req(2)?)?)
            }
            K::Gather { mode: GatherMode::Nd { batch_dims } } => {
                one(scatter::gather_nd(rec, req(0)?, req(1)?, *batch_dims, &shape)?)
            }
            K::OneHot { axis } => {
                let depth = ints(2)?.and_then(|v| v.first().copied()).ok_or("the depth is missing")?;
                let axis = kiln::ir::shape::normalize_axis(*axis, shape.len())
                    .ok_or_else(|| kiln::invalid!("OneHot axis {axis} is out of range for rank {}", shape.len()))?;
                one(indexing::one_hot(rec, req(0)?, req(1)?, depth, axis, &shape, dtype)?)
            }
            K::Padding { mode } => {
                let pads = ints(1)?.ok_or("pads are missing")?;
                one(indexing::pad_mode(rec, req(0)?, *mode, &pads, &shape)?)
            }
            K::Resize(p) => {
                let x = req(0)?;
                let h = |slot: usize| host(slot).map(|t| &**t);
                one(resize::resize(rec, p, x, h(1), h(2), h(3), &shape)?)
            }
            K::GridSample(p) => one(sampling::grid_sample(rec, p, req(0)?, req(1)?, &shape)?),
            K::Quantize { axis, to } => {
                one(quant::quantize(rec, req(0)?, req(1)?, ins.get(2).and_then(Option::as_ref), *axis, *to)?)
            }
            // `to` is the layer's output type, which the kernel rounds its f32 value to.
            K::Dequantize { axis, .. } => {
                one(quant::dequantize(rec, req(0)?, req(1)?, ins.get(2).and_then(Option::as_ref), *axis, dtype)?)
            }
            K::Dft { inverse, onesided } => {
                let axis = ints(1)?.and_then(|v| v.first().copied()).ok_or("the DFT axis is missing")?;
                let length = ints(2)?.and_then(|v| v.first().copied());
                one(signal::dft(rec, req(0)?, axis, length, *inverse, *onesided, &shape)?)
            }
            K::Col2Im { strides, dilations, pads } => {
                let block = ints(2)?.ok_or("the Col2Im block shape is missing")?;
                one(signal::col2im(rec, req(0)?, &block, strides, dilations, pads, &shape)?)
            }
            K::Determinant => one(signal::determinant(rec, req(0)?)?),
            K::RoiAlign { .. } => {
                let spec = kiln::plan::roi::RoiAlignSpec::of(kind)?;
                one(roi::roi_align(rec, req(0)?, req(1)?, req(2)?, &spec)?)
            }
            K::Plugin(p) => crate::plugin::plugin(rec, p, ins, outs),
            // The layer driver and `run_kernel` run these before any device kernel.
            K::Constant { .. }
            | K::Shape
            | K::Assertion { .. }
            | K::NonZero
            | K::Unique { .. }
            | K::NonMaxSuppression { .. }
            | kiln::control_boundary!() => {
                Err(invalid!("{} has no device kernel: the layer driver runs it", kind.type_name()))
            }
            K::Reformat { .. } | K::Text(_) | K::Quantized(_) => {
                Err(KernelError::Unsupported(format!("no WGSL kernel for {} yet", kind.type_name())))
            }
        }
    }

    /// NonZero / Unique: the input read back, the result computed on the host and uploaded.
    fn data_dependent(&self, kind: &LayerKind, inputs: &[Option<Value>]) -> KResult<Vec<Value>> {
        let x = inputs.first().cloned().flatten().ok_or("the layer needs an input")?;
        let x = self.to_host(&x)?;
        let outs = match kind {
            LayerKind::NonZero => vec![kiln::plan::dynamic::non_zero(&x)?],
            LayerKind::Unique { axis, sorted } => kiln::plan::dynamic::unique(&x, *axis, *sorted)?,
            other => return Err(invalid!("{} has no data-dependent host path", other.type_name())),
        };
        outs.iter().map(|t| self.rec.upload(t).map(Value::Device)).collect()
    }
}

/// Gather indices as i32 words (i64 indices are stored as i32 already).
fn indices(t: &DeviceTensor) -> KResult<DeviceTensor> {
    match t.dtype {
        DataType::I32 | DataType::I64 | DataType::I16 | DataType::I8 => Ok(t.clone()),
        other => Err(invalid!("gather indices must be signed integers, not {other}")),
    }
}

/// The device word of a scalar `value` converted to `dtype`.
fn scalar_word(value: &HostTensor, dtype: DataType) -> KResult<u32> {
    let v = value.to_f64_vec().first().copied().unwrap_or(0.0);
    if let Some(data) = kiln::TensorData::narrow_from_f64(dtype, &[v]) {
        let t = HostTensor::scalar(data).map_err(kiln::KernelError::from)?;
        return Ok(to_words(&t)?.first().copied().unwrap_or(0));
    }
    let t = match crate::wgsl::Storage::of(dtype) {
        Some(crate::wgsl::Storage::F32) => HostTensor::from_f32(vec![], vec![v as f32]),
        Some(_) if dtype == DataType::Bool => {
            Ok(HostTensor::scalar(kiln::TensorData::Bool(vec![v != 0.0])).map_err(kiln::KernelError::from)?)
        }
        Some(crate::wgsl::Storage::U32) => HostTensor::scalar(kiln::TensorData::U32(vec![v as u32])),
        Some(crate::wgsl::Storage::I32) => HostTensor::scalar(kiln::TensorData::I32(vec![v as i32])),
        None => return Err(invalid!("unsupported dtype {dtype} on the wgpu backend")),
    }
    .map_err(kiln::KernelError::from)?;
    Ok(to_words(&t)?.first().copied().unwrap_or(0))
}

impl WgpuExecutable {
    fn run(&self, run: &Run, inputs: &[HostTensor]) -> Result<Vec<HostTensor>, BackendError> {
        let fail = |tensor: &str, e: KernelError| e.at_layer(crate::NAME, tensor, "");
        let values = inputs
            .iter()
            .zip(self.network.inputs())
            .map(|(x, &t)| {
                run.to_device(&Value::Host(Arc::new(x.clone())))
                    .map(Value::Device)
                    .map_err(|e| fail(&self.network.tensor(t).name, e))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let outputs = run_plan(run, &self.plan, &self.frees, values)?;
        // Read back to the host: nothing the caller gets aliases the arena.
        outputs
            .iter()
            .zip(self.network.outputs())
            .map(|(v, &t)| {
                let h = run.to_host(v).map_err(|e| fail(&self.network.tensor(t).name, e))?;
                Ok(Arc::try_unwrap(h).unwrap_or_else(|shared| (*shared).clone()))
            })
            .collect()
    }
}

/// A profile run waits for the device before and after each layer's dispatches, so the host
/// clock between the two measures that layer alone (with one submission's overhead).
impl LayerProfiler for Run<'_> {
    fn begin(&self, layer: LayerId) -> Result<(), KernelError> {
        self.rec.submit_and_wait()?;
        self.clock.as_ref().map_or(Ok(()), |c| c.begin(layer))
    }

    fn end(&self, layer: LayerId) -> Result<(), KernelError> {
        self.rec.submit_and_wait()?;
        self.clock.as_ref().map_or(Ok(()), |c| c.end(layer))
    }
}

impl WgpuExecutable {
    /// One execution in a pooled arena (when memory is reused), and the run's layer times
    /// when `profiled`.
    fn execute_run(&self, inputs: &[HostTensor], profiled: bool) -> Result<(Vec<HostTensor>, Option<LayerTimes>), BackendError> {
        let poisoned = || BackendError::Execution { layer: "(memory)".into(), reason: "the arena pool is poisoned".into() };
        let arena = match self.reuse_memory {
            true => Some(self.arenas.lock().map_err(|_| poisoned())?.pop().unwrap_or_default()),
            false => None,
        };
        let run = Run::new(self, arena);
        let mut run = if profiled { run.profiled() } else { run };
        // Every value of the run is dropped by the time `run` returns.
        let result = self.run(&run, inputs);
        let times = run.clock.take().map(HostClock::into_times);
        if let Some(arena) = run.rec.finish(result.is_ok()) {
            self.arenas.lock().map_err(|_| poisoned())?.push(arena);
        }
        Ok((result?, times))
    }
}

impl Executable for WgpuExecutable {
    fn execute_profiled(&self, inputs: &[HostTensor]) -> Result<(Vec<HostTensor>, Option<LayerTimes>), BackendError> {
        self.execute_run(inputs, true)
    }

    fn execute(&self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>, BackendError> {
        Ok(self.execute_run(inputs, false)?.0)
    }

    /// New blobs replace the old in the network; their device copies are dropped (freeing
    /// them: no execution runs during a refit) and uploaded again on first use.
    fn refit(&mut self, changes: &[(kiln::WeightsId, Arc<HostTensor>)]) -> Result<(), BackendError> {
        let fail = |reason: String| BackendError::Execution { layer: "(refit)".into(), reason };
        let old: Vec<usize> = changes.iter().map(|(id, _)| Arc::as_ptr(&self.network.weights()[id.0]) as usize).collect();
        self.network.replace_weights(changes).map_err(fail)?;
        let constants = self.constants.get_mut().map_err(|_| fail("the constant cache is poisoned".into()))?;
        for ((id, new), old) in changes.iter().zip(old) {
            constants.remove(&id.0);
            self.weight_blobs.remove(&old);
            self.weight_blobs.insert(Arc::as_ptr(new) as usize, id.0);
        }
        Ok(())
    }
}

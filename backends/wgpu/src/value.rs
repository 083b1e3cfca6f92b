//! Values of one execution: device tensors (one 32-bit word per element, see
//! [`crate::wgsl::Storage`], or f16 halves, see [`Packing`]) or small host tensors (shape arithmetic, kept on the host like
//! TensorRT's shape tensors), and the recorder that collects every dispatch of a run
//! into one command encoder.

use crate::arena::{Arena, Block, BlockKind, ParamsBinding, RunMemory};
use crate::device::{DeviceError, Gpu, WORKGROUP};
use crate::shaders::Instance;
use crate::gemm::GemmChoices;
use half::{bf16, f16};
use kiln::{
    DataType, E8M0Rounding, HostTensor, TensorData, F4E2M1, F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ, F8E8M0, I2, I4, U2,
    U4,
};
use std::sync::{Arc, Mutex};

/// How a device tensor's elements lie in its buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Packing {
    /// One 32-bit word per element holding its [`crate::wgsl::Storage`] (every kernel's input).
    Word,
    /// f16 only, where the adapter has SHADER_F16: IEEE halves, 2 bytes per element (the
    /// buffer rounded up to 4 bytes), bound as `array<f16>`. Kernels without an f16
    /// instantiation read them widened to words (see `Run::widen_inputs`).
    Half,
}

/// A tensor in device memory. Its block is never written after the kernel that made
/// it, so reshapes share it; it returns to the run's arena when the last share drops.
#[derive(Clone, Debug)]
pub struct DeviceTensor {
    pub buffer: Arc<Block>,
    /// The logical type; the words hold its [`crate::wgsl::Storage`] (see `packing`).
    pub dtype: DataType,
    pub shape: Vec<usize>,
    pub packing: Packing,
}

impl DeviceTensor {
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn reshaped(&self, shape: Vec<usize>) -> DeviceTensor {
        DeviceTensor { buffer: self.buffer.clone(), dtype: self.dtype, shape, packing: self.packing }
    }
}

/// A value of the interpreter.
#[derive(Clone, Debug)]
pub enum Value {
    Host(Arc<HostTensor>),
    Device(DeviceTensor),
}

impl Value {
    pub fn dtype(&self) -> DataType {
        match self {
            Value::Host(t) => t.dtype(),
            Value::Device(t) => t.dtype,
        }
    }

    pub fn shape(&self) -> &[usize] {
        match self {
            Value::Host(t) => t.shape(),
            Value::Device(t) => &t.shape,
        }
    }
}

/// The device words of a host tensor (see [`crate::wgsl::Storage`]): floats as f32 bits
/// (f64 rounded to f32; float8 / float4 decoded, a NaN carrying its code as in
/// `shaders/minifloat.wgsl`), integers as i32 / u32, bool as 0 / 1. i64 and u64 values
/// must fit in i32 / u32.
pub fn to_words(t: &HostTensor) -> crate::device::KResult<Vec<u32>> {
    fn narrow_float(value: f32, code: u8, nan_sign: bool) -> u32 {
        match value.is_nan() {
            true => (u32::from(nan_sign) << 31) | 0x7fc0_0000 | u32::from(code),
            false => value.to_bits(),
        }
    }
    Ok(match t.data() {
        TensorData::F32(v) => v.iter().map(|x| x.to_bits()).collect(),
        TensorData::F16(v) => v.iter().map(|x| x.to_f32().to_bits()).collect(),
        TensorData::BF16(v) => v.iter().map(|x| x.to_f32().to_bits()).collect(),
        // WGSL has no f64: stored and computed as f32 (as TensorRT does with DOUBLE).
        TensorData::F64(v) => v.iter().map(|&x| (x as f32).to_bits()).collect(),
        TensorData::I8(v) => v.iter().map(|&x| i32::from(x) as u32).collect(),
        TensorData::I16(v) => v.iter().map(|&x| i32::from(x) as u32).collect(),
        TensorData::I32(v) => v.iter().map(|&x| x as u32).collect(),
        TensorData::I64(v) => v
            .iter()
            .map(|&x| {
                i32::try_from(x)
                    .map(|x| x as u32)
                    .map_err(|_| kiln::invalid!("i64 value {x} does not fit in i32, the widest integer WGSL stores"))
            })
            .collect::<Result<_, _>>()?,
        TensorData::U8(v) => v.iter().map(|&x| u32::from(x)).collect(),
        TensorData::U16(v) => v.iter().map(|&x| u32::from(x)).collect(),
        TensorData::U32(v) => v.clone(),
        TensorData::U64(v) => v
            .iter()
            .map(|&x| {
                u32::try_from(x)
                    .map_err(|_| kiln::invalid!("u64 value {x} does not fit in u32, the widest unsigned integer WGSL stores"))
            })
            .collect::<Result<_, _>>()?,
        TensorData::Bool(v) => v.iter().map(|&x| u32::from(x)).collect(),
        TensorData::F8E4M3FN(v) => v.iter().map(|x| narrow_float(x.to_f32(), x.0, x.0 & 0x80 != 0)).collect(),
        TensorData::F8E4M3FNUZ(v) => v.iter().map(|x| narrow_float(x.to_f32(), x.0, false)).collect(),
        TensorData::F8E5M2(v) => v.iter().map(|x| narrow_float(x.to_f32(), x.0, x.0 & 0x80 != 0)).collect(),
        TensorData::F8E5M2FNUZ(v) => v.iter().map(|x| narrow_float(x.to_f32(), x.0, false)).collect(),
        TensorData::F8E8M0(v) => v.iter().map(|x| narrow_float(x.to_f32(), x.0, false)).collect(),
        TensorData::F4E2M1(v) => v.iter().map(|x| x.to_f32().to_bits()).collect(),
        TensorData::I4(v) => v.iter().map(|x| x.value() as i32 as u32).collect(),
        TensorData::I2(v) => v.iter().map(|x| x.value() as i32 as u32).collect(),
        TensorData::U4(v) => v.iter().map(|x| x.value() as u32).collect(),
        TensorData::U2(v) => v.iter().map(|x| x.value() as u32).collect(),
        #[allow(unreachable_patterns)] // types other helpers may add
        other => return Err(kiln::invalid!("unsupported dtype {} on the wgpu backend", other.dtype())),
    })
}

/// f16 values as halves, two per little-endian word (the last word's high half zero).
/// Bit-exact: NaN signs and payloads and subnormals are kept.
pub fn pack_halves(v: &[f16]) -> Vec<u32> {
    v.chunks(2)
        .map(|pair| u32::from(pair[0].to_bits()) | (u32::from(pair.get(1).map_or(0, |h| h.to_bits())) << 16))
        .collect()
}

/// The first `len` halves of words packed by [`pack_halves`].
pub fn unpack_halves(words: &[u32], len: usize) -> Vec<f16> {
    words.iter().flat_map(|&w| [f16::from_bits(w as u16), f16::from_bits((w >> 16) as u16)]).take(len).collect()
}

/// The float8 code a device word holds: the code a NaN carries where it is one of the
/// type's NaN codes (so moved tensors read back bit-exact), else the value rounded
/// (exact for every value a kernel writes).
fn narrow_float_code<T: Copy>(w: u32, code: fn(u8) -> T, is_nan: fn(T) -> bool, round: fn(f32) -> T) -> T {
    let carried = code(w as u8);
    if f32::from_bits(w).is_nan() && w & 0x003f_ff00 == 0 && is_nan(carried) {
        carried
    } else {
        round(f32::from_bits(w))
    }
}

/// The host tensor of device words holding `dtype`.
pub fn from_words(dtype: DataType, shape: Vec<usize>, w: &[u32]) -> crate::device::KResult<HostTensor> {
    let f = |x: &u32| f32::from_bits(*x);
    macro_rules! narrow_float {
        ($t:ident, $round:expr) => {
            TensorData::$t(w.iter().map(|&x| narrow_float_code(x, $t, |c| c.to_f32().is_nan(), $round)).collect())
        };
    }
    let data = match dtype {
        DataType::F32 => TensorData::F32(w.iter().map(f).collect()),
        DataType::F16 => TensorData::F16(w.iter().map(|x| f16::from_f32(f(x))).collect()),
        DataType::BF16 => TensorData::BF16(w.iter().map(|x| bf16::from_f32(f(x))).collect()),
        DataType::F64 => TensorData::F64(w.iter().map(|x| f64::from(f(x))).collect()),
        DataType::I8 => TensorData::I8(w.iter().map(|&x| x as i32 as i8).collect()),
        DataType::I16 => TensorData::I16(w.iter().map(|&x| x as i32 as i16).collect()),
        DataType::I32 => TensorData::I32(w.iter().map(|&x| x as i32).collect()),
        DataType::I64 => TensorData::I64(w.iter().map(|&x| i64::from(x as i32)).collect()),
        DataType::U8 => TensorData::U8(w.iter().map(|&x| x as u8).collect()),
        DataType::U16 => TensorData::U16(w.iter().map(|&x| x as u16).collect()),
        DataType::U32 => TensorData::U32(w.to_vec()),
        DataType::U64 => TensorData::U64(w.iter().map(|&x| u64::from(x)).collect()),
        DataType::Bool => TensorData::Bool(w.iter().map(|&x| x != 0).collect()),
        DataType::F8E4M3FN => narrow_float!(F8E4M3FN, |x| F8E4M3FN::from_f32(x, true)),
        DataType::F8E4M3FNUZ => narrow_float!(F8E4M3FNUZ, |x| F8E4M3FNUZ::from_f32(x, true)),
        // Not saturating: ±infinity is a value of e5m2 and must read back as itself.
        DataType::F8E5M2 => narrow_float!(F8E5M2, |x| F8E5M2::from_f32(x, false)),
        DataType::F8E5M2FNUZ => narrow_float!(F8E5M2FNUZ, |x| F8E5M2FNUZ::from_f32(x, true)),
        // Rounding down is exact on powers of two, 2^-127 (an f32 subnormal) included.
        DataType::F8E8M0 => narrow_float!(F8E8M0, |x| F8E8M0::from_f64(f64::from(x), true, E8M0Rounding::Down)),
        DataType::F4E2M1 => TensorData::F4E2M1(w.iter().map(|x| F4E2M1::from_f32(f(x), true)).collect()),
        DataType::I4 => TensorData::I4(w.iter().map(|&x| I4::wrapping(i128::from(x as i32))).collect()),
        DataType::I2 => TensorData::I2(w.iter().map(|&x| I2::wrapping(i128::from(x as i32))).collect()),
        DataType::U4 => TensorData::U4(w.iter().map(|&x| U4::wrapping(i128::from(x))).collect()),
        DataType::U2 => TensorData::U2(w.iter().map(|&x| U2::wrapping(i128::from(x))).collect()),
        #[allow(unreachable_patterns)] // types other helpers may add
        other => return Err(kiln::invalid!("unsupported dtype {other} on the wgpu backend")),
    };
    HostTensor::new(shape, data).map_err(kiln::KernelError::from)
}

/// Dispatches recorded before the recorder submits them unasked: wgpu holds every
/// resource a command buffer uses (buffers of dead tensors, bind groups, parameter
/// slots) until it has run, so a long stretch without a read-back (a counted loop of
/// many trips) would otherwise keep all of its iterations' memory.
const DISPATCHES_PER_SUBMISSION: usize = 128;

/// What has been recorded and not yet submitted, and the submission before.
#[derive(Default)]
struct Pending {
    encoder: Option<wgpu::CommandEncoder>,
    dispatches: usize,
    /// The latest unasked submission, not yet waited for.
    in_flight: Option<wgpu::SubmissionIndex>,
}

/// Records the dispatches of one execution into a command encoder, submitted when a
/// value is read back and every [`DISPATCHES_PER_SUBMISSION`] dispatches. Memory comes
/// from the execution's arena where it has one.
pub struct Recorder {
    pub gpu: &'static Gpu,
    pending: Mutex<Pending>,
    memory: Option<RunMemory>,
    /// f16 tensors uploaded as halves ([`Packing::Half`]); off by default.
    half_storage: bool,
    /// The matrix-kernel variants the executable's tactics chose (empty: defaults).
    gemm_choices: Arc<GemmChoices>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").field("gpu", &self.gpu).finish()
    }
}

impl Recorder {
    /// A recorder creating a buffer per tensor and per dispatch's parameters.
    pub fn new(gpu: &'static Gpu) -> Recorder {
        Recorder { gpu, pending: Mutex::default(), memory: None, half_storage: false, gemm_choices: Arc::default() }
    }

    /// A recorder taking its memory from `arena` (see [`crate::arena`]).
    pub fn with_arena(gpu: &'static Gpu, arena: Arena) -> Recorder {
        Recorder {
            gpu,
            pending: Mutex::default(),
            memory: Some(RunMemory::new(gpu, arena)),
            half_storage: false,
            gemm_choices: Arc::default(),
        }
    }

    /// This recorder running products with the variants `choices` names.
    pub fn with_gemm_choices(mut self, choices: Arc<GemmChoices>) -> Recorder {
        self.gemm_choices = choices;
        self
    }

    pub fn gemm_choices(&self) -> &GemmChoices {
        &self.gemm_choices
    }

    /// This recorder storing f16 uploads as halves where `on` and the device has SHADER_F16.
    pub fn with_half_storage(mut self, on: bool) -> Recorder {
        self.half_storage = on && self.gpu.features.contains(wgpu::Features::SHADER_F16);
        self
    }

    /// The arena back, re-planned from this run's trace where needed (`completed`: the
    /// run succeeded); every tensor of the run must have been dropped (their memory is the
    /// next run's).
    pub fn finish(self, completed: bool) -> Option<Arena> {
        self.memory.map(|m| m.finish(self.gpu, completed))
    }

    fn pending(&self) -> Result<std::sync::MutexGuard<'_, Pending>, DeviceError> {
        self.pending.lock().map_err(|_| DeviceError::Validation {
            what: "recording".into(),
            reason: "a thread panicked while recording".into(),
        })
    }

    /// Records one compute pass.
    fn record_pass(&self, f: impl FnOnce(&mut wgpu::ComputePass<'_>)) -> Result<(), DeviceError> {
        let mut pending = self.pending()?;
        let encoder = pending.encoder.get_or_insert_with(|| self.gpu.device.create_command_encoder(&Default::default()));
        f(&mut encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: None, timestamp_writes: None }));
        pending.dispatches += 1;
        Ok(())
    }

    /// Submits what was recorded once it is [`DISPATCHES_PER_SUBMISSION`] dispatches,
    /// then waits for the submission before it: at most two are in flight, so the memory
    /// they hold stays bounded however long the run records without reading back.
    fn submit_when_full(&self) -> Result<(), DeviceError> {
        let mut pending = self.pending()?;
        if pending.dispatches < DISPATCHES_PER_SUBMISSION {
            return Ok(());
        }
        let encoder = pending.encoder.take();
        pending.dispatches = 0;
        if let Some(memory) = &self.memory {
            memory.flush_params(self.gpu);
        }
        let index = self.gpu.scoped("submitting work", || self.gpu.queue.submit(encoder.map(|e| e.finish())))?;
        if let Some(memory) = &self.memory {
            memory.submitted();
        }
        if let Some(previous) = pending.in_flight.replace(index) {
            self.gpu
                .device
                .poll(wgpu::PollType::Wait { submission_index: Some(previous), timeout: None })
                .map_err(|e| DeviceError::Readback { reason: e.to_string() })?;
        }
        Ok(())
    }

    /// Takes what was recorded for a submission that waits for the device (so nothing is
    /// left in flight).
    fn take_for_waiting_submission(&self) -> Result<Option<wgpu::CommandEncoder>, DeviceError> {
        let mut pending = self.pending()?;
        let encoder = pending.encoder.take();
        *pending = Pending::default();
        if let Some(memory) = &self.memory {
            memory.flush_params(self.gpu);
        }
        Ok(encoder)
    }

    fn block(&self, what: &str, kind: BlockKind, bytes: u64) -> Result<Block, DeviceError> {
        let bytes = bytes.max(4).next_multiple_of(4);
        match &self.memory {
            Some(memory) => memory.alloc(self.gpu, what, kind, bytes),
            None => Ok(Block::standalone(self.gpu.storage(what, bytes)?)),
        }
    }

    /// A new device tensor of `dtype` and `shape` (contents undefined until written).
    pub fn alloc(&self, dtype: DataType, shape: &[usize]) -> Result<DeviceTensor, DeviceError> {
        let len: usize = shape.iter().product();
        let what = format!("allocating a {dtype}{shape:?} tensor");
        let block = self.block(&what, BlockKind::Kernel, len as u64 * 4)?;
        Ok(DeviceTensor { buffer: Arc::new(block), dtype, shape: shape.to_vec(), packing: Packing::Word })
    }

    /// Whether this run stores f16 tensors as halves ([`Packing::Half`]).
    pub fn half_storage(&self) -> bool {
        self.half_storage
    }

    /// A new f16 tensor of `shape` stored as halves (contents undefined until written).
    pub fn alloc_halves(&self, shape: &[usize]) -> Result<DeviceTensor, DeviceError> {
        let len: usize = shape.iter().product();
        let what = format!("allocating an f16{shape:?} tensor of halves");
        let block = self.block(&what, BlockKind::Kernel, len as u64 * 2)?;
        Ok(DeviceTensor { buffer: Arc::new(block), dtype: DataType::F16, shape: shape.to_vec(), packing: Packing::Half })
    }

    /// How this run stores a host tensor of `dtype`, and its device words.
    fn device_words(&self, t: &HostTensor) -> crate::device::KResult<(Packing, Vec<u32>)> {
        match t.data() {
            TensorData::F16(v) if self.half_storage => Ok((Packing::Half, pack_halves(v))),
            _ => Ok((Packing::Word, to_words(t)?)),
        }
    }

    /// A new device tensor in a buffer of its own, outside the arena: for kernels that
    /// bind their output read-write next to read-only inputs (plugins' WGSL), which wgpu
    /// refuses within one buffer. Allocated per run.
    pub fn alloc_standalone(&self, dtype: DataType, shape: &[usize]) -> Result<DeviceTensor, DeviceError> {
        let len: usize = shape.iter().product();
        let what = format!("allocating a {dtype}{shape:?} tensor");
        let buffer = self.gpu.storage(&what, len as u64 * 4)?;
        Ok(DeviceTensor {
            buffer: Arc::new(Block::standalone(buffer)),
            dtype,
            shape: shape.to_vec(),
            packing: Packing::Word,
        })
    }

    /// `t` on the device for this run (in the arena where there is one).
    pub fn upload(&self, t: &HostTensor) -> crate::device::KResult<DeviceTensor> {
        let (packing, words) = self.device_words(t)?;
        let what = format!("uploading a {}{:?} tensor", t.dtype(), t.shape());
        let block = match &self.memory {
            Some(memory) => {
                let block = memory
                    .alloc(self.gpu, &what, BlockKind::Upload, (words.len() as u64 * 4).max(4))
                    .map_err(kiln::KernelError::from)?;
                if !words.is_empty() {
                    self.gpu.queue.write_buffer(block.buffer(), block.offset(), bytemuck::cast_slice(&words));
                }
                block
            }
            None => Block::standalone(self.gpu.storage_init(&what, &words).map_err(kiln::KernelError::from)?),
        };
        Ok(DeviceTensor { buffer: Arc::new(block), dtype: t.dtype(), shape: t.shape().to_vec(), packing })
    }

    /// `t` in a buffer of its own that outlives the run (constants kept between runs).
    pub fn upload_owned(&self, t: &HostTensor) -> crate::device::KResult<DeviceTensor> {
        let (packing, words) = self.device_words(t)?;
        let what = format!("uploading a {}{:?} tensor", t.dtype(), t.shape());
        let buffer = self.gpu.storage_init(&what, &words).map_err(kiln::KernelError::from)?;
        Ok(DeviceTensor {
            buffer: Arc::new(Block::standalone(buffer)),
            dtype: t.dtype(),
            shape: t.shape().to_vec(),
            packing,
        })
    }

    fn params(&self, words: &[u32]) -> Result<ParamsBinding, DeviceError> {
        match &self.memory {
            Some(memory) => memory.params(self.gpu, words),
            None => Ok(ParamsBinding::Own(self.gpu.storage_init("uploading kernel parameters", words)?)),
        }
    }

    /// Records `kernel` over `groups` workgroups with `params` at binding 0 and
    /// `buffers` at bindings 1, 2, …
    pub fn dispatch(
        &self,
        kernel: &Instance,
        params: &[u32],
        buffers: &[&Block],
        groups: [u32; 3],
    ) -> Result<(), DeviceError> {
        if groups.contains(&0) {
            return Ok(());
        }
        let max = self.gpu.limits.max_compute_workgroups_per_dimension;
        if let Some(&g) = groups.iter().find(|&&g| g > max) {
            return Err(DeviceError::LimitExceeded {
                what: format!("kernel `{}` over {g} workgroups in one dimension", kernel.key),
                needed: u64::from(g),
                limit: u64::from(max),
            });
        }
        let pipeline = self.gpu.pipeline(&kernel.key, || kernel.source())?;
        let params = self.params(params)?;
        let what = format!("recording kernel `{}`", kernel.key);
        self.gpu.scoped(&what, || {
            let layout = pipeline.get_bind_group_layout(0);
            let mut entries = vec![wgpu::BindGroupEntry { binding: 0, resource: params.binding() }];
            entries.extend(
                buffers.iter().enumerate().map(|(i, b)| wgpu::BindGroupEntry { binding: i as u32 + 1, resource: b.binding() }),
            );
            let bind_group = self.gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &layout,
                entries: &entries,
            });
            self.record_pass(|pass| {
                pass.set_pipeline(&pipeline);
                pass.set_bind_group(0, &bind_group, &[]);
                pass.dispatch_workgroups(groups[0], groups[1], groups[2]);
            })
        })??;
        self.submit_when_full()
    }

    /// Records a pipeline compiled elsewhere (a plugin's kernel) with `buffers` at bindings
    /// 0, 1, … of group 0, over `groups` workgroups.
    pub fn dispatch_pipeline(
        &self,
        what: &str,
        pipeline: &wgpu::ComputePipeline,
        buffers: &[&Block],
        groups: [u32; 3],
    ) -> Result<(), DeviceError> {
        if groups.contains(&0) {
            return Ok(());
        }
        let max = self.gpu.limits.max_compute_workgroups_per_dimension;
        if let Some(&g) = groups.iter().find(|&&g| g > max) {
            return Err(DeviceError::LimitExceeded {
                what: format!("{what} over {g} workgroups in one dimension"),
                needed: u64::from(g),
                limit: u64::from(max),
            });
        }
        self.gpu.scoped(what, || {
            let entries: Vec<wgpu::BindGroupEntry> = buffers
                .iter()
                .enumerate()
                .map(|(i, b)| wgpu::BindGroupEntry { binding: i as u32, resource: b.binding() })
                .collect();
            let bind_group = self.gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &pipeline.get_bind_group_layout(0),
                entries: &entries,
            });
            self.record_pass(|pass| {
                pass.set_pipeline(pipeline);
                pass.set_bind_group(0, &bind_group, &[]);
                pass.dispatch_workgroups(groups[0], groups[1], groups[2]);
            })
        })??;
        self.submit_when_full()
    }

    /// Records a 1-D kernel over `count` invocations (a 2-D grid when one dimension of
    /// workgroups does not suffice).
    pub fn dispatch_1d(
        &self,
        kernel: &Instance,
        params: &[u32],
        buffers: &[&Block],
        count: usize,
    ) -> Result<(), DeviceError> {
        let groups = count.div_ceil(WORKGROUP as usize) as u64;
        let max = u64::from(self.gpu.limits.max_compute_workgroups_per_dimension);
        let (x, y) = if groups <= max { (groups, 1) } else { (max, groups.div_ceil(max)) };
        self.dispatch(kernel, params, buffers, [x as u32, y as u32, 1])
    }

    /// Submits what was recorded and waits until the device has run it (profile runs time
    /// each layer so).
    pub fn submit_and_wait(&self) -> Result<(), DeviceError> {
        let encoder = self.take_for_waiting_submission()?;
        if let Some(encoder) = encoder {
            self.gpu.scoped("submitting work", || self.gpu.queue.submit([encoder.finish()]))?;
        }
        if let Some(memory) = &self.memory {
            memory.submitted();
        }
        self.gpu
            .device
            .poll(wgpu::PollType::Wait { submission_index: None, timeout: None })
            .map_err(|e| DeviceError::Readback { reason: e.to_string() })?;
        self.gpu.check_alive()
    }

    /// Submits what was recorded and reads `t` back.
    pub fn read(&self, t: &DeviceTensor) -> crate::device::KResult<HostTensor> {
        let encoder = self.take_for_waiting_submission()?;
        let block = &t.buffer;
        let count = match t.packing {
            Packing::Word => t.len(),
            Packing::Half => t.len().div_ceil(2),
        };
        let words = match &self.memory {
            Some(memory) => {
                let staging = memory.take_staging(self.gpu, count as u64 * 4).map_err(kiln::KernelError::from)?;
                let words = self.gpu.read_words_via(encoder, block.buffer(), block.offset(), count, &staging);
                memory.submitted();
                memory.return_staging(staging);
                words
            }
            None => {
                let staging = self.gpu.readback_buffer(count as u64 * 4).map_err(kiln::KernelError::from)?;
                self.gpu.read_words_via(encoder, block.buffer(), block.offset(), count, &staging)
            }
        }
        .map_err(kiln::KernelError::from)?;
        match t.packing {
            Packing::Word => from_words(t.dtype, t.shape.clone(), &words),
            Packing::Half => HostTensor::new(t.shape.clone(), TensorData::F16(unpack_halves(&words, t.len())))
                .map_err(kiln::KernelError::from),
        }
    }
}

//! Values of one execution: device tensors (one 32-bit word per element, see
//! [`Storage`]) or small host tensors (shape arithmetic, kept on the host like
//! TensorRT's shape tensors), and the recorder that collects every dispatch of a run
//! into one command encoder.

use crate::device::{DeviceError, Gpu, WORKGROUP};
use crate::shaders::Instance;
use half::{bf16, f16};
use kiln::{DataType, HostTensor, TensorData};
use std::sync::{Arc, Mutex};

/// A tensor in device memory. Its buffer is never written after the kernel that made
/// it, so reshapes share it.
#[derive(Clone, Debug)]
pub struct DeviceTensor {
    pub buffer: Arc<wgpu::Buffer>,
    /// The logical type; the words hold its [`Storage`].
    pub dtype: DataType,
    pub shape: Vec<usize>,
}

impl DeviceTensor {
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn reshaped(&self, shape: Vec<usize>) -> DeviceTensor {
        DeviceTensor { buffer: self.buffer.clone(), dtype: self.dtype, shape }
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

/// The device words of a host tensor: floats as f32 bits, integers as i32 / u32, bool as
/// 0 / 1. i64 values must fit in i32.
pub fn to_words(t: &HostTensor) -> Result<Vec<u32>, String> {
    Ok(match t.data() {
        TensorData::F32(v) => v.iter().map(|x| x.to_bits()).collect(),
        TensorData::F16(v) => v.iter().map(|x| x.to_f32().to_bits()).collect(),
        TensorData::BF16(v) => v.iter().map(|x| x.to_f32().to_bits()).collect(),
        TensorData::I8(v) => v.iter().map(|&x| i32::from(x) as u32).collect(),
        TensorData::I16(v) => v.iter().map(|&x| i32::from(x) as u32).collect(),
        TensorData::I32(v) => v.iter().map(|&x| x as u32).collect(),
        TensorData::I64(v) => v
            .iter()
            .map(|&x| {
                i32::try_from(x)
                    .map(|x| x as u32)
                    .map_err(|_| format!("i64 value {x} does not fit in i32, the widest integer WGSL stores"))
            })
            .collect::<Result<_, _>>()?,
        TensorData::U8(v) => v.iter().map(|&x| u32::from(x)).collect(),
        TensorData::U16(v) => v.iter().map(|&x| u32::from(x)).collect(),
        TensorData::U32(v) => v.clone(),
        TensorData::Bool(v) => v.iter().map(|&x| u32::from(x)).collect(),
        other => {
            return Err(format!("unsupported dtype {} on the wgpu backend (WGSL has no 64-bit types)", other.dtype()))
        }
    })
}

/// The host tensor of device words holding `dtype`.
pub fn from_words(dtype: DataType, shape: Vec<usize>, w: &[u32]) -> Result<HostTensor, String> {
    let f = |x: &u32| f32::from_bits(*x);
    let data = match dtype {
        DataType::F32 => TensorData::F32(w.iter().map(f).collect()),
        DataType::F16 => TensorData::F16(w.iter().map(|x| f16::from_f32(f(x))).collect()),
        DataType::BF16 => TensorData::BF16(w.iter().map(|x| bf16::from_f32(f(x))).collect()),
        DataType::I8 => TensorData::I8(w.iter().map(|&x| x as i32 as i8).collect()),
        DataType::I16 => TensorData::I16(w.iter().map(|&x| x as i32 as i16).collect()),
        DataType::I32 => TensorData::I32(w.iter().map(|&x| x as i32).collect()),
        DataType::I64 => TensorData::I64(w.iter().map(|&x| i64::from(x as i32)).collect()),
        DataType::U8 => TensorData::U8(w.iter().map(|&x| x as u8).collect()),
        DataType::U16 => TensorData::U16(w.iter().map(|&x| x as u16).collect()),
        DataType::U32 => TensorData::U32(w.to_vec()),
        DataType::Bool => TensorData::Bool(w.iter().map(|&x| x != 0).collect()),
        other => return Err(format!("unsupported dtype {other} on the wgpu backend")),
    };
    HostTensor::new(shape, data).map_err(|e| e.to_string())
}

/// Records the dispatches of one execution into one command encoder, submitted when a
/// value is read back.
pub struct Recorder {
    pub gpu: &'static Gpu,
    encoder: Mutex<Option<wgpu::CommandEncoder>>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").field("gpu", &self.gpu).finish()
    }
}

impl Recorder {
    pub fn new(gpu: &'static Gpu) -> Recorder {
        Recorder { gpu, encoder: Mutex::new(None) }
    }

    fn with_encoder<T>(&self, f: impl FnOnce(&mut wgpu::CommandEncoder) -> T) -> Result<T, DeviceError> {
        let mut slot = self.encoder.lock().map_err(|_| DeviceError::Validation {
            what: "recording".into(),
            reason: "a thread panicked while recording".into(),
        })?;
        let encoder = slot.get_or_insert_with(|| self.gpu.device.create_command_encoder(&Default::default()));
        Ok(f(encoder))
    }

    /// A new device tensor of `dtype` and `shape` (contents undefined until written).
    pub fn alloc(&self, dtype: DataType, shape: &[usize]) -> Result<DeviceTensor, DeviceError> {
        let len: usize = shape.iter().product();
        let what = format!("allocating a {dtype}{shape:?} tensor");
        let buffer = self.gpu.storage(&what, len as u64 * 4)?;
        Ok(DeviceTensor { buffer: Arc::new(buffer), dtype, shape: shape.to_vec() })
    }

    pub fn upload(&self, t: &HostTensor) -> Result<DeviceTensor, String> {
        let words = to_words(t)?;
        let what = format!("uploading a {}{:?} tensor", t.dtype(), t.shape());
        let buffer = self.gpu.storage_init(&what, &words).map_err(|e| e.to_string())?;
        Ok(DeviceTensor { buffer: Arc::new(buffer), dtype: t.dtype(), shape: t.shape().to_vec() })
    }

    /// Records `kernel` over `groups` workgroups with `params` at binding 0 and
    /// `buffers` at bindings 1, 2, …
    pub fn dispatch(
        &self,
        kernel: &Instance,
        params: &[u32],
        buffers: &[&wgpu::Buffer],
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
        let params = self.gpu.storage_init("uploading kernel parameters", params)?;
        let what = format!("recording kernel `{}`", kernel.key);
        self.gpu.scoped(&what, || {
            let layout = pipeline.get_bind_group_layout(0);
            let mut entries = vec![wgpu::BindGroupEntry { binding: 0, resource: params.as_entire_binding() }];
            entries.extend(
                buffers
                    .iter()
                    .enumerate()
                    .map(|(i, b)| wgpu::BindGroupEntry { binding: i as u32 + 1, resource: b.as_entire_binding() }),
            );
            let bind_group = self.gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &layout,
                entries: &entries,
            });
            self.with_encoder(|encoder| {
                let mut pass =
                    encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: None, timestamp_writes: None });
                pass.set_pipeline(&pipeline);
                pass.set_bind_group(0, &bind_group, &[]);
                pass.dispatch_workgroups(groups[0], groups[1], groups[2]);
            })
        })?
    }

    /// Records a pipeline compiled elsewhere (a plugin's kernel) with `buffers` at bindings
    /// 0, 1, … of group 0, over `groups` workgroups.
    pub fn dispatch_pipeline(
        &self,
        what: &str,
        pipeline: &wgpu::ComputePipeline,
        buffers: &[&wgpu::Buffer],
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
                .map(|(i, b)| wgpu::BindGroupEntry { binding: i as u32, resource: b.as_entire_binding() })
                .collect();
            let bind_group = self.gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &pipeline.get_bind_group_layout(0),
                entries: &entries,
            });
            self.with_encoder(|encoder| {
                let mut pass =
                    encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: None, timestamp_writes: None });
                pass.set_pipeline(pipeline);
                pass.set_bind_group(0, &bind_group, &[]);
                pass.dispatch_workgroups(groups[0], groups[1], groups[2]);
            })
        })?
    }

    /// Records a 1-D kernel over `count` invocations (a 2-D grid when one dimension of
    /// workgroups does not suffice).
    pub fn dispatch_1d(
        &self,
        kernel: &Instance,
        params: &[u32],
        buffers: &[&wgpu::Buffer],
        count: usize,
    ) -> Result<(), DeviceError> {
        let groups = count.div_ceil(WORKGROUP as usize) as u64;
        let max = u64::from(self.gpu.limits.max_compute_workgroups_per_dimension);
        let (x, y) = if groups <= max { (groups, 1) } else { (max, groups.div_ceil(max)) };
        self.dispatch(kernel, params, buffers, [x as u32, y as u32, 1])
    }

    /// Submits what was recorded and reads `t` back.
    pub fn read(&self, t: &DeviceTensor) -> Result<HostTensor, String> {
        let encoder = self.encoder.lock().map_err(|_| "a thread panicked while recording".to_string())?.take();
        let words = self.gpu.read_words(encoder, &t.buffer, t.len()).map_err(|e| e.to_string())?;
        from_words(t.dtype, t.shape.clone(), &words)
    }
}

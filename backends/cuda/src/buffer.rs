//! Device memory as the layers above see it: [`DeviceBuffer`] (an allocation, an arena range
//! or a view of another buffer), [`DeviceTensor`], the `repr(C)` kernel parameter structs and
//! [`Arg`]s, captured [`Graph`]s, and each element type's device representation.

use crate::arena::{lock, Arena, Sessions, Tracer};
use crate::error::{driver, GpuError};
use cudarc::driver::{sys, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr, DeviceSlice, SyncOnDrop};
use kiln::DataType;
use std::sync::{Arc, Mutex, Weak};

/// Device bytes: an allocation of their own, or a range of an execution's arena. Implements
/// cudarc's `DevicePtr`/`DevicePtrMut`, so cudarc's copies and library wrappers take it.
#[derive(Debug)]
pub struct DeviceBuffer {
    /// The address (arena base + offset for an arena range).
    pub(crate) ptr: u64,
    pub(crate) len: usize,
    /// Plain allocations own their memory; arena ranges keep the arena alive.
    pub(crate) own: Option<CudaSlice<u8>>,
    pub(crate) _arena: Option<Arc<Arena>>,
    /// A range of another buffer keeps it alive (a view read in place).
    pub(crate) _parent: Option<Arc<DeviceBuffer>>,
    /// Which allocation of the execution that made it, for its free event.
    pub(crate) traced: Option<(Weak<Mutex<Tracer>>, usize)>,
    pub(crate) stream: Arc<CudaStream>,
    pub(crate) sessions: Arc<Sessions>,
}

impl DeviceBuffer {
    /// Bytes available at [`DeviceBuffer::ptr`].
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device address.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Whether kiln allocated these bytes outside every run (constants, converted weights):
    /// not an arena range, a run's traced allocation or a caller's memory, whose values and
    /// lifetimes are a run's.
    pub fn outside_runs(&self) -> bool {
        match &self._parent {
            Some(parent) => parent.outside_runs(),
            None => self.own.is_some() && self.traced.is_none(),
        }
    }

    /// Bytes `offset..` of `parent`, which the range keeps alive: a view's start inside a
    /// wider tensor.
    pub fn range(parent: &Arc<DeviceBuffer>, offset: usize) -> Option<DeviceBuffer> {
        (offset <= parent.len).then(|| DeviceBuffer {
            ptr: parent.ptr + offset as u64,
            len: parent.len - offset,
            own: None,
            _arena: None,
            _parent: Some(parent.clone()),
            traced: None,
            stream: parent.stream.clone(),
            sessions: parent.sessions.clone(),
        })
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if let Some(tracer) = self.traced.take().and_then(|(t, k)| t.upgrade().map(|t| (t, k))) {
            lock(&tracer.0).freed(tracer.1);
        }
        if let Some(own) = self.own.take() {
            // The free is a stream operation: it must not land in another thread's capture.
            let _outside = self.sessions.access();
            drop(own);
        }
    }
}

impl DeviceSlice<u8> for DeviceBuffer {
    fn len(&self) -> usize {
        self.len
    }
    fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

impl DevicePtr<u8> for DeviceBuffer {
    fn device_ptr<'a>(&'a self, _stream: &'a CudaStream) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        // One stream orders everything (event tracking is off), so there is nothing to sync.
        (self.ptr, SyncOnDrop::Sync(None))
    }
}

impl DevicePtrMut<u8> for DeviceBuffer {
    fn device_ptr_mut<'a>(&'a mut self, _stream: &'a CudaStream) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        (self.ptr, SyncOnDrop::Sync(None))
    }
}
/// A tensor in device memory: bytes of `dtype` (bools as one byte each), packed row-major
/// unless `strides` says otherwise.
#[derive(Clone, Debug)]
pub struct DeviceTensor {
    pub buf: Arc<DeviceBuffer>,
    pub dtype: DataType,
    pub shape: Vec<usize>,
    /// `Some`: a view, element `i` at `Σ i[d]·strides[d]` from the buffer's start: a transpose
    /// not yet carried out, or a slice of a wider tensor read in place. Channels-last (NHWC)
    /// values of cuDNN's convolutions, and attention's inputs and outputs in their
    /// projections' [batch, sequence, heads, dim] order, are such tensors. Only the layers that
    /// know views ever see one; `ops::Ctx::dev` makes it row-major for every other reader.
    pub strides: Option<Vec<i64>>,
}

impl DeviceTensor {
    /// A row-major tensor.
    pub fn new(buf: Arc<DeviceBuffer>, dtype: DataType, shape: Vec<usize>) -> DeviceTensor {
        DeviceTensor { buf, dtype, shape, strides: None }
    }

    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The same bytes read row-major under another shape (a reshape costs nothing).
    pub fn reshaped(&self, shape: Vec<usize>) -> DeviceTensor {
        DeviceTensor::new(self.buf.clone(), self.dtype, shape)
    }

    /// The axes of an NCHW tensor of rank `rank` in NHWC order: `[0, 2, …, rank - 1, 1]`.
    pub fn channels_last_order(rank: usize) -> Vec<usize> {
        std::iter::once(0).chain(2..rank).chain((rank > 1).then_some(1)).collect()
    }

    /// The strides of an NCHW `shape` stored NHWC.
    pub fn channels_last_strides(shape: &[usize]) -> Vec<i64> {
        strides_in_order(shape, &Self::channels_last_order(shape.len()))
    }

    /// This tensor written in `source`'s layout: an elementwise kernel's output, made in
    /// memory order from an input that may be channels-last.
    pub fn with_strides_of(self, source: &DeviceTensor) -> DeviceTensor {
        DeviceTensor { strides: source.strides.clone(), ..self }
    }

    /// Whether the bytes are `shape` stored channels-last, packed.
    pub fn channels_last(&self) -> bool {
        self.shape.len() >= 3 && self.strides.as_deref() == Some(&Self::channels_last_strides(&self.shape)[..])
    }

    /// Whether the bytes are every element of `shape` packed in some order of its axes (a
    /// transposed view of a whole tensor): elementwise work may then run in memory order.
    pub fn packed_permutation(&self) -> bool {
        self.strides.as_deref().is_some_and(|strides| packs_in_some_order(&self.shape, strides))
    }

    /// Per axis, its element stride.
    pub fn element_strides(&self) -> Vec<i64> {
        self.strides.clone().unwrap_or_else(|| strides_in_order(&self.shape, &(0..self.shape.len()).collect::<Vec<_>>()))
    }
}

/// Whether `strides` place every element of `shape` one after another from the buffer's start in
/// some order of its axes (a transpose of a row-major tensor): no gaps, no overlap.
pub fn packs_in_some_order(shape: &[usize], strides: &[i64]) -> bool {
    let mut order: Vec<usize> = (0..shape.len()).collect();
    // Outermost first; an axis of one element may sit anywhere.
    order.sort_by_key(|&a| (std::cmp::Reverse(strides[a]), shape[a] != 1));
    let packed = strides_in_order(shape, &order);
    order.iter().all(|&a| shape[a] == 1 || packed[a] == strides[a])
}

/// Per axis of `shape`, its element stride when the axes are packed in `order` (outermost first).
pub fn strides_in_order(shape: &[usize], order: &[usize]) -> Vec<i64> {
    let mut strides = vec![0i64; shape.len()];
    let mut step = 1i64;
    for &axis in order.iter().rev() {
        strides[axis] = step;
        step *= shape[axis] as i64;
    }
    strides
}

/// The strided view every data-movement and broadcasting kernel takes (`Layout` in common.cuh).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Layout {
    pub shape: [i64; 8],
    pub stride: [[i64; 8]; 3],
    pub offset: [i64; 3],
    pub rank: i32,
}

// SAFETY: plain `repr(C)` integers matching `struct Layout` in kernels/common.cuh field for field.
unsafe impl DeviceRepr for Layout {}

/// A convolution or pooling window (`Window` in kernels/common.cuh).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Window {
    pub n: i64,
    pub c: i64,
    pub h: i64,
    pub w: i64,
    pub oc: i64,
    pub oh: i64,
    pub ow: i64,
    pub kh: i64,
    pub kw: i64,
    pub sh: i64,
    pub sw: i64,
    pub dh: i64,
    pub dw: i64,
    pub ph: i64,
    pub pw: i64,
    pub groups: i64,
    pub kind: i32,
    pub count_excludes_padding: i32,
    pub pad_end_h: i64,
    pub pad_end_w: i64,
}

// SAFETY: plain `repr(C)` scalars matching `struct Window` in kernels/common.cuh field for field.
unsafe impl DeviceRepr for Window {}

/// Most steps, operands and dims (after coalescing) one generated chain takes
/// (ops/chain_source.rs; `CHAIN_OPERANDS` / `CHAIN_RANK` in kernels/chain.cuh).
pub const CHAIN_STEPS: usize = 16;
pub const CHAIN_OPERANDS: usize = 8;
pub const CHAIN_RANK: usize = 4;

/// How a chain reads each slot (the running input, then its operands) over the output's
/// shape, in 32-bit elements (`ChainLayout` in kernels/chain.cuh).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ChainLayout {
    pub rank: i32,
    /// Bit `s`: slot `s` is stored as the output (read at the element's own index).
    pub dense: i32,
    /// Bit `s`: slot `s` is one run of the innermost dim, repeated (stride 1 there, 0 in every
    /// other dim): read at its offset plus the element's place in that dim, no coordinates.
    pub row: i32,
    pub shape: [i32; CHAIN_RANK],
    pub offset: [i32; CHAIN_OPERANDS + 1],
    pub stride: [[i32; CHAIN_RANK]; CHAIN_OPERANDS + 1],
}

// SAFETY: plain `repr(C)` 32-bit integers matching `struct ChainLayout` in kernels/chain.cuh field for field.
unsafe impl DeviceRepr for ChainLayout {}

/// A TMA tensor map (CUtensorMap): 128 opaque bytes the driver encodes ([`crate::device::Gpu::tensor_map_2d_u8`])
/// and a kernel takes by value as a `const __grid_constant__ TensorMap` (kernels/tma.cuh).
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
pub struct TensorMap(pub(crate) [u64; 16]);

// SAFETY: 128 plain bytes, 64-byte aligned, as `struct TensorMap` in kernels/tma.cuh and the
// driver's CUtensorMap.
unsafe impl DeviceRepr for TensorMap {}

/// One kernel argument.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    I32(i32),
    I64(i64),
    F32(f32),
    Layout(Layout),
    Window(Window),
    ChainLayout(ChainLayout),
    TensorMap(TensorMap),
    /// The address of a live device buffer, or null for an absent optional input.
    Ptr(KernelPtr),
}

impl Arg {
    /// A null pointer: an optional input the kernel checks for.
    pub const NULL: Arg = Arg::Ptr(KernelPtr(0));

    /// `buf`'s address (the op keeps `buf` alive until the launch is ordered before its reuse).
    pub fn buffer(buf: &DeviceBuffer) -> Arg {
        Arg::Ptr(KernelPtr(buf.ptr))
    }

    /// Bytes the argument takes in the kernel's parameter buffer.
    pub fn size(&self) -> usize {
        match self {
            Arg::I32(_) | Arg::F32(_) => 4,
            Arg::I64(_) | Arg::Ptr(_) => 8,
            Arg::Layout(_) => std::mem::size_of::<Layout>(),
            Arg::Window(_) => std::mem::size_of::<Window>(),
            Arg::ChainLayout(_) => std::mem::size_of::<ChainLayout>(),
            Arg::TensorMap(_) => std::mem::size_of::<TensorMap>(),
        }
    }

    /// The address of the value, as a launch's parameter array holds it (valid while `self` is).
    pub fn value_address(&self) -> *mut std::ffi::c_void {
        let at: *const std::ffi::c_void = match self {
            Arg::I32(v) => (v as *const i32).cast(),
            Arg::I64(v) => (v as *const i64).cast(),
            Arg::F32(v) => (v as *const f32).cast(),
            Arg::Layout(v) => (v as *const Layout).cast(),
            Arg::Window(v) => (v as *const Window).cast(),
            Arg::ChainLayout(v) => (v as *const ChainLayout).cast(),
            Arg::TensorMap(v) => (v as *const TensorMap).cast(),
            Arg::Ptr(v) => (v as *const KernelPtr).cast(),
        };
        at.cast_mut()
    }
}

/// A device address a kernel may dereference: made only from a [`DeviceBuffer`] (or null),
/// never from an integer, so a launch cannot be handed an arbitrary address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(transparent)]
pub struct KernelPtr(u64);

// SAFETY: a `repr(transparent)` u64, passed as the kernel's pointer parameter (8 bytes).
unsafe impl DeviceRepr for KernelPtr {}

impl KernelPtr {
    pub fn address(self) -> u64 {
        self.0
    }
}
/// An instantiated CUDA graph of one execution, replayed on the stream it was captured on.
pub struct Graph(pub(crate) cudarc::driver::CudaGraph);

// SAFETY: CUDA graph objects may be used from any thread as long as calls on one graph are
// serialized; the executable keeps each graph behind a mutex and replays it under the run lock.
unsafe impl Send for Graph {}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Graph")
    }
}

impl Graph {
    /// Enqueues one replay on the stream it was captured on.
    pub fn launch(&self) -> Result<(), GpuError> {
        self.0.launch().map_err(driver("cuGraphLaunch"))
    }

    /// Uploads the graph's resources ahead of its first launch.
    pub fn upload(&self) -> Result<(), GpuError> {
        self.0.upload().map_err(driver("cuGraphUpload"))
    }
}

/// Bytes per element on the device; the types kiln's kernels handle.
pub fn storage_size(dtype: DataType) -> Result<usize, GpuError> {
    // Storage-only types hold one element per byte, as kiln's host tensors hold them.
    dtype.size_bytes().ok_or(GpuError::UnsupportedDtype(dtype))
}

/// Kernel-name suffix of a float type (`f32`, `f16`, `bf16`).
pub fn float_suffix(dtype: DataType) -> Result<&'static str, GpuError> {
    match dtype {
        DataType::F32 => Ok("f32"),
        DataType::F16 => Ok("f16"),
        DataType::BF16 => Ok("bf16"),
        other => Err(GpuError::UnsupportedDtype(other)),
    }
}

/// Kernel-name suffix of a data-movement kernel by element width (`u8` … `u64`).
pub fn width_suffix(dtype: DataType) -> Result<&'static str, GpuError> {
    Ok(unit_suffix(storage_size(dtype)?))
}

/// Kernel-name suffix of a data-movement kernel moving `bytes`-wide units (`u8` … `u128`).
pub fn unit_suffix(bytes: usize) -> &'static str {
    match bytes {
        1 => "u8",
        2 => "u16",
        4 => "u32",
        8 => "u64",
        _ => "u128",
    }
}

#[cfg(test)]
mod tests {
    use super::{packs_in_some_order, strides_in_order};

    #[test]
    fn a_transpose_of_a_packed_tensor_fills_its_buffer_and_a_slice_or_broadcast_does_not() {
        let merged = strides_in_order(&[2, 12, 128, 64], &[0, 2, 1, 3]);
        assert!(packs_in_some_order(&[2, 12, 128, 64], &merged));
        assert!(packs_in_some_order(&[2, 12, 128, 64], &[12 * 128 * 64, 128 * 64, 64, 1]));
        // Axes of one element may have any stride.
        assert!(packs_in_some_order(&[1, 3, 4], &[999, 4, 1]));
        // Every other column of a wider row, and a broadcast row.
        assert!(!packs_in_some_order(&[4, 8], &[16, 1]));
        assert!(!packs_in_some_order(&[4, 8], &[0, 1]));
    }
}

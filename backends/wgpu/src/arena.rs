//! Device memory of one execution, allocated once per context and reused.
//!
//! An [`Arena`] belongs to the executable's pool; an execution checks one out, so concurrent
//! executions never share memory. The first execution allocates a buffer per tensor (as a
//! plain allocator would) and records its *allocation trace*: every block's size and its
//! lifetime in allocation/free events. When it ends, kiln's placement routine
//! ([`kiln::memory_plan::pack`], the one the builder's memory plan uses) packs the trace into
//! offsets, and the arena creates its buffers. Later executions whose allocations repeat the
//! trace (same sizes in the same order) take their blocks at the planned offsets: they create
//! no buffers. A run that departs from the trace (other shapes, another trip count) falls
//! back to a buffer per tensor from that point on and the arena is re-planned from its trace.
//!
//! Hazards the plan keeps away:
//! - A host upload is written by the queue before the command buffer that reads it runs, so
//!   an upload must not land on memory an earlier dispatch of the same run still reads: its
//!   lifetime is taken to start at the run's start, so nothing placed before it shares its
//!   memory.
//! - Lifetimes can differ from the trace's (frees happen where values die): every planned
//!   block is checked against the blocks live now, and an overlap counts as a departure.
//! - The arena is split into several buffers where it exceeds one binding
//!   (`max_storage_buffer_binding_size`); a block never straddles two.
//!
//! Tensors in arena buffers share a buffer with other tensors bound in the same dispatch;
//! wgpu refuses a buffer bound read-only and read-write in one dispatch, so every kernel
//! binds its tensors read-write (see [`crate::shaders::tensor_bindings_read_write`]).

use crate::device::{DeviceError, Gpu};
use kiln::memory_plan::{pack, Lifetime, ARENA_ALIGNMENT};
use std::num::NonZeroU64;
use std::sync::{Arc, Mutex, PoisonError};

/// Traces longer than this are not planned (placement is quadratic in the blocks); such
/// runs keep a buffer per tensor.
const MAX_PLANNED_BLOCKS: usize = 20_000;

/// A range of a device buffer holding one tensor.
#[derive(Debug)]
pub struct Block {
    buffer: Arc<wgpu::Buffer>,
    offset: u64,
    size: u64,
    _lease: Option<Lease>,
}

impl Block {
    /// A block that is a whole buffer of its own (constants, plugin outputs, unplanned runs).
    pub fn standalone(buffer: wgpu::Buffer) -> Block {
        let size = buffer.size();
        Block { buffer: Arc::new(buffer), offset: 0, size, _lease: None }
    }

    pub fn buffer(&self) -> &wgpu::Buffer {
        &self.buffer
    }

    pub fn offset(&self) -> u64 {
        self.offset
    }

    pub fn binding(&self) -> wgpu::BindingResource<'_> {
        wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: &self.buffer,
            offset: self.offset,
            size: NonZeroU64::new(self.size),
        })
    }
}

/// Ties a block to the run's trace: dropping it records the free.
#[derive(Debug)]
struct Lease {
    log: Arc<Mutex<RunLog>>,
    index: usize,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        log.free(self.index);
    }
}

/// Why a block is allocated: uploads are written by the queue (see the module notes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockKind {
    Kernel,
    Upload,
}

#[derive(Clone, Copy, Debug)]
struct TraceEntry {
    kind: BlockKind,
    bytes: u64,
    first: usize,
    last: Option<usize>,
}

#[derive(Debug, Default)]
struct RunLog {
    clock: usize,
    trace: Vec<TraceEntry>,
    /// Planned blocks alive now: (trace index, chunk, start, end).
    live: Vec<(usize, usize, u64, u64)>,
    diverged: bool,
}

impl RunLog {
    fn free(&mut self, index: usize) {
        if let Some(entry) = self.trace.get_mut(index) {
            entry.last = Some(self.clock);
        }
        self.clock += 1;
        self.live.retain(|l| l.0 != index);
    }
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    kind: BlockKind,
    bytes: u64,
    chunk: usize,
    offset: u64,
}

/// The placed trace of an earlier run and the buffers holding it.
#[derive(Debug)]
struct Plan {
    slots: Vec<Slot>,
    chunks: Vec<Arc<wgpu::Buffer>>,
}

impl Plan {
    fn from_trace(gpu: &Gpu, trace: &[TraceEntry], end: usize) -> Result<Plan, DeviceError> {
        let lifetimes: Vec<Lifetime> = trace
            .iter()
            .map(|e| Lifetime {
                size: e.bytes,
                first: if e.kind == BlockKind::Upload { 0 } else { e.first },
                last: e.last.unwrap_or(end),
            })
            .collect();
        let (offsets, _peak) = pack(&lifetimes);
        // Split into chunks of at most one binding: blocks by offset, each in the latest
        // chunk when it fits there, else opening a chunk at its own offset (chunks may then
        // cover overlapping ranges of the packed arena: more memory, never aliasing).
        let limit = gpu.max_binding() / ARENA_ALIGNMENT * ARENA_ALIGNMENT;
        let mut order: Vec<usize> = (0..trace.len()).collect();
        order.sort_by_key(|&i| (offsets[i], i));
        let mut bases: Vec<(u64, u64)> = Vec::new(); // (base, end) per chunk
        let mut slots = vec![Slot { kind: BlockKind::Kernel, bytes: 0, chunk: 0, offset: 0 }; trace.len()];
        for i in order {
            let (start, bytes) = (offsets[i], trace[i].bytes);
            if bytes > limit {
                return Err(DeviceError::LimitExceeded {
                    what: "an arena block".into(),
                    needed: bytes,
                    limit: gpu.max_binding(),
                });
            }
            let fits = bases.last().is_some_and(|&(base, _)| start + bytes <= base + limit);
            if !fits {
                bases.push((start, start));
            }
            let chunk = bases.len() - 1;
            let (base, end) = &mut bases[chunk];
            *end = (*end).max(start + bytes);
            slots[i] = Slot { kind: trace[i].kind, bytes, chunk, offset: start - *base };
        }
        let chunks = bases
            .iter()
            .enumerate()
            .map(|(k, &(base, end))| gpu.storage(&format!("allocating arena buffer {k}"), end - base).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Plan { slots, chunks })
    }
}

/// Per-execution memory kept between executions: the planned tensor buffers, the kernel
/// parameter buffer and the read-back staging buffer.
#[derive(Debug, Default)]
pub struct Arena {
    plan: Option<Arc<Plan>>,
    params: Option<Arc<wgpu::Buffer>>,
    staging: Option<wgpu::Buffer>,
}

/// Where one dispatch's parameters are bound.
pub enum ParamsBinding {
    /// In the arena's parameter buffer, written before the next submission.
    Shared { buffer: Arc<wgpu::Buffer>, offset: u64, size: u64 },
    /// A buffer of its own (the arena's was too small; it grows for the next run).
    Own(wgpu::Buffer),
}

impl ParamsBinding {
    pub fn binding(&self) -> wgpu::BindingResource<'_> {
        match self {
            ParamsBinding::Shared { buffer, offset, size } => wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer,
                offset: *offset,
                size: NonZeroU64::new(*size),
            }),
            ParamsBinding::Own(b) => b.as_entire_binding(),
        }
    }
}

#[derive(Debug, Default)]
struct ParamsState {
    /// Next free byte of the parameter buffer.
    cursor: u64,
    /// Bytes from `pending_base` to `cursor`, not yet written to the device.
    pending: Vec<u8>,
    pending_base: u64,
}

/// One execution's view of its arena.
#[derive(Debug)]
pub struct RunMemory {
    plan: Option<Arc<Plan>>,
    log: Arc<Mutex<RunLog>>,
    params_buffer: Option<Arc<wgpu::Buffer>>,
    params: Mutex<ParamsState>,
    staging: Mutex<Option<wgpu::Buffer>>,
}

fn align(n: u64, to: u64) -> u64 {
    n.div_ceil(to) * to
}

impl RunMemory {
    pub fn new(arena: Arena) -> RunMemory {
        RunMemory {
            plan: arena.plan,
            log: Arc::new(Mutex::new(RunLog::default())),
            params_buffer: arena.params,
            params: Mutex::new(ParamsState::default()),
            staging: Mutex::new(arena.staging),
        }
    }

    /// A block of at least `bytes` (a multiple of 4, at least 4): the planned one where the
    /// run still follows the trace, else a buffer of its own.
    pub fn alloc(&self, gpu: &Gpu, what: &str, kind: BlockKind, bytes: u64) -> Result<Block, DeviceError> {
        let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        let index = log.trace.len();
        let reserved = align(bytes, ARENA_ALIGNMENT);
        let clock = log.clock;
        log.trace.push(TraceEntry { kind, bytes: reserved, first: clock, last: None });
        log.clock += 1;
        let planned = match (&self.plan, log.diverged) {
            (Some(plan), false) => plan.slots.get(index).filter(|s| {
                let end = s.offset + s.bytes;
                s.kind == kind
                    && s.bytes == reserved
                    && !log.live.iter().any(|&(_, c, a, b)| c == s.chunk && a < end && s.offset < b)
            }),
            _ => None,
        };
        let lease = Some(Lease { log: self.log.clone(), index });
        match planned {
            Some(slot) => {
                log.live.push((index, slot.chunk, slot.offset, slot.offset + slot.bytes));
                let buffer = self.plan.as_ref().map(|p| p.chunks[slot.chunk].clone()).ok_or_else(|| {
                    DeviceError::Validation { what: what.into(), reason: "the arena plan vanished".into() }
                })?;
                Ok(Block { buffer, offset: slot.offset, size: bytes, _lease: lease })
            }
            None => {
                log.diverged |= self.plan.is_some();
                drop(log);
                let buffer = gpu.storage(what, bytes)?;
                Ok(Block { buffer: Arc::new(buffer), offset: 0, size: bytes, _lease: lease })
            }
        }
    }

    /// Binds `words` as a dispatch's parameters.
    pub fn params(&self, gpu: &Gpu, words: &[u32]) -> Result<ParamsBinding, DeviceError> {
        let words: &[u32] = if words.is_empty() { &[0] } else { words };
        let bytes: &[u8] = bytemuck::cast_slice(words);
        let mut state = self.params.lock().unwrap_or_else(PoisonError::into_inner);
        let offset = align(state.cursor, u64::from(gpu.limits.min_storage_buffer_offset_alignment));
        let end = offset + bytes.len() as u64;
        let padding = (offset - state.cursor) as usize;
        state.cursor = end;
        match &self.params_buffer {
            Some(buffer) if end <= buffer.size() => {
                state.pending.extend(std::iter::repeat_n(0u8, padding));
                state.pending.extend_from_slice(bytes);
                Ok(ParamsBinding::Shared { buffer: buffer.clone(), offset, size: bytes.len() as u64 })
            }
            _ => {
                // Keep `pending` contiguous up to the cursor: this slot is unused.
                state.pending.extend(std::iter::repeat_n(0u8, padding + bytes.len()));
                gpu.storage_init("uploading kernel parameters", words).map(ParamsBinding::Own)
            }
        }
    }

    /// Writes the parameters recorded since the last submission (call before submitting).
    pub fn flush_params(&self, gpu: &Gpu) {
        let mut state = self.params.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(buffer) = &self.params_buffer {
            let fits = state.pending_base + state.pending.len() as u64 <= buffer.size();
            if !state.pending.is_empty() && fits {
                gpu.queue.write_buffer(buffer, state.pending_base, &state.pending);
            } else if !state.pending.is_empty() {
                // Only the slots within the buffer were bound to it.
                let within = buffer.size().saturating_sub(state.pending_base) as usize;
                if within > 0 {
                    gpu.queue.write_buffer(buffer, state.pending_base, &state.pending[..within & !3]);
                }
            }
        }
        state.pending.clear();
        state.pending_base = state.cursor;
    }

    /// The staging buffer for reading back `bytes` (grown when too small).
    pub fn take_staging(&self, gpu: &Gpu, bytes: u64) -> Result<wgpu::Buffer, DeviceError> {
        let mut slot = self.staging.lock().unwrap_or_else(PoisonError::into_inner);
        match slot.take() {
            Some(b) if b.size() >= bytes => Ok(b),
            _ => gpu.readback_buffer(bytes),
        }
    }

    pub fn return_staging(&self, buffer: wgpu::Buffer) {
        *self.staging.lock().unwrap_or_else(PoisonError::into_inner) = Some(buffer);
    }

    /// The arena to keep for the next execution: re-planned when this run departed from
    /// the plan (or had none), with a parameter buffer that holds this run's parameters.
    /// Every block of the run must have been dropped.
    pub fn finish(self, gpu: &Gpu) -> Result<Arena, DeviceError> {
        let log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        let same_length = self.plan.as_ref().is_some_and(|p| p.slots.len() == log.trace.len());
        let plan = if !log.diverged && same_length {
            self.plan.clone()
        } else if log.trace.len() <= MAX_PLANNED_BLOCKS && !log.trace.is_empty() {
            Some(Arc::new(Plan::from_trace(gpu, &log.trace, log.clock)?))
        } else {
            None
        };
        let needed = self.params.lock().unwrap_or_else(PoisonError::into_inner).cursor;
        let params = match self.params_buffer.clone() {
            Some(b) if b.size() >= needed => Some(b),
            _ if needed == 0 => None,
            _ => Some(Arc::new(gpu.storage("allocating the kernel parameter buffer", needed)?)),
        };
        let staging = self.staging.lock().unwrap_or_else(PoisonError::into_inner).take();
        Ok(Arena { plan, params, staging })
    }
}

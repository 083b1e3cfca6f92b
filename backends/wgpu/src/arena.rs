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
//! Buffers of unplanned tensors return to a [`Pool`] when the tensors die and serve the
//! next tensors of their size, so an unplanned run (a loop of many trips, whose trace is too
//! long to plan) holds what its live tensors need, not a buffer per tensor it ever made.
//!
//! Hazards the plan keeps away:
//! - A host upload is written by the queue before the command buffer that reads it runs, so
//!   an upload must not land on memory an earlier dispatch of the same run still reads: its
//!   lifetime is taken to start at the run's start, so nothing placed before it shares its
//!   memory. (The cost: uploads never share memory with one another within a run, so a
//!   loop uploading a host value per iteration grows the arena by each upload.)
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
use std::collections::{HashMap, VecDeque};
use std::num::NonZeroU64;
use std::sync::{Arc, Mutex, PoisonError};

/// Traces longer than this are not planned (placement is quadratic in the blocks); such
/// runs keep a buffer per tensor.
const MAX_PLANNED_BLOCKS: usize = 8192;

/// The parameter buffer of a run that has none from an earlier one: room for a
/// submission's parameters (see `Recorder`'s DISPATCHES_PER_SUBMISSION) at 256-byte
/// offsets.
const FIRST_PARAMS_BYTES: u64 = 64 << 10;

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

    /// Bytes bound for the tensor (its elements' bytes rounded up to 4).
    #[cfg(test)]
    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn binding(&self) -> wgpu::BindingResource<'_> {
        wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: &self.buffer,
            offset: self.offset,
            size: NonZeroU64::new(self.size),
        })
    }
}

/// Ties a block to the run's trace: dropping it records the free, and returns a buffer of
/// its own to the run's pool.
#[derive(Debug)]
struct Lease {
    log: Arc<Mutex<RunLog>>,
    index: usize,
    pooled: Option<Arc<wgpu::Buffer>>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        log.free(self.index);
        if let Some(buffer) = self.pooled.take() {
            let epoch = log.epoch;
            log.pool.put(buffer, epoch);
        }
    }
}

/// Buffers of blocks that were not planned (a first run, a departure from the plan, a
/// trace too long to plan: a many-trip loop), kept by size once their tensor dies and
/// taken again for the next block of that size, so such runs stop creating buffers once
/// their live set is covered and memory follows the live tensors, not the trip count.
///
/// Each buffer remembers the submission epoch it was freed in: a kernel's output may
/// reuse it at once (the dispatches still reading it were recorded earlier in the same
/// stream), but an upload (written by the queue before the next submission's commands)
/// only once every command that used it has been submitted.
#[derive(Debug, Default)]
pub struct Pool {
    free: HashMap<u64, VecDeque<(u64, Arc<wgpu::Buffer>)>>,
}

impl Pool {
    fn put(&mut self, buffer: Arc<wgpu::Buffer>, epoch: u64) {
        self.free.entry(buffer.size()).or_default().push_back((epoch, buffer));
    }

    /// A free buffer of `size` bytes that a block of `kind` may take in `epoch`.
    fn take(&mut self, size: u64, kind: BlockKind, epoch: u64) -> Option<Arc<wgpu::Buffer>> {
        let free = self.free.get_mut(&size)?;
        match kind {
            BlockKind::Kernel => free.pop_back().map(|(_, b)| b),
            // Freed in order, so the oldest is the one most likely submitted.
            BlockKind::Upload => match free.front() {
                Some(&(freed, _)) if freed < epoch => free.pop_front().map(|(_, b)| b),
                _ => None,
            },
        }
    }

    /// The pool at the start of a run: every buffer free for any block.
    fn settled(mut self) -> Pool {
        self.free.values_mut().flat_map(|v| v.iter_mut()).for_each(|(epoch, _)| *epoch = 0);
        self
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
    /// Every block so far, until there are more than [`MAX_PLANNED_BLOCKS`] (then empty).
    trace: Vec<TraceEntry>,
    /// The trace outgrew [`MAX_PLANNED_BLOCKS`]: this run will not be planned.
    untraced: bool,
    /// Planned blocks alive now: (trace index, chunk, start, end).
    live: Vec<(usize, usize, u64, u64)>,
    diverged: bool,
    /// Submissions so far (see [`Pool`]).
    epoch: u64,
    pool: Pool,
}

impl RunLog {
    /// Records a new block of `kind` and `bytes`; its trace index.
    fn record(&mut self, kind: BlockKind, bytes: u64) -> usize {
        if self.trace.len() == MAX_PLANNED_BLOCKS {
            // No plan will come of it: keep memory from growing with the blocks.
            self.untraced = true;
            self.trace = Vec::new();
        }
        let index = match self.untraced {
            true => usize::MAX,
            false => {
                self.trace.push(TraceEntry { kind, bytes, first: self.clock, last: None });
                self.trace.len() - 1
            }
        };
        self.clock += 1;
        index
    }

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
        let limit = gpu.max_binding() / ARENA_ALIGNMENT * ARENA_ALIGNMENT;
        let blocks: Vec<(u64, u64)> = offsets.iter().zip(trace).map(|(&o, e)| (o, e.bytes)).collect();
        let (places, sizes) = split_into_chunks(&blocks, limit).ok_or_else(|| DeviceError::LimitExceeded {
            what: "an arena block".into(),
            needed: trace.iter().map(|e| e.bytes).max().unwrap_or(0),
            limit: gpu.max_binding(),
        })?;
        let slots = places
            .iter()
            .zip(trace)
            .map(|(&(chunk, offset), e)| Slot { kind: e.kind, bytes: e.bytes, chunk, offset })
            .collect();
        let chunks = sizes
            .iter()
            .enumerate()
            .map(|(k, &size)| gpu.storage(&format!("allocating arena buffer {k}"), size).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Plan { slots, chunks })
    }
}

/// Each block's (buffer, offset in it) and each buffer's size.
type Chunked = (Vec<(usize, u64)>, Vec<u64>);

/// Splits packed blocks (offset, size) into buffers of at most `limit` bytes, a block never
/// straddling two: blocks by offset, each in the latest buffer when it fits there, else
/// opening one at its own offset (buffers may then cover overlapping ranges of the packed
/// arena: more memory, never aliasing, as blocks sharing a buffer keep their packed
/// offsets). Returns each block's (buffer, offset in it) and each buffer's size; `None`
/// when a block alone exceeds `limit`.
fn split_into_chunks(blocks: &[(u64, u64)], limit: u64) -> Option<Chunked> {
    let mut order: Vec<usize> = (0..blocks.len()).collect();
    order.sort_by_key(|&i| (blocks[i].0, i));
    let mut chunks: Vec<(u64, u64)> = Vec::new(); // (base, end) in the packed arena
    let mut places = vec![(0, 0); blocks.len()];
    for i in order {
        let (start, bytes) = blocks[i];
        if bytes > limit {
            return None;
        }
        if chunks.last().is_none_or(|&(base, _)| start + bytes > base + limit) {
            chunks.push((start, start));
        }
        let chunk = chunks.len() - 1;
        let (base, end) = &mut chunks[chunk];
        *end = (*end).max(start + bytes);
        places[i] = (chunk, start - *base);
    }
    Some((places, chunks.iter().map(|&(base, end)| end - base).collect()))
}

/// Per-execution memory kept between executions: the planned tensor buffers, the kernel
/// parameter buffer, the read-back staging buffer, and the pool of buffers of an
/// unplanned run.
#[derive(Debug, Default)]
pub struct Arena {
    plan: Option<Arc<Plan>>,
    params: Option<Arc<wgpu::Buffer>>,
    staging: Option<wgpu::Buffer>,
    pool: Pool,
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
    /// Next free byte of the parameter buffer; back to 0 after each submission, whose
    /// commands have read what they need by the time the queue writes the next ones.
    cursor: u64,
    /// The furthest `cursor` came: what the next run's parameter buffer needs.
    peak: u64,
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
    pub fn new(gpu: &Gpu, arena: Arena) -> RunMemory {
        // The earlier run's buffers were all submitted: any block may take them (epoch 0).
        let log = RunLog { epoch: 1, pool: arena.pool.settled(), ..RunLog::default() };
        RunMemory {
            plan: arena.plan,
            log: Arc::new(Mutex::new(log)),
            // A first run's parameters share a buffer too, rather than one per dispatch
            // (a buffer too small falls back to those, and grows for the next run).
            params_buffer: arena.params.or_else(|| {
                gpu.storage("allocating the kernel parameter buffer", FIRST_PARAMS_BYTES).ok().map(Arc::new)
            }),
            params: Mutex::new(ParamsState::default()),
            staging: Mutex::new(arena.staging),
        }
    }

    /// A block of at least `bytes` (a multiple of 4, at least 4): the planned one where the
    /// run still follows the trace, else a buffer of its own (from the pool where it has
    /// one of the size).
    pub fn alloc(&self, gpu: &Gpu, what: &str, kind: BlockKind, bytes: u64) -> Result<Block, DeviceError> {
        let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        let next = if log.untraced { usize::MAX } else { log.trace.len() };
        let reserved = align(bytes, ARENA_ALIGNMENT);
        let planned = match (&self.plan, log.diverged) {
            (Some(plan), false) => plan.slots.get(next).copied().filter(|s| {
                let end = s.offset + s.bytes;
                s.kind == kind
                    && s.bytes == reserved
                    && !log.live.iter().any(|&(_, c, a, b)| c == s.chunk && a < end && s.offset < b)
            }),
            _ => None,
        };
        let (buffer, offset, pooled) = match (planned, &self.plan) {
            (Some(slot), Some(plan)) => (plan.chunks[slot.chunk].clone(), slot.offset, None),
            _ => {
                log.diverged |= self.plan.is_some();
                let epoch = log.epoch;
                let buffer = match log.pool.take(bytes, kind, epoch) {
                    Some(buffer) => buffer,
                    // A failed allocation leaves no trace entry: the trace holds only
                    // blocks that existed.
                    None => Arc::new(gpu.storage(what, bytes)?),
                };
                (buffer.clone(), 0, Some(buffer))
            }
        };
        let index = log.record(kind, reserved);
        if let Some(slot) = planned {
            log.live.push((index, slot.chunk, slot.offset, slot.offset + slot.bytes));
        }
        let lease = Lease { log: self.log.clone(), index, pooled };
        Ok(Block { buffer, offset, size: bytes, _lease: Some(lease) })
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

    /// Notes that what was recorded has been submitted (call after [`Self::flush_params`]
    /// and the submission): parameters start again at the front of their buffer, and
    /// buffers freed so far may take uploads.
    pub fn submitted(&self) {
        let mut state = self.params.lock().unwrap_or_else(PoisonError::into_inner);
        state.peak = state.peak.max(state.cursor);
        state.cursor = 0;
        state.pending.clear();
        state.pending_base = 0;
        self.log.lock().unwrap_or_else(PoisonError::into_inner).epoch += 1;
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
    /// Every block of the run must have been dropped. `completed`: whether the run
    /// succeeded (a failed run's partial trace is not planned). Where the device cannot
    /// hold the new plan, the arena keeps none and the next run allocates as it goes.
    pub fn finish(self, gpu: &Gpu, completed: bool) -> Arena {
        let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        let same_length = self.plan.as_ref().is_some_and(|p| p.slots.len() == log.trace.len());
        let plan = if !completed || (!log.diverged && same_length) {
            self.plan.clone()
        } else if log.trace.len() <= MAX_PLANNED_BLOCKS && !log.trace.is_empty() {
            Plan::from_trace(gpu, &log.trace, log.clock).ok().map(Arc::new)
        } else {
            None
        };
        let needed = {
            let state = self.params.lock().unwrap_or_else(PoisonError::into_inner);
            state.peak.max(state.cursor)
        };
        let params = match self.params_buffer.clone() {
            Some(b) if b.size() >= needed => Some(b),
            _ if needed == 0 || !completed => self.params_buffer.clone(),
            _ => gpu.storage("allocating the kernel parameter buffer", needed).ok().map(Arc::new),
        };
        let staging = self.staging.lock().unwrap_or_else(PoisonError::into_inner).take();
        // A planned next run takes no buffers of its own: the pool would only hold memory.
        let pool = if plan.is_some() { Pool::default() } else { std::mem::take(&mut log.pool) };
        Arena { plan, params, staging, pool }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks overlapping in the packed arena must be apart in time; here every pair of
    /// blocks in one chunk must keep its packed distance, and no chunk exceeds the limit.
    #[test]
    fn chunks_respect_the_binding_limit_and_keep_packed_offsets() {
        let lifetimes: Vec<Lifetime> = (0..40)
            .map(|i| Lifetime { size: 256 * (1 + (i * 7) % 13) as u64, first: i % 9, last: i % 9 + (i % 4) })
            .collect();
        let (offsets, peak) = pack(&lifetimes);
        let blocks: Vec<(u64, u64)> = offsets.iter().zip(&lifetimes).map(|(&o, l)| (o, l.size)).collect();
        let limit = 4096;
        assert!(peak > limit, "the test needs an arena larger than one binding ({peak})");
        let (places, sizes) = split_into_chunks(&blocks, limit).expect("every block fits");
        assert!(sizes.len() > 1 && sizes.iter().all(|&s| s <= limit), "{sizes:?}");
        for (i, &(ci, oi)) in places.iter().enumerate() {
            assert!(oi + blocks[i].1 <= sizes[ci], "block {i} overflows chunk {ci}");
            for (j, &(cj, oj)) in places.iter().enumerate().skip(i + 1) {
                let (a, b) = (&lifetimes[i], &lifetimes[j]);
                let live_together = a.first <= b.last && b.first <= a.last;
                let overlap = oi < oj + blocks[j].1 && oj < oi + blocks[i].1;
                assert!(!(ci == cj && live_together && overlap), "blocks {i} and {j} alias in chunk {ci}");
            }
        }
        assert!(split_into_chunks(&[(0, 8192)], limit).is_none(), "a block beyond the limit is refused");
    }
}

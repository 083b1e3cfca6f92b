//! One execution's device allocations served from one arena (FFI module: pinned host memory).
//!
//! Layer outputs and kernel temporaries are known exactly only at run time (shapes,
//! workspaces), so the first execution with an input-shape signature runs on plain
//! allocations and records its allocation trace (sizes in allocation order, and when each
//! block is freed). kiln's memory planner ([`kiln::memory_plan::pack`], best fit over
//! lifetimes) places the trace in one arena; later executions with the same signature serve
//! allocation *k* from its offset there, checking event by event that they follow the
//! recorded trace (a divergence falls back to plain allocations and the caller re-plans).
//! A fixed arena also fixes every address, which is what CUDA graph capture needs.

use crate::error::GpuError;
use cudarc::driver::{result, sys, CudaContext, CudaSlice, CudaStream, DevicePtr};
use kiln::memory_plan::{pack, Lifetime};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, ThreadId};

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One step of an execution's allocation trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The next allocation, of this many bytes.
    Alloc { bytes: usize },
    /// Allocation number `alloc` (in allocation order) was released.
    Free { alloc: usize },
}

/// A recorded trace placed in one arena.
#[derive(Debug)]
pub struct ArenaPlan {
    events: Vec<Event>,
    /// Byte offset of each allocation, in allocation order.
    offsets: Vec<u64>,
    /// The arena size.
    pub bytes: u64,
    /// What the allocations would take without sharing (each rounded to the alignment).
    pub unshared_bytes: u64,
}

impl ArenaPlan {
    /// Places a trace: allocation *k* lives from its event to its free (or to the end).
    pub fn place(events: Vec<Event>) -> ArenaPlan {
        let mut lifetimes: Vec<Lifetime> = Vec::new();
        for (at, event) in events.iter().enumerate() {
            match *event {
                Event::Alloc { bytes } => lifetimes.push(Lifetime { size: bytes as u64, first: at, last: events.len() }),
                Event::Free { alloc } => {
                    if let Some(l) = lifetimes.get_mut(alloc) {
                        l.last = at;
                    }
                }
            }
        }
        let (offsets, bytes) = pack(&lifetimes);
        let align = kiln::memory_plan::ARENA_ALIGNMENT;
        let unshared_bytes = lifetimes.iter().map(|l| l.size.div_ceil(align) * align).sum();
        ArenaPlan { events, offsets, bytes, unshared_bytes }
    }

    /// How many allocations the trace serves.
    pub fn allocations(&self) -> usize {
        self.offsets.len()
    }
}

/// A placed trace with its device memory.
#[derive(Debug)]
pub struct Arena {
    pub plan: ArenaPlan,
    /// None only in this module's tests (no device there).
    memory: Option<CudaSlice<u8>>,
    base: u64,
    /// Its free is a stream operation: it waits out another thread's capture.
    sessions: Option<Arc<Sessions>>,
}

impl Drop for Arena {
    fn drop(&mut self) {
        if let (Some(memory), Some(sessions)) = (self.memory.take(), &self.sessions) {
            let _outside = sessions.access();
            drop(memory);
        }
    }
}

impl Arena {
    /// Allocates the arena of `plan` on `stream` (out of memory is
    /// [`GpuError::OutOfMemory`]).
    pub fn new(plan: ArenaPlan, stream: &Arc<CudaStream>, sessions: &Arc<Sessions>) -> Result<Arena, GpuError> {
        let bytes = (plan.bytes as usize).max(1);
        // SAFETY: uninitialized bytes; every allocation served from them is written by its
        // kernel before it is read, as with plain allocations.
        let memory = {
            let _outside = sessions.access();
            unsafe { stream.alloc::<u8>(bytes) }
        }
        .map_err(|e| match e.0 {
            sys::cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY => {
                GpuError::OutOfMemory { bytes, reason: format!("activation arena: {e:?}") }
            }
            _ => GpuError::Driver { call: "cuMemAllocAsync", reason: format!("{e:?}") },
        })?;
        let base = memory.device_ptr(stream).0;
        Ok(Arena { plan, memory: Some(memory), base, sessions: Some(sessions.clone()) })
    }

    /// The arena's size in bytes.
    pub fn bytes(&self) -> usize {
        self.memory.as_ref().map_or(0, CudaSlice::len)
    }

    pub(crate) fn address(&self, alloc: usize) -> u64 {
        self.base + self.plan.offsets[alloc]
    }
}

/// Page-locked host memory: the only host memory a captured copy may read or write.
#[derive(Debug)]
pub struct PinnedHost {
    ptr: *mut u8,
    len: usize,
    ctx: Arc<CudaContext>,
}

// SAFETY: the pointer is owned exclusively by this value (freed once, in Drop); access goes
// through `&self` / `&mut self` like a Vec, and the device reads it only within copies the
// owner enqueued and waits for before touching it again.
unsafe impl Send for PinnedHost {}
// SAFETY: as above; shared references only read.
unsafe impl Sync for PinnedHost {}

impl PinnedHost {
    pub fn new(ctx: &Arc<CudaContext>, len: usize) -> Result<PinnedHost, GpuError> {
        ctx.bind_to_thread().map_err(|e| GpuError::Driver { call: "cuCtxSetCurrent", reason: format!("{e:?}") })?;
        // SAFETY: a fresh allocation of at least one byte, freed in Drop.
        let ptr = unsafe { result::malloc_host(len.max(1), 0) }
            .map_err(|e| GpuError::OutOfMemory { bytes: len, reason: format!("pinned host memory: {e:?}") })?;
        Ok(PinnedHost { ptr: ptr as *mut u8, len, ctx: ctx.clone() })
    }

    /// The bytes (the caller has waited for any copy writing them).
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` holds `len` bytes owned by self; no copy is in flight (caller's contract).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The bytes, to fill (the caller has waited for any copy reading them).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as `as_slice`, and `&mut self` makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn as_ptr(&self) -> *const u8 {
        self.ptr
    }

    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr
    }
}

impl Drop for PinnedHost {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: allocated by cuMemHostAlloc in `new`, freed exactly once here.
            let _ = unsafe { result::free_host(self.ptr as *mut std::ffi::c_void) };
        }
    }
}

/// The allocation trace of the execution in progress, and the arena serving it.
#[derive(Debug, Default)]
pub struct Tracer {
    arena: Option<Arc<Arena>>,
    events: Vec<Event>,
    allocations: usize,
    /// Why this execution left the recorded trace (serving stopped there).
    diverged: Option<String>,
    /// A graph is being captured: every allocation must come from the arena, and host data
    /// copied to the device must be pinned (kept in `staged` for the graph's lifetime).
    pub(crate) capturing: bool,
    staged: Vec<PinnedHost>,
    /// Set when the execution ends: later frees (outputs kept by the caller) are not traced.
    closed: bool,
    /// A plain allocation of the execution failed for lack of memory (layers report errors
    /// as text; this keeps the kind).
    pub(crate) out_of_memory: Option<String>,
}

/// What an execution's trace gives back when it ends.
#[derive(Debug)]
pub struct TraceEnd {
    pub events: Vec<Event>,
    /// Where the execution left the recorded trace, if it did.
    pub diverged: Option<String>,
    /// The pinned copies a captured graph reads.
    pub staged: Vec<PinnedHost>,
    pub out_of_memory: Option<String>,
}

/// Where allocation `alloc` comes from.
pub(crate) enum Served {
    Arena(Arc<Arena>, u64),
    Plain,
}

impl Tracer {
    /// A tracer recording plain allocations (`arena` None) or serving them from `arena`.
    pub fn new(arena: Option<Arc<Arena>>) -> Tracer {
        Tracer { arena, ..Tracer::default() }
    }

    /// The next allocation: its number and where it is served from.
    pub(crate) fn alloc(&mut self, bytes: usize) -> Result<(usize, Served), GpuError> {
        let k = self.allocations;
        let at = self.events.len();
        self.allocations += 1;
        self.events.push(Event::Alloc { bytes });
        let served = match &self.arena {
            Some(arena) if self.diverged.is_none() => {
                if arena.plan.events.get(at) == Some(&Event::Alloc { bytes }) {
                    Served::Arena(arena.clone(), arena.address(k))
                } else {
                    self.diverged = Some(format!(
                        "allocation {k} of {bytes} bytes, where the recorded trace has {:?}",
                        arena.plan.events.get(at)
                    ));
                    Served::Plain
                }
            }
            _ => Served::Plain,
        };
        if self.capturing && matches!(served, Served::Plain) {
            let why = self.diverged.clone().unwrap_or_else(|| "no arena".into());
            return Err(GpuError::Capture(format!("an allocation outside the arena during graph capture ({why})")));
        }
        Ok((k, served))
    }

    pub(crate) fn freed(&mut self, alloc: usize) {
        if self.closed {
            return;
        }
        let at = self.events.len();
        self.events.push(Event::Free { alloc });
        if let (Some(arena), None) = (&self.arena, &self.diverged) {
            if arena.plan.events.get(at) != Some(&Event::Free { alloc }) {
                self.diverged = Some(format!("allocation {alloc} freed at event {at}, out of the recorded order"));
            }
        }
    }

    /// Keeps `bytes` in pinned memory for a captured copy; returns the copy's source.
    pub(crate) fn stage(&mut self, ctx: &Arc<CudaContext>, bytes: &[u8]) -> Result<*const u8, GpuError> {
        let mut pinned = PinnedHost::new(ctx, bytes.len())?;
        pinned.as_mut_slice()[..bytes.len()].copy_from_slice(bytes);
        let ptr = pinned.as_ptr();
        self.staged.push(pinned);
        Ok(ptr)
    }

    /// Ends the execution's trace.
    pub fn close(&mut self) -> TraceEnd {
        self.closed = true;
        TraceEnd {
            events: std::mem::take(&mut self.events),
            diverged: self.diverged.take(),
            staged: std::mem::take(&mut self.staged),
            out_of_memory: self.out_of_memory.take(),
        }
    }
}


/// The execution (if any) whose allocations are traced, and the lock executions take turns on.
#[derive(Debug, Default)]
pub struct Sessions {
    pub(crate) current: Mutex<Option<Session>>,
    /// Held by each execution: runs on one stream (one lane) take turns.
    pub run_lock: Mutex<()>,
}


#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) thread: ThreadId,
    pub(crate) tracer: Arc<Mutex<Tracer>>,
}

/// How this thread may use the stream now.
pub(crate) enum Access<'a> {
    /// This thread runs the traced execution.
    Traced(Arc<Mutex<Tracer>>),
    /// No execution of this thread is traced; held so no capture begins meanwhile.
    Plain(#[allow(dead_code)] MutexGuard<'a, Option<Session>>),
}

impl Sessions {
    /// This thread's tracer, or plain access once no other thread is capturing a graph (a
    /// stream operation enqueued meanwhile would land in that graph instead of running).
    pub(crate) fn access(&self) -> Access<'_> {
        loop {
            let current = lock(&self.current);
            match current.as_ref() {
                Some(s) if s.thread == thread::current().id() => return Access::Traced(s.tracer.clone()),
                Some(s) if lock(&s.tracer).capturing => {
                    drop(current);
                    // The capturing execution holds the run lock until it ends.
                    drop(lock(&self.run_lock));
                }
                _ => return Access::Plain(current),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_of_frees_shares_memory() {
        // a, b = f(a), free a, c = g(b), free b, free c: a and c share offset 0.
        let events = vec![
            Event::Alloc { bytes: 1000 },
            Event::Alloc { bytes: 1000 },
            Event::Free { alloc: 0 },
            Event::Alloc { bytes: 1000 },
            Event::Free { alloc: 1 },
            Event::Free { alloc: 2 },
        ];
        let plan = ArenaPlan::place(events);
        assert_eq!(plan.allocations(), 3);
        assert_eq!(plan.bytes, 2048);
        assert_eq!(plan.unshared_bytes, 3 * 1024);
        assert_ne!(plan.offsets[0], plan.offsets[1]);
        assert_eq!(plan.offsets[0], plan.offsets[2]);
    }

    #[test]
    fn blocks_never_freed_stay_live_to_the_end() {
        let plan = ArenaPlan::place(vec![Event::Alloc { bytes: 10 }, Event::Alloc { bytes: 10 }, Event::Alloc { bytes: 10 }]);
        assert_eq!(plan.bytes, 3 * 256);
    }

    /// A plan served at a fake base address (the matching logic needs no device).
    fn served(plan: ArenaPlan) -> Tracer {
        Tracer::new(Some(Arc::new(Arena { plan, memory: None, base: 1 << 20, sessions: None })))
    }

    fn recorded() -> ArenaPlan {
        ArenaPlan::place(vec![Event::Alloc { bytes: 8 }, Event::Free { alloc: 0 }, Event::Alloc { bytes: 8 }])
    }

    #[test]
    fn the_same_trace_is_served_from_the_arena() {
        let mut t = served(recorded());
        assert!(matches!(t.alloc(8), Ok((0, Served::Arena(_, a))) if a == 1 << 20));
        t.freed(0);
        assert!(matches!(t.alloc(8), Ok((1, Served::Arena(_, a))) if a == 1 << 20));
        let end = t.close();
        assert_eq!(end.events, recorded().events);
        assert_eq!(end.diverged, None);
    }

    #[test]
    fn a_late_free_stops_serving_before_memory_is_shared() {
        let mut t = served(recorded());
        assert!(matches!(t.alloc(8), Ok((0, Served::Arena(..)))));
        // Allocation 0 is still live: the next one must not get its (shared) offset.
        assert!(matches!(t.alloc(8), Ok((1, Served::Plain))));
        assert!(t.close().diverged.is_some_and(|d| d.contains("allocation 1")));
    }

    #[test]
    fn a_different_size_stops_serving_and_fails_a_capture() {
        let mut t = served(recorded());
        t.capturing = true;
        assert!(matches!(t.alloc(16), Err(GpuError::Capture(_))));
    }

    #[test]
    fn recording_serves_nothing_and_ignores_frees_after_the_end() {
        let mut t = Tracer::new(None);
        assert!(matches!(t.alloc(4), Ok((0, Served::Plain))));
        let end = t.close();
        t.freed(0);
        assert_eq!(end.events, vec![Event::Alloc { bytes: 4 }]);
        assert_eq!(end.diverged, None);
        assert!(t.events.is_empty());
    }
}

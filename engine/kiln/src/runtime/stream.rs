//! Streams and events: asynchronous, in-order execution of enqueued work.
//!
//! A [`Stream`] runs the work given to it one item after another on its own worker thread,
//! so `enqueue` returns before the engine has run. [`Stream::synchronize`] waits for all of
//! it and reports the first failure. An [`Event`] is signalled by the work it is attached
//! to; the input-consumed event of seed §6.11 is signalled once the inputs have been read,
//! after which the caller may refill its input buffers while the engine still runs.

use super::RunError;
use crate::error::BackendError;
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

pub(crate) type Job = Box<dyn FnOnce() -> Result<(), RunError> + Send>;

#[derive(Debug, Default)]
struct Progress {
    submitted: u64,
    finished: u64,
    /// The first failure since the last synchronize.
    error: Option<RunError>,
}

#[derive(Debug, Default)]
struct Shared {
    progress: Mutex<Progress>,
    changed: Condvar,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// An in-order work queue with its own worker thread.
#[derive(Debug)]
pub struct Stream {
    sender: Option<Sender<Job>>,
    worker: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
}

impl Stream {
    /// Starts the stream's worker; fails only when the system refuses a thread.
    pub fn new() -> Result<Stream, RunError> {
        let (sender, receiver) = mpsc::channel::<Job>();
        let shared = Arc::new(Shared::default());
        let worker_shared = Arc::clone(&shared);
        let worker = std::thread::Builder::new()
            .name("kiln-stream".into())
            .spawn(move || {
                for job in receiver {
                    // A job that panics must not leave synchronize waiting forever.
                    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).unwrap_or_else(|_| {
                        Err(RunError::Backend(BackendError::Execution {
                            layer: "(stream)".into(),
                            reason: "the enqueued work panicked".into(),
                        }))
                    });
                    let mut p = lock(&worker_shared.progress);
                    p.finished += 1;
                    if let Err(e) = result {
                        p.error.get_or_insert(e);
                    }
                    worker_shared.changed.notify_all();
                }
            })
            .map_err(|e| {
                RunError::Backend(BackendError::Unavailable {
                    backend: "stream".into(),
                    reason: format!("no worker thread: {e}"),
                })
            })?;
        Ok(Stream { sender: Some(sender), worker: Some(worker), shared })
    }

    pub(crate) fn submit(&self, job: Job) -> Result<(), RunError> {
        let sender = self.sender.as_ref().expect("present until drop");
        lock(&self.shared.progress).submitted += 1;
        sender.send(job).map_err(|_| {
            let mut p = lock(&self.shared.progress);
            p.submitted -= 1;
            RunError::Backend(BackendError::Execution {
                layer: "(stream)".into(),
                reason: "the stream's worker has stopped".into(),
            })
        })
    }

    /// Waits until everything enqueued so far has run; returns the first failure among
    /// them (and clears it).
    pub fn synchronize(&self) -> Result<(), RunError> {
        let mut p = lock(&self.shared.progress);
        while p.finished < p.submitted {
            p = self.shared.changed.wait(p).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        p.error.take().map_or(Ok(()), Err)
    }

    /// Whether everything enqueued so far has run.
    pub fn is_idle(&self) -> bool {
        let p = lock(&self.shared.progress);
        p.finished == p.submitted
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        drop(self.sender.take());
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

/// A one-shot signal between enqueued work and the host; clones share the signal.
/// Attaching it to an enqueue resets it; the work signals it.
#[derive(Clone, Debug, Default)]
pub struct Event(Arc<(Mutex<bool>, Condvar)>);

impl Event {
    pub fn new() -> Event {
        Event::default()
    }

    /// Whether the event has been signalled.
    pub fn query(&self) -> bool {
        *lock(&self.0 .0)
    }

    /// Blocks until the event is signalled.
    pub fn wait(&self) {
        let mut done = lock(&self.0 .0);
        while !*done {
            done = self.0 .1.wait(done).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }

    /// Blocks until the event is signalled or `timeout` passes; returns whether it was.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        let done = lock(&self.0 .0);
        let (done, _) =
            self.0 .1.wait_timeout_while(done, timeout, |d| !*d).unwrap_or_else(|poisoned| poisoned.into_inner());
        *done
    }

    pub(crate) fn reset(&self) {
        *lock(&self.0 .0) = false;
    }

    pub(crate) fn signal(&self) {
        *lock(&self.0 .0) = true;
        self.0 .1.notify_all();
    }
}

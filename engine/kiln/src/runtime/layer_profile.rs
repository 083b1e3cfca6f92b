//! Per-layer profiles (trtexec's `--dumpProfile --separateProfileRun`): how long each layer
//! of an engine takes, measured in profile runs kept apart from the timed ones.
//!
//! The shared layer driver brackets every kernel with the execution's [`LayerProfiler`]
//! (see [`crate::runtime::machine::Machine::profiler`]); each backend measures in its own
//! clock: cuda between CUDA events on its stream, wgpu on the host around a submission it
//! waits for, cpu on the host. A profile run is interpreted layer by layer (never a replayed
//! graph), so where the host cannot launch ahead of the device (tiny layers, batch 1) a
//! layer's time includes the launch gap before its first kernel.
//! [`LayerProfile::summarize`] turns the runs into medians and shares of the total.

use crate::backend::LayerTimes;
use crate::engine::Engine;
use crate::ir::network::LayerId;
use crate::runtime::machine::KernelError;
use serde_json::{json, Value};
use std::cell::RefCell;
use std::fmt::Write;
use std::time::{Duration, Instant};

/// Brackets the kernels of one profiled execution.
pub trait LayerProfiler {
    /// Layer `layer`'s kernels are about to be launched.
    fn begin(&self, layer: LayerId) -> Result<(), KernelError>;
    /// Layer `layer`'s kernels have been launched.
    fn end(&self, layer: LayerId) -> Result<(), KernelError>;
}

/// The layer a profiler has begun and its start mark: the driver runs one layer's kernels at
/// a time, so a profiler pairs each `end` with the `begin` before it.
#[derive(Debug)]
pub struct OpenLayer<M>(RefCell<Option<(LayerId, M)>>);

impl<M> Default for OpenLayer<M> {
    fn default() -> Self {
        OpenLayer(RefCell::new(None))
    }
}

impl<M> OpenLayer<M> {
    pub fn begin(&self, layer: LayerId, mark: M) {
        *self.0.borrow_mut() = Some((layer, mark));
    }

    /// The start mark of `layer`, or an error where `layer` is not the one begun.
    pub fn end(&self, layer: LayerId) -> Result<M, KernelError> {
        match self.0.borrow_mut().take() {
            Some((begun, mark)) if begun == layer => Ok(mark),
            _ => Err(KernelError::Invalid(format!("profiler: layer #{} ended without beginning", layer.0))),
        }
    }
}

/// A [`LayerProfiler`] on the host clock, for backends whose kernels have finished when
/// `end` is called (cpu, or a backend that waits for its device around each layer).
#[derive(Debug)]
pub struct HostClock {
    started: OpenLayer<Instant>,
    times: RefCell<LayerTimes>,
}

impl HostClock {
    pub fn new(layers: usize) -> HostClock {
        HostClock { started: OpenLayer::default(), times: RefCell::new(LayerTimes::new(layers)) }
    }

    /// What was measured.
    pub fn into_times(self) -> LayerTimes {
        self.times.into_inner()
    }
}

impl LayerProfiler for HostClock {
    fn begin(&self, layer: LayerId) -> Result<(), KernelError> {
        self.started.begin(layer, Instant::now());
        Ok(())
    }

    fn end(&self, layer: LayerId) -> Result<(), KernelError> {
        let at = self.started.end(layer)?;
        self.times.borrow_mut().add(layer, at.elapsed());
        Ok(())
    }
}

/// One layer's line of a profile.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerProfileRow {
    /// The layer's name: a fused layer's lists the layers it replaced ("conv1 + bn1 + relu1").
    pub name: String,
    /// Its type ("Convolution", "Fused(Convolution)", …).
    pub kind: String,
    /// The kernel or tactic that ran it, as the inspector names it.
    pub tactic: String,
    pub median: Duration,
    pub average: Duration,
    /// Its median as a share of the sum of all layers' medians, in percent.
    pub percent: f64,
}

/// Medians over the profile runs of every layer that ran a kernel, in execution order.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerProfile {
    pub runs: usize,
    pub layers: Vec<LayerProfileRow>,
    /// The sum of the layers' medians.
    pub total: Duration,
}

impl LayerProfile {
    /// The profile of `engine` from the layer times of `runs` profiled executions.
    pub fn summarize(engine: &Engine, runs: &[LayerTimes]) -> LayerProfile {
        let net = engine.network();
        let mut layers = Vec::new();
        for (i, layer) in net.layers().iter().enumerate() {
            let mut times: Vec<Duration> = runs.iter().filter_map(|r| r.0.get(i).copied().flatten()).collect();
            if times.is_empty() {
                continue;
            }
            times.sort();
            let average = times.iter().sum::<Duration>() / times.len() as u32;
            let kind = match &layer.kind {
                crate::ir::layer::LayerKind::Fused(p) => format!("Fused({})", p.anchor.kind().type_name()),
                crate::ir::layer::LayerKind::Quantized(p) => format!("Quantized({} -> {})", p.anchor.kind().type_name(), p.output_type()),
                k => k.type_name().to_string(),
            };
            let tactic = engine.tactic_name(i);
            layers.push(LayerProfileRow { name: layer.name.clone(), kind, tactic, median: times[times.len() / 2], average, percent: 0.0 });
        }
        let total: Duration = layers.iter().map(|r| r.median).sum();
        for row in &mut layers {
            row.percent = if total.is_zero() { 0.0 } else { 100.0 * row.median.as_secs_f64() / total.as_secs_f64() };
        }
        LayerProfile { runs: runs.len(), layers, total }
    }

    /// A table: median and average milliseconds, percent of the total, layer, type and tactic.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "=== Per-layer profile ({} runs, medians) ===", self.runs);
        let _ = writeln!(s, "{:>11} {:>11} {:>7}  Layer [type] (tactic)", "Median(ms)", "Avg.(ms)", "Time(%)");
        for r in &self.layers {
            let _ = writeln!(
                s,
                "{:>11.4} {:>11.4} {:>7.2}  {} [{}] ({})",
                ms(r.median),
                ms(r.average),
                r.percent,
                r.name,
                r.kind,
                r.tactic
            );
        }
        let _ = writeln!(s, "{:>11.4} {:>11} {:>7.2}  Total ({} layers ran kernels)", ms(self.total), "", 100.0, self.layers.len());
        s
    }

    /// The profile as JSON: `runs`, `total_ms` and per layer `name`, `type`, `tactic`,
    /// `median_ms`, `average_ms`, `percent`.
    pub fn to_json(&self) -> Value {
        let layers: Vec<Value> = self
            .layers
            .iter()
            .map(|r| {
                json!({
                    "name": r.name,
                    "type": r.kind,
                    "tactic": r.tactic,
                    "median_ms": ms(r.median),
                    "average_ms": ms(r.average),
                    "percent": r.percent,
                })
            })
            .collect();
        json!({ "runs": self.runs, "total_ms": ms(self.total), "layers": layers })
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_clock_sums_repeated_layers_and_refuses_unpaired_ends() {
        let clock = HostClock::new(3);
        for _ in 0..2 {
            clock.begin(LayerId(1)).unwrap();
            std::thread::sleep(Duration::from_millis(2));
            clock.end(LayerId(1)).unwrap();
        }
        assert!(clock.end(LayerId(2)).is_err());
        let times = clock.into_times();
        assert_eq!(times.0[0], None);
        assert!(times.0[1].unwrap() >= Duration::from_millis(4), "{times:?}");
        assert_eq!(times.0[2], None);
    }
}

//! A profile run's per-layer clock: CUDA events recorded on the stream before and after
//! each layer's kernels (see `kiln::runtime::layer_profile`).

use crate::device::Gpu;
use crate::error::GpuError;
use cudarc::driver::CudaEvent;
use kiln::runtime::layer_profile::LayerProfiler;
use kiln::{KernelError, LayerId, LayerTimes};
use std::cell::RefCell;
use std::time::Duration;

/// The events of one profiled execution on one device.
pub struct LayerEvents<'g> {
    gpu: &'g Gpu,
    open: RefCell<Option<(LayerId, CudaEvent)>>,
    closed: RefCell<Vec<(LayerId, CudaEvent, CudaEvent)>>,
}

impl<'g> LayerEvents<'g> {
    pub fn new(gpu: &'g Gpu) -> LayerEvents<'g> {
        LayerEvents { gpu, open: RefCell::new(None), closed: RefCell::new(Vec::new()) }
    }

    fn recorded(&self) -> Result<CudaEvent, GpuError> {
        let event = self.gpu.event()?;
        event.record(&self.gpu.stream).map_err(|e| GpuError::Driver { call: "cuEventRecord", reason: format!("{e:?}") })?;
        Ok(event)
    }

    /// Per layer, the device time between its events, summed over its runs: read once the
    /// stream has finished the execution.
    pub fn times(self, layers: usize) -> Result<LayerTimes, GpuError> {
        self.gpu.synchronize()?;
        let mut times = LayerTimes::new(layers);
        for (layer, start, end) in self.closed.into_inner() {
            let ms = start.elapsed_ms(&end).map_err(|e| GpuError::Driver { call: "cuEventElapsedTime", reason: format!("{e:?}") })?;
            times.add(layer, Duration::from_secs_f64(f64::from(ms.max(0.0)) * 1e-3));
        }
        Ok(times)
    }
}

impl LayerProfiler for LayerEvents<'_> {
    fn begin(&self, layer: LayerId) -> Result<(), KernelError> {
        *self.open.borrow_mut() = Some((layer, self.recorded()?));
        Ok(())
    }

    fn end(&self, layer: LayerId) -> Result<(), KernelError> {
        match self.open.borrow_mut().take() {
            Some((begun, start)) if begun == layer => {
                self.closed.borrow_mut().push((layer, start, self.recorded()?));
                Ok(())
            }
            _ => Err(KernelError::Invalid(format!("profiler: layer #{} ended without beginning", layer.0))),
        }
    }
}

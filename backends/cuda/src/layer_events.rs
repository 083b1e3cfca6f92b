//! A profile run's per-layer clock: CUDA events recorded on the stream before and after
//! each layer's kernels (see `kiln::runtime::layer_profile`).

use crate::device::{event_span, Gpu};
use crate::error::GpuError;
use cudarc::driver::CudaEvent;
use kiln::runtime::layer_profile::{LayerProfiler, OpenLayer};
use kiln::{KernelError, LayerId, LayerTimes};
use std::cell::RefCell;

/// The events of one profiled execution on one device.
pub struct LayerEvents<'g> {
    gpu: &'g Gpu,
    open: OpenLayer<CudaEvent>,
    closed: RefCell<Vec<(LayerId, CudaEvent, CudaEvent)>>,
}

impl<'g> LayerEvents<'g> {
    pub fn new(gpu: &'g Gpu) -> LayerEvents<'g> {
        LayerEvents { gpu, open: OpenLayer::default(), closed: RefCell::new(Vec::new()) }
    }

    fn recorded(&self) -> Result<CudaEvent, GpuError> {
        let event = self.gpu.event()?;
        self.gpu.record(&event)?;
        Ok(event)
    }

    /// Per layer, the device time between its events, summed over its runs: read once the
    /// stream has finished the execution.
    pub fn times(self, layers: usize) -> Result<LayerTimes, GpuError> {
        self.gpu.synchronize()?;
        let mut times = LayerTimes::new(layers);
        for (layer, start, end) in self.closed.into_inner() {
            times.add(layer, event_span(&start, &end)?);
        }
        Ok(times)
    }
}

impl LayerProfiler for LayerEvents<'_> {
    fn begin(&self, layer: LayerId) -> Result<(), KernelError> {
        self.open.begin(layer, self.recorded()?);
        Ok(())
    }

    fn end(&self, layer: LayerId) -> Result<(), KernelError> {
        let start = self.open.end(layer)?;
        self.closed.borrow_mut().push((layer, start, self.recorded()?));
        Ok(())
    }
}

//! The build-time size check: every tensor whose shape the build knows — fixed in the
//! network, or at each optimization profile's max shapes — must fit the memory budget
//! before a tactic is timed or an arena planned (those allocate it). Shapes decided by
//! values are checked again when the engine runs (the layer driver).

use super::BuildError;
use crate::device::DeviceFingerprint;
use crate::ir::infer::network_shapes::infer_shapes;
use crate::ir::network::Network;
use crate::ir::shape::Shape;
use crate::limits;
use crate::memory_plan::{profile_inputs, ProfilePoint};
use crate::profile::OptimizationProfile;

/// The budget a build checks against: the user's, else the device's memory, else the
/// host's (the cpu backend, and devices that do not report their memory).
pub(super) fn build_budget(max_memory_bytes: Option<u64>, device: &DeviceFingerprint) -> u64 {
    max_memory_bytes.unwrap_or(if device.memory_bytes > 0 { device.memory_bytes } else { limits::host_memory_bytes() })
}

pub(super) fn check_tensor_sizes(network: &Network, profiles: &[OptimizationProfile], budget: u64) -> Result<(), BuildError> {
    let declared: Vec<Shape> = network.tensors().iter().map(|t| t.shape.clone()).collect();
    check_shapes(network, &declared, budget, None)?;
    for (index, profile) in profiles.iter().enumerate() {
        let bound = profile_inputs(network, profile, ProfilePoint::Max);
        // Inference failing at the max shapes is the memory planner's error to report.
        if let Ok(shapes) = infer_shapes(network, &bound) {
            check_shapes(network, &shapes, budget, Some(index))?;
        }
    }
    Ok(())
}

fn check_shapes(network: &Network, shapes: &[Shape], budget: u64, profile: Option<usize>) -> Result<(), BuildError> {
    for (desc, shape) in network.tensors().iter().zip(shapes) {
        let Some(dims) = shape.as_fixed() else { continue };
        if let Err(reason) = limits::check_tensor(desc.dtype, &dims, budget) {
            let made_by = match desc.producer {
                Some((layer, _)) => format!("layer `{}` output `{}`", network.layer(layer).name, desc.name),
                None => format!("input `{}`", desc.name),
            };
            let at = profile.map(|p| format!(" at profile {p}'s max shapes")).unwrap_or_default();
            return Err(BuildError::TensorTooLarge(format!("{made_by}{at}: {reason}")));
        }
    }
    Ok(())
}

//! Specialization to one shape: when the only optimization profile pins every dynamic input
//! (min = opt = max, as `kiln run`, `kiln bench` and the zoo's benchmarks build from an ONNX
//! model with a dynamic batch), the engine can only ever run that shape, so the builder fixes
//! those dims before the passes. The shape arithmetic a dynamic export carries (Shape →
//! Gather → Concat into a reshape, the batch-sized Expand of a class token) then folds as in
//! a static export of the same model, and both give the same engine. The engine's inputs and
//! outputs keep the dims the model declares (dynamic ones by name, as TensorRT reports -1 for
//! them); the profile holds them to the one shape.

use crate::ir::network::{Network, TensorId};
use crate::profile::OptimizationProfile;

/// The network with its dynamic input dims fixed at the single profile's point, and a log
/// line naming them; `None` when there are several profiles, a range, a shape-tensor input
/// or nothing dynamic.
pub(super) fn pin_single_point(network: &Network, profiles: &[OptimizationProfile]) -> Option<(Network, String)> {
    let [profile] = profiles else { return None };
    let mut pinned = Vec::new();
    for &t in network.inputs() {
        let desc = network.tensor(t);
        if desc.shape.as_fixed().is_some() {
            continue;
        }
        let range = profile.dimensions(&desc.name)?;
        if range.min != range.max || range.opt != range.min || profile.shape_values(&desc.name).is_some() {
            return None;
        }
        let dims: Vec<String> = range.min.iter().map(usize::to_string).collect();
        pinned.push(format!("{} {}", desc.name, dims.join("x")));
    }
    if pinned.is_empty() {
        return None;
    }
    // min = opt = max: the opt shapes are the one shape.
    let out = super::shapes_at_opt(network, profile)?;
    out.validate().ok()?;
    let line = format!("the only profile pins {}: the engine is built for that shape", pinned.join(", "));
    Some((out, line))
}

/// Gives the engine's inputs and outputs back the dims `declared` has for the tensors of the
/// same names: the interface stays the model's, only the layers inside are specialized.
pub(super) fn restore_declared_dims(network: &mut Network, declared: &Network) {
    let declared_shape = |name: &str| {
        declared.inputs().iter().chain(declared.outputs()).map(|&d| declared.tensor(d)).find(|d| d.name == name).map(|d| d.shape.clone())
    };
    let boundary: Vec<TensorId> = network.inputs().iter().chain(network.outputs()).copied().collect();
    for t in boundary {
        match declared_shape(&network.tensor(t).name) {
            Some(shape) if shape.rank() == network.tensor(t).shape.rank() => network.parts_mut().tensors[t.0].shape = shape,
            _ => {}
        }
    }
}

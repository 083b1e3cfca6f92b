//! New weights for refit tests (engine/cli/tests/refit_api.rs, backends/wgpu/tests/refit.rs):
//! a network's named constants changed, as a fine-tuned checkpoint would change them.

use kiln::{DataType, HostTensor, LayerKind, Network, TensorData};
use std::sync::Arc;

/// `w * 1.25 + 0.01` in `w`'s own float type (variances stay positive).
pub fn changed(w: &HostTensor) -> HostTensor {
    let values: Vec<f64> = w.to_f64_vec().iter().map(|v| v * 1.25 + 0.01).collect();
    let data = match w.dtype() {
        DataType::F32 => TensorData::F32(values.iter().map(|&v| v as f32).collect()),
        DataType::F64 => TensorData::F64(values),
        other => panic!("fixture weights of type {other}"),
    };
    HostTensor::new(w.shape().to_vec(), data).unwrap()
}

/// Each weight of `names` that `net` holds with more than one element, changed (scalars are
/// hyperparameters, GELU's 0.5 or an epsilon, which decide fusions).
pub fn changed_weights(net: &Network, names: &[String]) -> Vec<(String, HostTensor)> {
    names.iter().filter_map(|n| constant(net, n).filter(|w| w.len() > 1).map(|w| (n.clone(), changed(&w)))).collect()
}

/// The value of the Constant layer named `name`.
pub fn constant(net: &Network, name: &str) -> Option<HostTensor> {
    net.layers().iter().find_map(|l| match l.kind {
        LayerKind::Constant { weights } if l.name == name => net.weights_blob(weights).cloned(),
        _ => None,
    })
}

/// `net` with the named constants replaced.
pub fn with_weights(net: &Network, weights: &[(String, HostTensor)]) -> Network {
    let mut out = net.clone();
    let changes: Vec<_> = net
        .layers()
        .iter()
        .filter_map(|l| match l.kind {
            LayerKind::Constant { weights: blob } => weights.iter().find(|(n, _)| *n == l.name).map(|(_, w)| (blob, Arc::new(w.clone()))),
            _ => None,
        })
        .collect();
    out.replace_weights(&changes).unwrap();
    out
}

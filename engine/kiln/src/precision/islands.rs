//! The float layers of explicit quantization's islands: pointwise, pooling and reduction
//! layers (a Q/DQ CNN's `DQ + DQ → Add → Relu → GlobalAveragePool → QuantizeLinear` head), and
//! layer normalizations over the last axis (a Q/DQ transformer's `residual + x → LayerNorm`),
//! that read only DequantizeLinear outputs (and constants) and feed only QuantizeLinear, directly
//! or through one another. The integer tensors around them fix their precision, as
//! TensorRT's Q/DQ placement does: they stay in the type the network gives them (f32), so a
//! reduced-precision flag adds no Casts between the 8-bit tensors, and the island fuses into
//! one pass over the integers (`passes::QuantizedChainFusion`).

use crate::ir::layer::LayerKind;
use crate::ir::network::{Network, TensorId};
use std::collections::HashSet;

/// The islands' layers (indices), the greatest set that satisfies the rule above.
pub(super) fn quantized_island_layers(network: &Network) -> HashSet<usize> {
    let layers = network.layers();
    let readers = crate::passes::graph::consumers(network);
    let producer = |t: TensorId| network.tensor(t).producer.map(|(l, _)| l.0);
    let mut members: HashSet<usize> = (0..layers.len())
        .filter(|&i| matches!(layers[i].kind, LayerKind::Activation { .. } | LayerKind::Unary { .. } | LayerKind::Elementwise { .. } | LayerKind::Pooling(_) | LayerKind::Reduce { .. }) || crate::passes::graph::last_axis_layer_norm(network, i))
        .collect();
    loop {
        let kept: HashSet<usize> = members
            .iter()
            .copied()
            .filter(|&i| {
                let l = &layers[i];
                let from_island = |t: TensorId| {
                    producer(t).is_some_and(|p| matches!(layers[p].kind, LayerKind::Dequantize { .. }) || members.contains(&p))
                };
                let inputs_ok = l.inputs.iter().flatten().all(|&t| !network.tensor(t).dtype.is_float() || network.tensor(t).value.is_some() || from_island(t));
                let any_dequantized = l.inputs.iter().flatten().any(|&t| from_island(t));
                let outputs_ok = l.outputs.iter().all(|&t| {
                    !network.outputs().contains(&t)
                        && !readers[t.0].is_empty()
                        && readers[t.0].iter().all(|&(r, _)| matches!(layers[r].kind, LayerKind::Quantize { .. }) || members.contains(&r))
                });
                inputs_ok && any_dequantized && outputs_ok
            })
            .collect();
        if kept.len() == members.len() {
            return kept;
        }
        members = kept;
    }
}


//! Questions passes ask of a network: who reads a tensor, whether it has control flow, a
//! tensor's value known at build time. (Passes rewrite networks with
//! [`crate::ir::rewrite::Rewriter`]: every layer added is re-validated and re-inferred, so a
//! folded shape makes the reshapes after it static, and tensors keep their names, which
//! run time and golden dumps rely on.)

use crate::ir::layer::LayerKind;
use crate::ir::network::{Layer, Network, TensorId};
use crate::ir::tensor::HostTensor;

/// Per tensor, the (layer, slot) pairs that read it.
pub(crate) fn consumers(net: &Network) -> Vec<Vec<(usize, usize)>> {
    let mut out = vec![Vec::new(); net.tensors().len()];
    for (i, l) in net.layers().iter().enumerate() {
        for (slot, t) in l.inputs.iter().enumerate() {
            if let Some(t) = t {
                out[t.0].push((i, slot));
            }
        }
    }
    out
}

/// Whether the network has loops or conditionals. The rewriting passes leave such
/// networks alone: a rewrite must not move a layer across a loop or branch boundary, and
/// a recurrence's back edge cannot be replayed in order.
pub(crate) fn has_control_flow(net: &Network) -> bool {
    net.layers().iter().any(|l| l.kind.is_control_boundary())
}

/// The single reader of `t` (a layer index), unless `t` is a network output: a tensor a
/// fusion may absorb.
pub(crate) fn only_reader(net: &Network, readers: &[Vec<(usize, usize)>], t: TensorId) -> Option<usize> {
    match readers[t.0].as_slice() {
        [(layer, _)] if !net.outputs().contains(&t) => Some(*layer),
        _ => None,
    }
}

/// A layer that only moves elements: its output holds its input's values, rearranged.
pub(crate) fn is_layout(l: &Layer) -> bool {
    matches!(l.kind, LayerKind::Shuffle(_) | LayerKind::Identity) && l.outputs.len() == 1
}

/// A layout layer, or a Slice: its output holds some of its input's values, rearranged.
pub(crate) fn moves_elements(l: &Layer) -> bool {
    is_layout(l) || matches!(l.kind, LayerKind::Slice) && l.outputs.len() == 1
}

/// The value of a tensor known at build time (constants and folded shapes).
pub(crate) fn known_value(net: &Network, t: TensorId) -> Option<&HostTensor> {
    net.tensor(t).value.as_deref()
}

/// The plans `finders` make, each tried at every layer in turn, keeping only plans that share
/// no layer with one kept before; keyed by the layer each is emitted at (the last of
/// `layers(plan)`), with every layer some plan absorbs.
pub(crate) fn disjoint_plans<P>(
    layer_count: usize,
    finders: &[&dyn Fn(usize) -> Option<P>],
    layers: impl Fn(&P) -> &[usize],
) -> (std::collections::HashMap<usize, P>, std::collections::HashSet<usize>) {
    let mut plans = std::collections::HashMap::new();
    let mut absorbed = std::collections::HashSet::new();
    for find in finders {
        for i in 0..layer_count {
            if absorbed.contains(&i) {
                continue;
            }
            if let Some(plan) = find(i).filter(|p| !layers(p).iter().any(|l| absorbed.contains(l))) {
                absorbed.extend(layers(&plan).iter().copied());
                if let Some(&last) = layers(&plan).last() {
                    plans.insert(last, plan);
                }
            }
        }
    }
    (plans, absorbed)
}

/// Layer `i` is a layer normalization over its input's last axis, one group: a step an island
/// can take (`PostOp::Normalization`; the precision pass keeps one between quantizations f32).
pub(crate) fn last_axis_layer_norm(network: &Network, i: usize) -> bool {
    let l = &network.layers()[i];
    let LayerKind::Normalization { axes, num_groups: 1, .. } = &l.kind else { return false };
    let rank = l.inputs.first().copied().flatten().map(|x| network.tensor(x).shape.rank());
    l.inputs.len() == 3 && l.inputs.iter().all(Option::is_some) && rank.is_some_and(|r| r >= 1 && axes[..] == [r - 1])
}

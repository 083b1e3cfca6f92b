//! 2:4 structured sparsity (seed §6.9). A convolution's or matrix product's constant weights
//! qualify when, for every output channel and every kernel position, each group of four
//! consecutive input channels (the reduction axis) holds at least two zeros, and the
//! reduction length is a multiple of four. With the SPARSE_WEIGHTS builder flag
//! ([`crate::MathMode::sparse_weights`]) a backend may offer tactics that keep only the two
//! values of each group (half the multiply-adds, half the weight bytes); the builder times
//! them against the dense ones like any tactic, so a layer where sparse is slower stays dense.
//! Whether a layer qualifies and whether its engine runs it sparse is reported in the build
//! log ([`SparsityReport`]) and by the inspector.

use crate::ir::fused::FusedAnchor;
use crate::ir::layer::{LayerKind, MatrixOp};
use crate::ir::network::{LayerId, Network, TensorId};
use crate::ir::tensor::HostTensor;
use crate::tactics::TacticId;
use std::sync::Arc;

/// Input channels per group.
pub const GROUP: usize = 4;
/// Values a group keeps: at least `GROUP - KEPT` of its channels are zero.
pub const KEPT: usize = 2;
/// Backends name their sparse tactics with this prefix, so that the builder's report and the
/// inspector tell a sparse choice from a dense one without asking the backend.
pub const TACTIC_PREFIX: &str = "sparse_";

/// How a weights tensor's elements group: element `(o, r, i)` sits at
/// `(o · reduction + r) · inner + i`, and groups are four consecutive `r` at one `(o, i)`.
/// A convolution's `[K, C, kh, kw]` weights are `outer = K`, `reduction = C`,
/// `inner = kh · kw`; a product's `[k, n]` right operand is `outer = 1`, `reduction = k`,
/// `inner = n`, and its transposed `[n, k]` form `outer = n`, `reduction = k`, `inner = 1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WeightGrouping {
    pub outer: usize,
    pub reduction: usize,
    pub inner: usize,
}

impl WeightGrouping {
    /// The flat indices of every group, in memory order of their first elements' `(o, r, i)`.
    pub fn groups(self) -> impl Iterator<Item = [usize; GROUP]> {
        let WeightGrouping { outer, reduction, inner } = self;
        (0..outer).flat_map(move |o| {
            (0..reduction / GROUP).flat_map(move |b| {
                (0..inner).map(move |i| std::array::from_fn(|j| (o * reduction + b * GROUP + j) * inner + i))
            })
        })
    }

    fn len(self) -> usize {
        self.outer * self.reduction * self.inner
    }
}

/// The constant weights of a convolution or matrix product (plain or heading a fused layer)
/// and how they group, when the reduction length is a multiple of four. Integer layers and
/// products whose right operand is computed at run time have none.
pub fn weights_of(network: &Network, layer: LayerId) -> Option<(TensorId, WeightGrouping)> {
    let l = network.layer(layer);
    let w = l.inputs.get(1).copied().flatten()?;
    let desc = network.tensor(w);
    let dims = desc.shape.dims().iter().map(|d| d.fixed()).collect::<Option<Vec<usize>>>()?;
    if !desc.dtype.is_float() || desc.value.is_none() {
        return None;
    }
    let conv = |dims: &[usize]| match dims {
        [k, c, spatial @ ..] if !spatial.is_empty() => Some(WeightGrouping { outer: *k, reduction: *c, inner: spatial.iter().product() }),
        _ => None,
    };
    let product = |op_b: MatrixOp, dims: &[usize]| {
        let (batch, matrix) = dims.split_at(dims.len().checked_sub(2)?);
        let batch: usize = batch.iter().product();
        match (op_b, matrix) {
            (MatrixOp::None, [k, n]) => Some(WeightGrouping { outer: batch, reduction: *k, inner: *n }),
            (MatrixOp::Transpose, [n, k]) => Some(WeightGrouping { outer: batch * n, reduction: *k, inner: 1 }),
            _ => None,
        }
    };
    let grouping = match &l.kind {
        LayerKind::Convolution(_) => conv(&dims),
        LayerKind::MatrixMultiply { op_b, .. } => product(*op_b, &dims),
        LayerKind::Fused(f) => match &f.anchor {
            FusedAnchor::Convolution(_) => conv(&dims),
            FusedAnchor::MatrixMultiply { op_b, .. } => product(*op_b, &dims),
            _ => None,
        },
        _ => None,
    }?;
    (grouping.reduction % GROUP == 0 && grouping.reduction > 0 && grouping.len() == desc.shape.volume()?).then_some((w, grouping))
}

/// Whether every group of `values` holds at least two zeros.
pub fn is_two_four(values: &[f64], grouping: WeightGrouping) -> bool {
    values.len() == grouping.len() && grouping.groups().all(|g| g.iter().filter(|&&i| values[i] == 0.0).count() >= GROUP - KEPT)
}

/// Whether every group of a float tensor stored as little-endian `bytes` (f64, f32, f16 or
/// bf16 elements of `width` bytes: zero is every bit but the sign clear) holds at least two
/// zeros. Read in place and stopped at the first group that does not: cheap on dense weights.
pub fn is_two_four_bytes(bytes: &[u8], width: usize, grouping: WeightGrouping) -> bool {
    let zero = |i: usize| bytes.get(i * width..(i + 1) * width).is_some_and(|e| e[..width - 1].iter().all(|&b| b == 0) && e[width - 1] & 0x7f == 0);
    matches!(width, 2 | 4 | 8)
        && bytes.len() == grouping.len() * width
        && grouping.groups().all(|g| g.iter().filter(|&&i| zero(i)).count() >= GROUP - KEPT)
}

/// Whether `layer`'s weights satisfy 2:4 sparsity.
pub fn is_eligible(network: &Network, layer: LayerId) -> bool {
    weights_of(network, layer).is_some_and(|(w, grouping)| {
        network.tensor(w).value.as_ref().is_some_and(|v| {
            // Float weights in place (a build asks per layer, several times); others widened.
            let in_place = v.dtype().is_float().then(|| v.data().as_le_bytes().zip(v.dtype().size_bytes())).flatten();
            match in_place {
                Some((bytes, width)) if matches!(width, 2 | 4 | 8) => is_two_four_bytes(bytes, width, grouping),
                _ => is_two_four(&v.to_f64_vec(), grouping),
            }
        })
    })
}

/// The layers whose weights satisfy 2:4 sparsity, in network order.
pub fn eligible_layers(network: &Network) -> Vec<LayerId> {
    (0..network.layers().len()).map(LayerId).filter(|&l| is_eligible(network, l)).collect()
}

/// The positions a group keeps: its two largest magnitudes (the earlier of equal ones), in
/// ascending order. On weights that satisfy 2:4 these hold every non-zero.
pub fn kept_positions(group: [f64; GROUP]) -> [usize; KEPT] {
    let mut order: [usize; GROUP] = std::array::from_fn(|j| j);
    // Stable: equal magnitudes keep their order, so the earlier channel wins a tie.
    order.sort_by(|&a, &b| group[b].abs().total_cmp(&group[a].abs()));
    let mut kept = [order[0], order[1]];
    kept.sort_unstable();
    kept
}

/// `values` with every group pruned to its [`kept_positions`].
pub fn pruned(values: &[f64], grouping: WeightGrouping) -> Vec<f64> {
    let mut out = values.to_vec();
    for g in grouping.groups() {
        let kept = kept_positions(g.map(|i| values[i]));
        for (j, &i) in g.iter().enumerate() {
            if !kept.contains(&j) {
                out[i] = 0.0;
            }
        }
    }
    out
}

/// Prunes the weights of every convolution and matrix product with a reduction length that
/// is a multiple of four to 2:4 (trtexec's `--sparsity=force`): for measuring what sparse
/// kernels gain, since the pruned network no longer computes the model's answer. Returns
/// the network and the names of the layers whose weights changed.
pub fn prune_network(network: &Network) -> Result<(Network, Vec<String>), String> {
    let mut changes: Vec<(crate::ir::layer::WeightsId, Arc<HostTensor>)> = Vec::new();
    let mut names = Vec::new();
    for i in 0..network.layers().len() {
        let Some((w, grouping)) = weights_of(network, LayerId(i)) else { continue };
        let Some((producer, _)) = network.tensor(w).producer else { continue };
        let LayerKind::Constant { weights } = network.layer(producer).kind else { continue };
        if changes.iter().any(|(id, _)| *id == weights) {
            continue;
        }
        let Some(blob) = network.weights_blob(weights) else { continue };
        let values = blob.to_f64_vec();
        if is_two_four(&values, grouping) {
            continue;
        }
        let cannot = || format!("cannot prune the {} weights of layer `{}`", blob.dtype(), network.layer(LayerId(i)).name);
        // Zeroed in place, whatever the float type: all-zero bits are +0 in every one.
        let width = blob.size_bytes().checked_div(blob.len()).filter(|w| w * blob.len() == blob.size_bytes()).ok_or_else(cannot)?;
        let mut bytes = blob.data().to_le_bytes();
        for (at, v) in pruned(&values, grouping).into_iter().enumerate() {
            if v == 0.0 {
                bytes[at * width..(at + 1) * width].fill(0);
            }
        }
        let tensor = HostTensor::from_le_bytes(blob.dtype(), blob.shape().to_vec(), &bytes).map_err(|e| format!("{}: {e}", cannot()))?;
        changes.push((weights, Arc::new(tensor)));
        names.push(network.layer(LayerId(i)).name.clone());
    }
    let mut out = network.clone();
    out.replace_weights(&changes)?;
    Ok((out, names))
}

/// Whether `tactic` is a backend's sparse implementation ([`TACTIC_PREFIX`]).
pub fn is_sparse_tactic(tactic: &TacticId) -> bool {
    tactic.name.starts_with(TACTIC_PREFIX)
}

/// What a SPARSE_WEIGHTS build found: the layers whose weights qualify, those among them the
/// backend offered a sparse tactic for, and those whose chosen tactic is sparse.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SparsityReport {
    pub eligible: Vec<String>,
    pub offered: Vec<String>,
    pub picked: Vec<String>,
}

impl SparsityReport {
    /// The report of `network` built with `chosen` tactics; `offered(layer)` says whether the
    /// backend has a sparse tactic for an eligible layer.
    pub fn of(network: &Network, chosen: &[Option<TacticId>], offered: impl Fn(LayerId) -> bool) -> SparsityReport {
        let mut report = SparsityReport::default();
        for layer in eligible_layers(network) {
            let name = network.layer(layer).name.clone();
            if offered(layer) {
                report.offered.push(name.clone());
            }
            if chosen.get(layer.0).and_then(Option::as_ref).is_some_and(is_sparse_tactic) {
                report.picked.push(name.clone());
            }
            report.eligible.push(name);
        }
        report
    }

    /// The build-log lines, as TensorRT words them.
    pub fn lines(&self) -> Vec<String> {
        let list = |names: &[String]| if names.is_empty() { "none".to_string() } else { names.join(", ") };
        vec![
            format!("(Sparsity) Layers eligible for sparse math: {}", list(&self.eligible)),
            format!("(Sparsity) the engine picked sparse implementation for layers: {}", list(&self.picked)),
        ]
    }

    /// A warning when eligible layers got no sparse tactic to time (the backend has none
    /// for them): they run dense.
    pub fn warning(&self, backend: &str) -> Option<String> {
        let missing: Vec<&str> = self.eligible.iter().filter(|n| !self.offered.contains(n)).map(String::as_str).collect();
        (!missing.is_empty()).then(|| {
            format!(
                "SPARSE_WEIGHTS: backend `{backend}` has no sparse kernel for {} of {} eligible layers ({}); they run dense",
                missing.len(),
                self.eligible.len(),
                missing.join(", ")
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_run_along_the_reduction_axis() {
        // [K=1, C=8, 1x2]: channel c of position i sits at c·2 + i.
        let g = WeightGrouping { outer: 1, reduction: 8, inner: 2 };
        let groups: Vec<[usize; 4]> = g.groups().collect();
        assert_eq!(groups, vec![[0, 2, 4, 6], [1, 3, 5, 7], [8, 10, 12, 14], [9, 11, 13, 15]]);
    }

    #[test]
    fn two_zeros_in_every_group_qualify() {
        let g = WeightGrouping { outer: 2, reduction: 4, inner: 1 };
        assert!(is_two_four(&[1.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0], g));
        assert!(!is_two_four(&[1.0, 0.0, 3.0, 2.0, 0.0, 0.0, 0.0, 0.0], g));
    }

    #[test]
    fn the_byte_check_agrees_with_the_value_check() {
        let g = WeightGrouping { outer: 2, reduction: 4, inner: 1 };
        for values in [[1.0, -0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 3.0, 2.0, 0.0, 0.0, 0.0, 0.0], [0.0; 8]] {
            let f32s: Vec<u8> = values.iter().flat_map(|&v| (v as f32).to_le_bytes()).collect();
            let f16s: Vec<u8> = values.iter().flat_map(|&v| half::f16::from_f64(v).to_le_bytes()).collect();
            assert_eq!(is_two_four_bytes(&f32s, 4, g), is_two_four(&values, g), "{values:?}");
            assert_eq!(is_two_four_bytes(&f16s, 2, g), is_two_four(&values, g), "{values:?}");
        }
        // -0 is a zero; a wrong length or an 8-bit width is not read.
        assert!(is_two_four_bytes(&[0, 0x80, 0, 0, 1, 0, 1, 0], 2, WeightGrouping { outer: 1, reduction: 4, inner: 1 }));
        assert!(!is_two_four_bytes(&[0; 6], 2, WeightGrouping { outer: 1, reduction: 4, inner: 1 }));
        assert!(!is_two_four_bytes(&[0; 4], 1, WeightGrouping { outer: 1, reduction: 4, inner: 1 }));
    }

    #[test]
    fn pruning_keeps_the_two_largest_magnitudes() {
        assert_eq!(kept_positions([0.5, -3.0, 1.0, 2.0]), [1, 3]);
        assert_eq!(kept_positions([1.0, 1.0, 1.0, 1.0]), [0, 1]);
        let g = WeightGrouping { outer: 1, reduction: 4, inner: 1 };
        assert_eq!(pruned(&[0.5, -3.0, 1.0, 2.0], g), [0.0, -3.0, 0.0, 2.0]);
        assert!(is_two_four(&pruned(&[0.5, -3.0, 1.0, 2.0], g), g));
    }
}

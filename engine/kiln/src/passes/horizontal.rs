//! Horizontal fusion of sibling products: matrix products (with the same bias epilogue, or
//! none) that read the same input and multiply it by constant weights of the same depth
//! become one product over the weights side by side, whose columns are sliced back apart.
//! A transformer's query, key and value projections run as one wider GEMM (TensorRT fuses them
//! the same way): fewer, fuller launches. Each slice reads the wide output in place where the
//! backend allows (cuda keeps it a strided view). 2:4 sparse weights merge only with 2:4
//! siblings: a merged matrix with a dense part would lose its sparse kernels.

use super::graph::{has_control_flow, known_value};
use crate::ir::rewrite::Rewriter;
use super::{Pass, PassContext, PassError};
use crate::ir::fused::{FusedAnchor, FusedParams, PostOp};
use crate::ir::layer::{ElementwiseOp, LayerKind, MatrixOp};
use crate::ir::network::{Network, TensorId};
use crate::ir::tensor::{HostTensor, TensorData};
use std::collections::HashMap;

#[derive(Clone, Copy, Debug, Default)]
pub struct HorizontalMatMulFusion;

/// A product this pass can merge: its input, weights, bias (if any) and the epilogue's
/// operand order.
struct Product {
    layer: usize,
    input: TensorId,
    weights: TensorId,
    bias: Option<(TensorId, bool)>,
    /// Whether W is 2:4 along its depth ([`crate::sparsity`]).
    two_four: bool,
}

impl Pass for HorizontalMatMulFusion {
    fn name(&self) -> &'static str {
        "horizontal-matmul-fusion"
    }

    fn run(&self, network: &Network, _: &PassContext<'_>) -> Result<Option<Network>, PassError> {
        if has_control_flow(network) {
            return Ok(None);
        }
        // Siblings by (input, weights' type and depth, bias shape of the epilogue, 2:4 or not).
        let mut groups: HashMap<(TensorId, String), Vec<Product>> = HashMap::new();
        for i in 0..network.layers().len() {
            if let Some(p) = product(network, i) {
                let w = network.tensor(p.weights);
                let key = format!("{} {:?} {:?} {}", w.dtype, w.shape.dims().first(), p.bias.map(|(_, first)| first), p.two_four);
                groups.entry((p.input, key)).or_default().push(p);
            }
        }
        let groups: Vec<Vec<Product>> = groups.into_values().filter(|g| g.len() >= 2).collect();
        if groups.is_empty() {
            return Ok(None);
        }
        let layers: Vec<Vec<usize>> = groups.iter().map(|g| g.iter().map(|p| p.layer).collect()).collect();
        rewrite_groups(network, &layers, |rb, g| merge(network, rb, &groups[g])).map(Some)
    }
}

/// `network` with each group of layers (`groups[g]`, in network order) replaced by what `merge`
/// adds for group `g` at its first member's place; every other layer kept.
pub(super) fn rewrite_groups(
    network: &Network,
    groups: &[Vec<usize>],
    mut merge: impl FnMut(&mut Rewriter<'_>, usize) -> Result<(), PassError>,
) -> Result<Network, PassError> {
    let mut first_of: HashMap<usize, usize> = HashMap::new();
    let mut merged = vec![false; network.layers().len()];
    for (g, members) in groups.iter().enumerate() {
        first_of.insert(members[0], g);
        members.iter().for_each(|&m| merged[m] = true);
    }
    let mut rb = Rewriter::new(network);
    for i in 0..network.layers().len() {
        if let Some(&g) = first_of.get(&i) {
            merge(&mut rb, g)?;
        } else if !merged[i] {
            rb.keep(i)?;
        }
    }
    Ok(rb.finish_as_source()?)
}

/// Layer `i` as a mergeable product: `input · W (+ bias)` with W a constant [K, N] and the bias
/// a constant [N], its output no network output.
fn product(net: &Network, i: usize) -> Option<Product> {
    let l = &net.layers()[i];
    let plain = MatrixOp::None;
    let bias = match &l.kind {
        LayerKind::MatrixMultiply { op_a, op_b } if *op_a == plain && *op_b == plain => None,
        LayerKind::Fused(FusedParams {
            anchor: FusedAnchor::MatrixMultiply { op_a, op_b },
            anchor_inputs: 2,
            epilogue,
            dequantized,
        }) if dequantized.is_empty() && *op_a == plain && *op_b == plain => match epilogue[..] {
            [PostOp::Elementwise { op: ElementwiseOp::Sum, operand: 2, running_first }] => {
                Some((l.inputs.get(2).copied()??, running_first))
            }
            _ => return None,
        },
        _ => return None,
    };
    let (input, weights) = (l.inputs.first().copied()??, l.inputs.get(1).copied()??);
    let out = *l.outputs.first()?;
    let w = known_value(net, weights)?;
    let [k, n] = w.shape()[..] else { return None };
    let bytes = w.data().as_le_bytes()?;
    if net.outputs().contains(&out) || !w.dtype().is_float() {
        return None;
    }
    let grouping = crate::sparsity::WeightGrouping { outer: 1, reduction: k, inner: n };
    let two_four = k % crate::sparsity::GROUP == 0 && crate::sparsity::is_two_four_bytes(bytes, w.dtype().size_bytes()?, grouping);
    if let Some((b, _)) = bias {
        let b = known_value(net, b)?;
        if b.shape() != [n] || b.dtype() != w.dtype() {
            return None;
        }
    }
    Some(Product { layer: i, input, weights, bias, two_four })
}

/// Rows of the [K, N_i] matrices side by side: one [K, ΣN] matrix (or [ΣN] vectors).
pub(super) fn side_by_side(parts: &[&HostTensor]) -> Result<HostTensor, PassError> {
    let dtype = parts[0].dtype();
    let size = dtype.size_bytes().ok_or_else(|| PassError::Internal(format!("{dtype} has no element size")))?;
    let rows = if parts[0].shape().len() == 2 { parts[0].shape()[0] } else { 1 };
    let cols: Vec<usize> = parts.iter().map(|p| p.shape()[p.shape().len() - 1]).collect();
    let total: usize = cols.iter().sum();
    let mut bytes = Vec::with_capacity(rows * total * size);
    let data: Vec<&[u8]> = parts.iter().map(|p| p.data().as_le_bytes().unwrap_or_default()).collect();
    for r in 0..rows {
        for (d, &c) in data.iter().zip(&cols) {
            bytes.extend_from_slice(
                d.get(r * c * size..(r + 1) * c * size)
                    .ok_or_else(|| PassError::Internal("weights shorter than their shape".into()))?,
            );
        }
    }
    let shape = if parts[0].shape().len() == 2 { vec![rows, total] } else { vec![total] };
    let data = TensorData::from_le_bytes(dtype, &bytes).ok_or_else(|| PassError::Internal("weights bytes".into()))?;
    HostTensor::new(shape, data).map_err(|e| PassError::Internal(e.to_string()))
}

/// One product over the group's weights side by side, then a Slice per member carrying its
/// output.
fn merge(net: &Network, rb: &mut Rewriter<'_>, group: &[Product]) -> Result<(), PassError> {
    let value = |t: TensorId| known_value(net, t).ok_or_else(|| PassError::Internal("weights are not constant".into()));
    let weights: Vec<&HostTensor> = group.iter().map(|p| value(p.weights)).collect::<Result<_, _>>()?;
    let names: Vec<&str> = group.iter().map(|p| net.layers()[p.layer].name.as_str()).collect();
    let name = names.join(" | ");
    let w = rb.constant(&format!("{name} weights"), side_by_side(&weights)?)?;
    let mut inputs = vec![Some(rb.get(group[0].input)?), Some(w)];
    let first = &net.layers()[group[0].layer];
    if group[0].bias.is_some() {
        let biases: Vec<&HostTensor> = group
            .iter()
            .map(|p| p.bias.map_or(Err(PassError::Internal("bias".into())), |(b, _)| value(b)))
            .collect::<Result<_, _>>()?;
        inputs.push(Some(rb.constant(&format!("{name} bias"), side_by_side(&biases)?)?));
    }
    let wide = rb.out_mut().add_layer(&name, first.kind.clone(), inputs)?;
    let wide = rb.out().output(wide, 0);
    let members: Vec<(usize, usize)> = group.iter().zip(&weights).map(|(p, w)| (p.layer, w.shape()[1])).collect();
    slice_apart(net, rb, wide, &members)
}

/// A Slice of `wide`'s last axis per member `(layer, columns)`, in order, each carrying the
/// member's output.
pub(super) fn slice_apart(net: &Network, rb: &mut Rewriter<'_>, wide: TensorId, members: &[(usize, usize)]) -> Result<(), PassError> {
    let rank = net.tensor(net.layers()[members[0].0].outputs[0]).shape.rank();
    let ints = |rb: &mut Rewriter<'_>, what: &str, v: i64| -> Result<TensorId, PassError> {
        Ok(rb.constant(what, HostTensor::from_i64(vec![1], vec![v]).map_err(|e| PassError::Internal(e.to_string()))?)?)
    };
    let mut at = 0i64;
    for &(layer, n) in members {
        let l = &net.layers()[layer];
        let n = n as i64;
        let starts = ints(rb, &format!("{} columns from", l.name), at)?;
        let ends = ints(rb, &format!("{} columns to", l.name), at + n)?;
        let axes = ints(rb, &format!("{} columns axis", l.name), rank as i64 - 1)?;
        rb.add(
            &format!("{} columns", l.name),
            LayerKind::Slice,
            vec![Some(wide), Some(starts), Some(ends), Some(axes)],
            &l.outputs,
        )?;
        at += n;
    }
    Ok(())
}

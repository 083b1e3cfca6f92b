//! Windowed attention with a per-window mask (Swin's shifted windows) regrouped so that the
//! attention fusions see one broadcast mask. Swin computes attention over `G = B·W` windows of
//! `h` heads and adds a mask that differs from window to window through a view that splits the
//! windows from the images:
//!
//! ```text
//! S = Q·Kᵀ [G, h, n, n] → pointwise (Q/DQ, scale) → + bias [1, h, n, n]
//!   → reshape [B, W, h, n, n] → + mask [1, W, 1|h, n, n] → reshape [G, h, n, n] → softmax → ·V
//! ```
//!
//! No mask of `[G, h, n, n]` broadcasts that way, so neither attention fusion took it. The
//! windows and heads regrouped as `[B, W·h, …]` (a reshape of Q, K and V: row-major, the same
//! elements) make the mask one constant `[1, W·h, n, n]` that broadcasts over the images, and the
//! chain an attention the fusions take; the product is reshaped back to `[G, h, n, dv]`.
//!
//! The bias and the mask are summed at build time into that one constant: each score then sees
//! one addition where the graph had two, the reassociation a fused attention makes of any two
//! constant terms (the mask's large negative entries are what it is for; a score they reach
//! rounds differently and its probability stays nil).

use super::fold::evaluate_constant;
use super::graph::{consumers, has_control_flow, known_value, only_reader};
use super::shuffle_chains::reshape;
use super::{Pass, PassContext, PassError};
use crate::ir::broadcast::positions;
use crate::ir::layer::{ElementwiseOp, LayerKind, MatrixOp, ShuffleParams};
use crate::ir::network::{Network, TensorId};
use crate::ir::rewrite::Rewriter;
use crate::ir::infer::values::numbers::float_tensor;
use crate::ir::tensor::HostTensor;
use std::collections::{HashMap, HashSet};

/// The largest regrouped mask made (elements): Swin's first stage has 64 windows of 3 heads
/// over 49 × 49 scores (0.5 M).
const MAX_MASK_ELEMENTS: usize = 1 << 24;

#[derive(Clone, Copy, Debug, Default)]
pub struct WindowedAttentionRegrouping;

impl Pass for WindowedAttentionRegrouping {
    fn name(&self) -> &'static str {
        "windowed-attention-regrouping"
    }

    fn run(&self, network: &Network, context: &PassContext<'_>) -> Result<Option<Network>, PassError> {
        if has_control_flow(network) {
            return Ok(None);
        }
        let readers = consumers(network);
        let values = Values { net: network, backend: context.folding_backend };
        let plans: HashMap<usize, Plan> = (0..network.layers().len()).filter_map(|i| plan(&values, &readers, i).map(|p| (i, p))).collect();
        if plans.is_empty() {
            return Ok(None);
        }
        let skipped: HashSet<usize> = plans.values().flat_map(|p| p.replaced.iter().copied()).collect();
        let mut rb = Rewriter::new(network);
        for i in 0..network.layers().len() {
            if let Some(p) = plans.get(&i) {
                emit(&mut rb, network, p)?;
            } else if !skipped.contains(&i) {
                rb.keep(i)?;
            }
        }
        Ok(Some(rb.finish_as_source()?))
    }
}

/// One windowed attention: what the regrouped chain is made of.
struct Plan {
    /// The layers it replaces before the product by V (which the chain takes the place of).
    replaced: Vec<usize>,
    /// The Q·Kᵀ product and the product by V.
    qk: usize,
    pv: usize,
    /// Pointwise layers after Q·Kᵀ (before the bias) and after the softmax, in order.
    scores_steps: Vec<usize>,
    probs_steps: Vec<usize>,
    softmax: usize,
    /// The bias and the mask summed, `[1, W·h, n, n]`, in the scores' type.
    mask: HostTensor,
    /// Windows × heads, and heads.
    groups: usize,
    heads: usize,
}

/// The windowed attention ending at layer `pv`, if it is one.
fn plan(values: &Values<'_>, readers: &[Vec<(usize, usize)>], pv: usize) -> Option<Plan> {
    let net = values.net;
    let inner = |t: TensorId| -> Option<usize> {
        only_reader(net, readers, t)?;
        net.tensor(t).producer.map(|(l, _)| l.0)
    };
    let layer = |i: usize| &net.layers()[i];
    let LayerKind::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::None } = layer(pv).kind else { return None };
    let (p, value) = (layer(pv).inputs[0]?, layer(pv).inputs[1]?);
    // The probabilities: softmax, then pointwise steps (a quantization and back).
    let mut probs_steps = Vec::new();
    let mut t = p;
    let softmax = loop {
        let i = inner(t)?;
        match layer(i).kind {
            LayerKind::SoftMax { .. } => break i,
            _ if pointwise_step(values, i) => {
                probs_steps.push(i);
                t = layer(i).inputs[0]?;
            }
            _ => return None,
        }
    };
    probs_steps.reverse();
    let scores = net.tensor(layer(softmax).inputs[0]?);
    let LayerKind::SoftMax { axis } = layer(softmax).kind else { return None };
    if scores.shape.rank() != 4 || axis != 3 {
        return None;
    }
    // reshape [G, h, n, n] ← (+ mask) ← reshape [B, W, h, n, n] ← x [G, h, n, n].
    let merge = inner(layer(softmax).inputs[0]?)?;
    let masked = reshape_only(net, merge)?;
    let add = inner(masked)?;
    let LayerKind::Elementwise { op: ElementwiseOp::Sum } = layer(add).kind else { return None };
    let (a, b) = (layer(add).inputs[0]?, layer(add).inputs[1]?);
    let (split_out, mask) = match values.constant(b) {
        Some(mask) => (a, mask),
        None => (b, values.constant(a)?),
    };
    let split = inner(split_out)?;
    let x = reshape_only(net, split)?;
    let (x_shape, y_shape) = (net.tensor(x).shape.dims().to_vec(), net.tensor(split_out).shape.dims().to_vec());
    if x_shape.len() != 4 || y_shape.len() != 5 || !scores.shape.dims().iter().zip(&x_shape).all(|(a, b)| a.same_as(b)) {
        return None;
    }
    // The split keeps (h, n, n): the leading dim is the images times the windows.
    if !y_shape[2..].iter().zip(&x_shape[1..]).all(|(a, b)| a.same_as(b)) {
        return None;
    }
    let (windows, heads, rows, cols) = (y_shape[1].fixed()?, x_shape[1].fixed()?, x_shape[2].fixed()?, x_shape[3].fixed()?);
    let grid = [windows, heads, rows, cols];
    let mask = per_window(&mask, 5, &grid)?;
    // x: (+ bias) ← pointwise steps ← Q·Kᵀ.
    let mut replaced = vec![softmax, merge, add, split];
    let mut t = x;
    let mut bias = None;
    let first = inner(t)?;
    if let LayerKind::Elementwise { op: ElementwiseOp::Sum } = layer(first).kind {
        let (a, b) = (layer(first).inputs[0]?, layer(first).inputs[1]?);
        let (rest, c) = match values.constant(b) {
            Some(c) => (a, c),
            None => (b, values.constant(a)?),
        };
        bias = Some(per_window(&c, 4, &grid)?);
        replaced.push(first);
        t = rest;
    }
    let mut scores_steps = Vec::new();
    let qk = loop {
        let i = inner(t)?;
        match layer(i).kind {
            LayerKind::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::None | MatrixOp::Transpose } => break i,
            _ if pointwise_step(values, i) => {
                scores_steps.push(i);
                t = layer(i).inputs[0]?;
            }
            _ => return None,
        }
    };
    scores_steps.reverse();
    replaced.extend(&scores_steps);
    replaced.extend(&probs_steps);
    replaced.push(qk);
    // Q, K and V: rank 4 with the scores' (G, h), so regrouping them is a reshape.
    let lead = &x_shape[..2];
    let operands = [layer(qk).inputs[0]?, layer(qk).inputs[1]?, value];
    if !operands.iter().all(|&o| {
        let d = net.tensor(o).shape.dims();
        d.len() == 4 && d[..2].iter().zip(lead).all(|(a, b)| a.same_as(b)) && d[2..].iter().all(|d| d.fixed().is_some())
    }) {
        return None;
    }
    let dtype = net.tensor(x).dtype;
    let values: Vec<f64> = match bias {
        Some(bias) => bias.iter().zip(&mask).map(|(b, m)| b + m).collect(),
        None => mask,
    };
    let mask = float_tensor(dtype, &crate::ir::shape::Shape::fixed(&[1, windows * heads, rows, cols]), values)?;
    Some(Plan { replaced, qk, pv, scores_steps, probs_steps, softmax, mask, groups: windows * heads, heads })
}

/// `value` (of rank at most `rank`, its first dim 1 or absent: the same for every image) read
/// at each (window, head, row, column) of `grid` as numpy broadcasting reads it, where the
/// value's last four dims line up with `grid` (rank 5: `[1, W, h, n, n]`) or its last three with
/// grid's last three (rank 4: `[1, h, n, n]`, the same for every window).
fn per_window(value: &HostTensor, rank: usize, grid: &[usize; 4]) -> Option<Vec<f64>> {
    if value.shape().len() > rank || grid.iter().product::<usize>() > MAX_MASK_ELEMENTS {
        return None;
    }
    let mut dims = vec![1; rank - value.shape().len()];
    dims.extend(value.shape());
    if dims[0] != 1 {
        return None;
    }
    let at = positions(&dims[1..], &grid[4 - (rank - 1)..]).ok()?;
    let values = value.to_f64_vec();
    let per_cell: Vec<f64> = at.iter().map(|&i| values[i]).collect();
    // Rank 4 leaves out the windows: the same values for each.
    let repeat = grid.iter().product::<usize>() / per_cell.len().max(1);
    Some(per_cell.iter().copied().cycle().take(per_cell.len() * repeat).collect())
}

/// The input of a Shuffle that only reshapes (no transposes, dims as a parameter).
fn reshape_only(net: &Network, i: usize) -> Option<TensorId> {
    let l = &net.layers()[i];
    let LayerKind::Shuffle(ShuffleParams { first_transpose, reshape: Some(_), second_transpose, .. }) = &l.kind else { return None };
    let plain = |p: &[usize]| p.iter().enumerate().all(|(k, &d)| k == d);
    (plain(first_transpose) && plain(second_transpose) && l.inputs.get(1).is_none_or(Option::is_none)).then_some(l.inputs[0]?)
}

/// A layer that maps each element of its first input alone: a quantization or dequantization by
/// one scale and zero point, a cast, a unary op or activation, or an elementwise op with a
/// one-element constant. Copied onto the regrouped scores as it is.
fn pointwise_step(values: &Values<'_>, i: usize) -> bool {
    let (net, l) = (values.net, &values.net.layers()[i]);
    let one = |t: &Option<TensorId>| t.is_none_or(|t| net.tensor(t).shape.volume() == Some(1));
    l.outputs.len() == 1
        && match l.kind {
            LayerKind::Quantize { .. } | LayerKind::Dequantize { .. } => l.inputs[1..].iter().all(one),
            LayerKind::Cast { .. } | LayerKind::Unary { .. } | LayerKind::Activation { .. } | LayerKind::Identity => l.inputs.len() == 1,
            LayerKind::Elementwise { op: ElementwiseOp::Prod | ElementwiseOp::Div | ElementwiseOp::Sum | ElementwiseOp::Sub } => {
                l.inputs.len() == 2 && one(&l.inputs[1]) && l.inputs[1].is_some_and(|t| values.constant(t).is_some())
            }
            _ => false,
        }
}

/// Constant values as the pass reads them: known, or computed from constants alone (Swin's
/// mask is built from the window geometry by scatters and selects) on the folding backend.
struct Values<'n> {
    net: &'n Network,
    backend: Option<&'n dyn crate::backend::Backend>,
}

impl Values<'_> {
    fn constant(&self, t: TensorId) -> Option<HostTensor> {
        if let Some(v) = known_value(self.net, t) {
            return Some(v.clone());
        }
        let (producer, _) = self.net.tensor(t).producer?;
        match &self.net.layer(producer).kind {
            LayerKind::Constant { weights } => Some((*self.net.weights_blob(*weights)?).clone()),
            _ => Some((*evaluate_constant(self.net, t, self.backend?)?).clone()),
        }
    }
}

/// The regrouped chain at the product by V's place: Q, K and V as `[B, W·h, …]`, the product,
/// the scores' steps, the one mask, the softmax, the probabilities' steps, the product by V,
/// and the reshape back to `[G, h, n, dv]` that carries the source output.
fn emit(rb: &mut Rewriter<'_>, net: &Network, p: &Plan) -> Result<(), PassError> {
    let layer = |i: usize| &net.layers()[i];
    let regroup = |rb: &mut Rewriter<'_>, t: TensorId, what: &str, groups: usize| -> Result<TensorId, PassError> {
        let d = net.tensor(t).shape.dims();
        let dims = vec![-1, groups as i64, d[2].fixed().unwrap_or(0) as i64, d[3].fixed().unwrap_or(0) as i64];
        let name = format!("{} (windows as heads: {what})", layer(p.qk).name);
        let source = rb.get(t)?;
        Ok(rb.add_layer(&name, LayerKind::Shuffle(reshape(dims)), vec![Some(source)], std::slice::from_ref(&name))?[0])
    };
    let qk = layer(p.qk);
    let q = regroup(rb, qk.inputs[0].expect("matched"), "Q", p.groups)?;
    let k = regroup(rb, qk.inputs[1].expect("matched"), "K", p.groups)?;
    let v = regroup(rb, layer(p.pv).inputs[1].expect("matched"), "V", p.groups)?;
    let step = |rb: &mut Rewriter<'_>, i: usize, first: TensorId| -> Result<TensorId, PassError> {
        let l = layer(i);
        let mut inputs = vec![Some(first)];
        inputs.extend(rb.get_slots(&l.inputs[1..])?);
        let name = format!("{} (windows as heads)", l.name);
        Ok(rb.add_layer(&name, l.kind.clone(), inputs, std::slice::from_ref(&name))?[0])
    };
    let name = format!("{} (windows as heads)", qk.name);
    let mut t = rb.add_layer(&name, qk.kind.clone(), vec![Some(q), Some(k)], std::slice::from_ref(&name))?[0];
    for &i in &p.scores_steps {
        t = step(rb, i, t)?;
    }
    let mask = rb.constant(&format!("{} (bias and mask per window)", layer(p.softmax).name), p.mask.clone())?;
    let name = format!("{} (bias and mask)", layer(p.softmax).name);
    t = rb.add_layer(&name, LayerKind::Elementwise { op: ElementwiseOp::Sum }, vec![Some(t), Some(mask)], std::slice::from_ref(&name))?[0];
    t = step(rb, p.softmax, t)?;
    for &i in &p.probs_steps {
        t = step(rb, i, t)?;
    }
    let pv = layer(p.pv);
    let name = format!("{} (windows as heads)", pv.name);
    let o = rb.add_layer(&name, pv.kind.clone(), vec![Some(t), Some(v)], std::slice::from_ref(&name))?[0];
    let d = net.tensor(pv.outputs[0]).shape.dims();
    let back = vec![-1, p.heads as i64, d[2].fixed().unwrap_or(0) as i64, d[3].fixed().unwrap_or(0) as i64];
    rb.add(&format!("{} (windows back)", pv.name), LayerKind::Shuffle(reshape(back)), vec![Some(o)], &pv.outputs)?;
    Ok(())
}

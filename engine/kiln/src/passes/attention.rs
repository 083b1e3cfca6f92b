//! Recognition of scaled-dot-product attention as PyTorch exports it (see
//! [`super::patterns`] for the matching machinery).

use super::patterns::{names, rewrite, NewInput, Replacement};
use super::{Pass, PassContext, PassError};
use crate::ir::dtype::DataType;
use crate::ir::fused::{AttentionParams, InputLevels, LevelGrid};
use crate::ir::layer::{ElementwiseOp, LayerKind, MatrixOp};
use crate::ir::network::{Layer, Network, TensorId};

/// `softmax(scale · Q·Kᵀ [+ mask]) · V` → Attention. K may arrive transposed by the
/// product (`op_b = Transpose`), already transposed, or through Shuffles that together swap
/// its last two dims (one transpose, or the dynamo exporter's reshape → transpose → reshape).
/// The product (before its scale), the scores (before the mask) and the probabilities may each
/// pass through a quantization and back (`DequantizeLinear(QuantizeLinear(·))`, as
/// onnxruntime's and ModelOpt's Q/DQ networks write attention): the fused layer applies those
/// levels itself.
#[derive(Clone, Copy, Debug, Default)]
pub struct AttentionFusion;

impl Pass for AttentionFusion {
    fn name(&self) -> &'static str {
        "attention-fusion"
    }

    fn run(&self, network: &Network, _: &PassContext<'_>) -> Result<Option<Network>, PassError> {
        rewrite(network, |v, _, pv| attention(v, pv))
    }
}

/// The attentions of a Q/DQ network only (those with levels on their product, scores or
/// probabilities), found before the Q/DQ fusion: it would otherwise take their two products
/// as integer layers with about twenty passes over the scores between them (int8 out,
/// dequantize, mask, softmax, NaN guard, quantize, transpose), where the fused layer needs
/// the products, one masked softmax and the level passes.
#[derive(Clone, Copy, Debug, Default)]
pub struct QuantizedAttentionFusion;

impl Pass for QuantizedAttentionFusion {
    fn name(&self) -> &'static str {
        "quantized-attention-fusion"
    }

    fn run(&self, network: &Network, _: &PassContext<'_>) -> Result<Option<Network>, PassError> {
        rewrite(network, |v, _, pv| {
            attention(v, pv).filter(|r| {
                matches!(r.kind, LayerKind::Attention(p) if p.has_levels())
            })
        })
    }
}

/// An attention whose Q, K or V comes straight from a per-tensor DequantizeLinear of 8-bit
/// levels (one constant f32 scale, a constant zero point or none) that nothing else reads
/// takes the levels and dequantizes them itself (`AttentionParams::input_levels`): a backend
/// that fuses attention then reads a quarter of the bytes (half of f16's) and writes nothing
/// between. Runs after the precision pass, so the DequantizeLinear already writes the
/// attention's float type.
#[derive(Clone, Copy, Debug, Default)]
pub struct AttentionInputLevels;

impl Pass for AttentionInputLevels {
    fn name(&self) -> &'static str {
        "attention-input-levels"
    }

    fn run(&self, network: &Network, _: &PassContext<'_>) -> Result<Option<Network>, PassError> {
        rewrite(network, |v, _, l| input_levels(v, l))
    }
}

fn input_levels(v: &super::patterns::View<'_>, l: &Layer) -> Option<Replacement> {
    let LayerKind::Attention(p) = l.kind else { return None };
    if p.input_levels.is_some() {
        return None;
    }
    let to = v.net.tensor(l.inputs[0]?).dtype;
    let mut grids = [None; 3];
    let mut inputs: Vec<Option<NewInput>> = l.inputs.iter().map(|t| t.map(NewInput::Tensor)).collect();
    let mut matched = Vec::new();
    for slot in 0..3 {
        let Some((dq, levels, grid)) = l.inputs.get(slot).copied().flatten().and_then(|t| dequantized_levels(v, t)) else { continue };
        if v.net.tensor(dq.outputs[0]).dtype != to {
            continue;
        }
        grids[slot] = Some(grid);
        inputs[slot] = Some(NewInput::Tensor(levels));
        matched.push(dq);
    }
    if matched.is_empty() {
        return None;
    }
    matched.push(l);
    let kind = LayerKind::Attention(AttentionParams { input_levels: Some(InputLevels { grids, to }), ..p });
    Some(Replacement { names: names(&matched), kind, inputs })
}

/// `(DequantizeLinear, levels, grid)` where `t`, read only once, is a per-tensor
/// DequantizeLinear of 8-bit levels with one constant f32 scale and a constant zero point or
/// none.
fn dequantized_levels<'n>(v: &super::patterns::View<'n>, t: TensorId) -> Option<(&'n Layer, TensorId, LevelGrid)> {
    let dq = v.inner(t)?;
    let LayerKind::Dequantize { .. } = dq.kind else { return None };
    let levels = dq.inputs[0]?;
    Some((dq, levels, per_tensor_grid(v, dq, v.net.tensor(levels).dtype)?))
}

/// The grid of a per-tensor QuantizeLinear or DequantizeLinear `l` of `level_type` levels
/// (8-bit): one constant f32 scale, positive and finite, and a constant zero point or none.
fn per_tensor_grid(v: &super::patterns::View<'_>, l: &Layer, level_type: DataType) -> Option<LevelGrid> {
    let scale = l.inputs.get(1).copied().flatten()?;
    if !matches!(level_type, DataType::I8 | DataType::U8) || v.net.tensor(scale).dtype != DataType::F32 || v.net.tensor(scale).shape.volume() != Some(1) {
        return None;
    }
    let zero = match l.inputs.get(2).copied().flatten() {
        Some(z) if v.net.tensor(z).dtype == level_type && v.net.tensor(z).shape.volume() == Some(1) => v.scalar(z)?,
        Some(_) => return None,
        None => 0.0,
    };
    let scale = v.scalar(scale)?;
    (scale.is_finite() && scale > 0.0).then_some(LevelGrid { scale: scale as f32, zero: zero as i32, levels: level_type })
}

/// An attention whose output only a per-tensor QuantizeLinear reads (one constant f32 scale, a
/// constant zero point or none, 8-bit levels) writes the levels itself
/// (`AttentionParams::output_levels`): a Q/DQ network's context, which its output projection
/// reads as levels. A backend that fuses attention then writes a quarter of the bytes (half of
/// f16's) and skips a pass over them. Runs after the precision pass, so the QuantizeLinear reads
/// the attention's float type, the type the layer rounds to before it quantizes.
#[derive(Clone, Copy, Debug, Default)]
pub struct AttentionOutputLevels;

impl Pass for AttentionOutputLevels {
    fn name(&self) -> &'static str {
        "attention-output-levels"
    }

    fn run(&self, network: &Network, _: &PassContext<'_>) -> Result<Option<Network>, PassError> {
        rewrite(network, |v, _, l| output_levels(v, l))
    }
}

fn output_levels(v: &super::patterns::View<'_>, q: &Layer) -> Option<Replacement> {
    let LayerKind::Quantize { to, .. } = q.kind else { return None };
    let attention = v.inner(q.inputs[0]?)?;
    let LayerKind::Attention(p) = attention.kind else { return None };
    if p.output_levels.is_some() || !v.net.tensor(attention.outputs[0]).dtype.is_float() {
        return None;
    }
    let grid = per_tensor_grid(v, q, to)?;
    let kind = LayerKind::Attention(AttentionParams { output_levels: Some(grid), ..p });
    Some(Replacement { names: names(&[attention, q]), kind, inputs: attention.inputs.iter().map(|t| t.map(NewInput::Tensor)).collect() })
}

/// The Attention layer that replaces the pattern ending at `pv`, the product by V.
fn attention(v: &super::patterns::View<'_>, pv: &Layer) -> Option<Replacement> {
    let LayerKind::MatrixMultiply {
        op_a: MatrixOp::None,
        op_b: MatrixOp::None,
    } = pv.kind
    else {
        return None;
    };
    let (p, value) = (pv.inputs[0]?, pv.inputs[1]?);
    let mut matched = vec![pv];
    let (p, probs_levels) = match fake_quant(v, p) {
        Some((x, grid, layers)) => {
            matched.extend(layers);
            (x, Some(grid))
        }
        None => (p, None),
    };
    // PyTorch's SDPA export zeroes NaN probabilities: Where(IsNaN(p), 0, p).
    let (p, zero_nan_rows) = match nan_guard(v, p) {
        Some((probs, guard)) => {
            matched.extend(guard);
            (probs, true)
        }
        None => (p, false),
    };
    let softmax = if zero_nan_rows { v.producer(p)? } else { v.inner(p)? };
    let LayerKind::SoftMax { axis } = softmax.kind else {
        return None;
    };
    let scores_rank = v.net.tensor(p).shape.rank();
    if axis + 1 != scores_rank || !v.float(p) {
        return None;
    }
    matched.push(softmax);
    let mut s = softmax.inputs[0]?;
    let mut mask = None;
    let mut scale = 1.0f64;
    let mut scale_multiplies = true;
    if let Some((add, a, b)) = v.binary(s, ElementwiseOp::Sum) {
        // The mask is whichever side is not the (scaled) score product.
        let is_scores = |t: TensorId| {
            let t = fake_quant(v, t).map_or(t, |(x, _, _)| x);
            v.inner(t).is_some_and(|l| {
                matches!(
                    l.kind,
                    LayerKind::MatrixMultiply { .. }
                        | LayerKind::Elementwise {
                            op: ElementwiseOp::Prod | ElementwiseOp::Div
                        }
                )
            })
        };
        let (scores, m) = if is_scores(a) {
            (a, b)
        } else if is_scores(b) {
            (b, a)
        } else {
            return None;
        };
        matched.push(add);
        mask = Some(m);
        s = scores;
    }
    let mut scores_levels = None;
    if let Some((x, grid, layers)) = fake_quant(v, s) {
        matched.extend(layers);
        scores_levels = Some(grid);
        s = x;
    }
    if let Some(l) = v.inner(s) {
        if let LayerKind::Elementwise {
            op: op @ (ElementwiseOp::Prod | ElementwiseOp::Div),
        } = l.kind
        {
            let (a, b) = (l.inputs[0]?, l.inputs[1]?);
            let (scores, c) = match (v.scalar(a), v.scalar(b)) {
                (_, Some(c)) => (a, c),
                (Some(c), None) if op == ElementwiseOp::Prod => (b, c),
                _ => return None,
            };
            scale = c;
            scale_multiplies = op == ElementwiseOp::Prod;
            matched.push(l);
            s = scores;
        }
    }
    let mut product_levels = None;
    if scores_levels.is_none() {
        if let Some((x, grid, layers)) = fake_quant(v, s) {
            matched.extend(layers);
            product_levels = Some(grid);
            s = x;
        }
    }
    let qk = v.inner(s)?;
    let LayerKind::MatrixMultiply {
        op_a: MatrixOp::None,
        op_b,
    } = qk.kind
    else {
        return None;
    };
    let (mut q, mut k) = (qk.inputs[0]?, qk.inputs[1]?);
    matched.push(qk);
    // Q and K each scaled by a constant before the product (SDPA exports scale both by
    // the square root of the scale): one multiplier. Not past the product's levels, which
    // see the product of the scaled operands.
    let mut pre_scale = 1.0f64;
    let operands = if product_levels.is_none() { vec![&mut q, &mut k] } else { vec![] };
    for x in operands {
        if let Some((l, a, b)) = v.binary(*x, ElementwiseOp::Prod) {
            let (rest, c) = match (v.scalar(a), v.scalar(b)) {
                (_, Some(c)) => (a, c),
                (Some(c), None) => (b, c),
                _ => continue,
            };
            pre_scale *= c;
            matched.push(l);
            *x = rest;
        }
    }
    if pre_scale != 1.0 {
        scale = if scale_multiplies { scale * pre_scale } else { pre_scale / scale };
        scale_multiplies = true;
    }
    let (key, key_transposed) = match op_b {
        MatrixOp::Transpose => (k, false),
        MatrixOp::None => match untransposed_key(v, k) {
            Some((source, chain)) => {
                matched.extend(chain);
                (source, false)
            }
            None => (k, true),
        },
        MatrixOp::Vector => return None,
    };
    if let Some(m) = mask {
        if v.net.tensor(m).dtype != v.net.tensor(q).dtype {
            return None;
        }
    }
    matched.reverse();
    let params = AttentionParams {
        scale: scale as f32,
        key_transposed,
        scale_multiplies,
        zero_nan_rows,
        product_levels,
        scores_levels,
        probs_levels,
        input_levels: None,
        output_levels: None,
    };
    Some(Replacement {
        names: names(&matched),
        kind: LayerKind::Attention(params),
        inputs: vec![
            Some(NewInput::Tensor(q)),
            Some(NewInput::Tensor(key)),
            Some(NewInput::Tensor(value)),
            mask.map(NewInput::Tensor),
        ],
    })
}

/// `(x, grid, [DequantizeLinear, QuantizeLinear])` when `t` is `DequantizeLinear(
/// QuantizeLinear(x))` with one constant scale and zero point, the same in both, 8-bit
/// levels, and each tensor between read only there: x through the levels and back.
fn fake_quant<'n>(v: &super::patterns::View<'n>, t: TensorId) -> Option<(TensorId, LevelGrid, [&'n Layer; 2])> {
    let dq = v.inner(t)?;
    let LayerKind::Dequantize { .. } = dq.kind else {
        return None;
    };
    let q = v.inner(dq.inputs[0]?)?;
    let LayerKind::Quantize { to: levels @ (DataType::I8 | DataType::U8), .. } = q.kind else {
        return None;
    };
    let x = q.inputs[0]?;
    let scale_and_zero = |l: &Layer| -> Option<(f64, f64)> {
        let zero = match l.inputs.get(2).copied().flatten() {
            Some(z) => v.scalar(z)?,
            None => 0.0,
        };
        Some((v.scalar(l.inputs[1]?)?, zero))
    };
    let (scale, zero) = scale_and_zero(q)?;
    if scale_and_zero(dq)? != (scale, zero)
        || !(scale.is_finite() && scale > 0.0)
        || v.net.tensor(t).dtype != v.net.tensor(x).dtype
        || !v.float(x)
    {
        return None;
    }
    Some((x, LevelGrid { scale: scale as f32, zero: zero as i32, levels }, [dq, q]))
}

/// `(p, [Where, IsNaN])` when `t` is `Where(IsNaN(p), 0, p)` and nothing else reads `p`.
fn nan_guard<'n>(v: &super::patterns::View<'n>, t: TensorId) -> Option<(TensorId, [&'n Layer; 2])> {
    let select = v.inner(t)?;
    let LayerKind::Select = select.kind else {
        return None;
    };
    let (cond, zero, p) = (select.inputs[0]?, select.inputs[1]?, select.inputs.get(2).copied()??);
    if v.scalar(zero) != Some(0.0) || v.net.outputs().contains(&p) || v.readers[p.0].len() != 2 {
        return None;
    }
    let is_nan = v.inner(cond)?;
    match is_nan.kind {
        LayerKind::Unary { op: crate::ir::layer::UnaryOp::IsNan } if is_nan.inputs[0]? == p => Some((p, [select, is_nan])),
        _ => None,
    }
}

/// How many Shuffles a key's transpose may be spread over.
const MAX_KEY_SHUFFLES: usize = 4;

/// The tensor `k` is the last-two-dims transpose of, and the Shuffles (each read only there)
/// that make it: one Shuffle that swaps them (whatever the shapes), or a chain whose
/// composite view, worked out on fixed shapes ([`crate::plan::strides`]), is that swap.
fn untransposed_key<'n>(v: &super::patterns::View<'n>, k: TensorId) -> Option<(TensorId, Vec<&'n Layer>)> {
    let rank = v.net.tensor(k).shape.rank();
    let first = v.inner(k)?;
    if swaps_last_two(first, rank) {
        return Some((first.inputs[0]?, vec![first]));
    }
    let fixed = |t: TensorId| v.net.tensor(t).shape.as_fixed();
    let target = fixed(k)?;
    let mut chain: Vec<&Layer> = Vec::new();
    let mut at = k;
    while chain.len() < MAX_KEY_SHUFFLES {
        let layer = v.inner(at)?;
        let LayerKind::Shuffle(_) = layer.kind else { return None };
        if layer.inputs.get(1).copied().flatten().is_some() {
            return None;
        }
        chain.push(layer);
        at = layer.inputs[0]?;
        let source = fixed(at)?;
        if source.len() == rank && rank >= 2 && composite_swaps_last_two(v.net, &chain, &source, &target) {
            return Some((at, chain));
        }
    }
    None
}

/// Whether `chain` (last layer first), read from a packed `source`, views it as `source` with
/// its last two dims swapped, shaped `target`.
fn composite_swaps_last_two(net: &Network, chain: &[&Layer], source: &[usize], target: &[usize]) -> bool {
    use crate::plan::strides::{contiguous, permuted, shuffled};
    let mut view = (source.to_vec(), contiguous(source));
    for layer in chain.iter().rev() {
        let (LayerKind::Shuffle(p), Some(out)) = (&layer.kind, layer.outputs.first().and_then(|&t| net.tensor(t).shape.as_fixed())) else {
            return false;
        };
        match shuffled(p, &view.0, &view.1, &out) {
            Some(next) => view = next,
            None => return false,
        }
    }
    let mut swap: Vec<usize> = (0..source.len()).collect();
    swap.swap(source.len() - 2, source.len() - 1);
    let Ok(want) = permuted(source, &contiguous(source), &swap) else { return false };
    // Strides of size-1 dims never matter.
    let normal = |(shape, strides): &(Vec<usize>, Vec<i64>)| -> Vec<(usize, i64)> {
        shape.iter().zip(strides).map(|(&n, &s)| (n, if n == 1 { 0 } else { s })).collect()
    };
    view.0 == target && normal(&view) == normal(&want)
}

/// A Shuffle that only swaps the last two dims (PyTorch's `k.transpose(-2, -1)`).
fn swaps_last_two(l: &Layer, rank: usize) -> bool {
    let LayerKind::Shuffle(p) = &l.kind else {
        return false;
    };
    if rank < 2
        || p.reshape.is_some()
        || !p.second_transpose.is_empty()
        || l.inputs.get(1).copied().flatten().is_some()
    {
        return false;
    }
    let mut want: Vec<usize> = (0..rank).collect();
    want.swap(rank - 2, rank - 1);
    p.first_transpose == want
}

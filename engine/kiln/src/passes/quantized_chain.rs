//! Quantized pointwise islands (explicit quantization, seeds §6.5): the float layers between
//! integer tensors, `DequantizeLinear → Add / ReLU / … → QuantizeLinear` (a residual join,
//! an activation between two integer layers), become one [`LayerKind::Fused`] layer that
//! reads the integers, computes in f32 and writes integers: one pass over 8-bit memory
//! instead of a float tensor written and read per layer.
//!
//! A pointwise layer, or a pointwise chain fused before this pass, absorbs:
//! - every input produced by a per-tensor DequantizeLinear of an 8-bit tensor with a known
//!   f32 scale (read dequantized, [`FusedParams::dequantized`]; the DequantizeLinear stays
//!   for any other reader and is dropped when unread);
//! - after it, a per-tensor QuantizeLinear to 8 bits ([`PostOp::Quantize`]), and past that a
//!   DequantizeLinear and more pointwise layers and quantizations, while each tensor between
//!   has one reader and is not a network output;
//! - one layer normalization over the last axis among those steps ([`PostOp::Normalization`]):
//!   a Q/DQ transformer's `DequantizeLinear ×2 → bias + residual → LayerNorm → QuantizeLinear`
//!   is one pass over the integers, a row at a time. A layer normalization reading a
//!   DequantizeLinear heads an island of its own ([`FusedAnchor::Identity`], the normalization
//!   its first step): ConvNeXt's `depthwise conv → Q → DQ → LayerNorm → Q`.
//!
//! Each step computes what the unfused layer computed, in f32 (the island runs in f32: the
//! precision pass keeps such islands wide), so every backend gives the unfused graph's
//! values.
//!
//! A max pooling between a DequantizeLinear and a QuantizeLinear of the same type, scale
//! (positive) and zero point pools the integers themselves: dequantization is increasing, so
//! the maximum commutes with it, and requantizing a dequantized level gives the level back.
//! With a ReLU between the DequantizeLinear and the pooling (Conv → ReLU → MaxPool), the
//! integers are pooled first and the DequantizeLinear, ReLU and QuantizeLinear follow as the
//! epilogue of one layer ([`FusedAnchor::Pooling`]): the ReLU is non-decreasing too, so it
//! commutes with the maximum wherever every window holds an input cell (no dilation, no ceil
//! mode, padding narrower than the window), and so does the whole level map.
//!
//! A QuantizeLinear after a Cast that widens f16 / bf16 to f32 reads the narrow tensor, and a
//! DequantizeLinear before a Cast to f16 / bf16 writes the narrow type itself.
//!
//! The pass runs for backends that run quantized layers ([`PassContext::quantized_layers`]).

use super::fuse::next_step;
use super::graph::{consumers, disjoint_plans, has_control_flow, known_value, only_reader};
use super::{Pass, PassContext, PassError};
use crate::ir::dtype::DataType;
use crate::ir::fused::{DequantizedInput, FusedAnchor, FusedParams, PostOp};
use crate::ir::layer::LayerKind;
use crate::ir::network::{LayerId, Network, TensorId};
use crate::ir::rewrite::Rewriter;

#[derive(Clone, Copy, Debug, Default)]
pub struct QuantizedChainFusion;

impl Pass for QuantizedChainFusion {
    fn name(&self) -> &'static str {
        "quantized-chain-fusion"
    }

    fn run(&self, network: &Network, context: &PassContext<'_>) -> Result<Option<Network>, PassError> {
        if !context.quantized_layers || has_control_flow(network) {
            return Ok(None);
        }
        let readers = consumers(network);
        // Poolings first: an island that starts after a ReLU must not take the ReLU a pooling
        // moves past.
        let pools = |i: usize| integer_max_pool(network, &readers, i);
        let islands = |i: usize| pointwise_island(network, &readers, i);
        let widened = |i: usize| quantize_unwidened(network, &readers, i);
        let narrowed = |i: usize| dequantize_narrowed(network, &readers, i);
        let (mut plans, absorbed) = disjoint_plans(network.layers().len(), &[&pools, &islands, &widened, &narrowed], |p: &Plan| &p.layers);
        if plans.is_empty() {
            return Ok(None);
        }
        let mut rb = Rewriter::new(network);
        for i in 0..network.layers().len() {
            if let Some(plan) = plans.remove(&i) {
                let name = plan.layers.iter().map(|&j| network.layer(LayerId(j)).name.as_str()).collect::<Vec<_>>().join(" + ");
                let inputs = rb.get_slots(&plan.inputs)?;
                rb.add(&name, plan.kind, inputs, &[plan.output])?;
            } else if !absorbed.contains(&i) {
                rb.keep(i)?;
            }
        }
        Ok(Some(rb.finish_as_source()?))
    }
}

/// One island: the layers it replaces (head first, the layer it is emitted at last), the
/// new layer and its input slots, and the tensor its output carries.
struct Plan {
    layers: Vec<usize>,
    kind: LayerKind,
    inputs: Vec<Option<TensorId>>,
    output: TensorId,
}

/// A known one-element tensor of type `dtype`.
fn scalar(net: &Network, t: Option<TensorId>, dtype: DataType) -> Option<TensorId> {
    let t = t?;
    known_value(net, t).is_some_and(|v| v.len() == 1 && v.dtype() == dtype).then_some(t)
}

/// A per-tensor DequantizeLinear layer's `(integer input, scale, zero point)`: an 8-bit input,
/// an f32 scale and a zero point of the input's type, both known single values.
fn per_tensor_dequantize(net: &Network, layer: usize) -> Option<(TensorId, TensorId, Option<TensorId>)> {
    let l = net.layer(LayerId(layer));
    // One that writes another type than its scale's rounds its values: not the island's f32.
    if !matches!(l.kind, LayerKind::Dequantize { to: None, .. }) {
        return None;
    }
    let slot = |i: usize| l.inputs.get(i).copied().flatten();
    let x = slot(0).filter(|&x| net.tensor(x).dtype.is_8bit_integer())?;
    let scale = scalar(net, slot(1), DataType::F32)?;
    let zero = match slot(2) {
        None => None,
        z => Some(scalar(net, z, net.tensor(x).dtype)?),
    };
    Some((x, scale, zero))
}

/// A per-tensor QuantizeLinear layer's `(type, scale, zero point)`: to an 8-bit type, with an
/// f32 scale and a zero point of that type, both known single values.
fn per_tensor_quantize(net: &Network, layer: usize) -> Option<(DataType, TensorId, Option<TensorId>)> {
    let l = net.layer(LayerId(layer));
    let LayerKind::Quantize { to, .. } = l.kind else { return None };
    let slot = |i: usize| l.inputs.get(i).copied().flatten();
    let scale = scalar(net, slot(1), DataType::F32).filter(|_| to.is_8bit_integer())?;
    let zero = match slot(2) {
        None => None,
        z => Some(scalar(net, z, to)?),
    };
    Some((to, scale, zero))
}

/// The pointwise head at layer `i` as a fused layer (a chain fused before, or one plain
/// pointwise layer), when it computes in f32.
fn head(net: &Network, i: usize) -> Option<(FusedParams, Vec<Option<TensorId>>)> {
    let l = net.layer(LayerId(i));
    let out = *l.outputs.first()?;
    if l.outputs.len() != 1 || net.tensor(out).dtype != DataType::F32 {
        return None;
    }
    let params = match &l.kind {
        LayerKind::Fused(p) if p.dequantized.is_empty() && matches!(p.anchor, FusedAnchor::Activation(_) | FusedAnchor::Unary(_) | FusedAnchor::Elementwise(_)) => p.clone(),
        LayerKind::Activation { .. } => FusedParams::new(FusedAnchor::from_kind(&l.kind)?, l.inputs.len(), Vec::new()),
        LayerKind::Unary { op } if super::fuse::float_unary(*op) => FusedParams::new(FusedAnchor::from_kind(&l.kind)?, l.inputs.len(), Vec::new()),
        LayerKind::Elementwise { op } if super::fuse::fusable_binary(*op) && l.inputs.len() == 2 => {
            FusedParams::new(FusedAnchor::from_kind(&l.kind)?, 2, Vec::new())
        }
        // A layer norm of dequantized levels: the island's first step.
        LayerKind::Normalization { ref axes, epsilon, .. } if super::graph::last_axis_layer_norm(net, i) => {
            let x = l.inputs.first().copied().flatten()?;
            let read_dequantized = net.tensor(x).dtype == DataType::F32 && per_tensor_dequantize(net, net.tensor(x).producer?.0 .0).is_some();
            if !read_dequantized {
                return None;
            }
            FusedParams::new(FusedAnchor::Identity, 1, vec![PostOp::Normalization { axis: axes[0], epsilon: *epsilon, scale: 1, bias: 2 }])
        }
        _ => return None,
    };
    Some((params, l.inputs.clone()))
}

/// `DequantizeLinear → MaxPool → QuantizeLinear` with one type, scale and zero point: the
/// pooling on the integers; with a ReLU before the pooling, the pooling on the integers, then
/// the ReLU and the QuantizeLinear as an island.
fn integer_max_pool(net: &Network, readers: &[Vec<(usize, usize)>], i: usize) -> Option<Plan> {
    use crate::ir::layer::{ActivationKind, PoolingKind};
    let l = net.layer(LayerId(i));
    let LayerKind::Pooling(p) = &l.kind else { return None };
    if p.kind != PoolingKind::Max || l.outputs.len() != 1 {
        return None;
    }
    let input = l.inputs.first().copied().flatten()?;
    let before = net.tensor(input).producer?.0 .0;
    let relu = net.layer(LayerId(before)).kind == (LayerKind::Activation { kind: ActivationKind::Relu });
    let dequantize_at = match relu {
        true => {
            let every_window_holds_a_cell = p.dilations.iter().all(|&d| d == 1)
                && !p.ceil_mode
                && p.window.iter().zip(&p.pre_padding).zip(&p.post_padding).all(|((&k, &pre), &post)| pre < k && post < k);
            if !every_window_holds_a_cell || only_reader(net, readers, input) != Some(i) {
                return None;
            }
            net.tensor(net.layer(LayerId(before)).inputs.first().copied().flatten()?).producer?.0 .0
        }
        false => before,
    };
    let (x, scale, zero) = per_tensor_dequantize(net, dequantize_at)?;
    let q_at = only_reader(net, readers, l.outputs[0])?;
    let q = net.layer(LayerId(q_at));
    let slot = |k: usize| q.inputs.get(k).copied().flatten();
    let LayerKind::Quantize { to, .. } = q.kind else { return None };
    let value = |t: Option<TensorId>| t.map(|t| known_value(net, t).map(|v| v.to_f64_vec()));
    let positive = value(Some(scale)).flatten().is_some_and(|s| s[0] > 0.0 && s[0].is_finite());
    if !positive || slot(0) != Some(l.outputs[0]) {
        return None;
    }
    if relu {
        // Pool the integers, then dequantize, ReLU and quantize them: one layer, whose levels a
        // backend may map through a table after the maximum (every step is non-decreasing).
        let (to, q_scale, q_zero) = per_tensor_quantize(net, q_at)?;
        let mut inputs = vec![Some(x), Some(scale)];
        inputs.extend(zero.map(Some));
        let dequantize = PostOp::Dequantize { scale: 1, zero: zero.map(|_| 2) };
        let quantize = PostOp::Quantize { to, scale: push(&mut inputs, q_scale), zero: q_zero.map(|z| push(&mut inputs, z)) };
        let params = FusedParams::new(FusedAnchor::Pooling(p.clone()), 1, vec![dequantize, PostOp::Activation(ActivationKind::Relu), quantize]);
        return Some(Plan { layers: vec![before, i, q_at], kind: LayerKind::Fused(params), inputs, output: q.outputs[0] });
    }
    let zero_of = |z: Option<TensorId>| value(z).unwrap_or(Some(vec![0.0]));
    let same = to == net.tensor(x).dtype && value(slot(1)) == value(Some(scale)) && zero_of(slot(2)) == zero_of(zero) && zero_of(zero).is_some();
    same.then(|| Plan { layers: vec![i, q_at], kind: l.kind.clone(), inputs: vec![Some(x)], output: q.outputs[0] })
}

/// A QuantizeLinear reading a Cast that widens f16 / bf16 to f32 (what a reduced-precision
/// build puts between a float layer and its quantization): the QuantizeLinear reads the narrow
/// tensor itself. Widening is exact and every backend quantizes a value the same whatever its
/// float type (the ratio to the scale in f32 or wider), so this drops a pass over the tensor.
fn quantize_unwidened(net: &Network, readers: &[Vec<(usize, usize)>], i: usize) -> Option<Plan> {
    let q = net.layer(LayerId(i));
    if !matches!(q.kind, LayerKind::Quantize { .. }) {
        return None;
    }
    let widened = q.inputs.first().copied().flatten()?;
    let cast_at = net.tensor(widened).producer?.0 .0;
    let cast = net.layer(LayerId(cast_at));
    let narrow = cast.inputs.first().copied().flatten()?;
    let widening = cast.kind == (LayerKind::Cast { to: DataType::F32 }) && matches!(net.tensor(narrow).dtype, DataType::F16 | DataType::BF16);
    if !widening || net.outputs().contains(&widened) || only_reader(net, readers, widened) != Some(i) {
        return None;
    }
    let mut inputs = q.inputs.clone();
    inputs[0] = Some(narrow);
    Some(Plan { layers: vec![cast_at, i], kind: q.kind.clone(), inputs, output: q.outputs[0] })
}

/// A Cast to f16 / bf16 reading a DequantizeLinear's f32 (what a reduced-precision build puts
/// between it and a narrowed float layer): one DequantizeLinear writing the narrow type, the
/// f32 value rounded once as the Cast rounded it (TensorRT's `IDequantizeLayer::setToType`).
fn dequantize_narrowed(net: &Network, readers: &[Vec<(usize, usize)>], i: usize) -> Option<Plan> {
    let cast = net.layer(LayerId(i));
    let LayerKind::Cast { to: to @ (DataType::F16 | DataType::BF16) } = cast.kind else { return None };
    let wide = cast.inputs.first().copied().flatten()?;
    let dq_at = net.tensor(wide).producer?.0 .0;
    let dq = net.layer(LayerId(dq_at));
    let LayerKind::Dequantize { axis, to: None } = dq.kind else { return None };
    if net.tensor(wide).dtype != DataType::F32 || net.outputs().contains(&wide) || only_reader(net, readers, wide) != Some(i) {
        return None;
    }
    Some(Plan { layers: vec![dq_at, i], kind: LayerKind::Dequantize { axis, to: Some(to) }, inputs: dq.inputs.clone(), output: cast.outputs[0] })
}

/// A pointwise layer or chain with its dequantized inputs and the quantizations after it.
fn pointwise_island(net: &Network, readers: &[Vec<(usize, usize)>], i: usize) -> Option<Plan> {
    let (mut params, mut inputs) = head(net, i)?;
    let mut layers = vec![i];
    // Inputs produced by a per-tensor DequantizeLinear are read as integers.
    for slot in 0..inputs.len() {
        let Some(t) = inputs[slot] else { continue };
        let Some((producer, _)) = net.tensor(t).producer else { continue };
        let Some((x, scale, zero)) = per_tensor_dequantize(net, producer.0) else { continue };
        inputs[slot] = Some(x);
        let scale_slot = push(&mut inputs, scale);
        let zero_slot = zero.map(|z| push(&mut inputs, z));
        params.dequantized.push(DequantizedInput { input: slot, scale: scale_slot, zero: zero_slot });
    }
    // Then the quantizations and pointwise layers after it.
    let mut running = *net.layer(LayerId(i)).outputs.first()?;
    while let Some(next) = only_reader(net, readers, running) {
        let l = net.layer(LayerId(next));
        let slot = |k: usize| l.inputs.get(k).copied().flatten();
        let running_type = net.tensor(running).dtype;
        match l.kind {
            LayerKind::Quantize { .. } if running_type == DataType::F32 && slot(0) == Some(running) => {
                let Some((to, scale, zero)) = per_tensor_quantize(net, next) else { break };
                let zero = zero.map(|z| push(&mut inputs, z));
                let scale = push(&mut inputs, scale);
                params.epilogue.push(PostOp::Quantize { to, scale, zero });
            }
            LayerKind::Dequantize { .. } if slot(0) == Some(running) => {
                let Some((_, scale, zero)) = per_tensor_dequantize(net, next) else { break };
                let scale = push(&mut inputs, scale);
                let zero = zero.map(|z| push(&mut inputs, z));
                params.epilogue.push(PostOp::Dequantize { scale, zero });
            }
            // A layer norm of the island's rows (one per chain: each is a pass of its own).
            LayerKind::Normalization { ref axes, epsilon, .. }
                if running_type == DataType::F32
                    && slot(0) == Some(running)
                    && super::graph::last_axis_layer_norm(net, next)
                    && net.tensor(l.outputs[0]).dtype == DataType::F32
                    && !params.epilogue.iter().any(|p| matches!(p, PostOp::Normalization { .. })) =>
            {
                let (Some(scale), Some(bias)) = (slot(1), slot(2)) else { break };
                let (scale, bias) = (push(&mut inputs, scale), push(&mut inputs, bias));
                params.epilogue.push(PostOp::Normalization { axis: axes[0], epsilon, scale, bias });
            }
            _ => {
                let Some(step) = next_step(net, readers, running).filter(|_| running_type == DataType::F32) else { break };
                if net.tensor(l.outputs[0]).dtype != DataType::F32 {
                    break;
                }
                let mut post = step.post;
                if let (PostOp::Elementwise { operand, .. }, Some(t)) = (&mut post, step.operand) {
                    *operand = push(&mut inputs, t);
                }
                params.epilogue.push(post);
            }
        }
        layers.push(next);
        running = l.outputs[0];
    }
    // Worth a layer only when it reads or writes integers; a chain ending dequantized would
    // write f32 where the integers were.
    let quantizes = params.epilogue.iter().any(|p| matches!(p, PostOp::Quantize { .. }));
    if matches!(params.epilogue.last(), Some(PostOp::Dequantize { .. })) {
        params.epilogue.pop();
        let scale_and_zero = 1 + usize::from(net.layer(LayerId(*layers.last()?)).inputs.get(2).copied().flatten().is_some());
        inputs.truncate(inputs.len() - scale_and_zero);
        layers.pop();
        running = net.layer(LayerId(*layers.last()?)).outputs[0];
    }
    (quantizes || !params.dequantized.is_empty()).then_some(Plan { layers, kind: LayerKind::Fused(params), inputs, output: running })
}

/// Appends `t` as an input slot and returns the slot.
fn push(inputs: &mut Vec<Option<TensorId>>, t: TensorId) -> usize {
    inputs.push(Some(t));
    inputs.len() - 1
}

//! Q/DQ fusion (explicit quantization, seeds §6.5): `DequantizeLinear → Convolution /
//! MatrixMultiply (DequantizeLinear weights) → bias → ReLU → QuantizeLinear` becomes one
//! [`LayerKind::Quantized`] layer that sums the 8-bit products exactly and requantizes once
//! per output channel, as QLinearConv and INT8 tensor cores do.
//!
//! It runs first, before folding turns the weights' DequantizeLinear into float constants,
//! and only for backends that run quantized layers ([`PassContext::quantized_layers`]):
//! elsewhere the Q/DQ graph runs as the float emulation it is written as.
//!
//! What is absorbed: the two DequantizeLinear reads (their layers stay for other readers and
//! are dropped when unread), a bias (the convolution's third input, or a per-channel Add
//! after a matrix product: int32 behind a DequantizeLinear whose scale is `x_scale·w_scale`,
//! as QLinearConv's, else float; a bias of zeros is dropped), a skip connection's Add (its
//! other operand read as the residual: the 8-bit tensor behind a per-tensor
//! DequantizeLinear, else the float operand), one ReLU, and the QuantizeLinear; without a
//! QuantizeLinear the layer ends in the region's float type. After the QuantizeLinear, the
//! island onnxruntime writes there for a ReLU (`DequantizeLinear → [Relu →] QuantizeLinear`)
//! becomes the layer's second quantization ([`crate::ir::quantized::Requantization`]), so the
//! levels between are never written. Each tensor absorbed has one
//! reader and is not a network output. FP8 (float8 e4m3fn x and w, zero points 0) fuses the
//! same way, ending in float: its QuantizeLinear stays the next layer's. The importer's
//! expansion of ONNX ConvInteger / MatMulInteger becomes an integer layer ending in its int32
//! sums (`passes/integer_sums.rs`).

use super::graph::{consumers, disjoint_plans, has_control_flow, known_value, only_reader};
use super::{Pass, PassContext, PassError};
use crate::ir::dtype::DataType;
use crate::ir::layer::{ActivationKind, ElementwiseOp, LayerKind, MatrixOp};
use crate::ir::network::{Network, TensorId};
use crate::ir::quantized::{QuantizedAnchor, QuantizedParams as Q, Requantization};
use crate::ir::rewrite::Rewriter;

#[derive(Clone, Copy, Debug, Default)]
pub struct QuantizedFusion;

impl Pass for QuantizedFusion {
    fn name(&self) -> &'static str {
        "quantized-fusion"
    }

    fn run(&self, network: &Network, context: &PassContext<'_>) -> Result<Option<Network>, PassError> {
        if !context.quantized_layers || has_control_flow(network) {
            return Ok(None);
        }
        let readers = consumers(network);
        let qdq = |i| find(network, &readers, i);
        let sums = |i| super::integer_sums::find(network, &readers, i);
        let (plans, absorbed) = disjoint_plans(network.layers().len(), &[&qdq, &sums], |p: &Plan| &p.layers);
        if plans.is_empty() {
            return Ok(None);
        }
        let mut rb = Rewriter::new(network);
        for i in 0..network.layers().len() {
            if let Some(plan) = plans.get(&i) {
                let mut inputs = rb.get_slots(&plan.inputs)?;
                if let Some(s) = plan.x_layout {
                    // The reshape or transpose between x's DequantizeLinear and the anchor,
                    // applied to the integers instead.
                    let layout = network.layer(crate::LayerId(s));
                    let mut slots = rb.get_slots(&layout.inputs)?;
                    slots[0] = inputs[Q::X];
                    let id = rb.out_mut().add_layer(&format!("{} (integer)", layout.name), layout.kind.clone(), slots)?;
                    inputs[Q::X] = Some(rb.out().output(id, 0));
                }
                let name = plan.layers.iter().map(|&j| network.layer(crate::LayerId(j)).name.as_str()).collect::<Vec<_>>().join(" + ");
                rb.add(&name, LayerKind::Quantized(plan.params.clone()), inputs, &[plan.output])?;
            } else if !absorbed.contains(&i) {
                rb.keep(i)?;
            }
        }
        Ok(Some(rb.finish_as_source()?))
    }
}

/// One fusion: the layers it replaces (anchor first, the layer it is emitted at last), the
/// new layer's input slots and the tensor its output carries.
pub(super) struct Plan {
    pub(super) layers: Vec<usize>,
    /// A reshape or transpose between x's DequantizeLinear and the anchor (kept for any other
    /// reader; the fused layer reads a copy of it on the integers).
    pub(super) x_layout: Option<usize>,
    pub(super) inputs: Vec<Option<TensorId>>,
    pub(super) params: Q,
    pub(super) output: TensorId,
}

/// A DequantizeLinear's reading: its integer input and known scale and zero point.
struct Dequantized {
    q: TensorId,
    scale: TensorId,
    zero: Option<TensorId>,
    scales: Vec<f64>,
    axis: Option<usize>,
}

impl Dequantized {
    /// One scale, and one zero point or none.
    fn per_tensor(&self, net: &Network) -> bool {
        self.scales.len() == 1 && self.zero.is_none_or(|z| known_value(net, z).is_some_and(|v| v.len() == 1))
    }
}

fn dequantized(net: &Network, t: TensorId) -> Option<Dequantized> {
    let (producer, _) = net.tensor(t).producer?;
    let l = net.layer(producer);
    let LayerKind::Dequantize { axis, to: None } = l.kind else { return None };
    let (q, scale) = (l.inputs.first().copied().flatten()?, l.inputs.get(1).copied().flatten()?);
    let zero = l.inputs.get(2).copied().flatten();
    if !Q::float_output_type(net.tensor(t).dtype) || zero.is_some_and(|z| known_value(net, z).is_none()) {
        return None;
    }
    let scales = known_value(net, scale)?.to_f64_vec();
    Some(Dequantized { q, scale, zero, scales, axis })
}

fn find(net: &Network, readers: &[Vec<(usize, usize)>], i: usize) -> Option<Plan> {
    let l = net.layer(crate::LayerId(i));
    let anchor = match &l.kind {
        LayerKind::Convolution(p) => QuantizedAnchor::Convolution(p.clone()),
        LayerKind::MatrixMultiply { op_a, op_b }
            if !matches!(op_a, MatrixOp::Vector) && !matches!(op_b, MatrixOp::Vector) =>
        {
            QuantizedAnchor::MatrixMultiply { op_a: *op_a, op_b: *op_b }
        }
        _ => return None,
    };
    let out = *l.outputs.first()?;
    if !Q::float_output_type(net.tensor(out).dtype) {
        return None;
    }
    let x_tensor = l.inputs.first().copied().flatten()?;
    let (x, x_layout) = match dequantized(net, x_tensor) {
        Some(x) => (x, None),
        None => through_layout(net, x_tensor)?,
    };
    let w = dequantized(net, l.inputs.get(1).copied().flatten()?)?;
    let (x_type, w_type) = (net.tensor(x.q).dtype, net.tensor(w.q).dtype);
    let w_rank = net.tensor(w.q).shape.rank();
    let per_channel_ok = w.scales.len() == 1 || w.axis == Some(anchor.weight_channel_axis(w_rank));
    // FP8 (e4m3fn x and w): no zero points (ONNX allows only 0 there), a float output.
    let fp8 = Q::is_fp8(x_type) && Q::is_fp8(w_type);
    let zero_free = |z: Option<TensorId>| z.is_none_or(|z| known_value(net, z).is_some_and(|v| v.to_f64_vec().iter().all(|&v| v == 0.0)));
    let operands_ok = (x_type.is_8bit_integer() && w_type.is_8bit_integer()) || (fp8 && zero_free(x.zero) && zero_free(w.zero));
    if !operands_ok || x.scales.len() != 1 || !per_channel_ok {
        return None;
    }
    let mut layers = vec![i];
    let mut inputs = vec![None; Q::SLOTS];
    inputs[Q::X] = Some(x.q);
    inputs[Q::W] = Some(w.q);
    inputs[Q::X_SCALE] = Some(x.scale);
    inputs[Q::X_ZERO] = x.zero.filter(|_| !fp8);
    inputs[Q::W_SCALE] = Some(w.scale);
    inputs[Q::W_ZERO] = w.zero.filter(|_| !fp8);
    let bias_scale = |k: usize| x.scales[0] as f32 * w.scales[if w.scales.len() == 1 { 0 } else { k }] as f32;
    // An FP8 layer's bias stays float: its sums are not integers to add an int32 bias to.
    let bias_slot = |b: TensorId| match fp8 {
        _ if zero_bias(net, b) => None,
        true => Some(b),
        false => Some(bias_input(net, b, w.scales.len(), &bias_scale)),
    };
    let mut running = out;
    match anchor {
        QuantizedAnchor::Convolution(_) => {
            if let Some(b) = l.inputs.get(2).copied().flatten() {
                inputs[Q::BIAS] = bias_slot(b);
            }
        }
        QuantizedAnchor::MatrixMultiply { .. } => {
            // A per-channel Add right after the product (a Gemm's C) is its bias.
            if let Some(next) = only_reader(net, readers, running) {
                let add = net.layer(crate::LayerId(next));
                if let (LayerKind::Elementwise { op: ElementwiseOp::Sum }, [Some(a), Some(b)]) = (&add.kind, add.inputs.as_slice()) {
                    let bias = if *a == running { *b } else { *a };
                    let bias_shape = net.tensor(bias).shape.clone();
                    let n = net.tensor(running).shape.dims().last().and_then(|d| d.fixed());
                    if bias_shape.rank() == 1 && bias_shape.dims()[0].fixed() == n && Q::float_output_type(net.tensor(bias).dtype) {
                        inputs[Q::BIAS] = bias_slot(bias);
                        layers.push(next);
                        running = add.outputs[0];
                    }
                }
            }
        }
    }
    if let Some((add, sum, slots)) = residual_add(net, readers, i, running) {
        [inputs[Q::RESIDUAL], inputs[Q::RESIDUAL_SCALE], inputs[Q::RESIDUAL_ZERO]] = slots;
        layers.push(add);
        running = sum;
    }
    let mut relu = false;
    if let Some(next) = only_reader(net, readers, running) {
        let act = net.layer(crate::LayerId(next));
        if act.kind == (LayerKind::Activation { kind: ActivationKind::Relu }) {
            relu = true;
            layers.push(next);
            running = act.outputs[0];
        }
    }
    let mut output = DataType::F32;
    let mut then = None;
    if let Some(next) = only_reader(net, readers, running).filter(|_| !fp8) {
        let q = net.layer(crate::LayerId(next));
        if let LayerKind::Quantize { to, .. } = q.kind {
            let scale = q.inputs.get(1).copied().flatten();
            let zero = q.inputs.get(2).copied().flatten();
            let one = |t: Option<TensorId>| t.and_then(|t| known_value(net, t)).is_some_and(|v| v.len() == 1);
            if to.is_8bit_integer() && one(scale) && (zero.is_none() || one(zero)) {
                inputs[Q::Y_SCALE] = scale;
                inputs[Q::Y_ZERO] = zero;
                output = to;
                layers.push(next);
                running = q.outputs[0];
                if let Some((more, end)) = requantized_relu(net, readers, running, scale, zero) {
                    relu = true;
                    layers.extend(more);
                    running = end;
                }
                if let Some(r) = requantization(net, readers, i, running, scale, zero) {
                    [inputs[Q::THEN_SCALE], inputs[Q::THEN_ZERO]] = [r.scale, r.zero];
                    [inputs[Q::JOIN], inputs[Q::JOIN_SCALE], inputs[Q::JOIN_ZERO]] = r.join;
                    then = Some(r.then);
                    layers.extend(r.layers);
                    running = r.output;
                }
            }
        }
    }
    // A float output takes the region's float type: an FP16 build narrowed the Q/DQ region
    // before this pass ran, and the layer rounds its f32 result to f16 once, as a Cast would.
    if output == DataType::F32 {
        output = net.tensor(running).dtype;
    }
    Some(Plan { layers, x_layout, inputs, params: Q { anchor, relu, output, then, lookup: None }, output: running })
}

/// `DequantizeLinear → ReLU → QuantizeLinear` after an integer output `q`, all with q's own
/// scale and zero point (how onnxruntime's `quantize_static` quantizes a Conv → Relu pair):
/// that is `max(q, zero)` exactly, the integer layer's ReLU. The layers absorbed and the
/// last one's output.
fn requantized_relu(net: &Network, readers: &[Vec<(usize, usize)>], q: TensorId, scale: Option<TensorId>, zero: Option<TensorId>) -> Option<(Vec<usize>, TensorId)> {
    let values = |t: Option<TensorId>| t.map(|t| known_value(net, t).map(|v| v.to_f64_vec()));
    let same = |s: Option<TensorId>, z: Option<TensorId>| {
        let zero_of = |z: Option<TensorId>| values(z).map_or(Some(vec![0.0]), |v| v);
        values(s).flatten().is_some() && values(s) == values(scale) && zero_of(z) == zero_of(zero)
    };
    let dq_at = only_reader(net, readers, q)?;
    let dq = net.layer(crate::LayerId(dq_at));
    let slot = |l: &crate::Layer, i: usize| l.inputs.get(i).copied().flatten();
    if !matches!(dq.kind, LayerKind::Dequantize { to: None, .. }) || slot(dq, 0) != Some(q) || !same(slot(dq, 1), slot(dq, 2)) {
        return None;
    }
    let relu_at = only_reader(net, readers, dq.outputs[0])?;
    let relu = net.layer(crate::LayerId(relu_at));
    if relu.kind != (LayerKind::Activation { kind: ActivationKind::Relu }) {
        return None;
    }
    let q2_at = only_reader(net, readers, relu.outputs[0])?;
    let q2 = net.layer(crate::LayerId(q2_at));
    let LayerKind::Quantize { to, .. } = q2.kind else { return None };
    (to == net.tensor(q).dtype && same(slot(q2, 1), slot(q2, 2))).then(|| (vec![dq_at, relu_at, q2_at], q2.outputs[0]))
}

/// A second quantization after the levels `q` (scale `scale`, zero point `zero`): the layers
/// absorbed, the [`Requantization`], its scale and zero point, its join's slots (all `None`
/// without one) and the tensor it writes.
struct SecondQuantization {
    layers: Vec<usize>,
    then: Requantization,
    scale: Option<TensorId>,
    zero: Option<TensorId>,
    join: [Option<TensorId>; 3],
    output: TensorId,
}

/// `DequantizeLinear(q) → [Add(DequantizeLinear(j)) →] [Relu →] QuantizeLinear` after the
/// levels `q` of the integer layer `anchor`, the DequantizeLinear with q's own scale and zero
/// point and the QuantizeLinear's a known single value (how onnxruntime's `quantize_static`
/// writes a ReLU or a skip connection after a convolution: the convolution's output quantized,
/// then dequantized).
fn requantization(net: &Network, readers: &[Vec<(usize, usize)>], anchor: usize, q: TensorId, scale: Option<TensorId>, zero: Option<TensorId>) -> Option<SecondQuantization> {
    let values = |t: Option<TensorId>| t.map(|t| known_value(net, t).map(|v| v.to_f64_vec()));
    let zero_of = |z: Option<TensorId>| values(z).map_or(Some(vec![0.0]), |v| v);
    let dq_at = only_reader(net, readers, q)?;
    let dq = net.layer(crate::LayerId(dq_at));
    let slot = |l: &crate::Layer, i: usize| l.inputs.get(i).copied().flatten();
    let own_scale = values(slot(dq, 1)).flatten().is_some() && values(slot(dq, 1)) == values(scale) && zero_of(slot(dq, 2)) == zero_of(zero);
    if !matches!(dq.kind, LayerKind::Dequantize { to: None, .. }) || slot(dq, 0) != Some(q) || !own_scale || net.tensor(dq.outputs[0]).dtype != DataType::F32 {
        return None;
    }
    let mut layers = vec![dq_at];
    let mut running = dq.outputs[0];
    let mut next = only_reader(net, readers, running)?;
    let mut join = [None; 3];
    if let Some((add, sum, slots)) = joined(net, anchor, next, running) {
        join = slots;
        layers.push(add);
        running = sum;
        next = only_reader(net, readers, running)?;
    }
    let relu = net.layer(crate::LayerId(next)).kind == (LayerKind::Activation { kind: ActivationKind::Relu });
    if relu {
        layers.push(next);
        running = net.layer(crate::LayerId(next)).outputs[0];
        next = only_reader(net, readers, running)?;
    }
    let q2 = net.layer(crate::LayerId(next));
    let LayerKind::Quantize { to, .. } = q2.kind else { return None };
    let (scale2, zero2) = (slot(q2, 1), slot(q2, 2));
    let one_f32 = scale2.is_some_and(|s| net.tensor(s).dtype == DataType::F32) && values(scale2).flatten().is_some_and(|v| v.len() == 1);
    let zero_ok = zero2.is_none() || values(zero2).flatten().is_some_and(|v| v.len() == 1);
    if !to.is_8bit_integer() || slot(q2, 0) != Some(running) || !one_f32 || !zero_ok {
        return None;
    }
    layers.push(next);
    Some(SecondQuantization { layers, then: Requantization { relu, to }, scale: scale2, zero: zero2, join, output: q2.outputs[0] })
}

/// A skip connection's Add (layer `at`) of the dequantized levels `running` and an f32
/// per-tensor DequantizeLinear of another 8-bit tensor of the same shape: the Add, its output
/// and the join's slots (that tensor, its scale and zero point). Where the other tensor is the
/// levels of a later convolution or product, that layer takes the Add instead, so of two
/// layers meeting at a join exactly one folds it.
fn joined(net: &Network, anchor: usize, at: usize, running: TensorId) -> Option<(usize, TensorId, [Option<TensorId>; 3])> {
    let (other, sum) = skip_add(net, at, running)?;
    let d = dequantized_levels(net, other)?;
    if net.tensor(sum).dtype != DataType::F32 || levels_of_later_anchor(net, anchor, d.q) {
        return None;
    }
    Some((at, sum, [Some(d.q), Some(d.scale), d.zero]))
}

/// Layer `at` as a skip connection's Add of `running` and another operand of its shape (the
/// Add's output has it too): that operand and the Add's output.
fn skip_add(net: &Network, at: usize, running: TensorId) -> Option<(TensorId, TensorId)> {
    let add = net.layer(crate::LayerId(at));
    let (LayerKind::Elementwise { op: ElementwiseOp::Sum }, [Some(a), Some(b)]) = (&add.kind, add.inputs.as_slice()) else { return None };
    let other = if *a == running { *b } else { *a };
    let (sum, shape) = (add.outputs[0], &net.tensor(running).shape);
    (other != running && net.tensor(other).shape == *shape && net.tensor(sum).shape == *shape).then_some((other, sum))
}

/// `t` as an f32 per-tensor DequantizeLinear (one f32 scale, one zero point or none) of an
/// 8-bit tensor: what an integer layer's epilogue dequantizes itself.
fn dequantized_levels(net: &Network, t: TensorId) -> Option<Dequantized> {
    let d = dequantized(net, t)?;
    let f32_scale = net.tensor(d.scale).dtype == DataType::F32;
    (net.tensor(t).dtype == DataType::F32 && f32_scale && net.tensor(d.q).dtype.is_8bit_integer() && d.per_tensor(net)).then_some(d)
}

/// Whether `t` is the QuantizeLinear of a convolution's or product's output (through its bias
/// Add or ReLU) that comes after layer `anchor`.
fn levels_of_later_anchor(net: &Network, anchor: usize, t: TensorId) -> bool {
    let Some((q, _)) = net.tensor(t).producer.filter(|(q, _)| matches!(net.layer(*q).kind, LayerKind::Quantize { .. })) else { return false };
    net.layer(q).inputs.first().copied().flatten().is_some_and(|x| later_anchor_behind(net, anchor, x, 3))
}

/// Whether `t` is a convolution's or product's output after layer `anchor`, seen through at
/// most `depth` Adds and ReLUs.
fn later_anchor_behind(net: &Network, anchor: usize, t: TensorId, depth: usize) -> bool {
    let Some((p, _)) = net.tensor(t).producer.filter(|_| depth > 0) else { return false };
    let l = net.layer(p);
    match l.kind {
        LayerKind::Convolution(_) | LayerKind::MatrixMultiply { .. } => p.0 > anchor,
        LayerKind::Elementwise { op: ElementwiseOp::Sum } | LayerKind::Activation { kind: ActivationKind::Relu } => {
            l.inputs.iter().flatten().any(|&i| later_anchor_behind(net, anchor, i, depth - 1))
        }
        _ => false,
    }
}

/// A skip connection's Add after the anchor `anchor` (and its bias) at `running`: its other
/// operand has the same shape and is not a later convolution's or product's, so where two
/// such layers meet at an Add the later one takes it. The Add, its output and the residual's slots: the
/// 8-bit tensor behind a per-tensor DequantizeLinear with its scale and zero point, else the
/// float operand itself.
fn residual_add(net: &Network, readers: &[Vec<(usize, usize)>], anchor: usize, running: TensorId) -> Option<(usize, TensorId, [Option<TensorId>; 3])> {
    let at = only_reader(net, readers, running)?;
    let (other, sum) = skip_add(net, at, running)?;
    let r = net.tensor(other);
    let later_anchor = |p: crate::LayerId| p.0 > anchor && matches!(net.layer(p).kind, LayerKind::Convolution(_) | LayerKind::MatrixMultiply { .. });
    if r.dtype != net.tensor(sum).dtype || r.producer.is_some_and(|(p, _)| later_anchor(p)) {
        return None;
    }
    let slots = match dequantized_levels(net, other) {
        // An f32 DequantizeLinear: the residual's f32 dequantization is then its own.
        Some(d) => [Some(d.q), Some(d.scale), d.zero],
        None => [Some(other), None, None],
    };
    Some((at, sum, slots))
}

/// A per-tensor DequantizeLinear read through a Shuffle (a Flatten before a Gemm): moving the
/// DequantizeLinear after it is exact, since one scale applies to every element.
fn through_layout(net: &Network, t: TensorId) -> Option<(Dequantized, Option<usize>)> {
    let (producer, _) = net.tensor(t).producer?;
    let layout = net.layer(producer);
    if !matches!(layout.kind, LayerKind::Shuffle(_)) {
        return None;
    }
    let d = dequantized(net, layout.inputs.first().copied().flatten()?)?;
    d.per_tensor(net).then_some((d, Some(producer.0)))
}

/// Whether a bias is all zeros: it adds nothing, so the layer has none, whatever its scale. An
/// untrained model's BatchNorm-folded convolutions all have zero biases, which the PyTorch
/// exporter shares among them (through Identity nodes), and onnxruntime's quantizer reads
/// through another layer's DequantizeLinear (whose scale is not theirs) or leaves float; an
/// FP16 build may read them through a Cast. [`zeros`] sees through all of these.
fn zero_bias(net: &Network, bias: TensorId) -> bool {
    zeros(net, bias, 8)
}

/// Whether `t` is provably all zeros: a constant of zeros, or zeros passed through a Cast or
/// an Identity, dequantized with a zero point of zeros (or none), or quantized by a known
/// nonzero scale with such a zero point; at most `depth` layers up.
fn zeros(net: &Network, t: TensorId, depth: usize) -> bool {
    if let Some(v) = known_value(net, t) {
        return v.to_f64_vec().iter().all(|&x| x == 0.0);
    }
    let Some((producer, _)) = net.tensor(t).producer.filter(|_| depth > 0) else { return false };
    let l = net.layer(producer);
    let input = |i: usize| l.inputs.get(i).copied().flatten();
    let zero_point_zeros = || input(2).is_none_or(|z| zeros(net, z, depth - 1));
    match l.kind {
        LayerKind::Cast { .. } | LayerKind::Identity => input(0).is_some_and(|x| zeros(net, x, depth - 1)),
        LayerKind::Dequantize { .. } => input(0).is_some_and(|x| zeros(net, x, depth - 1)) && zero_point_zeros(),
        LayerKind::Quantize { .. } => {
            let scale_nonzero = input(1).and_then(|s| known_value(net, s)).is_some_and(|s| s.to_f64_vec().iter().all(|&v| v != 0.0 && v.is_finite()));
            scale_nonzero && input(0).is_some_and(|x| zeros(net, x, depth - 1)) && zero_point_zeros()
        }
        _ => false,
    }
}

/// The bias slot's tensor: the int32 behind a DequantizeLinear whose scale is `x_scale·w_scale`
/// per channel (QLinearConv's bias), else the float bias itself.
fn bias_input(net: &Network, bias: TensorId, channels: usize, bias_scale: &dyn Fn(usize) -> f32) -> TensorId {
    let Some(d) = dequantized(net, bias) else { return bias };
    let zero_free = d.zero.and_then(|z| known_value(net, z)).is_none_or(|z| z.to_f64_vec().iter().all(|&v| v == 0.0));
    let matches = (0..channels.max(d.scales.len())).all(|k| {
        let s = d.scales[if d.scales.len() == 1 { 0 } else { k }];
        let want = bias_scale(k) as f64;
        (s - want).abs() <= want.abs() * 1e-6
    });
    if net.tensor(d.q).dtype == DataType::I32 && zero_free && matches {
        d.q
    } else {
        bias
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::tensor::HostTensor;

    /// A float constant read through `steps` (an FP16 build's Casts, the exporter's Identity,
    /// a quantizer's QuantizeLinear / DequantizeLinear with scale 0.5 and no zero point).
    fn bias_through(values: Vec<f32>, steps: &[LayerKind]) -> (Network, TensorId) {
        let mut net = Network::new("bias");
        let constant = |net: &mut Network, t: HostTensor| {
            let w = net.add_weights(t);
            let l = net.add_layer("c", LayerKind::Constant { weights: w }, vec![]).unwrap();
            net.output(l, 0)
        };
        let mut t = constant(&mut net, HostTensor::from_f32(vec![values.len()], values).unwrap());
        let half = constant(&mut net, HostTensor::from_f32(vec![], vec![0.5]).unwrap());
        for (i, kind) in steps.iter().enumerate() {
            let inputs = match kind {
                LayerKind::Quantize { .. } | LayerKind::Dequantize { .. } => vec![Some(t), Some(half), None],
                _ => vec![Some(t)],
            };
            let l = net.add_layer(&format!("step{i}"), kind.clone(), inputs).unwrap();
            t = net.output(l, 0);
        }
        (net, t)
    }

    #[test]
    fn a_zero_bias_is_seen_through_casts_identities_and_quantization_and_a_nonzero_one_is_kept() {
        let cast = |to| LayerKind::Cast { to };
        let chains = [
            vec![],
            vec![cast(DataType::F16)],
            vec![cast(DataType::F16), cast(DataType::F32)],
            vec![LayerKind::Identity, cast(DataType::F16)],
            vec![LayerKind::Quantize { axis: None, to: DataType::I8 }, LayerKind::Dequantize { axis: None, to: None }, LayerKind::Identity],
        ];
        for steps in &chains {
            let (net, t) = bias_through(vec![0.0, -0.0, 0.0], steps);
            assert!(zero_bias(&net, t), "{steps:?}");
            let (net, t) = bias_through(vec![0.0, 1e-3, 0.0], steps);
            assert!(!zero_bias(&net, t), "{steps:?}");
        }
        // A layer that is not value-preserving for zeros stops the walk.
        let (net, t) = bias_through(vec![0.0; 3], &[LayerKind::Activation { kind: ActivationKind::Sigmoid }]);
        assert!(!zero_bias(&net, t));
    }
}

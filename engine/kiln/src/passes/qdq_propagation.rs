//! Q/DQ propagation (explicit quantization, TensorRT's "Q/DQ propagation"): onnxruntime's
//! `quantize_static` wraps every reshape and transpose in its own QuantizeLinear /
//! DequantizeLinear pair (`Q → DQ → Reshape → Q → DQ → Transpose → Q → DQ → MatMul`), which
//! leaves float layout layers between integer tensors and stops the integer fusions at them.
//! Three rewrites, repeated until none applies, move the layout layers onto the integers:
//! - `DQ → layout` becomes `layout → DQ` (the DQ stays for any other reader);
//! - `layout → Q` becomes `Q → layout` when the Q is the layout output's only reader;
//! - `DQ → Q` is dropped when the Q gives back every level the DQ reads: the Q's readers read
//!   the integers (the DQ stays for any other reader);
//! - `layout → pointwise → Q` becomes `pointwise → layout → Q` when the pointwise layer applies
//!   one value to every element (an activation, a float unary op, or a binary op with a known
//!   one-element operand): BERT's exported attention scales Q and K after their head split,
//!   and this lets the Q move onto the integers above, so the bias, the scale and the Q fuse
//!   into one pass over the projection's levels;
//! - `DQ → pointwise → layout` becomes `DQ → layout → pointwise` when the pointwise layer's
//!   other operand is a known constant of more than one element (a bias), only layout layers
//!   (slices too) read its output, and the layout splits it (a Slice, or a layout read only by
//!   Slices): the constant moves through the layout, and the DQ then moves onto the
//!   integers. A packed in-projection (`nn.MultiheadAttention`: one product, its bias, then
//!   the split into Q, K and V by reshape, transpose and slices) then slices its levels, and
//!   each of Q, K and V adds its part of the bias, scales and quantizes in one island.
//!
//! A layout layer's output may also be read by Shape layers (the dynamo exporter's attention
//! reads the keys' shape where it transposes them): they read the moved layout's output, whose
//! dims are the same, and the rewrite is emitted where the layout was, before they read it.
//!
//! Each is exact. A layout layer (Shuffle, Identity) moves elements without arithmetic and a
//! per-tensor Q or DQ, like such a pointwise layer, does the same to every element, so they commute. The
//! cancellation is checked on all 256 levels with the cpu backend's arithmetic, and only where
//! every quotient lies within a quarter level of its rounding, so backends whose division is a
//! few ulps off (WGSL's) round it the same way.
//!
//! Only 8-bit integers with known one-element scales and zero points take part, and the pass
//! runs for backends that run quantized layers ([`PassContext::quantized_layers`]): those run
//! layout layers on 8-bit tensors.

use super::dead::remove_dead_layers;
use super::graph::{consumers, disjoint_plans, has_control_flow, is_layout, known_value, moves_elements};
use super::{Pass, PassContext, PassError};
use crate::ir::dtype::DataType;
use crate::ir::layer::LayerKind;
use crate::ir::network::{LayerId, Network, TensorId};
use crate::ir::rewrite::Rewriter;
use crate::ir::tensor::HostTensor;
use crate::error::NetworkError;
use half::{bf16, f16};

#[derive(Clone, Copy, Debug, Default)]
pub struct QdqPropagation;

impl Pass for QdqPropagation {
    fn name(&self) -> &'static str {
        "qdq-propagation"
    }

    fn run(&self, network: &Network, context: &PassContext<'_>) -> Result<Option<Network>, PassError> {
        if !context.quantized_layers || has_control_flow(network) {
            return Ok(None);
        }
        let mut current: Option<Network> = None;
        // Each sweep moves a DQ down or a Q up past a layout layer, or drops a pair, so sweeps
        // end; the bound only guards against a rule that would undo another.
        for _ in 0..=network.layers().len() {
            match sweep(current.as_ref().unwrap_or(network))? {
                Some(next) => current = Some(remove_dead_layers(&next)),
                None => break,
            }
        }
        Ok(current)
    }
}

/// One rewrite: the layers it replaces (the layer it is emitted at last).
struct Plan {
    layers: Vec<usize>,
    rewrite: Rewrite,
}

enum Rewrite {
    /// `DQ → layout` as `layout → DQ`; the DQ stays where it has other readers.
    SinkDequantize { dequantize: usize, layout: usize, stays: bool },
    /// `layout → Q` as `Q → layout`; `shapes`: Shape layers read the layout's output, which
    /// the new layout's output stands for (emitted where the layout was).
    HoistQuantize { layout: usize, quantize: usize, shapes: bool },
    /// `DQ → Q` as the DQ's integer input.
    Cancel { dequantize: usize, quantize: usize },
    /// `layout → pointwise` (the pointwise layer read only by a Q) as `pointwise → layout`;
    /// `shapes` as for [`Rewrite::HoistQuantize`].
    PointwiseFirst { layout: usize, pointwise: usize, shapes: bool },
    /// `pointwise → layout` as `layout → pointwise`, the pointwise layer's data in `data_slot`
    /// and `constant` its other operand moved through the layout; the pointwise layer stays
    /// where other layout layers read it.
    LayoutFirst { pointwise: usize, layout: usize, data_slot: usize, constant: HostTensor },
}

/// Applies every non-overlapping rewrite found once; `None` when there is none.
fn sweep(net: &Network) -> Result<Option<Network>, PassError> {
    let readers = consumers(net);
    let cancel = |i: usize| cancellation(net, &readers, i);
    let sink = |i: usize| sink_dequantize(net, &readers, i);
    let hoist = |i: usize| hoist_quantize(net, &readers, i);
    let pointwise = |i: usize| pointwise_first(net, &readers, i);
    let layout = |i: usize| layout_first(net, &readers, i);
    let (mut plans, absorbed) = disjoint_plans(net.layers().len(), &[&cancel, &sink, &hoist, &pointwise, &layout], |p: &Plan| &p.layers);
    if plans.is_empty() {
        return Ok(None);
    }
    let mut rb = Rewriter::new(net);
    for i in 0..net.layers().len() {
        match plans.remove(&i) {
            Some(plan) => emit(&mut rb, net, &plan.rewrite)?,
            None if !absorbed.contains(&i) => {
                rb.keep(i)?;
            }
            None => {}
        }
    }
    Ok(Some(rb.finish_as_source()?))
}

fn emit(rb: &mut Rewriter<'_>, net: &Network, rewrite: &Rewrite) -> Result<(), NetworkError> {
    let layer = |i: usize| net.layer(LayerId(i));
    match *rewrite {
        Rewrite::SinkDequantize { dequantize, layout, stays } => {
            let (dq, l) = (layer(dequantize), layer(layout));
            let data_in = rb.get(data(dq).ok_or_else(|| missing(dq))?)?;
            let inputs = with_data(rb, net, &l.inputs, data_in)?;
            let moved = rb.out_mut().add_layer(&format!("{} (integer)", l.name), l.kind.clone(), inputs)?;
            let moved_out = rb.out().output(moved, 0);
            let inputs = with_data(rb, net, &dq.inputs, moved_out)?;
            let name = if stays { format!("{} (after {})", dq.name, l.name) } else { dq.name.clone() };
            rb.add(&name, per_tensor(&dq.kind), inputs, &l.outputs)?;
        }
        Rewrite::HoistQuantize { layout, quantize, shapes } => {
            let (l, q) = (layer(layout), layer(quantize));
            let data_in = rb.get(data(l).ok_or_else(|| missing(l))?)?;
            let inputs = with_data(rb, net, &q.inputs, data_in)?;
            let hoisted = rb.out_mut().add_layer(&q.name, per_tensor(&q.kind), inputs)?;
            let hoisted_out = rb.out().output(hoisted, 0);
            let inputs = with_data(rb, net, &l.inputs, hoisted_out)?;
            rb.add(&format!("{} (integer)", l.name), l.kind.clone(), inputs, &q.outputs)?;
            if shapes {
                rb.alias(l.outputs[0], rb.get(q.outputs[0])?);
            }
        }
        Rewrite::PointwiseFirst { layout, pointwise, shapes } => {
            let (l, p) = (layer(layout), layer(pointwise));
            let data_in = rb.get(data(l).ok_or_else(|| missing(l))?)?;
            let moved_input = l.outputs[0];
            let inputs = p
                .inputs
                .iter()
                .map(|&t| match t {
                    Some(t) if t == moved_input => Ok(Some(data_in)),
                    Some(t) => mapped(rb, net, t).map(Some),
                    None => Ok(None),
                })
                .collect::<Result<Vec<_>, _>>()?;
            let first = rb.out_mut().add_layer(&p.name, p.kind.clone(), inputs)?;
            let first_out = rb.out().output(first, 0);
            let inputs = with_data(rb, net, &l.inputs, first_out)?;
            rb.add(&format!("{} (after {})", l.name, p.name), l.kind.clone(), inputs, &p.outputs)?;
            if shapes {
                rb.alias(l.outputs[0], rb.get(p.outputs[0])?);
            }
        }
        Rewrite::LayoutFirst { pointwise, layout, data_slot, ref constant } => {
            let (p, l) = (layer(pointwise), layer(layout));
            let data_in = rb.get(p.inputs[data_slot].ok_or_else(|| missing(p))?)?;
            let inputs = with_data(rb, net, &l.inputs, data_in)?;
            let first = rb.out_mut().add_layer(&format!("{} (before {})", l.name, p.name), l.kind.clone(), inputs)?;
            let first_out = rb.out().output(first, 0);
            let moved = rb.constant(&format!("{} operand (through {})", p.name, l.name), constant.clone())?;
            let mut inputs = vec![Some(moved); 2];
            inputs[data_slot] = Some(first_out);
            rb.add(&format!("{} (after {})", p.name, l.name), p.kind.clone(), inputs, &l.outputs)?;
        }
        Rewrite::Cancel { dequantize, quantize } => {
            let integers = rb.get(data(layer(dequantize)).ok_or_else(|| missing(layer(dequantize)))?)?;
            for &t in &layer(quantize).outputs {
                rb.alias(t, integers);
            }
        }
    }
    Ok(())
}

/// A per-tensor Q or DQ moved across a layout layer: its axis may not exist on the other side,
/// and one scale needs none.
fn per_tensor(kind: &LayerKind) -> LayerKind {
    match kind {
        LayerKind::Quantize { to, .. } => LayerKind::Quantize { axis: None, to: *to },
        LayerKind::Dequantize { to, .. } => LayerKind::Dequantize { axis: None, to: *to },
        other => other.clone(),
    }
}

/// A layer's input slots mapped into the new network, with `data` in slot 0.
fn with_data(rb: &mut Rewriter<'_>, net: &Network, slots: &[Option<TensorId>], data: TensorId) -> Result<Vec<Option<TensorId>>, NetworkError> {
    let mut out = vec![Some(data)];
    for &t in slots.get(1..).unwrap_or_default() {
        out.push(t.map(|t| mapped(rb, net, t)).transpose()?);
    }
    Ok(out)
}

/// `t` in the new network. A rewrite emitted where a layout was (Shape layers read its output)
/// may read a Constant the source network makes only later (the dynamo exporter's attention
/// scale): a copy of it is emitted here, and the original, if no longer read, is dropped.
fn mapped(rb: &mut Rewriter<'_>, net: &Network, t: TensorId) -> Result<TensorId, NetworkError> {
    if let Ok(m) = rb.get(t) {
        return Ok(m);
    }
    match net.tensor(t).producer.map(|(p, _)| net.layer(p)) {
        Some(l) if matches!(l.kind, LayerKind::Constant { .. }) => {
            let kind = rb.carried_kind(&l.kind, &l.name)?;
            let copy = rb.out_mut().add_layer(&format!("{} (early)", l.name), kind, vec![])?;
            Ok(rb.out().output(copy, 0))
        }
        _ => rb.get(t),
    }
}

fn data(l: &crate::Layer) -> Option<TensorId> {
    l.inputs.first().copied().flatten()
}

fn missing(l: &crate::Layer) -> NetworkError {
    NetworkError::Layer { layer: l.name.clone(), tensor: String::new(), rule: "has no data input".into() }
}

/// A per-tensor step's known scale and zero point, and its 8-bit integer type.
struct PerTensor<'n> {
    scale: &'n HostTensor,
    zero: i64,
    integers: DataType,
}

/// A known one-element tensor's value.
fn single(net: &Network, t: Option<TensorId>) -> Option<&HostTensor> {
    known_value(net, t?).filter(|v| v.len() == 1)
}

/// The zero point slot's value: absent is 0.
fn zero_point(net: &Network, t: Option<TensorId>) -> Option<i64> {
    match t {
        None => Some(0),
        t => single(net, t)?.to_i64_vec()?.first().copied(),
    }
}

/// The DequantizeLinear at layer `i` of 8-bit integers, per tensor.
fn per_tensor_dequantize(net: &Network, i: usize) -> Option<PerTensor<'_>> {
    let l = net.layer(LayerId(i));
    let slot = |k: usize| l.inputs.get(k).copied().flatten();
    let integers = net.tensor(slot(0)?).dtype;
    let dequantizes = matches!(l.kind, LayerKind::Dequantize { .. }) && l.outputs.len() == 1 && integers.is_8bit_integer();
    dequantizes.then_some(())?;
    Some(PerTensor { scale: single(net, slot(1))?, zero: zero_point(net, slot(2))?, integers })
}

/// The QuantizeLinear at layer `i` to 8-bit integers, per tensor.
fn per_tensor_quantize(net: &Network, i: usize) -> Option<PerTensor<'_>> {
    let l = net.layer(LayerId(i));
    let slot = |k: usize| l.inputs.get(k).copied().flatten();
    let LayerKind::Quantize { to, .. } = l.kind else { return None };
    (to.is_8bit_integer() && l.outputs.len() == 1).then_some(())?;
    Some(PerTensor { scale: single(net, slot(1))?, zero: zero_point(net, slot(2))?, integers: to })
}

/// Whether `t` is read by `layer`'s slot 0 alone and is no network output: a tensor a rewrite
/// may stop computing.
fn only_data_of(net: &Network, readers: &[Vec<(usize, usize)>], t: TensorId, layer: usize) -> bool {
    read_by_and_shapes(net, readers, t, (layer, 0)) == Some(false)
}

/// The layer producing `l`'s data input, when `l` reads it in slot 0 only.
fn data_producer(net: &Network, l: &crate::Layer) -> Option<(usize, TensorId)> {
    let t = data(l)?;
    let elsewhere = l.inputs.iter().skip(1).any(|&s| s == Some(t));
    let (producer, _) = net.tensor(t).producer?;
    (!elsewhere).then_some((producer.0, t))
}

/// Layout layer (or Slice) `i` reading a per-tensor DequantizeLinear.
fn sink_dequantize(net: &Network, readers: &[Vec<(usize, usize)>], i: usize) -> Option<Plan> {
    let l = net.layer(LayerId(i));
    if !moves_elements(l) {
        return None;
    }
    let (dequantize, t) = data_producer(net, l)?;
    per_tensor_dequantize(net, dequantize)?;
    let stays = !only_data_of(net, readers, t, i);
    let layers = if stays { vec![i] } else { vec![dequantize, i] };
    Some(Plan { layers, rewrite: Rewrite::SinkDequantize { dequantize, layout: i, stays } })
}

/// Whether `t` is read by `reader` (a layer and its slot) and otherwise only by Shape layers
/// (which read its dims, the same before and after a rewrite that moves values), and is no
/// network output. `Some(true)` where Shape layers read it too.
fn read_by_and_shapes(net: &Network, readers: &[Vec<(usize, usize)>], t: TensorId, reader: (usize, usize)) -> Option<bool> {
    let (mut read, mut shapes) = (0, 0);
    for &(r, slot) in &readers[t.0] {
        match ((r, slot) == reader, &net.layer(LayerId(r)).kind) {
            (true, _) => read += 1,
            (false, LayerKind::Shape) => shapes += 1,
            _ => return None,
        }
    }
    (read == 1 && !net.outputs().contains(&t)).then_some(shapes > 0)
}

/// The layers a move of layer `moved` above `layout` replaces, in the order whose last is where
/// the rewrite is emitted: at the moved layer, or with Shape layers reading the layout's output
/// at the layout, so that output is made (by the new layout) before they read it; that takes
/// the moved layer's other inputs made before the layout.
fn move_plan(net: &Network, layout: usize, moved: usize, shapes: bool) -> Option<Vec<usize>> {
    if !shapes {
        return Some(vec![layout, moved]);
    }
    // (A Constant made later is emitted early: `mapped`.)
    let before = |t: TensorId| net.tensor(t).producer.is_none_or(|(p, _)| p.0 < layout || matches!(net.layer(p).kind, LayerKind::Constant { .. }));
    let l = net.layer(LayerId(layout));
    let others = net.layer(LayerId(moved)).inputs.iter().flatten().filter(|&&t| Some(t) != l.outputs.first().copied());
    others.copied().all(before).then(|| vec![moved, layout])
}

/// Per-tensor QuantizeLinear `i`, the only reader of a layout layer besides Shape layers (a
/// dynamic-shape export reads the heads' shape where it transposes the keys).
fn hoist_quantize(net: &Network, readers: &[Vec<(usize, usize)>], i: usize) -> Option<Plan> {
    let q = net.layer(LayerId(i));
    per_tensor_quantize(net, i)?;
    let (layout, t) = data_producer(net, q)?;
    let l = net.layer(LayerId(layout));
    is_layout(l).then_some(())?;
    let shapes = read_by_and_shapes(net, readers, t, (i, 0))?;
    Some(Plan { layers: move_plan(net, layout, i, shapes)?, rewrite: Rewrite::HoistQuantize { layout, quantize: i, shapes } })
}

/// Pointwise layer `i` that does one thing to every element of a layout layer's output (its
/// only reader) and is read only by a per-tensor QuantizeLinear. A binary layer's other operand
/// is a known one-element tensor of rank at most the layout input's, so the layer keeps the
/// layout input's shape.
fn pointwise_first(net: &Network, readers: &[Vec<(usize, usize)>], i: usize) -> Option<Plan> {
    let p = net.layer(LayerId(i));
    let out = *p.outputs.first().filter(|_| p.outputs.len() == 1)?;
    let [(quantize, 0)] = readers[out.0][..] else { return None };
    per_tensor_quantize(net, quantize)?;
    if net.outputs().contains(&out) {
        return None;
    }
    let moved = p.inputs.iter().flatten().copied().find(|&t| {
        net.tensor(t).producer.is_some_and(|(l, _)| is_layout(net.layer(l)))
    })?;
    let layout = net.tensor(moved).producer?.0 .0;
    let l = net.layer(LayerId(layout));
    let layout_input = data(l)?;
    // Read by the pointwise layer in one slot (so its other operand is not the same tensor) and
    // maybe by Shape layers.
    let slot = p.inputs.iter().position(|&t| t == Some(moved))?;
    let shapes = read_by_and_shapes(net, readers, moved, (i, slot))?;
    let same_type = |t: TensorId| net.tensor(t).dtype == net.tensor(out).dtype;
    let one_value = match &p.kind {
        LayerKind::Activation { .. } => p.inputs.len() == 1,
        LayerKind::Unary { op } => super::fuse::float_unary(*op),
        LayerKind::Elementwise { op } if super::fuse::fusable_binary(*op) && p.inputs.len() == 2 => p.inputs.iter().flatten().all(|&t| {
            t == moved || known_value(net, t).is_some_and(|v| v.len() == 1) && net.tensor(t).shape.rank() <= net.tensor(layout_input).shape.rank()
        }),
        _ => false,
    };
    (one_value && same_type(moved) && same_type(layout_input)).then_some(())?;
    Some(Plan { layers: move_plan(net, layout, i, shapes)?, rewrite: Rewrite::PointwiseFirst { layout, pointwise: i, shapes } })
}

/// Layout layer (or Slice) `i` reading a binary pointwise layer whose data is a per-tensor
/// DequantizeLinear's output and whose other operand is a known constant of more than one
/// element broadcasting onto it (a bias: a one-element operand is `pointwise_first`'s, which
/// moves the other way), where only such layers read the pointwise layer's output.
fn layout_first(net: &Network, readers: &[Vec<(usize, usize)>], i: usize) -> Option<Plan> {
    let l = net.layer(LayerId(i));
    if !moves_elements(l) || !splits(net, readers, l) {
        return None;
    }
    let (pointwise, t) = data_producer(net, l)?;
    let p = net.layer(LayerId(pointwise));
    let LayerKind::Elementwise { op } = p.kind else { return None };
    if !super::fuse::fusable_binary(op) || p.inputs.len() != 2 || p.outputs.len() != 1 || net.outputs().contains(&t) {
        return None;
    }
    if !readers[t.0].iter().all(|&(r, slot)| slot == 0 && moves_elements(net.layer(LayerId(r))) && data_producer(net, net.layer(LayerId(r))).is_some()) {
        return None;
    }
    let from_dequantize = |s: &Option<TensorId>| s.and_then(|s| net.tensor(s).producer).is_some_and(|(q, _)| per_tensor_dequantize(net, q.0).is_some());
    let data_slot = p.inputs.iter().position(from_dequantize)?;
    let (x, other) = (p.inputs[data_slot]?, p.inputs[1 - data_slot]?);
    let c = known_value(net, other).filter(|v| v.len() > 1 && other != x)?;
    let x_shape = &net.tensor(x).shape;
    if net.tensor(t).shape != *x_shape || net.tensor(t).dtype != net.tensor(x).dtype || c.shape().len() > x_shape.rank() {
        return None;
    }
    let mut dims = vec![1; x_shape.rank() - c.shape().len()];
    dims.extend_from_slice(c.shape());
    let (moved_dims, indices) = broadcast_through_layout(net, i, &dims)?;
    let constant = HostTensor::new(moved_dims, c.data().gather(&indices)).ok()?;
    let stays = readers[t.0].len() > 1;
    let layers = if stays { vec![i] } else { vec![pointwise, i] };
    Some(Plan { layers, rewrite: Rewrite::LayoutFirst { pointwise, layout: i, data_slot, constant } })
}

/// Whether `l` is a Slice, or a layout layer read only by such layers: the tensor is split,
/// and the bias is best added after the split. Elsewhere it stays where it is: a product's
/// levels read by its bias's island alone become the product's table (LevelTables), which a
/// layout layer between them would stop.
fn splits(net: &Network, readers: &[Vec<(usize, usize)>], l: &crate::Layer) -> bool {
    match l.kind {
        LayerKind::Slice => true,
        _ => {
            let out = l.outputs[0];
            is_layout(l) && !readers[out.0].is_empty() && !net.outputs().contains(&out)
                && readers[out.0].iter().all(|&(r, slot)| slot == 0 && splits(net, readers, net.layer(LayerId(r))))
        }
    }
}

/// A constant that broadcasts onto the input of layer `i` (a layout layer or a Slice) moved
/// through it: its dims there and the indices of its elements (`broadcast_through`'s form).
pub(super) fn broadcast_through_layout(net: &Network, i: usize, dims: &[usize]) -> Option<(Vec<usize>, Vec<usize>)> {
    let l = net.layer(LayerId(i));
    match l.kind {
        LayerKind::Shuffle(_) => super::shuffle_chains::broadcast_through(net, i, dims),
        LayerKind::Slice => sliced_broadcast(net, l, dims),
        LayerKind::Identity => Some((dims.to_vec(), (0..dims.iter().product()).collect())),
        _ => None,
    }
}

/// A constant of `dims` (padded to the rank of Slice `l`'s input, each 1 or the input's)
/// through the Slice, as `broadcast_through` gives a Shuffle's: it is sliced along the axes
/// it varies along and keeps its ones.
fn sliced_broadcast(net: &Network, l: &crate::Layer, dims: &[usize]) -> Option<(Vec<usize>, Vec<usize>)> {
    let ints = |k: usize| -> Option<Option<Vec<i64>>> {
        match l.inputs.get(k).copied().flatten() {
            Some(t) => Some(Some(known_value(net, t)?.to_i64_vec()?)),
            None => Some(None),
        }
    };
    let (starts, ends, axes, steps) = (ints(1)??, ints(2)??, ints(3)?, ints(4)?);
    let input = net.tensor(data(l)?).shape.dims();
    if dims.iter().zip(input).any(|(&c, d)| c != 1 && d.fixed() != Some(c)) {
        return None;
    }
    // Where the constant varies its dims are the input's, so the plan is the layer's there.
    let plan = crate::ir::infer::resolve_slice(dims, &starts, &ends, axes.as_deref(), steps.as_deref()).ok()?;
    let out: Vec<usize> = dims.iter().zip(&plan).map(|(&c, a)| if c == 1 { 1 } else { a.len }).collect();
    if out.contains(&0) {
        return None;
    }
    let stride = crate::ir::format::row_major_strides(dims);
    let count: usize = out.iter().product();
    let indices = (0..count)
        .map(|mut at| {
            let mut index = 0i64;
            for d in (0..dims.len()).rev() {
                let i = (at % out[d]) as i64;
                at /= out[d];
                if dims[d] != 1 {
                    index += (plan[d].start + i * plan[d].step) * stride[d] as i64;
                }
            }
            index as usize
        })
        .collect();
    Some((out, indices))
}

/// Per-tensor QuantizeLinear `i` reading a DequantizeLinear whose every level it gives back.
fn cancellation(net: &Network, readers: &[Vec<(usize, usize)>], i: usize) -> Option<Plan> {
    let q_layer = net.layer(LayerId(i));
    let q = per_tensor_quantize(net, i)?;
    let (dequantize, t) = data_producer(net, q_layer)?;
    let dq = per_tensor_dequantize(net, dequantize)?;
    // The Q's output keeps its name as a network output: the pair stays there.
    let named = q_layer.outputs.iter().any(|o| net.outputs().contains(o));
    if named || dq.integers != q.integers || !every_level_round_trips(&dq, &q) {
        return None;
    }
    let layers = if only_data_of(net, readers, t, i) { vec![dequantize, i] } else { vec![i] };
    Some(Plan { layers, rewrite: Rewrite::Cancel { dequantize, quantize: i } })
}

/// Whether `Q(DQ(level)) == level` for every level of the 8-bit type, computed as kiln-cpu's
/// `kernels::misc` computes them: DQ `(level - zero) · scale` in the scale's type (f16 and
/// bf16 multiply in f32 and round once), then Q `round_half_even(x / scale) + zero` in f32 (f64
/// for f64), saturated. Each quotient must also lie within a quarter level of its rounding.
fn every_level_round_trips(dq: &PerTensor<'_>, q: &PerTensor<'_>) -> bool {
    let (lo, hi) = match dq.integers {
        DataType::I8 => (i8::MIN as i64, i8::MAX as i64),
        DataType::U8 => (u8::MIN as i64, u8::MAX as i64),
        _ => return false,
    };
    let (Some(&dq_scale), Some(&q_scale)) = (dq.scale.to_f64_vec().first(), q.scale.to_f64_vec().first()) else {
        return false;
    };
    // Both scales are exact in f64, and in f32 where their type is at most that wide.
    let (dq_scale32, q_scale32) = (dq_scale as f32, q_scale as f32);
    let quotient = |shifted: i64| match dq.scale.dtype() {
        DataType::F32 => Some(((shifted as f32 * dq_scale32) / q_scale32) as f64),
        DataType::F16 => Some((f16::from_f32(shifted as f32 * dq_scale32).to_f32() / q_scale32) as f64),
        DataType::BF16 => Some((bf16::from_f32(shifted as f32 * dq_scale32).to_f32() / q_scale32) as f64),
        DataType::F64 => Some(shifted as f64 * dq_scale / q_scale),
        _ => None,
    };
    (lo..=hi).all(|level| {
        let Some(ratio) = quotient(level - dq.zero) else { return false };
        let rounded = ratio.round_ties_even();
        let requantized = (rounded + q.zero as f64).clamp(lo as f64, hi as f64);
        (ratio - rounded).abs() <= 0.25 && requantized == level as f64
    })
}

//! ONNX ConvInteger and MatMulInteger as integer layers ending in their int32 sums
//! ([`QuantizedParams`] with an i32 output). The importer expands each into exact f64
//! arithmetic, `Cast(x → f64) [− Cast(zero point → f64)] → Conv / MatMul → Cast(→ i32)`, which
//! runs on any backend; where the backend runs integer layers this finds that expansion and
//! makes it one integer layer instead (onnxruntime's `quantize_dynamic` writes MatMulInteger
//! for every linear layer of a transformer; a GPU has no fast f64).
//!
//! x's zero point must be one value (MatMulInteger's per-row zero point keeps the expansion),
//! w's one value or one per output channel, both 8-bit like their tensors. Zero points need
//! not be constants: backends read them when the layer runs.

use super::graph::only_reader;
use super::quantized::Plan;
use crate::ir::dtype::DataType;
use crate::ir::layer::{ElementwiseOp, LayerKind, MatrixOp};
use crate::ir::network::{LayerId, Network, TensorId};
use crate::ir::quantized::{QuantizedAnchor, QuantizedParams as Q};

/// The plan of the expansion whose anchor is layer `i`.
pub(super) fn find(net: &Network, readers: &[Vec<(usize, usize)>], i: usize) -> Option<Plan> {
    let l = net.layer(LayerId(i));
    let anchor = match &l.kind {
        LayerKind::Convolution(p) if l.inputs.get(2).copied().flatten().is_none() => QuantizedAnchor::Convolution(p.clone()),
        LayerKind::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::None } => QuantizedAnchor::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::None },
        _ => return None,
    };
    let sums = *l.outputs.first()?;
    if net.tensor(sums).dtype != DataType::F64 {
        return None;
    }
    let cast_at = only_reader(net, readers, sums)?;
    let cast = net.layer(LayerId(cast_at));
    if cast.kind != (LayerKind::Cast { to: DataType::I32 }) {
        return None;
    }
    let (x, x_zero) = centered(net, l.inputs.first().copied().flatten()?)?;
    let (w, w_zero) = centered(net, l.inputs.get(1).copied().flatten()?)?;
    let volume = |t: TensorId| net.tensor(t).shape.volume();
    let one = |t: TensorId| volume(t) == Some(1) && net.tensor(t).shape.rank() <= 1;
    let w_rank = net.tensor(w).shape.rank();
    let axis = anchor.weight_channel_axis(w_rank);
    let channels = net.tensor(w).shape.dims().get(axis).and_then(|d| d.fixed());
    // One zero point per output channel: 1-D, and broadcast (right-aligned) along w's channel axis.
    let along_channels = |(z, broadcast): (TensorId, TensorId)| {
        let dims: Vec<Option<usize>> = net.tensor(broadcast).shape.dims().iter().map(|d| d.fixed()).collect();
        let offset = w_rank.checked_sub(dims.len());
        let placed = offset.is_some_and(|o| dims.iter().enumerate().all(|(d, &n)| if d + o == axis { n == channels } else { n == Some(1) }));
        one(z) || (net.tensor(z).shape.rank() == 1 && volume(z) == channels && placed)
    };
    if x_zero.is_some_and(|(z, _)| !one(z)) || w_zero.is_some_and(|z| !along_channels(z)) {
        return None;
    }
    let mut inputs = vec![None; Q::SLOTS];
    inputs[Q::X] = Some(x);
    inputs[Q::W] = Some(w);
    inputs[Q::X_ZERO] = x_zero.map(|(z, _)| z);
    inputs[Q::W_ZERO] = w_zero.map(|(z, _)| z);
    Some(Plan { layers: vec![i, cast_at], x_layout: None, inputs, params: Q { anchor, relu: false, output: DataType::I32, then: None, lookup: None }, output: cast.outputs[0] })
}

/// The 8-bit tensor behind `Cast(t → f64)`, and the 8-bit zero point behind
/// `Sub(Cast(t → f64), [Reshape] Cast(zero → f64))` with the tensor the Sub broadcasts.
fn centered(net: &Network, t: TensorId) -> Option<(TensorId, Option<(TensorId, TensorId)>)> {
    let producer = |t: TensorId| net.tensor(t).producer.map(|(l, _)| net.layer(l));
    let eight_bit = |t: TensorId| -> Option<TensorId> {
        let cast = producer(t)?;
        let source = cast.inputs.first().copied().flatten()?;
        (cast.kind == (LayerKind::Cast { to: DataType::F64 }) && net.tensor(source).dtype.is_8bit_integer()).then_some(source)
    };
    if let Some(x) = eight_bit(t) {
        return Some((x, None));
    }
    let sub = producer(t)?;
    let [Some(a), Some(b)] = sub.inputs[..] else { return None };
    if sub.kind != (LayerKind::Elementwise { op: ElementwiseOp::Sub }) {
        return None;
    }
    let x = eight_bit(a)?;
    // A per-channel zero point is reshaped to broadcast along the channel axis: the 1-D one
    // before it is the layer's.
    let zero = match producer(b) {
        Some(reshape) if matches!(reshape.kind, LayerKind::Shuffle(_)) => eight_bit(reshape.inputs.first().copied().flatten()?)?,
        _ => eight_bit(b)?,
    };
    (net.tensor(zero).dtype == net.tensor(x).dtype).then_some((x, Some((zero, b))))
}

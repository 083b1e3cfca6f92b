//! The INT8 builder step (BuilderFlag::Int8): every convolution and matrix product whose
//! float inputs can all be quantized reads them as INT8. An activation with a range reads
//! through QuantizeLinear → DequantizeLinear (per tensor); constant weights are quantized
//! here, once, per output channel, and read through a DequantizeLinear. Layers with an input
//! that has no range keep their float inputs (TensorRT runs them in float too) and are
//! reported. The Q/DQ layers are what Q/DQ fusion (`passes::QuantizedFusion`) turns into
//! integer layers on a backend that runs them (cpu); elsewhere they run as the float
//! emulation they are written as.

use super::int8_scale;
use crate::error::NetworkError;
use crate::ir::dtype::DataType;
use crate::ir::layer::{LayerKind, MatrixOp};
use crate::ir::network::{Layer, Network, TensorId};
use crate::ir::rewrite::Rewriter;
use crate::ir::tensor::{HostTensor, TensorData};
use crate::passes::graph::has_control_flow;

/// What the step did: the layers reading INT8 inputs, and those left in float for want of
/// a range (with the tensor that lacks one).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Int8Report {
    pub quantized: Vec<String>,
    pub without_range: Vec<(String, String)>,
    /// Why nothing was quantized, when the whole network was passed over.
    pub skipped: Option<String>,
}

/// How one input of a quantized layer is read.
enum Read {
    /// An activation of this amax: Q → DQ.
    Activation(f32),
    /// Constant f32 weights, quantized with one scale per index of `axis` (per tensor: None).
    Weights(std::sync::Arc<HostTensor>, Option<usize>),
}

/// The float slots of a layer INT8 would read quantized, with the axis of a constant weight's
/// output channels: a convolution's data (0) and filter (1, axis 0); both operands of a
/// matrix product (the output-column axis of a constant B).
fn quantized_slots(layer: &Layer, b_rank: Option<usize>) -> Vec<(usize, Option<usize>)> {
    match &layer.kind {
        LayerKind::Convolution(_) => vec![(0, None), (1, Some(0))],
        LayerKind::MatrixMultiply { op_b, .. } => {
            let column_axis = match (op_b, b_rank) {
                (MatrixOp::None, Some(r)) if r >= 2 => Some(r - 1),
                (MatrixOp::Transpose, Some(r)) if r >= 2 => Some(r - 2),
                _ => None,
            };
            vec![(0, None), (1, column_axis)]
        }
        _ => Vec::new(),
    }
}

/// The activations (non-constant f32 inputs) INT8 quantizes, each once, in layer order:
/// what calibration measures.
pub fn quantized_activations(network: &Network) -> Vec<TensorId> {
    let mut out: Vec<TensorId> = Vec::new();
    for layer in network.layers() {
        for (slot, _) in quantized_slots(layer, None) {
            let Some(Some(t)) = layer.inputs.get(slot) else { continue };
            let d = network.tensor(*t);
            if d.dtype == DataType::F32 && d.value.is_none() && !out.contains(t) {
                out.push(*t);
            }
        }
    }
    out
}

/// The network with INT8 reads, given each activation's amax (None: no range known).
pub fn apply(network: &Network, amax_of: &dyn Fn(TensorId) -> Option<f32>) -> Result<(Network, Int8Report), NetworkError> {
    let mut report = Int8Report::default();
    if has_control_flow(network) {
        report.skipped = Some("the network has loops or conditionals (INT8 does not cross them yet)".into());
        return Ok((network.clone(), report));
    }
    let mut rb = Rewriter::new(network);
    for (i, layer) in network.layers().iter().enumerate() {
        match plan(network, layer, amax_of) {
            Plan::Keep => {
                rb.keep(i)?;
            }
            Plan::NoRange(tensor) => {
                report.without_range.push((layer.name.clone(), tensor));
                rb.keep(i)?;
            }
            Plan::Quantize(reads) => {
                let mut inputs = rb.get_slots(&layer.inputs)?;
                for (slot, read) in reads {
                    let x = inputs[slot].ok_or_else(|| bad(&layer.name, "a quantized input is missing".into()))?;
                    inputs[slot] = Some(match read {
                        Read::Activation(amax) => quantize_activation(&mut rb, &format!("{} input {slot}", layer.name), x, amax)?,
                        Read::Weights(value, axis) => quantize_weights(&mut rb, &format!("{} weights", layer.name), &value, axis)?,
                    });
                }
                rb.add(&layer.name, layer.kind.clone(), inputs, &layer.outputs)?;
                report.quantized.push(layer.name.clone());
            }
        }
    }
    if report.quantized.is_empty() {
        return Ok((network.clone(), report));
    }
    Ok((rb.finish_as_source()?, report))
}

enum Plan {
    Keep,
    /// A float input has no range: the layer stays float.
    NoRange(String),
    Quantize(Vec<(usize, Read)>),
}

fn plan(network: &Network, layer: &Layer, amax_of: &dyn Fn(TensorId) -> Option<f32>) -> Plan {
    let b_rank = layer.inputs.get(1).copied().flatten().map(|t| network.tensor(t).shape.rank());
    let mut reads = Vec::new();
    for (slot, axis) in quantized_slots(layer, b_rank) {
        let Some(Some(t)) = layer.inputs.get(slot) else { continue };
        let d = network.tensor(*t);
        if d.dtype != DataType::F32 {
            return Plan::Keep;
        }
        match &d.value {
            Some(value) => reads.push((slot, Read::Weights(value.clone(), axis))),
            None => match amax_of(*t) {
                Some(amax) => reads.push((slot, Read::Activation(amax))),
                None => return Plan::NoRange(d.name.clone()),
            },
        }
    }
    if reads.is_empty() {
        Plan::Keep
    } else {
        Plan::Quantize(reads)
    }
}

fn bad(layer: &str, rule: String) -> NetworkError {
    NetworkError::Layer { layer: layer.into(), tensor: String::new(), rule }
}

/// `DQ(Q(x))` at the symmetric INT8 scale of `amax`.
fn quantize_activation(rb: &mut Rewriter<'_>, name: &str, x: TensorId, amax: f32) -> Result<TensorId, NetworkError> {
    let scale = HostTensor::from_f32(vec![], vec![int8_scale(amax)]).map_err(|e| bad(name, e.to_string()))?;
    let scale = rb.constant(&format!("{name} scale"), scale)?;
    let q = rb.out_mut().add_layer(&format!("{name} (quantize)"), LayerKind::Quantize { axis: None, to: DataType::I8 }, vec![Some(x), Some(scale)])?;
    let q = rb.out().output(q, 0);
    let dq = rb.out_mut().add_layer(&format!("{name} (dequantize)"), LayerKind::Dequantize { axis: None, to: None }, vec![Some(q), Some(scale)])?;
    Ok(rb.out().output(dq, 0))
}

/// INT8 weights with one scale per index of `axis`, read through a DequantizeLinear.
fn quantize_weights(rb: &mut Rewriter<'_>, name: &str, value: &HostTensor, axis: Option<usize>) -> Result<TensorId, NetworkError> {
    let (values, scales, channels) = int8_weights(value, axis);
    let shape = value.shape().to_vec();
    let q = HostTensor::new(shape, TensorData::I8(values)).map_err(|e| bad(name, e.to_string()))?;
    let scale_shape = if axis.is_some() { vec![channels] } else { vec![] };
    let scales = HostTensor::from_f32(scale_shape, scales).map_err(|e| bad(name, e.to_string()))?;
    let q = rb.constant(&format!("{name} (int8)"), q)?;
    let scales = rb.constant(&format!("{name} scales"), scales)?;
    let dq = rb.out_mut().add_layer(&format!("{name} (dequantize)"), LayerKind::Dequantize { axis, to: None }, vec![Some(q), Some(scales)])?;
    Ok(rb.out().output(dq, 0))
}

/// `value` quantized symmetrically with one scale per index of `axis` (one scale for all
/// without): the INT8 values (rounded half to even and saturated, as QuantizeLinear), the
/// scales and their count.
pub fn int8_weights(value: &HostTensor, axis: Option<usize>) -> (Vec<i8>, Vec<f32>, usize) {
    let shape = value.shape();
    let (channels, inner) = match axis {
        Some(a) if a < shape.len() => (shape[a], shape[a + 1..].iter().product::<usize>()),
        _ => (1, value.len().max(1)),
    };
    let channel = |i: usize| (i / inner.max(1)) % channels.max(1);
    let values: Vec<f32> = value.to_f64_vec().into_iter().map(|v| v as f32).collect();
    let mut amax = vec![0f32; channels.max(1)];
    for (i, v) in values.iter().enumerate() {
        let c = channel(i);
        amax[c] = amax[c].max(v.abs());
    }
    let scales: Vec<f32> = amax.into_iter().map(int8_scale).collect();
    let q = values.iter().enumerate().map(|(i, v)| (v / scales[channel(i)]).round_ties_even().clamp(-127.0, 127.0) as i8).collect();
    (q, scales, channels.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_take_one_scale_per_output_channel() {
        let w = HostTensor::from_f32(vec![2, 3], vec![1.0, -0.5, 0.25, 0.0, 0.0, 0.0]).unwrap();
        let (q, scales, channels) = int8_weights(&w, Some(0));
        assert_eq!(channels, 2);
        assert_eq!(scales, vec![1.0 / 127.0, 1.0]);
        // 0.25 * 127 = 31.75 → 32; -0.5 * 127 = -63.5 → -64 (half to even).
        assert_eq!(q, vec![127, -64, 32, 0, 0, 0]);
        let (_, per_tensor, one) = int8_weights(&w, None);
        assert_eq!((per_tensor, one), (vec![1.0 / 127.0], 1));
    }
}

//! Epilogue fusion: a Convolution, Deconvolution or MatrixMultiply absorbs the pointwise
//! layers that follow it (bias, per-channel scale, activation, residual add) into one
//! [`LayerKind::Fused`] layer named after everything it absorbed ("conv1 + bias + relu").
//!
//! A per-channel constant scale or shift right after a convolution with constant weights
//! (a BatchNormalization as imported) is folded into the weights and bias instead of
//! becoming an epilogue step. A layer is absorbed only when the tensor between it and the
//! chain has a single reader and is not a network output.

use super::graph::{consumers, has_control_flow, known_value};
use crate::ir::rewrite::Rewriter;
use super::{Pass, PassContext, PassError};
use crate::ir::dtype::DataType;
use crate::ir::fused::{FusedAnchor, FusedParams, PostOp};
use crate::ir::layer::{ElementwiseOp, LayerKind, UnaryOp};
use crate::ir::network::{Network, TensorId};
use crate::ir::rewrite::convert_float;
use crate::ir::tensor::HostTensor;
use std::collections::HashMap;

#[derive(Clone, Copy, Debug, Default)]
pub struct EpilogueFusion;

impl Pass for EpilogueFusion {
    fn name(&self) -> &'static str {
        "epilogue-fusion"
    }

    fn run(&self, network: &Network, _: &PassContext<'_>) -> Result<Option<Network>, PassError> {
        let anchors = |kind: &LayerKind| {
            matches!(
                kind,
                LayerKind::Convolution(_)
                    | LayerKind::Deconvolution(_)
                    | LayerKind::MatrixMultiply { .. }
            )
        };
        fuse_chains(network, anchors, 1)
    }
}

/// One pointwise layer of a chain, as seen from the value running through it.
#[derive(Clone, Debug)]
pub(crate) struct ChainStep {
    pub layer: usize,
    pub post: PostOp,
    /// The other operand of an Elementwise step.
    pub operand: Option<TensorId>,
}

/// A fusion found in the network: the anchor layer, what it absorbs, and where it ends.
struct Plan {
    anchor: usize,
    /// Anchor input slots, possibly with rewritten (folded) constant weights.
    anchor_inputs: Vec<Input>,
    steps: Vec<ChainStep>,
    names: Vec<String>,
}

enum Input {
    Source(Option<TensorId>),
    Folded(HostTensor, String),
}

/// Finds the chain after every layer `is_anchor` accepts and fuses those that absorb at
/// least `min_steps` layers; shared by epilogue and pointwise-chain fusion.
pub(crate) fn fuse_chains(
    network: &Network,
    is_anchor: impl Fn(&LayerKind) -> bool,
    min_steps: usize,
) -> Result<Option<Network>, PassError> {
    if has_control_flow(network) {
        return Ok(None);
    }
    let readers = consumers(network);
    let mut absorbed = vec![false; network.layers().len()];
    let mut plans: HashMap<usize, Plan> = HashMap::new();
    for (i, l) in network.layers().iter().enumerate() {
        if absorbed[i] || !is_anchor(&l.kind) || l.outputs.len() != 1 {
            continue;
        }
        let mut plan = Plan {
            anchor: i,
            anchor_inputs: l.inputs.iter().map(|&t| Input::Source(t)).collect(),
            steps: Vec::new(),
            names: vec![l.name.clone()],
        };
        let mut running = l.outputs[0];
        let mut members = Vec::new();
        while let Some(step) = next_step(network, &readers, running).filter(|s| !absorbed[s.layer])
        {
            let layer = &network.layers()[step.layer];
            let folded = plan.steps.is_empty() && fold_into_convolution(network, &mut plan, &step);
            if !folded {
                plan.steps.push(step.clone());
            }
            plan.names.push(layer.name.clone());
            members.push(step.layer);
            running = layer.outputs[0];
        }
        if members.len() >= min_steps {
            absorbed[i] = true;
            for &m in &members {
                absorbed[m] = true;
            }
            plans.insert(*members.last().unwrap_or(&i), plan);
        }
    }
    if plans.is_empty() {
        return Ok(None);
    }
    let mut rb = Rewriter::new(network);
    for (i, l) in network.layers().iter().enumerate() {
        if let Some(plan) = plans.remove(&i) {
            let anchor = &network.layers()[plan.anchor];
            let mut inputs = Vec::new();
            for input in plan.anchor_inputs {
                inputs.push(match input {
                    Input::Source(t) => t.map(|t| rb.get(t)).transpose()?,
                    Input::Folded(value, name) => Some(rb.constant(&name, value)?),
                });
            }
            let anchor_inputs = inputs.len();
            let mut epilogue = Vec::new();
            for step in &plan.steps {
                let mut post = step.post;
                if let (PostOp::Elementwise { operand, .. }, Some(t)) = (&mut post, step.operand) {
                    *operand = inputs.len();
                    inputs.push(Some(rb.get(t)?));
                }
                epilogue.push(post);
            }
            let kind = if epilogue.is_empty() {
                anchor.kind.clone()
            } else {
                let head = FusedAnchor::from_kind(&anchor.kind).ok_or_else(|| {
                    PassError::Internal(format!(
                        "layer `{}` cannot anchor a fused layer",
                        anchor.name
                    ))
                })?;
                LayerKind::Fused(FusedParams::new(head, anchor_inputs, epilogue))
            };
            rb.add(&plan.names.join(" + "), kind, inputs, &l.outputs)?;
        } else if !absorbed[i] {
            rb.keep(i)?;
        }
    }
    Ok(Some(rb.finish_as_source()?))
}

/// The pointwise layer reading `running`, if it is the only reader and can join a chain.
pub(crate) fn next_step(
    net: &Network,
    readers: &[Vec<(usize, usize)>],
    running: TensorId,
) -> Option<ChainStep> {
    // f64 chains stay unfused: they are exact expansions (ConvInteger, QLinearConv) that
    // backends run as plain f64 layers, where a fused layer would compute in f32.
    let chain_type = |t: TensorId| net.tensor(t).dtype.is_float() && net.tensor(t).dtype != DataType::F64;
    if net.outputs().contains(&running) || !chain_type(running) {
        return None;
    }
    let [(layer, slot)] = readers[running.0][..] else {
        return None;
    };
    let l = &net.layers()[layer];
    let out = *l.outputs.first()?;
    if !chain_type(out) {
        return None;
    }
    let (post, operand) = match l.kind {
        LayerKind::Activation { kind } => (PostOp::Activation(kind), None),
        LayerKind::Unary { op } if float_unary(op) => (PostOp::Unary(op), None),
        LayerKind::Elementwise { op } if fusable_binary(op) && l.inputs.len() == 2 => {
            let other = l.inputs[1 - slot]?;
            (
                PostOp::Elementwise {
                    op,
                    operand: 0,
                    running_first: slot == 0,
                },
                Some(other),
            )
        }
        _ => return None,
    };
    Some(ChainStep {
        layer,
        post,
        operand,
    })
}

pub(crate) fn float_unary(op: UnaryOp) -> bool {
    !matches!(op, UnaryOp::Not | UnaryOp::IsNan | UnaryOp::IsInf { .. })
}

pub(crate) fn fusable_binary(op: ElementwiseOp) -> bool {
    use ElementwiseOp as E;
    matches!(
        op,
        E::Sum | E::Sub | E::Prod | E::Div | E::Max | E::Min | E::Pow
    )
}

/// Folds a per-channel constant `Prod` or `Sum` right after a convolution with constant
/// float weights into its weights and bias. Returns whether it did.
fn fold_into_convolution(net: &Network, plan: &mut Plan, step: &ChainStep) -> bool {
    let anchor = &net.layers()[plan.anchor];
    if !matches!(anchor.kind, LayerKind::Convolution(_)) {
        return false;
    }
    let (
        PostOp::Elementwise {
            op: op @ (ElementwiseOp::Prod | ElementwiseOp::Sum),
            ..
        },
        Some(operand),
    ) = (step.post, step.operand)
    else {
        return false;
    };
    let out = net.tensor(anchor.outputs[0]);
    let Some(k) = out.shape.dims().get(1).and_then(|d| d.fixed()) else {
        return false;
    };
    let Some(per_channel) =
        known_value(net, operand).and_then(|v| channel_vector(v, out.shape.rank(), k))
    else {
        return false;
    };
    let weights = match &plan.anchor_inputs[1] {
        Input::Source(Some(t)) => known_value(net, *t).cloned(),
        Input::Folded(v, _) => Some(v.clone()),
        Input::Source(None) => None,
    };
    // Reduced-precision weights (the precision pass runs first) fold in f32 and are stored
    // back in their own type.
    let Some(weight_type) = weights.as_ref().map(HostTensor::dtype).filter(|t| matches!(t, DataType::F32 | DataType::F16 | DataType::BF16)) else {
        return false;
    };
    let Some(weights) = weights
        .and_then(|w| convert_float(&w, DataType::F32))
        .filter(|w| w.shape().first() == Some(&k))
    else {
        return false;
    };
    let f32_values = |v: &HostTensor| convert_float(v, DataType::F32).and_then(|v| v.as_f32().map(<[f32]>::to_vec));
    let bias = match plan.anchor_inputs.get(2) {
        None | Some(Input::Source(None)) => vec![0.0f32; k],
        Some(Input::Source(Some(t))) => match known_value(net, *t).and_then(f32_values) {
            Some(b) if b.len() == k => b,
            _ => return false,
        },
        Some(Input::Folded(v, _)) => match f32_values(v) {
            Some(b) => b,
            None => return false,
        },
    };
    let (new_weights, new_bias) = match op {
        ElementwiseOp::Prod => {
            let Some(w) = weights.as_f32() else {
                return false;
            };
            let per_k = w.len() / k;
            let scaled: Vec<f32> = w
                .iter()
                .enumerate()
                .map(|(i, &x)| x * per_channel[i / per_k.max(1)])
                .collect();
            let Ok(w) = HostTensor::from_f32(weights.shape().to_vec(), scaled) else {
                return false;
            };
            (
                w,
                bias.iter()
                    .zip(&per_channel)
                    .map(|(b, s)| b * s)
                    .collect::<Vec<f32>>(),
            )
        }
        _ => (
            weights,
            bias.iter().zip(&per_channel).map(|(b, c)| b + c).collect(),
        ),
    };
    let Ok(new_bias) = HostTensor::from_f32(vec![k], new_bias) else {
        return false;
    };
    let (Some(new_weights), Some(new_bias)) = (convert_float(&new_weights, weight_type), convert_float(&new_bias, weight_type)) else {
        return false;
    };
    let name = &anchor.name;
    plan.anchor_inputs[1] = Input::Folded(new_weights, format!("{name} folded kernel"));
    let bias_input = Input::Folded(new_bias, format!("{name} folded bias"));
    if plan.anchor_inputs.len() > 2 {
        plan.anchor_inputs[2] = bias_input;
    } else {
        plan.anchor_inputs.push(bias_input);
    }
    true
}

/// The per-channel values of a constant that broadcasts onto `(N, K, …)` of rank `rank`
/// along the channel axis only; a single value repeats.
fn channel_vector(v: &HostTensor, rank: usize, k: usize) -> Option<Vec<f32>> {
    let converted = convert_float(v, DataType::F32)?;
    let values = converted.as_f32()?;
    let dims = v.shape();
    if dims.len() > rank || rank < 2 {
        return None;
    }
    let offset = rank - dims.len();
    let fits = dims
        .iter()
        .enumerate()
        .all(|(j, &d)| d == 1 || (offset + j == 1 && d == k));
    if !fits {
        return None;
    }
    match values.len() {
        1 => Some(vec![values[0]; k]),
        n if n == k => Some(values.to_vec()),
        _ => None,
    }
}

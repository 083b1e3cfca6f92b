//! NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, decomposed: (log-softmax,)
//! GatherElements of the target class, weights and `ignore_index` masks, reduction.

use super::build::{binary, reduce, squeeze_axis, unary};
use super::Registry;
use crate::context::NodeContext;
use crate::error::ImportError;
use kiln::{ElementwiseOp, GatherMode, LayerKind, ReduceOp, ShuffleParams, TensorId, UnaryOp};

pub(super) fn register(r: &mut Registry) {
    r.add("NegativeLogLikelihoodLoss", &[12, 13, 22], nll_loss);
    r.add("SoftmaxCrossEntropyLoss", &[12, 13], softmax_cross_entropy);
}

#[derive(Clone, Copy, PartialEq)]
enum Reduction {
    None,
    Sum,
    Mean,
}

fn reduction(ctx: &NodeContext) -> Result<Reduction, ImportError> {
    match ctx.attrs.string("reduction", "mean")? {
        "none" => Ok(Reduction::None),
        "sum" => Ok(Reduction::Sum),
        "mean" => Ok(Reduction::Mean),
        other => Err(ctx.invalid(format!("reduction must be none, sum or mean, got `{other}`"))),
    }
}

fn nll_loss(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    Ok(vec![negative_log_likelihood(ctx, x)?])
}

fn softmax_cross_entropy(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    if ctx.rank(x) < 2 {
        return Err(ctx.invalid(format!("scores must be N×C×…, got rank {}", ctx.rank(x))));
    }
    let probs = ctx.add("softmax", LayerKind::SoftMax { axis: 1 }, &[x])?;
    let log_prob = unary(ctx, "log_prob", UnaryOp::Log, probs)?;
    let loss = negative_log_likelihood(ctx, log_prob)?;
    Ok(vec![loss, log_prob])
}

/// The loss of log-probabilities `x` (`[N, C, d…]`) against input #1 (`[N, d…]`), with
/// the optional class weights of input #2.
fn negative_log_likelihood(ctx: &mut NodeContext, x: TensorId) -> Result<TensorId, ImportError> {
    let target = ctx.input(1)?;
    let weight = ctx.opt_input(2);
    let reduction = reduction(ctx)?;
    let rank = ctx.rank(x);
    if rank < 2 {
        return Err(ctx.invalid(format!("input must be N×C×…, got rank {rank}")));
    }
    if ctx.rank(target) != rank - 1 {
        return Err(ctx.invalid(format!("target must have rank {} for a rank-{rank} input", rank - 1)));
    }
    let target_type = ctx.dtype(target);
    if !target_type.is_integer() {
        return Err(ctx.invalid(format!("target must be an integer tensor, got {target_type}")));
    }
    if let Some(w) = weight {
        if ctx.rank(w) != 1 {
            return Err(ctx.invalid(format!("weight must be 1-D, got rank {}", ctx.rank(w))));
        }
    }
    let dtype = ctx.dtype(x);
    let ignore_index = ctx.attrs.opt_int("ignore_index")?;

    // Ignored targets may lie outside [0, C): gather class 0 for them, then mask.
    let (index, ignored) = match ignore_index {
        Some(ii) => {
            let ii = ctx.scalar("ignore_index", target_type, ii as f64)?;
            let ignored = binary(ctx, "ignored", ElementwiseOp::Equal, target, ii)?;
            let zero = ctx.scalar("class zero", target_type, 0.0)?;
            (ctx.add("safe target", LayerKind::Select, &[ignored, zero, target])?, Some(ignored))
        }
        None => (target, None),
    };
    // `[N, d…]` → `[N, 1, d…]`: a trailing 1, moved to axis 1.
    let t_rank = rank - 1;
    let mut perm = vec![0];
    perm.push(t_rank);
    perm.extend(1..t_rank);
    let params = ShuffleParams {
        reshape: Some([vec![0; t_rank], vec![1]].concat()),
        second_transpose: perm,
        zero_is_placeholder: true,
        ..Default::default()
    };
    let index_1 = ctx.shuffle("target unsqueezed", index, params)?;
    let picked = ctx.add("picked", LayerKind::Gather { mode: GatherMode::Elements { axis: 1 } }, &[x, index_1])?;
    let picked = squeeze_axis(ctx, "picked squeezed", picked, 1)?;
    let mut loss = unary(ctx, "negated", UnaryOp::Neg, picked)?;

    // Per-element weights: the class weight, 0 where ignored.
    let zero = ctx.scalar("zero", dtype, 0.0)?;
    let weights = match (weight, ignored) {
        (Some(w), _) => {
            let w = ctx.cast("weight cast", w, dtype)?;
            let w =
                ctx.add("target weights", LayerKind::Gather { mode: GatherMode::Default { axis: 0 } }, &[w, index])?;
            Some(match ignored {
                Some(ig) => ctx.add("target weights masked", LayerKind::Select, &[ig, zero, w])?,
                None => w,
            })
        }
        (None, Some(ig)) => {
            let one = ctx.scalar("one", dtype, 1.0)?;
            Some(ctx.add("kept", LayerKind::Select, &[ig, zero, one])?)
        }
        (None, None) => None,
    };
    if let Some(w) = weights {
        loss = binary(ctx, "weighted", ElementwiseOp::Prod, loss, w)?;
    }
    let all: Vec<usize> = (0..t_rank).collect();
    let part = "";
    match (reduction, weights) {
        (Reduction::None, _) => ctx.add(part, LayerKind::Identity, &[loss]),
        (Reduction::Sum, _) => reduce(ctx, part, ReduceOp::Sum, loss, all, false),
        (Reduction::Mean, None) => reduce(ctx, part, ReduceOp::Mean, loss, all, false),
        (Reduction::Mean, Some(w)) => {
            let total = reduce(ctx, "loss sum", ReduceOp::Sum, loss, all.clone(), false)?;
            let weight_total = reduce(ctx, "weight sum", ReduceOp::Sum, w, all, false)?;
            binary(ctx, part, ElementwiseOp::Div, total, weight_total)
        }
    }
}

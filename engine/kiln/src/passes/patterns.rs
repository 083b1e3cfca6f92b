//! Recognition of decomposed operators as PyTorch exports them: softmax, layer
//! normalization, RMS normalization and GELU (erf and tanh forms); attention is in
//! [`super::attention`], on the same machinery.
//!
//! Each matcher starts at the layer that ends a pattern, walks its inputs back, and
//! requires every intermediate tensor to have a single reader (so nothing else needs
//! it). The fused layer is added where the pattern ended; the layers it replaces become
//! dead and dead-layer elimination removes them.

use super::graph::{consumers, has_control_flow, known_value};
use crate::ir::rewrite::Rewriter;
use super::{Pass, PassContext, PassError};
use crate::ir::dtype::DataType;
use crate::ir::layer::{ActivationKind, ElementwiseOp, LayerKind, ReduceOp, UnaryOp};
use crate::ir::network::{Layer, Network, TensorId};
use crate::ir::tensor::HostTensor;
use std::collections::HashMap;

/// A recognized pattern: the layer that replaces it, added at the position of `tail`.
pub(super) struct Replacement {
    pub names: Vec<String>,
    pub kind: LayerKind,
    pub inputs: Vec<Option<NewInput>>,
}

pub(super) enum NewInput {
    Tensor(TensorId),
    Constant(HostTensor),
}

/// The network as the matchers see it.
pub(super) struct View<'n> {
    pub net: &'n Network,
    pub readers: Vec<Vec<(usize, usize)>>,
}

impl<'n> View<'n> {
    /// The producer of `t` when `t` is an intermediate only one layer reads.
    pub fn inner(&self, t: TensorId) -> Option<&'n Layer> {
        if self.readers[t.0].len() != 1 || self.net.outputs().contains(&t) {
            return None;
        }
        self.producer(t)
    }

    pub fn producer(&self, t: TensorId) -> Option<&'n Layer> {
        let (p, _) = self.net.tensor(t).producer?;
        Some(self.net.layer(p))
    }

    /// `(a, b)` of an Elementwise `op` producing intermediate `t`.
    pub fn binary(
        &self,
        t: TensorId,
        op: ElementwiseOp,
    ) -> Option<(&'n Layer, TensorId, TensorId)> {
        let l = self.inner(t)?;
        match l.kind {
            LayerKind::Elementwise { op: o } if o == op => Some((l, l.inputs[0]?, l.inputs[1]?)),
            _ => None,
        }
    }

    /// The value of a constant whose elements are all equal.
    pub fn scalar(&self, t: TensorId) -> Option<f64> {
        let v = known_value(self.net, t)?.to_f64_vec();
        let first = *v.first()?;
        v.iter().all(|&x| x == first).then_some(first)
    }

    /// Whether `t` is the constant `want` within `tolerance`, widened by the rounding of a
    /// 16-bit constant: the builder lowers precision before these passes, so an fp16 engine's
    /// `√2` is 1.4140625.
    fn is_scalar(&self, t: TensorId, want: f64, tolerance: f64) -> bool {
        let rounding = match self.net.tensor(t).dtype {
            DataType::F16 => want.abs() * f64::powi(2.0, -11),
            DataType::BF16 => want.abs() * f64::powi(2.0, -8),
            _ => 0.0,
        };
        self.scalar(t)
            .is_some_and(|v| (v - want).abs() <= tolerance + rounding)
    }

    /// The other operand when one of `a`, `b` is the constant `want`.
    fn other_than_scalar(
        &self,
        a: TensorId,
        b: TensorId,
        want: f64,
        tolerance: f64,
    ) -> Option<TensorId> {
        if self.is_scalar(b, want, tolerance) {
            Some(a)
        } else if self.is_scalar(a, want, tolerance) {
            Some(b)
        } else {
            None
        }
    }

    pub fn float(&self, t: TensorId) -> bool {
        self.net.tensor(t).dtype.is_float()
    }
}

/// Runs `matcher` on every layer and rebuilds with the replacements it found.
pub(super) fn rewrite(
    network: &Network,
    matcher: impl Fn(&View, usize, &Layer) -> Option<Replacement>,
) -> Result<Option<Network>, PassError> {
    if has_control_flow(network) {
        return Ok(None);
    }
    let view = View {
        net: network,
        readers: consumers(network),
    };
    let found: HashMap<usize, Replacement> = network
        .layers()
        .iter()
        .enumerate()
        .filter(|(_, l)| l.outputs.len() == 1)
        .filter_map(|(i, l)| matcher(&view, i, l).map(|r| (i, r)))
        .collect();
    if found.is_empty() {
        return Ok(None);
    }
    let mut rb = Rewriter::new(network);
    for (i, l) in network.layers().iter().enumerate() {
        let Some(r) = found.get(&i) else {
            rb.keep(i)?;
            continue;
        };
        let name = r.names.join(" + ");
        let mut inputs = Vec::with_capacity(r.inputs.len());
        for (slot, input) in r.inputs.iter().enumerate() {
            inputs.push(match input {
                None => None,
                Some(NewInput::Tensor(t)) => Some(rb.get(*t)?),
                Some(NewInput::Constant(v)) => {
                    Some(rb.constant(&format!("{name} [{slot}]"), v.clone())?)
                }
            });
        }
        rb.add(&name, r.kind.clone(), inputs, &l.outputs)?;
    }
    Ok(Some(rb.finish_as_source()?))
}

pub(super) fn names(layers: &[&Layer]) -> Vec<String> {
    layers.iter().map(|l| l.name.clone()).collect()
}

/// `exp(x - max(x)) / sum(exp(x - max(x)))` (the max is optional) → SoftMax.
#[derive(Clone, Copy, Debug, Default)]
pub struct SoftMaxFusion;

impl Pass for SoftMaxFusion {
    fn name(&self) -> &'static str {
        "softmax-fusion"
    }

    fn run(&self, network: &Network, _: &PassContext<'_>) -> Result<Option<Network>, PassError> {
        rewrite(network, |v, _, div| {
            let LayerKind::Elementwise {
                op: ElementwiseOp::Div,
            } = div.kind
            else {
                return None;
            };
            let (e, s) = (div.inputs[0]?, div.inputs[1]?);
            // `e` is read by the Div and by the sum.
            if v.readers[e.0].len() != 2 || v.net.outputs().contains(&e) {
                return None;
            }
            let sum = v.inner(s)?;
            let LayerKind::Reduce {
                op: ReduceOp::Sum,
                ref axes,
                keep_dims: true,
            } = sum.kind
            else {
                return None;
            };
            let [axis] = axes[..] else { return None };
            if sum.inputs.get(1).copied().flatten().is_some() || sum.inputs[0]? != e {
                return None;
            }
            let exp = v.producer(e)?;
            let LayerKind::Unary { op: UnaryOp::Exp } = exp.kind else {
                return None;
            };
            let u = exp.inputs[0]?;
            let mut matched = vec![exp, sum, div];
            let mut x = u;
            if let Some((sub, a, m)) = v.binary(u, ElementwiseOp::Sub) {
                let max = v.producer(m).filter(|_| v.readers[m.0].len() == 1)?;
                if let LayerKind::Reduce {
                    op: ReduceOp::Max,
                    axes: ref max_axes,
                    keep_dims: true,
                } = max.kind
                {
                    if max_axes[..] == [axis]
                        && max.inputs[0]? == a
                        && max.inputs.get(1).copied().flatten().is_none()
                    {
                        x = a;
                        matched.splice(0..0, [max, sub]);
                    }
                }
            }
            if !v.float(x) {
                return None;
            }
            Some(Replacement {
                names: names(&matched),
                kind: LayerKind::SoftMax { axis },
                inputs: vec![Some(NewInput::Tensor(x))],
            })
        })
    }
}

/// `(x - mean) / sqrt(mean((x - mean)²) + eps) [* gamma] [+ beta]` → Normalization.
///
/// A match at the Div (no affine part) and one at the final Add may both be found; the
/// shorter one's result is then unused and dead-layer elimination drops it.
#[derive(Clone, Copy, Debug, Default)]
pub struct NormalizationFusion;

impl Pass for NormalizationFusion {
    fn name(&self) -> &'static str {
        "normalization-fusion"
    }

    fn run(&self, network: &Network, _: &PassContext<'_>) -> Result<Option<Network>, PassError> {
        rewrite(network, |v, _, tail| {
            let mut bias = None;
            let mut scale = None;
            let mut layer = tail;
            let mut after = Vec::new();
            if let Some((rest, beta)) = affine_step(v, layer, ElementwiseOp::Sum) {
                bias = Some(beta);
                after.push(layer);
                layer = v.inner(rest)?;
            }
            if let Some((rest, gamma)) = affine_step(v, layer, ElementwiseOp::Prod) {
                scale = Some(gamma);
                after.push(layer);
                layer = v.inner(rest)?;
            }
            let (mut matched, x, axes, epsilon) = layer_norm_core(v, layer)?;
            if v.net.tensor(x).dtype != DataType::F32 {
                return None;
            }
            matched.extend(after.into_iter().rev());
            let filler = |value: f32, given: Option<TensorId>| match given {
                Some(t) => Some(NewInput::Tensor(t)),
                None => HostTensor::from_f32(vec![], vec![value])
                    .ok()
                    .map(NewInput::Constant),
            };
            Some(Replacement {
                names: names(&matched),
                kind: LayerKind::Normalization {
                    axes,
                    epsilon,
                    num_groups: 1,
                },
                inputs: vec![
                    Some(NewInput::Tensor(x)),
                    Some(filler(1.0, scale)?),
                    Some(filler(0.0, bias)?),
                ],
            })
        })
    }
}

/// `x / sqrt(mean(x²) + eps) [* gamma]` (also as `x * recip(sqrt(…))`, HF's
/// `x * rsqrt(…)` export) → RmsNormalization.
#[derive(Clone, Copy, Debug, Default)]
pub struct RmsNormalizationFusion;

impl Pass for RmsNormalizationFusion {
    fn name(&self) -> &'static str {
        "rms-normalization-fusion"
    }

    fn run(&self, network: &Network, _: &PassContext<'_>) -> Result<Option<Network>, PassError> {
        rewrite(network, |v, _, tail| {
            let (matched, x, axes, epsilon, scale) = match affine_step(v, tail, ElementwiseOp::Prod)
            {
                Some((rest, gamma)) => {
                    let (mut m, x, axes, eps) = rms_core(v, v.inner(rest)?)?;
                    m.push(tail);
                    (m, x, axes, eps, Some(gamma))
                }
                None => {
                    let (m, x, axes, eps) = rms_core(v, tail)?;
                    (m, x, axes, eps, None)
                }
            };
            if v.net.tensor(x).dtype != DataType::F32 {
                return None;
            }
            let scale = match scale {
                Some(t) => NewInput::Tensor(t),
                None => NewInput::Constant(HostTensor::from_f32(vec![], vec![1.0]).ok()?),
            };
            Some(Replacement {
                names: names(&matched),
                kind: LayerKind::RmsNormalization { axes, epsilon },
                inputs: vec![Some(NewInput::Tensor(x)), Some(scale)],
            })
        })
    }
}

/// `x / sqrt(mean(x²) + eps)` or `x · recip(sqrt(mean(x²) + eps))` ending at `l`.
fn rms_core<'n>(v: &View<'n>, l: &'n Layer) -> Option<(Vec<&'n Layer>, TensorId, Vec<usize>, f32)> {
    let LayerKind::Elementwise { op } = l.kind else {
        return None;
    };
    let (a, b) = (l.inputs[0]?, l.inputs[1]?);
    let mut matched = Vec::new();
    let (x, sqrt) = match op {
        ElementwiseOp::Div => (a, v.inner(b)?),
        ElementwiseOp::Prod => {
            let reciprocal_of = |t: TensorId| -> Option<(&'n Layer, &'n Layer)> {
                let r = v.inner(t)?;
                match r.kind {
                    LayerKind::Unary { op: UnaryOp::Recip } => Some((r, v.inner(r.inputs[0]?)?)),
                    LayerKind::Elementwise {
                        op: ElementwiseOp::Div,
                    } if v.is_scalar(r.inputs[0]?, 1.0, 0.0) => Some((r, v.inner(r.inputs[1]?)?)),
                    _ => None,
                }
            };
            let (x, (recip, sqrt)) = match (reciprocal_of(b), reciprocal_of(a)) {
                (Some(found), _) => (a, found),
                (None, Some(found)) => (b, found),
                _ => return None,
            };
            matched.push(recip);
            (x, sqrt)
        }
        _ => return None,
    };
    let LayerKind::Unary { op: UnaryOp::Sqrt } = sqrt.kind else {
        return None;
    };
    let (add_eps, p, q) = v.binary(sqrt.inputs[0]?, ElementwiseOp::Sum)?;
    let (var, epsilon) = if let Some(e) = v.scalar(q) {
        (p, e)
    } else {
        (q, v.scalar(p)?)
    };
    let mean = v.inner(var)?;
    let LayerKind::Reduce {
        op: ReduceOp::Mean,
        ref axes,
        keep_dims: true,
    } = mean.kind
    else {
        return None;
    };
    if mean.inputs.get(1).copied().flatten().is_some() {
        return None;
    }
    let square = v.inner(mean.inputs[0]?)?;
    let squares_x = match square.kind {
        LayerKind::Elementwise {
            op: ElementwiseOp::Pow,
        } => square.inputs[0]? == x && v.is_scalar(square.inputs[1]?, 2.0, 0.0),
        LayerKind::Elementwise {
            op: ElementwiseOp::Prod,
        } => square.inputs[0]? == x && square.inputs[1]? == x,
        _ => false,
    };
    if !squares_x {
        return None;
    }
    if !trailing(v.net, x, axes) {
        return None;
    }
    let mut all = vec![square, mean, add_eps, sqrt];
    all.extend(matched);
    all.push(l);
    Some((all, x, axes.clone(), epsilon as f32))
}

/// Whether `axes` are the last axes of `x` in order: the normalization layers' kernels
/// normalize rows (statistics over other axes, e.g. a batch norm's over N and H·W, stay
/// the reductions they are).
fn trailing(net: &Network, x: TensorId, axes: &[usize]) -> bool {
    let rank = net.tensor(x).shape.rank();
    !axes.is_empty() && axes.iter().enumerate().all(|(i, &a)| a == rank - axes.len() + i)
}

/// `rest op c` with a constant `c`: `(rest, c)`.
fn affine_step(v: &View, l: &Layer, op: ElementwiseOp) -> Option<(TensorId, TensorId)> {
    let LayerKind::Elementwise { op: o } = l.kind else {
        return None;
    };
    let (a, b) = (l.inputs[0]?, l.inputs[1]?);
    if o != op {
        return None;
    }
    if known_value(v.net, b).is_some() && known_value(v.net, a).is_none() {
        Some((a, b))
    } else if known_value(v.net, a).is_some() && known_value(v.net, b).is_none() {
        Some((b, a))
    } else {
        None
    }
}

/// `(x - mean(x)) / sqrt(mean((x - mean(x))²) + eps)` ending at `div`.
fn layer_norm_core<'n>(
    v: &View<'n>,
    div: &'n Layer,
) -> Option<(Vec<&'n Layer>, TensorId, Vec<usize>, f32)> {
    let LayerKind::Elementwise {
        op: ElementwiseOp::Div,
    } = div.kind
    else {
        return None;
    };
    let (d, std) = (div.inputs[0]?, div.inputs[1]?);
    let sqrt = v.inner(std)?;
    let LayerKind::Unary { op: UnaryOp::Sqrt } = sqrt.kind else {
        return None;
    };
    let (add_eps, var, eps) = v.binary(sqrt.inputs[0]?, ElementwiseOp::Sum)?;
    let (var, epsilon) = if let Some(e) = v.scalar(eps) {
        (var, e)
    } else {
        (eps, v.scalar(var)?)
    };
    let var_mean = v.inner(var)?;
    let LayerKind::Reduce {
        op: ReduceOp::Mean,
        ref axes,
        keep_dims: true,
    } = var_mean.kind
    else {
        return None;
    };
    let square = v.inner(var_mean.inputs[0]?)?;
    let squares_d = match square.kind {
        LayerKind::Elementwise {
            op: ElementwiseOp::Pow,
        } => square.inputs[0]? == d && v.is_scalar(square.inputs[1]?, 2.0, 0.0),
        LayerKind::Elementwise {
            op: ElementwiseOp::Prod,
        } => square.inputs[0]? == d && square.inputs[1]? == d,
        _ => false,
    };
    let d_readers = if matches!(
        square.kind,
        LayerKind::Elementwise {
            op: ElementwiseOp::Prod
        }
    ) {
        3
    } else {
        2
    };
    if !squares_d || v.readers[d.0].len() != d_readers || v.net.outputs().contains(&d) {
        return None;
    }
    let sub = v.producer(d)?;
    let LayerKind::Elementwise {
        op: ElementwiseOp::Sub,
    } = sub.kind
    else {
        return None;
    };
    let (x, mean) = (sub.inputs[0]?, sub.inputs[1]?);
    let mean_layer = v.inner(mean)?;
    let LayerKind::Reduce {
        op: ReduceOp::Mean,
        axes: ref mean_axes,
        keep_dims: true,
    } = mean_layer.kind
    else {
        return None;
    };
    if mean_axes != axes
        || mean_layer.inputs[0]? != x
        || [var_mean, mean_layer]
            .iter()
            .any(|r| r.inputs.get(1).copied().flatten().is_some())
    {
        return None;
    }
    if !trailing(v.net, x, axes) {
        return None;
    }
    let matched = vec![mean_layer, sub, square, var_mean, add_eps, sqrt, div];
    Some((matched, x, axes.clone(), epsilon as f32))
}

/// GELU, erf form `0.5·x·(1 + erf(x/√2))` and tanh form
/// `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`, in the multiplication orders exporters
/// produce → Activation GeluErf / GeluTanh.
#[derive(Clone, Copy, Debug, Default)]
pub struct GeluFusion;

impl Pass for GeluFusion {
    fn name(&self) -> &'static str {
        "gelu-fusion"
    }

    fn run(&self, network: &Network, _: &PassContext<'_>) -> Result<Option<Network>, PassError> {
        rewrite(network, |v, _, tail| {
            let LayerKind::Elementwise {
                op: ElementwiseOp::Prod,
            } = tail.kind
            else {
                return None;
            };
            // Collect the product's factors through single-reader Muls.
            let mut factors = Vec::new();
            let mut muls = Vec::new();
            collect_factors(v, tail, &mut factors, &mut muls, 3)?;
            // Factors: x, 0.5 and (1 + f(x)) where f is erf(x/√2) or tanh(…).
            let half = factors.iter().position(|&t| v.is_scalar(t, 0.5, 1e-6))?;
            let rest: Vec<TensorId> = factors
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != half)
                .map(|(_, &t)| t)
                .collect();
            let [a, b] = rest[..] else { return None };
            let (x, one_plus) = if v.producer(b).is_some_and(|l| {
                matches!(
                    l.kind,
                    LayerKind::Elementwise {
                        op: ElementwiseOp::Sum
                    }
                )
            }) {
                (a, b)
            } else {
                (b, a)
            };
            let (add, p, q) = v.binary(one_plus, ElementwiseOp::Sum)?;
            let f = v.other_than_scalar(p, q, 1.0, 0.0)?;
            let func = v.inner(f)?;
            let (kind, inner) = match func.kind {
                LayerKind::Unary { op: UnaryOp::Erf } => (
                    ActivationKind::GeluErf,
                    erf_argument(v, func.inputs[0]?, x)?,
                ),
                LayerKind::Activation {
                    kind: ActivationKind::Tanh,
                } => (
                    ActivationKind::GeluTanh,
                    tanh_argument(v, func.inputs[0]?, x)?,
                ),
                _ => return None,
            };
            if !v.float(x) {
                return None;
            }
            let mut matched = inner;
            matched.extend([func, add]);
            matched.extend(muls.into_iter().rev());
            Some(Replacement {
                names: names(&matched),
                kind: LayerKind::Activation { kind },
                inputs: vec![Some(NewInput::Tensor(x))],
            })
        })
    }
}

/// SiLU as exporters write it, `x · sigmoid(x)` in either order → Activation Swish, so a
/// convolution or product before it takes it into its epilogue (the sigmoid's second reader,
/// the product, otherwise ends the chain there).
#[derive(Clone, Copy, Debug, Default)]
pub struct SwishFusion;

impl Pass for SwishFusion {
    fn name(&self) -> &'static str {
        "swish-fusion"
    }

    fn run(&self, network: &Network, _: &PassContext<'_>) -> Result<Option<Network>, PassError> {
        rewrite(network, |v, _, tail| {
            let LayerKind::Elementwise { op: ElementwiseOp::Prod } = tail.kind else { return None };
            let (a, b) = (tail.inputs.first().copied().flatten()?, tail.inputs.get(1).copied().flatten()?);
            let sigmoid_of = |t: TensorId| {
                let l = v.inner(t)?;
                if !matches!(l.kind, LayerKind::Activation { kind: ActivationKind::Sigmoid }) {
                    return None;
                }
                Some((l, l.inputs.first().copied().flatten()?))
            };
            let (sigmoid, x) = match (sigmoid_of(b), sigmoid_of(a)) {
                (Some((l, x)), _) if x == a => (l, x),
                (_, Some((l, x))) if x == b => (l, x),
                _ => return None,
            };
            let same = v.net.tensor(x).shape == v.net.tensor(tail.outputs[0]).shape;
            (v.float(x) && same).then(|| Replacement {
                names: names(&[sigmoid, tail]),
                kind: LayerKind::Activation { kind: ActivationKind::Swish },
                inputs: vec![Some(NewInput::Tensor(x))],
            })
        })
    }
}

/// The leaves of a product tree rooted at `l` (depth-limited), recording the Mul layers.
fn collect_factors<'n>(
    v: &View<'n>,
    l: &'n Layer,
    factors: &mut Vec<TensorId>,
    muls: &mut Vec<&'n Layer>,
    depth: usize,
) -> Option<()> {
    if depth == 0 {
        return None;
    }
    muls.push(l);
    for t in [l.inputs[0]?, l.inputs[1]?] {
        match v.inner(t) {
            Some(p)
                if matches!(
                    p.kind,
                    LayerKind::Elementwise {
                        op: ElementwiseOp::Prod
                    }
                ) && factors.len() + 2 <= 3 =>
            {
                collect_factors(v, p, factors, muls, depth - 1)?;
            }
            _ => factors.push(t),
        }
    }
    (factors.len() <= 3).then_some(())
}

/// `x / √2` or `x · (1/√2)`.
fn erf_argument<'n>(v: &View<'n>, t: TensorId, x: TensorId) -> Option<Vec<&'n Layer>> {
    let l = v.inner(t)?;
    let (a, c) = (l.inputs[0]?, l.inputs[1]?);
    let ok = match l.kind {
        LayerKind::Elementwise {
            op: ElementwiseOp::Div,
        } => a == x && v.is_scalar(c, std::f64::consts::SQRT_2, 1e-4),
        LayerKind::Elementwise {
            op: ElementwiseOp::Prod,
        } => v.other_than_scalar(a, c, std::f64::consts::FRAC_1_SQRT_2, 1e-4) == Some(x),
        _ => false,
    };
    ok.then(|| vec![l])
}

/// `√(2/π) · (x + 0.044715 · x³)` with `x³` as `Pow(x, 3)` or `x·x·x`.
fn tanh_argument<'n>(v: &View<'n>, t: TensorId, x: TensorId) -> Option<Vec<&'n Layer>> {
    let (outer, a, b) = v.binary(t, ElementwiseOp::Prod)?;
    let sum = v.other_than_scalar(a, b, (2.0 / std::f64::consts::PI).sqrt(), 1e-4)?;
    let (add, p, q) = v.binary(sum, ElementwiseOp::Sum)?;
    let cubic = if p == x {
        q
    } else if q == x {
        p
    } else {
        return None;
    };
    let (scale, c, d) = v.binary(cubic, ElementwiseOp::Prod)?;
    let cube = v.other_than_scalar(c, d, 0.044715, 1e-6)?;
    let mut matched = Vec::new();
    let pow = v.inner(cube)?;
    match pow.kind {
        LayerKind::Elementwise {
            op: ElementwiseOp::Pow,
        } if pow.inputs[0]? == x && v.is_scalar(pow.inputs[1]?, 3.0, 0.0) => matched.push(pow),
        LayerKind::Elementwise {
            op: ElementwiseOp::Prod,
        } => {
            let (m, n) = (pow.inputs[0]?, pow.inputs[1]?);
            let square = if m == x {
                n
            } else if n == x {
                m
            } else {
                return None;
            };
            let (sq, s1, s2) = v.binary(square, ElementwiseOp::Prod)?;
            if s1 != x || s2 != x {
                return None;
            }
            matched.extend([sq, pow]);
        }
        _ => return None,
    }
    matched.extend([scale, add, outer]);
    Some(matched)
}

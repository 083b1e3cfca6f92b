//! No-op removal: Identity, a Cast to the type the tensor already has, a Shuffle that
//! changes nothing (identity transposes, a reshape to the same fixed shape), a Padding by
//! zero everywhere, a Shuffle whose transposes only move size-1 axes (a reshape), a reshape
//! of a reshape (the first one's shape is dropped: only the last one counts), and a Gather that
//! takes every element of its axis in order, which is a reshape (the dynamo exporter writes
//! `as_strided` views that way). A Gather of one constant index of a float tensor is a Slice
//! (then a reshape dropping the axis for a scalar index): `nn.MultiheadAttention`'s q/k/v
//! split and a class-token pick are exported so, and a slice is a view on cuda where a
//! gather copies.

use super::graph::{consumers, has_control_flow, known_value};
use crate::ir::rewrite::Rewriter;
use super::{Pass, PassContext, PassError};
use crate::ir::layer::{GatherMode, LayerKind, ShuffleParams};
use crate::ir::network::{Network, TensorId};
use crate::ir::shape::Dim;
use crate::ir::tensor::HostTensor;

#[derive(Clone, Copy, Debug, Default)]
pub struct NoOpRemoval;

impl Pass for NoOpRemoval {
    fn name(&self) -> &'static str {
        "no-op-removal"
    }

    fn run(&self, network: &Network, _: &PassContext<'_>) -> Result<Option<Network>, PassError> {
        if has_control_flow(network) {
            return Ok(None);
        }
        let readers = consumers(network);
        let mut rb = Rewriter::new(network);
        let mut changed = false;
        for (i, l) in network.layers().iter().enumerate() {
            let Some(&out) = l.outputs.first() else {
                rb.keep(i)?;
                continue;
            };
            // A network output keeps its producer: its name and format live on it.
            let is_output = network.outputs().contains(&out);
            if !is_output && is_noop(network, &l.kind, &l.inputs, out) {
                let src = l.inputs[0].ok_or_else(|| {
                    PassError::Internal(format!("no-op `{}` has no input", l.name))
                })?;
                let to = rb.get(src)?;
                rb.alias(out, to);
                changed = true;
                continue;
            }
            if let Some(params) = gather_as_reshape(network, &l.kind, &l.inputs) {
                let inputs = rb.get_slots(&l.inputs[..1])?;
                rb.add(&l.name, LayerKind::Shuffle(params), inputs, &l.outputs)?;
                changed = true;
                continue;
            }
            if let Some(pick) = gather_as_slice(network, &l.kind, &l.inputs) {
                add_slice(&mut rb, &l.name, pick, l.inputs[0], out)?;
                changed = true;
                continue;
            }
            if let Some((kind, inputs)) = merged_reshape(network, &readers, l) {
                let inputs = rb.get_slots(&inputs)?;
                rb.add(&l.name, kind, inputs, &l.outputs)?;
                changed = true;
                continue;
            }
            if let Some(params) = unit_moves_as_reshape(network, l) {
                let inputs = rb.get_slots(&l.inputs[..1])?;
                rb.add(&l.name, LayerKind::Shuffle(params), inputs, &l.outputs)?;
                changed = true;
                continue;
            }
            rb.keep(i)?;
        }
        if !changed {
            return Ok(None);
        }
        Ok(Some(rb.finish_as_source()?))
    }
}

fn is_noop(net: &Network, kind: &LayerKind, inputs: &[Option<TensorId>], out: TensorId) -> bool {
    let Some(Some(x)) = inputs.first() else {
        return false;
    };
    let (x, y) = (net.tensor(*x), net.tensor(out));
    let same = x.dtype == y.dtype && x.shape.as_fixed().is_some() && x.shape == y.shape;
    match kind {
        LayerKind::Identity => x.dtype == y.dtype && x.shape == y.shape,
        LayerKind::Cast { to } => *to == x.dtype && x.shape == y.shape,
        LayerKind::Shuffle(p) => {
            let identity = |perm: &[usize]| perm.iter().enumerate().all(|(i, &p)| i == p);
            same && identity(&p.first_transpose) && identity(&p.second_transpose)
        }
        // Padding by nothing (Swin pads its windows to a multiple of the window size: by zero
        // for 224x224 images), whatever the mode and fill value.
        LayerKind::Padding { .. } => {
            let pads = inputs.get(1).copied().flatten().and_then(|p| known_value(net, p)).and_then(HostTensor::to_i64_vec);
            x.dtype == y.dtype && pads.is_some_and(|p| p.iter().all(|&q| q == 0))
        }
        _ => false,
    }
}

/// A reshape (plain, or moving only size-1 axes) reading the output of other reshapes that
/// nothing else reads: reshape the first one's input directly.
fn merged_reshape(
    net: &Network,
    readers: &[Vec<(usize, usize)>],
    layer: &crate::ir::network::Layer,
) -> Option<(LayerKind, Vec<Option<TensorId>>)> {
    let inputs = &layer.inputs;
    let LayerKind::Shuffle(outer) = &layer.kind else {
        return None;
    };
    let outer = if is_plain_reshape(outer) { outer.clone() } else { unit_moves_as_reshape(net, layer)? };
    // A `0` placeholder in the outer dims copies a dim of the first reshape's output,
    // which the merged layer no longer sees.
    let outer_dims = match inputs.get(1).copied().flatten() {
        Some(t) => known_value(net, t)?.to_i64_vec()?,
        None => outer.reshape.clone()?,
    };
    if outer.zero_is_placeholder && outer_dims.contains(&0) {
        return None;
    }
    // Back through every reshape before it that nothing else reads: a chain merges at once.
    let mut source = (*inputs.first()?)?;
    let mut merged = 0;
    while let Some(earlier) = reshape_producer(net, readers, source) {
        source = earlier;
        merged += 1;
    }
    if merged == 0 {
        return None;
    }
    let mut new_inputs = vec![Some(source)];
    new_inputs.extend(inputs.iter().skip(1).copied());
    Some((LayerKind::Shuffle(outer), new_inputs))
}

/// The input of the plain (or size-1-axes-only) reshape producing `t` when nothing else reads
/// `t`, and its run-time dims, if any, are known (they must not be dropped silently).
fn reshape_producer(net: &Network, readers: &[Vec<(usize, usize)>], t: TensorId) -> Option<TensorId> {
    if readers[t.0].len() != 1 || net.outputs().contains(&t) {
        return None;
    }
    let inner = net.layer(net.tensor(t).producer?.0);
    let LayerKind::Shuffle(p) = &inner.kind else {
        return None;
    };
    let dims_known = inner.inputs.get(1).copied().flatten().is_none_or(|t| known_value(net, t).is_some());
    (dims_known && (is_plain_reshape(p) || unit_moves_as_reshape(net, inner).is_some())).then_some(inner.inputs[0]?)
}

/// The reshape a Gather is when its constant indices are `0, 1, …, n-1` in row-major order
/// over the whole gathered axis: the axis is replaced by the indices' shape.
fn gather_as_reshape(net: &Network, kind: &LayerKind, inputs: &[Option<TensorId>]) -> Option<ShuffleParams> {
    let LayerKind::Gather { mode: GatherMode::Default { axis } } = kind else {
        return None;
    };
    let (data, indices) = ((*inputs.first()?)?, (*inputs.get(1)?)?);
    let dims = net.tensor(data).shape.dims();
    let n = dims.get(*axis)?.fixed()?;
    let values = known_value(net, indices)?;
    let in_order = values.len() == n && n > 0 && values.to_i64_vec()?.iter().enumerate().all(|(i, &v)| v == i as i64 || v == i as i64 - n as i64);
    if !in_order || values.shape().contains(&0) {
        return None;
    }
    // Dims before the axis are copied (`0`); the ones after it must be fixed.
    let mut reshape = vec![0i64; *axis];
    reshape.extend(values.shape().iter().map(|&d| d as i64));
    for d in &dims[axis + 1..] {
        reshape.push(i64::try_from(d.fixed()?).ok()?);
    }
    Some(ShuffleParams { reshape: Some(reshape), zero_is_placeholder: true, ..Default::default() })
}

/// What a Gather of one constant index takes: element `index` of `axis`, and the reshape
/// dropping the axis afterwards (None: the index was a one-element list, the axis stays).
struct Pick {
    axis: usize,
    index: i64,
    drop_axis: Option<Vec<i64>>,
}

/// The slice a Gather is when it reads a float tensor at one constant index of an axis of
/// fixed length. Only float data: integer gathers are shape arithmetic, which shape
/// inference evaluates as Gathers.
fn gather_as_slice(net: &Network, kind: &LayerKind, inputs: &[Option<TensorId>]) -> Option<Pick> {
    let LayerKind::Gather { mode: GatherMode::Default { axis } } = kind else {
        return None;
    };
    let (data, indices) = ((*inputs.first()?)?, (*inputs.get(1)?)?);
    let x = net.tensor(data);
    if !x.dtype.is_float() {
        return None;
    }
    let dims = x.shape.dims();
    let n = i64::try_from(dims.get(*axis)?.fixed()?).ok()?;
    let values = known_value(net, indices)?;
    let [v] = values.to_i64_vec()?[..] else { return None };
    let index = if v < 0 { v + n } else { v };
    if !(0..n).contains(&index) || values.shape().len() > 1 {
        return None;
    }
    let drop_axis = if values.shape().is_empty() {
        // Dims before the axis are copied (`0`); after it, fixed ones are written out and at
        // most one dynamic dim is inferred (`-1`).
        let mut reshape = vec![0i64; *axis];
        let after = &dims[axis + 1..];
        // A fixed 0 would read as a placeholder.
        if after.iter().filter(|d| !matches!(d, Dim::Fixed(_))).count() > 1 || after.contains(&Dim::Fixed(0)) {
            return None;
        }
        for d in after {
            reshape.push(match d.fixed() {
                Some(f) => i64::try_from(f).ok()?,
                None => -1,
            });
        }
        Some(reshape)
    } else {
        None
    };
    Some(Pick { axis: *axis, index, drop_axis })
}

/// `Slice(x, [index], [index + 1], [axis])`, then the reshape dropping the axis, carrying `out`.
fn add_slice(rb: &mut Rewriter<'_>, name: &str, pick: Pick, data: Option<TensorId>, out: TensorId) -> Result<(), PassError> {
    let int = |rb: &mut Rewriter<'_>, what: &str, v: i64| -> Result<Option<TensorId>, PassError> {
        let value = HostTensor::from_i64(vec![1], vec![v]).map_err(|e| PassError::Internal(e.to_string()))?;
        Ok(Some(rb.constant(&format!("{name} {what}"), value)?))
    };
    let x = rb.get_slots(&[data])?;
    let inputs = vec![x[0], int(rb, "from", pick.index)?, int(rb, "to", pick.index + 1)?, int(rb, "axis", pick.axis as i64)?];
    let Some(reshape) = pick.drop_axis else {
        rb.add(name, LayerKind::Slice, inputs, &[out])?;
        return Ok(());
    };
    let slice = rb.out_mut().add_layer(&format!("{name} (slice)"), LayerKind::Slice, inputs)?;
    let sliced = rb.out().output(slice, 0);
    let params = ShuffleParams { reshape: Some(reshape), zero_is_placeholder: true, ..Default::default() };
    rb.add(name, LayerKind::Shuffle(params), vec![Some(sliced)], &[out])?;
    Ok(())
}

/// A Shuffle that only reshapes.
fn is_plain_reshape(p: &ShuffleParams) -> bool {
    p.first_transpose.is_empty() && p.second_transpose.is_empty()
}

/// A Shuffle with fixed shapes whose transposes only move size-1 axes (PyTorch's unsqueeze
/// and squeeze, exported as a reshape and a transpose) as the plain reshape it is: its
/// elements stay in row-major order ([`crate::plan::strides`]).
fn unit_moves_as_reshape(net: &Network, layer: &crate::ir::network::Layer) -> Option<ShuffleParams> {
    use crate::plan::strides::{contiguous, shuffled};
    let LayerKind::Shuffle(p) = &layer.kind else { return None };
    if is_plain_reshape(p) || layer.inputs.get(1).copied().flatten().is_some() {
        return None;
    }
    let x = net.tensor((*layer.inputs.first()?)?).shape.as_fixed()?;
    let y = net.tensor(*layer.outputs.first()?).shape.as_fixed()?;
    let (shape, strides) = shuffled(p, &x, &contiguous(&x), &y)?;
    let packed = contiguous(&shape);
    let in_order = shape.iter().zip(strides.iter().zip(&packed)).all(|(&n, (s, q))| n == 1 || s == q);
    let dims = y.iter().map(|&d| i64::try_from(d).ok()).collect::<Option<Vec<i64>>>()?;
    in_order.then(|| ShuffleParams { reshape: Some(dims), ..Default::default() })
}

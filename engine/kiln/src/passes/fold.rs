//! Constant and shape-tensor folding: a layer whose inputs are all known becomes Constant
//! layers holding its outputs.
//!
//! Values come from two places, cheapest first: shape inference (a `Shape` of a fully
//! fixed tensor and the small integer arithmetic after it), and the folding backend for
//! everything else (float weight transposes, casts, dequantization…).
//! Results larger than [`MAX_FOLDED_ELEMENTS`] are not folded, so folding never blows up
//! the engine's weights; a layer the backend fails on is kept (its error, if any, belongs
//! to run time).

use super::graph::{has_control_flow};
use crate::ir::rewrite::Rewriter;
use super::{Pass, PassContext, PassError};
use crate::backend::Backend;
use crate::ir::infer::{infer_layer, resolve_slice, Fact, OutFact, SliceAxis};
use crate::ir::layer::{GatherMode, LayerKind};
use crate::ir::network::{Layer, Network, TensorId};
use crate::ir::shape::normalize_axis;
use crate::ir::tensor::HostTensor;
use std::collections::HashSet;
use std::sync::Arc;

/// Most elements a folded output may have.
pub const MAX_FOLDED_ELEMENTS: usize = 1 << 20;

#[derive(Clone, Copy, Debug, Default)]
pub struct ConstantFolding;

impl Pass for ConstantFolding {
    fn name(&self) -> &'static str {
        "constant-folding"
    }

    fn run(&self, network: &Network, context: &PassContext<'_>) -> Result<Option<Network>, PassError> {
        fold(network, context, false)
    }
}

/// Folding of the values a graph computes from tensors' shapes alone (`Shape` and the layers
/// reading only such values and constants), such as an attention's scale `1/√d` taken from
/// Q's shape. The builder runs it before Q/DQ propagation, which moves a layout layer past a
/// scale only once the scale is known; folding everything there would fold the casts of an
/// integer layer's expansion the Q/DQ fusion looks for.
#[derive(Clone, Copy, Debug, Default)]
pub struct ShapeValueFolding;

impl Pass for ShapeValueFolding {
    fn name(&self) -> &'static str {
        "shape-value-folding"
    }

    fn run(&self, network: &Network, context: &PassContext<'_>) -> Result<Option<Network>, PassError> {
        fold(network, context, true)
    }
}

fn fold(network: &Network, context: &PassContext<'_>, shape_values_only: bool) -> Result<Option<Network>, PassError> {
    if has_control_flow(network) {
        return Ok(None);
    }
    let mut rb = Rewriter::new(network);
    let mut changed = false;
    // The source tensors computed from shapes alone (shape_values_only).
    let mut from_shapes: HashSet<TensorId> = HashSet::new();
    for (i, l) in network.layers().iter().enumerate() {
        if shape_values_only {
            let present = || l.inputs.iter().flatten();
            // Beside shape values, only small constants (a divisor, a slice's bounds): not a
            // reshape of weights.
            let small_constant = |t: TensorId| network.tensor(t).value.as_deref().is_some_and(|v| v.len() <= 64);
            let shaped = matches!(l.kind, LayerKind::Shape)
                || (present().any(|t| from_shapes.contains(t)) && present().all(|&t| from_shapes.contains(&t) || small_constant(t)));
            if shaped {
                from_shapes.extend(l.outputs.iter().copied());
            }
            if !shaped || matches!(l.kind, LayerKind::Shape) {
                rb.keep(i)?;
                continue;
            }
        }
        if !foldable(&l.kind) {
            rb.keep(i)?;
            continue;
        }
        let inputs = rb.get_slots(&l.inputs)?;
        if let Some(dims) = fixed_dims_of_shape(rb.out(), &l.kind, &inputs) {
            let weights = rb.out_mut().add_shared_weights(Arc::new(dims));
            rb.add(&l.name, LayerKind::Constant { weights }, vec![], &l.outputs)?;
            changed = true;
            continue;
        }
        let values: Option<Vec<Option<Arc<HostTensor>>>> = inputs
            .iter()
            .map(|t| match t {
                None => Some(None),
                Some(t) => rb.out().tensor(*t).value.clone().map(Some),
            })
            .collect();
        let Some(values) = values else {
            rb.keep(i)?;
            continue;
        };
        match evaluate(rb.out(), l, &inputs, &values, context.folding_backend)? {
            Some(outputs) => {
                for (k, (value, &old)) in outputs.into_iter().zip(&l.outputs).enumerate() {
                    let name = if k == 0 { l.name.clone() } else { format!("{} [{k}]", l.name) };
                    let weights = rb.out_mut().add_shared_weights(Arc::new(value));
                    rb.add(&name, LayerKind::Constant { weights }, vec![], &[old])?;
                }
                changed = true;
            }
            None => {
                rb.keep(i)?;
            }
        }
    }
    if !changed {
        return Ok(None);
    }
    Ok(Some(rb.finish_as_source()?))
}

/// `Gather(Shape(x), indices)` or `Slice(Shape(x), …)` picking only dims of `x` that are
/// fixed: the constant dims, even while other dims of `x` (the batch) are dynamic. The legacy
/// exporter's attention takes its scale from `Slice(Shape(q), -1)`.
fn fixed_dims_of_shape(dst: &Network, kind: &LayerKind, inputs: &[Option<TensorId>]) -> Option<HostTensor> {
    let shape = inputs.first().copied().flatten()?;
    let (producer, _) = dst.tensor(shape).producer?;
    let shape_layer = dst.layer(producer);
    if !matches!(shape_layer.kind, LayerKind::Shape) {
        return None;
    }
    let dims = dst.tensor(shape_layer.inputs.first().copied().flatten()?).shape.dims();
    let known = |slot: usize| -> Option<Option<Vec<i64>>> {
        match inputs.get(slot).copied().flatten() {
            None => Some(None),
            Some(t) => Some(Some(dst.tensor(t).value.as_deref()?.to_i64_vec()?)),
        }
    };
    let (picked, index_shape) = match kind {
        LayerKind::Gather { mode: GatherMode::Default { axis: 0 } } => {
            let indices = inputs.get(1).copied().flatten()?;
            let picked = known(1)??.iter().map(|&i| normalize_axis(i, dims.len())).collect::<Option<Vec<usize>>>()?;
            (picked, dst.tensor(indices).shape.as_fixed()?)
        }
        LayerKind::Slice => {
            let (starts, ends, axes, steps) = (known(1)??, known(2)??, known(3)?, known(4)?);
            let plan = resolve_slice(&[dims.len()], &starts, &ends, axes.as_deref(), steps.as_deref()).ok()?;
            let SliceAxis { start, len, step } = *plan.first()?;
            let picked = (0..len as i64).map(|k| usize::try_from(start + k * step).ok()).collect::<Option<Vec<usize>>>()?;
            (picked, vec![len])
        }
        _ => return None,
    };
    let values = picked.iter().map(|&i| dims[i].fixed().and_then(|d| i64::try_from(d).ok())).collect::<Option<Vec<i64>>>()?;
    HostTensor::from_i64(index_shape, values).ok()
}

/// Layer kinds that compute a value from their inputs alone.
fn foldable(kind: &LayerKind) -> bool {
    use LayerKind as K;
    !matches!(
        kind,
        K::Constant { .. }
            | K::Assertion { .. }
            | K::Plugin(_)
    ) && !kind.is_control_boundary()
}

/// The outputs of layer `l` on known inputs, or `None` when it should stay a layer.
fn evaluate(
    dst: &Network,
    l: &Layer,
    inputs: &[Option<TensorId>],
    values: &[Option<Arc<HostTensor>>],
    backend: Option<&dyn Backend>,
) -> Result<Option<Vec<HostTensor>>, PassError> {
    if inputs.iter().all(Option::is_none) {
        return Ok(None);
    }
    let facts: Vec<Option<Fact>> = inputs.iter().map(|t| t.map(|t| dst.fact(t))).collect();
    let Ok(outs) = infer_layer(&l.kind, &facts, &|w| dst.weights_blob(w)) else {
        return Ok(None);
    };
    let small = |o: &OutFact| o.shape.volume().is_some_and(|v| v <= MAX_FOLDED_ELEMENTS);
    if outs.is_empty() || !outs.iter().all(small) {
        return Ok(None);
    }
    // Inference already knows the value (Shape of a fixed tensor, Identity of a constant,
    // small integer shape arithmetic).
    if let Some(known) = outs
        .iter()
        .map(|o| o.value.clone())
        .collect::<Option<Vec<_>>>()
    {
        return Ok(Some(known));
    }
    let Some(backend) = backend else {
        return Ok(None);
    };
    Ok(run_on_backend(backend, l, values))
}

/// Most layers [`evaluate_constant`] evaluates for one value.
const MAX_CONE_LAYERS: usize = 512;

/// The value of `t` when every layer it is computed from reads constants alone: its cone
/// evaluated layer by layer as the folding would (each output at most
/// [`MAX_FOLDED_ELEMENTS`]), for a pass that needs one value before the folding runs (the
/// builder folds everything only after the Q/DQ fusion). Nothing is evaluated unless the whole
/// cone (at most [`MAX_CONE_LAYERS`] layers) reads no network input.
pub(crate) fn evaluate_constant(net: &Network, t: TensorId, backend: &dyn Backend) -> Option<Arc<HostTensor>> {
    // The cone's layers, walked back without evaluating anything.
    let mut cone = std::collections::BTreeSet::new();
    let mut pending = vec![t];
    while let Some(t) = pending.pop() {
        if net.tensor(t).value.is_some() {
            continue;
        }
        let (producer, _) = net.tensor(t).producer?;
        let l = net.layer(producer);
        let constant = matches!(l.kind, LayerKind::Constant { .. });
        if !constant && !foldable(&l.kind) {
            return None;
        }
        // A Shape of a fixed tensor is known without its input.
        let shape = matches!(l.kind, LayerKind::Shape);
        if shape && !l.inputs.iter().flatten().all(|&i| net.tensor(i).shape.as_fixed().is_some()) {
            return None;
        }
        if cone.insert(producer.0) && !constant && !shape {
            if cone.len() > MAX_CONE_LAYERS {
                return None;
            }
            pending.extend(l.inputs.iter().flatten());
        }
    }
    // In source order, each layer's inputs known before it.
    let mut known: std::collections::HashMap<TensorId, Arc<HostTensor>> = std::collections::HashMap::new();
    let value = |known: &std::collections::HashMap<TensorId, Arc<HostTensor>>, t: TensorId| net.tensor(t).value.clone().or_else(|| known.get(&t).cloned());
    for i in cone {
        let l = &net.layers()[i];
        let outputs = match &l.kind {
            LayerKind::Constant { weights } => vec![(*net.weights_blob(*weights)?).clone()],
            LayerKind::Shape => evaluate(net, l, &l.inputs, &vec![None; l.inputs.len()], None).ok()??,
            _ => {
                let values = l.inputs.iter().map(|i| i.map(|i| value(&known, i)).map_or(Some(None), |v| v.map(Some))).collect::<Option<Vec<_>>>()?;
                evaluate(net, l, &l.inputs, &values, Some(backend)).ok()??
            }
        };
        for (&o, v) in l.outputs.iter().zip(outputs) {
            known.insert(o, Arc::new(v));
        }
    }
    value(&known, t)
}

/// Runs one layer on constant inputs through the backend; `None` on any failure.
pub(super) fn run_on_backend(
    backend: &dyn Backend,
    l: &Layer,
    values: &[Option<Arc<HostTensor>>],
) -> Option<Vec<HostTensor>> {
    let mut net = Network::new("constant folding");
    let mut inputs = Vec::with_capacity(values.len());
    for v in values {
        inputs.push(match v {
            None => None,
            Some(v) => {
                let w = net.add_shared_weights(v.clone());
                let c = net
                    .add_layer("", LayerKind::Constant { weights: w }, vec![])
                    .ok()?;
                Some(net.output(c, 0))
            }
        });
    }
    let id = net.add_layer(&l.name, l.kind.clone(), inputs).ok()?;
    for t in net.layer(id).outputs.clone() {
        net.mark_output(t).ok()?;
    }
    let exe = backend.prepare(&net).ok()?;
    exe.execute(&[]).ok()
}

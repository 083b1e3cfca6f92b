//! Control flow: Loop, Scan and If, lowered onto kiln's loop and conditional boundary
//! layers (their bodies and branches imported into the same network).
//!
//! Loop-carried values keep the static shape of their initial value when the body keeps
//! it; a body that changes a dim (a value that grows each iteration) is imported again with
//! that dim dynamic. The abandoned first import is dead and the builder removes it.

use super::Registry;
use crate::context::NodeContext;
use crate::error::ImportError;
use crate::proto::GraphProto;
use kiln::{
    DataType, Dim, HostTensor, LayerId, LayerKind, LoopId, LoopOutputKind, Shape, TensorData, TensorId, TripLimitKind,
};

pub(super) fn register(r: &mut Registry) {
    r.add("Loop", &[1, 11, 13, 16, 19, 21, 23, 24, 25], import_loop);
    r.add("If", &[1, 11, 13, 16, 19, 21, 23, 24, 25], import_if);
    r.add("Scan", &[8, 9, 11, 16, 19, 21, 23, 24, 25], import_scan);
}

/// A 0-D version of a one-element tensor.
fn scalar(ctx: &mut NodeContext, part: &str, t: TensorId) -> Result<TensorId, ImportError> {
    if ctx.rank(t) == 0 {
        return Ok(t);
    }
    ctx.reshape(part, t, vec![])
}

fn recurrence(ctx: &mut NodeContext, looping: LoopId, initial: TensorId, shape: &Shape) -> Result<LayerId, ImportError> {
    let declared = (ctx.net.tensor(initial).shape != *shape).then(|| shape.clone());
    let name = format!("{}/carried {}", ctx.name, ctx.net.tensor(initial).name);
    ctx.net
        .add_layer(&name, LayerKind::Recurrence { looping, shape: declared }, vec![Some(initial), None])
        .map_err(|e| ctx.network_error(e))
}

/// The declared shapes, widened where a next value may differ; an error when a next value
/// changes type or rank.
fn widen(ctx: &NodeContext, shapes: &[Shape], initial: &[TensorId], nexts: &[TensorId]) -> Result<Vec<Shape>, ImportError> {
    shapes
        .iter()
        .zip(initial.iter().zip(nexts))
        .map(|(shape, (&init, &next))| {
            let n = ctx.net.tensor(next);
            if n.dtype != ctx.dtype(init) || n.shape.rank() != shape.rank() {
                return Err(ctx.invalid(format!(
                    "loop-carried value `{}` is {}{} initially but the body makes it {}{}",
                    ctx.net.tensor(init).name,
                    ctx.dtype(init),
                    shape,
                    n.dtype,
                    n.shape
                )));
            }
            let dims = shape
                .dims()
                .iter()
                .zip(n.shape.dims())
                .map(|(d, e)| if *d == Dim::Unknown || d.same_as(e) { d.clone() } else { Dim::Unknown })
                .collect();
            Ok(Shape(dims))
        })
        .collect()
}

fn set_next(ctx: &mut NodeContext, recurrence: LayerId, next: TensorId) -> Result<(), ImportError> {
    ctx.net.set_recurrence_next(recurrence, next).map_err(|e| ctx.network_error(e))
}

fn loop_output(ctx: &mut NodeContext, looping: LoopId, value: TensorId, kind: LoopOutputKind, axis: usize) -> Result<TensorId, ImportError> {
    let layer = ctx.net.add_loop_output(looping, value, kind, axis).map_err(|e| ctx.network_error(e))?;
    Ok(ctx.net.output(layer, 0))
}

/// ONNX Loop: `M` becomes a COUNT limit, `cond` a recurrence feeding a WHILE limit (the
/// body's condition output is its next value), the iteration number a recurrence counting
/// from 0, each loop-carried value a recurrence with a LAST_VALUE output, and each scan
/// output a CONCATENATE output along a new axis 0.
fn import_loop(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let body = ctx.attrs.graph("body")?;
    let initial = (2..ctx.inputs.len()).map(|i| ctx.input(i)).collect::<Result<Vec<_>, _>>()?;
    let carried = initial.len();
    if body.input.len() != 2 + carried || body.output.len() < 1 + carried {
        return Err(ctx.invalid(format!(
            "the body takes {} inputs and gives {} outputs; a Loop with {carried} carried values needs {} inputs and at least {} outputs",
            body.input.len(),
            body.output.len(),
            2 + carried,
            1 + carried
        )));
    }
    let trip_count = ctx.opt_input(0);
    let condition = match ctx.opt_input(1) {
        Some(c) => Some(scalar(ctx, "condition", c)?),
        None => None,
    };
    let zero = ctx.constant("iteration 0", HostTensor::scalar(TensorData::I64(vec![0])).expect("one element"))?;
    let one = ctx.constant("iteration step", HostTensor::scalar(TensorData::I64(vec![1])).expect("one element"))?;
    let always = ctx.constant("no condition", HostTensor::scalar(TensorData::Bool(vec![true])).expect("one element"))?;
    let mut shapes: Vec<Shape> = initial.iter().map(|&t| ctx.net.tensor(t).shape.clone()).collect();
    for _ in 0..=shapes.iter().map(Shape::rank).sum::<usize>() {
        let looping = ctx.net.add_loop();
        if let Some(m) = trip_count {
            ctx.net.add_trip_limit(looping, m, TripLimitKind::Count).map_err(|e| ctx.network_error(e))?;
        }
        let iteration = recurrence(ctx, looping, zero, &Shape(vec![]))?;
        let cond_rec = match condition {
            Some(c) => Some(recurrence(ctx, looping, c, &Shape(vec![]))?),
            None => None,
        };
        let cond_in = cond_rec.map_or(always, |r| ctx.net.output(r, 0));
        if let Some(r) = cond_rec {
            ctx.net.add_trip_limit(looping, ctx.net.output(r, 0), TripLimitKind::While).map_err(|e| ctx.network_error(e))?;
        } else if trip_count.is_none() {
            // ONNX: with neither, the loop never ends; the maximum trip count stops it.
            ctx.net.add_trip_limit(looping, always, TripLimitKind::While).map_err(|e| ctx.network_error(e))?;
        }
        let recs = initial
            .iter()
            .zip(&shapes)
            .map(|(&t, s)| recurrence(ctx, looping, t, s))
            .collect::<Result<Vec<_>, _>>()?;
        let mut bindings = vec![ctx.net.output(iteration, 0), cond_in];
        bindings.extend(recs.iter().map(|&r| ctx.net.output(r, 0)));
        let outs = ctx.subgraphs.import_subgraph(ctx.net, body, &bindings, None, ctx.name)?;
        let widened = widen(ctx, &shapes, &initial, &outs[1..1 + carried])?;
        if widened != shapes {
            shapes = widened;
            continue;
        }
        let counted = ctx.add("iteration next", LayerKind::Elementwise { op: kiln::ElementwiseOp::Sum }, &[ctx.net.output(iteration, 0), one])?;
        set_next(ctx, iteration, counted)?;
        if let Some(r) = cond_rec {
            let cond_out = scalar(ctx, "condition next", outs[0])?;
            let cond_out = ctx.cast("condition next bool", cond_out, DataType::Bool)?;
            set_next(ctx, r, cond_out)?;
        }
        let mut results = Vec::with_capacity(outs.len() - 1);
        for (&r, &next) in recs.iter().zip(&outs[1..1 + carried]) {
            set_next(ctx, r, next)?;
            results.push(loop_output(ctx, looping, ctx.net.output(r, 0), LoopOutputKind::LastValue, 0)?);
        }
        for &scanned in &outs[1 + carried..] {
            results.push(loop_output(ctx, looping, scanned, LoopOutputKind::Concatenate, 0)?);
        }
        return Ok(results);
    }
    Err(ctx.invalid("the loop-carried shapes do not settle"))
}

/// ONNX If: a conditional whose branches are the two subgraphs; branch layers reading
/// outer values run only when their branch is taken.
fn import_if(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let then_branch = ctx.attrs.graph("then_branch")?;
    let else_branch = ctx.attrs.graph("else_branch")?;
    if then_branch.output.len() != else_branch.output.len() {
        return Err(ctx.invalid(format!(
            "the then branch has {} outputs and the else branch {}",
            then_branch.output.len(),
            else_branch.output.len()
        )));
    }
    let cond = ctx.input(0)?;
    let cond = scalar(ctx, "condition", cond)?;
    let cond = ctx.cast("condition bool", cond, DataType::Bool)?;
    // A condition known at build time (often computed from static shapes) selects its
    // branch now: the other one, possibly invalid for these shapes, is never imported.
    if let Some(taken) = known_scalar(ctx.net, cond, 8).map(|v| v != 0.0) {
        let branch = if taken { then_branch } else { else_branch };
        return ctx.subgraphs.import_subgraph(ctx.net, branch, &[], None, ctx.name);
    }
    let conditional = ctx.net.add_if_conditional();
    ctx.net.set_condition(conditional, cond).map_err(|e| ctx.network_error(e))?;
    let then_outs = ctx.subgraphs.import_subgraph(ctx.net, then_branch, &[], Some(conditional), ctx.name)?;
    let else_outs = ctx.subgraphs.import_subgraph(ctx.net, else_branch, &[], Some(conditional), ctx.name)?;
    then_outs
        .into_iter()
        .zip(else_outs)
        .map(|(t, f)| {
            let (t, f) = one_element_ranks_agree(ctx, t, f)?;
            // ONNX lets the branches' shapes differ (often in a branch never taken): the
            // output then declares the dims they disagree on dynamic.
            let (ts, fs) = (&ctx.net.tensor(t).shape, &ctx.net.tensor(f).shape);
            let differ = ts.rank() == fs.rank() && ts.dims().iter().zip(fs.dims()).any(|(a, b)| a.differs_from(b));
            let shape = differ.then(|| {
                Shape(ts.dims().iter().zip(fs.dims()).map(|(a, b)| if a.same_as(b) { a.clone() } else { Dim::Unknown }).collect())
            });
            let kind = LayerKind::IfConditionalOutput { conditional, shape };
            let layer = ctx.net.add_layer(&format!("{}/output", ctx.name), kind, vec![Some(t), Some(f)]).map_err(|e| ctx.network_error(e))?;
            Ok(ctx.net.output(layer, 0))
        })
        .collect()
}

/// Branch outputs that are single elements of different ranks (a scalar in one branch, a
/// `[1]` in the other, as ONNX function expansions produce) are both given the higher rank,
/// which broadcasts the same way downstream.
fn one_element_ranks_agree(ctx: &mut NodeContext, t: TensorId, f: TensorId) -> Result<(TensorId, TensorId), ImportError> {
    let single = |ctx: &NodeContext, x: TensorId| ctx.fixed_dims(x).is_some_and(|d| d.iter().all(|&n| n == 1));
    if ctx.rank(t) == ctx.rank(f) || !single(ctx, t) || !single(ctx, f) {
        return Ok((t, f));
    }
    let ones = vec![1; ctx.rank(t).max(ctx.rank(f))];
    let t = if ctx.rank(t) < ones.len() { ctx.reshape("then output rank", t, ones.clone())? } else { t };
    let f = if ctx.rank(f) < ones.len() { ctx.reshape("else output rank", f, ones)? } else { f };
    Ok((t, f))
}

/// One scanned input: the tensor, the axis it is scanned along, backwards or not.
struct ScanInput {
    tensor: TensorId,
    axis: usize,
    reverse: bool,
}

/// One scan output: its axis (possibly negative, of the stacked rank) and direction.
struct ScanOutput {
    axis: i64,
    reverse: bool,
}

/// ONNX Scan (opset 9 on): a COUNT loop over the scanned inputs' length, one iterator per
/// scan input, one recurrence per state.
fn import_scan(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    if ctx.version == 8 {
        return import_scan_8(ctx);
    }
    let body = ctx.attrs.graph("body")?;
    let inputs = (0..ctx.inputs.len()).map(|i| ctx.input(i)).collect::<Result<Vec<_>, _>>()?;
    let scanned = usize::try_from(ctx.attrs.required_int("num_scan_inputs")?)
        .ok()
        .filter(|&m| (1..=inputs.len()).contains(&m))
        .ok_or_else(|| ctx.invalid("num_scan_inputs must be between 1 and the number of inputs"))?;
    let states = inputs.len() - scanned;
    let outputs = body.output.len().checked_sub(states).ok_or_else(|| ctx.invalid("the body has fewer outputs than states"))?;
    let list = |name: &str, len: usize| -> Result<Vec<i64>, ImportError> {
        let values = ctx.attrs.ints(name)?.map(<[i64]>::to_vec).unwrap_or_else(|| vec![0; len]);
        if values.len() != len {
            return Err(ctx.invalid(format!("{name} has {} entries for {len} values", values.len())));
        }
        Ok(values)
    };
    let (in_axes, in_dirs) = (list("scan_input_axes", scanned)?, list("scan_input_directions", scanned)?);
    let (out_axes, out_dirs) = (list("scan_output_axes", outputs)?, list("scan_output_directions", outputs)?);
    let scan_inputs = inputs[states..]
        .iter()
        .zip(in_axes.iter().zip(&in_dirs))
        .map(|(&tensor, (&axis, &dir))| Ok(ScanInput { tensor, axis: ctx.axis(axis, ctx.rank(tensor))?, reverse: dir == 1 }))
        .collect::<Result<Vec<_>, ImportError>>()?;
    let scan_outputs =
        out_axes.iter().zip(&out_dirs).map(|(&axis, &dir)| ScanOutput { axis, reverse: dir == 1 }).collect::<Vec<_>>();
    scan_loop(ctx, body, &inputs[..states], &scan_inputs, &scan_outputs, None)
}

/// The scan itself: final states, then scan outputs (padded with zeros to `pad_to`
/// slices when given).
fn scan_loop(
    ctx: &mut NodeContext,
    body: &GraphProto,
    initial: &[TensorId],
    scan_inputs: &[ScanInput],
    scan_outputs: &[ScanOutput],
    pad_to: Option<TensorId>,
) -> Result<Vec<TensorId>, ImportError> {
    let first = scan_inputs.first().ok_or_else(|| ctx.invalid("a Scan needs at least one scan input"))?;
    let count = ctx.dim_of("sequence length", first.tensor, first.axis)?;
    if body.input.len() != initial.len() + scan_inputs.len() || body.output.len() != initial.len() + scan_outputs.len() {
        return Err(ctx.invalid("the body's inputs and outputs do not match the states and scanned values"));
    }
    let mut shapes: Vec<Shape> = initial.iter().map(|&t| ctx.net.tensor(t).shape.clone()).collect();
    for _ in 0..=shapes.iter().map(Shape::rank).sum::<usize>() {
        let looping = ctx.net.add_loop();
        ctx.net.add_trip_limit(looping, count, TripLimitKind::Count).map_err(|e| ctx.network_error(e))?;
        let recs =
            initial.iter().zip(&shapes).map(|(&t, s)| recurrence(ctx, looping, t, s)).collect::<Result<Vec<_>, _>>()?;
        let mut bindings: Vec<TensorId> = recs.iter().map(|&r| ctx.net.output(r, 0)).collect();
        for s in scan_inputs {
            let it = ctx.net.add_iterator(looping, s.tensor, s.axis, s.reverse).map_err(|e| ctx.network_error(e))?;
            bindings.push(ctx.net.output(it, 0));
        }
        let outs = ctx.subgraphs.import_subgraph(ctx.net, body, &bindings, None, ctx.name)?;
        let widened = widen(ctx, &shapes, initial, &outs[..initial.len()])?;
        if widened != shapes {
            shapes = widened;
            continue;
        }
        let mut results = Vec::with_capacity(outs.len());
        for (&r, &next) in recs.iter().zip(&outs) {
            set_next(ctx, r, next)?;
            results.push(loop_output(ctx, looping, ctx.net.output(r, 0), LoopOutputKind::LastValue, 0)?);
        }
        for (&value, spec) in outs[initial.len()..].iter().zip(scan_outputs) {
            let axis = ctx.axis(spec.axis, ctx.rank(value) + 1)?;
            let kind = if spec.reverse { LoopOutputKind::Reverse } else { LoopOutputKind::Concatenate };
            let layer = ctx.net.add_loop_output(looping, value, kind, axis).map_err(|e| ctx.network_error(e))?;
            if let Some(length) = pad_to {
                ctx.net.set_loop_output_length(layer, length).map_err(|e| ctx.network_error(e))?;
            }
            results.push(ctx.net.output(layer, 0));
        }
        return Ok(results);
    }
    Err(ctx.invalid("the scan state shapes do not settle"))
}

/// ONNX Scan 8: every input has a batch axis 0 and a sequence axis 1. An outer loop over the
/// batch runs the scan on each batch entry and stacks its results. With `sequence_lens`,
/// entry b scans the first `sequence_lens[b]` steps and its scan outputs are padded with
/// zeros to the full sequence length.
fn import_scan_8(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let body = ctx.attrs.graph("body")?;
    let inputs = (1..ctx.inputs.len()).map(|i| ctx.input(i)).collect::<Result<Vec<_>, _>>()?;
    let scanned = usize::try_from(ctx.attrs.required_int("num_scan_inputs")?)
        .ok()
        .filter(|&m| (1..=inputs.len()).contains(&m))
        .ok_or_else(|| ctx.invalid("num_scan_inputs must be between 1 and the number of inputs"))?;
    let states = inputs.len() - scanned;
    let directions = ctx.attrs.ints("directions")?.map(<[i64]>::to_vec).unwrap_or_else(|| vec![0; scanned]);
    if directions.len() != scanned {
        return Err(ctx.invalid(format!("directions has {} entries for {scanned} scan inputs", directions.len())));
    }
    let batch = ctx.dim_of("batch size", inputs[0], 0)?;
    let outer = ctx.net.add_loop();
    ctx.net.add_trip_limit(outer, batch, TripLimitKind::Count).map_err(|e| ctx.network_error(e))?;
    let mut slices = Vec::with_capacity(inputs.len());
    for &t in &inputs {
        let it = ctx.net.add_iterator(outer, t, 0, false).map_err(|e| ctx.network_error(e))?;
        slices.push(ctx.net.output(it, 0));
    }
    let mut pad_to = None;
    if let Some(lens) = ctx.opt_input(0) {
        let it = ctx.net.add_iterator(outer, lens, 0, false).map_err(|e| ctx.network_error(e))?;
        let len = ctx.net.output(it, 0);
        let end = ctx.cast("sequence length i64", len, DataType::I64)?;
        let end = ctx.reshape("sequence end", end, vec![1])?;
        let (start, axes) = (ctx.const_i64("sequence start", &[0])?, ctx.const_i64("sequence axis", &[0])?);
        let full = ctx.dim_of("full sequence length", slices[states], 0)?;
        pad_to = Some(scalar(ctx, "padded length", full)?);
        for (i, slice) in slices[states..].iter_mut().enumerate() {
            *slice = ctx.add(&format!("scan input {i} steps"), LayerKind::Slice, &[*slice, start, end, axes])?;
        }
    }
    let scan_inputs =
        slices[states..].iter().zip(&directions).map(|(&tensor, &d)| ScanInput { tensor, axis: 0, reverse: d == 1 }).collect::<Vec<_>>();
    let outputs = body.output.len().saturating_sub(states);
    let scan_outputs = (0..outputs).map(|_| ScanOutput { axis: 0, reverse: false }).collect::<Vec<_>>();
    let per_entry = scan_loop(ctx, body, &slices[..states], &scan_inputs, &scan_outputs, pad_to)?;
    per_entry.into_iter().map(|t| loop_output(ctx, outer, t, LoopOutputKind::Concatenate, 0)).collect()
}

/// The one-element value of `t` when it follows at build time from known values through
/// comparisons, logic, casts and reshapes (how exporters derive conditions from static
/// shapes); `depth` bounds the search.
fn known_scalar(net: &kiln::Network, t: TensorId, depth: usize) -> Option<f64> {
    if let Some(v) = net.tensor(t).value.as_deref() {
        return match v.to_f64_vec().as_slice() {
            [x] => Some(*x),
            _ => None,
        };
    }
    let (layer, _) = net.tensor(t).producer?;
    let layer = net.layer(layer);
    let input = |slot: usize| layer.inputs.get(slot).copied().flatten().filter(|_| depth > 0);
    let operand = |slot: usize| input(slot).and_then(|i| known_scalar(net, i, depth - 1));
    let truth = |b: bool| Some(f64::from(u8::from(b)));
    use kiln::ElementwiseOp as E;
    match &layer.kind {
        LayerKind::Identity | LayerKind::Shuffle(_) => operand(0),
        LayerKind::Cast { to: DataType::Bool } => operand(0).and_then(|x| truth(x != 0.0)),
        LayerKind::Cast { to } if to.is_float() => operand(0),
        LayerKind::Cast { .. } => operand(0).map(f64::trunc),
        LayerKind::Unary { op: kiln::UnaryOp::Not } if net.tensor(t).dtype == DataType::Bool => {
            operand(0).and_then(|x| truth(x == 0.0))
        }
        LayerKind::Elementwise { op } => {
            let (a, b) = (operand(0)?, operand(1)?);
            match op {
                E::Equal => truth(a == b),
                E::Less => truth(a < b),
                E::Greater => truth(a > b),
                E::LessOrEqual => truth(a <= b),
                E::GreaterOrEqual => truth(a >= b),
                E::And => truth(a != 0.0 && b != 0.0),
                E::Or => truth(a != 0.0 || b != 0.0),
                E::Xor => truth((a != 0.0) != (b != 0.0)),
                _ => None,
            }
        }
        _ => None,
    }
}

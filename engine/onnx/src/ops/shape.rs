//! Ops that move data without arithmetic: Reshape, Transpose, Flatten, Squeeze,
//! Unsqueeze, Concat, Split, Slice, Shape, Expand, Tile.

use super::{one, Registry};
use crate::context::NodeContext;
use crate::error::ImportError;
use kiln::{Dim, ElementwiseOp, LayerKind, ReduceOp, ShuffleParams, TensorId};

pub(super) fn register(r: &mut Registry) {
    r.add("Reshape", &[1, 5, 13, 14, 19, 21, 23, 24, 25], reshape);
    r.add("Transpose", &[1, 13, 21, 23, 24, 25], transpose);
    r.add("Flatten", &[1, 9, 11, 13, 21, 23, 24, 25], flatten);
    r.add("Squeeze", &[1, 11, 13, 21, 23, 24, 25], squeeze);
    r.add("Unsqueeze", &[1, 11, 13, 21, 23, 24, 25], unsqueeze);
    r.add("Concat", &[1, 4, 11, 13], concat);
    r.add("Split", &[1, 2, 11, 13, 18], split);
    r.add("Slice", &[1, 10, 11, 13], slice);
    r.add("Shape", &[1, 13, 15, 19, 21, 23, 24, 25], shape);
    r.add("Expand", &[8, 13], expand);
    r.add("Tile", &[1, 6, 13], tile);
}

/// Shuffle parameters whose reshape dims are exact (a 0 is an empty dim).
fn exact(reshape: Option<Vec<i64>>) -> ShuffleParams {
    ShuffleParams { reshape, zero_is_placeholder: false, ..Default::default() }
}

/// Reshape: dims are an attribute in opset 1 and an input after; a 0 copies the input dim
/// unless `allowzero` (opset 14) makes it a literal 0.
fn reshape(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let zero_is_placeholder = !(ctx.version >= 14 && ctx.attrs.flag("allowzero", false)?);
    if ctx.version < 5 {
        let dims = ctx.attrs.ints("shape")?.ok_or_else(|| ctx.invalid("attribute `shape` is required"))?.to_vec();
        return one(ctx.shuffle(
            "",
            x,
            ShuffleParams { reshape: Some(dims), zero_is_placeholder, ..Default::default() },
        )?);
    }
    let dims = ctx.input(1)?;
    let params = ShuffleParams { zero_is_placeholder, ..Default::default() };
    match ctx.const_ints(dims) {
        Some(d) => one(ctx.shuffle("", x, ShuffleParams { reshape: Some(d), ..params })?),
        None => one(ctx.add("", LayerKind::Shuffle(params), &[x, dims])?),
    }
}

fn transpose(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let rank = ctx.rank(x);
    let perm = match ctx.attrs.ints("perm")? {
        Some(p) => p
            .iter()
            .map(|&a| usize::try_from(a).map_err(|_| ctx.invalid(format!("perm {p:?} has a negative entry"))))
            .collect::<Result<Vec<_>, _>>()?,
        None => (0..rank).rev().collect(),
    };
    one(ctx.shuffle("", x, ShuffleParams { first_transpose: perm, ..Default::default() })?)
}

/// Flatten to 2-D at `axis`: `[d0 × … × d(axis-1), d(axis) × …]`.
fn flatten(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let rank = ctx.rank(x);
    let raw = ctx.attrs.int("axis", 1)?;
    let axis = if raw < 0 { raw + rank as i64 } else { raw };
    let axis = usize::try_from(axis)
        .ok()
        .filter(|&a| a <= rank)
        .ok_or_else(|| ctx.invalid(format!("axis {raw} is out of range for rank {rank}")))?;
    let dims = ctx.dims(x);
    let target = match (fixed_product(ctx, &dims[..axis])?, fixed_product(ctx, &dims[axis..])?) {
        (Some(lead), _) => Some(vec![lead, -1]),
        (None, Some(rest)) => Some(vec![-1, rest]),
        (None, None) if axis == 1 => Some(vec![0, -1]),
        (None, None) => None,
    };
    if let Some(target) = target {
        return one(ctx.reshape("", x, target)?);
    }
    // Dynamic dims on both sides: the leading product comes from the shape at run time.
    let shape = ctx.add("shape", LayerKind::Shape, &[x])?;
    let (start, end, axes) = (
        ctx.const_i64("lead start", &[0])?,
        ctx.const_i64("lead end", &[axis as i64])?,
        ctx.const_i64("lead axes", &[0])?,
    );
    let lead_dims = ctx.add("lead dims", LayerKind::Slice, &[shape, start, end, axes])?;
    let lead =
        ctx.add("lead", LayerKind::Reduce { op: ReduceOp::Prod, axes: vec![0], keep_dims: true }, &[lead_dims])?;
    let rest = ctx.const_i64("rest", &[-1])?;
    let target = ctx.add("dims", LayerKind::Concatenation { axis: 0 }, &[lead, rest])?;
    one(ctx.add("", LayerKind::Shuffle(exact(None)), &[x, target])?)
}

/// The element count of `dims` when all are fixed.
fn fixed_product(ctx: &NodeContext, dims: &[Dim]) -> Result<Option<i64>, ImportError> {
    if dims.iter().any(|d| !d.is_fixed()) {
        return Ok(None);
    }
    kiln::Shape(dims.to_vec())
        .volume()
        .and_then(|v| i64::try_from(v).ok())
        .map(Some)
        .ok_or_else(|| ctx.invalid(format!("the element count of {} overflows", kiln::Shape(dims.to_vec()))))
}

/// Axes of Squeeze/Unsqueeze: an attribute before opset 13, a constant input after.
fn axes_operand(ctx: &NodeContext) -> Result<Option<Vec<i64>>, ImportError> {
    if ctx.version < 13 {
        return Ok(ctx.attrs.ints("axes")?.map(<[i64]>::to_vec));
    }
    match ctx.opt_input(1) {
        Some(_) => Ok(Some(ctx.required_const_ints(1, "axes")?)),
        None => Ok(None),
    }
}

/// Squeeze: the squeezed (size-1) axes are moved last, then a reshape keeps the leading
/// dims by copying them, so dynamic dims stay as they are.
fn squeeze(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    if let Some(axes) = runtime_axes_input(ctx) {
        return one(squeeze_runtime(ctx, x, axes)?);
    }
    let dims = ctx.dims(x);
    let rank = dims.len();
    // Empty axes squeeze every size-1 dim, as absent ones do (onnxruntime's reading).
    let squeezed = match axes_operand(ctx)?.filter(|a| !a.is_empty()) {
        Some(axes) => {
            let axes = ctx.axes(&axes, rank)?;
            if let Some(&a) = axes.iter().find(|&&a| dims[a].fixed().is_some_and(|n| n != 1)) {
                return Err(ctx.invalid(format!("cannot squeeze axis {a} of length {}", dims[a])));
            }
            axes
        }
        None => {
            // A dynamic dim stays (the output's rank must be known at build time); the
            // engine checks at run time that it is not 1, which ONNX would have squeezed.
            for a in (0..rank).filter(|&a| !dims[a].is_fixed()) {
                assert_not_one(ctx, x, a)?;
            }
            (0..rank).filter(|&a| dims[a].fixed() == Some(1)).collect()
        }
    };
    let kept: Vec<usize> = (0..rank).filter(|a| !squeezed.contains(a)).collect();
    let mut perm = kept.clone();
    perm.extend(&squeezed);
    let identity = perm.iter().enumerate().all(|(i, &p)| i == p);
    let params = ShuffleParams {
        first_transpose: if identity { Vec::new() } else { perm },
        reshape: Some(vec![0; kept.len()]),
        zero_is_placeholder: true,
        ..Default::default()
    };
    one(ctx.shuffle("", x, params)?)
}

/// An Assertion that axis `axis` of `x` is not 1 at run time.
fn assert_not_one(ctx: &mut NodeContext, x: TensorId, axis: usize) -> Result<(), ImportError> {
    let len = ctx.dim_of(&format!("axis {axis} length"), x, axis)?;
    let one = ctx.const_i64(&format!("axis {axis} one"), &[1])?;
    let is_one = ctx.add(&format!("axis {axis} is one"), LayerKind::Elementwise { op: ElementwiseOp::Equal }, &[len, one])?;
    let not_one = ctx.add(&format!("axis {axis} is not one"), LayerKind::Unary { op: kiln::UnaryOp::Not }, &[is_one])?;
    let message = format!(
        "Squeeze without axes: dynamic axis {axis} of `{}` is 1 at run time; kiln keeps dynamic axes (give Squeeze its axes)",
        ctx.net.tensor(x).name
    );
    ctx.add_layer_outputs(&format!("axis {axis} check"), LayerKind::Assertion { message }, vec![Some(not_one)])?;
    Ok(())
}

/// Unsqueeze: size-1 dims are appended by a reshape that copies the input dims, then a
/// transpose moves them to their output positions.
fn unsqueeze(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    if let Some(axes) = runtime_axes_input(ctx) {
        return one(unsqueeze_runtime(ctx, x, axes)?);
    }
    let rank = ctx.rank(x);
    let axes = axes_operand(ctx)?.ok_or_else(|| ctx.invalid("Unsqueeze needs axes"))?;
    let out_rank = rank + axes.len();
    let axes = ctx.axes(&axes, out_rank)?;
    let mut reshape = vec![0; rank];
    reshape.extend(std::iter::repeat_n(1, axes.len()));
    let (mut next_input, mut next_new) = (0, rank);
    let perm: Vec<usize> = (0..out_rank)
        .map(|p| {
            let source = if axes.contains(&p) { &mut next_new } else { &mut next_input };
            *source += 1;
            *source - 1
        })
        .collect();
    let identity = perm.iter().enumerate().all(|(i, &p)| i == p);
    let params = ShuffleParams {
        reshape: Some(reshape),
        second_transpose: if identity { Vec::new() } else { perm },
        zero_is_placeholder: true,
        ..Default::default()
    };
    one(ctx.shuffle("", x, params)?)
}

/// The axes input of Squeeze/Unsqueeze (opset 13+) when its values are known only at run time.
fn runtime_axes_input(ctx: &NodeContext) -> Option<TensorId> {
    ctx.opt_input(1).filter(|&t| ctx.version >= 13 && ctx.const_ints(t).is_none())
}

/// Run-time axes normalized against `rank` as a `[1, k]` i64 row, with `k`, the axis count.
fn axes_row(ctx: &mut NodeContext, axes: TensorId, rank: usize) -> Result<(TensorId, usize), ImportError> {
    let count = match ctx.dims(axes).as_slice() {
        [d] => d.fixed(),
        _ => return Err(ctx.invalid(format!("the axes input of shape {} must be 1-D", ctx.net.tensor(axes).shape))),
    };
    let count = count.ok_or_else(|| ctx.unsupported("an axes input computed at run time with a dynamic length"))?;
    if rank == 0 {
        return Err(ctx.invalid(format!("{count} axes cannot index a result of rank 0")));
    }
    let axes = ctx.cast("axes i64", axes, kiln::DataType::I64)?;
    let modulus = ctx.const_i64("rank", &[rank as i64])?;
    let wrapped = ctx.add("axes wrapped", LayerKind::Elementwise { op: ElementwiseOp::Mod }, &[axes, modulus])?;
    Ok((ctx.reshape("axes row", wrapped, vec![1, count as i64])?, count))
}

/// For each `v` in `values` (`[n]`): how many entries of `row` (`[1, k]`) compare `op` to it.
fn count_where(
    ctx: &mut NodeContext,
    part: &str,
    row: TensorId,
    op: ElementwiseOp,
    values: &[i64],
) -> Result<TensorId, ImportError> {
    let column = ctx.constant(
        &format!("{part} positions"),
        kiln::HostTensor::from_i64(vec![values.len(), 1], values.to_vec()).expect("length matches"),
    )?;
    let hits = ctx.add(&format!("{part} hits"), LayerKind::Elementwise { op }, &[row, column])?;
    let hits = ctx.cast(&format!("{part} hits i64"), hits, kiln::DataType::I64)?;
    ctx.add(part, LayerKind::Reduce { op: ReduceOp::Sum, axes: vec![1], keep_dims: false }, &[hits])
}

/// Unsqueeze with run-time axes: output dim `p` is 1 where `p` is an axis, otherwise input
/// dim `p − #{axes ≤ p}`; the dims feed a reshape.
fn unsqueeze_runtime(ctx: &mut NodeContext, x: TensorId, axes: TensorId) -> Result<TensorId, ImportError> {
    let rank = ctx.rank(x);
    let count = match ctx.dims(axes).as_slice() {
        [d] => d.fixed().unwrap_or(0),
        _ => 0,
    };
    let out_rank = rank + count;
    let (row, count) = axes_row(ctx, axes, out_rank)?;
    if rank == 0 {
        return ctx.shuffle("", x, exact(Some(vec![1; count])));
    }
    let positions: Vec<i64> = (0..out_rank as i64).collect();
    let before = count_where(ctx, "axes before", row, ElementwiseOp::LessOrEqual, &positions)?;
    let is_axis = count_where(ctx, "is axis", row, ElementwiseOp::Equal, &positions)?;
    let position = ctx.const_i64("positions", &positions)?;
    let source = ctx.add("source", LayerKind::Elementwise { op: ElementwiseOp::Sub }, &[position, before])?;
    let (low, high) = (ctx.const_i64("low", &[0])?, ctx.const_i64("high", &[rank as i64 - 1])?);
    let source = ctx.add("source low", LayerKind::Elementwise { op: ElementwiseOp::Max }, &[source, low])?;
    let source = ctx.add("source high", LayerKind::Elementwise { op: ElementwiseOp::Min }, &[source, high])?;
    let shape = ctx.shape_of("shape", x)?;
    let gather = LayerKind::Gather { mode: kiln::GatherMode::Default { axis: 0 } };
    let dims = ctx.add("input dims", gather, &[shape, source])?;
    // dims · (1 − is_axis) + is_axis
    let masked = ctx.add("masked", LayerKind::Elementwise { op: ElementwiseOp::Prod }, &[dims, is_axis])?;
    let kept = ctx.add("kept", LayerKind::Elementwise { op: ElementwiseOp::Sub }, &[dims, masked])?;
    let target = ctx.add("dims", LayerKind::Elementwise { op: ElementwiseOp::Sum }, &[kept, is_axis])?;
    ctx.add("", LayerKind::Shuffle(exact(None)), &[x, target])
}

/// Squeeze with run-time axes: output dim `j` is input dim `#{p : kept(p) ≤ j}`, where
/// `kept(p) = p + 1 − #{axes ≤ p}` counts the kept dims up to `p`; the dims feed a reshape
/// (which fails at run time when a squeezed dim is not 1).
fn squeeze_runtime(ctx: &mut NodeContext, x: TensorId, axes: TensorId) -> Result<TensorId, ImportError> {
    let rank = ctx.rank(x);
    let (row, count) = axes_row(ctx, axes, rank)?;
    let out_rank = rank
        .checked_sub(count)
        .ok_or_else(|| ctx.invalid(format!("{count} axes cannot be squeezed from rank {rank}")))?;
    if out_rank == 0 {
        return ctx.shuffle("", x, exact(Some(Vec::new())));
    }
    let positions: Vec<i64> = (0..rank as i64).collect();
    let before = count_where(ctx, "axes before", row, ElementwiseOp::LessOrEqual, &positions)?;
    let next: Vec<i64> = (1..=rank as i64).collect();
    let next = ctx.const_i64("next positions", &next)?;
    let kept = ctx.add("kept", LayerKind::Elementwise { op: ElementwiseOp::Sub }, &[next, before])?;
    let kept_row = ctx.reshape("kept row", kept, vec![1, rank as i64])?;
    let outputs: Vec<i64> = (0..out_rank as i64).collect();
    let source = count_where(ctx, "source", kept_row, ElementwiseOp::LessOrEqual, &outputs)?;
    let shape = ctx.shape_of("shape", x)?;
    let gather = LayerKind::Gather { mode: kiln::GatherMode::Default { axis: 0 } };
    let target = ctx.add("dims", gather, &[shape, source])?;
    ctx.add("", LayerKind::Shuffle(exact(None)), &[x, target])
}

fn concat(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let inputs = ctx.present_inputs();
    let first = *inputs.first().ok_or_else(|| ctx.invalid("Concat needs at least one input"))?;
    let raw = if ctx.version < 4 { ctx.attrs.int("axis", 1)? } else { ctx.attrs.required_int("axis")? };
    let axis = ctx.axis(raw, ctx.rank(first))?;
    let slots = inputs.into_iter().map(Some).collect();
    one(ctx.add_opt("", LayerKind::Concatenation { axis }, slots)?)
}

/// Split sizes: input 1 in opset 1 and from 13, the `split` attribute in 2–12.
fn split_sizes(ctx: &NodeContext) -> Result<Option<Vec<i64>>, ImportError> {
    let from_input = ctx.version == 1 || ctx.version >= 13;
    if let Some(t) = ctx.opt_input(1).filter(|_| from_input) {
        return Ok(ctx.const_ints(t));
    }
    if ctx.version < 13 {
        return Ok(ctx.attrs.ints("split")?.map(<[i64]>::to_vec));
    }
    Ok(None)
}

/// Split, lowered to one Slice per output. Without sizes the axis splits evenly (opset 18:
/// into `num_outputs` chunks of `ceil(len / n)`, the last one smaller).
fn split(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let axis = ctx.axis(ctx.attrs.int("axis", 0)?, ctx.rank(x))?;
    let outputs = ctx.node.output.len();
    let length = ctx.dims(x)[axis].fixed();
    let sizes = split_sizes(ctx)?;
    let from_input = ctx.version == 1 || ctx.version >= 13;
    if let Some(t) = ctx.opt_input(1).filter(|_| from_input && sizes.is_none()) {
        return split_runtime(ctx, x, axis, t, outputs);
    }
    let num_outputs = if ctx.version >= 18 { ctx.attrs.opt_int("num_outputs")? } else { None };
    if sizes.is_some() && num_outputs.is_some() {
        return Err(ctx.invalid("give either the split input or num_outputs, not both"));
    }
    if let Some(n) = num_outputs {
        if n != outputs as i64 {
            return Err(ctx.invalid(format!("num_outputs is {n} but the node has {outputs} outputs")));
        }
    } else if ctx.version >= 18 && sizes.is_none() {
        return Err(ctx.invalid("Split-18 needs the split input or num_outputs"));
    }
    if outputs == 0 {
        return Err(ctx.invalid("Split needs at least one output"));
    }
    let uneven_allowed = num_outputs.is_some();
    let n = outputs as i64;
    let bounds: Option<Vec<(i64, i64)>> = match (sizes, length) {
        (Some(sizes), _) => {
            if sizes.len() != outputs || sizes.iter().any(|&s| s < 0) {
                return Err(ctx.invalid(format!("split {sizes:?} does not give {outputs} non-negative sizes")));
            }
            let total = sizes.iter().try_fold(0i64, |acc, &s| acc.checked_add(s));
            let Some(total) = total else {
                return Err(ctx.invalid(format!("split {sizes:?} overflows")));
            };
            if let Some(len) = length.filter(|&len| total != len as i64) {
                return Err(ctx.invalid(format!("split {sizes:?} does not add up to the axis length {len}")));
            }
            let mut start = 0;
            Some(
                sizes
                    .iter()
                    .map(|&s| {
                        start += s;
                        (start - s, start)
                    })
                    .collect(),
            )
        }
        (None, Some(len)) => {
            let len = len as i64;
            if !uneven_allowed && len % n != 0 {
                return Err(ctx.invalid(format!("axis length {len} does not split evenly into {n} outputs")));
            }
            let chunk = len / n + i64::from(len % n != 0);
            Some((0..n).map(|i| (i.saturating_mul(chunk).min(len), (i + 1).saturating_mul(chunk).min(len))).collect())
        }
        (None, None) => None,
    };
    let axes = ctx.const_i64("axes", &[axis as i64])?;
    let mut results = Vec::with_capacity(outputs);
    match bounds {
        Some(bounds) => {
            for (i, (start, end)) in bounds.into_iter().enumerate() {
                let starts = ctx.const_i64(&format!("start {i}"), &[start])?;
                let ends = ctx.const_i64(&format!("end {i}"), &[end])?;
                results.push(ctx.add(&format!("output {i}"), LayerKind::Slice, &[x, starts, ends, axes])?);
            }
        }
        None => {
            // Dynamic axis length: chunk = len / n (ceil from opset 18), computed at run time.
            let len = ctx.dim_of("length", x, axis)?;
            let dividend = if uneven_allowed {
                let round_up = ctx.const_i64("n - 1", &[n - 1])?;
                ctx.add("length + n - 1", LayerKind::Elementwise { op: ElementwiseOp::Sum }, &[len, round_up])?
            } else {
                len
            };
            let count = ctx.const_i64("n", &[n])?;
            let chunk = ctx.add("chunk", LayerKind::Elementwise { op: ElementwiseOp::FloorDiv }, &[dividend, count])?;
            for i in 0..n {
                let index = ctx.const_i64(&format!("index {i}"), &[i])?;
                let starts = ctx.add(
                    &format!("start {i}"),
                    LayerKind::Elementwise { op: ElementwiseOp::Prod },
                    &[chunk, index],
                )?;
                let ends = if i + 1 == n {
                    ctx.const_i64(&format!("end {i}"), &[i64::MAX])?
                } else {
                    let next = ctx.const_i64(&format!("index {}", i + 1), &[i + 1])?;
                    ctx.add(&format!("end {i}"), LayerKind::Elementwise { op: ElementwiseOp::Prod }, &[chunk, next])?
                };
                results.push(ctx.add(&format!("output {i}"), LayerKind::Slice, &[x, starts, ends, axes])?);
            }
        }
    }
    Ok(results)
}

/// Split with sizes known only at run time: output `i` slices `[Σ sizes[..i], Σ sizes[..=i])`.
pub(super) fn split_runtime(
    ctx: &mut NodeContext,
    x: TensorId,
    axis: usize,
    sizes: TensorId,
    outputs: usize,
) -> Result<Vec<TensorId>, ImportError> {
    if ctx.rank(sizes) != 1 || ctx.dims(sizes)[0].fixed().is_some_and(|n| n != outputs) {
        return Err(ctx.invalid(format!(
            "the split input of shape {} must hold one size per output ({outputs})",
            ctx.net.tensor(sizes).shape
        )));
    }
    if ctx.version >= 18 && ctx.attrs.opt_int("num_outputs")?.is_some() {
        return Err(ctx.invalid("give either the split input or num_outputs, not both"));
    }
    let sizes = ctx.cast("sizes i64", sizes, kiln::DataType::I64)?;
    let axes = ctx.const_i64("axes", &[axis as i64])?;
    let zero = ctx.const_i64("zero", &[0])?;
    let sum = LayerKind::Reduce { op: ReduceOp::Sum, axes: vec![0], keep_dims: true };
    let mut start = ctx.const_i64("start 0", &[0])?;
    let mut results = Vec::with_capacity(outputs);
    for i in 0..outputs {
        let count = ctx.const_i64(&format!("count {i}"), &[i as i64 + 1])?;
        let prefix = ctx.add(&format!("prefix {i}"), LayerKind::Slice, &[sizes, zero, count, zero])?;
        let end = ctx.add(&format!("end {i}"), sum.clone(), &[prefix])?;
        results.push(ctx.add(&format!("output {i}"), LayerKind::Slice, &[x, start, end, axes])?);
        start = end;
    }
    Ok(results)
}

/// Slice: starts/ends/axes are attributes before opset 10, inputs (plus steps) after.
fn slice(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    if ctx.version >= 10 {
        let slots = (0..5).map(|i| ctx.opt_input(i)).collect();
        return one(ctx.add_opt("", LayerKind::Slice, slots)?);
    }
    let required = |name: &str| {
        ctx.attrs.ints(name)?.map(<[i64]>::to_vec).ok_or_else(|| ctx.invalid(format!("attribute `{name}` is required")))
    };
    let (starts, ends) = (required("starts")?, required("ends")?);
    let axes = ctx.attrs.ints("axes")?.map(<[i64]>::to_vec);
    let starts = ctx.const_i64("starts", &starts)?;
    let ends = ctx.const_i64("ends", &ends)?;
    let axes = axes.map(|a| ctx.const_i64("axes", &a)).transpose()?;
    one(ctx.add_opt("", LayerKind::Slice, vec![Some(x), Some(starts), Some(ends), axes])?)
}

/// Shape, with the `start`/`end` window of opset 15 (clamped like Python slices).
fn shape(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let rank = ctx.rank(x) as i64;
    let (start, end) = if ctx.version >= 15 {
        (ctx.attrs.int("start", 0)?, ctx.attrs.opt_int("end")?.unwrap_or(rank))
    } else {
        (0, rank)
    };
    let clamp = |v: i64| if v < 0 { v + rank } else { v }.clamp(0, rank);
    let (start, end) = (clamp(start), clamp(end).max(clamp(start)));
    if (start, end) == (0, rank) {
        return one(ctx.add("", LayerKind::Shape, &[x])?);
    }
    if let Some(dims) = ctx.fixed_dims(x) {
        let window: Vec<i64> = dims[start as usize..end as usize].iter().map(|&d| d as i64).collect();
        return one(ctx.const_i64("", &window)?);
    }
    let full = ctx.add("full", LayerKind::Shape, &[x])?;
    let (starts, ends) = (ctx.const_i64("start", &[start])?, ctx.const_i64("end", &[end])?);
    one(ctx.add("", LayerKind::Slice, &[full, starts, ends])?)
}

fn expand(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let shape = ctx.input(1)?;
    one(ctx.add("", LayerKind::Expand, &[x, shape])?)
}

/// Tile as reshape → expand → reshape: `x` viewed as `[1, d0, 1, d1, …]` is broadcast to
/// `[r0, d0, r1, d1, …]` and merged to `[r0·d0, r1·d1, …]`. Opset 1 took one axis and count.
fn tile(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let rank = ctx.rank(x);
    let repeats = if ctx.version < 6 {
        let tiles = ctx.required_const_ints(1, "tiles")?;
        let axis = ctx.required_const_ints(2, "axis")?;
        let (&[tiles], &[axis]) = (tiles.as_slice(), axis.as_slice()) else {
            return Err(ctx.invalid("Tile-1 tiles and axis must be scalars"));
        };
        let axis = ctx.axis(axis, rank)?;
        let mut r = vec![1; rank];
        r[axis] = tiles;
        ctx.const_i64("repeats", &r)?
    } else {
        let r = ctx.input(1)?;
        ctx.cast("repeats i64", r, kiln::DataType::I64)?
    };
    if rank == 0 {
        return one(x);
    }
    let fixed = ctx.fixed_dims(x).zip(ctx.const_ints(repeats));
    if let Some((dims, reps)) = fixed {
        if reps.len() != rank || reps.iter().any(|&r| r < 0) {
            return Err(ctx.invalid(format!("repeats {reps:?} must hold {rank} non-negative counts")));
        }
        let view: Vec<i64> = dims.iter().flat_map(|&d| [1, d as i64]).collect();
        let target: Vec<i64> = dims.iter().zip(&reps).flat_map(|(&d, &r)| [r, d as i64]).collect();
        let merged = dims
            .iter()
            .zip(&reps)
            .map(|(&d, &r)| r.checked_mul(d as i64))
            .collect::<Option<Vec<i64>>>()
            .ok_or_else(|| ctx.invalid(format!("repeats {reps:?} overflow the output size")))?;
        let viewed = ctx.shuffle("view", x, exact(Some(view)))?;
        let target = ctx.const_i64("target", &target)?;
        let expanded = ctx.add("expand", LayerKind::Expand, &[viewed, target])?;
        return one(ctx.shuffle("", expanded, exact(Some(merged)))?);
    }
    let n = rank as i64;
    let shape = ctx.shape_of("shape", x)?;
    let shape_column = ctx.reshape("shape column", shape, vec![n, 1])?;
    let repeats_column = ctx.reshape("repeats column", repeats, vec![n, 1])?;
    let ones =
        ctx.constant("ones", kiln::HostTensor::from_i64(vec![rank, 1], vec![1; rank]).expect("length matches"))?;
    let concat = LayerKind::Concatenation { axis: 1 };
    let view = ctx.add("view pairs", concat.clone(), &[ones, shape_column])?;
    let view = ctx.reshape("view dims", view, vec![2 * n])?;
    let target = ctx.add("target pairs", concat, &[repeats_column, shape_column])?;
    let target = ctx.reshape("target dims", target, vec![2 * n])?;
    let merged = ctx.add("merged dims", LayerKind::Elementwise { op: ElementwiseOp::Prod }, &[shape, repeats])?;
    let viewed = ctx.add("view", LayerKind::Shuffle(exact(None)), &[x, view])?;
    let expanded = ctx.add("expand", LayerKind::Expand, &[viewed, target])?;
    one(ctx.add("", LayerKind::Shuffle(exact(None)), &[expanded, merged])?)
}

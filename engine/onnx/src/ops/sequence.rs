//! Sequence ops, lowered at build time onto tensor layers (see [`crate::sequence`]):
//! SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceErase, SequenceAt,
//! SequenceLength, ConcatFromSequence, SplitToSequence; and OptionalHasElement /
//! OptionalGetElement on plain tensors (an optional kiln always has).

use super::shape::split_runtime;
use super::Registry;
use crate::context::NodeContext;
use crate::error::ImportError;
use crate::sequence::Sequence;
use crate::tensor::dtype_from_onnx;
use kiln::{DataType, Dim, GatherMode, HostTensor, LayerKind, ShuffleParams, TensorData, TensorId};

/// The most elements a sequence tracked element by element may have; a longer split is
/// kept as one stacked tensor (or refused), so a large axis never makes millions of layers.
const MAX_TRACKED_ELEMENTS: usize = 1024;

/// Ops whose inputs may be sequences.
pub(crate) const SEQUENCE_INPUT_OPS: &[&str] =
    &["SequenceInsert", "SequenceErase", "SequenceAt", "SequenceLength", "ConcatFromSequence"];

pub(super) fn register(r: &mut Registry) {
    r.add("SequenceEmpty", &[11], sequence_empty);
    r.add("SequenceConstruct", &[11], sequence_construct);
    r.add("SequenceInsert", &[11], sequence_insert);
    r.add("SequenceErase", &[11], sequence_erase);
    r.add("SequenceAt", &[11], sequence_at);
    r.add("SequenceLength", &[11], sequence_length);
    r.add("ConcatFromSequence", &[11], concat_from_sequence);
    r.add("SplitToSequence", &[11, 24], split_to_sequence);
    r.add("OptionalHasElement", &[15, 18, 28], optional_has_element);
    r.add("OptionalGetElement", &[15, 18, 28], optional_get_element);
}

/// The node's single output is the sequence `seq`.
fn made(ctx: &mut NodeContext, seq: Sequence) -> Result<Vec<TensorId>, ImportError> {
    ctx.made_sequences.push((0, seq));
    Ok(Vec::new())
}

fn element_type(ctx: &NodeContext, seq: &Sequence) -> Option<DataType> {
    match seq {
        Sequence::Elements { dtype, items } => items.first().map(|&t| ctx.dtype(t)).or(*dtype),
        Sequence::Stacked(t) => Some(ctx.dtype(*t)),
    }
}

fn check_element_type(ctx: &NodeContext, seq: &Sequence, t: TensorId) -> Result<(), ImportError> {
    match element_type(ctx, seq) {
        Some(d) if d != ctx.dtype(t) => {
            Err(ctx.invalid(format!("a sequence of {d} cannot take a {} tensor", ctx.dtype(t))))
        }
        _ => Ok(()),
    }
}

/// A position input known at build time, normalized against `len` (`inclusive`: `len`
/// itself is a valid position, as for inserts).
fn position(ctx: &NodeContext, slot: usize, len: usize, inclusive: bool) -> Result<Option<usize>, ImportError> {
    let Some(t) = ctx.opt_input(slot) else {
        return Ok(None);
    };
    let Some(&[p]) = ctx.const_ints(t).as_deref() else {
        return Err(ctx.unsupported("a sequence position computed at run time on a sequence kiln tracks element by element"));
    };
    let n = len as i64;
    let upper = if inclusive { n } else { n - 1 };
    if p < -n || p > upper {
        return Err(ctx.invalid(format!("position {p} is out of range for a sequence of {len} elements")));
    }
    Ok(Some(if p < 0 { (p + n) as usize } else { p as usize }))
}

fn sequence_empty(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let dtype = dtype_from_onnx(ctx.attrs.int("dtype", 1)? as i32).map_err(|e| ctx.invalid(e))?;
    made(ctx, Sequence::Elements { dtype: Some(dtype), items: Vec::new() })
}

fn sequence_construct(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let items = ctx.present_inputs();
    let first = *items.first().ok_or_else(|| ctx.invalid("SequenceConstruct needs at least one input"))?;
    if let Some(&odd) = items.iter().find(|&&t| ctx.dtype(t) != ctx.dtype(first)) {
        return Err(ctx.invalid(format!("elements of types {} and {}", ctx.dtype(first), ctx.dtype(odd))));
    }
    made(ctx, Sequence::Elements { dtype: None, items })
}

fn sequence_insert(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let seq = ctx.sequence(0)?;
    let t = ctx.input(1)?;
    check_element_type(ctx, &seq, t)?;
    match seq {
        Sequence::Elements { dtype, mut items } => {
            let at = position(ctx, 2, items.len(), true)?.unwrap_or(items.len());
            items.insert(at, t);
            made(ctx, Sequence::Elements { dtype, items })
        }
        Sequence::Stacked(_) if ctx.opt_input(2).is_some() => {
            Err(ctx.unsupported("inserting at a position into a sequence whose length is known only at run time"))
        }
        Sequence::Stacked(stacked) => {
            let row = ctx.unsqueeze_axis("element", t, 0)?;
            let grown = ctx.add("", LayerKind::Concatenation { axis: 0 }, &[stacked, row])?;
            made(ctx, Sequence::Stacked(grown))
        }
    }
}

fn sequence_erase(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    match ctx.sequence(0)? {
        Sequence::Elements { dtype, mut items } => {
            if items.is_empty() {
                return Err(ctx.invalid("cannot erase from an empty sequence"));
            }
            let at = position(ctx, 1, items.len(), false)?.unwrap_or(items.len() - 1);
            items.remove(at);
            made(ctx, Sequence::Elements { dtype, items })
        }
        Sequence::Stacked(_) if ctx.opt_input(1).is_some() => {
            Err(ctx.unsupported("erasing at a position from a sequence whose length is known only at run time"))
        }
        Sequence::Stacked(stacked) => {
            let (start, end, axes) = (ctx.const_i64("start", &[0])?, ctx.const_i64("end", &[-1])?, ctx.const_i64("axes", &[0])?);
            let shorter = ctx.add("", LayerKind::Slice, &[stacked, start, end, axes])?;
            made(ctx, Sequence::Stacked(shorter))
        }
    }
}

/// The elements of a build-time sequence stacked along a new axis 0; they must agree in shape.
fn stack(ctx: &mut NodeContext, items: &[TensorId]) -> Result<TensorId, ImportError> {
    let first = *items.first().ok_or_else(|| ctx.invalid("the sequence is empty"))?;
    let shape = ctx.net.tensor(first).shape.clone();
    if let Some(&odd) = items.iter().find(|&&t| {
        let s = &ctx.net.tensor(t).shape;
        s.rank() != shape.rank() || s.dims().iter().zip(shape.dims()).any(|(a, b)| !a.same_as(b))
    }) {
        return Err(ctx.unsupported(format!(
            "indexing at run time into a sequence whose elements differ in shape ({} and {})",
            shape,
            ctx.net.tensor(odd).shape
        )));
    }
    let mut rows = Vec::with_capacity(items.len());
    for (i, &t) in items.iter().enumerate() {
        rows.push(ctx.unsqueeze_axis(&format!("element {i}"), t, 0)?);
    }
    ctx.add("stacked", LayerKind::Concatenation { axis: 0 }, &rows)
}

fn sequence_at(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let seq = ctx.sequence(0)?;
    let pos = ctx.input(1)?;
    let stacked = match seq {
        Sequence::Elements { items, .. } if ctx.const_ints(pos).is_some() => {
            let at = position(ctx, 1, items.len(), false)?.expect("the position is present");
            return Ok(vec![items[at]]);
        }
        Sequence::Elements { items, .. } => stack(ctx, &items)?,
        Sequence::Stacked(t) => t,
    };
    let index = if ctx.rank(pos) == 0 { pos } else { ctx.reshape("position", pos, vec![])? };
    let gather = LayerKind::Gather { mode: GatherMode::Default { axis: 0 } };
    Ok(vec![ctx.add("", gather, &[stacked, index])?])
}

fn sequence_length(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    match ctx.sequence(0)? {
        Sequence::Elements { items, .. } => {
            let len = HostTensor::scalar(TensorData::I64(vec![items.len() as i64])).expect("one element");
            Ok(vec![ctx.constant("", len)?])
        }
        Sequence::Stacked(t) => {
            let len = ctx.dim_of("length", t, 0)?;
            Ok(vec![ctx.reshape("", len, vec![])?])
        }
    }
}

fn concat_from_sequence(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let seq = ctx.sequence(0)?;
    let new_axis = ctx.attrs.int("new_axis", 0)? != 0;
    let axis = ctx.attrs.required_int("axis")?;
    match seq {
        Sequence::Elements { items, .. } => {
            let first = *items.first().ok_or_else(|| ctx.invalid("ConcatFromSequence of an empty sequence"))?;
            let axis = ctx.axis(axis, ctx.rank(first) + usize::from(new_axis))?;
            let parts = if new_axis {
                let mut rows = Vec::with_capacity(items.len());
                for (i, &t) in items.iter().enumerate() {
                    rows.push(ctx.unsqueeze_axis(&format!("element {i}"), t, axis)?);
                }
                rows
            } else {
                items
            };
            Ok(vec![ctx.add("", LayerKind::Concatenation { axis }, &parts)?])
        }
        Sequence::Stacked(stacked) => concat_stacked(ctx, stacked, axis, new_axis),
    }
}

/// ConcatFromSequence of the slices of `stacked` along axis 0: with a new axis, a transpose
/// moving axis 0 there; without, the element axis merges with the sequence axis (sequence
/// index outermost) and the merged axis moves to the element axis's place.
fn concat_stacked(ctx: &mut NodeContext, stacked: TensorId, axis: i64, new_axis: bool) -> Result<Vec<TensorId>, ImportError> {
    let rank = ctx.rank(stacked);
    if new_axis {
        let axis = ctx.axis(axis, rank)?;
        if axis == 0 {
            return Ok(vec![ctx.add("", LayerKind::Identity, &[stacked])?]);
        }
        let perm: Vec<usize> = (1..=axis).chain(std::iter::once(0)).chain(axis + 1..rank).collect();
        return Ok(vec![ctx.shuffle("", stacked, ShuffleParams { first_transpose: perm, ..Default::default() })?]);
    }
    let element_rank = rank - 1;
    if element_rank == 0 {
        return Err(ctx.invalid("ConcatFromSequence without new_axis needs elements of rank 1 or more"));
    }
    let a = ctx.axis(axis, element_rank)?;
    // Stacked dims: [n, e0, …]; element axis k is stacked axis k + 1.
    let first: Vec<usize> = (1..=a).chain(a + 2..rank).chain([0, a + 1]).collect();
    let mut reshape = vec![0; element_rank - 1];
    reshape.push(-1);
    let second: Vec<usize> = (0..a).chain(std::iter::once(element_rank - 1)).chain(a..element_rank - 1).collect();
    let params = ShuffleParams { first_transpose: first, reshape: Some(reshape), second_transpose: second, zero_is_placeholder: true };
    Ok(vec![ctx.shuffle("", stacked, params)?])
}

fn split_to_sequence(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    let rank = ctx.rank(x);
    if rank == 0 {
        return Err(ctx.invalid("SplitToSequence needs an input of rank 1 or more"));
    }
    let axis = ctx.axis(ctx.attrs.int("axis", 0)?, rank)?;
    let keep_dims = ctx.attrs.int("keepdims", 1)? != 0;
    let length = ctx.dims(x)[axis].fixed();
    let Some(split) = ctx.opt_input(1) else {
        return match length {
            Some(len) if len <= MAX_TRACKED_ELEMENTS => split_each(ctx, x, axis, len, keep_dims),
            _ => split_each_stacked(ctx, x, axis, keep_dims),
        };
    };
    let (items, sizes) = match (ctx.const_ints(split), ctx.rank(split)) {
        (Some(v), 0) => {
            let chunk = v[0];
            let len = length.ok_or_else(|| ctx.unsupported("a scalar split of an axis whose length is known only at run time"))?;
            if chunk <= 0 {
                return Err(ctx.invalid(format!("split {chunk} must be positive")));
            }
            let len = len as i64;
            if len / chunk > MAX_TRACKED_ELEMENTS as i64 {
                return Err(ctx.unsupported(format!("splitting {len} elements into chunks of {chunk} (over {MAX_TRACKED_ELEMENTS} pieces)")));
            }
            let sizes: Vec<i64> = (0..len).step_by(chunk as usize).map(|start| chunk.min(len - start)).collect();
            (None, sizes)
        }
        (Some(sizes), _) => (None, sizes),
        (None, 1) => {
            let Some(Dim::Fixed(k)) = ctx.dims(split).first().cloned() else {
                return Err(ctx.unsupported("a split input whose length is known only at run time"));
            };
            if k > MAX_TRACKED_ELEMENTS {
                return Err(ctx.unsupported(format!("a split input of {k} sizes (over {MAX_TRACKED_ELEMENTS})")));
            }
            (Some(split_runtime(ctx, x, axis, split, k)?), Vec::new())
        }
        (None, _) => return Err(ctx.unsupported("a scalar split computed at run time")),
    };
    let items = match items {
        Some(items) => items,
        None => {
            if sizes.iter().any(|&s| s < 0) {
                return Err(ctx.invalid(format!("split {sizes:?} has a negative size")));
            }
            if let Some(len) = length.filter(|&len| sizes.iter().sum::<i64>() != len as i64) {
                return Err(ctx.invalid(format!("split {sizes:?} does not add up to the axis length {len}")));
            }
            let axes = ctx.const_i64("axes", &[axis as i64])?;
            let mut start = 0;
            let mut items = Vec::with_capacity(sizes.len());
            for (i, &size) in sizes.iter().enumerate() {
                let starts = ctx.const_i64(&format!("start {i}"), &[start])?;
                let ends = ctx.const_i64(&format!("end {i}"), &[start + size])?;
                items.push(ctx.add(&format!("element {i}"), LayerKind::Slice, &[x, starts, ends, axes])?);
                start += size;
            }
            items
        }
    };
    made(ctx, Sequence::Elements { dtype: None, items })
}

/// SplitToSequence without a split: one element per index along a fixed-length axis.
fn split_each(ctx: &mut NodeContext, x: TensorId, axis: usize, len: usize, keep_dims: bool) -> Result<Vec<TensorId>, ImportError> {
    let axes = ctx.const_i64("axes", &[axis as i64])?;
    let mut items = Vec::with_capacity(len);
    for i in 0..len as i64 {
        let item = if keep_dims {
            let (starts, ends) = (ctx.const_i64(&format!("start {i}"), &[i])?, ctx.const_i64(&format!("end {i}"), &[i + 1])?);
            ctx.add(&format!("element {i}"), LayerKind::Slice, &[x, starts, ends, axes])?
        } else {
            let index = ctx.constant(&format!("index {i}"), HostTensor::scalar(TensorData::I64(vec![i])).expect("one element"))?;
            ctx.add(&format!("element {i}"), LayerKind::Gather { mode: GatherMode::Default { axis } }, &[x, index])?
        };
        items.push(item);
    }
    made(ctx, Sequence::Elements { dtype: None, items })
}

/// SplitToSequence without a split along an axis of run-time length: the axis moves to the
/// front and the sequence is its slices.
fn split_each_stacked(ctx: &mut NodeContext, x: TensorId, axis: usize, keep_dims: bool) -> Result<Vec<TensorId>, ImportError> {
    let rank = ctx.rank(x);
    let front = if axis == 0 {
        x
    } else {
        let perm: Vec<usize> = std::iter::once(axis).chain((0..rank).filter(|&a| a != axis)).collect();
        ctx.shuffle("axis first", x, ShuffleParams { first_transpose: perm, ..Default::default() })?
    };
    let stacked = if keep_dims { ctx.unsqueeze_axis("kept axis", front, axis + 1)? } else { front };
    made(ctx, Sequence::Stacked(stacked))
}

/// An optional kiln sees is a tensor that is present, unless the input is left out.
fn optional_has_element(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let present = ctx.opt_input(0).is_some();
    let value = HostTensor::scalar(TensorData::Bool(vec![present])).expect("one element");
    Ok(vec![ctx.constant("", value)?])
}

fn optional_get_element(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let x = ctx.input(0)?;
    Ok(vec![ctx.add("", LayerKind::Identity, &[x])?])
}

//! Inference for layers that move data around: shuffle, concat, slice, gather, scatter,
//! fill, expand, top-k, padding. The `resolve_*` helpers turn run-time parameter values
//! into concrete plans; backends use them so that they agree with inference exactly.

use super::{broadcast_shapes, check_axis, rule, InferError, InferResult, Inputs, OutFact};
use crate::ir::dtype::DataType;
use crate::ir::layer::{GatherMode, ScatterMode, ShuffleParams};
use crate::ir::shape::{normalize_axis, sym_list, Dim, Shape, SymInt};
use crate::ir::tensor::HostTensor;

fn check_permutation(perm: &[usize], rank: usize, what: &str) -> InferResult<()> {
    if perm.is_empty() {
        return Ok(());
    }
    let mut seen = vec![false; rank];
    let ok = perm.len() == rank && perm.iter().all(|&p| p < rank && !std::mem::replace(&mut seen[p], true));
    if !ok {
        return rule(Some(0), format!("{what} {perm:?} is not a permutation of {rank} axes"));
    }
    Ok(())
}

fn permute(dims: &[Dim], perm: &[usize]) -> Vec<Dim> {
    if perm.is_empty() {
        dims.to_vec()
    } else {
        perm.iter().map(|&p| dims[p].clone()).collect()
    }
}

/// `n` unknown dims: the output of a layer whose rank is the length of a shape tensor.
/// Refuses lengths no tensor's rank can have (a hostile declared dim would exhaust memory).
fn unknown_dims(n: usize, slot: usize) -> InferResult<Vec<Dim>> {
    const MAX_RANK: usize = 64;
    if n > MAX_RANK {
        return rule(Some(slot), format!("a shape tensor of {n} dims exceeds the maximum rank {MAX_RANK}"));
    }
    Ok(vec![Dim::Unknown; n])
}

/// Resolves reshape dims (`0` placeholders, one `-1`) against an input shape.
pub fn resolve_reshape(input: &[Dim], dims: &[i64], zero_is_placeholder: bool) -> Result<Vec<Dim>, String> {
    let elements: Vec<SymInt> = dims.iter().map(|&d| SymInt::Known(d)).collect();
    resolve_reshape_symbolic(input, &elements, zero_is_placeholder)
}

/// [`resolve_reshape`] for dims known only in part (a shape tensor computed from dynamic
/// dims): a named element gives that dim, an unknown one an unknown dim.
fn resolve_reshape_symbolic(input: &[Dim], dims: &[SymInt], zero_is_placeholder: bool) -> Result<Vec<Dim>, String> {
    let mut out = Vec::with_capacity(dims.len());
    let mut infer_at = None;
    let shown = || sym_list(dims);
    for (i, d) in dims.iter().enumerate() {
        out.push(match d {
            SymInt::Known(-1) => {
                if infer_at.replace(i).is_some() {
                    return Err(format!("reshape dims {} have more than one -1", shown()));
                }
                Dim::Unknown
            }
            SymInt::Known(0) if zero_is_placeholder => match input.get(i) {
                Some(d) => d.clone(),
                None => return Err(format!("reshape dim {i} copies an input dim that does not exist")),
            },
            SymInt::Known(d) if *d < 0 => return Err(format!("reshape dim {d} is negative")),
            SymInt::Known(d) => Dim::Fixed(*d as usize),
            // A named dim that is 0 at run time would copy input dim `i` instead: only the
            // same name there makes both readings agree.
            SymInt::Named(name) if !zero_is_placeholder || input.get(i).is_none_or(|d| *d == Dim::Named(name.clone())) => {
                Dim::Named(name.clone())
            }
            SymInt::Named(_) | SymInt::Unknown => Dim::Unknown,
        });
    }
    let dims = shown();
    if let Some(i) = infer_at {
        out[i] = infer_minus_one(input, &out, i).map_err(|v| format!("cannot infer the -1 in {dims}: {v}"))?;
    } else if let (Some(v), Some(k)) = (Shape(input.to_vec()).volume(), Shape(out.clone()).volume()) {
        if v != k {
            return Err(format!("cannot reshape {v} elements into {dims} ({k} elements)"));
        }
    }
    Ok(out)
}

/// Static reshape dims that do what partly known ones do, where they exist: numbers stay,
/// a named dim in the same position of the input becomes a `0` placeholder (when zeros are
/// placeholders), and one named or unknown element becomes the `-1` (its run-time value is
/// what `-1` infers; a reshape of zero elements, where `-1` is ambiguous, is the exception).
pub fn static_reshape(input: &[Dim], elements: &[SymInt], zero_is_placeholder: bool) -> Option<Vec<i64>> {
    let mut free = elements.contains(&SymInt::Known(-1));
    elements
        .iter()
        .enumerate()
        .map(|(i, e)| match e {
            SymInt::Known(k) => Some(*k),
            SymInt::Named(name) if zero_is_placeholder && input.get(i).is_some_and(|d| *d == Dim::Named(name.clone())) => {
                Some(0)
            }
            SymInt::Named(_) | SymInt::Unknown if !free => {
                free = true;
                Some(-1)
            }
            _ => None,
        })
        .collect()
}

/// The dim a `-1` stands for: the input's volume divided by the other output dims, with
/// named dims cancelling by name so `[N,3,4] -> [0,-1]` gives `[N,12]`.
fn infer_minus_one(input: &[Dim], out: &[Dim], at: usize) -> Result<Dim, String> {
    let mut names: Vec<&str> = Vec::new();
    let mut fixed_in = 1usize;
    for d in input {
        match d {
            Dim::Fixed(n) => fixed_in = fixed_in.checked_mul(*n).ok_or("the input's element count overflows")?,
            Dim::Named(s) => names.push(s),
            Dim::Unknown => return Ok(Dim::Unknown),
        }
    }
    let mut fixed_out = 1usize;
    for (_, d) in out.iter().enumerate().filter(|(i, _)| *i != at) {
        match d {
            Dim::Fixed(n) => fixed_out = fixed_out.checked_mul(*n).ok_or("the output's element count overflows")?,
            Dim::Named(s) => match names.iter().position(|n| n == s) {
                Some(p) => {
                    names.swap_remove(p);
                }
                None => return Ok(Dim::Unknown),
            },
            Dim::Unknown => return Ok(Dim::Unknown),
        }
    }
    if fixed_out == 0 || fixed_in % fixed_out != 0 {
        if names.is_empty() {
            return Err(format!("{fixed_in} elements do not split by {fixed_out}"));
        }
        return Ok(Dim::Unknown);
    }
    let quotient = fixed_in / fixed_out;
    Ok(match names.as_slice() {
        [] => Dim::Fixed(quotient),
        [name] if quotient == 1 => Dim::Named(name.to_string()),
        _ => Dim::Unknown,
    })
}

pub(super) fn shuffle(ins: &Inputs, p: &ShuffleParams) -> InferResult<Vec<OutFact>> {
    ins.arity(1, 2)?;
    let x = ins.req(0)?;
    check_permutation(&p.first_transpose, x.shape.rank(), "first transpose")?;
    let mut dims = permute(x.shape.dims(), &p.first_transpose);
    let reshape: Option<Vec<SymInt>> = match ins.get(1) {
        Some(_) => {
            let (f, _) = ins.index_list(1)?;
            match f.elements() {
                Some(elements) => Some(elements),
                None => match f.shape.dims()[0].fixed() {
                    Some(n) => {
                        dims = unknown_dims(n, 1)?;
                        None
                    }
                    None => return rule(Some(1), "the reshape dims tensor must have a fixed length"),
                },
            }
        }
        None => p.reshape.as_ref().map(|r| r.iter().map(|&d| SymInt::Known(d)).collect()),
    };
    if let Some(r) = reshape {
        dims = resolve_reshape_symbolic(&dims, &r, p.zero_is_placeholder)
            .map_err(|e| InferError { input: Some(0), rule: e })?;
    }
    check_permutation(&p.second_transpose, dims.len(), "second transpose")?;
    let dims = permute(&dims, &p.second_transpose);
    let value = match (x.value, p.first_transpose.is_empty() && p.second_transpose.is_empty()) {
        (Some(v), true) => Shape(dims.clone()).as_fixed().and_then(|d| v.clone().reshaped(d).ok()),
        _ => None,
    };
    Ok(vec![OutFact::with_value(x.dtype, Shape(dims), value)])
}

pub(super) fn concatenation(ins: &Inputs, axis: usize) -> InferResult<Vec<OutFact>> {
    if ins.0.is_empty() {
        return rule(None, "concatenation needs at least one input");
    }
    let first = ins.req(0)?;
    let rank = first.shape.rank();
    check_axis(axis, rank, Some(0))?;
    let mut total = Some(0usize);
    for i in 0..ins.0.len() {
        let f = ins.req(i)?;
        ins.same_type(0, i)?;
        if f.shape.rank() != rank {
            return rule(Some(i), format!("rank {} differs from the first input's {rank}", f.shape.rank()));
        }
        for (a, (d, d0)) in f.shape.dims().iter().zip(first.shape.dims()).enumerate() {
            if a != axis && d.differs_from(d0) {
                return rule(Some(i), format!("shape {} differs from {} outside axis {axis}", f.shape, first.shape));
            }
        }
        total = total.zip(f.shape.dims()[axis].fixed()).and_then(|(t, n)| t.checked_add(n));
    }
    let mut dims = first.shape.dims().to_vec();
    dims[axis] = total.map_or(Dim::Unknown, Dim::Fixed);
    Ok(vec![OutFact::new(first.dtype, Shape(dims))])
}

/// One sliced axis: first index, element count and step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SliceAxis {
    pub start: i64,
    pub len: usize,
    pub step: i64,
}

/// Resolves ONNX slice parameters against concrete dims; one entry per axis of the input.
pub fn resolve_slice(
    dims: &[usize],
    starts: &[i64],
    ends: &[i64],
    axes: Option<&[i64]>,
    steps: Option<&[i64]>,
) -> Result<Vec<SliceAxis>, String> {
    let n = starts.len();
    if ends.len() != n || axes.is_some_and(|a| a.len() != n) || steps.is_some_and(|s| s.len() != n) {
        return Err("starts, ends, axes and steps must have the same length".into());
    }
    let mut plan: Vec<SliceAxis> = dims.iter().map(|&d| SliceAxis { start: 0, len: d, step: 1 }).collect();
    let mut seen = vec![false; dims.len()];
    for i in 0..n {
        let raw_axis = axes.map_or(i as i64, |a| a[i]);
        let axis = normalize_axis(raw_axis, dims.len()).ok_or(format!("slice axis {raw_axis} is out of range"))?;
        if std::mem::replace(&mut seen[axis], true) {
            return Err(format!("slice axis {axis} is given twice"));
        }
        let step = steps.map_or(1, |s| s[i]);
        if step == 0 {
            return Err("slice step must not be 0".into());
        }
        let d = dims[axis] as i64;
        let fix = |v: i64| if v < 0 { v.saturating_add(d) } else { v };
        let (start, end) = if step > 0 {
            (fix(starts[i]).clamp(0, d), fix(ends[i]).clamp(0, d))
        } else {
            (fix(starts[i]).clamp(0, (d - 1).max(0)), fix(ends[i]).clamp(-1, d - 1))
        };
        let span = if step > 0 { end - start } else { start - end };
        // unsigned_abs: i64::MIN is a valid (if extreme) step.
        let len = if span <= 0 || d == 0 { 0 } else { (span as u64).div_ceil(step.unsigned_abs()) };
        plan[axis] = SliceAxis { start, len: len as usize, step };
    }
    Ok(plan)
}

pub(super) fn slice(ins: &Inputs) -> InferResult<Vec<OutFact>> {
    ins.arity(3, 5)?;
    let x = ins.req(0)?;
    let (_, starts) = ins.index_list(1)?;
    let (_, ends) = ins.index_list(2)?;
    let axes = match ins.get(3) {
        Some(_) => Some(ins.index_list(3)?.1),
        None => None,
    };
    let steps = match ins.get(4) {
        Some(_) => Some(ins.index_list(4)?.1),
        None => None,
    };
    let rank = x.shape.rank();
    let all_known = starts.is_some() && ends.is_some() && axes.as_ref().is_none_or(Option::is_some)
        && steps.as_ref().is_none_or(Option::is_some);
    if !all_known {
        return Ok(vec![OutFact::new(x.dtype, Shape(vec![Dim::Unknown; rank]))]);
    }
    let (starts, ends) = (starts.unwrap_or_default(), ends.unwrap_or_default());
    let axes = axes.flatten();
    let steps = steps.flatten();
    // Resolve against fixed dims; dynamic dims that are sliced become unknown.
    let probe: Vec<usize> = x.shape.dims().iter().map(|d| d.fixed().unwrap_or(0)).collect();
    let plan = resolve_slice(&probe, &starts, &ends, axes.as_deref(), steps.as_deref())
        .map_err(|e| InferError { input: Some(1), rule: e })?;
    let sliced: Vec<usize> = match &axes {
        Some(a) => a.iter().filter_map(|&a| normalize_axis(a, rank)).collect(),
        None => (0..starts.len().min(rank)).collect(),
    };
    let dims = x
        .shape
        .dims()
        .iter()
        .enumerate()
        .map(|(i, d)| match (sliced.contains(&i), d) {
            (false, d) => d.clone(),
            (true, Dim::Fixed(_)) => Dim::Fixed(plan[i].len),
            (true, _) => Dim::Unknown,
        })
        .collect();
    Ok(vec![OutFact::new(x.dtype, Shape(dims))])
}

pub(super) fn gather(ins: &Inputs, mode: GatherMode) -> InferResult<Vec<OutFact>> {
    ins.arity(2, 2)?;
    let data = ins.req(0)?;
    let idx = ins.req(1)?;
    if !idx.dtype.is_index() {
        return rule(Some(1), format!("indices must be i32 or i64, not {}", idx.dtype));
    }
    let (dd, id) = (data.shape.dims(), idx.shape.dims());
    let dims = match mode {
        GatherMode::Default { axis } => {
            check_axis(axis, dd.len(), Some(0))?;
            let mut out = dd[..axis].to_vec();
            out.extend_from_slice(id);
            out.extend_from_slice(&dd[axis + 1..]);
            out
        }
        GatherMode::Elements { axis } => {
            check_axis(axis, dd.len(), Some(0))?;
            if id.len() != dd.len() {
                return rule(Some(1), format!("indices rank {} differs from data rank {}", id.len(), dd.len()));
            }
            id.to_vec()
        }
        GatherMode::Nd { batch_dims } => {
            let Some(Some(last)) = id.last().map(Dim::fixed) else {
                return rule(Some(1), "GatherND indices need a fixed last dim");
            };
            if batch_dims >= id.len() || batch_dims + last > dd.len() {
                return rule(Some(1), format!(
                    "GatherND: {last} index components after {batch_dims} batch dims exceed data rank {}", dd.len()
                ));
            }
            let mut out = id[..id.len() - 1].to_vec();
            out.extend_from_slice(&dd[batch_dims + last..]);
            out
        }
    };
    Ok(vec![OutFact::new(data.dtype, Shape(dims))])
}

pub(super) fn scatter(ins: &Inputs, mode: ScatterMode) -> InferResult<Vec<OutFact>> {
    ins.arity(3, 3)?;
    let data = ins.req(0)?;
    let idx = ins.req(1)?;
    ins.same_type(0, 2)?;
    if !idx.dtype.is_index() {
        return rule(Some(1), format!("indices must be i32 or i64, not {}", idx.dtype));
    }
    if let ScatterMode::Elements { axis } = mode {
        check_axis(axis, data.shape.rank(), Some(0))?;
        if idx.shape.rank() != data.shape.rank() {
            return rule(Some(1), "ScatterElements indices must have the data's rank");
        }
    }
    Ok(vec![OutFact::new(data.dtype, data.shape.clone())])
}

pub(super) fn fill(ins: &Inputs, value: &HostTensor) -> InferResult<Vec<OutFact>> {
    ins.arity(1, 1)?;
    if value.len() != 1 {
        return rule(None, format!("the fill value must hold one element, got {}", value.len()));
    }
    let shape = shape_operand(ins, 0, "fill")?;
    Ok(vec![OutFact::new(value.dtype(), shape)])
}

pub(super) fn expand(ins: &Inputs) -> InferResult<Vec<OutFact>> {
    ins.arity(2, 2)?;
    let x = ins.req(0)?;
    let target = shape_operand(ins, 1, "expand")?;
    let shape = broadcast_shapes(&[x.shape, &target]).map_err(|r| InferError { input: Some(1), rule: r })?;
    Ok(vec![OutFact::new(x.dtype, shape)])
}

/// The shape a 1-D shape tensor operand describes, as far as it is known: its numbers, named
/// dims where it holds dynamic dims, unknown dims where only its length is known.
fn shape_operand(ins: &Inputs, slot: usize, what: &str) -> InferResult<Shape> {
    let (f, _) = ins.index_list(slot)?;
    match f.elements() {
        Some(elements) => elements
            .iter()
            .map(|e| e.as_dim().ok_or_else(|| InferError { input: Some(slot), rule: format!("{what} shape {} has a negative dim", sym_list(&elements)) }))
            .collect::<InferResult<Vec<Dim>>>()
            .map(Shape),
        None => match f.shape.dims()[0].fixed() {
            Some(n) => Ok(Shape(unknown_dims(n, slot)?)),
            None => rule(Some(slot), format!("the {what} shape tensor must have a fixed length")),
        },
    }
}

pub(super) fn top_k(ins: &Inputs, axis: usize) -> InferResult<Vec<OutFact>> {
    ins.arity(2, 2)?;
    let x = ins.req(0)?;
    check_axis(axis, x.shape.rank(), Some(0))?;
    let k = ins.index_scalar(1)?;
    let mut dims = x.shape.dims().to_vec();
    dims[axis] = match (k, &dims[axis]) {
        (Some(k), _) if k < 0 => return rule(Some(1), format!("k must not be negative, got {k}")),
        (Some(k), Dim::Fixed(n)) if k as usize > *n => {
            return rule(Some(1), format!("k = {k} exceeds the axis length {n}"))
        }
        (Some(k), _) => Dim::Fixed(k as usize),
        (None, _) => Dim::Unknown,
    };
    Ok(vec![OutFact::new(x.dtype, Shape(dims.clone())), OutFact::new(DataType::I64, Shape(dims))])
}

pub(super) fn padding(ins: &Inputs) -> InferResult<Vec<OutFact>> {
    ins.arity(2, 3)?;
    let x = ins.req(0)?;
    if ins.get(2).is_some() {
        ins.same_type(0, 2)?;
    }
    let (_, pads) = ins.index_list(1)?;
    let rank = x.shape.rank();
    let dims = match pads {
        Some(p) => {
            if p.len() != 2 * rank {
                return rule(Some(1), format!("pads has {} entries but the input has rank {rank}", p.len()));
            }
            x.shape
                .dims()
                .iter()
                .enumerate()
                .map(|(i, d)| match d.fixed() {
                    Some(n) => {
                        match (n as i64).checked_add(p[i]).and_then(|l| l.checked_add(p[i + rank])) {
                            Some(len) if len >= 0 => Ok(Dim::Fixed(len as usize)),
                            Some(_) => Err(InferError { input: Some(1), rule: format!("pads {p:?} crop axis {i} below zero") }),
                            None => Err(InferError { input: Some(1), rule: format!("pads {p:?} overflow axis {i}") }),
                        }
                    }
                    None => Ok(if p[i] == 0 && p[i + rank] == 0 { d.clone() } else { Dim::Unknown }),
                })
                .collect::<InferResult<Vec<_>>>()?
        }
        None => vec![Dim::Unknown; rank],
    };
    Ok(vec![OutFact::new(x.dtype, Shape(dims))])
}

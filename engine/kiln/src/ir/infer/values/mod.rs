//! Host evaluation of small shape computations (TensorRT's shape tensors).
//!
//! Exporters compute shapes in the graph — `Shape → Gather → Unsqueeze → Concat → Reshape`,
//! `Shape → Slice → Mul`, `Shape → Cast → Mul(scale) → Floor → Cast` for a Resize. Inference
//! evaluates these small tensors whenever their inputs are known (at import, in the
//! builder's folding and at run time), so reshape dims and the like become static as soon as
//! the shapes they derive from are, and backends need no kernel for them. Anything else
//! (large tensors, ops not exact in f64, layers not listed) is left to the
//! backend. [`evaluates`] says statically which layers these are.

pub(crate) mod numbers;

use super::{resolve_slice, Fact};
use crate::ir::dtype::DataType;
use crate::ir::format::row_major_strides;
use crate::ir::layer::{ElementwiseOp, GatherMode, LayerKind, UnaryOp};
use crate::ir::shape::{Shape, SymInt};
use crate::ir::tensor::{HostTensor, TensorData};
use numbers::Numbers;

/// Larger tensors are not shapes: leave them to the backend.
pub(crate) const MAX_ELEMENTS: usize = 1024;

/// The value of a single-output layer whose inputs are known small tensors, when it is one
/// of the shape-arithmetic kinds; `None` otherwise.
pub(crate) fn fold(
    kind: &LayerKind,
    inputs: &[Option<&HostTensor>],
    out_dtype: DataType,
    out_shape: &Shape,
) -> Option<HostTensor> {
    let out_len = out_shape.volume().filter(|&n| n <= MAX_ELEMENTS)?;
    let input = |slot: usize| inputs.get(slot).copied().flatten();
    let nums = |slot: usize| Numbers::of(input(slot)?);
    let ints = |slot: usize| small_integers(input(slot)?);
    let rank_at_most_1 = || inputs.iter().flatten().all(|t| t.shape().len() <= 1);
    let out_dims = out_shape.as_fixed()?;
    // Input `slot` broadcast to the output's dims.
    let broadcast = |slot: usize| {
        let t = input(slot)?;
        Numbers::of(t)?.pick(&crate::ir::broadcast::positions(t.shape(), &out_dims).ok()?)
    };
    let values: Numbers = match kind {
        LayerKind::Identity => nums(0)?,
        LayerKind::Shuffle(p) if is_identity(&p.first_transpose) && is_identity(&p.second_transpose) => nums(0)?,
        // PyTorch's exporters spell a padding's begins and ends through a transpose of its
        // pairs (`F.pad`): the padded shape is then known. Integers only: a transpose of float
        // values is the backend's (the constant folding's) work.
        LayerKind::Shuffle(p) => match nums(0)? {
            ints @ Numbers::Int(_) => ints.pick(&shuffle_positions(input(0)?.shape(), &p.first_transpose, &p.second_transpose, &out_dims)?)?,
            Numbers::Float(_) => return None,
        },
        LayerKind::Cast { to } => nums(0)?.cast(*to)?,
        LayerKind::Concatenation { .. } => {
            if !rank_at_most_1() {
                return None;
            }
            Numbers::concat((0..inputs.len()).filter(|&s| input(s).is_some()).map(nums).collect::<Option<_>>()?)?
        }
        LayerKind::Gather { mode: GatherMode::Default { axis: 0 } } => {
            let data = nums(0)?;
            if input(0)?.shape().len() != 1 {
                return None;
            }
            let at: Vec<usize> = (0..data.len()).collect();
            data.pick(&gather_1d(&at, &ints(1)?)?)?
        }
        // Any rank: F.pad's pairs are flipped by a Slice of a [n, 2] tensor.
        LayerKind::Slice => {
            let optional = |slot: usize| match input(slot) {
                None => Some(None),
                Some(_) => ints(slot).map(Some),
            };
            let (axes, steps) = (optional(3)?, optional(4)?);
            let plan = resolve_slice(input(0)?.shape(), &ints(1)?, &ints(2)?, axes.as_deref(), steps.as_deref()).ok()?;
            nums(0)?.pick(&slice_positions(input(0)?.shape(), &plan)?)?
        }
        LayerKind::Unary { op: UnaryOp::Not } if out_dtype == DataType::Bool => {
            Numbers::Int(ints(0)?.into_iter().map(|v| i64::from(v == 0)).collect())
        }
        LayerKind::Unary { op } => match nums(0)? {
            Numbers::Int(x) => Numbers::Int(x.into_iter().map(|v| numbers::int_unary(*op, v)).collect::<Option<_>>()?),
            Numbers::Float(x) => Numbers::Float(x.into_iter().map(|v| numbers::float_unary(*op, v)).collect::<Option<_>>()?),
        },
        // ConstantOfShape of a known (small) shape: `Shape → … → ConstantOfShape → Concat`
        // builds reshape dims, e.g. the LayerNormalization function body's reduced shape.
        LayerKind::Fill { value } => match Numbers::of(value)? {
            Numbers::Int(v) => Numbers::Int(vec![*v.first()?; out_len]),
            Numbers::Float(v) => Numbers::Float(vec![*v.first()?; out_len]),
        },
        // Any rank, numpy broadcasting: the masks exporters build from shapes
        // (`Range → Unsqueeze → Less → Where`) are small 2-D and 4-D tensors.
        LayerKind::Elementwise { op } => match (broadcast(0)?, broadcast(1)?) {
            (Numbers::Int(a), Numbers::Int(b)) => Numbers::Int(zip(&a, &b, |x, y| elementwise(*op, x, y))?),
            (Numbers::Float(a), Numbers::Float(b)) if op.is_comparison() => {
                Numbers::Int(zip(&a, &b, |x, y| numbers::float_comparison(*op, x, y).map(i64::from))?)
            }
            (Numbers::Float(a), Numbers::Float(b)) => Numbers::Float(zip(&a, &b, |x, y| numbers::float_arithmetic(*op, x, y))?),
            _ => return None,
        },
        // `Where(Equal(shape, -1), ones, shape)`: how exporters spell `expand(-1, …)`.
        LayerKind::Select => {
            let Numbers::Int(c) = broadcast(0)? else { return None };
            match (broadcast(1)?, broadcast(2)?) {
                (Numbers::Int(a), Numbers::Int(b)) => Numbers::Int(select(&c, a, b)),
                (Numbers::Float(a), Numbers::Float(b)) => Numbers::Float(select(&c, a, b)),
                _ => return None,
            }
        }
        LayerKind::Expand => broadcast(0)?,
        // Integer running sums (exact in any order): how Range is lowered.
        LayerKind::CumulativeSum { exclusive, reverse } => {
            let Numbers::Int(x) = nums(0)? else { return None };
            let dims = input(0)?.shape();
            let axis = crate::ir::shape::normalize_axis(*ints(1)?.first()?, dims.len())?;
            Numbers::Int(cumulative_sum(&x, dims, axis, *exclusive, *reverse)?)
        }
        _ => return None,
    };
    if values.len() != out_len {
        return None;
    }
    values.into_tensor(out_dtype, out_shape)
}

/// Whether `fold` (the host evaluation of small values) evaluates a layer of `kind` whose
/// inputs have these types and ranks and whose output has `out_len` elements (`None`: not
/// known before run time; evaluated when small then), given known inputs. Backends place such layers on the host: the run-time inference computes them,
/// and no device kernel is needed. (A value `fold` still declines at run time, such as
/// an integer overflow, goes to the backend's kernel.)
pub fn evaluates(kind: &LayerKind, inputs: &[Option<(DataType, usize)>], out_dtype: DataType, out_len: Option<usize>) -> bool {
    let numeric = |t: DataType| (t.is_integer() && !t.is_narrow()) || t == DataType::Bool || t.is_float();
    let present = || inputs.iter().flatten();
    // A size known only at run time may still be small (a mask over a dynamic sequence):
    // inference decides then, and a larger one goes to the backend's kernel.
    if out_len.is_some_and(|n| n > MAX_ELEMENTS) || !numeric(out_dtype) || !present().all(|(t, _)| numeric(*t)) {
        return false;
    }
    let rank_at_most_1 = || present().all(|&(_, rank)| rank <= 1);
    let data = inputs.first().copied().flatten();
    let data_float = data.is_some_and(|(t, _)| t.is_float());
    match kind {
        LayerKind::Identity | LayerKind::Cast { .. } => true,
        LayerKind::Shuffle(p) => !data_float || (is_identity(&p.first_transpose) && is_identity(&p.second_transpose)),
        LayerKind::Concatenation { .. } => rank_at_most_1(),
        LayerKind::Select | LayerKind::Expand => true,
        LayerKind::CumulativeSum { .. } => data.is_some_and(|(t, _)| t.is_integer()),
        LayerKind::Gather { mode: GatherMode::Default { axis: 0 } } => data.is_some_and(|(_, rank)| rank == 1),
        LayerKind::Slice => true,
        LayerKind::Unary { op: UnaryOp::Not } => out_dtype == DataType::Bool,
        LayerKind::Unary { op } if data_float => numbers::float_unary(*op, 1.0).is_some(),
        LayerKind::Unary { op } => numbers::int_unary(*op, 1).is_some(),
        LayerKind::Fill { value } => numeric(value.dtype()),
        LayerKind::Elementwise { op } if data_float => numbers::float_arithmetic(*op, 1.0, 1.0).is_some() || op.is_comparison(),
        LayerKind::Elementwise { op } => elementwise(*op, 1, 1).is_some(),
        _ => false,
    }
}

/// For each element of a Shuffle's output (`out`, row-major), the position in its input (`x`)
/// it holds: the first transpose, the reshape (row-major: positions kept) and the second
/// transpose. An empty permutation is the identity.
fn shuffle_positions(x: &[usize], first: &[usize], second: &[usize], out: &[usize]) -> Option<Vec<usize>> {
    let identity = |n: usize| (0..n).collect::<Vec<_>>();
    let (first, second) = (if first.is_empty() { identity(x.len()) } else { first.to_vec() }, if second.is_empty() { identity(out.len()) } else { second.to_vec() });
    if first.len() != x.len() || second.len() != out.len() {
        return None;
    }
    // The transposed input's dims, and the reshaped dims the second transpose reads.
    let moved: Vec<usize> = first.iter().map(|&d| x.get(d).copied()).collect::<Option<_>>()?;
    let mut reshaped = vec![0; out.len()];
    for (i, &d) in second.iter().enumerate() {
        *reshaped.get_mut(d)? = out[i];
    }
    let (x_strides, reshaped_strides) = (row_major_strides(x), row_major_strides(&reshaped));
    let count: usize = out.iter().product();
    (0..count)
        .map(|mut rest| {
            // The output index, then the reshaped linear position it reads.
            let mut linear = 0;
            for d in (0..out.len()).rev() {
                linear += rest % out[d] * reshaped_strides[second[d]];
                rest /= out[d];
            }
            // That linear position in the transposed input, then the input position.
            let mut at = 0;
            for d in (0..moved.len()).rev() {
                at += linear % moved[d] * x_strides[first[d]];
                linear /= moved[d];
            }
            Some(at)
        })
        .collect()
}

/// `f` over the pairs of two operands of one shape (`None` if `f` declines one).
fn zip<T: Copy, R>(a: &[T], b: &[T], f: impl Fn(T, T) -> Option<R>) -> Option<Vec<R>> {
    a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect()
}

/// `c ? a : b` element by element over operands of one shape.
fn select<T>(c: &[i64], a: Vec<T>, b: Vec<T>) -> Vec<T> {
    c.iter().zip(a.into_iter().zip(b)).map(|(&c, (a, b))| if c != 0 { a } else { b }).collect()
}

/// A running sum along `axis` (exclusive: each position leaves itself out; reverse: from
/// the end), checked for overflow.
fn cumulative_sum(x: &[i64], dims: &[usize], axis: usize, exclusive: bool, reverse: bool) -> Option<Vec<i64>> {
    let len = *dims.get(axis)?;
    let inner: usize = dims[axis + 1..].iter().product();
    let outer: usize = dims[..axis].iter().product();
    let mut out = vec![0i64; x.len()];
    for o in 0..outer {
        for i in 0..inner {
            let mut sum = 0i64;
            for k in 0..len {
                let k = if reverse { len - 1 - k } else { k };
                let at = (o * len + k) * inner + i;
                let value = *x.get(at)?;
                if exclusive {
                    out[at] = sum;
                    sum = sum.checked_add(value)?;
                } else {
                    sum = sum.checked_add(value)?;
                    out[at] = sum;
                }
            }
        }
    }
    Some(out)
}

/// The elements of a small integer tensor, and of a bool one as 0/1 (the masks exporters
/// compute beside shapes).
pub(crate) fn small_integers(t: &HostTensor) -> Option<Vec<i64>> {
    if t.len() > MAX_ELEMENTS {
        return None;
    }
    match t.data() {
        TensorData::Bool(v) => Some(v.iter().map(|&b| i64::from(b)).collect()),
        _ if t.dtype().is_integer() => t.to_i64_vec(),
        _ => None,
    }
}

/// An integer or bool tensor of a fixed shape holding `values` (`None` for other types,
/// values that do not fit, or a count that does not match).
pub(crate) fn integer_tensor(dtype: DataType, shape: &Shape, values: Vec<i64>) -> Option<HostTensor> {
    let dims = shape.as_fixed()?;
    let data = match dtype {
        DataType::I64 => TensorData::I64(values),
        DataType::Bool => TensorData::Bool(values.into_iter().map(|v| v != 0).collect()),
        DataType::I32 => TensorData::I32(narrowed(values)?),
        DataType::I16 => TensorData::I16(narrowed(values)?),
        DataType::I8 => TensorData::I8(narrowed(values)?),
        DataType::U64 => TensorData::U64(narrowed(values)?),
        DataType::U32 => TensorData::U32(narrowed(values)?),
        DataType::U16 => TensorData::U16(narrowed(values)?),
        DataType::U8 => TensorData::U8(narrowed(values)?),
        _ => return None,
    };
    HostTensor::new(dims, data).ok()
}

/// Every value converted to `T`, when all fit.
fn narrowed<T: TryFrom<i64>>(values: Vec<i64>) -> Option<Vec<T>> {
    values.into_iter().map(|v| T::try_from(v).ok()).collect()
}

/// The elements of a small integer output whose inputs are partly known shape values
/// ([`SymInt`]): the same kinds as [`fold`], element by element, so that
/// `Shape(x[N,197,768]) → Slice[1:] → Concat([-1], …)` is `[-1, 197, 768]` and a Reshape
/// by it has a known rank and the known dims. `None` when the output is not such a tensor.
pub(crate) fn fold_symbolic(
    kind: &LayerKind,
    inputs: &[Option<Fact>],
    out_dtype: DataType,
    out_shape: &Shape,
) -> Option<Vec<SymInt>> {
    if !(out_dtype.is_integer() || out_dtype == DataType::Bool) || out_shape.rank() > 1 {
        return None;
    }
    let out_len = out_shape.volume().filter(|&n| n <= MAX_ELEMENTS)?;
    let elements = |slot: usize| inputs.get(slot).copied().flatten().and_then(|f| f.elements());
    let numbers = |slot: usize| elements(slot)?.iter().map(SymInt::known).collect::<Option<Vec<i64>>>();
    let values: Vec<SymInt> = match kind {
        LayerKind::Identity => elements(0)?,
        LayerKind::Shuffle(p) if is_identity(&p.first_transpose) && is_identity(&p.second_transpose) => elements(0)?,
        LayerKind::Cast { to } if to.is_integer() => elements(0)?,
        LayerKind::Concatenation { .. } => {
            let mut all = Vec::new();
            for slot in 0..inputs.len() {
                all.extend(elements(slot)?);
            }
            all
        }
        LayerKind::Gather { mode: GatherMode::Default { axis: 0 } } => {
            if inputs.first().copied().flatten()?.shape.rank() != 1 {
                return None;
            }
            gather_1d(&elements(0)?, &numbers(1)?)?
        }
        LayerKind::Slice => {
            if inputs.first().copied().flatten()?.shape.rank() != 1 {
                return None;
            }
            let optional = |slot: usize| match inputs.get(slot).copied().flatten() {
                None => Some(None),
                Some(_) => numbers(slot).map(Some),
            };
            let (axes, steps) = (optional(3)?, optional(4)?);
            slice_1d(&elements(0)?, &numbers(1)?, &numbers(2)?, axes.as_deref(), steps.as_deref())?
        }
        LayerKind::Elementwise { op } => {
            let (a, b) = (elements(0)?, elements(1)?);
            if a.is_empty() || b.is_empty() {
                return None;
            }
            let pick = pick_at::<SymInt>;
            (0..out_len).map(|i| Some(symbolic_elementwise(*op, pick(&a, i)?, pick(&b, i)?))).collect::<Option<Vec<SymInt>>>()?
        }
        LayerKind::Select => {
            let (c, a, b) = (elements(0)?, elements(1)?, elements(2)?);
            if c.is_empty() || a.is_empty() || b.is_empty() {
                return None;
            }
            let pick = pick_at::<SymInt>;
            (0..out_len)
                .map(|i| match pick(&c, i)? {
                    SymInt::Known(0) => pick(&b, i),
                    SymInt::Known(_) => pick(&a, i),
                    _ => Some(SymInt::Unknown),
                })
                .collect::<Option<Vec<SymInt>>>()?
        }
        _ => return None,
    };
    (values.len() == out_len).then_some(values)
}

/// `a op b` on shape elements: numbers fold; a named dim survives the identities (`N * 1`,
/// `N + 0`, `max(N, N)`); anything else is known only at run time.
fn symbolic_elementwise(op: ElementwiseOp, a: SymInt, b: SymInt) -> SymInt {
    use ElementwiseOp as E;
    use SymInt::{Known, Named};
    match (op, a, b) {
        (op, Known(x), Known(y)) => elementwise(op, x, y).map_or(SymInt::Unknown, Known),
        // A dim is never negative: comparing one with a negative number (`-1` marks a free
        // dim in `expand` and `reshape` arguments) is known.
        (E::Equal, Named(_), Known(k)) | (E::Equal, Known(k), Named(_)) if k < 0 => Known(0),
        (E::Prod | E::Div | E::FloorDiv, n @ Named(_), Known(1)) | (E::Prod, Known(1), n @ Named(_)) => n,
        (E::Sum | E::Sub, n @ Named(_), Known(0)) | (E::Sum, Known(0), n @ Named(_)) => n,
        (E::Max | E::Min, Named(x), Named(y)) if x == y => Named(x),
        _ => SymInt::Unknown,
    }
}

/// Element `i` of an operand of a 1-D elementwise op: a single element stands for all.
fn pick_at<T: Clone>(v: &[T], i: usize) -> Option<T> {
    if v.len() == 1 { v.first().cloned() } else { v.get(i).cloned() }
}

/// `data[indices]` of a 1-D list (negative indices count from the end), as ONNX Gather on axis 0.
fn gather_1d<T: Clone>(data: &[T], indices: &[i64]) -> Option<Vec<T>> {
    let n = data.len() as i64;
    indices
        .iter()
        .map(|&i| usize::try_from(if i < 0 { i + n } else { i }).ok().and_then(|i| data.get(i).cloned()))
        .collect()
}

/// For each element of a slice (row-major), the position in its input of `dims` it holds.
fn slice_positions(dims: &[usize], plan: &[super::SliceAxis]) -> Option<Vec<usize>> {
    let mut positions = vec![0usize];
    let strides = row_major_strides(dims);
    for (axis, p) in plan.iter().enumerate() {
        let offsets: Vec<usize> = (0..p.len).map(|k| usize::try_from(p.start + k as i64 * p.step).ok().map(|i| i * strides[axis])).collect::<Option<_>>()?;
        positions = positions.iter().flat_map(|&base| offsets.iter().map(move |&o| base + o)).collect();
    }
    Some(positions)
}

/// A 1-D list sliced as ONNX Slice does.
fn slice_1d<T: Clone>(data: &[T], starts: &[i64], ends: &[i64], axes: Option<&[i64]>, steps: Option<&[i64]>) -> Option<Vec<T>> {
    let plan = resolve_slice(&[data.len()], starts, ends, axes, steps).ok()?;
    let axis = plan.first()?;
    (0..axis.len).map(|k| data.get(usize::try_from(axis.start + k as i64 * axis.step).ok()?).cloned()).collect()
}

fn is_identity(perm: &[usize]) -> bool {
    perm.iter().enumerate().all(|(i, &p)| i == p)
}

fn elementwise(op: ElementwiseOp, a: i64, b: i64) -> Option<i64> {
    use ElementwiseOp as E;
    match op {
        E::Sum => a.checked_add(b),
        E::Sub => a.checked_sub(b),
        E::Prod => a.checked_mul(b),
        // Integer Div truncates toward zero (ONNX, C).
        E::Div => a.checked_div(b),
        E::FloorDiv => {
            let q = a.checked_div(b)?;
            Some(if (a % b != 0) && ((a < 0) != (b < 0)) { q - 1 } else { q })
        }
        E::Max => Some(a.max(b)),
        E::Min => Some(a.min(b)),
        E::Equal => Some(i64::from(a == b)),
        E::Greater => Some(i64::from(a > b)),
        E::Less => Some(i64::from(a < b)),
        E::GreaterOrEqual => Some(i64::from(a >= b)),
        E::LessOrEqual => Some(i64::from(a <= b)),
        E::And => Some(i64::from(a != 0 && b != 0)),
        E::Or => Some(i64::from(a != 0 || b != 0)),
        E::Xor => Some(i64::from((a != 0) != (b != 0))),
        // The sign of the divisor (Python's %, ONNX Mod fmod=0).
        E::Mod => a.checked_rem_euclid(b).map(|r| if r != 0 && b < 0 { r + b } else { r }),
        E::Fmod => a.checked_rem(b),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn i64s(dims: &[usize], v: &[i64]) -> HostTensor {
        HostTensor::from_i64(dims.to_vec(), v.to_vec()).unwrap()
    }

    #[test]
    fn transposes_of_small_values_fold() {
        let shuffle = |first: Vec<usize>, reshape: Option<Vec<i64>>, second: Vec<usize>| LayerKind::Shuffle(crate::ir::layer::ShuffleParams { first_transpose: first, reshape, second_transpose: second, zero_is_placeholder: false });
        let x = i64s(&[2, 3], &[0, 1, 2, 3, 4, 5]);
        let t = fold(&shuffle(vec![1, 0], None, vec![]), &[Some(&x)], DataType::I64, &Shape::fixed(&[3, 2]));
        assert_eq!(t, Some(i64s(&[3, 2], &[0, 3, 1, 4, 2, 5])));
        // F.pad's pairs: [2, 4] → transpose → [4, 2] → reshape [8]; then a second transpose.
        let pads = i64s(&[2, 4], &[0, 1, 2, 3, 10, 11, 12, 13]);
        let flat = fold(&shuffle(vec![1, 0], Some(vec![8]), vec![]), &[Some(&pads)], DataType::I64, &Shape::fixed(&[8]));
        assert_eq!(flat, Some(i64s(&[8], &[0, 10, 1, 11, 2, 12, 3, 13])));
        let both = fold(&shuffle(vec![1, 0], Some(vec![2, 4]), vec![1, 0]), &[Some(&pads)], DataType::I64, &Shape::fixed(&[4, 2]));
        assert_eq!(both, Some(i64s(&[4, 2], &[0, 2, 10, 12, 1, 3, 11, 13])));
    }

    #[test]
    fn slices_of_any_rank_fold() {
        // F.pad's [n, 2] pairs flipped along the first axis: Slice(start -1, end -∞, step -1).
        let pairs = i64s(&[3, 2], &[0, 1, 2, 3, 4, 5]);
        let (start, end, axis, step) = (i64s(&[1], &[-1]), i64s(&[1], &[-i64::MAX]), i64s(&[1], &[0]), i64s(&[1], &[-1]));
        let flipped = fold(&LayerKind::Slice, &[Some(&pairs), Some(&start), Some(&end), Some(&axis), Some(&step)], DataType::I64, &Shape::fixed(&[3, 2]));
        assert_eq!(flipped, Some(i64s(&[3, 2], &[4, 5, 2, 3, 0, 1])));
        let (start, end, axis) = (i64s(&[1], &[1]), i64s(&[1], &[2]), i64s(&[1], &[1]));
        let column = fold(&LayerKind::Slice, &[Some(&pairs), Some(&start), Some(&end), Some(&axis), None], DataType::I64, &Shape::fixed(&[3, 1]));
        assert_eq!(column, Some(i64s(&[3, 1], &[1, 3, 5])));
    }

    #[test]
    fn shape_arithmetic_folds() {
        let shape = i64s(&[3], &[2, 16, 64]);
        let idx = i64s(&[], &[-2]);
        let g = fold(
            &LayerKind::Gather { mode: GatherMode::Default { axis: 0 } },
            &[Some(&shape), Some(&idx)],
            DataType::I64,
            &Shape::fixed(&[]),
        );
        assert_eq!(g, Some(i64s(&[], &[16])));
        let four = i64s(&[1], &[4]);
        let q = fold(
            &LayerKind::Elementwise { op: ElementwiseOp::Div },
            &[Some(&shape), Some(&four)],
            DataType::I64,
            &Shape::fixed(&[3]),
        );
        assert_eq!(q, Some(i64s(&[3], &[0, 4, 16])));
        let c = fold(
            &LayerKind::Concatenation { axis: 0 },
            &[Some(&four), Some(&shape)],
            DataType::I64,
            &Shape::fixed(&[4]),
        );
        assert_eq!(c, Some(i64s(&[4], &[4, 2, 16, 64])));
        let (start, end) = (i64s(&[1], &[1]), i64s(&[1], &[i64::MAX]));
        let s = fold(
            &LayerKind::Slice,
            &[Some(&shape), Some(&start), Some(&end), None, None],
            DataType::I64,
            &Shape::fixed(&[2]),
        );
        assert_eq!(s, Some(i64s(&[2], &[16, 64])));
        let zero = i64s(&[1], &[0]);
        let d = fold(
            &LayerKind::Elementwise { op: ElementwiseOp::Div },
            &[Some(&shape), Some(&zero)],
            DataType::I64,
            &Shape::fixed(&[3]),
        );
        assert_eq!(d, None, "division by zero is left to the backend");
        let nan = HostTensor::from_f32(vec![1], vec![f32::NAN]).unwrap();
        assert_eq!(
            fold(&LayerKind::Cast { to: DataType::I64 }, &[Some(&nan)], DataType::I64, &Shape::fixed(&[1])),
            None,
            "a cast the cpu kernel saturates is left to the backend"
        );
    }

    /// `Shape → Cast(f32) → Mul(scale) → Floor → Cast(i64)`: a Resize's output size.
    #[test]
    fn float_shape_arithmetic_folds() {
        let fixed = |dims: &[usize]| Shape::fixed(dims);
        let shape = i64s(&[2], &[7, 9]);
        let cast = |to| LayerKind::Cast { to };
        let as_float = fold(&cast(DataType::F32), &[Some(&shape)], DataType::F32, &fixed(&[2])).unwrap();
        let scale = HostTensor::from_f32(vec![1], vec![1.5]).unwrap();
        let scaled = fold(&LayerKind::Elementwise { op: ElementwiseOp::Prod }, &[Some(&as_float), Some(&scale)], DataType::F32, &fixed(&[2])).unwrap();
        assert_eq!(scaled.as_f32(), Some(&[10.5f32, 13.5][..]));
        let floor = fold(&LayerKind::Unary { op: UnaryOp::Floor }, &[Some(&scaled)], DataType::F32, &fixed(&[2])).unwrap();
        let size = fold(&cast(DataType::I64), &[Some(&floor)], DataType::I64, &fixed(&[2]));
        assert_eq!(size, Some(i64s(&[2], &[10, 13])));
        let less = fold(&LayerKind::Elementwise { op: ElementwiseOp::Less }, &[Some(&scaled), Some(&scale)], DataType::Bool, &fixed(&[2]));
        assert_eq!(less.map(|t| t.data().clone()), Some(TensorData::Bool(vec![false, false])));
        // Not exact in f64 then rounded: left to the backend.
        let pow = fold(&LayerKind::Elementwise { op: ElementwiseOp::Pow }, &[Some(&scaled), Some(&scale)], DataType::F32, &fixed(&[2]));
        assert_eq!(pow, None);
    }

    /// A causal mask from shapes: `Range` (lowered to a running sum) → `Less` over [3,1] and
    /// [1,3] → `Where(-inf, 0)` → `Expand` to the batch.
    #[test]
    fn masks_built_from_shapes_fold_with_broadcasting() {
        let ones = i64s(&[3], &[1, 1, 1]);
        let axis = i64s(&[], &[0]);
        let cumsum = |exclusive, reverse| LayerKind::CumulativeSum { exclusive, reverse };
        let positions = fold(&cumsum(true, false), &[Some(&ones), Some(&axis)], DataType::I64, &Shape::fixed(&[3])).unwrap();
        assert_eq!(positions, i64s(&[3], &[0, 1, 2]));
        let reversed = fold(&cumsum(false, true), &[Some(&ones), Some(&axis)], DataType::I64, &Shape::fixed(&[3])).unwrap();
        assert_eq!(reversed, i64s(&[3], &[3, 2, 1]));
        let (rows, cols) = (positions.clone().reshaped(vec![3, 1]).unwrap(), positions.reshaped(vec![1, 3]).unwrap());
        let less = fold(&LayerKind::Elementwise { op: ElementwiseOp::Less }, &[Some(&rows), Some(&cols)], DataType::Bool, &Shape::fixed(&[3, 3])).unwrap();
        assert_eq!(less.data(), &TensorData::Bool(vec![false, true, true, false, false, true, false, false, false]));
        let (neg_inf, zero) = (HostTensor::from_f32(vec![], vec![f32::NEG_INFINITY]).unwrap(), HostTensor::from_f32(vec![], vec![0.0]).unwrap());
        let mask = fold(&LayerKind::Select, &[Some(&less), Some(&neg_inf), Some(&zero)], DataType::F32, &Shape::fixed(&[3, 3])).unwrap();
        assert_eq!(mask.as_f32().unwrap()[..3], [0.0, f32::NEG_INFINITY, f32::NEG_INFINITY]);
        let batch = i64s(&[3], &[2, 3, 3]);
        let expanded = fold(&LayerKind::Expand, &[Some(&mask), Some(&batch)], DataType::F32, &Shape::fixed(&[2, 3, 3])).unwrap();
        assert_eq!(expanded.as_f32().unwrap()[9..12], [0.0, f32::NEG_INFINITY, f32::NEG_INFINITY]);
    }

    /// What `evaluates` promises, `fold` does on known inputs of those types and ranks.
    #[test]
    fn evaluates_agrees_with_fold() {
        let v = i64s(&[3], &[4, 5, 6]);
        let f = HostTensor::from_f32(vec![3], vec![4.0, 5.0, 6.0]).unwrap();
        let idx = i64s(&[1], &[1]);
        let cases: Vec<(LayerKind, Vec<&HostTensor>, DataType, usize)> = vec![
            (LayerKind::Elementwise { op: ElementwiseOp::Sum }, vec![&f, &f], DataType::F32, 3),
            (LayerKind::Elementwise { op: ElementwiseOp::Mod }, vec![&v, &v], DataType::I64, 3),
            (LayerKind::Unary { op: UnaryOp::Ceil }, vec![&f], DataType::F32, 3),
            (LayerKind::Cast { to: DataType::I32 }, vec![&v], DataType::I32, 3),
            (LayerKind::Cast { to: DataType::F16 }, vec![&v], DataType::F16, 3),
            (LayerKind::Gather { mode: GatherMode::Default { axis: 0 } }, vec![&f, &idx], DataType::F32, 1),
            (LayerKind::Concatenation { axis: 0 }, vec![&v, &idx], DataType::I64, 4),
        ];
        for (kind, inputs, out_dtype, out_len) in cases {
            let types: Vec<Option<(DataType, usize)>> = inputs.iter().map(|t| Some((t.dtype(), t.shape().len()))).collect();
            assert!(evaluates(&kind, &types, out_dtype, Some(out_len)), "{kind:?}");
            let known: Vec<Option<&HostTensor>> = inputs.into_iter().map(Some).collect();
            assert!(fold(&kind, &known, out_dtype, &Shape::fixed(&[out_len])).is_some(), "{kind:?}");
        }
        let unknown_len = evaluates(&LayerKind::Identity, &[Some((DataType::I64, 1))], DataType::I64, None);
        assert!(unknown_len, "a size known only at run time is decided then");
        let large = evaluates(&LayerKind::Identity, &[Some((DataType::I64, 1))], DataType::I64, Some(MAX_ELEMENTS + 1));
        assert!(!large, "a tensor known to be large is no shape");
        assert!(!evaluates(&LayerKind::Elementwise { op: ElementwiseOp::Pow }, &[Some((DataType::F32, 1)); 2], DataType::F32, Some(1)));
    }
}

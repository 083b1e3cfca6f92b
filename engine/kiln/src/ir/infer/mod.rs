//! Shape and type inference: one function for build time (symbolic dims, values known
//! only for constants) and run time (every dim fixed, every input value known).
//!
//! Backends call [`infer_layer`] with concrete facts to size their outputs, so the rules
//! here are the single source of truth for every layer's output shape and type.

mod control;
pub mod network_shapes;
mod einsum;
mod fused;
mod one_hot;
mod quantized;
mod sampling;
mod signal;
mod spatial;
mod movement;
mod text;
pub(crate) mod values;

pub use einsum::EinsumSpec;
pub use values::evaluates as evaluates_on_host;
pub use signal::{col2im_blocks, dft_axis, dft_length, dft_output_len};
pub use spatial::window_output;
pub use movement::{resolve_reshape, resolve_slice, static_reshape, SliceAxis};

use super::dtype::DataType;
use super::layer::{ActivationKind, ElementwiseOp, LayerKind, MatrixOp, UnaryOp, WeightsId};
use super::shape::{Dim, Shape, SymInt};
use super::tensor::HostTensor;

/// What is known about an input tensor.
#[derive(Clone, Copy, Debug)]
pub struct Fact<'a> {
    pub dtype: DataType,
    pub shape: &'a Shape,
    pub value: Option<&'a HostTensor>,
    /// Element by element, for a small integer tensor whose value is not wholly known.
    pub symbolic: Option<&'a [SymInt]>,
}

impl<'a> Fact<'a> {
    pub fn new(dtype: DataType, shape: &'a Shape, value: Option<&'a HostTensor>) -> Fact<'a> {
        Fact { dtype, shape, value, symbolic: None }
    }

    /// The elements of a small 0-D or 1-D integer (or bool, as 0/1) tensor, numbers where
    /// known: from its value, else from its symbolic elements.
    pub fn elements(&self) -> Option<Vec<SymInt>> {
        if !(self.dtype.is_integer() || self.dtype == DataType::Bool) || self.shape.rank() > 1 {
            return None;
        }
        match (self.value, self.symbolic) {
            (Some(v), _) if v.len() <= values::MAX_ELEMENTS => {
                Some(values::small_integers(v)?.into_iter().map(SymInt::Known).collect())
            }
            (None, Some(s)) => Some(s.to_vec()),
            _ => None,
        }
    }
}

/// What is known about an output tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct OutFact {
    pub dtype: DataType,
    pub shape: Shape,
    /// The value when it is computable from known inputs without running a kernel.
    pub value: Option<HostTensor>,
    /// The elements of a small integer tensor whose value is not wholly known (see
    /// [`SymInt`]); `None` where `value` is known or nothing is.
    pub symbolic: Option<Vec<SymInt>>,
}

impl OutFact {
    pub fn new(dtype: DataType, shape: Shape) -> OutFact {
        OutFact { dtype, shape, value: None, symbolic: None }
    }

    pub fn with_value(dtype: DataType, shape: Shape, value: Option<HostTensor>) -> OutFact {
        OutFact { dtype, shape, value, symbolic: None }
    }
}

/// A broken rule; `input` is the slot of the offending input, when one is to blame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InferError {
    pub input: Option<usize>,
    pub rule: String,
}

pub(crate) type InferResult<T> = Result<T, InferError>;

pub(crate) fn rule<T>(input: Option<usize>, rule: impl Into<String>) -> InferResult<T> {
    Err(InferError { input, rule: rule.into() })
}

/// Looks up weights blobs for Constant layers.
pub type WeightsLookup<'a> = dyn Fn(WeightsId) -> Option<&'a HostTensor> + 'a;

/// Infers the outputs of one layer from what is known of its inputs; a single output of
/// small integer shape arithmetic on known inputs gets its value too.
pub fn infer_layer(kind: &LayerKind, inputs: &[Option<Fact>], weights: &WeightsLookup<'_>) -> InferResult<Vec<OutFact>> {
    let mut outs = infer_kind(kind, inputs, weights)?;
    if let [out] = outs.as_mut_slice() {
        let known: Option<Vec<Option<&HostTensor>>> =
            inputs.iter().map(|f| f.as_ref().map_or(Some(None), |f| f.value.map(Some))).collect();
        if let (None, Some(known)) = (&out.value, known) {
            out.value = values::fold(kind, &known, out.dtype, &out.shape);
        }
        if out.value.is_none() && out.symbolic.is_none() {
            out.symbolic = values::fold_symbolic(kind, inputs, out.dtype, &out.shape);
        }
        // Elements that all turned out to be numbers are the value.
        let numbers = out.symbolic.as_ref().and_then(|s| s.iter().map(SymInt::known).collect::<Option<Vec<i64>>>());
        if let Some(value) = numbers.and_then(|n| values::integer_tensor(out.dtype, &out.shape, n)) {
            out.value = Some(value);
            out.symbolic = None;
        }
    }
    Ok(outs)
}

/// [`infer_layer`] without evaluating values: the output types and shapes only, for a caller
/// that computes every layer with its own kernel (the cpu reference) and would discard them.
pub fn infer_layer_types(kind: &LayerKind, inputs: &[Option<Fact>], weights: &WeightsLookup<'_>) -> InferResult<Vec<OutFact>> {
    infer_kind(kind, inputs, weights)
}

fn infer_kind(
    kind: &LayerKind,
    inputs: &[Option<Fact>],
    weights: &WeightsLookup<'_>,
) -> InferResult<Vec<OutFact>> {
    let ins = Inputs(inputs);
    use LayerKind as K;
    match kind {
        K::Constant { weights: id } => {
            ins.arity(0, 0)?;
            let Some(w) = weights(*id) else {
                return rule(None, format!("weights blob #{} does not exist", id.0));
            };
            Ok(vec![OutFact::with_value(w.dtype(), Shape::fixed(w.shape()), Some(w.clone()))])
        }
        K::Identity => {
            ins.arity(1, 1)?;
            let x = ins.req(0)?;
            Ok(vec![OutFact { dtype: x.dtype, shape: x.shape.clone(), value: x.value.cloned(), symbolic: x.symbolic.map(<[SymInt]>::to_vec) }])
        }
        K::Cast { to } => {
            ins.arity(1, 1)?;
            let from = ins.req(0)?.dtype;
            if (from.is_string() || to.is_string()) && from != *to {
                return rule(Some(0), format!("Cast between {from} and {to} is not supported"));
            }
            Ok(vec![OutFact::new(*to, ins.req(0)?.shape.clone())])
        }
        K::CastNarrow { to, .. } => {
            ins.arity(1, 1)?;
            if !to.is_narrow_float() {
                return rule(None, format!("CastNarrow converts to a float8/float4 type, not {to}"));
            }
            Ok(vec![OutFact::new(*to, ins.req(0)?.shape.clone())])
        }
        K::Convolution(p) => spatial::convolution(&ins, p),
        K::Deconvolution(p) => spatial::deconvolution(&ins, p),
        K::Pooling(p) => spatial::pooling(&ins, p),
        K::MatrixMultiply { op_a, op_b } => matrix_multiply(&ins, *op_a, *op_b),
        K::Elementwise { op } => elementwise(&ins, *op),
        K::Activation { kind } => activation(&ins, kind),
        K::Unary { op } => unary(&ins, *op),
        K::SoftMax { axis } => {
            ins.arity(1, 1)?;
            let x = ins.float(0)?;
            check_axis(*axis, x.shape.rank(), Some(0))?;
            Ok(vec![OutFact::new(x.dtype, x.shape.clone())])
        }
        K::Reduce { op: _, axes, keep_dims } => {
            ins.arity(1, 2)?;
            let x = ins.req(0)?;
            let shape = match ins.get(1) {
                None => reduce_shape(x, axes, *keep_dims)?,
                Some(_) => reduce_shape_with_axes_input(&ins, x, *keep_dims)?,
            };
            Ok(vec![OutFact::new(x.dtype, shape)])
        }
        K::Normalization { axes, epsilon: _, num_groups } => {
            ins.arity(3, 3)?;
            let x = ins.float(0)?;
            for &a in axes {
                check_axis(a, x.shape.rank(), Some(0))?;
            }
            if *num_groups == 0 {
                return rule(None, "num_groups must be at least 1");
            }
            if *num_groups > 1 {
                if x.shape.rank() < 2 {
                    return rule(Some(0), "group normalization needs a channel axis 1");
                }
                if let Some(c) = x.shape.dims()[1].fixed() {
                    if c % num_groups != 0 {
                        return rule(Some(0), format!("{c} channels do not split into {num_groups} groups"));
                    }
                }
            }
            for slot in [1, 2] {
                let s = ins.req(slot)?;
                ins.same_type(0, slot)?;
                broadcasts_onto(s.shape, x.shape, slot)?;
            }
            Ok(vec![OutFact::new(x.dtype, x.shape.clone())])
        }
        K::Shuffle(p) => movement::shuffle(&ins, p),
        K::Concatenation { axis } => movement::concatenation(&ins, *axis),
        K::Slice => movement::slice(&ins),
        K::Gather { mode } => movement::gather(&ins, *mode),
        K::Scatter { mode, reduction: _ } => movement::scatter(&ins, *mode),
        K::Select => {
            ins.arity(3, 3)?;
            ins.of_type(0, DataType::Bool)?;
            ins.same_type(1, 2)?;
            let shape = ins.broadcast(&[0, 1, 2])?;
            Ok(vec![OutFact::new(ins.req(1)?.dtype, shape)])
        }
        K::Shape => {
            ins.arity(1, 1)?;
            let x = ins.req(0)?;
            let value = x.shape.as_fixed().map(|d| {
                HostTensor::from_i64(vec![d.len()], d.iter().map(|&v| v as i64).collect())
                    .expect("length matches")
            });
            let symbolic = value.is_none().then(|| x.shape.dims().iter().map(SymInt::of_dim).collect());
            Ok(vec![OutFact { dtype: DataType::I64, shape: Shape::fixed(&[x.shape.rank()]), value, symbolic }])
        }
        K::Fill { value } => movement::fill(&ins, value),
        K::Dft { inverse, onesided } => signal::dft(&ins, *inverse, *onesided),
        K::Col2Im { strides, dilations, pads } => signal::col2im(&ins, strides, dilations, pads),
        K::RoiAlign { output_size, .. } => sampling::roi_align(&ins, *output_size),
        K::Text(op) => text::infer(op, &ins),
        K::Determinant => {
            ins.arity(1, 1)?;
            let x = ins.float(0)?;
            let dims = x.shape.dims();
            let rank = dims.len();
            if rank < 2 || dims[rank - 1].differs_from(&dims[rank - 2]) {
                return rule(Some(0), format!("Det needs square matrices in the last two dims, got {}", x.shape));
            }
            Ok(vec![OutFact::new(x.dtype, Shape(dims[..rank - 2].to_vec()))])
        }
        K::Expand => movement::expand(&ins),
        K::Resize(p) => spatial::resize(&ins, p),
        K::TopK { largest: _, axis, sorted: _ } => movement::top_k(&ins, *axis),
        K::Padding { mode: _ } => movement::padding(&ins),
        K::ParametricRelu => {
            ins.arity(2, 2)?;
            let x = ins.float(0)?;
            ins.same_type(0, 1)?;
            broadcasts_onto(ins.req(1)?.shape, x.shape, 1)?;
            Ok(vec![OutFact::new(x.dtype, x.shape.clone())])
        }
        K::Quantize { axis, to } => {
            ins.arity(2, 3)?;
            let x = ins.float(0)?;
            if let Some(a) = axis {
                check_axis(*a, x.shape.rank(), Some(0))?;
            }
            Ok(vec![OutFact::new(*to, x.shape.clone())])
        }
        K::Dequantize { axis, to } => {
            ins.arity(2, 3)?;
            let x = ins.req(0)?;
            let scale = ins.float(1)?;
            if let Some(a) = axis {
                check_axis(*a, x.shape.rank(), Some(0))?;
            }
            if let Some(t) = to.filter(|t| !matches!(t, DataType::F32 | DataType::F16 | DataType::BF16 | DataType::F64)) {
                return rule(None, format!("a Dequantize writes f32, f16, bf16 or f64, not {t}"));
            }
            Ok(vec![OutFact::new(to.unwrap_or(scale.dtype), x.shape.clone())])
        }
        K::Lrn { window, .. } => {
            ins.arity(1, 1)?;
            let x = ins.float(0)?;
            if *window == 0 || x.shape.rank() < 2 {
                return rule(Some(0), "LRN needs a window of at least 1 and a channel axis 1");
            }
            Ok(vec![OutFact::new(x.dtype, x.shape.clone())])
        }
        K::NonZero => {
            ins.arity(1, 1)?;
            let x = ins.req(0)?;
            Ok(vec![OutFact::new(DataType::I64, Shape(vec![Dim::Fixed(x.shape.rank()), Dim::Unknown]))])
        }
        K::CumulativeSum { .. } | K::CumulativeProduct { .. } => {
            ins.arity(2, 2)?;
            ins.index_scalar(1)?;
            let x = ins.req(0)?;
            Ok(vec![OutFact::new(x.dtype, x.shape.clone())])
        }
        K::OneHot { axis } => one_hot::infer(*axis, &ins),
        K::Einsum { equation } => einsum::infer(equation, &ins),
        K::TripLimit { .. }
        | K::Iterator { .. }
        | K::Recurrence { .. }
        | K::LoopOutput { .. }
        | K::Condition { .. }
        | K::IfConditionalInput { .. }
        | K::IfConditionalOutput { .. } => control::boundary(kind, &ins),
        K::Assertion { .. } => {
            ins.arity(1, 1)?;
            ins.of_type(0, DataType::Bool)?;
            Ok(vec![])
        }
        K::Plugin(p) => crate::ir::plugin::infer_plugin(p, inputs),
        K::Fused(p) => fused::fused(p, &ins, weights),
        K::Quantized(p) => quantized::quantized(p, &ins, weights),
        K::Attention(p) => fused::attention(p, &ins, weights),
        K::RmsNormalization { axes, epsilon: _ } => {
            ins.arity(2, 2)?;
            let x = ins.float(0)?;
            for &a in axes {
                check_axis(a, x.shape.rank(), Some(0))?;
            }
            ins.same_type(0, 1)?;
            broadcasts_onto(ins.req(1)?.shape, x.shape, 1)?;
            Ok(vec![OutFact::new(x.dtype, x.shape.clone())])
        }
        K::GridSample(_) => sampling::grid_sample(&ins),
        K::BitCast { to } => sampling::bit_cast(&ins, *to),
        K::NonMaxSuppression { .. } => sampling::non_max_suppression(&ins),
        K::Unique { axis, sorted: _ } => sampling::unique(&ins, *axis),
        K::Reformat { from, to, channels } => {
            ins.arity(1, 1)?;
            let x = ins.req(0)?;
            let shape = from
                .logical_shape(x.shape, *channels)
                .and_then(|logical| to.physical_shape(&logical))
                .or_else(|e| rule(Some(0), e.to_string()))?;
            Ok(vec![OutFact::new(x.dtype, shape)])
        }
    }
}

/// Input slots with typed accessors that produce rule errors.
#[derive(Clone, Copy)]
pub(crate) struct Inputs<'s, 'a>(pub &'s [Option<Fact<'a>>]);

impl<'a> Inputs<'_, 'a> {
    pub fn arity(&self, min: usize, max: usize) -> InferResult<()> {
        let n = self.0.len();
        if n < min || n > max {
            let want = if min == max { format!("{min}") } else { format!("{min} to {max}") };
            return rule(None, format!("takes {want} inputs, got {n}"));
        }
        for i in 0..min {
            if self.0[i].is_none() {
                return rule(Some(i), format!("input {i} is required"));
            }
        }
        Ok(())
    }

    pub fn get(&self, i: usize) -> Option<Fact<'a>> {
        self.0.get(i).copied().flatten()
    }

    pub fn req(&self, i: usize) -> InferResult<Fact<'a>> {
        match self.get(i) {
            Some(f) => Ok(f),
            None => rule(Some(i), format!("input {i} is required")),
        }
    }

    pub fn float(&self, i: usize) -> InferResult<Fact<'a>> {
        let f = self.req(i)?;
        if !f.dtype.is_float() {
            return rule(Some(i), format!("input {i} must be a floating-point tensor, not {}", f.dtype));
        }
        Ok(f)
    }

    pub fn of_type(&self, i: usize, dtype: DataType) -> InferResult<Fact<'a>> {
        let f = self.req(i)?;
        if f.dtype != dtype {
            return rule(Some(i), format!("input {i} must be {dtype}, not {}", f.dtype));
        }
        Ok(f)
    }

    pub fn same_type(&self, a: usize, b: usize) -> InferResult<()> {
        let (fa, fb) = (self.req(a)?, self.req(b)?);
        if fa.dtype != fb.dtype {
            return rule(Some(b), format!("inputs {a} and {b} must have the same type, got {} and {}", fa.dtype, fb.dtype));
        }
        Ok(())
    }

    /// A 1-D integer tensor (shape tensors, index lists); returns its value if known.
    pub fn index_list(&self, i: usize) -> InferResult<(Fact<'a>, Option<Vec<i64>>)> {
        let f = self.req(i)?;
        if !f.dtype.is_index() || f.shape.rank() != 1 {
            return rule(Some(i), format!("input {i} must be a 1-D i32/i64 tensor, got {} {}", f.dtype, f.shape));
        }
        Ok((f, f.value.and_then(HostTensor::to_i64_vec)))
    }

    /// A scalar integer (0-D or one element); returns its value if known.
    pub fn index_scalar(&self, i: usize) -> InferResult<Option<i64>> {
        let f = self.req(i)?;
        let single = f.shape.rank() == 0 || (f.shape.rank() == 1 && f.shape.dims()[0].same_as(&Dim::Fixed(1)));
        if !f.dtype.is_index() || !single {
            return rule(Some(i), format!("input {i} must be a scalar i32/i64, got {} {}", f.dtype, f.shape));
        }
        Ok(f.value.and_then(HostTensor::to_i64_vec).and_then(|v| v.first().copied()))
    }

    /// Numpy broadcast of the given slots' shapes.
    pub fn broadcast(&self, slots: &[usize]) -> InferResult<Shape> {
        let mut shapes = Vec::with_capacity(slots.len());
        for &s in slots {
            shapes.push(self.req(s)?.shape);
        }
        broadcast_shapes(&shapes).map_err(|r| InferError { input: slots.last().copied(), rule: r })
    }
}

pub(crate) fn check_axis(axis: usize, rank: usize, input: Option<usize>) -> InferResult<()> {
    if axis >= rank {
        return rule(input, format!("axis {axis} is out of range for rank {rank}"));
    }
    Ok(())
}

/// Numpy (multidirectional) broadcasting of several shapes.
pub fn broadcast_shapes(shapes: &[&Shape]) -> Result<Shape, String> {
    let rank = shapes.iter().map(|s| s.rank()).max().unwrap_or(0);
    let mut out = Vec::with_capacity(rank);
    for i in 0..rank {
        let mut acc = Dim::Fixed(1);
        for s in shapes {
            let offset = rank - s.rank();
            if i < offset {
                continue;
            }
            acc = broadcast_dim(&acc, &s.dims()[i - offset]).ok_or_else(|| {
                let text: Vec<String> = shapes.iter().map(|s| s.text()).collect();
                format!("shapes {} do not broadcast (axis {i})", text.join(" and "))
            })?;
        }
        out.push(acc);
    }
    Ok(Shape(out))
}

/// Unidirectional broadcasting: `param` must broadcast to `target` without growing it (the
/// output has the target's shape), as ONNX PRelu's slope and normalization scale/bias.
fn broadcasts_onto(param: &Shape, target: &Shape, slot: usize) -> InferResult<()> {
    let b = broadcast_shapes(&[target, param]).map_err(|r| InferError { input: Some(slot), rule: r })?;
    if b.rank() != target.rank() || b.dims().iter().zip(target.dims()).any(|(bd, td)| bd.differs_from(td)) {
        return rule(Some(slot), format!("shape {param} must broadcast to {target} without enlarging it"));
    }
    Ok(())
}

fn broadcast_dim(a: &Dim, b: &Dim) -> Option<Dim> {
    match (a, b) {
        (Dim::Fixed(1), d) | (d, Dim::Fixed(1)) => Some(d.clone()),
        (Dim::Fixed(x), Dim::Fixed(y)) => (x == y).then(|| a.clone()),
        // A dynamic dim meeting a fixed one: the fixed length wins (or the run fails).
        (Dim::Fixed(_), _) => Some(a.clone()),
        (_, Dim::Fixed(_)) => Some(b.clone()),
        _ if a.same_as(b) => Some(a.clone()),
        _ => Some(Dim::Unknown),
    }
}

fn matrix_multiply(ins: &Inputs, op_a: MatrixOp, op_b: MatrixOp) -> InferResult<Vec<OutFact>> {
    ins.arity(2, 2)?;
    let a = ins.req(0)?;
    let b = ins.req(1)?;
    if !(a.dtype.is_float() || a.dtype.is_integer()) {
        return rule(Some(0), format!("matrix multiply needs numeric inputs, not {}", a.dtype));
    }
    ins.same_type(0, 1)?;
    // (batch dims, rows, cols): a vector operand contributes no row/col to the result.
    let split = |f: Fact, op: MatrixOp, slot: usize| -> InferResult<(Vec<Dim>, Option<Dim>, Dim)> {
        let d = f.shape.dims();
        let need = if op == MatrixOp::Vector { 1 } else { 2 };
        if d.len() < need {
            return rule(Some(slot), format!("input {slot} has rank {} but {op:?} needs at least {need}", d.len()));
        }
        let batch = d[..d.len() - need].to_vec();
        Ok(match op {
            MatrixOp::None => (batch, Some(d[d.len() - 2].clone()), d[d.len() - 1].clone()),
            MatrixOp::Transpose => (batch, Some(d[d.len() - 1].clone()), d[d.len() - 2].clone()),
            MatrixOp::Vector => (batch, None, d[d.len() - 1].clone()),
        })
    };
    // For a: (batch, M, K); for b read as (batch, N, K) by swapping its op's meaning.
    let (batch_a, m, k_a) = split(a, op_a, 0)?;
    let op_b_rows = match op_b {
        MatrixOp::None => MatrixOp::Transpose,
        MatrixOp::Transpose => MatrixOp::None,
        MatrixOp::Vector => MatrixOp::Vector,
    };
    let (batch_b, n, k_b) = split(b, op_b_rows, 1)?;
    if k_a.differs_from(&k_b) {
        return rule(Some(1), format!("inner dimensions differ: {k_a} vs {k_b} ({} × {})", a.shape, b.shape));
    }
    let mut out = broadcast_shapes(&[&Shape(batch_a), &Shape(batch_b)])
        .map_err(|r| InferError { input: Some(1), rule: format!("batch dims: {r}") })?
        .0;
    out.extend(m);
    out.extend(n);
    Ok(vec![OutFact::new(a.dtype, Shape(out))])
}

fn elementwise(ins: &Inputs, op: ElementwiseOp) -> InferResult<Vec<OutFact>> {
    ins.arity(2, 2)?;
    let a = ins.req(0)?;
    ins.same_type(0, 1)?;
    if op.is_logical() && a.dtype != DataType::Bool {
        return rule(Some(0), format!("{op:?} needs bool inputs, not {}", a.dtype));
    }
    if !op.is_logical() && a.dtype == DataType::Bool && op != ElementwiseOp::Equal {
        return rule(Some(0), format!("{op:?} is not defined on bool"));
    }
    if a.dtype.is_string() && op != ElementwiseOp::Equal {
        return rule(Some(0), format!("{op:?} is not defined on strings"));
    }
    if op.is_bitwise() && !a.dtype.is_integer() {
        return rule(Some(0), format!("{op:?} needs integer inputs, not {}", a.dtype));
    }
    let shape = ins.broadcast(&[0, 1])?;
    let dtype = if op.is_comparison() || op.is_logical() { DataType::Bool } else { a.dtype };
    Ok(vec![OutFact::new(dtype, shape)])
}

fn activation(ins: &Inputs, kind: &ActivationKind) -> InferResult<Vec<OutFact>> {
    ins.arity(1, 1)?;
    let x = ins.req(0)?;
    let numeric_ok = matches!(kind, ActivationKind::Relu | ActivationKind::Clip { .. });
    if !(x.dtype.is_float() || (numeric_ok && x.dtype.is_integer())) {
        return rule(Some(0), format!("{kind:?} is not defined on {}", x.dtype));
    }
    Ok(vec![OutFact::new(x.dtype, x.shape.clone())])
}

fn unary(ins: &Inputs, op: UnaryOp) -> InferResult<Vec<OutFact>> {
    ins.arity(1, 1)?;
    let x = ins.req(0)?;
    let ok = match op {
        UnaryOp::Not => x.dtype == DataType::Bool || x.dtype.is_integer(),
        UnaryOp::Abs | UnaryOp::Neg | UnaryOp::Sign => x.dtype != DataType::Bool,
        _ => x.dtype.is_float(),
    };
    if !ok {
        return rule(Some(0), format!("{op:?} is not defined on {}", x.dtype));
    }
    let dtype = match op {
        UnaryOp::IsNan | UnaryOp::IsInf { .. } => DataType::Bool,
        _ => x.dtype,
    };
    Ok(vec![OutFact::new(dtype, x.shape.clone())])
}

/// Reduce with an axes tensor input: exact when its value is known; otherwise every dim
/// that may be reduced is unknown, and without `keep_dims` the rank follows from the
/// number of axes.
fn reduce_shape_with_axes_input(ins: &Inputs, x: Fact, keep_dims: bool) -> InferResult<Shape> {
    let rank = x.shape.rank();
    let (list, values) = ins.index_list(1)?;
    if let Some(values) = values {
        let mut axes = Vec::with_capacity(values.len());
        for v in values {
            match super::shape::normalize_axis(v, rank) {
                Some(a) => axes.push(a),
                None => return rule(Some(1), format!("axis {v} is out of range for rank {rank}")),
            }
        }
        if axes.is_empty() {
            axes = (0..rank).collect();
        }
        return reduce_shape(x, &axes, keep_dims);
    }
    let count = list.shape.dims()[0].fixed();
    let dims = match (keep_dims, count) {
        (true, _) => {
            x.shape.dims().iter().map(|d| if d.fixed() == Some(1) { d.clone() } else { Dim::Unknown }).collect()
        }
        (false, Some(0)) => Vec::new(),
        (false, Some(k)) if k <= rank => vec![Dim::Unknown; rank - k],
        (false, Some(k)) => return rule(Some(1), format!("{k} axes cannot be reduced from rank {rank}")),
        (false, None) => return rule(Some(1), "without keep_dims the number of axes must be known"),
    };
    Ok(Shape(dims))
}

fn reduce_shape(x: Fact, axes: &[usize], keep_dims: bool) -> InferResult<Shape> {
    let rank = x.shape.rank();
    let mut seen = vec![false; rank];
    for &a in axes {
        check_axis(a, rank, Some(0))?;
        if std::mem::replace(&mut seen[a], true) {
            return rule(None, format!("axis {a} is listed twice"));
        }
    }
    let dims = x
        .shape
        .dims()
        .iter()
        .enumerate()
        .filter_map(|(i, d)| match (seen[i], keep_dims) {
            (false, _) => Some(d.clone()),
            (true, true) => Some(Dim::Fixed(1)),
            (true, false) => None,
        })
        .collect();
    Ok(Shape(dims))
}

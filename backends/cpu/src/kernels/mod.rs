//! The kernels, one function per layer kind, and the dispatch from a layer to its kernel.
//!
//! A kernel receives its input tensors and the output facts that shape inference computed
//! for them, and returns the output tensors or a reason for failing.

mod alt;
mod conv;
mod einsum;
mod elementwise;
mod fused;
mod indexing;
mod matmul;
mod misc;
mod norm;
mod one_hot;
mod plugin;
mod pool;
mod quantized;
mod reduce;
mod resize;
mod roi;
mod sampling;
mod movement;
mod signal;
mod sparse;
mod text;
mod unary;

use crate::element::Elem;
use kiln::ir::infer::OutFact;
use kiln::{HostTensor, LayerKind, TensorData};

/// Which implementation of a layer kind with several (a tactic): convolution im2col+GEMM
/// or direct loops, matrix multiply sgemm, blocked loops or 2:4 sparse weights. Other kinds
/// have one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Variant {
    #[default]
    Primary,
    Alternate,
    Sparse,
}

/// Runs the kernel of `kind` on `inputs` (absent optional slots are `None`), with the
/// implementation `variant` where the kind has several.
pub fn run_with(
    kind: &LayerKind,
    inputs: &[Option<&HostTensor>],
    outs: &[OutFact],
    variant: Variant,
) -> Result<Vec<HostTensor>, kiln::KernelError> {
    Ok(run(kind, inputs, outs, variant)?)
}

/// [`run_with`] with the kernels' own messages, for kernels built from other kernels.
pub(crate) fn run(
    kind: &LayerKind,
    inputs: &[Option<&HostTensor>],
    outs: &[OutFact],
    variant: Variant,
) -> Result<Vec<HostTensor>, String> {
    use LayerKind as K;
    let ins = Inputs(inputs);
    let shape = || first_shape(outs);
    let one = |data: TensorData| -> Result<Vec<HostTensor>, String> { Ok(vec![tensor(first_shape(outs)?, data)?]) };
    let reads_strings = inputs.iter().flatten().any(|t| t.dtype().is_string());
    if reads_strings && !matches!(kind, K::Text(_) | K::Identity) {
        return text::run_on_string_ids(kind, inputs, outs, variant);
    }
    match kind {
        K::Text(op) => text::text(op, &ins, outs),
        K::Constant { .. } => Err("Constant layers are served by the executor from the network's weights".into()),
        K::Identity => Ok(vec![ins.req(0)?.clone()]),
        K::Cast { to } => one(misc::cast(ins.req(0)?, *to)?),
        K::CastNarrow { to, saturate, e8m0_rounding } => {
            one(misc::cast_narrow(ins.req(0)?, *to, *saturate, *e8m0_rounding)?)
        }
        K::Reformat { from, to, channels } => {
            Ok(vec![kiln::ir::format::reformat(ins.req(0)?, *from, *to, *channels).map_err(|e| e.to_string())?])
        }
        K::Convolution(p) => one(conv::convolution(p, ins.req(0)?, ins.req(1)?, ins.opt(2), &shape()?, variant)?),
        K::Deconvolution(p) => one(conv::deconvolution(p, ins.req(0)?, ins.req(1)?, ins.opt(2), &shape()?)?),
        K::Pooling(p) => one(pool::pooling(p, ins.req(0)?, &shape()?)?),
        K::MatrixMultiply { op_a, op_b } => {
            one(matmul::matrix_multiply(ins.req(0)?, *op_a, ins.req(1)?, *op_b, &shape()?, variant)?)
        }
        K::Elementwise { op } => one(elementwise::elementwise(*op, ins.req(0)?, ins.req(1)?, &shape()?)?),
        K::Activation { kind } => one(unary::activation(kind, ins.req(0)?)?),
        K::Unary { op } => one(unary::unary(*op, ins.req(0)?)?),
        K::SoftMax { axis } => one(norm::softmax(ins.req(0)?, *axis)?),
        K::Reduce { op, axes, keep_dims: _ } => match ins.opt(1) {
            None => one(reduce::reduce(*op, ins.req(0)?, axes)?),
            Some(run_time_axes) => {
                let x = ins.req(0)?;
                one(reduce::reduce(*op, x, &reduce::axes_from_tensor(run_time_axes, x.shape().len())?)?)
            }
        },
        K::Normalization { axes, epsilon, num_groups } => {
            one(norm::normalization(ins.req(0)?, ins.req(1)?, ins.req(2)?, axes, *epsilon, *num_groups)?)
        }
        K::Shuffle(p) => one(movement::shuffle(p, ins.req(0)?, ins.opt(1))?),
        K::Concatenation { axis } => {
            let parts = (0..inputs.len()).map(|i| ins.req(i)).collect::<Result<Vec<_>, _>>()?;
            one(movement::concatenation(&parts, *axis)?)
        }
        K::Slice => one(movement::slice(ins.req(0)?, ins.req(1)?, ins.req(2)?, ins.opt(3), ins.opt(4))?),
        K::Gather { mode } => one(indexing::gather(*mode, ins.req(0)?, ins.req(1)?, &shape()?)?),
        K::Scatter { mode, reduction } => {
            one(indexing::scatter(*mode, *reduction, ins.req(0)?, ins.req(1)?, ins.req(2)?)?)
        }
        K::Select => one(elementwise::select(ins.req(0)?, ins.req(1)?, ins.req(2)?, &shape()?)?),
        K::Shape => one(movement::shape_of(ins.req(0)?)),
        K::Fill { value } => one(movement::fill(value, &shape()?)?),
        K::Expand => one(movement::expand(ins.req(0)?, &shape()?)?),
        K::Resize(p) => one(resize::resize(p, ins.req(0)?, ins.opt(1), ins.opt(2), ins.opt(3), &shape()?)?),
        K::TopK { largest, axis, sorted: _ } => {
            let (values, indices) = misc::top_k(ins.req(0)?, *axis, *largest, &shape()?)?;
            let s = shape()?;
            Ok(vec![tensor(s.clone(), values)?, tensor(s, indices)?])
        }
        K::Padding { mode } => one(movement::padding(*mode, ins.req(0)?, ins.req(1)?, ins.opt(2), &shape()?)?),
        K::ParametricRelu => one(elementwise::parametric_relu(ins.req(0)?, ins.req(1)?)?),
        K::Quantize { axis, to } => one(misc::quantize(ins.req(0)?, ins.req(1)?, ins.opt(2), *axis, *to)?),
        K::Dequantize { axis, to } => {
            let values = misc::dequantize(ins.req(0)?, ins.req(1)?, ins.opt(2), *axis)?;
            match to {
                // In the scale's type, then rounded as a Cast rounds: the unfused graph's values.
                Some(t) if *t != values.dtype() => one(misc::cast(&tensor(shape()?, values)?, *t)?),
                _ => one(values),
            }
        }
        K::Lrn { window, alpha, beta, k } => one(norm::lrn(ins.req(0)?, *window, *alpha, *beta, *k)?),
        K::NonZero => Ok(vec![kiln::plan::dynamic::non_zero(ins.req(0)?)?]),
        K::CumulativeSum { exclusive, reverse } => {
            one(reduce::cumulative_sum(ins.req(0)?, ins.req(1)?, *exclusive, *reverse)?)
        }
        K::CumulativeProduct { exclusive, reverse } => {
            one(reduce::cumulative_product(ins.req(0)?, ins.req(1)?, *exclusive, *reverse)?)
        }
        K::Assertion { message } => kiln::plan::dynamic::assertion(ins.req(0)?, message).map(|()| vec![]),
        K::Einsum { equation } => {
            let operands = (0..inputs.len()).map(|i| ins.req(i)).collect::<Result<Vec<_>, _>>()?;
            one(einsum::einsum(equation, &operands, &shape()?)?)
        }
        K::Fused(p) => Ok(vec![fused::fused(p, inputs, variant)?]),
        K::Quantized(p) => Ok(vec![quantized::quantized(p, inputs)?]),
        K::Attention(p) => Ok(vec![fused::attention(p, inputs)?]),
        K::RmsNormalization { axes, epsilon } => Ok(vec![fused::rms_normalization(inputs, axes, *epsilon)?]),
        K::GridSample(p) => one(sampling::grid_sample(p, ins.req(0)?, ins.req(1)?, &shape()?)?),
        K::BitCast { to } => one(sampling::bit_cast(ins.req(0)?, *to)?),
        K::NonMaxSuppression { center_point_box } => Ok(vec![kiln::plan::nms::non_max_suppression(
            ins.req(0)?,
            ins.req(1)?,
            ins.opt(2),
            ins.opt(3),
            ins.opt(4),
            *center_point_box,
        )?]),
        K::Plugin(p) => {
            let ins = inputs.iter().enumerate().map(|(i, x)| x.ok_or(format!("plugin input {i} is missing"))).collect::<Result<Vec<_>, _>>()?;
            plugin::plugin(p, &ins, outs)
        }
        K::Unique { axis, sorted } => Ok(kiln::plan::dynamic::unique(ins.req(0)?, *axis, *sorted)?),
        K::Dft { inverse, onesided } => {
            let axis = int_scalar(ins.req(1)?, "DFT axis")?;
            let length = ins.opt(2).map(|t| int_scalar(t, "DFT length")).transpose()?;
            one(signal::dft(ins.req(0)?, length, axis, *inverse, *onesided, &shape()?)?)
        }
        K::Col2Im { strides, dilations, pads } => {
            let block = int_values(ins.req(2)?, "Col2Im block_shape")?;
            one(signal::col2im(ins.req(0)?, &block, strides, dilations, pads, &shape()?)?)
        }
        K::Determinant => one(signal::determinant(ins.req(0)?)?),
        K::RoiAlign { .. } => {
            let spec = kiln::plan::roi::RoiAlignSpec::of(kind)?;
            one(roi::roi_align(ins.req(0)?, ins.req(1)?, ins.req(2)?, &spec)?)
        }
        K::OneHot { axis } => one(one_hot::one_hot(ins.req(0)?, ins.req(1)?, ins.req(2)?, *axis, &shape()?)?),
        K::TripLimit { .. }
        | K::Iterator { .. }
        | K::Recurrence { .. }
        | K::LoopOutput { .. }
        | K::Condition { .. }
        | K::IfConditionalInput { .. }
        | K::IfConditionalOutput { .. } => Err(format!("{} layers are not supported by the cpu backend", kind.type_name())),
    }
}

/// The input slots of a layer.
struct Inputs<'s, 'a>(&'s [Option<&'a HostTensor>]);

impl<'a> Inputs<'_, 'a> {
    fn req(&self, i: usize) -> Result<&'a HostTensor, String> {
        self.opt(i).ok_or_else(|| format!("input {i} is required"))
    }

    fn opt(&self, i: usize) -> Option<&'a HostTensor> {
        self.0.get(i).copied().flatten()
    }
}

/// The concrete shape of the first output.
fn first_shape(outs: &[OutFact]) -> Result<Vec<usize>, String> {
    let fact = outs.first().ok_or("shape inference gave no output")?;
    fact.shape.as_fixed().ok_or_else(|| format!("output shape {} is not concrete", fact.shape))
}

fn tensor(shape: Vec<usize>, data: TensorData) -> Result<HostTensor, String> {
    HostTensor::new(shape, data).map_err(|e| e.to_string())
}

/// The elements of `t` as `T`, or an error when `t` holds another type.
fn typed<'a, T: Elem>(t: &'a HostTensor, what: &str) -> Result<&'a [T], String> {
    T::view(t.data()).ok_or_else(|| format!("{what} must be {}, not {}", T::DTYPE, t.dtype()))
}

/// The values of an integer parameter tensor (shapes, indices, pads).
fn int_values(t: &HostTensor, what: &str) -> Result<Vec<i64>, String> {
    t.to_i64_vec().ok_or_else(|| format!("{what} must be an integer tensor, not {}", t.dtype()))
}

/// One integer from a 0-D or one-element tensor.
fn int_scalar(t: &HostTensor, what: &str) -> Result<i64, String> {
    match int_values(t, what)?.as_slice() {
        [v] => Ok(*v),
        other => Err(format!("{what} must hold one element, got {}", other.len())),
    }
}

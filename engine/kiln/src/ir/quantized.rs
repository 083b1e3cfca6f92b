//! The integer layer the optimizer makes from explicit quantization (seeds §6.5): a
//! convolution or matrix product whose inputs come from DequantizeLinear, with the bias, a
//! ReLU and the QuantizeLinear after it folded in ([`QuantizedParams`]).
//!
//! Its arithmetic is defined as integer hardware does it, not as the Q/DQ graph's float
//! emulation: the products are summed exactly, then scaled once per output channel. That is
//! what onnxruntime's QLinearConv / QLinearMatMul compute, what INT8 tensor cores compute, and
//! what the cpu backend computes as the oracle of both.

use super::layer::{ConvolutionParams, LayerKind, MatrixOp};
use super::dtype::DataType;
use serde::{Deserialize, Serialize};

/// `[x, w, bias?, x_scale, x_zero?, w_scale, w_zero?, y_scale?, y_zero?] -> [y]`.
///
/// - `x`, `w`: 8-bit integers (`x_scale`, `x_zero` one element; `w_scale`, `w_zero` one
///   element or one per output channel: `w`'s axis 0 for a convolution, the N axis of a
///   matrix product's B).
/// - `acc = Σ (x − x_zero)·(w − w_zero)`, exact; an int32 `bias` (quantized with scale
///   `x_scale·w_scale`, as ONNX QLinearConv's) is added to it.
/// - `output` a quantized type (`y_scale` present): `y = saturate(round_even(acc·m[k]) +
///   y_zero)` with `m[k] = x_scale·w_scale[k] / y_scale` in f32, the form integer kernels
///   requantize with; a float `bias` instead makes it `round_even((acc·x_scale·w_scale[k] +
///   bias) / y_scale) + y_zero`. `relu` clamps below at `y_zero`.
/// - `output` f32 (no `y_scale`): `acc·(x_scale·w_scale[k]) + bias`, then `relu`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuantizedParams {
    pub anchor: QuantizedAnchor,
    pub relu: bool,
    pub output: DataType,
}

/// What a [`QuantizedParams`] layer computes on the integers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum QuantizedAnchor {
    Convolution(ConvolutionParams),
    MatrixMultiply { op_a: MatrixOp, op_b: MatrixOp },
}

impl QuantizedParams {
    pub const X: usize = 0;
    pub const W: usize = 1;
    pub const BIAS: usize = 2;
    pub const X_SCALE: usize = 3;
    pub const X_ZERO: usize = 4;
    pub const W_SCALE: usize = 5;
    pub const W_ZERO: usize = 6;
    pub const Y_SCALE: usize = 7;
    pub const Y_ZERO: usize = 8;
    /// Input slots the layer has (absent ones are `None`).
    pub const SLOTS: usize = 9;

    /// Whether the output is requantized (an integer type) rather than float.
    pub fn quantized_output(&self) -> bool {
        self.output.is_integer()
    }

    /// The f32 factor each output channel's `f32(acc)` is multiplied by, in the f32
    /// operations every backend uses: `x_scale·w_scale[k]`, divided by `y_scale` where the
    /// output is quantized and the bias is not float (the multiplier integer kernels fold; a
    /// float bias is added before the division instead). One factor per weight scale.
    pub fn channel_scales(&self, x_scale: f32, w_scale: &[f32], y_scale: Option<f32>, float_bias: bool) -> Vec<f32> {
        let fold = self.quantized_output() && !float_bias;
        w_scale
            .iter()
            .map(|&w| match (fold, y_scale) {
                (true, Some(y)) => x_scale * w / y,
                _ => x_scale * w,
            })
            .collect()
    }
}

impl QuantizedAnchor {
    /// The float layer the integer one stands for (bias not included).
    pub fn kind(&self) -> LayerKind {
        match self {
            QuantizedAnchor::Convolution(p) => LayerKind::Convolution(p.clone()),
            QuantizedAnchor::MatrixMultiply { op_a, op_b } => LayerKind::MatrixMultiply { op_a: *op_a, op_b: *op_b },
        }
    }

    /// The axis of the output that indexes per-channel weight scales, for an output of `rank`.
    pub fn output_channel_axis(&self, rank: usize) -> usize {
        match self {
            QuantizedAnchor::Convolution(_) => 1,
            QuantizedAnchor::MatrixMultiply { .. } => rank.saturating_sub(1),
        }
    }

    /// The axis of `w` (of `rank`) along which per-channel scales run.
    pub fn weight_channel_axis(&self, rank: usize) -> usize {
        match self {
            QuantizedAnchor::Convolution(_) => 0,
            QuantizedAnchor::MatrixMultiply { op_b: MatrixOp::Transpose, .. } => rank.saturating_sub(2),
            QuantizedAnchor::MatrixMultiply { .. } => rank.saturating_sub(1),
        }
    }
}

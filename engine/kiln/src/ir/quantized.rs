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

/// `[x, w, bias?, x_scale, x_zero?, w_scale, w_zero?, y_scale?, y_zero?, residual?,
/// residual_scale?, residual_zero?, then_scale?, then_zero?, join?, join_scale?, join_zero?,
/// lookup?] -> [y]`.
///
/// - `x`, `w`: 8-bit integers, or both float8 e4m3fn (FP8: no zero points, a float output,
///   no int32 bias) (`x_scale`, `x_zero` one element; `w_scale`, `w_zero` one element or one
///   per output channel: `w`'s axis 0 for a convolution, the N axis of a matrix product's B).
/// - `acc = Σ (x − x_zero)·(w − w_zero)`, exact (FP8 products are exact too; hardware sums
///   them in f32, so FP8 results agree to f32 summation, not bit for bit); an int32 `bias`
///   (quantized with scale `x_scale·w_scale`, as ONNX QLinearConv's) is added to it.
/// - `output` a quantized type (`y_scale` present): `y = saturate(round_even(acc·m[k]) +
///   y_zero)` with `m[k] = x_scale·w_scale[k] / y_scale[k]` in f32, the form integer kernels
///   requantize with (`y_scale` one value, or one per output channel where the layer is
///   sibling products side by side and nothing else divides by it); a float `bias` instead
///   makes it `round_even((acc·x_scale·w_scale[k] + bias) / y_scale) + y_zero`. `relu` clamps below at `y_zero`.
/// - `output` a float (no `y_scale`): `acc·(x_scale·w_scale[k]) + bias`, then `relu`, in f32;
///   an f16 or bf16 output is that value rounded once (an FP16 build's Cast, folded in).
/// - `residual` (a skip connection's Add, folded in; the output's shape): added in f32 after
///   the bias and before the ReLU and the division by `y_scale` (which is then not folded
///   into `m[k]`), as the Add it stands for. A float residual is read as f32; an 8-bit one is
///   dequantized first, `f32(residual − residual_zero)·residual_scale` (one scale and zero).
/// - `output` i32: the sums `acc` themselves, wrapping as int32 does (ONNX ConvInteger and
///   MatMulInteger): 8-bit integer operands, no scales, bias or ReLU.
/// - `then` ([`Requantization`]): the levels `y` are requantized once more, as the layers
///   after them compute it, and the layer's output is that second quantization.
/// - `join` (with `then` only: a skip connection's `DQ(y) + DQ(join) → Add`, folded in): an
///   8-bit tensor of the output's shape, dequantized with its one scale and zero point and
///   added to the dequantized levels before the second quantization's ReLU.
/// - `lookup` (a `[channels, 256]` 8-bit table of the type [`QuantizedParams::lookup`] names;
///   not with `then`): the output is `lookup[k][byte(y)]`, the level's byte looked up in its
///   output channel's row. It stands for a pointwise island after the levels whose result
///   depends on the level and the channel alone (a bias Add, a GELU between two quantizations),
///   which the builder evaluated at every (channel, level) ([`crate::passes`]' level tables).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuantizedParams {
    pub anchor: QuantizedAnchor,
    pub relu: bool,
    /// The type of the layer's own result: its levels, its float value or its sums.
    pub output: DataType,
    pub then: Option<Requantization>,
    /// The type of the `lookup` table the levels are mapped through, where the layer has one.
    pub lookup: Option<DataType>,
}

/// A second quantization of a requantized layer's levels. onnxruntime's `quantize_static`
/// quantizes every convolution's and product's output, then dequantizes it again for the
/// ReLU after it (`Q → DQ → [ReLU →] Q`); folded into the layer, the 8-bit tensor between is
/// never written. `u = f32(y − y_zero)·y_scale`, plus `f32(join − join_zero)·join_scale`
/// where the layer has a join (a skip connection: `DQ(y) + DQ(join) → Add`), `max(u, 0)` with
/// `relu`, then `saturate(round_even(u / then_scale) + then_zero)` into `to`: the f32
/// operations of the DequantizeLinear(s), Add, Relu and QuantizeLinear it stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Requantization {
    pub relu: bool,
    pub to: DataType,
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
    pub const RESIDUAL: usize = 9;
    pub const RESIDUAL_SCALE: usize = 10;
    pub const RESIDUAL_ZERO: usize = 11;
    pub const THEN_SCALE: usize = 12;
    pub const THEN_ZERO: usize = 13;
    pub const JOIN: usize = 14;
    pub const JOIN_SCALE: usize = 15;
    pub const JOIN_ZERO: usize = 16;
    pub const LOOKUP: usize = 17;
    /// Input slots the layer has (absent ones are `None`).
    pub const SLOTS: usize = 18;
    /// Entries of a lookup table's row: one per byte of a level.
    pub const LOOKUP_ROW: usize = 256;
    /// The slots a device backend reads on the host to set the layer up (its scales and zero
    /// points, and the int32 bias's bound): constants there keep a host copy, so a run reads
    /// nothing back.
    pub const HOST_READ: [usize; 13] = [
        Self::BIAS,
        Self::X_SCALE,
        Self::X_ZERO,
        Self::W_SCALE,
        Self::W_ZERO,
        Self::Y_SCALE,
        Self::Y_ZERO,
        Self::RESIDUAL_SCALE,
        Self::RESIDUAL_ZERO,
        Self::THEN_SCALE,
        Self::THEN_ZERO,
        Self::JOIN_SCALE,
        Self::JOIN_ZERO,
    ];

    /// The operand types the layer takes: 8-bit integers, or float8 e4m3fn (x and w alike).
    pub fn operand_type(t: DataType) -> bool {
        t.is_8bit_integer() || Self::is_fp8(t)
    }

    /// float8 e4m3fn, the FP8 operand type (the one FP8 tensor cores take for both operands).
    pub fn is_fp8(t: DataType) -> bool {
        t == DataType::F8E4M3FN
    }

    /// The float output types: f32, or f16 / bf16 rounded from it.
    pub fn float_output_type(t: DataType) -> bool {
        matches!(t, DataType::F32 | DataType::F16 | DataType::BF16)
    }

    /// Whether the output is requantized (an 8-bit integer type) rather than float or sums.
    pub fn quantized_output(&self) -> bool {
        self.output.is_8bit_integer()
    }

    /// Whether the output is the int32 sums themselves (ConvInteger, MatMulInteger).
    pub fn sums_output(&self) -> bool {
        self.output == DataType::I32
    }

    /// The layer's output type: the lookup table's or the second quantization's where it has one.
    pub fn output_type(&self) -> DataType {
        self.lookup.unwrap_or(self.then.map_or(self.output, |t| t.to))
    }

    /// The f32 factor each output channel's `f32(acc)` is multiplied by, in the f32
    /// operations every backend uses: `x_scale·w_scale[k]`, divided by `y_scale[k]` where the
    /// output is quantized and no float term (a float bias, a residual) is added (the
    /// multiplier integer kernels fold; float terms are added before the division instead).
    /// `w_scale` and `y_scale` hold one value or one per channel (`y_scale` empty: none); the
    /// result holds one factor per channel where either does. A per-channel `y_scale` only
    /// folds: with a float term it is an error.
    pub fn channel_scales(&self, x_scale: f32, w_scale: &[f32], y_scale: &[f32], float_terms: bool) -> Result<Vec<f32>, String> {
        let fold = self.quantized_output() && !float_terms && !y_scale.is_empty();
        if !fold && y_scale.len() > 1 {
            return Err(format!("{} output scales, one per channel, with a float term added before the division", y_scale.len()));
        }
        let lens = if fold { [w_scale.len(), y_scale.len()] } else { [w_scale.len(), 1] };
        let channels = lens.iter().copied().max().unwrap_or(1);
        if lens.iter().any(|&n| n != 1 && n != channels) {
            return Err(format!("{} weight scales and {} output scales for one layer", w_scale.len(), y_scale.len()));
        }
        let at = |v: &[f32], k: usize| v[if v.len() == 1 { 0 } else { k }];
        Ok((0..channels).map(|k| if fold { x_scale * at(w_scale, k) / at(y_scale, k) } else { x_scale * at(w_scale, k) }).collect())
    }

    /// The output scale a kernel divides by where float terms are added before the division (or
    /// a join dequantizes the levels): `y_scale`'s one value. 1 where it has none or one per
    /// channel, which only fold into [`QuantizedParams::channel_scales`] (it refuses them with a
    /// float term), so nothing divides by it.
    pub fn divided_output_scale(y_scale: &[f32]) -> f32 {
        match y_scale {
            [s] => *s,
            _ => 1.0,
        }
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

//! The closed set of layer kinds and their parameters.
//!
//! Semantics follow TensorRT's layers where it has them and ONNX where kiln's layer is
//! broader (e.g. numpy broadcasting, slice clamping). Parameters that a model may compute at
//! run time (reshape dims, slice bounds, resize scales, fill shapes) are *tensor inputs*,
//! never attributes: a constant feeds them when they are static. Each variant documents its
//! input slots; `None` in an optional slot means "absent".

use super::dtype::DataType;
pub use super::fused::{AttentionParams, AxisMask, DequantizedInput, FusedAnchor, FusedParams, InputLevels, LevelGrid, PostOp};
pub use super::plugin::{PluginField, PluginParams};
pub use super::quantized::{QuantizedAnchor, QuantizedParams, Requantization};
use super::format::TensorFormat;
use super::shape::Shape;
use super::tensor::HostTensor;
use serde::{Deserialize, Serialize};

/// Index of a weights blob in [`crate::Network::weights`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct WeightsId(pub usize);

/// Identifies a loop: its boundary layers share one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LoopId(pub usize);

/// Identifies an if-conditional: its boundary layers share one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ConditionalId(pub usize);

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum LayerKind {
    /// `[] -> [out]`: the weights blob as a tensor.
    Constant { weights: WeightsId },
    /// `[x] -> [x]` copy.
    Identity,
    /// `[x] -> [y]`: element conversion (float→int truncates toward zero, saturating;
    /// →bool is `x != 0`).
    Cast { to: DataType },
    /// `[x] -> [y]`: Cast to a narrow float type (float8, e8m0, float4) with explicit overflow
    /// and e8m0 rounding: `saturate` false turns out-of-range values into inf/NaN where the
    /// type has them. Plain [`LayerKind::Cast`] is the ONNX default: saturate, e8m0 rounds up.
    CastNarrow { to: DataType, saturate: bool, e8m0_rounding: crate::ir::narrow::E8M0Rounding },
    /// `[x (N,C,*spatial), w (K, C/groups, *kernel), bias (K)?] -> [y (N,K,*out)]`.
    Convolution(ConvolutionParams),
    /// `[x (N,C,*spatial), w (C, K/groups, *kernel), bias (K)?] -> [y (N,K,*out)]`.
    Deconvolution(DeconvolutionParams),
    /// `[x (N,C,*spatial)] -> [y]`.
    Pooling(PoolingParams),
    /// `[a, b] -> [c]`: batched matrix product; leading (batch) dims broadcast.
    MatrixMultiply { op_a: MatrixOp, op_b: MatrixOp },
    /// `[a, b] -> [c]` with numpy broadcasting. Comparisons and logic give bool.
    Elementwise { op: ElementwiseOp },
    /// `[x] -> [y]`.
    Activation { kind: ActivationKind },
    /// `[x] -> [y]`.
    Unary { op: UnaryOp },
    /// `[x] -> [y]`: softmax along `axis`.
    SoftMax { axis: usize },
    /// `[x, axes (1-D int)?] -> [y]`: reduces `axes` (an empty list reduces nothing). The
    /// optional tensor input, for axes known only at run time, replaces `axes`: negative
    /// values count from the end and an empty tensor reduces every axis (ONNX semantics).
    Reduce { op: ReduceOp, axes: Vec<usize>, keep_dims: bool },
    /// `[x, scale, bias] -> [y]`: `(x - mean) / sqrt(var + epsilon) * scale + bias`, with
    /// mean and variance over `axes`; with `num_groups > 1` the channel axis 1 is split into
    /// groups and statistics are per (sample, group). `scale`/`bias` broadcast against `x`.
    Normalization { axes: Vec<usize>, epsilon: f32, num_groups: usize },
    /// `[x, reshape_dims (1-D int)?] -> [y]`: transpose, reshape, transpose. The tensor
    /// input, when present, replaces `params.reshape`.
    Shuffle(ShuffleParams),
    /// `[x0, x1, …] -> [y]` along `axis`.
    Concatenation { axis: usize },
    /// `[x, starts, ends, axes?, steps?] -> [y]`, ONNX `Slice` semantics (negative
    /// indices, clamping, negative steps). Index inputs are 1-D i32/i64.
    Slice,
    /// `[data, indices] -> [y]`; negative indices count from the end.
    Gather { mode: GatherMode },
    /// `[data, indices, updates] -> [y]`: a copy of `data` with `updates` written at
    /// `indices` (ONNX ScatterND / ScatterElements).
    Scatter { mode: ScatterMode, reduction: ScatterReduction },
    /// `[condition (bool), a, b] -> [y]`, broadcast.
    Select,
    /// `[x] -> [shape (1-D i64)]`.
    Shape,
    /// `[shape (1-D int)] -> [y]`: a tensor of that shape filled with `value` (0-D; its
    /// type is the output type).
    Fill { value: HostTensor },
    /// `[x, shape (1-D int)] -> [y]`: numpy broadcast of `x` against `shape`.
    Expand,
    /// `[x, roi?, scales?, sizes?] -> [y]`, ONNX `Resize` (exactly one of scales/sizes).
    Resize(ResizeParams),
    /// `[x, k (0-D or 1-element int)] -> [values, indices (i64)]` along `axis`.
    TopK { largest: bool, axis: usize, sorted: bool },
    /// `[x, pads (1-D int, begins then ends), constant_value?] -> [y]`.
    Padding { mode: PaddingMode },
    /// `[x, slope] -> [y]`: `x < 0 ? x * slope : x`, slope broadcast.
    ParametricRelu,
    /// `[x0, x1, …] -> [y]`.
    Einsum { equation: String },
    /// `[x (float), scale, zero_point?] -> [y]`: `saturate(round(x / scale) + zp)`; to a
    /// narrow float type `to`, `x / scale + zp` rounded to nearest even and saturated. The
    /// scale and zero point hold one element, one per index along `axis`, or (axis `None`)
    /// one per element of x.
    Quantize { axis: Option<usize>, to: DataType },
    /// `[x (int or narrow float), scale, zero_point?] -> [y]`: `(x - zp) * scale`.
    /// `to`: the float type written (TensorRT's `IDequantizeLayer::setToType`): the value is
    /// computed in the scale's type, then rounded to `to` as a Cast would; None writes the
    /// scale's type (ONNX's rule).
    Dequantize { axis: Option<usize>, to: Option<DataType> },
    /// `[x] -> [y]`: cross-channel local response normalization.
    Lrn { window: usize, alpha: f32, beta: f32, k: f32 },
    /// `[x] -> [indices (i64, rank × count)]`.
    NonZero,
    /// `[indices, values (2 elems: off, on), depth (0-D int)] -> [y]` along `axis`.
    OneHot { axis: i64 },
    /// `[x, axis (0-D int)] -> [y]`: running sum.
    CumulativeSum { exclusive: bool, reverse: bool },
    /// Loop boundary: `[t (0-D)] -> []`; COUNT takes an int trip count, WHILE a bool.
    TripLimit { looping: LoopId, kind: TripLimitKind },
    /// Loop boundary: `[t] -> [slice]`, one slice of `t` along `axis` per iteration.
    Iterator { looping: LoopId, axis: usize, reverse: bool },
    /// Loop boundary: `[initial, next?] -> [current]`. `shape`, when set, is the shape of
    /// every value of the recurrence where it is more general than the initial value's (a
    /// value that grows from iteration to iteration); `None`: the initial value's shape.
    Recurrence { looping: LoopId, shape: Option<Shape> },
    /// Loop boundary: `[value, length (0-D int)?] -> [out]`.
    LoopOutput { looping: LoopId, kind: LoopOutputKind, axis: usize },
    /// Conditional boundary: `[cond (0-D bool)] -> []`.
    Condition { conditional: ConditionalId },
    /// Conditional boundary: `[x] -> [x]` inside the branches.
    IfConditionalInput { conditional: ConditionalId },
    /// Conditional boundary: `[true_value, false_value] -> [out]`. The branches' values
    /// have the same type and shape (seeds §11.4); `shape`, when set, relaxes that to the
    /// same rank, the output having that declared shape (ONNX If allows branches of
    /// different shapes; the network API never sets it).
    IfConditionalOutput { conditional: ConditionalId, shape: Option<Shape> },
    /// `[cond (bool)] -> []`: fails execution with `message` when any element is false.
    Assertion { message: String },
    /// A third-party layer.
    Plugin(PluginParams),
    /// `[x, axis (0-D int)] -> [y]`: running product (ONNX CumProd).
    CumulativeProduct { exclusive: bool, reverse: bool },
    /// `[anchor inputs…, epilogue operands…] -> [y]`: a layer and the pointwise layers
    /// that followed it, fused by the optimizer (see [`FusedParams`]).
    Fused(FusedParams),
    /// `[q, k, v, mask?] -> [y]`: scaled-dot-product attention, recognized by the
    /// optimizer (see [`AttentionParams`]).
    Attention(AttentionParams),
    /// `[x, scale] -> [y]`: `x / sqrt(mean(x²) + epsilon) * scale`, the mean over `axes`
    /// (RMSNorm, recognized by the optimizer); `scale` broadcasts against `x`.
    RmsNormalization { axes: Vec<usize>, epsilon: f32 },
    /// `[x] -> [y]`: the same logical tensor of `channels` channels, moved from the
    /// physical layout of `from` to that of `to` (see [`super::format`]); inserted by the
    /// builder at network inputs and outputs whose format is not LINEAR.
    Reformat { from: TensorFormat, to: TensorFormat, channels: usize },
    /// `[x (N,C,*spatial), grid (N,*out_spatial,r)] -> [y (N,C,*out_spatial)]`: samples `x`
    /// at the normalized coordinates of `grid` (ONNX GridSample; the grid's last axis lists
    /// the innermost spatial axis first).
    GridSample(GridSampleParams),
    /// `[x] -> [y]`: the bits of each element reinterpreted as `to`, a type of the same
    /// width (ONNX BitCast).
    BitCast { to: DataType },
    /// `[boxes (B,S,4), scores (B,C,S), max_per_class (0-D int)?, iou_threshold (0-D)?,
    /// score_threshold (0-D)?] -> [selected (count, 3) i64]`: greedy non-maximum
    /// suppression per batch and class; rows are `(batch, class, box)`.
    NonMaxSuppression { center_point_box: bool },
    /// `[x] -> [y, indices, inverse_indices, counts (1-D i64)]`: the distinct elements of
    /// `x` flattened (`axis: None`) or its distinct slices along `axis`, ascending when
    /// `sorted`, else in order of first occurrence (ONNX Unique).
    Unique { axis: Option<usize>, sorted: bool },
    /// `[x (…, 1|2), axis (0-D int), length (0-D int)?] -> [y (…, 2), or (…, 1) for an
    /// inverse onesided transform]`: the discrete Fourier transform along `axis` of the
    /// real (last dim 1) or complex (last dim 2: re, im) signal, zero-padded or truncated
    /// to `length` (ONNX DFT). `onesided` keeps the `length / 2 + 1` non-redundant bins of
    /// a forward transform, or takes them as the input of an inverse real transform.
    Dft { inverse: bool, onesided: bool },
    /// `[columns (N, C·∏block, L), image_shape (1-D int), block_shape (1-D int)] -> [y (N, C,
    /// *image_shape)]`: sums each column back into its block of the image, the inverse of
    /// im2col (ONNX Col2Im). One `strides` / `dilations` entry and two `pads` entries
    /// (begins, then ends) per spatial dim.
    Col2Im { strides: Vec<usize>, dilations: Vec<usize>, pads: Vec<usize> },
    /// `[x (…, n, n)] -> [y (…)]`: the determinant of each square matrix (ONNX Det).
    Determinant,
    /// `[x (N, C, H, W), rois (R, 4: x1, y1, x2, y2), batch_indices (R, int)] -> [y (R, C,
    /// output_size)]`: each region pooled to a fixed grid from bilinear samples, averaged
    /// or (`max`) their largest weighted corner (ONNX RoiAlign). `sampling_ratio` 0 samples
    /// each bin adaptively; `half_pixel` shifts the region by -0.5 pixel.
    RoiAlign { max: bool, output_size: [usize; 2], sampling_ratio: usize, spatial_scale: f32, half_pixel: bool },
    /// An operator on string tensors (see [`TextOp`]).
    Text(TextOp),
    /// An integer convolution or matrix product with its requantization, made by the
    /// optimizer from explicit quantization (see [`QuantizedParams`] for its slots).
    Quantized(QuantizedParams),
}

/// How [`TextOp::Normalize`] changes letter case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CaseChange {
    None,
    Lower,
    Upper,
}

/// Operators on UTF-8 string tensors.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum TextOp {
    /// `[x (C) or (1, C)] -> [y]`: drops `stopwords` (compared case-insensitively unless
    /// `case_sensitive`), then changes case (ONNX StringNormalizer). When every element is
    /// dropped the output holds one empty string: shape (1) or (1, 1).
    Normalize { case_change: CaseChange, case_sensitive: bool, stopwords: Vec<String> },
    /// `[a, b] -> [a ++ b]`, broadcast (ONNX StringConcat).
    Concat,
    /// `[x] -> [tokens (x.shape, max count), counts (x.shape, i64)]`: each string split at
    /// `delimiter` (on runs of whitespace when `None`, dropping empty tokens) at most
    /// `max_split` times, padded with empty strings (ONNX StringSplit).
    Split { delimiter: Option<String>, max_split: Option<usize> },
    /// `[x] -> [bool, x.shape]`: whether each string matches `pattern` entirely (ONNX
    /// RegexFullMatch; RE2 syntax as the Rust `regex` crate reads it).
    RegexFullMatch { pattern: String },
}

impl LayerKind {
    /// A loop or if-conditional boundary layer: lowered into regions, never a kernel.
    pub fn is_control_boundary(&self) -> bool {
        matches!(self, crate::control_boundary!())
    }

    /// The input slots holding small integer tensors (shapes, bounds, counts, axes) whose
    /// values decide the output shape or the launch parameters: a device backend reads
    /// them to the host before running the layer (TensorRT's shape tensors).
    pub fn host_slots(&self) -> &'static [usize] {
        use LayerKind as K;
        match self {
            K::Shuffle(_) | K::Expand | K::Reduce { .. } | K::TopK { .. } => &[1],
            K::CumulativeSum { .. } | K::CumulativeProduct { .. } => &[1],
            K::Slice => &[1, 2, 3, 4],
            K::Padding { .. } | K::Dft { .. } | K::Col2Im { .. } => &[1, 2],
            K::Resize(_) => &[1, 2, 3],
            K::Fill { .. } => &[0],
            K::OneHot { .. } => &[2],
            _ => &[],
        }
    }

    /// The TensorRT-style layer type name, as the inspector prints it.
    pub fn type_name(&self) -> &'static str {
        match self {
            LayerKind::Constant { .. } => "Constant",
            LayerKind::Identity => "Identity",
            LayerKind::Cast { .. } => "Cast",
            LayerKind::CastNarrow { .. } => "CastNarrow",
            LayerKind::Convolution(_) => "Convolution",
            LayerKind::Deconvolution(_) => "Deconvolution",
            LayerKind::Pooling(_) => "Pooling",
            LayerKind::MatrixMultiply { .. } => "MatrixMultiply",
            LayerKind::Elementwise { .. } => "ElementWise",
            LayerKind::Activation { .. } => "Activation",
            LayerKind::Unary { .. } => "Unary",
            LayerKind::SoftMax { .. } => "SoftMax",
            LayerKind::Reduce { .. } => "Reduce",
            LayerKind::Normalization { .. } => "Normalization",
            LayerKind::Shuffle(_) => "Shuffle",
            LayerKind::Concatenation { .. } => "Concatenation",
            LayerKind::Slice => "Slice",
            LayerKind::Gather { .. } => "Gather",
            LayerKind::Scatter { .. } => "Scatter",
            LayerKind::Select => "Select",
            LayerKind::Shape => "Shape",
            LayerKind::Fill { .. } => "Fill",
            LayerKind::Expand => "Expand",
            LayerKind::Resize(_) => "Resize",
            LayerKind::TopK { .. } => "TopK",
            LayerKind::Padding { .. } => "Padding",
            LayerKind::ParametricRelu => "ParametricReLU",
            LayerKind::Einsum { .. } => "Einsum",
            LayerKind::Quantize { .. } => "Quantize",
            LayerKind::Dequantize { .. } => "Dequantize",
            LayerKind::Lrn { .. } => "LRN",
            LayerKind::NonZero => "NonZero",
            LayerKind::OneHot { .. } => "OneHot",
            LayerKind::CumulativeSum { .. } => "Cumulative",
            LayerKind::CumulativeProduct { .. } => "CumulativeProduct",
            LayerKind::TripLimit { .. } => "TripLimit",
            LayerKind::Iterator { .. } => "Iterator",
            LayerKind::Recurrence { .. } => "Recurrence",
            LayerKind::LoopOutput { .. } => "LoopOutput",
            LayerKind::Condition { .. } => "Condition",
            LayerKind::IfConditionalInput { .. } => "IfConditionalInput",
            LayerKind::IfConditionalOutput { .. } => "IfConditionalOutput",
            LayerKind::Assertion { .. } => "Assertion",
            LayerKind::Plugin(_) => "PluginV3",
            LayerKind::Fused(_) => "Fused",
            LayerKind::Quantized(_) => "Quantized",
            LayerKind::Attention(_) => "Attention",
            LayerKind::RmsNormalization { .. } => "RMSNormalization",
            LayerKind::Reformat { .. } => "Reformat",
            LayerKind::GridSample(_) => "GridSample",
            LayerKind::BitCast { .. } => "BitCast",
            LayerKind::NonMaxSuppression { .. } => "NonMaxSuppression",
            LayerKind::Unique { .. } => "Unique",
            LayerKind::Dft { .. } => "DFT",
            LayerKind::Col2Im { .. } => "Col2Im",
            LayerKind::Determinant => "Determinant",
            LayerKind::RoiAlign { .. } => "RoiAlign",
            LayerKind::Text(_) => "Text",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConvolutionParams {
    pub groups: usize,
    /// One entry per spatial dim.
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
    pub pre_padding: Vec<usize>,
    pub post_padding: Vec<usize>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeconvolutionParams {
    pub groups: usize,
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
    /// Cropped from the full output's start / end.
    pub pre_padding: Vec<usize>,
    pub post_padding: Vec<usize>,
    /// Extra cells added at the end of each spatial dim.
    pub output_padding: Vec<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PoolingKind {
    Max,
    Average,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolingParams {
    pub kind: PoolingKind,
    pub window: Vec<usize>,
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
    pub pre_padding: Vec<usize>,
    pub post_padding: Vec<usize>,
    /// Output size rounds up (a last window may start inside the end padding).
    pub ceil_mode: bool,
    /// Average pooling divides by the count of non-padding cells only.
    pub average_count_excludes_padding: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MatrixOp {
    /// The last two dims are the matrix.
    None,
    /// The last two dims are the matrix, transposed.
    Transpose,
    /// The last dim is a vector (a 1-row / 1-column matrix that is dropped from the result).
    Vector,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ElementwiseOp {
    Sum,
    Sub,
    Prod,
    Div,
    /// Integer division rounding toward negative infinity; floats: floor(a / b).
    FloorDiv,
    /// Remainder with the sign of the divisor (ONNX Mod fmod=0).
    Mod,
    /// Remainder with the sign of the dividend (C fmod, ONNX Mod fmod=1).
    Fmod,
    Pow,
    Max,
    Min,
    Equal,
    Greater,
    Less,
    GreaterOrEqual,
    LessOrEqual,
    And,
    Or,
    Xor,
    BitAnd,
    BitOr,
    BitXor,
    ShiftLeft,
    ShiftRight,
}

impl ElementwiseOp {
    pub fn is_comparison(self) -> bool {
        use ElementwiseOp::*;
        matches!(self, Equal | Greater | Less | GreaterOrEqual | LessOrEqual)
    }

    pub fn is_logical(self) -> bool {
        matches!(self, ElementwiseOp::And | ElementwiseOp::Or | ElementwiseOp::Xor)
    }

    pub fn is_bitwise(self) -> bool {
        use ElementwiseOp::*;
        matches!(self, BitAnd | BitOr | BitXor | ShiftLeft | ShiftRight)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum ActivationKind {
    Relu,
    Sigmoid,
    Tanh,
    /// `x < 0 ? alpha * x : x`.
    LeakyRelu { alpha: f32 },
    /// `x < 0 ? alpha * (exp(x) - 1) : x`.
    Elu { alpha: f32 },
    /// `gamma * (x <= 0 ? alpha * (exp(x) - 1) : x)`.
    Selu { alpha: f32, gamma: f32 },
    /// `x / (1 + |x|)`.
    Softsign,
    /// `ln(1 + exp(x))`.
    Softplus,
    /// `min(max(x, min), max)`.
    Clip { min: f32, max: f32 },
    /// `max(0, min(1, alpha * x + beta))`.
    HardSigmoid { alpha: f32, beta: f32 },
    /// `x * max(0, min(1, x / 6 + 1/2))`.
    HardSwish,
    /// `alpha * tanh(beta * x)`.
    ScaledTanh { alpha: f32, beta: f32 },
    /// `x > alpha ? x : 0`.
    ThresholdedRelu { alpha: f32 },
    /// `0.5 x (1 + erf(x / √2))`.
    GeluErf,
    /// `0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))`.
    GeluTanh,
    /// `x > 0 ? x : alpha * (exp(x / alpha) - 1)`.
    Celu { alpha: f32 },
    /// `x * tanh(softplus(x))`.
    Mish,
    /// `x * sigmoid(x)`.
    Swish,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum UnaryOp {
    Exp,
    Log,
    Sqrt,
    Recip,
    Abs,
    Neg,
    Sin,
    Cos,
    Tan,
    Sinh,
    Cosh,
    Asin,
    Acos,
    Atan,
    Asinh,
    Acosh,
    Atanh,
    Ceil,
    Floor,
    /// Round half to even.
    Round,
    Erf,
    /// Logical not (bool) / bitwise not (integers).
    Not,
    Sign,
    IsNan,
    IsInf { detect_positive: bool, detect_negative: bool },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReduceOp {
    Sum,
    Prod,
    Max,
    Min,
    Mean,
    L1,
    L2,
    LogSum,
    LogSumExp,
    SumSquare,
}

#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ShuffleParams {
    /// Permutation applied first; empty means identity.
    pub first_transpose: Vec<usize>,
    /// Reshape dims: `-1` infers one dim; `0` copies the input dim when
    /// `zero_is_placeholder`, else means a zero-length dim. `None`: no reshape.
    pub reshape: Option<Vec<i64>>,
    /// Permutation applied last; empty means identity.
    pub second_transpose: Vec<usize>,
    pub zero_is_placeholder: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum GatherMode {
    /// ONNX Gather: `out = data[..., indices[...], ...]` at `axis`.
    Default { axis: usize },
    /// ONNX GatherElements.
    Elements { axis: usize },
    /// ONNX GatherND.
    Nd { batch_dims: usize },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ScatterMode {
    /// ONNX ScatterElements.
    Elements { axis: usize },
    /// ONNX ScatterND.
    Nd,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ScatterReduction {
    None,
    Add,
    Mul,
    Max,
    Min,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ResizeMode {
    Nearest,
    Linear,
    Cubic,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CoordinateTransformation {
    HalfPixel,
    HalfPixelSymmetric,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfCropAndResize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NearestRounding {
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResizeParams {
    pub mode: ResizeMode,
    pub coordinate_transformation: CoordinateTransformation,
    pub nearest_rounding: NearestRounding,
    pub cubic_coeff_a: f32,
    pub exclude_outside: bool,
    pub extrapolation_value: f32,
    /// Axes that scales/sizes refer to; `None` means all axes.
    pub axes: Option<Vec<usize>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum GridSampleMode {
    /// The nearest cell, ties rounding to even.
    Nearest,
    /// n-linear interpolation.
    Linear,
    /// n-cubic interpolation (Keys, a = -0.75).
    Cubic,
}

/// What a tap outside the input reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum GridSamplePadding {
    Zeros,
    /// The nearest edge cell.
    Border,
    /// The input mirrored at its borders.
    Reflection,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GridSampleParams {
    pub mode: GridSampleMode,
    pub padding: GridSamplePadding,
    /// -1 and 1 address the centers of the corner cells (else their outer edges).
    pub align_corners: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PaddingMode {
    Constant,
    Reflect,
    Edge,
    Wrap,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TripLimitKind {
    Count,
    While,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LoopOutputKind {
    LastValue,
    Concatenate,
    Reverse,
}

/// The pattern matching every loop and if-conditional boundary kind (see
/// [`LayerKind::is_control_boundary`]), for exhaustive matches that decide them together:
/// `match kind { kiln::control_boundary!() => …, … }`.
#[macro_export]
macro_rules! control_boundary {
    () => {
        $crate::LayerKind::TripLimit { .. }
            | $crate::LayerKind::Iterator { .. }
            | $crate::LayerKind::Recurrence { .. }
            | $crate::LayerKind::LoopOutput { .. }
            | $crate::LayerKind::Condition { .. }
            | $crate::LayerKind::IfConditionalInput { .. }
            | $crate::LayerKind::IfConditionalOutput { .. }
    };
}

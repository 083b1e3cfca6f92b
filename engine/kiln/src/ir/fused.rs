//! Parameters of the layer kinds that only the optimizer creates: an anchor layer with a
//! pointwise epilogue ([`FusedParams`]) and scaled-dot-product attention
//! ([`AttentionParams`]).
//!
//! Both are plain data (serde) so an engine stores them like any other layer; a backend
//! may run them as one kernel (cuda epilogues, flash attention) or step by step (cpu).

use super::dtype::DataType;
use super::tensor::{HostTensor, TensorData};
use super::layer::{
    ActivationKind, ConvolutionParams, DeconvolutionParams, ElementwiseOp, LayerKind, MatrixOp,
    PoolingParams, ReduceOp, UnaryOp,
};
use serde::{Deserialize, Serialize};

/// A layer followed by pointwise steps on its output, executed as one layer.
///
/// Inputs: the anchor's inputs first (`anchor_inputs` slots), then the extra operands
/// that [`PostOp::Elementwise`] steps read (bias, residual, scale…).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct FusedParams {
    /// The layer whose output the epilogue transforms.
    pub anchor: FusedAnchor,
    pub anchor_inputs: usize,
    pub epilogue: Vec<PostOp>,
    /// Integer inputs the layer reads dequantized (per tensor), anchor inputs or operands
    /// alike: the Q/DQ islands between integer layers run as one pass over the integers.
    #[serde(default)]
    pub dequantized: Vec<DequantizedInput>,
}

/// Input `input` is read as `DequantizeLinear(input, input[scale], input[zero])`, one scale
/// and zero point for the whole tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DequantizedInput {
    pub input: usize,
    pub scale: usize,
    pub zero: Option<usize>,
}

/// The derived form, without `dequantized` when no input is (IR dumps of float fusions read
/// as they always have).
impl std::fmt::Debug for FusedParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("FusedParams");
        d.field("anchor", &self.anchor).field("anchor_inputs", &self.anchor_inputs).field("epilogue", &self.epilogue);
        if !self.dequantized.is_empty() {
            d.field("dequantized", &self.dequantized);
        }
        d.finish()
    }
}

impl FusedParams {
    /// A fused layer whose inputs are all read as they are.
    pub fn new(anchor: FusedAnchor, anchor_inputs: usize, epilogue: Vec<PostOp>) -> FusedParams {
        FusedParams { anchor, anchor_inputs, epilogue, dequantized: Vec::new() }
    }
}

/// The layers that can head a fused layer: a closed, non-recursive set, so a hostile
/// engine file cannot nest fused layers (deserialization stays shallow).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum FusedAnchor {
    Convolution(ConvolutionParams),
    Deconvolution(DeconvolutionParams),
    MatrixMultiply {
        op_a: MatrixOp,
        op_b: MatrixOp,
    },
    /// Pointwise heads of elementwise chains.
    Activation(ActivationKind),
    Unary(UnaryOp),
    Elementwise(ElementwiseOp),
    /// The input itself: the head of a quantized island whose first step is its epilogue's (a
    /// layer normalization of dequantized levels, `passes::quantized_chain`).
    Identity,
    /// A max pooling of 8-bit levels, then its epilogue: a Q/DQ CNN's `Conv → ReLU → MaxPool`
    /// pooled on the integers with the ReLU and requantization after it
    /// (`passes::quantized_chain`). Only that pass makes one: [`FusedAnchor::from_kind`] takes
    /// no pooling.
    Pooling(PoolingParams),
}

impl FusedAnchor {
    /// The anchor of `kind`, if it can head a fused layer.
    pub fn from_kind(kind: &LayerKind) -> Option<FusedAnchor> {
        Some(match kind {
            LayerKind::Convolution(p) => FusedAnchor::Convolution(p.clone()),
            LayerKind::Deconvolution(p) => FusedAnchor::Deconvolution(p.clone()),
            LayerKind::MatrixMultiply { op_a, op_b } => FusedAnchor::MatrixMultiply {
                op_a: *op_a,
                op_b: *op_b,
            },
            LayerKind::Activation { kind } => FusedAnchor::Activation(*kind),
            LayerKind::Unary { op } => FusedAnchor::Unary(*op),
            LayerKind::Elementwise { op } => FusedAnchor::Elementwise(*op),
            _ => return None,
        })
    }

    /// Whether the anchor is pointwise (the head of an island, which a reduction may end).
    pub fn pointwise(&self) -> bool {
        matches!(self, FusedAnchor::Activation(_) | FusedAnchor::Unary(_) | FusedAnchor::Elementwise(_) | FusedAnchor::Identity)
    }

    /// The plain layer kind the anchor runs.
    pub fn kind(&self) -> LayerKind {
        match self {
            FusedAnchor::Convolution(p) => LayerKind::Convolution(p.clone()),
            FusedAnchor::Deconvolution(p) => LayerKind::Deconvolution(p.clone()),
            FusedAnchor::MatrixMultiply { op_a, op_b } => LayerKind::MatrixMultiply {
                op_a: *op_a,
                op_b: *op_b,
            },
            FusedAnchor::Activation(kind) => LayerKind::Activation { kind: *kind },
            FusedAnchor::Unary(op) => LayerKind::Unary { op: *op },
            FusedAnchor::Elementwise(op) => LayerKind::Elementwise { op: *op },
            FusedAnchor::Identity => LayerKind::Identity,
            FusedAnchor::Pooling(p) => LayerKind::Pooling(p.clone()),
        }
    }
}

/// One pointwise step applied to the running value.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum PostOp {
    Activation(ActivationKind),
    Unary(UnaryOp),
    /// `running op input[operand]`, or `input[operand] op running` when `running_first`
    /// is false (matters for Sub, Div, Pow…). Broadcasts like Elementwise.
    Elementwise {
        op: ElementwiseOp,
        operand: usize,
        running_first: bool,
    },
    /// QuantizeLinear of the running value to the 8-bit integer type `to`, per tensor, with
    /// the scale and zero point inputs `scale` and `zero`.
    Quantize { to: DataType, scale: usize, zero: Option<usize> },
    /// DequantizeLinear of the (integer) running value, per tensor.
    Dequantize { scale: usize, zero: Option<usize> },
    /// Layer normalization of the running value over its last axis, `axis` (one group), with
    /// the affine inputs `scale` and `bias`: a Q/DQ transformer's `residual + x → LayerNorm →
    /// QuantizeLinear` as one pass over each row ([`LayerKind::Normalization`]'s arithmetic).
    Normalization { axis: usize, epsilon: f32, scale: usize, bias: usize },
    /// A reduction of the running value over the axes whose bits `axes` sets (bit `a` for axis
    /// `a`), the layer's last step: a pointwise island and the reduction after it as one pass,
    /// which never writes the island's result (a Q/DQ CNN's `DQ + DQ → Add → Relu →
    /// GlobalAveragePool` head, [`LayerKind::Reduce`]'s arithmetic).
    Reduce { op: ReduceOp, axes: AxisMask, keep_dims: bool },
}

/// A set of axes as bits (bit `a` for axis `a`): a [`PostOp::Reduce`]'s, which keeps `PostOp`
/// `Copy`. It reads as the list of its axes (`[2, 3]`) in dumps and the inspector.
#[derive(Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AxisMask(pub u32);

impl AxisMask {
    /// The mask of `axes`: `None` where one is past 31 (no rank reaches it).
    pub fn of(axes: &[usize]) -> Option<AxisMask> {
        axes.iter().try_fold(0u32, |mask, &a| (a < 32).then(|| mask | 1 << a)).map(AxisMask)
    }

    /// The axes, in increasing order.
    pub fn axes(self) -> Vec<usize> {
        (0..32).filter(|a| self.0 >> a & 1 == 1).collect()
    }
}

impl std::fmt::Debug for AxisMask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.axes()).finish()
    }
}

impl PostOp {
    /// The plain layer kind this step applies.
    pub fn kind(&self) -> LayerKind {
        match *self {
            PostOp::Activation(kind) => LayerKind::Activation { kind },
            PostOp::Unary(op) => LayerKind::Unary { op },
            PostOp::Elementwise { op, .. } => LayerKind::Elementwise { op },
            PostOp::Quantize { to, .. } => LayerKind::Quantize { axis: None, to },
            PostOp::Dequantize { .. } => LayerKind::Dequantize { axis: None, to: None },
            PostOp::Normalization { axis, epsilon, .. } => LayerKind::Normalization { axes: vec![axis], epsilon, num_groups: 1 },
            PostOp::Reduce { op, axes, keep_dims } => LayerKind::Reduce { op, axes: axes.axes(), keep_dims },
        }
    }

    /// The inputs a step reads besides the running value: an Elementwise operand, or a
    /// Quantize / Dequantize step's scale and zero point.
    pub fn operands(&self) -> Vec<Option<usize>> {
        match *self {
            PostOp::Activation(_) | PostOp::Unary(_) | PostOp::Reduce { .. } => Vec::new(),
            PostOp::Elementwise { operand, .. } => vec![Some(operand)],
            PostOp::Quantize { scale, zero, .. } | PostOp::Dequantize { scale, zero } => vec![Some(scale), zero],
            PostOp::Normalization { scale, bias, .. } => vec![Some(scale), Some(bias)],
        }
    }
}

/// `softmax(scale · Q·Kᵀ + mask) · V` over the last axis.
///
/// Inputs `[q (…, Sq, D), k, v (…, Sk, Dv), mask?]`: `k` is `(…, Sk, D)`, or `(…, D, Sk)`
/// when `key_transposed` (PyTorch exports often transpose K before the product). Leading
/// dims broadcast as in MatrixMultiply; the additive mask broadcasts onto `(…, Sq, Sk)`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttentionParams {
    pub scale: f32,
    pub key_transposed: bool,
    /// Whether the scale multiplies `Q·Kᵀ` (true) or divides it (false: `Q·Kᵀ / scale`),
    /// as the exported graph did, so results match the unfused graph bit for bit.
    pub scale_multiplies: bool,
    /// Rows whose softmax is NaN (every score masked to -inf, or a NaN score) give zeros, as
    /// PyTorch's scaled_dot_product_attention export guards it: `Where(IsNaN(p), 0, p)`.
    #[serde(default)]
    pub zero_nan_rows: bool,
    /// The product `Q·Kᵀ`, before its scale, passes through a quantization's levels and back,
    /// as a Q/DQ network writes `DequantizeLinear(QuantizeLinear(Q·Kᵀ)) / scale`.
    #[serde(default)]
    pub product_levels: Option<LevelGrid>,
    /// The scaled scores likewise, before the mask (`DequantizeLinear(QuantizeLinear(scale ·
    /// Q·Kᵀ))`, where the scale multiplied Q and K).
    #[serde(default)]
    pub scores_levels: Option<LevelGrid>,
    /// The probabilities (after the softmax and its NaN guard) likewise, before `· V`.
    #[serde(default)]
    pub probs_levels: Option<LevelGrid>,
    /// Q, K or V given as 8-bit levels: the per-tensor DequantizeLinear each came through,
    /// folded into the layer.
    #[serde(default)]
    pub input_levels: Option<InputLevels>,
    /// The output quantized by a per-tensor QuantizeLinear folded into the layer: each value,
    /// rounded to the layer's float type as the unfused graph stored it, becomes its level on
    /// this grid, and the layer writes the levels (`grid.levels`).
    #[serde(default)]
    pub output_levels: Option<LevelGrid>,
}

/// Attention inputs read as 8-bit levels (a Q/DQ network's Q, K and V): the layer dequantizes
/// input `i` where `grids[i]` is set, `(level - zero) · scale` in f32 rounded once to `to`, as
/// the per-tensor DequantizeLinear writing `to` it stands for did. Inputs without a grid are
/// floats of type `to`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct InputLevels {
    pub grids: [Option<LevelGrid>; 3],
    pub to: DataType,
}

/// A per-tensor quantization applied and undone (`DequantizeLinear(QuantizeLinear(x))`):
/// `(clamp(round_half_even(x / scale) + zero, levels' range) - zero) · scale`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LevelGrid {
    pub scale: f32,
    pub zero: i32,
    /// The levels' integer type (int8 or uint8): its range is the saturation's.
    pub levels: DataType,
}

impl LevelGrid {
    /// The lowest and highest level.
    pub fn range(&self) -> (i32, i32) {
        match self.levels {
            DataType::U8 => (0, 255),
            _ => (-128, 127),
        }
    }

    /// The QuantizeLinear / DequantizeLinear operands that apply the grid step by step: the
    /// scale (f32) and the zero point (in the levels' type).
    pub fn operands(&self) -> Result<(HostTensor, HostTensor), String> {
        let scale = HostTensor::scalar(TensorData::F32(vec![self.scale])).map_err(|e| e.to_string())?;
        let zero = HostTensor::scalar(match self.levels {
            DataType::U8 => TensorData::U8(vec![self.zero as u8]),
            _ => TensorData::I8(vec![self.zero as i8]),
        })
        .map_err(|e| e.to_string())?;
        Ok((scale, zero))
    }
}

impl AttentionParams {
    /// Whether a quantization's levels sit anywhere inside it (a Q/DQ network's attention).
    pub fn has_levels(&self) -> bool {
        self.product_levels.is_some() || self.scores_levels.is_some() || self.probs_levels.is_some()
    }

    /// The grid input `slot` (Q 0, K 1, V 2) is read through, where it is given as levels.
    pub fn input_grid(&self, slot: usize) -> Option<LevelGrid> {
        self.input_levels.and_then(|l| l.grids.get(slot).copied().flatten())
    }

    /// The factor the scores are multiplied by (`scale`, or `1 / scale` when it divides).
    pub fn multiplier(&self) -> f32 {
        if self.scale_multiplies {
            self.scale
        } else {
            1.0 / self.scale
        }
    }

    /// The factor `Q·Kᵀ` is multiplied by before it is stored: 1 where the product has a grid of
    /// its own (the scale then applies after it), else [`Self::multiplier`].
    pub fn stored_product_factor(&self) -> f32 {
        if self.product_levels.is_some() {
            1.0
        } else {
            self.multiplier()
        }
    }
}

//! Parameters of the layer kinds that only the optimizer creates: an anchor layer with a
//! pointwise epilogue ([`FusedParams`]) and scaled-dot-product attention
//! ([`AttentionParams`]).
//!
//! Both are plain data (serde) so an engine stores them like any other layer; a backend
//! may run them as one kernel (cuda epilogues, flash attention) or step by step (cpu).

use super::layer::{ActivationKind, ElementwiseOp, LayerKind, UnaryOp};
use serde::{Deserialize, Serialize};

/// A layer followed by pointwise steps on its output, executed as one layer.
///
/// Inputs: the anchor's inputs first (`anchor_inputs` slots), then the extra operands
/// that [`PostOp::Elementwise`] steps read (bias, residual, scale…).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FusedParams {
    /// Convolution, MatrixMultiply, Deconvolution, or a pointwise layer (Activation,
    /// Unary, Elementwise) heading an elementwise chain.
    pub anchor: Box<LayerKind>,
    pub anchor_inputs: usize,
    pub epilogue: Vec<PostOp>,
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
}

impl PostOp {
    /// The plain layer kind this step applies.
    pub fn kind(&self) -> LayerKind {
        match *self {
            PostOp::Activation(kind) => LayerKind::Activation { kind },
            PostOp::Unary(op) => LayerKind::Unary { op },
            PostOp::Elementwise { op, .. } => LayerKind::Elementwise { op },
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
}

//! Elementwise-chain fusion: consecutive pointwise layers (activations, float unary ops,
//! arithmetic with a second operand) become one [`LayerKind::Fused`] layer headed by the
//! first of them, so a backend runs the chain in one pass over memory.

use super::fuse::fuse_chains;
use super::{Pass, PassContext, PassError};
use crate::ir::layer::{ElementwiseOp, LayerKind};
use crate::ir::network::Network;

#[derive(Clone, Copy, Debug, Default)]
pub struct PointwiseChainFusion;

impl Pass for PointwiseChainFusion {
    fn name(&self) -> &'static str {
        "pointwise-chain-fusion"
    }

    fn run(&self, network: &Network, _: &PassContext<'_>) -> Result<Option<Network>, PassError> {
        use ElementwiseOp as E;
        let head = |kind: &LayerKind| match kind {
            LayerKind::Activation { .. } => true,
            LayerKind::Unary { op } => !matches!(
                op,
                crate::ir::layer::UnaryOp::Not
                    | crate::ir::layer::UnaryOp::IsNan
                    | crate::ir::layer::UnaryOp::IsInf { .. }
            ),
            LayerKind::Elementwise { op } => matches!(
                op,
                E::Sum | E::Sub | E::Prod | E::Div | E::Max | E::Min | E::Pow
            ),
            _ => false,
        };
        fuse_chains(network, head, 1)
    }
}

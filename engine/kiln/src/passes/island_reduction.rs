//! A pointwise island and the reduction that reads it as one layer: the reduction becomes the
//! island's last step ([`PostOp::Reduce`]). A Q/DQ CNN's head, `DQ + DQ → Add → Relu →
//! GlobalAveragePool`, wrote the island's f32 result (103 MB for ResNet-50 at batch 256) for the
//! pooling to read back; a backend may now reduce the island's values as it computes them.
//!
//! It applies where the island's result has that one reader and is not a network output, the
//! island is headed by a pointwise layer and does not normalize rows, and the reduction's axes
//! are attributes (not a tensor input).

use super::graph::{consumers, has_control_flow, only_reader};
use super::{Pass, PassContext, PassError};
use crate::ir::fused::{AxisMask, FusedParams, PostOp};
use crate::ir::layer::LayerKind;
use crate::ir::network::Network;
use crate::ir::rewrite::Rewriter;

#[derive(Clone, Copy, Debug, Default)]
pub struct IslandReduction;

impl Pass for IslandReduction {
    fn name(&self) -> &'static str {
        "island-reduction"
    }

    fn run(&self, network: &Network, _: &PassContext<'_>) -> Result<Option<Network>, PassError> {
        if has_control_flow(network) {
            return Ok(None);
        }
        let readers = consumers(network);
        let layers = network.layers();
        // Island layer index → the reduction it takes in and the island with it as its last step.
        let mut taken: Vec<Option<(usize, FusedParams)>> = vec![None; layers.len()];
        let mut absorbed = vec![false; layers.len()];
        for (i, l) in layers.iter().enumerate() {
            let LayerKind::Fused(p) = &l.kind else { continue };
            let ends = |post: &PostOp| matches!(post, PostOp::Reduce { .. } | PostOp::Normalization { .. });
            if !p.anchor.pointwise() || p.epilogue.iter().any(ends) || l.outputs.len() != 1 {
                continue;
            }
            let Some(r) = only_reader(network, &readers, l.outputs[0]) else { continue };
            let reduction = &layers[r];
            let LayerKind::Reduce { op, axes, keep_dims } = &reduction.kind else { continue };
            let Some(axes) = AxisMask::of(axes) else { continue };
            if reduction.inputs.len() != 1 || reduction.outputs.len() != 1 {
                continue;
            }
            let mut island = p.clone();
            island.epilogue.push(PostOp::Reduce { op: *op, axes, keep_dims: *keep_dims });
            taken[i] = Some((r, island));
            absorbed[r] = true;
        }
        if !absorbed.contains(&true) {
            return Ok(None);
        }
        let mut rw = Rewriter::new(network);
        for (i, l) in layers.iter().enumerate() {
            if absorbed[i] {
                continue;
            }
            let Some((r, island)) = &taken[i] else {
                rw.keep(i)?;
                continue;
            };
            let reduction = &layers[*r];
            let inputs = rw.get_slots(&l.inputs)?;
            let id = rw.add(&format!("{} + {}", l.name, reduction.name), LayerKind::Fused(island.clone()), inputs, &reduction.outputs)?;
            // The island's precision, the reduction's output types (as each layer had them).
            let made = &mut rw.out_mut().parts_mut().layers[id.0];
            made.precision = l.precision;
            made.output_types = reduction.output_types.clone();
        }
        Ok(Some(rw.finish_as_source()?))
    }
}

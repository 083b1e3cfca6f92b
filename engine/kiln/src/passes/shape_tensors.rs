//! Shape-tensor resolution: a reshape whose dims tensor is computed in the graph from dims
//! that are dynamic (`Shape → Gather → Concat → Reshape`, as the legacy exporter writes every
//! `x.view(x.size(0), -1)`) becomes a static reshape when its elements say the same thing in
//! static form: a named dim in its own input position is a `0` placeholder, one unknown
//! element is the `-1`. The shape arithmetic feeding it is then dead. Static and dynamic
//! exports of one model end with the same layers, and backends see static reshapes.

use super::graph::{has_control_flow};
use crate::ir::rewrite::Rewriter;
use super::{Pass, PassContext, PassError};
use crate::ir::infer::static_reshape;
use crate::ir::layer::{LayerKind, ShuffleParams};
use crate::ir::network::{Layer, Network};
use crate::ir::shape::Dim;

#[derive(Clone, Copy, Debug, Default)]
pub struct ShapeTensorResolution;

impl Pass for ShapeTensorResolution {
    fn name(&self) -> &'static str {
        "shape-tensor-resolution"
    }

    fn run(&self, network: &Network, _: &PassContext<'_>) -> Result<Option<Network>, PassError> {
        if has_control_flow(network) {
            return Ok(None);
        }
        let mut rb = Rewriter::new(network);
        let mut changed = false;
        for (i, l) in network.layers().iter().enumerate() {
            match static_params(network, l) {
                Some(params) => {
                    let inputs = rb.get_slots(&l.inputs[..1])?;
                    rb.add(&l.name, LayerKind::Shuffle(params), inputs, &l.outputs)?;
                    changed = true;
                }
                None => {
                    rb.keep(i)?;
                }
            }
        }
        Ok(changed.then(|| rb.finish_as_source()).transpose()?)
    }
}

/// The static form of a Shuffle whose reshape dims are a run-time input, where one exists.
fn static_params(net: &Network, l: &Layer) -> Option<ShuffleParams> {
    let LayerKind::Shuffle(p) = &l.kind else {
        return None;
    };
    let (x, dims) = (l.inputs.first().copied().flatten()?, l.inputs.get(1).copied().flatten()?);
    let elements = net.fact(dims).elements()?;
    let input = net.tensor(x).shape.dims();
    let transposed: Vec<Dim> = if p.first_transpose.is_empty() {
        input.to_vec()
    } else {
        p.first_transpose.iter().map(|&a| input.get(a).cloned()).collect::<Option<_>>()?
    };
    let reshape = static_reshape(&transposed, &elements, p.zero_is_placeholder)?;
    Some(ShuffleParams { reshape: Some(reshape), ..p.clone() })
}

//! Run-time shape inference: the build-time rules of [`crate::ir::infer`] re-run over the
//! whole network with concrete input shapes (and shape-tensor values), giving every
//! tensor's shape before anything executes.

use crate::ir::infer::{infer_layer, Fact};
use crate::ir::network::{Network, TensorId};
use crate::ir::shape::{Dim, Shape};
use crate::ir::tensor::HostTensor;
use std::sync::Arc;

/// A concrete network input: its dims, and its values where they matter for shapes.
#[derive(Clone, Debug)]
pub struct BoundInput {
    pub tensor: TensorId,
    pub dims: Vec<usize>,
    pub value: Option<HostTensor>,
}

/// Where run-time inference failed: the layer and the rule its inputs break.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShapeInferenceFailure {
    pub layer: String,
    pub rule: String,
}

/// Every tensor's shape, in tensor-id order, once the given inputs are bound. Dims that
/// depend on data (or on inputs not bound) stay `Named`/`Unknown`.
pub fn infer_shapes(network: &Network, inputs: &[BoundInput]) -> Result<Vec<Shape>, ShapeInferenceFailure> {
    let mut shapes: Vec<Shape> = network.tensors().iter().map(|d| d.shape.clone()).collect();
    let mut values: Vec<Option<Arc<HostTensor>>> = network.tensors().iter().map(|d| d.value.clone()).collect();
    for input in inputs {
        shapes[input.tensor.0] = Shape::fixed(&input.dims);
        values[input.tensor.0] = input.value.clone().map(Arc::new);
    }
    // Substituting a named dim everywhere it appears lets tensors whose layers keep the
    // symbol (rather than recomputing it) resolve too.
    let mut named: Vec<(String, usize)> = Vec::new();
    for input in inputs {
        for (d, &n) in network.tensor(input.tensor).shape.dims().iter().zip(&input.dims) {
            if let Dim::Named(sym) = d {
                named.push((sym.clone(), n));
            }
        }
    }
    for layer in network.layers() {
        if matches!(layer.kind, crate::ir::layer::LayerKind::Constant { .. }) {
            continue;
        }
        let facts: Vec<Option<Fact>> = layer
            .inputs
            .iter()
            .map(|slot| {
                slot.map(|t| Fact::new(network.tensor(t).dtype, &shapes[t.0], values[t.0].as_deref()))
            })
            .collect();
        let outputs = infer_layer(&layer.kind, &facts, &|w| network.weights_blob(w))
            .map_err(|e| ShapeInferenceFailure { layer: layer.name.clone(), rule: e.rule })?;
        let substitute = |shape: Shape| {
            Shape(
                shape
                    .0
                    .into_iter()
                    .map(|d| match &d {
                        Dim::Named(sym) => named.iter().find(|(s, _)| s == sym).map_or(d, |(_, n)| Dim::Fixed(*n)),
                        _ => d,
                    })
                    .collect(),
            )
        };
        let outputs: Vec<(Shape, Option<HostTensor>, crate::DataType)> =
            outputs.into_iter().map(|o| (substitute(o.shape), o.value, o.dtype)).collect();
        let folded = match outputs.as_slice() {
            [(shape, None, dtype)] => {
                let known: Vec<Option<&HostTensor>> =
                    layer.inputs.iter().map(|slot| slot.and_then(|t| values[t.0].as_deref())).collect();
                crate::ir::infer::values::fold(&layer.kind, &known, *dtype, shape)
            }
            _ => None,
        };
        for ((shape, value, _), &t) in outputs.into_iter().zip(&layer.outputs) {
            shapes[t.0] = shape;
            values[t.0] = value.or_else(|| folded.clone()).map(Arc::new);
        }
    }
    Ok(shapes)
}

/// TensorRT-style dims: fixed dims as numbers, dynamic ones as -1.
pub fn dims_with_wildcards(shape: &Shape) -> Vec<i64> {
    shape.dims().iter().map(|d| d.fixed().map_or(-1, |n| n as i64)).collect()
}

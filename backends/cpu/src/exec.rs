//! The executable: interprets a network layer by layer in its stored (topological) order.

use crate::control::{slice_along, stack_along};
use crate::kernels::{self, Variant};
use kiln::ir::control::{self, ControlFlow, DEFAULT_MAX_TRIP_COUNT};
use kiln::ir::infer::{infer_layer, Fact, OutFact};
use kiln::runtime::interp::{run_plan, top_level_frees, Machine};
use kiln::{BackendError, DataType, Executable, HostTensor, LayerId, LayerKind, Network, Shape};
use std::sync::Arc;

/// A network prepared for the cpu backend. Immutable once built, so it is shared freely
/// between threads; each [`Executable::execute`] call keeps its own tensor values.
#[derive(Debug)]
pub struct CpuExecutable {
    network: Network,
    /// The steps to run: the engine's lowered control flow (one block of every layer when
    /// the network has no loops or conditionals).
    plan: ControlFlow,
    /// Per top-level step, the tensors whose value is no longer needed once it has run.
    frees: Vec<Vec<usize>>,
    /// Per layer, the implementation its tactic selects (empty: primary everywhere).
    variants: Vec<Variant>,
}

impl CpuExecutable {
    /// Prepares a network; one that did not come through the builder is lowered here.
    pub fn new(network: Network) -> Result<CpuExecutable, BackendError> {
        let plan = match network.control_flow() {
            Some(plan) => plan.clone(),
            None => control::lower(&network, DEFAULT_MAX_TRIP_COUNT).map_err(|e| BackendError::Execution {
                layer: "(control flow)".into(),
                reason: e.to_string(),
            })?,
        };
        let frees = top_level_frees(&network, &plan.body.steps);
        Ok(CpuExecutable { network, plan, frees, variants: Vec::new() })
    }

    /// Runs each layer with the implementation the builder's tactic chose.
    pub fn with_variants(mut self, variants: Vec<Variant>) -> CpuExecutable {
        self.variants = variants;
        self
    }
}

impl Machine for CpuExecutable {
    type Value = Arc<HostTensor>;

    fn network(&self) -> &Network {
        &self.network
    }

    fn meta(&self, value: &Arc<HostTensor>) -> (DataType, Vec<usize>) {
        (value.dtype(), value.shape().to_vec())
    }

    /// Runs one layer: concrete facts from the input values, shape inference for the
    /// expected outputs, the kernel, and a check that the kernel produced what inference said.
    fn run_layer(&self, id: LayerId, values: &[Option<Arc<HostTensor>>]) -> Result<Vec<Arc<HostTensor>>, String> {
        let net = &self.network;
        let layer = net.layer(id);
        if let LayerKind::Constant { weights } = &layer.kind {
            // Weights are shared with the network, never copied.
            let w = net.weights().get(weights.0).ok_or_else(|| format!("weights blob #{} is missing", weights.0))?;
            if let Some(t) = layer.outputs.first() {
                check_output(&OutFact::new(net.tensor(*t).dtype, net.tensor(*t).shape.clone()), w)?;
            }
            return Ok(vec![w.clone()]);
        }
        let inputs: Vec<Option<&HostTensor>> = values.iter().map(|v| v.as_deref()).collect();
        let shapes: Vec<Option<Shape>> = inputs.iter().map(|x| x.map(|x| Shape::fixed(x.shape()))).collect();
        let facts: Vec<Option<Fact>> = inputs
            .iter()
            .zip(&shapes)
            .map(|(x, s)| x.zip(s.as_ref()).map(|(x, s)| Fact::new(x.dtype(), s, Some(x))))
            .collect();
        let expected = infer_layer(&layer.kind, &facts, &|w| net.weights_blob(w))
            .map_err(|e| format!("shape inference: {}", e.rule))?;
        let variant = self.variants.get(id.0).copied().unwrap_or_default();
        let outputs = kernels::run_with(&layer.kind, &inputs, &expected, variant)?;
        if outputs.len() != expected.len() || outputs.len() != layer.outputs.len() {
            return Err(format!(
                "the kernel produced {} outputs, inference expects {} and the layer has {}",
                outputs.len(),
                expected.len(),
                layer.outputs.len()
            ));
        }
        for (fact, out) in expected.iter().zip(&outputs) {
            check_output(fact, out)?;
        }
        Ok(outputs.into_iter().map(Arc::new).collect())
    }

    fn to_host(&self, value: &Arc<HostTensor>) -> Result<Arc<HostTensor>, String> {
        Ok(value.clone())
    }

    fn from_host(&self, tensor: Arc<HostTensor>) -> Result<Arc<HostTensor>, String> {
        Ok(tensor)
    }

    fn slice_along(&self, value: &Arc<HostTensor>, axis: usize, index: usize) -> Result<Arc<HostTensor>, String> {
        slice_along(value, axis, index).map(Arc::new)
    }

    fn stack_along(
        &self,
        parts: &[Arc<HostTensor>],
        axis: usize,
        length: usize,
        reverse: bool,
        dtype: DataType,
        slice_shape: &[usize],
    ) -> Result<Arc<HostTensor>, String> {
        stack_along(parts, axis, length, reverse, dtype, slice_shape).map(Arc::new)
    }
}

/// The kernel's output must have the inferred type and every inferred fixed dim.
fn check_output(fact: &OutFact, out: &HostTensor) -> Result<(), String> {
    let dims_match = fact.shape.rank() == out.shape().len()
        && fact.shape.dims().iter().zip(out.shape()).all(|(d, &n)| d.fixed().is_none_or(|f| f == n));
    if out.dtype() != fact.dtype || !dims_match {
        return Err(format!(
            "the kernel produced {}{:?} but shape inference expects {}{}",
            out.dtype(),
            out.shape(),
            fact.dtype,
            fact.shape
        ));
    }
    Ok(())
}

impl Executable for CpuExecutable {
    fn execute(&self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>, BackendError> {
        let values = inputs.iter().map(|x| Arc::new(x.clone())).collect();
        let outputs = run_plan(self, &self.plan, &self.frees, values)?;
        Ok(outputs.into_iter().map(|v| Arc::try_unwrap(v).unwrap_or_else(|shared| (*shared).clone())).collect())
    }
}

//! The executable: interprets a network layer by layer in its stored (topological) order.

use crate::control::{top_level_frees, Run};
use crate::kernels::{self, Variant};
use kiln::ir::control::{self, ControlFlow, DEFAULT_MAX_TRIP_COUNT};
use kiln::ir::infer::{infer_layer, Fact, OutFact};
use kiln::{BackendError, Executable, HostTensor, Layer, LayerId, LayerKind, Network, Shape};
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

    pub(crate) fn network(&self) -> &Network {
        &self.network
    }

    /// Runs one layer: concrete facts from the input values, shape inference for the
    /// expected outputs, the kernel, and a check that the kernel produced what inference said.
    pub(crate) fn run_layer(&self, id: LayerId, layer: &Layer, values: &[Option<Arc<HostTensor>>]) -> Result<Vec<Arc<HostTensor>>, String> {
        let net = &self.network;
        if let LayerKind::Constant { weights } = &layer.kind {
            // Weights are shared with the network, never copied.
            let w = net.weights().get(weights.0).ok_or_else(|| format!("weights blob #{} is missing", weights.0))?;
            if let Some(t) = layer.outputs.first() {
                check_output(&OutFact::new(net.tensor(*t).dtype, net.tensor(*t).shape.clone()), w)?;
            }
            return Ok(vec![w.clone()]);
        }
        let inputs = layer
            .inputs
            .iter()
            .map(|slot| match slot {
                None => Ok(None),
                Some(t) => values[t.0]
                    .as_deref()
                    .map(Some)
                    .ok_or_else(|| format!("input tensor `{}` has no value", net.tensor(*t).name)),
            })
            .collect::<Result<Vec<Option<&HostTensor>>, String>>()?;
        let shapes: Vec<Option<Shape>> = inputs.iter().map(|x| x.map(|x| Shape::fixed(x.shape()))).collect();
        let facts: Vec<Option<Fact>> = inputs
            .iter()
            .zip(&shapes)
            .map(|(x, s)| x.zip(s.as_ref()).map(|(x, s)| Fact { dtype: x.dtype(), shape: s, value: Some(x) }))
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
        let net = &self.network;
        let boundary = |reason: String| BackendError::Execution { layer: "(network inputs)".into(), reason };
        if inputs.len() != net.inputs().len() {
            return Err(boundary(format!("{} inputs given, the network takes {}", inputs.len(), net.inputs().len())));
        }
        let mut values: Vec<Option<Arc<HostTensor>>> = vec![None; net.tensors().len()];
        for (&t, x) in net.inputs().iter().zip(inputs) {
            let desc = net.tensor(t);
            let fits = x.dtype() == desc.dtype
                && x.shape().len() == desc.shape.rank()
                && desc.shape.dims().iter().zip(x.shape()).all(|(d, &n)| d.fixed().is_none_or(|f| f == n));
            if !fits {
                return Err(boundary(format!(
                    "input `{}` is {}{:?}, the network declares {}{}",
                    desc.name,
                    x.dtype(),
                    x.shape(),
                    desc.dtype,
                    desc.shape
                )));
            }
            values[t.0] = Some(Arc::new(x.clone()));
        }
        let mut run = Run::new(self, values, self.plan.max_trip_count);
        for (step, frees) in self.plan.body.steps.iter().zip(&self.frees) {
            run.step(step)?;
            for &t in frees {
                run.values[t] = None;
            }
        }
        let mut values = run.values;
        net.outputs()
            .iter()
            .map(|t| {
                let v = values[t.0].take().ok_or_else(|| BackendError::Execution {
                    layer: "(network outputs)".into(),
                    reason: format!("output `{}` was not computed", net.tensor(*t).name),
                })?;
                Ok(Arc::try_unwrap(v).unwrap_or_else(|shared| (*shared).clone()))
            })
            .collect()
    }
}

//! Shape and type inference of Plugin layers, from what the registered plugin reports.

use super::PluginKey;
use crate::ir::infer::{Fact, InferError, OutFact};
use crate::ir::layer::PluginParams;
use crate::ir::shape::Shape;

fn fail(rule: String) -> InferError {
    InferError { input: None, rule }
}

pub(crate) fn infer_plugin(params: &PluginParams, inputs: &[Option<Fact>]) -> Result<Vec<OutFact>, InferError> {
    let key = PluginKey::of(params);
    let plugin = params.plugin().map_err(|e| fail(e.to_string()))?;
    let facts = inputs
        .iter()
        .enumerate()
        .map(|(i, f)| {
            f.as_ref().ok_or_else(|| InferError { input: Some(i), rule: format!("plugin `{key}` needs input {i}") })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let dtypes: Vec<_> = facts.iter().map(|f| f.dtype).collect();
    let ranks: Vec<usize> = facts.iter().map(|f| f.shape.rank()).collect();
    let types = plugin.output_types(&dtypes).map_err(|e| fail(e.to_string()))?;
    let shapes = plugin.output_shapes(&ranks).map_err(|e| fail(e.to_string()))?;
    let n = params.num_outputs;
    if types.len() != n || shapes.len() != n {
        return Err(fail(format!(
            "plugin `{key}` is inconsistent: it has {n} outputs but reports {} output types and {} output shapes",
            types.len(),
            shapes.len()
        )));
    }
    let in_shapes: Vec<&Shape> = facts.iter().map(|f| f.shape).collect();
    types
        .into_iter()
        .zip(shapes)
        .enumerate()
        .map(|(o, (dtype, dims))| {
            let dims = dims
                .iter()
                .map(|d| d.eval(&in_shapes))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| fail(format!("plugin `{key}` output {o}: {e}")))?;
            Ok(OutFact::new(dtype, Shape(dims)))
        })
        .collect()
}

//! Plugin layers on the cpu: the registered plugin's cpu implementation, given zeroed
//! outputs of the inferred shapes and a zeroed workspace of the size it asked for.

use kiln::ir::infer::OutFact;
use kiln::plugin::{PluginKey, PluginTensorDesc};
use kiln::{HostTensor, PluginParams, TensorFormat};

pub fn plugin(params: &PluginParams, inputs: &[&HostTensor], outs: &[OutFact]) -> Result<Vec<HostTensor>, String> {
    let key = PluginKey::of(params);
    let plugin = params.plugin().map_err(|e| e.to_string())?;
    let mut outputs = outs
        .iter()
        .map(|o| {
            let dims =
                o.shape.as_fixed().ok_or_else(|| format!("plugin `{key}`: output shape {} is not known", o.shape))?;
            Ok(HostTensor::zeros(o.dtype, dims))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let desc = |t: &HostTensor| PluginTensorDesc {
        dtype: t.dtype(),
        format: TensorFormat::Linear,
        dims: t.shape().iter().map(|&d| Some(d)).collect(),
    };
    let io: Vec<PluginTensorDesc> = inputs.iter().map(|t| desc(t)).chain(outputs.iter().map(desc)).collect();
    let mut workspace =
        vec![0u8; usize::try_from(plugin.workspace_size(&io, inputs.len())).map_err(|e| e.to_string())?];
    match plugin.enqueue_cpu(0, inputs, &mut outputs, &mut workspace) {
        Some(result) => result.map_err(|e| e.to_string())?,
        None => return Err(format!("plugin `{key}` has no cpu implementation")),
    }
    Ok(outputs)
}

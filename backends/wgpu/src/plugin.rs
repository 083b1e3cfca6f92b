//! Plugin layers on wgpu: the plugin's own WGSL kernel (`wgsl_kernel` of the C ABI),
//! compiled once per plugin instance and I/O description, dispatched with the inputs then
//! the outputs bound at 0, 1, … of group 0.
//!
//! Like every value of this backend, a plugin's buffers hold one 32-bit word per element:
//! `f32` for float types (f16/bf16 widened), `i32` for signed integers (i64 narrowed),
//! `u32` for unsigned integers and bool (0/1).

use crate::ops::KResult;
use crate::value::{DeviceTensor, Recorder};
use kiln::plugin::{LayerPlugin, PluginKey, PluginTensorDesc, WgslKernel};
use kiln::{DataType, PluginParams, TensorFormat};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// A compiled plugin kernel and the dispatch size the plugin asked for.
struct Compiled {
    pipeline: Arc<wgpu::ComputePipeline>,
    workgroups: [u32; 3],
}

/// Kernels by plugin key, fields and I/O description; pipelines by entry point and source
/// (instances whose kernels are identical share one pipeline).
#[derive(Default)]
struct Cache {
    kernels: HashMap<String, Arc<Compiled>>,
    pipelines: HashMap<(String, String), Arc<wgpu::ComputePipeline>>,
}

fn cache() -> &'static Mutex<Cache> {
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// Why the wgpu backend cannot run a plugin layer, if it cannot.
pub fn unsupported(params: &PluginParams) -> Option<String> {
    match params.plugin() {
        Ok(plugin) if plugin.runs_on("wgpu") => None,
        Ok(_) => Some(format!("plugin `{}` has no WGSL kernel (wgsl_kernel is NULL)", PluginKey::of(params))),
        Err(e) => Some(e.to_string()),
    }
}

fn desc(dtype: DataType, shape: &[usize]) -> PluginTensorDesc {
    PluginTensorDesc { dtype, format: TensorFormat::Linear, dims: shape.iter().map(|&d| Some(d)).collect() }
}

/// Runs a plugin layer: outputs of the inferred types and shapes, written by the plugin's kernel.
pub fn plugin(
    rec: &Recorder,
    params: &PluginParams,
    ins: &[Option<DeviceTensor>],
    outs: &[(DataType, Vec<usize>)],
) -> KResult<Vec<DeviceTensor>> {
    let key = PluginKey::of(params);
    let fail = |m: String| kiln::invalid!("plugin `{key}`: {m}");
    let plugin = params.plugin().map_err(|e| kiln::invalid!("{e}"))?;
    let inputs = ins
        .iter()
        .enumerate()
        .map(|(i, t)| t.as_ref().ok_or_else(|| fail(format!("input {i} is missing (plugins take no optional inputs)"))))
        .collect::<KResult<Vec<_>>>()?;
    let io: Vec<PluginTensorDesc> =
        inputs.iter().map(|t| desc(t.dtype, &t.shape)).chain(outs.iter().map(|(d, s)| desc(*d, s))).collect();
    let compiled = compiled(rec, &key, params, plugin.as_ref(), &io, inputs.len())?;
    let outputs = outs
        .iter()
        .map(|(dtype, shape)| rec.alloc_standalone(*dtype, shape))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(e.to_string()))?;
    // Outputs in buffers of their own: the plugin's WGSL binds inputs read-only and
    // outputs read-write, which wgpu refuses within one (arena) buffer.
    let buffers: Vec<&crate::arena::Block> =
        inputs.iter().map(|t| &*t.buffer).chain(outputs.iter().map(|t| &*t.buffer)).collect();
    let what = format!("dispatching plugin `{key}`'s WGSL kernel");
    rec.dispatch_pipeline(&what, &compiled.pipeline, &buffers, compiled.workgroups).map_err(|e| fail(e.to_string()))?;
    Ok(outputs)
}

/// The plugin's kernel for this I/O description, asked for and compiled on first use.
fn compiled(
    rec: &Recorder,
    key: &PluginKey,
    params: &PluginParams,
    plugin: &dyn LayerPlugin,
    io: &[PluginTensorDesc],
    num_inputs: usize,
) -> KResult<Arc<Compiled>> {
    let cache_key = format!("{key}|{:?}|{io:?}", params.fields);
    if let Some(found) = cache().lock().unwrap_or_else(PoisonError::into_inner).kernels.get(&cache_key) {
        return Ok(found.clone());
    }
    let WgslKernel { source, entry_point, workgroups } = match plugin.wgsl_kernel(io, num_inputs) {
        Some(result) => result.map_err(|e| kiln::invalid!("{e}"))?,
        None => return Err(kiln::invalid!("plugin `{key}` has no WGSL kernel (wgsl_kernel is NULL)")),
    };
    let source_key = (entry_point.clone(), source.clone());
    let known = cache().lock().unwrap_or_else(PoisonError::into_inner).pipelines.get(&source_key).cloned();
    let pipeline = match known {
        Some(p) => p,
        None => {
            let label = format!("plugin {key} ({entry_point})");
            let p =
                Arc::new(rec.gpu.compile(&label, &entry_point, source).map_err(|e| format!("plugin `{key}`: {e}"))?);
            cache().lock().unwrap_or_else(PoisonError::into_inner).pipelines.insert(source_key, p.clone());
            p
        }
    };
    let compiled = Arc::new(Compiled { pipeline, workgroups });
    cache().lock().unwrap_or_else(PoisonError::into_inner).kernels.insert(cache_key, compiled.clone());
    Ok(compiled)
}

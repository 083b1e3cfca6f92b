//! Plugin layers on CUDA (FFI module: the plugin's kernel is launched here): the kernel a
//! plugin gives through `cuda_kernel` — PTX or CUBIN loaded with the driver, CUDA C++ source
//! compiled by kiln's NVRTC path for the device's architecture — launched on kiln's stream
//! with the plugin's grid, block and shared memory, arguments `(inputs…, outputs…, n)`: the
//! device pointers then the element count of the first output as a u64.
//!
//! Tensors keep their native element types on this backend (f16 is 2 bytes, i64 8 bytes).

use kiln::{invalid, DataType, KernelError, PluginParams, TensorFormat};
use crate::ops::KResult;
use crate::buffer::DeviceTensor;
use crate::device::Gpu;
use crate::ops::{Ctx, Value};
use cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use kiln::ir::infer::OutFact;
use kiln::plugin::{CudaImage, CudaKernel, PluginKey, PluginTensorDesc};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// A loaded plugin kernel and its launch configuration.
struct Loaded {
    function: CudaFunction,
    config: LaunchConfig,
}

/// Kernels by device context, plugin key, fields and I/O description.
fn cache() -> &'static Mutex<HashMap<String, Arc<Loaded>>> {
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<Loaded>>>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// Why the cuda backend cannot run a plugin layer, if it cannot.
pub fn unsupported(params: &PluginParams) -> Option<String> {
    match params.plugin() {
        Ok(plugin) if plugin.runs_on("cuda") => None,
        Ok(_) => Some(format!("plugin `{}` has no CUDA implementation (cuda_kernel is NULL)", PluginKey::of(params))),
        Err(e) => Some(e.to_string()),
    }
}

fn desc(dtype: DataType, shape: &[usize]) -> PluginTensorDesc {
    PluginTensorDesc { dtype, format: TensorFormat::Linear, dims: shape.iter().map(|&d| Some(d)).collect() }
}

/// Runs a plugin layer: fresh outputs of the inferred types and shapes, written by the
/// plugin's kernel on kiln's stream.
pub fn run(
    cx: &Ctx,
    params: &PluginParams,
    inputs: &[Option<Value>],
    outs: &[OutFact],
) -> KResult<Vec<DeviceTensor>> {
    let key = PluginKey::of(params);
    let fail = |m: String| invalid!("plugin `{key}`: {m}");
    let inputs = inputs
        .iter()
        .enumerate()
        .map(|(i, v)| {
            cx.dev(v.as_ref().ok_or_else(|| fail(format!("input {i} is missing (plugins take no optional inputs)")))?)
        })
        .collect::<KResult<Vec<_>>>()?;
    let outputs = outs
        .iter()
        .map(|o| {
            let shape = o.shape.as_fixed().ok_or_else(|| fail(format!("output shape {} is not known", o.shape)))?;
            cx.gpu.empty(o.dtype, shape).map_err(KernelError::from)
        })
        .collect::<KResult<Vec<_>>>()?;
    let io: Vec<PluginTensorDesc> = inputs.iter().chain(&outputs).map(|t| desc(t.dtype, &t.shape)).collect();
    let loaded = load(cx.gpu, &key, params, &io, inputs.len())?;
    let pointers: Vec<u64> = inputs.iter().chain(&outputs).map(|t| cx.gpu.ptr(&t.buf)).collect();
    let count = outputs.first().map_or(0, |t| t.len() as u64);
    if loaded.config.grid_dim.0 == 0 || loaded.config.grid_dim.1 == 0 || loaded.config.grid_dim.2 == 0 {
        return Ok(outputs);
    }
    let mut launch = cx.gpu.stream.launch_builder(&loaded.function);
    for p in &pointers {
        launch.arg(p);
    }
    launch.arg(&count);
    // SAFETY: the C ABI (kiln_cuda_kernel) fixes the kernel's parameters as one device pointer
    // per input then per output, followed by the u64 element count, which is what is pushed;
    // every pointer is to a live buffer of this context holding its tensor's elements in their
    // native types, and the buffers outlive the launch (the values are kept by the run). What
    // the kernel does within those buffers is the plugin's contract.
    unsafe { launch.launch(loaded.config) }.map_err(|e| fail(format!("cuLaunchKernel failed: {e:?}")))?;
    Ok(outputs)
}

/// The plugin's kernel for this I/O description on `gpu`, asked for and loaded on first use.
fn load(
    gpu: &Gpu,
    key: &PluginKey,
    params: &PluginParams,
    io: &[PluginTensorDesc],
    num_inputs: usize,
) -> KResult<Arc<Loaded>> {
    let cache_key = format!("{:p}|{key}|{:?}|{io:?}", Arc::as_ptr(&gpu.ctx), params.fields);
    if let Some(found) = cache().lock().unwrap_or_else(PoisonError::into_inner).get(&cache_key) {
        return Ok(found.clone());
    }
    let fail = |m: String| invalid!("plugin `{key}`: {m}");
    let plugin = params.plugin().map_err(|e| invalid!("{e}"))?;
    let CudaKernel { image, entry_point, grid, block, shared_memory_bytes } = match plugin.cuda_kernel(io, num_inputs) {
        Some(result) => result.map_err(|e| invalid!("{e}"))?,
        None => return Err(fail("has no CUDA kernel (cuda_kernel is NULL)".into())),
    };
    let ptx = match image {
        CudaImage::Ptx(text) => Ptx::from_src(text),
        CudaImage::Cubin(bytes) => Ptx::from_binary(bytes),
        CudaImage::Source(source) => {
            let name = format!("{}_{}.cu", key.namespace, key.name);
            Ptx::from_binary(
                crate::nvrtc::compile_cubin(&name, &source, &[], &gpu.arch).map_err(|e| fail(e.to_string()))?,
            )
        }
    };
    let module = gpu
        .ctx
        .load_module(ptx)
        .map_err(|e| fail(format!("loading its CUDA module failed (cuModuleLoadData): {e:?}")))?;
    let function = module
        .load_function(&entry_point)
        .map_err(|e| fail(format!("its module has no kernel `{entry_point}`: {e:?}")))?;
    let config = LaunchConfig {
        grid_dim: (grid[0], grid[1], grid[2]),
        block_dim: (block[0], block[1], block[2]),
        shared_mem_bytes: shared_memory_bytes,
    };
    let loaded = Arc::new(Loaded { function, config });
    cache().lock().unwrap_or_else(PoisonError::into_inner).insert(cache_key, loaded.clone());
    Ok(loaded)
}

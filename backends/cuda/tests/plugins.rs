//! Plugin layers on the CUDA backend: both example plugins' CUDA C++ kernels (compiled by
//! kiln's NVRTC path, launched on kiln's stream) through the network API and a
//! custom-domain ONNX model, built, serialized, loaded and run, checked against expected
//! values. Prints SKIPPED without a CUDA driver.
//!
//! The libraries: those of KILN_PLUGIN_PATH when it is set (the GPU machine has no Rust
//! toolchain: they are built beforehand and travel with the test), else both examples
//! built here with cargo and the C compiler.

use kiln::plugin::{registry, PluginKey};
use kiln::*;
use kiln_cuda::CudaBackend;
use kiln_plugins::examples;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The repository root: KILN_REPO on the GPU machine, else this checkout.
fn repo() -> PathBuf {
    std::env::var_os("KILN_REPO").map(PathBuf::from).unwrap_or_else(examples::repo_root)
}

fn backend() -> Option<CudaBackend> {
    let backend = CudaBackend::new();
    match backend.device() {
        Ok(_) => Some(backend),
        Err(e) => {
            eprintln!("SKIPPED: no CUDA driver/device: {e}");
            None
        }
    }
}

fn load_examples() {
    static LOADED: OnceLock<()> = OnceLock::new();
    LOADED.get_or_init(|| {
        if std::env::var_os(kiln_plugins::PLUGIN_PATH_VAR).is_some() {
            let (loaded, _) = kiln_plugins::load_from_env().expect("KILN_PLUGIN_PATH loads");
            assert!(!loaded.is_empty(), "KILN_PLUGIN_PATH names no plugin library");
        } else {
            let scratch = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
            let swish = examples::build_swish_example(env!("CARGO"), &scratch.join("swish-build")).unwrap();
            kiln_plugins::load_library(&swish).unwrap();
            kiln_plugins::load_library(&examples::build_clip_example("clip_cuda", &scratch, &[]).unwrap()).unwrap();
        }
        for name in ["Swish", "ClipC"] {
            assert!(registry().creator(&PluginKey::new("kiln.examples", name, "1")).is_some(), "{name} is loaded");
        }
    });
}

fn swish(x: f32, beta: f32) -> f32 {
    x / (1.0 + (-beta * x).exp())
}

fn feed(values: Vec<f32>, dims: Vec<usize>) -> HashMap<String, HostTensor> {
    HashMap::from([("x".to_string(), HostTensor::from_f32(dims, values).unwrap())])
}

fn round_trip(
    backend: &CudaBackend,
    net: &Network,
    config: &BuilderConfig,
    inputs: &HashMap<String, HostTensor>,
) -> Vec<f32> {
    let engine = Builder::new(backend).build(net, config).unwrap();
    assert!(!engine.plugins().is_empty(), "the engine records its plugins");
    let loaded = Engine::deserialize(&engine.serialize()).unwrap();
    let ctx = ExecutionContext::new(loaded, backend).unwrap();
    let out = ctx.run(inputs).unwrap();
    out.values().next().expect("one output").as_f32().unwrap().to_vec()
}

fn plugin_net(key: &PluginKey, fields: &[(String, PluginField)], dims: Shape) -> Network {
    let plugin = registry().creator(key).expect("registered").create(fields).expect("created");
    let mut net = Network::new("plugin");
    let x = net.add_input("x", DataType::F32, dims).unwrap();
    let layer = net.add_plugin_v3(&[x], plugin.clone()).unwrap();
    net.mark_output(net.output(layer, 0)).unwrap();
    net
}

fn assert_close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= 1e-5 * w.abs().max(1.0), "element {i}: got {g}, want {w}");
    }
}

#[test]
fn the_rust_plugin_runs_its_cuda_kernel_with_dynamic_shapes() {
    let Some(backend) = backend() else { return };
    load_examples();
    let key = PluginKey::new("kiln.examples", "Swish", "1");
    let net = plugin_net(
        &key,
        &[("beta".into(), PluginField::F32(vec![1.5]))],
        Shape(vec![Dim::Named("N".into()), Dim::Fixed(4)]),
    );
    let mut profile = OptimizationProfile::new();
    profile.set_dimensions("x", &[1, 4], &[2, 4], &[300, 4]);
    let config = BuilderConfig { profiles: vec![profile], ..BuilderConfig::default() };
    for rows in [3usize, 300] {
        let x: Vec<f32> = (0..rows * 4).map(|i| (i % 37) as f32 * 0.25 - 4.0).collect();
        let y = round_trip(&backend, &net, &config, &feed(x.clone(), vec![rows, 4]));
        assert_close(&y, &x.iter().map(|&v| swish(v, 1.5)).collect::<Vec<_>>());
    }
}

#[test]
fn the_c_plugin_runs_its_nvrtc_compiled_kernel_through_the_network_api() {
    let Some(backend) = backend() else { return };
    load_examples();
    let key = PluginKey::new("kiln.examples", "ClipC", "1");
    let fields = [("lo".into(), PluginField::F32(vec![-0.5])), ("hi".into(), PluginField::F32(vec![1.0]))];
    let net = plugin_net(&key, &fields, Shape::fixed(&[2, 3]));
    let y =
        round_trip(&backend, &net, &BuilderConfig::default(), &feed(vec![-2.0, -0.25, 0.0, 0.5, 1.0, 7.0], vec![2, 3]));
    assert_eq!(y, vec![-0.5, -0.25, 0.0, 0.5, 1.0, 1.0]);
}

#[test]
fn a_custom_domain_onnx_model_runs_both_plugins_on_cuda() {
    let Some(backend) = backend() else { return };
    load_examples();
    let net = kiln_onnx::import_file(&repo().join("plugins/examples/models/clip_swish.onnx")).expect("imports");
    let mut profile = OptimizationProfile::new();
    profile.set_dimensions("x", &[1, 3], &[2, 3], &[4, 3]);
    let config = BuilderConfig { profiles: vec![profile], ..BuilderConfig::default() };
    let x = vec![-3.0, -0.5, 0.25, 1.0, 2.5, 9.0];
    let y = round_trip(&backend, &net, &config, &feed(x.clone(), vec![2, 3]));
    assert_close(&y, &x.iter().map(|&v| swish(v.clamp(-1.0, 2.0), 1.5)).collect::<Vec<_>>());
}

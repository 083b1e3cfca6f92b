//! Plugin layers on the wgpu backend (lavapipe in CI): both example plugins' WGSL kernels
//! through the network API and a custom-domain ONNX model, built, serialized, loaded and
//! run; a plugin without a WGSL kernel and one whose kernel does not compile are clear
//! errors. Every test prints SKIPPED where no wgpu adapter exists.

use kiln::plugin::{registry, PluginKey};
use kiln::*;
use kiln_plugins::examples;
use kiln_wgpu::WgpuBackend;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::OnceLock;

fn scratch() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

/// The backend, or `None` (with a printed SKIPPED line) where no adapter exists.
fn backend() -> Option<WgpuBackend> {
    let backend = WgpuBackend::new();
    match backend.device() {
        Ok(_) => Some(backend),
        Err(e) => {
            eprintln!("SKIPPED: no wgpu adapter/driver: {e}");
            None
        }
    }
}

/// Both example libraries, loaded once for this test binary.
fn load_examples() {
    static LOADED: OnceLock<()> = OnceLock::new();
    LOADED.get_or_init(|| {
        let swish = examples::build_swish_example(env!("CARGO"), &scratch().join("swish-build")).unwrap();
        kiln_plugins::load_library(&swish).expect("the Rust example loads");
        let clip = examples::build_clip_example("clip_wgpu", &scratch(), &[]).unwrap();
        kiln_plugins::load_library(&clip).expect("the C example loads");
    });
}

fn swish(x: f32, beta: f32) -> f32 {
    x / (1.0 + (-beta * x).exp())
}

fn feed(values: Vec<f32>, dims: Vec<usize>) -> HashMap<String, HostTensor> {
    HashMap::from([("x".to_string(), HostTensor::from_f32(dims, values).unwrap())])
}

/// Builds on wgpu, serializes, loads and runs; the one output's values.
fn round_trip(
    backend: &WgpuBackend,
    net: &Network,
    config: &BuilderConfig,
    inputs: &HashMap<String, HostTensor>,
) -> Result<Vec<f32>, String> {
    let engine = Builder::new(backend).build(net, config).map_err(|e| e.to_string())?;
    assert!(!engine.plugins().is_empty(), "the engine records its plugins");
    let loaded = Engine::deserialize(&engine.serialize()).map_err(|e| e.to_string())?;
    let ctx = ExecutionContext::new(loaded, backend).map_err(|e| e.to_string())?;
    let out = ctx.run(inputs).map_err(|e| e.to_string())?;
    Ok(out.values().next().expect("one output").as_f32().unwrap().to_vec())
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
fn the_rust_plugin_runs_its_wgsl_kernel_with_dynamic_shapes() {
    let Some(backend) = backend() else { return };
    load_examples();
    let key = PluginKey::new("kiln.examples", "Swish", "1");
    let dims = Shape(vec![Dim::Named("N".into()), Dim::Fixed(4)]);
    let net = plugin_net(&key, &[("beta".into(), PluginField::F32(vec![1.5]))], dims);
    let mut profile = OptimizationProfile::new();
    profile.set_dimensions("x", &[1, 4], &[2, 4], &[300, 4]);
    let config = BuilderConfig { profiles: vec![profile], ..BuilderConfig::default() };
    // Two sizes: the kernel is asked for (and compiled) per I/O description; 1200
    // elements need more than one workgroup.
    for rows in [3usize, 300] {
        let x: Vec<f32> = (0..rows * 4).map(|i| (i % 37) as f32 * 0.25 - 4.0).collect();
        let y = round_trip(&backend, &net, &config, &feed(x.clone(), vec![rows, 4])).unwrap();
        assert_close(&y, &x.iter().map(|&v| swish(v, 1.5)).collect::<Vec<_>>());
    }
}

#[test]
fn the_c_plugin_runs_its_wgsl_kernel_through_the_network_api() {
    let Some(backend) = backend() else { return };
    load_examples();
    let key = PluginKey::new("kiln.examples", "ClipC", "1");
    let fields = [("lo".into(), PluginField::F32(vec![-0.5])), ("hi".into(), PluginField::F32(vec![1.0]))];
    let net = plugin_net(&key, &fields, Shape::fixed(&[2, 3]));
    let x = vec![-2.0, -0.25, 0.0, 0.5, 1.0, 7.0];
    let y = round_trip(&backend, &net, &BuilderConfig::default(), &feed(x, vec![2, 3])).unwrap();
    assert_eq!(y, vec![-0.5, -0.25, 0.0, 0.5, 1.0, 1.0]);
}

#[test]
fn a_custom_domain_onnx_model_runs_both_plugins_on_wgpu() {
    let Some(backend) = backend() else { return };
    load_examples();
    let model = examples::repo_root().join("plugins/examples/models/clip_swish.onnx");
    let net = kiln_onnx::import_file(&model).expect("imports");
    let mut profile = OptimizationProfile::new();
    profile.set_dimensions("x", &[1, 3], &[2, 3], &[4, 3]);
    let config = BuilderConfig { profiles: vec![profile], ..BuilderConfig::default() };
    let x = vec![-3.0, -0.5, 0.25, 1.0, 2.5, 9.0];
    let y = round_trip(&backend, &net, &config, &feed(x.clone(), vec![2, 3])).unwrap();
    assert_close(&y, &x.iter().map(|&v| swish(v.clamp(-1.0, 2.0), 1.5)).collect::<Vec<_>>());
}

#[test]
fn a_plugin_without_a_wgsl_kernel_is_refused_at_build_by_name() {
    let Some(backend) = backend() else { return };
    let lib = examples::build_clip_example(
        "clip_no_wgsl",
        &scratch(),
        &["-DKILN_TEST_NO_WGSL", "-DKILN_TEST_NAMESPACE=\"kiln.no_wgsl\""],
    )
    .unwrap();
    kiln_plugins::load_library(&lib).unwrap();
    let net = plugin_net(&PluginKey::new("kiln.no_wgsl", "ClipC", "1"), &[], Shape::fixed(&[3]));
    let err = Builder::new(&backend).build(&net, &BuilderConfig::default()).unwrap_err().to_string();
    assert!(err.contains("kiln.no_wgsl::ClipC@1") && err.contains("has no WGSL kernel"), "{err}");
}

#[test]
fn a_plugin_kernel_that_does_not_compile_fails_the_run_naming_the_plugin() {
    let Some(backend) = backend() else { return };
    let lib = examples::build_clip_example(
        "clip_bad_wgsl",
        &scratch(),
        &["-DKILN_TEST_BAD_WGSL", "-DKILN_TEST_NAMESPACE=\"kiln.bad_wgsl\""],
    )
    .unwrap();
    kiln_plugins::load_library(&lib).unwrap();
    let net = plugin_net(&PluginKey::new("kiln.bad_wgsl", "ClipC", "1"), &[], Shape::fixed(&[3]));
    let err = round_trip(&backend, &net, &BuilderConfig::default(), &feed(vec![1.0; 3], vec![3])).unwrap_err();
    assert!(err.contains("kiln.bad_wgsl::ClipC@1") && err.contains("compiling shader"), "{err}");
    // The device survives: a good plugin still runs afterwards.
    load_examples();
    let net = plugin_net(&PluginKey::new("kiln.examples", "ClipC", "1"), &[], Shape::fixed(&[2]));
    let y = round_trip(&backend, &net, &BuilderConfig::default(), &feed(vec![-1.0, 9.0], vec![2])).unwrap();
    assert_eq!(y, vec![0.0, 6.0]);
}

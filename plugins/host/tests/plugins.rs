//! Plugin libraries end to end on the cpu backend: the Rust example (built with the SDK)
//! and the C example (built here with the system C compiler), through the network API
//! and an ONNX model with custom-domain nodes, built, serialized, loaded and run; and
//! every bad-plugin case the issue lists.

use kiln::plugin::{registry, PluginKey};
use kiln::*;
use kiln_cpu::CpuBackend;
use kiln_plugins::examples;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

fn repo() -> PathBuf {
    examples::repo_root()
}

fn scratch() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

/// Compiles a C plugin (with extra `-D` flags) into a shared library.
fn build_c(name: &str, source: &Path, defines: &[&str]) -> PathBuf {
    examples::build_c_plugin(name, source, &scratch(), defines).unwrap()
}

fn clip_source() -> PathBuf {
    repo().join("plugins/examples/c-clip/clip.c")
}

/// The Rust example plugin as a cdylib, built by cargo like any plugin author's crate.
fn swish_library() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| examples::build_swish_example(env!("CARGO"), &scratch().join("swish-build")).unwrap()).clone()
}

/// Loads both example libraries once for the whole test binary.
fn load_examples() {
    static LOADED: OnceLock<()> = OnceLock::new();
    LOADED.get_or_init(|| {
        let swish = kiln_plugins::load_library(&swish_library()).expect("the Rust example loads");
        assert_eq!(swish.plugins, vec![PluginKey::new("kiln.examples", "Swish", "1")]);
        let clip = kiln_plugins::load_library(&build_c("clip", &clip_source(), &[])).expect("the C example loads");
        assert_eq!(clip.plugins, vec![PluginKey::new("kiln.examples", "ClipC", "1")]);
    });
}

fn swish(x: f32, beta: f32) -> f32 {
    x / (1.0 + (-beta * x).exp())
}

fn inputs(values: Vec<f32>, dims: Vec<usize>) -> HashMap<String, HostTensor> {
    HashMap::from([("x".to_string(), HostTensor::from_f32(dims, values).unwrap())])
}

/// Builds, serializes, loads and runs `net` on the cpu backend.
fn round_trip(net: &Network, config: &BuilderConfig, feed: &HashMap<String, HostTensor>) -> Result<Vec<f32>, String> {
    let backend = CpuBackend::new();
    let engine = Builder::new(&backend).build(net, config).map_err(|e| e.to_string())?;
    assert!(!engine.plugins().is_empty(), "the engine records its plugins");
    let loaded = Engine::deserialize(&engine.serialize()).map_err(|e| e.to_string())?;
    let ctx = ExecutionContext::new(loaded, &backend).map_err(|e| e.to_string())?;
    let out = ctx.run(feed).map_err(|e| e.to_string())?;
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

#[test]
fn the_rust_plugin_runs_through_the_network_api_with_dynamic_shapes() {
    load_examples();
    let key = PluginKey::new("kiln.examples", "Swish", "1");
    let net = plugin_net(
        &key,
        &[("beta".into(), PluginField::F32(vec![1.5]))],
        Shape(vec![Dim::Named("N".into()), Dim::Fixed(4)]),
    );
    let mut profile = OptimizationProfile::new();
    profile.set_dimensions("x", &[1, 4], &[2, 4], &[8, 4]);
    let config = BuilderConfig { profiles: vec![profile], ..BuilderConfig::default() };
    let x: Vec<f32> = (0..12).map(|i| i as f32 * 0.5 - 3.0).collect();
    let y = round_trip(&net, &config, &inputs(x.clone(), vec![3, 4])).unwrap();
    let expected: Vec<f32> = x.iter().map(|&v| swish(v, 1.5)).collect();
    assert_eq!(y, expected);
}

#[test]
fn the_c_plugin_runs_through_the_network_api() {
    load_examples();
    let key = PluginKey::new("kiln.examples", "ClipC", "1");
    let fields = [("lo".into(), PluginField::F32(vec![-0.5])), ("hi".into(), PluginField::F32(vec![1.0]))];
    let net = plugin_net(&key, &fields, Shape::fixed(&[2, 3]));
    let x = vec![-2.0, -0.25, 0.0, 0.5, 1.0, 7.0];
    let y = round_trip(&net, &BuilderConfig::default(), &inputs(x, vec![2, 3])).unwrap();
    assert_eq!(y, vec![-0.5, -0.25, 0.0, 0.5, 1.0, 1.0]);
}

#[test]
fn custom_domain_onnx_nodes_resolve_to_both_plugins() {
    load_examples();
    let net = kiln_onnx::import_file(&repo().join("plugins/examples/models/clip_swish.onnx")).expect("imports");
    let mut profile = OptimizationProfile::new();
    profile.set_dimensions("x", &[1, 3], &[2, 3], &[4, 3]);
    let config = BuilderConfig { profiles: vec![profile], ..BuilderConfig::default() };
    let x = vec![-3.0, -0.5, 0.25, 1.0, 2.5, 9.0];
    let y = round_trip(&net, &config, &inputs(x.clone(), vec![2, 3])).unwrap();
    let expected: Vec<f32> = x.iter().map(|&v| swish(v.clamp(-1.0, 2.0), 1.5)).collect();
    assert_eq!(y, expected);
}

#[test]
fn an_onnx_node_of_an_unregistered_domain_names_the_op_and_domain() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(repo().join("plugins/examples/models/clip_swish.onnx")).unwrap();
    // Same model, other domain: rewrite the domain bytes (same length keeps the protobuf valid).
    let text = bytes.windows(13).position(|w| w == b"kiln.examples").is_some();
    assert!(text);
    let renamed: Vec<u8> = replace_all(&bytes, b"kiln.examples", b"kiln.unknown_");
    let path = dir.path().join("m.onnx");
    std::fs::write(&path, renamed).unwrap();
    let err = kiln_onnx::import_file(&path).unwrap_err().to_string();
    assert!(err.contains("ClipC") && err.contains("kiln.unknown_"), "{err}");
}

fn replace_all(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i..].starts_with(from) {
            out.extend_from_slice(to);
            i += from.len();
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

// ---- bad plugins: each a clear error, and the host keeps running ----

#[test]
fn a_library_without_the_entry_point_is_refused_by_name() {
    let source = scratch().join("not_a_plugin.c");
    std::fs::write(&source, "int not_a_plugin(void) { return 42; }\n").unwrap();
    let lib = build_c("not_a_plugin", &source, &[]);
    let err = kiln_plugins::load_library(&lib).unwrap_err().to_string();
    assert!(err.contains("does not export `kiln_plugin_library_v1`") && err.contains("not_a_plugin"), "{err}");
    let err = kiln_plugins::load_library(&scratch().join("no_such_library.so")).unwrap_err().to_string();
    assert!(err.contains("cannot be opened") && err.contains("no_such_library.so"), "{err}");
}

#[test]
fn a_library_of_another_abi_version_is_refused_and_registers_nothing() {
    let lib = build_c(
        "clip_abi999",
        &clip_source(),
        &["-DKILN_TEST_ABI_VERSION=999", "-DKILN_TEST_NAMESPACE=\"kiln.abi999\""],
    );
    let err = kiln_plugins::load_library(&lib).unwrap_err().to_string();
    assert!(err.contains("ABI version 999") && err.contains("supports version 1"), "{err}");
    assert!(registry().creator(&PluginKey::new("kiln.abi999", "ClipC", "1")).is_none());
}

#[test]
fn loading_a_library_twice_is_refused_as_a_duplicate() {
    load_examples();
    let err = kiln_plugins::load_library(&swish_library()).unwrap_err().to_string();
    assert!(err.contains("kiln.examples::Swish@1") && err.contains("already registered"), "{err}");
}

#[test]
fn a_plugin_returning_an_error_fails_the_run_with_its_message() {
    load_examples();
    let key = PluginKey::new("kiln.examples", "ClipC", "1");
    let net = plugin_net(&key, &[("fail_enqueue".into(), PluginField::I32(vec![1]))], Shape::fixed(&[4]));
    let err = round_trip(&net, &BuilderConfig::default(), &inputs(vec![1.0; 4], vec![4])).unwrap_err();
    assert!(err.contains("ClipC refuses to run") && err.contains("kiln.examples::ClipC@1"), "{err}");
}

#[test]
fn a_panicking_plugin_becomes_an_error() {
    load_examples();
    let key = PluginKey::new("kiln.examples", "Swish", "1");
    let net = plugin_net(&key, &[("panic_on_enqueue".into(), PluginField::I32(vec![1]))], Shape::fixed(&[4]));
    let err = round_trip(&net, &BuilderConfig::default(), &inputs(vec![1.0; 4], vec![4])).unwrap_err();
    assert!(err.contains("the plugin panicked: Swish was asked to panic"), "{err}");
}

#[test]
fn a_plugin_reporting_inconsistent_shapes_is_refused_at_build() {
    let lib = build_c(
        "clip_bad_shapes",
        &clip_source(),
        &["-DKILN_TEST_BAD_SHAPES", "-DKILN_TEST_NAMESPACE=\"kiln.badshapes\""],
    );
    kiln_plugins::load_library(&lib).expect("loads: the inconsistency shows only when shapes are asked");
    let key = PluginKey::new("kiln.badshapes", "ClipC", "1");
    let plugin = registry().creator(&key).unwrap().create(&[]).unwrap();
    let mut net = Network::new("bad");
    let x = net.add_input("x", DataType::F32, Shape::fixed(&[2])).unwrap();
    let err = match net.add_plugin_v3(&[x], plugin.clone()) {
        Err(e) => e.to_string(),
        Ok(layer) => {
            net.mark_output(net.output(layer, 0)).unwrap();
            Builder::new(&CpuBackend::new()).build(&net, &BuilderConfig::default()).unwrap_err().to_string()
        }
    };
    assert!(err.contains("kiln.badshapes::ClipC@1") && err.contains("input 3 does not exist"), "{err}");
}

#[test]
fn an_engine_needing_an_unloaded_plugin_names_it_when_loaded() {
    let lib = build_c("clip_missing", &clip_source(), &["-DKILN_TEST_NAMESPACE=\"kiln.soon_gone\""]);
    kiln_plugins::load_library(&lib).unwrap();
    let key = PluginKey::new("kiln.soon_gone", "ClipC", "1");
    let net = plugin_net(&key, &[], Shape::fixed(&[3]));
    let engine = Builder::new(&CpuBackend::new()).build(&net, &BuilderConfig::default()).unwrap();
    assert_eq!(engine.plugins(), vec![key.clone()]);
    let bytes = engine.serialize();
    assert!(registry().deregister(&key));
    let err = Engine::deserialize(&bytes).unwrap_err();
    assert_eq!(err, EngineLoadError::MissingPlugins(vec!["kiln.soon_gone::ClipC@1".into()]));
    assert!(err.to_string().contains("--plugins or KILN_PLUGIN_PATH"));
}

#[test]
fn plugin_path_lists_files_and_the_libraries_of_folders() {
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join(format!("liba.{}", std::env::consts::DLL_EXTENSION));
    std::fs::write(&lib, b"").unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"").unwrap();
    let joined = std::env::join_paths([dir.path(), Path::new("/x/libexplicit.so")]).unwrap();
    let libs = kiln_plugins::plugin_path_libraries(joined.to_str().unwrap()).unwrap();
    assert_eq!(libs, vec![lib, PathBuf::from("/x/libexplicit.so")]);
}

//! The engine inspector (seed §6.12) at each profiling verbosity.

use kiln::*;
use kiln_cpu::CpuBackend;
use serde_json::{json, Value};
use std::collections::HashMap;

fn conv_network(batch: Dim) -> Network {
    let mut net = Network::new("inspect");
    let x = net.add_input("x", DataType::F32, Shape(vec![batch, Dim::Fixed(2), Dim::Fixed(4), Dim::Fixed(4)])).unwrap();
    let conv = net.add_convolution(x, 3, &[3, 3], TensorData::F32(vec![0.5; 54]), Some(TensorData::F32(vec![0.0; 3]))).unwrap();
    net.set_layer_name(conv, "conv1");
    let relu = net.add_activation(net.output(conv, 0), ActivationKind::Relu).unwrap();
    net.set_layer_name(relu, "relu1");
    net.set_tensor_name(net.output(relu, 0), "y").unwrap();
    net.mark_output(net.output(relu, 0)).unwrap();
    net
}

/// Built unoptimized, so the inspector shows the convolution's own parameters (the fused
/// engine is checked in `fused_layers_keep_the_names_of_what_they_fused`).
fn engine(net: &Network, verbosity: ProfilingVerbosity) -> Engine {
    let config =
        BuilderConfig { profiling_verbosity: verbosity, optimization: Optimization::None, ..BuilderConfig::default() };
    let engine = Builder::new(&CpuBackend::new()).build(net, &config).unwrap();
    // What the inspector sees survives the engine file.
    Engine::deserialize(&engine.serialize()).unwrap()
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[test]
fn none_shows_nothing() {
    let engine = engine(&conv_network(Dim::Fixed(1)), ProfilingVerbosity::None);
    let inspector = EngineInspector::new(&engine);
    assert_eq!(inspector.get_engine_information(LayerInformationFormat::Json), "{}");
    assert_eq!(inspector.get_engine_information(LayerInformationFormat::Text), "");
    assert_eq!(inspector.get_layer_information(0, LayerInformationFormat::Json).unwrap(), "{}");
}

#[test]
fn layer_names_only_is_the_default() {
    assert_eq!(BuilderConfig::default().profiling_verbosity, ProfilingVerbosity::LayerNamesOnly);
    let engine = engine(&conv_network(Dim::Fixed(1)), ProfilingVerbosity::default());
    let inspector = EngineInspector::new(&engine);
    let names: Vec<String> = engine.network().layers().iter().map(|l| l.name.clone()).collect();
    assert_eq!(
        parse(&inspector.get_engine_information(LayerInformationFormat::Json)),
        json!({ "Layers": names, "Bindings": ["x", "y"] })
    );
    let conv = names.iter().position(|n| n == "conv1").unwrap();
    assert_eq!(inspector.get_layer_information(conv, LayerInformationFormat::Text).unwrap(), "conv1\n");
    assert_eq!(parse(&inspector.get_layer_information(conv, LayerInformationFormat::Json).unwrap()), json!("conv1"));
    let text = inspector.get_engine_information(LayerInformationFormat::Text);
    assert!(text.starts_with(&format!("{}\n", names[0])) && text.ends_with("Bindings: x, y\n"), "{text}");
    let err = inspector.get_layer_information(99, LayerInformationFormat::Json).unwrap_err();
    assert!(err.to_string().contains("99") && err.to_string().contains(&names.len().to_string()), "{err}");
}

#[test]
fn detailed_shows_the_seeds_fields() {
    let engine = engine(&conv_network(Dim::Fixed(1)), ProfilingVerbosity::Detailed);
    let inspector = EngineInspector::new(&engine);
    let conv = engine.network().layers().iter().position(|l| l.name == "conv1").unwrap();
    let info = parse(&inspector.get_layer_information(conv, LayerInformationFormat::Json).unwrap());
    let kernel = engine.network().layers()[conv].inputs[1].map(|t| engine.network().tensor(t).name.clone()).unwrap();
    let bias = engine.network().layers()[conv].inputs[2].map(|t| engine.network().tensor(t).name.clone()).unwrap();
    let linear = "Row major linear FP32 format";
    // The tactic the builder timed fastest (cpu offers two for a convolution), named and
    // valued by its id, and both candidates with their times.
    let chosen = engine.tactics()[conv].clone().expect("a tactic was chosen");
    let mut info = info;
    let timed = info.as_object_mut().unwrap().remove("TimedTactics").expect("the timed candidates are listed");
    let timed: Vec<(String, f64)> =
        timed.as_array().unwrap().iter().map(|t| (t["Tactic"].as_str().unwrap().to_string(), t["TimeMs"].as_f64().unwrap())).collect();
    assert_eq!(timed.len(), 2, "{timed:?}");
    assert!(timed.iter().all(|(_, ms)| *ms > 0.0), "{timed:?}");
    let fastest = timed.iter().min_by(|a, b| a.1.total_cmp(&b.1)).unwrap();
    assert_eq!(fastest.0, chosen.to_string(), "the fastest candidate was chosen");
    assert_eq!(
        info,
        json!({
            "Name": "conv1",
            "LayerType": "Convolution",
            "Inputs": [
                { "Name": "x", "Dimensions": [1, 2, 4, 4], "Format/Datatype": linear },
                { "Name": kernel, "Dimensions": [3, 2, 3, 3], "Format/Datatype": linear },
                { "Name": bias, "Dimensions": [3], "Format/Datatype": linear },
            ],
            "Outputs": [{ "Name": "(Convolution) [0] output", "Dimensions": [1, 3, 2, 2], "Format/Datatype": linear }],
            "ParameterType": "Convolution",
            "Kernel": [3, 3],
            "PaddingMode": "kEXPLICIT_ROUND_DOWN",
            "PrePadding": [0, 0],
            "PostPadding": [0, 0],
            "Stride": [1, 1],
            "Dilation": [1, 1],
            "OutMaps": 3,
            "Groups": 1,
            "Weights": { "Type": "FP32", "Count": 54 },
            "Bias": { "Type": "FP32", "Count": 3 },
            "HasBias": 1,
            "AllowSparse": 0,
            "Activation": "NONE",
            "HasReLU": 0,
            "TacticName": chosen.name,
            "TacticValue": format!("0x{:016x}", chosen.hash),
        })
    );
    let relu = parse(&inspector.get_layer_information(conv + 1, LayerInformationFormat::Json).unwrap());
    assert_eq!(relu["Parameters"], json!({ "kind": "Relu" }));
    let all = parse(&inspector.get_engine_information(LayerInformationFormat::Json));
    assert_eq!(all["Layers"].as_array().unwrap().len(), engine.network().layers().len());
    assert_eq!(all["Layers"][conv]["TacticValue"], info["TacticValue"]);
    assert_eq!(all["Layers"][conv]["TimedTactics"].as_array().map(Vec::len), Some(2));
    let text = inspector.get_layer_information(conv, LayerInformationFormat::Text).unwrap();
    assert!(text.contains("Name: conv1\n") && text.contains("  x [1,2,4,4] Row major linear FP32 format\n"), "{text}");
    assert!(text.contains(&format!("TimedTactics:\n  {}", timed[0].0)), "{text}");
}

#[test]
fn an_inspector_never_shows_more_than_the_engine_recorded() {
    let engine = engine(&conv_network(Dim::Fixed(1)), ProfilingVerbosity::LayerNamesOnly);
    let mut inspector = EngineInspector::new(&engine);
    inspector.limit_verbosity(ProfilingVerbosity::Detailed);
    assert_eq!(inspector.verbosity(), ProfilingVerbosity::LayerNamesOnly);
    inspector.limit_verbosity(ProfilingVerbosity::None);
    assert_eq!(inspector.get_engine_information(LayerInformationFormat::Json), "{}");
}

#[test]
fn dynamic_dims_show_as_minus_one_until_input_shapes_are_set() {
    let engine = engine(&conv_network(Dim::Named("N".into())), ProfilingVerbosity::Detailed);
    let conv = engine.network().layers().iter().position(|l| l.name == "conv1").unwrap();
    let mut inspector = EngineInspector::new(&engine);
    let info = parse(&inspector.get_layer_information(conv, LayerInformationFormat::Json).unwrap());
    assert_eq!(info["Inputs"][0], json!({ "Name": "x", "Dimensions": [-1, 2, 4, 4] }), "no format for dynamic shapes");
    assert_eq!(info["Outputs"][0]["Dimensions"], json!([-1, 3, 2, 2]));
    let bad: HashMap<String, Vec<usize>> = [("x".to_string(), vec![5, 3, 4, 4])].into_iter().collect();
    assert!(inspector.set_input_shapes(&bad).is_err(), "channels are fixed at 2");
    let unknown: HashMap<String, Vec<usize>> = [("w".to_string(), vec![1])].into_iter().collect();
    assert!(inspector.set_input_shapes(&unknown).is_err());
    inspector.set_input_shapes(&[("x".to_string(), vec![5, 2, 4, 4])].into_iter().collect()).unwrap();
    let info = parse(&inspector.get_layer_information(conv, LayerInformationFormat::Json).unwrap());
    assert_eq!(info["Inputs"][0], json!({ "Name": "x", "Dimensions": [5, 2, 4, 4], "Format/Datatype": "Row major linear FP32 format" }));
    assert_eq!(info["Outputs"][0]["Dimensions"], json!([5, 3, 2, 2]));
}

#[test]
fn vectorized_boundary_tensors_show_logical_dims_and_their_format() {
    let mut net = Network::new("io");
    let x = net.add_input("x", DataType::F16, [1, 3, 2, 2]).unwrap();
    let relu = net.add_activation(x, ActivationKind::Relu).unwrap();
    net.mark_output(net.output(relu, 0)).unwrap();
    net.set_allowed_formats(x, FormatMask::of(&[TensorFormat::Chw4])).unwrap();
    let engine = engine(&net, ProfilingVerbosity::Detailed);
    let inspector = EngineInspector::new(&engine);
    let info = parse(&inspector.get_layer_information(0, LayerInformationFormat::Json).unwrap());
    assert_eq!(info["LayerType"], "Reformat");
    assert_eq!(
        info["Inputs"][0],
        json!({ "Name": "x", "Dimensions": [1, 3, 2, 2], "Format/Datatype": "Four wide channel vectorized row major FP16 format" })
    );
}

#[test]
fn fused_layers_keep_the_names_of_what_they_fused() {
    let config = BuilderConfig { profiling_verbosity: ProfilingVerbosity::Detailed, ..BuilderConfig::default() };
    let engine = Builder::new(&CpuBackend::new()).build(&conv_network(Dim::Fixed(1)), &config).unwrap();
    let inspector = EngineInspector::new(&engine);
    let info = parse(&inspector.get_engine_information(LayerInformationFormat::Json));
    let names: Vec<&str> = info["Layers"].as_array().unwrap().iter().filter_map(|l| l["Name"].as_str()).collect();
    assert!(names.iter().any(|n| n.starts_with("conv1 + ") && n.ends_with("relu1")), "{names:?}");
}

#[test]
fn an_attached_execution_context_resolves_dynamic_dims() {
    let engine = engine(&conv_network(Dim::Named("N".into())), ProfilingVerbosity::Detailed);
    let conv = engine.network().layers().iter().position(|l| l.name == "conv1").unwrap();
    let mut context = ExecutionContext::new(engine.clone(), &CpuBackend::new()).unwrap();
    context.set_input_shape("x", &[3, 2, 4, 4]).unwrap();
    let mut inspector = EngineInspector::new(&engine);
    inspector.set_execution_context(&context).unwrap();
    let info = parse(&inspector.get_layer_information(conv, LayerInformationFormat::Json).unwrap());
    assert_eq!(info["Outputs"][0]["Dimensions"], json!([3, 3, 2, 2]));
}

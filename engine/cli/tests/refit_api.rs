//! Refitting engines through the library (seed §6.2): an engine built from weights A and
//! refitted to weights B is the engine built from B (its network and weights exactly, on
//! cpu), for CNNs whose BatchNorms fold into convolutions, transformers (fused attention,
//! LayerNorm, GELU), weight-standardized convolutions and a loop body with weights; every
//! failure path is an error naming what is wrong.

mod common;
#[path = "../../onnx/tests/common/new_weights.rs"]
mod new_weights;

use common::conv_bn::conv_bn_model;
use common::*;
use new_weights::{changed_weights, constant, with_weights};
use kiln::refit::{RefitError, Refitter, WeightsRole};
use kiln::{Backend, Builder, BuilderConfig, BuilderFlag, DataType, Dim, Engine, HostTensor, LayerKind, Network, PreparedEngine, RunError, TensorData};
use kiln_cpu::CpuBackend;
use std::collections::HashMap;

fn build(net: &Network, flags: &[BuilderFlag], backend: &dyn Backend) -> Engine {
    let mut config = BuilderConfig::default();
    for &flag in flags {
        config.set_flag(flag);
    }
    Builder::new(backend).build(net, &config).expect("build")
}

fn import(relative: &str) -> Network {
    kiln_onnx::import_file(&repo_path(relative)).expect("import")
}

/// Every refittable weight of the engine with more than one element, changed (scalars are
/// hyperparameters: GELU's 0.5, epsilons, which decide fusions).
fn new_weights(engine: &Engine) -> Vec<(String, HostTensor)> {
    let source = engine.refit_source().expect("refittable").network();
    changed_weights(source, &Refitter::new(engine).unwrap().get_all_weights())
}

/// Deterministic inputs at the engine's shapes (dynamic dims 2; ints 0 and 1: valid token
/// ids and masks).
fn inputs(engine: &Engine) -> HashMap<String, HostTensor> {
    let net = engine.network();
    net.inputs()
        .iter()
        .map(|&t| {
            let d = net.tensor(t);
            let dims: Vec<usize> = d.shape.dims().iter().map(|dim| if let Dim::Fixed(n) = dim { *n } else { 2 }).collect();
            let n: usize = dims.iter().product();
            let data = match d.dtype {
                DataType::F32 => TensorData::F32((0..n).map(|i| (i as f32 * 0.37).sin()).collect()),
                DataType::I64 => TensorData::I64((0..n).map(|i| (i % 2) as i64).collect()),
                other => panic!("fixture input of type {other}"),
            };
            (d.name.clone(), HostTensor::new(dims, data).unwrap())
        })
        .collect()
}

fn run(engine: &Engine, backend: &dyn Backend, inputs: &HashMap<String, HostTensor>) -> Vec<Vec<f64>> {
    let prepared = PreparedEngine::new(engine.clone(), backend).expect("prepare");
    let outputs = prepared.create_execution_context().run(inputs).expect("run");
    outputs.values().map(|t| t.to_f64_vec()).collect()
}

fn assert_outputs_close(got: &[Vec<f64>], want: &[Vec<f64>], tolerance: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.len(), w.len(), "{what}");
        for (i, (a, b)) in g.iter().zip(w).enumerate() {
            assert!((a - b).abs() <= tolerance * b.abs().max(1.0), "{what}: element {i}: {a} vs {b}");
        }
    }
}

/// The property every model must have: refit(A → B) is build(B), network and weights.
fn refit_is_rebuild(relative: &str) {
    let cpu = CpuBackend::new();
    let net_a = import(relative);
    // Through its file: the loaded source network must rewrite as the original did.
    let mut engine = Engine::deserialize(&build(&net_a, &[BuilderFlag::Refit], &cpu).serialize()).unwrap();
    let x = inputs(&engine);
    let before = run(&engine, &cpu, &x);
    let weights = new_weights(&engine);
    assert!(!weights.is_empty(), "{relative}: no weights to refit");
    let rebuilt = build(&with_weights(&net_a, &weights), &[BuilderFlag::Refit], &cpu);

    let mut refitter = Refitter::new(&engine).unwrap();
    for (name, w) in &weights {
        refitter.set_named_weights(name, w.clone()).unwrap();
    }
    assert!(refitter.get_missing_weights().is_empty());
    let changed = refitter.refit_engine(&mut engine, &cpu).unwrap();
    assert!(changed > 0, "{relative}");

    assert_eq!(engine.network().dump(), rebuilt.network().dump(), "{relative}: structure");
    for (i, (got, want)) in engine.network().weights().iter().zip(rebuilt.network().weights()).enumerate() {
        assert!(got.as_ref() == want.as_ref(), "{relative}: built weights blob #{i} differs from the rebuild's");
    }
    let after = run(&engine, &cpu, &x);
    // Tactics were timed separately: a convolution may sum in another order.
    assert_outputs_close(&after, &run(&rebuilt, &cpu, &x), 1e-5, relative);
    assert!(after != before, "{relative}: the refit changed no output");
}

#[test]
fn refitted_pytorch_cnns_are_the_engines_built_from_the_new_weights() {
    refit_is_rebuild("tests/data/pytorch/cnn_torchscript.onnx");
    refit_is_rebuild("tests/data/pytorch/cnn_dynamo.onnx");
}

#[test]
fn refitted_dynamic_shape_exports_are_rebuilds() {
    refit_is_rebuild("tests/data/zoo/vit_dynamo_dynamic/model.onnx");
    refit_is_rebuild("tests/data/zoo/vit_legacy_dynamic/model.onnx");
}

#[test]
fn refitted_transformers_are_the_engines_built_from_the_new_weights() {
    refit_is_rebuild("tests/data/pytorch/bert_torchscript.onnx");
    refit_is_rebuild("tests/data/pytorch/bert_dynamo.onnx");
    refit_is_rebuild("tests/data/zoo/vit_legacy_static/model.onnx");
}

#[test]
fn refitted_weight_standardized_convolutions_and_loop_bodies_are_rebuilds() {
    // NF-Net standardizes its filters with graph operations over the weights: folded at build.
    refit_is_rebuild("tests/data/zoo/nfnet_legacy_static/model.onnx");
    // An RNN-style loop whose body multiplies by two weight matrices.
    refit_is_rebuild("tests/data/pytorch/loop_list.onnx");
}

#[test]
fn batch_norm_parameters_refit_the_convolution_they_fold_into() {
    let cpu = CpuBackend::new();
    let (a, b) = (kiln_onnx::import_bytes(&conv_bn_model(0.0), None).unwrap(), kiln_onnx::import_bytes(&conv_bn_model(3.0), None).unwrap());
    let mut engine = build(&a, &[BuilderFlag::Refit], &cpu);
    let rebuilt = build(&b, &[BuilderFlag::Refit], &cpu);
    // The BatchNorm folded away: the engine has no layer computing it.
    assert!(engine.network().layers().iter().all(|l| !l.name.contains("bn")), "{}", engine.network().dump());
    let mut refitter = Refitter::new(&engine).unwrap();
    let all = refitter.get_all_weights();
    for name in ["bn.bias", "bn.running_mean", "bn.running_var", "bn.weight", "conv.weight", "fc.bias", "fc.weight"] {
        assert!(all.iter().any(|n| n == name), "{name} in {all:?}");
    }
    for name in ["bn.weight", "bn.running_mean", "bn.running_var"] {
        refitter.set_named_weights(name, constant(&b, name).unwrap()).unwrap();
    }
    // The filter by its convolution's role, the rest by name.
    let (conv, _) = refitter.get_all().into_iter().find(|(_, role)| *role == WeightsRole::Kernel).expect("a kernel role");
    refitter.set_weights(&conv, WeightsRole::Kernel, constant(&b, "conv.weight").unwrap()).unwrap();
    for name in ["bn.bias", "fc.weight", "fc.bias"] {
        refitter.set_named_weights(name, constant(&b, name).unwrap()).unwrap();
    }
    refitter.refit_engine(&mut engine, &cpu).unwrap();
    for (got, want) in engine.network().weights().iter().zip(rebuilt.network().weights()) {
        assert!(got.as_ref() == want.as_ref(), "a folded weight differs from the rebuild's");
    }
    let x = inputs(&engine);
    // The weights are bit-exact (above); the outputs only to rounding: each build times the
    // cpu convolution's tactics, and under load two builds may pick different summation orders.
    assert_close(&run(&engine, &cpu, &x), &run(&rebuilt, &cpu, &x));
}

#[test]
fn a_prepared_engine_is_refitted_in_place_once_no_context_uses_it() {
    let cpu = CpuBackend::new();
    let a = kiln_onnx::import_bytes(&conv_bn_model(0.0), None).unwrap();
    let b = kiln_onnx::import_bytes(&conv_bn_model(5.0), None).unwrap();
    let engine = build(&a, &[BuilderFlag::Refit], &cpu);
    let x = inputs(&engine);
    let want = run(&build(&b, &[], &cpu), &cpu, &x);
    let mut prepared = PreparedEngine::new(engine, &cpu).unwrap();
    let mut refitter = Refitter::new(prepared.engine()).unwrap();
    for name in refitter.get_all_weights() {
        refitter.set_named_weights(&name, constant(&b, &name).unwrap()).unwrap();
    }
    let context = prepared.create_execution_context();
    assert_eq!(refitter.refit_prepared(&mut prepared, &cpu), Err(RefitError::InUse));
    drop(context);
    refitter.refit_prepared(&mut prepared, &cpu).unwrap();
    let got: Vec<Vec<f64>> = prepared.create_execution_context().run(&x).unwrap().values().map(|t| t.to_f64_vec()).collect();
    // The rebuild times its tactics anew and may sum in another order: equal to rounding.
    assert_close(&got, &want);
    // The host engine follows: its file holds the new weights.
    let reloaded = Engine::deserialize(&prepared.engine().serialize()).unwrap();
    assert_close(&run(&reloaded, &cpu, &x), &want);
}

#[test]
fn weight_stripped_engines_run_only_once_refitted_and_then_match_the_full_build() {
    let cpu = CpuBackend::new();
    let net = import("tests/data/zoo/vit_legacy_static/model.onnx");
    let full = build(&net, &[BuilderFlag::Refit], &cpu);
    let stripped_bytes = build(&net, &[BuilderFlag::Refit, BuilderFlag::StripWeights], &cpu).serialize();
    let full_bytes = full.serialize();
    // Every large float weight is gone from the file (the built ones and their sources).
    let large: Vec<usize> = full.network().weights().iter().filter(|w| w.len() >= kiln::refit::STRIP_MIN_ELEMENTS).map(|w| w.size_bytes()).collect();
    let (large, count) = (large.iter().sum::<usize>(), large.len());
    assert!(large > 0);
    // Each weight left out is still described (a few bytes of shape and type).
    assert!(stripped_bytes.len() + large <= full_bytes.len() + 16 * count, "stripped {} + {large} ({count} weights) vs full {}", stripped_bytes.len(), full_bytes.len());

    let mut stripped = Engine::deserialize(&stripped_bytes).unwrap();
    assert!(stripped.is_weight_stripped());
    assert!(matches!(PreparedEngine::new(stripped.clone(), &cpu), Err(RunError::WeightStripped)));
    let mut refitter = Refitter::new(&stripped).unwrap();
    let missing = refitter.get_missing_weights();
    assert!(!missing.is_empty() && missing.len() < refitter.get_all_weights().len(), "{missing:?}");
    assert!(matches!(refitter.refit_engine(&mut stripped.clone(), &cpu), Err(RefitError::Missing(m)) if m == missing));
    // Exactly the missing weights complete it.
    let source = net.clone();
    for name in &missing {
        refitter.set_named_weights(name, constant(&source, name).unwrap()).unwrap();
        assert!(!refitter.get_missing_weights().contains(name));
    }
    assert!(refitter.get_missing_weights().is_empty());
    refitter.refit_engine(&mut stripped, &cpu).unwrap();
    assert!(!stripped.is_weight_stripped());
    for (got, want) in stripped.network().weights().iter().zip(full.network().weights()) {
        assert!(got.as_ref() == want.as_ref());
    }
    let x = inputs(&full);
    assert_outputs_close(&run(&stripped, &cpu, &x), &run(&full, &cpu, &x), 1e-5, "refitted stripped engine");
    // Its file now holds the weights.
    assert!(stripped.serialize().len() >= full_bytes.len() - 64);
}

#[test]
fn refit_errors_name_what_is_wrong() {
    let cpu = CpuBackend::new();
    let net = kiln_onnx::import_bytes(&conv_bn_model(0.0), None).unwrap();
    assert_eq!(Refitter::new(&build(&net, &[], &cpu)).unwrap_err(), RefitError::NotRefittable);
    let mut config = BuilderConfig::default();
    config.set_flag(BuilderFlag::StripWeights);
    let err = Builder::new(&cpu).build(&net, &config).unwrap_err();
    assert!(err.to_string().contains("STRIP_WEIGHTS needs REFIT"), "{err}");

    let engine = build(&net, &[BuilderFlag::Refit], &cpu);
    let mut refitter = Refitter::new(&engine).unwrap();
    let mut mnist = build(&import("examples/models/mnist.onnx"), &[BuilderFlag::Refit], &cpu);
    assert_eq!(refitter.refit_engine(&mut mnist, &cpu), Err(RefitError::OtherEngine));
    let fc = constant(&net, "fc.bias").unwrap();
    assert_eq!(refitter.set_named_weights("fc.bias.nope", fc.clone()), Err(RefitError::UnknownWeights("fc.bias.nope".into())));
    let wrong_shape = HostTensor::from_f32(vec![5], vec![0.0; 5]).unwrap();
    let err = refitter.set_named_weights("fc.bias", wrong_shape).unwrap_err();
    assert_eq!(err.to_string(), "weights `fc.bias` are f32[4]; the new ones are f32[5]");
    let wrong_type = HostTensor::new(vec![4], TensorData::F64(vec![0.0; 4])).unwrap();
    assert!(matches!(refitter.set_named_weights("fc.bias", wrong_type), Err(RefitError::Mismatch { .. })));
    assert_eq!(refitter.set_weights("no such layer", WeightsRole::Kernel, fc.clone()), Err(RefitError::UnknownLayer("no such layer".into())));
    let relu = net.layers().iter().find(|l| l.kind.type_name() == "Activation").unwrap().name.clone();
    let err = refitter.set_weights(&relu, WeightsRole::Kernel, fc.clone()).unwrap_err();
    assert!(matches!(err, RefitError::NoSuchRole { .. }), "{err}");

    // A kernel that is a network input is no weight.
    let mut api = Network::new("input kernel");
    let x = api.add_input("x", DataType::F32, kiln::Shape::fixed(&[1, 1, 3, 3])).unwrap();
    let w = api.add_input("w", DataType::F32, kiln::Shape::fixed(&[1, 1, 1, 1])).unwrap();
    let params = kiln::ConvolutionParams {
        groups: 1,
        strides: vec![1, 1],
        dilations: vec![1, 1],
        pre_padding: vec![0, 0],
        post_padding: vec![0, 0],
    };
    let conv = api.add_layer("conv", LayerKind::Convolution(params), vec![Some(x), Some(w)]).unwrap();
    let y = api.output(conv, 0);
    api.mark_output(y).unwrap();
    let mut refitter = Refitter::new(&build(&api, &[BuilderFlag::Refit], &cpu)).unwrap();
    let err = refitter.set_weights("conv", WeightsRole::Kernel, fc).unwrap_err();
    assert!(err.to_string().contains("computed by layer `network input `w``"), "{err}");
}

#[test]
fn weights_that_decide_a_fusion_cannot_be_refitted() {
    let cpu = CpuBackend::new();
    let net = import("tests/data/pytorch/bert_torchscript.onnx");
    let engine = build(&net, &[BuilderFlag::Refit], &cpu);
    let source = engine.refit_source().unwrap().network().clone();
    let scalars: Vec<String> =
        Refitter::new(&engine).unwrap().get_all_weights().into_iter().filter(|n| constant(&source, n).is_some_and(|w| w.len() == 1)).collect();
    let refused = scalars.iter().find_map(|name| {
        let mut refitter = Refitter::new(&engine).unwrap();
        let w = constant(&source, name).unwrap();
        refitter.set_named_weights(name, HostTensor::new(w.shape().to_vec(), TensorData::F32(vec![7.0])).unwrap()).unwrap();
        match refitter.refit_engine(&mut engine.clone(), &cpu) {
            Err(e @ RefitError::StructureChanged { .. }) => Some((name.clone(), e.to_string())),
            _ => None,
        }
    });
    let (name, message) = refused.expect("some scalar (GELU's 0.5, the attention scale) decides a fusion");
    assert!(message.contains(&name) && message.contains("cannot be refitted"), "{message}");
}

/// Equal to f32 rounding over a few sums: relative 1e-5.
fn assert_close(got: &[Vec<f64>], want: &[Vec<f64>]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.len(), w.len());
        for (a, b) in g.iter().zip(w) {
            assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{g:?} vs {w:?}");
        }
    }
}

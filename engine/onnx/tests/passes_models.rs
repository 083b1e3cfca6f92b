//! The optimizer on real models: the shipped MNIST model and the PyTorch-exported CNN and
//! mini-BERT (TorchScript and dynamo exporters). An optimized engine must give the same
//! outputs as an unoptimized one, and the fusions the models invite must happen.

mod common;

use common::pytorch_data::worst_error;
use kiln::{
    Builder, BuilderConfig, ExecutionContext, HostTensor, LayerKind, Network, Optimization,
    TensorData,
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The model's first input values from its npz (PyTorch models) or a deterministic ramp.
fn inputs_for(net: &Network, npz: Option<&Path>) -> HashMap<String, HostTensor> {
    let mut out = HashMap::new();
    let mut archive = npz.map(|p| npyz::npz::NpzArchive::open(p).expect("open npz"));
    for &t in net.inputs() {
        let d = net.tensor(t);
        if let Some(archive) = archive.as_mut() {
            let npy = archive
                .by_name(&d.name)
                .expect("read")
                .expect("input array");
            let shape: Vec<usize> = npy.shape().iter().map(|&x| x as usize).collect();
            let data = match npy.dtype().descr().trim_matches('\'') {
                "<f4" => TensorData::F32(npy.into_vec::<f32>().expect("f32")),
                "<i8" => TensorData::I64(npy.into_vec::<i64>().expect("i64")),
                other => panic!("unexpected dtype {other}"),
            };
            out.insert(d.name.clone(), HostTensor::new(shape, data).expect("shape"));
        } else {
            let shape = d.shape.as_fixed().expect("fixed input shape");
            let n: usize = shape.iter().product();
            let values = (0..n).map(|i| ((i * 37 % 101) as f32) / 101.0).collect();
            out.insert(
                d.name.clone(),
                HostTensor::from_f32(shape, values).expect("shape"),
            );
        }
    }
    out
}

struct Built {
    layers: usize,
    network: Network,
    outputs: std::collections::BTreeMap<String, HostTensor>,
}

fn build_and_run(
    net: &Network,
    inputs: &HashMap<String, HostTensor>,
    optimization: Optimization,
) -> Built {
    let backend = kiln_cpu::CpuBackend::new();
    let config = BuilderConfig {
        optimization,
        ..BuilderConfig::default()
    };
    let engine = Builder::new(&backend).build(net, &config).expect("build");
    let network = engine.network().clone();
    let outputs = ExecutionContext::new(engine, &backend)
        .expect("prepare")
        .run(inputs)
        .expect("run");
    Built {
        layers: network.layers().len(),
        network,
        outputs,
    }
}

fn count(net: &Network, pred: impl Fn(&LayerKind) -> bool) -> usize {
    net.layers().iter().filter(|l| pred(&l.kind)).count()
}

/// Builds optimized and unoptimized, compares every output, prints the layer counts.
fn compare(model: &str, path: &Path, npz: Option<&Path>) -> Network {
    let net = kiln_onnx::import_file(path).unwrap_or_else(|e| panic!("{model}: {e}"));
    let inputs = inputs_for(&net, npz);
    let plain = build_and_run(&net, &inputs, Optimization::None);
    let fused = build_and_run(&net, &inputs, Optimization::Full);
    let computing = |n: &Network| count(n, |k| !matches!(k, LayerKind::Constant { .. }));
    println!(
        "{model}: layers (non-constant) imported {} ({}), unoptimized {} ({}), optimized {} ({})",
        net.layers().len(),
        computing(&net),
        plain.layers,
        computing(&plain.network),
        fused.layers,
        computing(&fused.network)
    );
    assert!(
        fused.layers < plain.layers,
        "{model}: optimization removed no layer"
    );
    for (name, want) in &plain.outputs {
        let got = &fused.outputs[name];
        assert_eq!(got.shape(), want.shape(), "{model}/{name}");
        let worst = worst_error(got, want);
        assert!(
            worst < 1e-5,
            "{model}/{name}: optimized differs from unoptimized by {worst}"
        );
    }
    fused.network
}

fn pytorch(model: &str) -> Network {
    let dir = repo().join("tests/data/pytorch");
    compare(
        model,
        &dir.join(format!("{model}.onnx")),
        Some(&dir.join(format!("{model}.npz"))),
    )
}

fn fused_convolutions_with_relu(net: &Network) -> usize {
    count(net, |k| match k {
        LayerKind::Fused(p) => {
            matches!(p.anchor, kiln::FusedAnchor::Convolution(_))
                && p.epilogue
                    .contains(&kiln::PostOp::Activation(kiln::ActivationKind::Relu))
        }
        _ => false,
    })
}

#[test]
fn mnist_matches_and_fuses_the_fully_connected_layers() {
    let net = compare("mnist", &repo().join("examples/models/mnist.onnx"), None);
    let fc = net
        .layers()
        .iter()
        .find(|l| l.name == "MatMul5 + Add6 + Relu7")
        .expect("fc1 + bias + relu fused");
    assert!(matches!(&fc.kind, LayerKind::Fused(p) if p.epilogue.len() == 2));
    assert!(net
        .layers()
        .iter()
        .any(|l| l.name == "Gemm8/matmul + Gemm8"));
}

fn check_cnn(model: &str) {
    let net = pytorch(model);
    assert!(
        fused_convolutions_with_relu(&net) >= 3,
        "{model}: conv + bias + relu fusions missing\n{}",
        net.dump()
    );
    // The residual add and the relu after it join the second convolution of the block.
    assert!(
        count(
            &net,
            |k| matches!(k, LayerKind::Fused(p) if p.epilogue.len() >= 2 && matches!(p.anchor, kiln::FusedAnchor::Convolution(_)))
        ) >= 1,
        "{model}: conv + residual add + relu not fused\n{}",
        net.dump()
    );
}

#[test]
fn cnn_torchscript_matches_and_fuses() {
    check_cnn("cnn_torchscript");
}

#[test]
fn cnn_dynamo_matches_and_fuses() {
    check_cnn("cnn_dynamo");
}

fn check_bert(model: &str) {
    let net = pytorch(model);
    let attention = count(&net, |k| matches!(k, LayerKind::Attention(_)));
    let norms = count(&net, |k| matches!(k, LayerKind::Normalization { .. }));
    let gelu = count(&net, |k| match k {
        LayerKind::Fused(p) => p
            .epilogue
            .contains(&kiln::PostOp::Activation(kiln::ActivationKind::GeluErf)),
        LayerKind::Activation { kind } => *kind == kiln::ActivationKind::GeluErf,
        _ => false,
    });
    let softmax = count(&net, |k| matches!(k, LayerKind::SoftMax { .. }));
    let decomposed = count(&net, |k| {
        matches!(
            k,
            LayerKind::Unary {
                op: kiln::UnaryOp::Erf
            }
        )
    });
    assert_eq!(
        (attention, gelu, norms, softmax, decomposed),
        (2, 2, 5, 0, 0),
        "{model}:\n{}",
        net.dump()
    );
}

#[test]
fn bert_torchscript_matches_and_fuses() {
    check_bert("bert_torchscript");
}

#[test]
fn bert_dynamo_matches_and_fuses() {
    check_bert("bert_dynamo");
}

/// The layer kinds of `model`'s engine built for `batch` (a profile pinned there when the
/// export has a dynamic batch), in order, and its outputs.
fn engine_at(model: &str, batch: usize) -> (Vec<&'static str>, std::collections::BTreeMap<String, HostTensor>, Vec<String>, kiln::Shape) {
    let dir = repo().join("tests/data/zoo").join(model);
    let net = kiln_onnx::import_file(&dir.join("model.onnx")).unwrap_or_else(|e| panic!("{model}: {e}"));
    let mut config = BuilderConfig::default();
    let input = net.tensor(net.inputs()[0]);
    if input.shape.as_fixed().is_none() {
        let dims = [batch, 3, 32, 32];
        let mut profile = kiln::OptimizationProfile::new();
        profile.set_dimensions(&input.name, &dims, &dims, &dims);
        config.profiles = vec![profile];
    }
    let backend = kiln_cpu::CpuBackend::new();
    let out = Builder::new(&backend).build_with_report(&net, &config).expect("build");
    let kinds = out.engine.network().layers().iter().map(|l| l.kind.type_name()).filter(|k| *k != "Constant").collect();
    let engine_net = out.engine.network();
    let declared = engine_net.tensor(engine_net.inputs()[0]).shape.clone();
    let values: Vec<f32> = (0..batch * 3 * 32 * 32).map(|i| ((i * 37 % 101) as f32) / 101.0).collect();
    let inputs = HashMap::from([(input.name.clone(), HostTensor::from_f32(vec![batch, 3, 32, 32], values).unwrap())]);
    let outputs = ExecutionContext::new(out.engine, &backend).expect("prepare").run(&inputs).expect("run");
    (kinds, outputs, out.log, declared)
}

#[test]
fn a_dynamic_batch_export_built_for_one_batch_is_the_static_export() {
    let (fixed, want, _, _) = engine_at("vit_legacy_static", 1);
    let (pinned, got, log, declared) = engine_at("vit_legacy_dynamic", 1);
    // The engine's interface stays the model's: the batch is still a named dim.
    assert_eq!(declared.dims()[0], kiln::Dim::Named("batch".into()), "{declared:?}");
    // The batch arithmetic (Shape, Gather, Equal, Where, Expand of the class token) folds away.
    assert_eq!(pinned, fixed);
    assert!(log.iter().any(|l| l == "the only profile pins input 1x3x32x32: the engine is built for that shape"), "{log:?}");
    for (name, w) in &want {
        let worst = worst_error(&got[name], w);
        assert!(worst < 1e-5, "{name}: {worst}");
    }
    // The dynamo export at a pinned batch has no shape arithmetic left either, and its
    // attention absorbs the key's reshape → transpose → reshape as the legacy one absorbs its
    // transpose: the same layers, but for the zero out-projection bias dynamo drops.
    let (dynamo, _, _, _) = engine_at("vit_dynamo_dynamic", 1);
    assert!(!dynamo.iter().any(|k| matches!(*k, "Shape" | "Gather" | "Select" | "Expand")), "{dynamo:?}");
    let shuffles = |kinds: &[&str]| kinds.iter().filter(|k| **k == "Shuffle").count();
    assert_eq!((dynamo.len(), shuffles(&dynamo)), (fixed.len(), shuffles(&fixed)), "{dynamo:?}\nvs {fixed:?}");
}

//! Dynamic-shape engines end to end: the MNIST network with a dynamic batch and the
//! PyTorch mini-BERT (dynamic `batch`, exported by TorchScript) run at their profiles' min,
//! opt and max shapes and agree with fixed-shape runs and onnxruntime.

use kiln::{
    Buffer, Builder, BuilderConfig, DataType, Engine, ExecutionContext, HostTensor, OptimizationProfile,
    PreparedEngine, Stream,
};
use kiln_examples::{digit_one_image, mnist_network, mnist_network_dynamic_batch, IMAGE_SIDE};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

fn build(network: &kiln::Network, profiles: Vec<OptimizationProfile>) -> Engine {
    let config = BuilderConfig { profiles, ..BuilderConfig::default() };
    Builder::new(&kiln_cpu::CpuBackend::new()).build(network, &config).expect("build")
}

fn prepare(engine: Engine) -> Arc<PreparedEngine> {
    PreparedEngine::new(engine, &kiln_cpu::CpuBackend::new()).expect("prepare")
}

/// Row `i` of a batch: the digit image, shifted right by `i` pixels and dimmed a little.
fn image(i: usize) -> Vec<f32> {
    let one = digit_one_image();
    let mut out = vec![0.0; one.len()];
    for r in 0..IMAGE_SIDE {
        for c in 0..IMAGE_SIDE - i {
            out[r * IMAGE_SIDE + c + i] = one[r * IMAGE_SIDE + c] * (1.0 - 0.05 * i as f32);
        }
    }
    out
}

/// Runs `inputs` through a context with `set_input_shape` / buffers / `enqueue`.
fn enqueue(ctx: &mut ExecutionContext, inputs: &[(&str, HostTensor)], outputs: &[&str]) -> Vec<(Vec<usize>, Vec<f32>)> {
    for (name, tensor) in inputs {
        ctx.set_input_shape(name, tensor.shape()).expect("shape within the profile");
        ctx.set_tensor_address(name, Buffer::from_tensor(tensor)).unwrap();
    }
    let mut bound = Vec::new();
    for name in outputs {
        let dims: Vec<usize> = ctx
            .tensor_shape(name)
            .unwrap()
            .iter()
            .map(|&d| usize::try_from(d).expect("output shape known before running"))
            .collect();
        let buffer = Buffer::new(dims.iter().product::<usize>() * 4);
        ctx.set_tensor_address(name, buffer.clone()).unwrap();
        bound.push((dims, buffer));
    }
    let stream = Stream::new().unwrap();
    ctx.enqueue(&stream, None).expect("enqueue");
    stream.synchronize().expect("run");
    bound
        .into_iter()
        .map(|(dims, b)| {
            let values = b.read_tensor(DataType::F32, &dims).unwrap().as_f32().unwrap().to_vec();
            (dims, values)
        })
        .collect()
}

#[test]
fn mnist_with_a_dynamic_batch_matches_the_fixed_batch_network() {
    let mut profile = OptimizationProfile::new();
    profile.set_dimensions("data", &[1, 1, 28, 28], &[4, 1, 28, 28], &[8, 1, 28, 28]);
    let engine = build(&mnist_network_dynamic_batch().unwrap(), vec![profile]);
    assert!(engine.peak_activation_bytes() > 0);
    assert!(engine.memory_plans()[0].unplanned.is_empty(), "{:?}", engine.memory_plans()[0].unplanned);
    let prepared = prepare(engine);
    let mut ctx = prepared.create_execution_context();

    let single =
        ExecutionContext::new(build(&mnist_network(1).unwrap(), vec![]), &kiln_cpu::CpuBackend::new()).unwrap();
    let reference: Vec<Vec<f32>> = (0..8)
        .map(|i| {
            let x = HostTensor::from_f32(vec![1, 1, 28, 28], image(i)).unwrap();
            single.run(&HashMap::from([("data".to_string(), x)])).unwrap()["prob"].as_f32().unwrap().to_vec()
        })
        .collect();
    for batch in [1, 4, 8] {
        let data: Vec<f32> = (0..batch).flat_map(image).collect();
        let x = HostTensor::from_f32(vec![batch, 1, 28, 28], data).unwrap();
        let out = enqueue(&mut ctx, &[("data", x)], &["prob"]);
        let (dims, prob) = &out[0];
        assert_eq!(dims, &vec![batch, 10]);
        for (row, want) in reference.iter().take(batch).enumerate() {
            for (k, (&g, &w)) in prob[row * 10..row * 10 + 10].iter().zip(want).enumerate() {
                assert!((g - w).abs() <= 1e-6, "batch {batch} row {row} class {k}: {g} vs {w}");
            }
        }
    }
    let err = ctx.set_input_shape("data", &[9, 1, 28, 28]).unwrap_err();
    assert!(err.to_string().contains("axis 0 is 9, outside [1, 8]"), "{err}");
}

fn pytorch(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/pytorch").join(file)
}

/// An output's name, shape and values.
type NamedArray = (String, Vec<usize>, Vec<f32>);

/// The reference inputs (batch 2) and onnxruntime's outputs.
fn bert_reference() -> (Vec<i64>, Vec<i64>, Vec<NamedArray>) {
    let mut npz = npyz::npz::NpzArchive::open(pytorch("bert_torchscript.npz")).expect("open npz");
    let mut int = |name: &str| npz.by_name(name).unwrap().unwrap().into_vec::<i64>().unwrap();
    let (ids, mask) = (int("input_ids"), int("attention_mask"));
    let outputs = ["hidden", "pooled"]
        .iter()
        .map(|name| {
            let a = npz.by_name(name).unwrap().unwrap();
            let shape = a.shape().iter().map(|&d| d as usize).collect();
            (name.to_string(), shape, a.into_vec::<f32>().unwrap())
        })
        .collect();
    (ids, mask, outputs)
}

#[test]
fn pytorch_bert_with_a_dynamic_batch_runs_at_min_opt_and_max() {
    let network = kiln_onnx::import_file(&pytorch("bert_torchscript.onnx")).expect("import");
    let mut profile = OptimizationProfile::new();
    profile.set_dimensions("input_ids", &[1, 16], &[2, 16], &[4, 16]);
    profile.set_dimensions("attention_mask", &[1, 16], &[2, 16], &[4, 16]);
    let engine = build(&network, vec![profile]);
    // Shape arithmetic (Shape → Gather → Concat → Reshape) resolves at the max shapes, so
    // every activation is planned.
    assert!(engine.memory_plans()[0].unplanned.is_empty(), "{:?}", engine.memory_plans()[0].unplanned);
    assert!(engine.peak_activation_bytes() < engine.memory_plans()[0].unshared_bytes);
    let prepared = prepare(engine);
    let mut ctx = prepared.create_execution_context();
    let (ids, mask, expected) = bert_reference();
    // Batch b repeats the two reference rows: row r of the output is reference row r % 2.
    for batch in [1usize, 2, 4] {
        let rows =
            |v: &[i64]| -> Vec<i64> { (0..batch).flat_map(|r| v[(r % 2) * 16..(r % 2) * 16 + 16].to_vec()).collect() };
        let inputs = [
            ("input_ids", HostTensor::from_i64(vec![batch, 16], rows(&ids)).unwrap()),
            ("attention_mask", HostTensor::from_i64(vec![batch, 16], rows(&mask)).unwrap()),
        ];
        let got = enqueue(&mut ctx, &inputs, &["hidden", "pooled"]);
        for ((name, shape, want), (dims, values)) in expected.iter().zip(&got) {
            assert_eq!(dims[0], batch, "{name}");
            assert_eq!(&dims[1..], &shape[1..], "{name}");
            let row = values.len() / batch;
            for r in 0..batch {
                let want_row = &want[(r % 2) * row..(r % 2) * row + row];
                for (i, (&g, &w)) in values[r * row..r * row + row].iter().zip(want_row).enumerate() {
                    assert!(
                        (g - w).abs() <= 1e-4 + 1e-3 * w.abs(),
                        "batch {batch} {name} row {r} element {i}: {g} vs onnxruntime {w}"
                    );
                }
            }
        }
    }
    let err = ctx.set_input_shape("input_ids", &[5, 16]).unwrap_err();
    assert!(err.to_string().contains("`input_ids` axis 0 is 5, outside [1, 4]"), "{err}");
    let err = ctx.set_input_shape("input_ids", &[2, 17]).unwrap_err();
    assert!(err.to_string().contains("axis 1"), "{err}");
}

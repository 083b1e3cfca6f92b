//! Where `kiln run` (and `compare`, `bench`) get inputs: `.npz` (extra arrays ignored with
//! a warning), a lone `.npy`, `--load-inputs NAME:FILE` (`.npy` or raw bytes), and random
//! data with `--seed` and `--input-range`.

mod common;

use common::*;
use kiln_onnx::proto::tensor_proto::DataType as OnnxType;
use kiln_onnx::proto::tensor_shape_proto::{dimension, Dimension};
use kiln_onnx::proto::type_proto::{self, Tensor as TensorType};
use kiln_onnx::proto::{GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorShapeProto, TypeProto, ValueInfoProto};
use npyz::npz::NpzArchive;
use npyz::WriterBuilder;
use prost::Message;
use std::path::{Path, PathBuf};
use tempfile::TempDir;

fn mnist() -> String {
    repo_path("examples/models/mnist.onnx").to_str().unwrap().to_string()
}

fn image() -> Vec<f32> {
    (0..784).map(|i| (i as f32 * 0.01).cos()).collect()
}

fn write_npy(path: &Path, shape: &[u64], values: &[f32]) {
    let mut out = Vec::new();
    let mut writer = npyz::WriteOptions::new().default_dtype().shape(shape).writer(&mut out).begin_nd().unwrap();
    writer.extend(values.iter().copied()).unwrap();
    writer.finish().unwrap();
    std::fs::write(path, out).unwrap();
}

/// A cpu engine of MNIST, built once: each build times its tactics afresh and may pick
/// another convolution, whose sums round differently in the last bit.
fn mnist_engine(dir: &Path) -> PathBuf {
    let engine = dir.join("mnist.engine");
    kiln_ok(&["build", &mnist(), "--backend", "cpu", "-o", path_arg(&engine)]);
    engine
}

/// MNIST's `prob` for the input given by `input_args`.
fn mnist_prob(dir: &Path, input_args: &[&str]) -> Vec<f32> {
    let out = dir.join(format!("out{}.npz", input_args.len()));
    let engine = dir.join("mnist.engine");
    let mut args = vec!["run", path_arg(&engine), "--save-outputs", path_arg(&out)];
    args.extend_from_slice(input_args);
    kiln_ok(&args);
    read_f32_arrays(&out).remove(0).2
}

#[test]
fn npy_and_raw_files_give_the_same_answer_as_npz() {
    let dir = TempDir::new().unwrap();
    let (npz, npy, raw) = (dir.path().join("in.npz"), dir.path().join("in.npy"), dir.path().join("in.bin"));
    write_npz_array(&npz, "data", &[1, 1, 28, 28], &image());
    write_npy(&npy, &[1, 1, 28, 28], &image());
    std::fs::write(&raw, image().iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
    mnist_engine(dir.path());
    let expected = mnist_prob(dir.path(), &["--inputs", path_arg(&npz)]);
    assert_eq!(mnist_prob(dir.path(), &["--inputs", path_arg(&npy), "--seed", "1"]), expected, "a lone .npy for a one-input model");
    let npy_arg = format!("data:{}", path_arg(&npy));
    assert_eq!(mnist_prob(dir.path(), &["--load-inputs", &npy_arg]), expected);
    let raw_arg = format!("data:{}", path_arg(&raw));
    assert_eq!(mnist_prob(dir.path(), &["--load-inputs", &raw_arg]), expected);
    // --load-inputs wins over the npz for the inputs it names.
    let zeros = dir.path().join("zeros.npz");
    write_npz_array(&zeros, "data", &[1, 1, 28, 28], &[0f32; 784]);
    assert_eq!(mnist_prob(dir.path(), &["--inputs", path_arg(&zeros), "--load-inputs", &raw_arg]), expected);
}

#[test]
fn bad_input_files_are_clear_errors() {
    let dir = TempDir::new().unwrap();
    let mnist = mnist();
    let short = dir.path().join("short.bin");
    std::fs::write(&short, [0u8; 100]).unwrap();
    let arg = format!("data:{}", path_arg(&short));
    kiln_fails(&["run", &mnist, "--load-inputs", &arg], "it holds 100 bytes but f32[1,1,28,28] takes 3136");
    kiln_fails(&["run", &mnist, "--load-inputs", &format!("image:{}", path_arg(&short))], "`image` is not an input of the model (inputs: data)");
    kiln_fails(&["run", &mnist, "--load-inputs", &format!("{arg},{arg}")], "names input `data` twice");
    kiln_fails(&["run", &mnist, "--load-inputs", "data"], "`data` is not NAME:FILE");
    // The PyTorch CNN's batch is dynamic: raw data needs its dims.
    let cnn = repo_path("tests/data/pytorch/cnn_torchscript.onnx");
    let raw = dir.path().join("image.bin");
    std::fs::write(&raw, vec![0u8; 2 * 3 * 32 * 32 * 4]).unwrap();
    let arg = format!("image:{}", path_arg(&raw));
    kiln_fails(&["run", path_arg(&cnn), "--load-inputs", &arg], "are dynamic: give them with --shapes image:");
    let stdout = kiln_ok(&["run", path_arg(&cnn), "--backend", "cpu", "--load-inputs", &arg, "--shapes", "image:2x3x32x32"]);
    assert!(stdout.contains("`probs`: f32[2,"), "{stdout}");
}

#[test]
fn an_npz_with_extra_arrays_runs_with_a_warning() {
    let dir = TempDir::new().unwrap();
    let npz = dir.path().join("in.npz");
    let mut writer = npyz::npz::NpzWriter::create(&npz).unwrap();
    for (name, shape, values) in [("data", vec![1u64, 1, 28, 28], image()), ("prob_expected", vec![1, 10], vec![0.1; 10])] {
        let mut array = writer.array::<f32>(name, Default::default()).unwrap().default_dtype().shape(&shape).begin_nd().unwrap();
        array.extend(values).unwrap();
        array.finish().unwrap();
    }
    writer.zip_writer().finish().unwrap();
    let out = kiln(&["run", &mnist(), "--backend", "cpu", "--inputs", path_arg(&npz)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    let expected = format!("warning: arrays that are no input of the model, ignored: `prob_expected` (`{}`) (inputs: data)", npz.display());
    assert!(stderr.contains(&expected), "{stderr}");
}

#[test]
fn a_lone_npy_for_a_model_of_two_inputs_is_refused_by_name() {
    let dir = TempDir::new().unwrap();
    let model = identity_model(dir.path());
    let npy = dir.path().join("x.npy");
    write_npy(&npy, &[64], &[0.0; 64]);
    kiln_fails(&["run", path_arg(&model), "--inputs", path_arg(&npy)], "is a single .npy array but the model has 2 inputs (x, ids)");
}

/// x f32[64] → Identity → y and ids i64[64] → Identity → z: outputs show the inputs.
fn identity_model(dir: &Path) -> PathBuf {
    let value = |name: &str, elem: OnnxType| {
        let dim = vec![Dimension { value: Some(dimension::Value::DimValue(64)), ..Default::default() }];
        let tensor = TensorType { elem_type: Some(elem as i32), shape: Some(TensorShapeProto { dim }) };
        ValueInfoProto {
            name: Some(name.into()),
            r#type: Some(TypeProto { value: Some(type_proto::Value::TensorType(tensor)), ..Default::default() }),
            ..Default::default()
        }
    };
    let identity = |input: &str, output: &str| NodeProto {
        op_type: Some("Identity".into()),
        input: vec![input.into()],
        output: vec![output.into()],
        ..Default::default()
    };
    let graph = GraphProto {
        name: Some("identity".into()),
        node: vec![identity("x", "y"), identity("ids", "z")],
        input: vec![value("x", OnnxType::Float), value("ids", OnnxType::Int64)],
        output: vec![value("y", OnnxType::Float), value("z", OnnxType::Int64)],
        ..Default::default()
    };
    let opset_import = vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(17) }];
    let model = ModelProto { ir_version: Some(8), opset_import, graph: Some(graph), ..Default::default() };
    let path = dir.join("identity.onnx");
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    path
}

/// The random inputs of one run, read back through the identity model's outputs.
fn random_inputs(dir: &Path, extra: &[&str]) -> (Vec<f32>, Vec<i64>, String) {
    let model = identity_model(dir);
    let out = dir.join("out.npz");
    let mut args = vec!["run", path_arg(&model), "--backend", "cpu", "--save-outputs", path_arg(&out)];
    args.extend_from_slice(extra);
    let stdout = kiln_ok(&args);
    let mut npz = NpzArchive::open(&out).unwrap();
    let y = npz.by_name("y").unwrap().unwrap().into_vec::<f32>().unwrap();
    let z = npz.by_name("z").unwrap().unwrap().into_vec::<i64>().unwrap();
    (y, z, stdout)
}

#[test]
fn random_inputs_follow_seed_and_range() {
    let dir = TempDir::new().unwrap();
    let (y0, z0, stdout) = random_inputs(dir.path(), &[]);
    assert!(stdout.contains("random, ChaCha8 seed 0"), "{stdout}");
    assert!(y0.iter().all(|v| (-1.0..1.0).contains(v)) && z0.iter().all(|v| (0..10).contains(v)), "defaults: {y0:?} {z0:?}");
    assert_eq!(random_inputs(dir.path(), &["--seed", "0"]).0, y0, "seed 0 is the default");
    let (y7, _, stdout) = random_inputs(dir.path(), &["--seed", "7"]);
    assert_ne!(y7, y0);
    assert!(stdout.contains("seed 7"), "{stdout}");
    let (y, z, stdout) = random_inputs(dir.path(), &["--input-range", "5,6"]);
    assert!(y.iter().all(|v| (5.0..6.0).contains(v)), "{y:?}");
    assert!(z.iter().all(|&v| v == 5), "the whole numbers in [5, 6): {z:?}");
    assert!(stdout.contains("values in [5, 6)"), "{stdout}");
    let (y, z, _) = random_inputs(dir.path(), &["--input-range", "-1000,1000"]);
    assert!(y.iter().all(|v| (-1000.0..1000.0).contains(v)) && y.iter().any(|v| v.abs() > 1.0), "{y:?}");
    assert!(z.iter().all(|v| (-1000..1000).contains(v)) && z.iter().any(|v| *v < 0), "{z:?}");
    let model = identity_model(dir.path());
    kiln_fails(&["run", path_arg(&model), "--input-range", "0.2,0.7"], "holds no whole number of type i64");
    kiln_fails(&["run", path_arg(&model), "--input-range", "3,1"], "LO must be below HI");
}

#[test]
fn a_dynamic_dim_that_falls_back_to_one_is_a_warning() {
    let cnn = repo_path("tests/data/pytorch/cnn_torchscript.onnx");
    let out = kiln(&["run", path_arg(&cnn), "--backend", "cpu"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("warning: input `image` dim 0 (batch) is dynamic and not given: random data uses 1"), "{stderr}");
    let out = kiln(&["run", path_arg(&cnn), "--backend", "cpu", "--shapes", "image:2x3x32x32"]);
    assert!(!text(&out.stderr).contains("warning"), "{}", text(&out.stderr));
}

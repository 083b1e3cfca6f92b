//! PyTorch-exported models (tests/data/pytorch, made by its export.py on a machine with
//! torch) run through `kiln run` and match onnxruntime's saved outputs within
//! rtol 1e-3 / atol 1e-4, for both of PyTorch's ONNX exporters.

mod common;

use common::*;
use npyz::npz::{NpzArchive, NpzWriter};
use npyz::WriterBuilder;
use std::path::Path;
use tempfile::TempDir;

/// The arrays of a reference npz, split into the model's inputs (written to a new npz for
/// `--inputs`) and the expected outputs.
fn split_reference(reference: &Path, input_names: &[&str], inputs_npz: &Path) -> Vec<(String, Vec<u64>, Vec<f32>)> {
    let mut archive = NpzArchive::open(reference).expect("open reference npz");
    let names: Vec<String> = archive.array_names().map(str::to_string).collect();
    let mut writer = NpzWriter::create(inputs_npz).expect("create inputs npz");
    let mut expected = Vec::new();
    for name in names {
        let array = archive.by_name(&name).expect("read array").expect("listed array");
        let shape = array.shape().to_vec();
        let is_input = input_names.contains(&name.as_str());
        match array.dtype().descr().trim_matches('\'') {
            "<i8" if is_input => {
                let values = array.into_vec::<i64>().expect("i64 array");
                let mut w = writer.array::<i64>(&name, Default::default()).unwrap().default_dtype().shape(&shape).begin_nd().unwrap();
                w.extend(values).unwrap();
                w.finish().unwrap();
            }
            "<f4" => {
                let values = array.into_vec::<f32>().expect("f32 array");
                if is_input {
                    let mut w = writer.array::<f32>(&name, Default::default()).unwrap().default_dtype().shape(&shape).begin_nd().unwrap();
                    w.extend(values).unwrap();
                    w.finish().unwrap();
                } else {
                    expected.push((name, shape, values));
                }
            }
            other => panic!("unexpected dtype {other} for `{name}` in {}", reference.display()),
        }
    }
    writer.zip_writer().finish().expect("finish inputs npz");
    expected
}

fn check_model(name: &str, input_names: &[&str]) {
    let dir = TempDir::new().unwrap();
    let model = repo_path(&format!("tests/data/pytorch/{name}.onnx"));
    let inputs = dir.path().join("in.npz");
    let outputs = dir.path().join("out.npz");
    let expected = split_reference(&repo_path(&format!("tests/data/pytorch/{name}.npz")), input_names, &inputs);
    assert!(!expected.is_empty(), "{name}: no expected outputs");
    kiln_ok(&["run", path_arg(&model), "--backend", "cpu", "--inputs", path_arg(&inputs), "--save-outputs", path_arg(&outputs)]);
    let got = read_f32_arrays(&outputs);
    for (out_name, shape, want) in &expected {
        let (_, got_shape, values) = got.iter().find(|(n, _, _)| n == out_name).unwrap_or_else(|| panic!("{name}: output `{out_name}` missing"));
        assert_eq!(got_shape, shape, "{name}/{out_name}: shape");
        let mut worst = (0.0f32, 0usize);
        for (i, (&g, &w)) in values.iter().zip(want).enumerate() {
            let excess = (g - w).abs() - (1e-4 + 1e-3 * w.abs());
            if excess > worst.0 {
                worst = (excess, i);
            }
        }
        assert!(
            worst.0 <= 0.0,
            "{name}/{out_name}: element {} is {} but onnxruntime gives {}",
            worst.1,
            values[worst.1],
            want[worst.1]
        );
    }
}

#[test]
fn cnn_from_the_torchscript_exporter() {
    check_model("cnn_torchscript", &["image"]);
}

#[test]
fn cnn_from_the_dynamo_exporter() {
    check_model("cnn_dynamo", &["image"]);
}

#[test]
fn mini_bert_from_the_torchscript_exporter() {
    check_model("bert_torchscript", &["input_ids", "attention_mask"]);
}

#[test]
fn mini_bert_from_the_dynamo_exporter() {
    check_model("bert_dynamo", &["input_ids", "attention_mask"]);
}

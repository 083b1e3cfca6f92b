//! The PyTorch-exported reference models of `tests/data/pytorch/` and their npz arrays.

use kiln::{HostTensor, TensorData};
use npyz::npz::NpzArchive;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The checkout root: `KILN_REPO` on the GPU machine (where this build's paths do not exist),
/// else this checkout.
pub fn repo() -> PathBuf {
    std::env::var_os("KILN_REPO").map_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."), PathBuf::from)
}

pub fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/pytorch")
}

/// Reference model `name` of `tests/data/pytorch/` imported, its inputs from the npz beside
/// it, and the npz's other arrays (PyTorch's outputs) by name.
pub fn reference_model(name: &str) -> (kiln::Network, HashMap<String, HostTensor>, HashMap<String, HostTensor>) {
    let dir = repo().join("tests/data/pytorch");
    let net = kiln_onnx::import_file(&dir.join(format!("{name}.onnx"))).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut arrays = read_npz(&dir.join(format!("{name}.npz")));
    let inputs = net
        .inputs()
        .iter()
        .map(|&t| {
            let n = net.tensor(t).name.clone();
            let x = arrays.remove(&n).unwrap_or_else(|| panic!("{name}: no input {n}"));
            (n, x)
        })
        .collect();
    (net, inputs, arrays)
}

/// Every array of an npz file, as host tensors (the models use f32 and i64 only).
pub fn read_npz(path: &Path) -> HashMap<String, HostTensor> {
    let mut archive = NpzArchive::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let names: Vec<String> = archive.array_names().map(str::to_string).collect();
    names
        .into_iter()
        .map(|name| {
            let npy = archive.by_name(&name).expect("read array").expect("array exists");
            let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
            let data = match npy.dtype().descr().trim_matches('\'') {
                "<f4" => TensorData::F32(npy.into_vec::<f32>().expect("f32 data")),
                "<i8" => TensorData::I64(npy.into_vec::<i64>().expect("i64 data")),
                other => panic!("{name}: unexpected dtype {other}"),
            };
            (name, HostTensor::new(shape, data).expect("shape matches"))
        })
        .collect()
}

/// Worst error of `got` against `want`, relative to `1 + |want|`.
pub fn worst_error(got: &HostTensor, want: &HostTensor) -> f64 {
    got.to_f64_vec().iter().zip(want.to_f64_vec()).map(|(a, e)| (a - e).abs() / (1.0 + e.abs())).fold(0.0, f64::max)
}

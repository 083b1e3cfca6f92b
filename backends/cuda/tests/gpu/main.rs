//! kiln-cuda against the cpu oracle on a real device. Every test prints "SKIPPED: …" and
//! returns where no CUDA driver or device exists (CI), and fails instead with
//! `KILN_REQUIRE_CUDA=1` (the GPU machine).

mod attention;
mod bench;
mod chains;
mod common;
mod conv;
mod conv_bench;
mod device;
mod device_io;
mod dtypes;
mod execution;
mod indexing;
mod layers;
mod models;
mod quantized;
mod refit;
mod signal_detection;
mod sparsity;
mod spatial;
#[allow(dead_code)]
#[path = "../../../../engine/onnx/tests/common/pytorch_data.rs"]
mod pytorch_data;
#[allow(dead_code)]
#[path = "../../../../engine/onnx/tests/common/new_weights.rs"]
mod new_weights;
#[path = "../../../../engine/onnx/tests/common/integer_layers.rs"]
mod integer_layers;
#[path = "../../../../engine/onnx/tests/common/refit_check.rs"]
mod refit_check;

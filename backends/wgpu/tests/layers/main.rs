//! Layer-by-layer tests of the wgpu backend against the cpu backend on random inputs.
//! Every test skips with a printed SKIPPED line where no wgpu adapter exists.

mod common;
// wgpu has no tensor-core path: its cases are the asymmetric ones.
#[allow(dead_code)]
#[path = "../../../../engine/onnx/tests/common/integer_layers.rs"]
mod integer_layers;
mod control;
mod device;
mod dtypes;
mod half;
mod layout;
mod linalg;
mod pointwise;
mod quantized;
mod reduce;
mod dynamic;
mod scatter;
mod sort_scan;
mod sampling;
mod signal;

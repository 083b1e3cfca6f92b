//! ONNX protobuf messages (`onnx.proto`, proto2), generated once by prost-build and
//! committed; see `proto/regenerate.sh`.

#[allow(clippy::all, clippy::pedantic, missing_debug_implementations)]
mod onnx;

pub use onnx::*;

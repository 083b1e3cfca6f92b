//! ONNX importer: ONNX protobuf → kiln Network.
#![forbid(unsafe_code)]

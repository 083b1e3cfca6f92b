//! kiln's intermediate representation: typed tensors, layers, networks.

mod api;
mod api_control;
pub mod broadcast;
pub mod control;
pub mod dtype;
mod dump;
pub mod format;
pub(crate) mod fused;
pub mod infer;
pub mod layer;
pub mod narrow;
pub mod network;
pub mod plugin;
pub(crate) mod quantized;
mod precision_api;
pub(crate) mod rewrite;
pub mod shape;
pub mod tensor;

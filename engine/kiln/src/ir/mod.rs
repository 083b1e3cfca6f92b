//! kiln's intermediate representation: typed tensors, layers, networks.

mod api;
pub mod dtype;
mod dump;
pub mod format;
pub mod infer;
pub mod layer;
pub mod network;
pub mod shape;
pub mod tensor;

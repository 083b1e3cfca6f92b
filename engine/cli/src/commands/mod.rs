//! One module per subcommand.

pub mod bench;
pub mod build;
pub mod cache;
pub mod compare;
pub mod devices;
pub mod inspect;
pub mod inspect_onnx;
pub mod plugins;
pub mod refit;
pub mod run;

//! One module per subcommand.

pub mod build;
pub mod cache;
pub mod inspect;
pub mod run;

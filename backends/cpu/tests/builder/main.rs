//! Builder features on the cpu backend: reduced precision (seed §6.5), I/O formats
//! (seed §6.6) and the engine inspector (seed §6.12).

mod common;
mod inspector;
mod math_mode;
mod io_formats;
mod precision;
mod sparsity;
mod tactics;

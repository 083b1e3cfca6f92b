//! Layer-by-layer tests of the cpu backend, each run through the network API, the builder
//! and an execution context, against hand-computed values.

mod backend;
mod common;
mod conv;
mod convert;
mod elementwise;
mod indexing;
mod matmul;
mod misc;
mod narrow;
mod normalize;
mod perf;
mod pool;
mod reduce;
mod resize;
mod sampling;
mod movement;
mod strings;
mod unary;

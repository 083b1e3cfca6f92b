//! Loops and if-conditionals built with the network API and run on the cpu backend,
//! against hand-computed results; and the seeds' validation rules, one test each.

mod common;
mod conditionals;
mod loops;
mod lstm;
mod validation;

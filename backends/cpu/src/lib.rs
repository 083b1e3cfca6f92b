//! The cpu reference backend.
#![forbid(unsafe_code)]

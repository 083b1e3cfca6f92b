//! Models that ship with kiln, built through the network-definition API.
#![forbid(unsafe_code)]

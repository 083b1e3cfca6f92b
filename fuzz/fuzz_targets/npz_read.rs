//! Any byte string given to the CLI's `.npz` and `.npy` readers (`--inputs`,
//! `--load-inputs`) is an error or arrays, never a panic, hang or an allocation its bytes
//! cannot fill.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)] // the writer half is not fuzzed here
#[path = "../../engine/cli/src/npz.rs"]
mod npz;

/// What the npz writer writes through (`crate::output_file` there).
#[allow(dead_code)]
#[path = "../../engine/cli/src/output_file.rs"]
mod output_file;

fuzz_target!(|data: &[u8]| {
    let _ = npz::read_npz_bytes(data);
    let _ = npz::read_npy_bytes(data);
});

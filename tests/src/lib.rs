//! The ONNX backend test suite run in-process on a kiln backend: case discovery, the
//! official runner's comparison rule, and the checked-in expectations per backend.
//!
//! The suite data comes from the `onnx` Python package (`scripts/onnx_suite_data.sh`
//! writes it): `KILN_ONNX_NODE_DATA` is the materialized `node` directory and
//! `KILN_ONNX_DATA` the package's `backend/test/data` directory (the model suites).
#![forbid(unsafe_code)]

pub mod compare;
pub mod discover;
pub mod expectations;
pub mod run;

pub use compare::{compare_outputs, Tolerance};
pub use discover::{discover, Case, CaseInputs, Suite, SuiteData};
pub use expectations::{Expectations, ExpectationsError};
pub use run::{run_case, CaseError};

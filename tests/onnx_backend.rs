//! The ONNX backend test suite, one named test per case, against
//! `conformance/expected_failures_<backend>.txt`: a listed case that passes fails the run
//! (the list only shrinks), and so does an unlisted case that fails.
//!
//! Environment: `KILN_ONNX_NODE_DATA` / `KILN_ONNX_DATA` (see `scripts/onnx_suite_data.sh`),
//! `KILN_CONFORMANCE_BACKEND` (default `cpu`), `KILN_CONFORMANCE_REQUIRE_DATA=1` to fail
//! instead of skipping without data, `KILN_CONFORMANCE_BLESS=1` to rewrite the list.

use kiln::Backend;
use kiln_conformance::expectations::{categorize, short_reason, Expected};
use kiln_conformance::{discover, run_case, Case, CaseError, Expectations, Suite, SuiteData};
use libtest_mimic::{Arguments, Failed, Trial};
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

const HOW_TO_GET_DATA: &str =
    "run `eval \"$(scripts/onnx_suite_data.sh)\"` (installs onnx 1.23.2 in .venv-onnx and exports them)";

/// Outcome of each case that ran: `Ok` or the failure.
type Results = Arc<Mutex<BTreeMap<String, Result<(), CaseError>>>>;

fn backend(name: &str) -> Result<Arc<dyn Backend>, String> {
    match name {
        "cpu" => Ok(Arc::new(kiln_cpu::CpuBackend::new())),
        "wgpu" => Ok(Arc::new(kiln_wgpu::WgpuBackend::new())),
        "cuda" => Ok(Arc::new(kiln_cuda::CudaBackend::new())),
        other => Err(format!("backend `{other}` is not linked into the conformance runner (available: cpu, wgpu, cuda)")),
    }
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-text panic payload".into())
}

fn trial(case: Case, backend: Arc<dyn Backend>, expected: Option<Expected>, list: String, results: Results) -> Trial {
    let id = case.id();
    if let Some(why) = &case.skip {
        // Sequence/optional graph I/O: skipped, as the shared harness does.
        return Trial::test(id, || Ok(())).with_kind(format!("skipped: {why}")).with_ignored_flag(true);
    }
    Trial::test(id.clone(), move || {
        let outcome = catch_unwind(AssertUnwindSafe(|| run_case(&case, backend.as_ref())))
            .unwrap_or_else(|payload| Err(CaseError::Run(format!("panic: {}", panic_text(payload.as_ref())))));
        results.lock().map_err(|_| Failed::from("results lock poisoned"))?.insert(id, outcome.clone());
        match (outcome, expected) {
            (Ok(()), None) | (Err(_), Some(_)) => Ok(()),
            (Ok(()), Some(e)) => {
                Err(format!("passes now, but {list} lists it as failing ({}): delete its line", e.reason).into())
            }
            (Err(error), None) => Err(format!("{error}\n(not in {list}; category: {})", categorize(&error)).into()),
        }
    })
}

fn main() -> ExitCode {
    let args = Arguments::from_args();
    let backend_name = std::env::var("KILN_CONFORMANCE_BACKEND").unwrap_or_else(|_| "cpu".into());
    let data = SuiteData::from_env();
    let require = std::env::var("KILN_CONFORMANCE_REQUIRE_DATA").is_ok_and(|v| v == "1");
    if data.node_dir.is_none() && data.data_dir.is_none() {
        println!(
            "onnx_backend: SKIPPED, no ONNX suite data (KILN_ONNX_NODE_DATA and KILN_ONNX_DATA are unset); \
             {HOW_TO_GET_DATA}"
        );
        return if require { ExitCode::FAILURE } else { ExitCode::SUCCESS };
    }
    for (var, dir) in [("KILN_ONNX_NODE_DATA", &data.node_dir), ("KILN_ONNX_DATA", &data.data_dir)] {
        if dir.is_none() {
            println!("onnx_backend: {var} is unset, its suites are not run; {HOW_TO_GET_DATA}");
        }
    }
    let backend = match backend(&backend_name) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("onnx_backend: {e}");
            return ExitCode::FAILURE;
        }
    };
    // A GPU backend without a device here (no adapter, no driver): say so and skip.
    if let Err(e) = backend.device() {
        println!("onnx_backend: SKIPPED: no {backend_name} adapter/driver: {e}");
        return ExitCode::SUCCESS;
    }
    // KILN_REPO: the checkout on a machine the tests were carried to (the GPU machine).
    let tests_dir = std::env::var_os("KILN_REPO")
        .map(|r| PathBuf::from(r).join("tests"))
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    let list_path = tests_dir
        .join("conformance")
        .join(format!("expected_failures_{backend_name}.txt"));
    let list_name = format!("conformance/expected_failures_{backend_name}.txt");
    let text = std::fs::read_to_string(&list_path).unwrap_or_default();
    let expectations = match Expectations::parse(&text) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("onnx_backend: {}: {e}", list_path.display());
            return ExitCode::FAILURE;
        }
    };
    let cases = match discover(&data) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("onnx_backend: {e}; {HOW_TO_GET_DATA}");
            return ExitCode::FAILURE;
        }
    };

    let results: Results = Arc::default();
    let mut trials = vec![stale_entries_trial(&cases, &data, &expectations, &list_name)];
    for case in &cases {
        let expected = expectations.get(&case.id()).cloned();
        trials.push(trial(case.clone(), backend.clone(), expected, list_name.clone(), results.clone()));
    }
    let conclusion = libtest_mimic::run(&args, trials);
    let results = results.lock().map(|r| r.clone()).unwrap_or_default();
    print_summary(&cases, &results, &expectations);
    if std::env::var("KILN_CONFORMANCE_BLESS").is_ok_and(|v| v == "1") {
        let blessed = bless(expectations, &results);
        if let Err(e) = std::fs::write(&list_path, blessed.render(&backend_name)) {
            eprintln!("onnx_backend: cannot write {}: {e}", list_path.display());
            return ExitCode::FAILURE;
        }
        println!("onnx_backend: wrote {} ({} cases)", list_path.display(), blessed.entries.len());
        return ExitCode::SUCCESS;
    }
    conclusion.exit_code()
}

/// A listed case that no longer exists in the present suites is a stale line.
fn stale_entries_trial(cases: &[Case], data: &SuiteData, expectations: &Expectations, list: &str) -> Trial {
    let present = |suite: &str| {
        if suite == Suite::Node.name() {
            data.node_dir.is_some()
        } else {
            data.data_dir.is_some()
        }
    };
    let ids: std::collections::HashSet<String> = cases.iter().map(Case::id).collect();
    let stale: Vec<String> = expectations
        .entries
        .keys()
        .filter(|id| present(id.split('/').next().unwrap_or_default()) && !ids.contains(*id))
        .cloned()
        .collect();
    let list = list.to_string();
    Trial::test("expectations/no_stale_entries", move || {
        if stale.is_empty() {
            Ok(())
        } else {
            Err(format!("{list} lists cases that do not exist: {}", stale.join(", ")).into())
        }
    })
}

/// The expectations after a run: failures of the cases that ran, untouched entries for cases
/// that did not run. A case that still fails for the same category of reason keeps its listed
/// (possibly hand-written) reason; one that now fails for another category gets the new reason,
/// so a list never carries a reason that is no longer true.
fn bless(mut expectations: Expectations, results: &BTreeMap<String, Result<(), CaseError>>) -> Expectations {
    for (id, outcome) in results {
        match outcome {
            Ok(()) => {
                expectations.entries.remove(id);
            }
            Err(error) => {
                let category = categorize(error);
                let listed = expectations.entries.get(id);
                if listed.is_none_or(|e| e.category != category) {
                    let fresh = Expected { category: category.to_string(), reason: short_reason(error) };
                    expectations.entries.insert(id.clone(), fresh);
                }
            }
        }
    }
    expectations
}

fn print_summary(cases: &[Case], results: &BTreeMap<String, Result<(), CaseError>>, expectations: &Expectations) {
    for suite in Suite::ALL {
        let in_suite: Vec<&Case> = cases.iter().filter(|c| c.suite == suite).collect();
        if in_suite.is_empty() {
            continue;
        }
        let skipped = in_suite.iter().filter(|c| c.skip.is_some()).count();
        let outcomes: Vec<_> = in_suite.iter().filter_map(|c| results.get(&c.id())).collect();
        let passed = outcomes.iter().filter(|o| o.is_ok()).count();
        let listed = in_suite.iter().filter(|c| expectations.get(&c.id()).is_some()).count();
        println!(
            "onnx_backend: {}: {passed} passed, {} failed ({listed} listed as expected), {skipped} skipped, {} not run",
            suite.name(),
            outcomes.len() - passed,
            in_suite.len() - skipped - outcomes.len()
        );
    }
}

//! Progress on a terminal: `kiln bench` shows its build, warm-up and timing steps under a
//! pseudo-terminal (util-linux `script`), nothing with `-q`, and nothing when piped.

mod common;

use common::*;
use std::process::Command;

/// stdout+stderr of kiln under a pseudo-terminal, or None (with SKIPPED) without `script`.
fn on_a_terminal(args: &[&str]) -> Option<String> {
    let kiln = env!("CARGO_BIN_EXE_kiln");
    let command = std::iter::once(kiln).chain(args.iter().copied()).map(|a| format!("'{a}'")).collect::<Vec<_>>().join(" ");
    match Command::new("script").args(["-qec", &command, "/dev/null"]).env_remove("RUST_LOG").output() {
        Ok(out) => {
            assert!(out.status.success(), "kiln {args:?} under script: {}", text(&out.stderr));
            Some(text(&out.stdout))
        }
        Err(e) => {
            eprintln!("SKIPPED: no `script` command to make a pseudo-terminal ({e})");
            None
        }
    }
}

#[test]
fn bench_shows_its_steps_on_a_terminal_and_nothing_with_q() {
    let model = repo_path("examples/models/mnist.onnx");
    let args = ["bench", path_arg(&model), "--backend", "cpu", "--warmup-ms", "300", "--duration-s", "0.5"];
    let Some(shown) = on_a_terminal(&args) else { return };
    for step in ["building for cpu", "warming up for 300 ms", "timing"] {
        assert!(shown.contains(step), "`{step}` not shown: {shown}");
    }
    let quiet = on_a_terminal(&[&["-q"], &args[..]].concat()).expect("script ran before");
    assert!(!quiet.contains("warming up") && quiet.contains("latency:"), "{quiet}");
    // Piped (as here), stderr carries no progress.
    let out = kiln(&args);
    assert!(out.status.success());
    assert_eq!(text(&out.stderr), "", "progress leaked into a pipe");
}

//! Turns every way the tool can fail into one `error: …` line on stderr and an exit status.

use std::io::Write;
use std::panic::{self, AssertUnwindSafe};
use std::process::ExitCode;
use std::sync::Mutex;

/// Exit status for a failed command (bad input, unavailable backend, …).
const EXIT_FAILURE: u8 = 1;
/// Exit status for a command-line usage error, as clap reports it.
const EXIT_USAGE: u8 = 2;
/// Exit status for a panic: a bug in kiln, never the user's fault.
const EXIT_BUG: u8 = 101;

/// A failure with its own exit status (e.g. `kiln compare`: results differ vs a backend
/// failed), so scripts can tell the outcomes apart; reported as any other error line.
#[derive(Debug)]
pub struct ExitWith {
    pub status: u8,
    pub message: String,
}

impl std::fmt::Display for ExitWith {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ExitWith {}

/// Where the panic hook leaves the panic's message and location for the error line.
static PANIC_REPORT: Mutex<Option<String>> = Mutex::new(None);

/// Runs a command; an error or a panic becomes one `error:` line on stderr.
pub fn run_reporting_errors(command: impl FnOnce() -> anyhow::Result<()>) -> ExitCode {
    // The default hook prints a multi-line message; keep only what the error line needs.
    panic::set_hook(Box::new(|info| {
        let location = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
        let message = panic_message(info.payload());
        // Asked for, the backtrace follows the error line's text (for a bug report).
        let backtrace = match std::backtrace::Backtrace::capture() {
            b if b.status() == std::backtrace::BacktraceStatus::Captured => format!("\n{b}"),
            _ => String::new(),
        };
        if let Ok(mut slot) = PANIC_REPORT.lock() {
            slot.get_or_insert(format!("{message}{location}{backtrace}"));
        }
    }));
    match panic::catch_unwind(AssertUnwindSafe(command)) {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(error)) => {
            print_error_line(&chain_text(&error));
            ExitCode::from(error.downcast_ref::<ExitWith>().map_or(EXIT_FAILURE, |e| e.status))
        }
        Err(payload) => {
            let report = PANIC_REPORT.lock().ok().and_then(|mut slot| slot.take());
            let report = report.unwrap_or_else(|| panic_message(payload.as_ref()));
            print_error_line(&format!("internal error (bug): {report}"));
            ExitCode::from(EXIT_BUG)
        }
    }
}

/// Help and version go to stdout as usual; a usage error becomes one `error:` line.
pub fn usage_error(error: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(error.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = error.print();
        return ExitCode::SUCCESS;
    }
    // Bare `kiln` (or `kiln cache`): the help itself on stderr, not folded into one line.
    if error.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        let _ = error.print();
        return ExitCode::from(EXIT_USAGE);
    }
    // clap renders a paragraph (message, hints, usage); keep the message and its hints.
    let rendered = error.render().to_string();
    let text: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .collect();
    let text = text.join(" ");
    print_error_line(text.strip_prefix("error: ").unwrap_or(&text));
    ExitCode::from(EXIT_USAGE)
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-text payload".to_string()
    }
}

/// Prints `error: <message>` as exactly one line, whatever the message holds.
/// The error and its causes, `outer: cause: …`, each cause once: many errors already
/// quote their source in their own text, which `{:#}` would print a second time.
fn chain_text(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let part = cause.to_string();
        if !text.contains(&part) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&part);
        }
    }
    text
}

fn print_error_line(message: &str) {
    let one_line: Vec<&str> = message.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let _ = writeln!(std::io::stderr().lock(), "error: {}", one_line.join(" "));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_the_error_already_quotes_is_not_repeated() {
        #[derive(Debug, thiserror::Error)]
        #[error("node `n`: {0}")]
        struct Quoting(#[source] std::io::Error);
        let inner = std::io::Error::other("shapes [4] and [3] do not broadcast");
        let error = anyhow::Error::new(Quoting(inner)).context("cannot import `m.onnx`");
        assert_eq!(chain_text(&error), "cannot import `m.onnx`: node `n`: shapes [4] and [3] do not broadcast");
        let plain = anyhow::anyhow!("cannot read").context("cannot run");
        assert_eq!(chain_text(&plain), "cannot run: cannot read");
    }

    #[test]
    fn a_panic_is_reported_as_a_bug() {
        let code = run_reporting_errors(|| panic!("index out of range"));
        // Restore the default hook for whatever runs next in this test process.
        let _ = panic::take_hook();
        assert_eq!(code, ExitCode::from(EXIT_BUG));
    }

    #[test]
    fn an_error_may_carry_its_exit_status() {
        let code = run_reporting_errors(|| Err(ExitWith { status: 3, message: "results differ".into() }.into()));
        assert_eq!(code, ExitCode::from(3));
    }

    #[test]
    fn an_error_is_a_failure() {
        let code = run_reporting_errors(|| Err(anyhow::anyhow!("first line\nsecond line")));
        assert_eq!(code, ExitCode::from(EXIT_FAILURE));
    }
}

//! Progress on stderr for every long step: drawn only on a terminal, never with `-q`.
//!
//! All bars live in one [`MultiProgress`] so that log lines ([`crate::logging`]) can hide
//! them while they print.

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::sync::OnceLock;
use std::time::Duration;

static BARS: OnceLock<MultiProgress> = OnceLock::new();

fn bars() -> &'static MultiProgress {
    BARS.get_or_init(MultiProgress::new)
}

/// Hides every bar from now on (`-q`); otherwise they draw when stderr is a terminal.
pub fn set_hidden(hidden: bool) {
    if hidden {
        bars().set_draw_target(ProgressDrawTarget::hidden());
    }
}

/// Runs `f` with the bars cleared from the screen (for a log line).
pub fn suspend<R>(f: impl FnOnce() -> R) -> R {
    bars().suspend(f)
}

/// A bar that leaves the screen when dropped, also when its step fails with `?`.
#[derive(Debug)]
pub struct Shown(ProgressBar);

impl std::ops::Deref for Shown {
    type Target = ProgressBar;

    fn deref(&self) -> &ProgressBar {
        &self.0
    }
}

impl Drop for Shown {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

/// A spinner with a message and the time so far, for a step of unknown length.
pub fn spinner(message: impl Into<String>) -> Shown {
    let bar = bars().add(ProgressBar::new_spinner());
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
        bar.set_style(style);
    }
    bar.set_message(message.into());
    bar.enable_steady_tick(Duration::from_millis(120));
    Shown(bar)
}

/// A bar of `len` steps: `{prefix} [bar] pos/len unit  message`.
pub fn counter(prefix: &str, len: u64, unit: &str) -> Shown {
    let bar = bars().add(ProgressBar::new(len));
    let template = format!("{{prefix}} {{bar:30}} {{pos}}/{{len}} {unit}  {{wide_msg}}");
    if let Ok(style) = ProgressStyle::with_template(&template) {
        bar.set_style(style);
    }
    bar.set_prefix(prefix.to_string());
    Shown(bar)
}

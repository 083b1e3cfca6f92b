//! The CLI's log on stderr: kiln's `tracing` events (and wgpu's `log` records), filtered by
//! `-q`/`-v`/`-vv`/`-vvv` or, when neither is given, by `RUST_LOG`; as text lines or JSON.
//!
//! Lines are written with the progress bars suspended, so a bar never tears a log line.

use crate::progress;
use std::io::Write;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// How much the user asked to hear.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verbosity {
    /// `-q`: errors only (no warnings, progress or build summary).
    Quiet,
    /// Warnings.
    Normal,
    /// `-v` (1): build phases, precisions and memory plans; `-vv` (2): passes' fusions and
    /// every layer's tactic; `-vvv` (3): everything.
    Verbose(u8),
}

impl Verbosity {
    pub fn from_flags(quiet: bool, verbose: u8) -> Verbosity {
        match (quiet, verbose) {
            (true, _) => Verbosity::Quiet,
            (false, 0) => Verbosity::Normal,
            (false, n) => Verbosity::Verbose(n),
        }
    }

    /// The `tracing` filter the flags stand for: any `kiln*` target; other crates (wgpu's
    /// `log` records) only from -vvv on, so that a failure stays one `error:` line.
    fn directives(self) -> &'static str {
        match self {
            Verbosity::Quiet => "kiln=error",
            Verbosity::Normal => "kiln=warn",
            Verbosity::Verbose(1) => "kiln=info",
            Verbosity::Verbose(2) => "kiln=debug",
            Verbosity::Verbose(_) => "warn,kiln=trace",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `warning: …`, `debug kiln::tactics: …`.
    Text,
    /// One JSON object per event (timestamp, level, target, fields).
    Json,
}

/// Installs the stderr log. Flags win over `RUST_LOG`, which wins over the default
/// (warnings); a malformed `RUST_LOG` is an error naming it.
pub fn init(verbosity: Verbosity, flags_given: bool, format: LogFormat) -> anyhow::Result<()> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !flags_given && !spec.trim().is_empty() => EnvFilter::builder()
            .parse(&spec)
            .map_err(|e| anyhow::anyhow!("RUST_LOG=`{spec}` is not a log filter: {e}"))?,
        _ => EnvFilter::new(verbosity.directives()),
    };
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(SuspendingStderr);
    // A second init (tests calling main twice) keeps the first subscriber.
    let _ = match format {
        LogFormat::Text => builder.event_format(TextLine).try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    Ok(())
}

/// `warning: message` for warnings and errors (the CLI's own wording); `info kiln::builder:
/// message` for the rest, so a user can see which part spoke and filter on it.
struct TextLine;

impl<S, N> FormatEvent<S, N> for TextLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> std::fmt::Result {
        let meta = event.metadata();
        match *meta.level() {
            Level::ERROR => write!(writer, "error: ")?,
            Level::WARN => write!(writer, "warning: ")?,
            level => write!(writer, "{} {}: ", level.as_str().to_lowercase(), meta.target())?,
        }
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// Stderr, each event written whole while the progress bars are hidden.
struct SuspendingStderr;

impl<'a> MakeWriter<'a> for SuspendingStderr {
    type Writer = EventBuffer;

    fn make_writer(&'a self) -> EventBuffer {
        EventBuffer(Vec::new())
    }
}

/// One event's text, written to stderr when dropped.
struct EventBuffer(Vec<u8>);

impl Write for EventBuffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for EventBuffer {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        // A closed stderr leaves nowhere to report the failure.
        progress::suspend(|| {
            let _ = std::io::stderr().lock().write_all(&self.0);
        });
    }
}

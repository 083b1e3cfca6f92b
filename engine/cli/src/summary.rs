//! Small text helpers shared by the commands' reports.

use crate::output_file::is_stdout;
use anyhow::Context;
use std::path::Path;
use kiln::{DataType, HostTensor, Shape};
use std::io::Write;
use std::time::Duration;

/// Writes a report to stdout. A closed pipe (`kiln … | head`) is not an error worth a
/// message: the reader has gone.
pub fn emit(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(anyhow::Error::new(e).context("cannot write to stdout"))
        }
        _ => Ok(()),
    }
}

/// Writes `value` as pretty JSON to `path`, or to stdout when `path` is `-`.
pub fn write_json(path: &Path, value: &serde_json::Value) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value)? + "\n";
    if is_stdout(path) {
        return emit(&text);
    }
    crate::output_file::write_bytes(path, text.as_bytes()).with_context(|| format!("cannot write `{}`", path.display()))
}

/// `f32[1,3,224,224]`.
pub fn tensor_type(dtype: DataType, shape: &Shape) -> String {
    format!("{dtype}{shape}")
}

/// `f32[1,10]` of a concrete host tensor.
pub fn host_tensor_type(tensor: &HostTensor) -> String {
    let dims: Vec<String> = tensor.shape().iter().map(|d| d.to_string()).collect();
    format!("{}[{}]", tensor.dtype(), dims.join(","))
}

/// The first few values, e.g. `[0.141365, 0.044998, … 8 more]`.
pub fn preview(tensor: &HostTensor) -> String {
    const SHOWN: usize = 6;
    let mut parts: Vec<String> = if tensor.dtype().is_float() {
        tensor.to_f64_vec().into_iter().take(SHOWN).map(float_text).collect()
    } else {
        kiln::dispatch_data!(tensor.data(), v => v.iter().take(SHOWN).map(|x| x.to_string()).collect())
    };
    if tensor.len() > SHOWN {
        parts.push(format!("… {} more", tensor.len() - SHOWN));
    }
    format!("[{}]", parts.join(", "))
}

/// About six significant digits, without trailing zeros.
fn float_text(v: f64) -> String {
    if v == 0.0 || !v.is_finite() || (1e-4..1e6).contains(&v.abs()) {
        let fixed = format!("{v:.6}");
        if fixed.contains('.') {
            return fixed.trim_end_matches('0').trim_end_matches('.').to_string();
        }
        return fixed;
    }
    format!("{v:.4e}")
}

pub fn duration(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms < 1000.0 {
        format!("{ms:.2} ms")
    } else {
        format!("{:.3} s", ms / 1e3)
    }
}

/// `1.72 MB (1724000 bytes)`.
pub fn byte_size(bytes: usize) -> String {
    let b = bytes as f64;
    let human = if b >= 1e9 {
        format!("{:.2} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.2} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.2} kB", b / 1e3)
    } else {
        return format!("{bytes} bytes");
    };
    format!("{human} ({bytes} bytes)")
}

//! How large a tensor may be: element counts and byte sizes computed with overflow
//! checks, and the memory budget a tensor is checked against before anything is
//! allocated (a graph that would compute a terabyte tensor fails with an error naming the
//! layer and the size, instead of aborting the process or wrapping to a wrong answer).
//!
//! The budget is [`crate::BuilderConfig::max_memory_bytes`] where the user set one,
//! otherwise what the machine has: [`host_memory_bytes`] for the cpu backend (physical
//! memory, lowered by `ulimit -v` / `-d`), the device's memory for a GPU backend.

use crate::ir::dtype::DataType;
use std::sync::OnceLock;

/// The number of elements of `dims`, or `None` when it does not fit a `usize`.
pub fn element_count(dims: &[usize]) -> Option<usize> {
    dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
}

/// Bytes one element of `dtype` takes in memory (a string is counted as its handle).
pub fn element_bytes(dtype: DataType) -> usize {
    dtype.size_bytes().unwrap_or(std::mem::size_of::<String>())
}

/// The bytes a `dtype` tensor of `dims` takes, or `None` when that is more than any
/// allocation can be (`isize::MAX`, Rust's limit for one allocation).
pub fn tensor_bytes(dtype: DataType, dims: &[usize]) -> Option<u64> {
    let bytes = element_count(dims)?.checked_mul(element_bytes(dtype))?;
    (bytes <= isize::MAX as usize).then_some(bytes as u64)
}

/// Why a tensor cannot exist within `budget` bytes, if it cannot: it overflows, or it
/// needs more than the budget. The text names the type and dims; the caller names the
/// layer.
pub fn check_tensor(dtype: DataType, dims: &[usize], budget: u64) -> Result<(), String> {
    match tensor_bytes(dtype, dims) {
        None => Err(format!("{dtype}{dims:?} has more elements than any memory can hold")),
        Some(bytes) if bytes > budget => Err(format!(
            "{dtype}{dims:?} needs {}, over the memory budget of {} (set with --max-memory)",
            format_bytes(bytes),
            format_bytes(budget)
        )),
        Some(_) => Ok(()),
    }
}

/// `bytes` for a person: "512 B", "3.0 KiB", "1.5 GiB", "16.0 EiB".
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// Parses a size as the CLI takes it: bytes, or a number with a K/M/G/T suffix (powers
/// of 1024, an optional `B` or `iB` after it): "1073741824", "512M", "8G", "1.5GiB".
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let lower = t.to_ascii_lowercase();
    let number_end = lower.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(lower.len());
    let (number, unit) = lower.split_at(number_end);
    let scale: u64 = match unit.trim_end_matches("ib").trim_end_matches('b') {
        "" => 1,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        "t" => 1 << 40,
        _ => return Err(format!("`{t}` is not a size (bytes, or a number with K, M, G or T)")),
    };
    let value: f64 = number.parse().map_err(|_| format!("`{t}` is not a size (bytes, or a number with K, M, G or T)"))?;
    let bytes = value * scale as f64;
    if !bytes.is_finite() || bytes < 1.0 || bytes > u64::MAX as f64 {
        return Err(format!("`{t}` is not a usable size: it must be at least 1 byte and below 16 EiB"));
    }
    Ok(bytes as u64)
}

/// The memory this process may use on the host: physical memory, or less where a
/// resource limit (`ulimit -v`, `ulimit -d`) says so; `u64::MAX` where neither is known.
/// Read once per process.
pub fn host_memory_bytes() -> u64 {
    static HOST: OnceLock<u64> = OnceLock::new();
    *HOST.get_or_init(|| {
        let physical = std::fs::read_to_string("/proc/meminfo").ok().and_then(|t| meminfo_total(&t));
        let limits = std::fs::read_to_string("/proc/self/limits").ok().map(|t| resource_limits(&t)).unwrap_or_default();
        physical.into_iter().chain(limits).min().unwrap_or(u64::MAX)
    })
}

/// `MemTotal` of a `/proc/meminfo` text, in bytes.
fn meminfo_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// The soft address-space and data-segment limits of a `/proc/self/limits` text, in
/// bytes (those that are set).
fn resource_limits(text: &str) -> Vec<u64> {
    text.lines()
        .filter(|l| l.starts_with("Max address space") || l.starts_with("Max data size"))
        .filter_map(|l| l.split_whitespace().nth(3)?.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_that_overflow_are_none() {
        assert_eq!(element_count(&[2, 3, 4]), Some(24));
        assert_eq!(element_count(&[1 << 32, 1 << 32]), None);
        assert_eq!(tensor_bytes(DataType::F32, &[1 << 31, 1 << 31]), None, "2^62 f32 is over isize::MAX bytes");
        assert_eq!(tensor_bytes(DataType::F16, &[3, 5]), Some(30));
        assert_eq!(tensor_bytes(DataType::F32, &[0, 1 << 40]), Some(0));
    }

    #[test]
    fn a_tensor_over_the_budget_names_its_size_and_the_budget() {
        let e = check_tensor(DataType::F32, &[1 << 20, 1 << 10], 1 << 30).unwrap_err();
        assert_eq!(e, "f32[1048576, 1024] needs 4.0 GiB, over the memory budget of 1.0 GiB (set with --max-memory)");
        assert!(check_tensor(DataType::F32, &[1 << 20, 1 << 10], 4 << 30).is_ok());
        let e = check_tensor(DataType::F32, &[1 << 32, 1 << 32], u64::MAX).unwrap_err();
        assert!(e.contains("more elements than any memory"), "{e}");
    }

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("512M"), Ok(512 << 20));
        assert_eq!(parse_bytes("8g"), Ok(8 << 30));
        assert_eq!(parse_bytes("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_bytes("2TB"), Ok(2 << 40));
        for bad in ["", "G", "-1", "0", "1e300", "12Q", "1.2.3M", "99999999999999T"] {
            assert!(parse_bytes(bad).is_err(), "{bad} parsed");
        }
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(3 << 29), "1.5 GiB");
    }

    #[test]
    fn host_memory_reads_the_smallest_of_memory_and_limits() {
        assert_eq!(meminfo_total("MemTotal:       24576000 kB\nMemFree: 1 kB\n"), Some(24576000 * 1024));
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max data size             unlimited            unlimited            bytes\n\
                      Max address space         8192000000           unlimited            bytes\n";
        assert_eq!(resource_limits(limits), vec![8192000000]);
        assert!(host_memory_bytes() > 0);
    }
}

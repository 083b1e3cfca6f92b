//! Calibration results and their cache file: one `amax` per tensor name, so a second build
//! skips calibration (TensorRT's calibration cache).
//!
//! The file is text: a header line `kiln-calibration 1 METHOD`, then one line per tensor,
//! `NAME: XXXXXXXX`, the amax's f32 bits in hex (exact round trip). Names may hold `:` (the
//! last `": "` splits), not line breaks.

use std::collections::BTreeMap;
use thiserror::Error;

const HEADER: &str = "kiln-calibration 1";

#[derive(Debug, Error, PartialEq)]
pub enum CalibrationError {
    #[error("calibration cache line {line}: {reason}")]
    Cache { line: usize, reason: String },
    #[error("calibration: {0}")]
    Run(String),
}

/// Per-tensor absolute maxima measured by one calibration method.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CalibrationTable {
    /// How the ranges were measured (`entropy`, `minmax`, `percentile=99.99`), for the log.
    pub method: String,
    /// Tensor name → amax (the range is `[-amax, amax]`).
    pub amax: BTreeMap<String, f32>,
}

impl CalibrationTable {
    /// The cache file's text.
    pub fn to_cache_text(&self) -> Result<String, CalibrationError> {
        let mut text = format!("{HEADER} {}\n", self.method);
        for (i, (name, amax)) in self.amax.iter().enumerate() {
            if name.contains(['\n', '\r']) {
                return Err(CalibrationError::Cache { line: i + 2, reason: format!("tensor name {name:?} holds a line break") });
            }
            text += &format!("{name}: {:08x}\n", amax.to_bits());
        }
        Ok(text)
    }

    /// Reads a cache file's text.
    pub fn from_cache_text(text: &str) -> Result<CalibrationTable, CalibrationError> {
        let bad = |line: usize, reason: String| CalibrationError::Cache { line, reason };
        let mut lines = text.lines();
        let header = lines.next().unwrap_or_default();
        let method = header
            .strip_prefix(HEADER)
            .and_then(|rest| rest.strip_prefix(' '))
            .ok_or_else(|| bad(1, format!("`{header}` is not a kiln calibration cache header (`{HEADER} METHOD`)")))?;
        let mut amax = BTreeMap::new();
        for (i, line) in lines.enumerate() {
            let at = i + 2;
            if line.trim().is_empty() {
                continue;
            }
            let (name, hex) = line.rsplit_once(": ").ok_or_else(|| bad(at, format!("`{line}` is not `NAME: HEXBITS`")))?;
            let bits = u32::from_str_radix(hex.trim(), 16).map_err(|e| bad(at, format!("`{hex}` is not 8 hex digits: {e}")))?;
            let value = f32::from_bits(bits);
            if !value.is_finite() || value < 0.0 {
                return Err(bad(at, format!("the range of `{name}` is {value}, not a finite amax ≥ 0")));
            }
            if amax.insert(name.to_string(), value).is_some() {
                return Err(bad(at, format!("`{name}` appears twice")));
            }
        }
        Ok(CalibrationTable { method: method.to_string(), amax })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_text_round_trips_exactly() {
        let mut t = CalibrationTable { method: "entropy".into(), ..Default::default() };
        t.amax.insert("conv1:0".into(), 0.1);
        t.amax.insert("x".into(), 3.402_823_5e38);
        t.amax.insert("zero".into(), 0.0);
        let text = t.to_cache_text().unwrap();
        assert!(text.starts_with("kiln-calibration 1 entropy\n"), "{text}");
        assert_eq!(CalibrationTable::from_cache_text(&text).unwrap(), t);
    }

    #[test]
    fn a_bad_cache_names_the_line() {
        let err = |text: &str| CalibrationTable::from_cache_text(text).unwrap_err().to_string();
        assert!(err("TRT-8601-EntropyCalibration2\nx: 3c010a14\n").contains("line 1"));
        assert!(err("kiln-calibration 1 minmax\nx 3c010a14\n").contains("line 2"));
        assert!(err("kiln-calibration 1 minmax\nx: zz\n").contains("not 8 hex digits"));
        assert!(err("kiln-calibration 1 minmax\nx: 7fc00000\n").contains("not a finite amax"));
        assert!(err("kiln-calibration 1 minmax\nx: 3f800000\nx: 3f800000\n").contains("twice"));
        let t = CalibrationTable { method: "m".into(), amax: [("a\nb".to_string(), 1.0)].into() };
        assert!(t.to_cache_text().is_err());
    }
}

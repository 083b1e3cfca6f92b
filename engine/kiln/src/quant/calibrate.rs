//! Calibration's arithmetic: the calibration set, and how a method picks a range from the
//! magnitudes seen (the run over the set is [`crate::builder::calibrate`]).
//!
//! Methods (TensorRT's calibrators):
//! - `minmax`: the largest magnitude seen;
//! - `entropy`: the threshold whose 128-level quantization of the magnitudes' histogram
//!   loses the least information (smallest KL divergence from the clipped histogram),
//!   TensorRT's entropy calibration;
//! - `percentile=P`: the magnitude below which P% of the values fall.
//!
//! Histograms take a second pass over the set, once the largest magnitude is known.

use crate::ir::tensor::HostTensor;
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

/// Histogram bins over `[0, amax]` (TensorRT's entropy calibrator uses 2048).
pub const BINS: usize = 2048;
/// Quantized levels of a magnitude (8-bit signed: 128).
const LEVELS: usize = 128;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CalibrationMethod {
    MinMax,
    Entropy,
    /// The percentile (0 < P ≤ 100) of the magnitudes kept.
    Percentile(f64),
}

impl fmt::Display for CalibrationMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CalibrationMethod::MinMax => write!(f, "minmax"),
            CalibrationMethod::Entropy => write!(f, "entropy"),
            CalibrationMethod::Percentile(p) => write!(f, "percentile={p}"),
        }
    }
}

impl FromStr for CalibrationMethod {
    type Err = String;

    /// `entropy`, `minmax`, `percentile` (99.99) or `percentile=P`.
    fn from_str(s: &str) -> Result<CalibrationMethod, String> {
        match s.to_ascii_lowercase().as_str() {
            "entropy" => Ok(CalibrationMethod::Entropy),
            "minmax" | "min-max" | "max" => Ok(CalibrationMethod::MinMax),
            "percentile" => Ok(CalibrationMethod::Percentile(99.99)),
            other => match other.strip_prefix("percentile=").map(str::parse::<f64>) {
                Some(Ok(p)) if p > 0.0 && p <= 100.0 => Ok(CalibrationMethod::Percentile(p)),
                Some(_) => Err(format!("`{s}`: the percentile must be a number in (0, 100]")),
                None => Err(format!("unknown calibration method `{s}` (entropy, minmax, percentile, percentile=P)")),
            },
        }
    }
}

/// A calibration set: `len` batches, each the network's inputs by name, read on demand (the
/// set is read twice and need not fit in memory).
pub trait CalibrationData {
    fn len(&self) -> usize;
    fn batch(&self, index: usize) -> Result<HashMap<String, HostTensor>, String>;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The amax `method` keeps from a histogram of magnitudes over `[0, amax]` (min-max: `amax`).
pub fn chosen_amax(method: CalibrationMethod, hist: &[u64], amax: f64) -> f32 {
    let bin_width = amax / hist.len().max(1) as f64;
    let bins = match method {
        CalibrationMethod::MinMax => return amax as f32,
        CalibrationMethod::Percentile(p) => percentile_bins(hist, p),
        CalibrationMethod::Entropy => entropy_bins(hist),
    };
    (bins as f64 * bin_width) as f32
}

/// Counts `values` (magnitudes ≤ `amax`) into `hist`'s equal bins over `[0, amax]`.
pub fn add_to_histogram(hist: &mut [u64], amax: f64, values: &[f64]) {
    if amax <= 0.0 {
        hist[0] += values.len() as u64;
        return;
    }
    let scale = hist.len() as f64 / amax;
    for &v in values {
        hist[((v * scale) as usize).min(hist.len() - 1)] += 1;
    }
}

/// How many leading bins hold `p` percent of the counts.
fn percentile_bins(hist: &[u64], p: f64) -> usize {
    let total: u64 = hist.iter().sum();
    let want = (total as f64 * p / 100.0).ceil() as u64;
    let mut seen = 0;
    for (i, &c) in hist.iter().enumerate() {
        seen += c;
        if seen >= want {
            return i + 1;
        }
    }
    hist.len()
}

/// The number of leading bins to keep that minimizes KL(P ‖ Q), where P is the histogram cut
/// there (outliers counted into its last bin) and Q is P's quantization to [`LEVELS`] levels
/// expanded back over P's non-empty bins (TensorRT's entropy calibration).
fn entropy_bins(hist: &[u64]) -> usize {
    if hist.iter().all(|&c| c == 0) {
        return hist.len();
    }
    let (mut best, mut best_kl) = (hist.len(), f64::INFINITY);
    let mut outliers: u64 = hist[LEVELS..].iter().sum();
    for keep in LEVELS..=hist.len() {
        let mut p: Vec<f64> = hist[..keep].iter().map(|&c| c as f64).collect();
        p[keep - 1] += outliers as f64;
        if keep < hist.len() {
            outliers -= hist[keep];
        }
        let q = quantized(&hist[..keep]);
        let kl = kl_divergence(&p, &q);
        if kl < best_kl {
            (best, best_kl) = (keep, kl);
        }
    }
    best
}

/// `bins` merged into [`LEVELS`] groups, each group's total spread evenly over its non-empty
/// bins.
fn quantized(bins: &[u64]) -> Vec<f64> {
    let n = bins.len();
    let mut q = vec![0f64; n];
    for level in 0..LEVELS {
        let (start, end) = (level * n / LEVELS, (level + 1) * n / LEVELS);
        let group = &bins[start..end];
        let total: u64 = group.iter().sum();
        let filled = group.iter().filter(|&&c| c > 0).count();
        if filled == 0 {
            continue;
        }
        for (i, &c) in group.iter().enumerate() {
            if c > 0 {
                q[start + i] = total as f64 / filled as f64;
            }
        }
    }
    q
}

/// KL(P ‖ Q) of two unnormalized histograms; infinite where P has mass Q lacks.
fn kl_divergence(p: &[f64], q: &[f64]) -> f64 {
    let (sp, sq): (f64, f64) = (p.iter().sum(), q.iter().sum());
    if sp == 0.0 || sq == 0.0 {
        return f64::INFINITY;
    }
    let mut kl = 0.0;
    for (&a, &b) in p.iter().zip(q) {
        if a > 0.0 {
            if b <= 0.0 {
                return f64::INFINITY;
            }
            let (a, b) = (a / sp, b / sq);
            kl += a * (a / b).ln();
        }
    }
    kl
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_parse_and_print() {
        assert_eq!("entropy".parse::<CalibrationMethod>(), Ok(CalibrationMethod::Entropy));
        assert_eq!("MinMax".parse::<CalibrationMethod>(), Ok(CalibrationMethod::MinMax));
        assert_eq!("percentile".parse::<CalibrationMethod>(), Ok(CalibrationMethod::Percentile(99.99)));
        assert_eq!("percentile=99.9".parse::<CalibrationMethod>(), Ok(CalibrationMethod::Percentile(99.9)));
        assert!("percentile=0".parse::<CalibrationMethod>().unwrap_err().contains("(0, 100]"));
        assert!("kl".parse::<CalibrationMethod>().unwrap_err().contains("unknown calibration method"));
        assert_eq!(CalibrationMethod::Percentile(99.9).to_string(), "percentile=99.9");
    }

    /// Magnitudes of a bell (100k values under about 4.8) with three rare outliers up to 8.
    fn bell_with_outliers() -> (Vec<u64>, f64) {
        let amax = 8.0;
        let mut hist = vec![0u64; BINS];
        let mut values: Vec<f64> = (0..100_000u64).map(|i| (-2.0 * (1.0 - (i as f64 + 0.5) / 100_000.0).ln()).sqrt()).collect();
        values.extend([6.0, 7.0, 8.0]);
        add_to_histogram(&mut hist, amax, &values);
        (hist, amax)
    }

    #[test]
    fn each_method_picks_its_threshold() {
        let (hist, amax) = bell_with_outliers();
        let entropy = chosen_amax(CalibrationMethod::Entropy, &hist, amax);
        eprintln!("entropy threshold {entropy}");
        assert!(entropy > 3.0 && entropy < 8.0, "entropy keeps the bell and clips the far outliers: {entropy}");
        let p99 = chosen_amax(CalibrationMethod::Percentile(99.0), &hist, amax);
        // The 99th percentile of this bell is sqrt(2 ln 100) = 3.03.
        assert!((p99 - 3.03).abs() < 0.01, "99th percentile {p99}");
        assert_eq!(chosen_amax(CalibrationMethod::Percentile(100.0), &hist, amax), 8.0);
        assert_eq!(chosen_amax(CalibrationMethod::MinMax, &hist, amax), 8.0);
    }

    #[test]
    fn entropy_of_a_flat_histogram_keeps_it_all() {
        let hist = vec![10u64; BINS];
        assert_eq!(entropy_bins(&hist), BINS);
        assert_eq!(entropy_bins(&[0u64; BINS]), BINS);
    }

    #[test]
    fn kl_is_zero_for_equal_and_infinite_for_missing_mass() {
        assert_eq!(kl_divergence(&[1.0, 2.0], &[2.0, 4.0]), 0.0);
        assert_eq!(kl_divergence(&[1.0, 1.0], &[1.0, 0.0]), f64::INFINITY);
    }
}

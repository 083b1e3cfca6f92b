//! Order statistics of a sample (latencies for `kiln bench`, errors for `kiln compare`).

use serde_json::{json, Value};

/// Min, mean, max and percentiles of a sample. Percentiles use the nearest-rank rule (the
/// smallest value with at least p% of the sample at or below it), so every figure is a
/// value of the sample and `min <= median <= p90 <= p95 <= p99 <= max` always holds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    pub count: usize,
    pub min: f64,
    pub mean: f64,
    /// Population standard deviation (the sample is every measured value, not a draw).
    pub stddev: f64,
    pub median: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

impl Summary {
    /// `None` for an empty sample. NaN values are the caller's to exclude: they have no
    /// place in an order.
    pub fn of(mut sample: Vec<f64>) -> Option<Summary> {
        if sample.is_empty() {
            return None;
        }
        sample.sort_by(f64::total_cmp);
        let count = sample.len();
        let mean = sample.iter().sum::<f64>() / count as f64;
        let stddev = (sample.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / count as f64).sqrt();
        let rank = |p: f64| -> f64 {
            // Nearest rank: ceil(p/100 * n), 1-based, clamped to the sample.
            let r = ((p / 100.0) * count as f64).ceil() as usize;
            sample[r.clamp(1, count) - 1]
        };
        Some(Summary {
            count,
            min: sample[0],
            mean,
            stddev,
            median: rank(50.0),
            p90: rank(90.0),
            p95: rank(95.0),
            p99: rank(99.0),
            max: sample[count - 1],
        })
    }

    /// Every figure scaled by `factor` (e.g. seconds to milliseconds).
    pub fn scaled(self, factor: f64) -> Summary {
        Summary {
            count: self.count,
            min: self.min * factor,
            mean: self.mean * factor,
            stddev: self.stddev * factor.abs(),
            median: self.median * factor,
            p90: self.p90 * factor,
            p95: self.p95 * factor,
            p99: self.p99 * factor,
            max: self.max * factor,
        }
    }

    pub fn to_json(self) -> Value {
        json!({
            "count": self.count,
            "min": finite_or_null(self.min),
            "mean": finite_or_null(self.mean),
            "stddev": finite_or_null(self.stddev),
            "median": finite_or_null(self.median),
            "p90": finite_or_null(self.p90),
            "p95": finite_or_null(self.p95),
            "p99": finite_or_null(self.p99),
            "max": finite_or_null(self.max),
        })
    }
}

/// JSON has no infinities: they become `null`.
pub fn finite_or_null(x: f64) -> Value {
    if x.is_finite() {
        json!(x)
    } else {
        Value::Null
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_sample_has_no_summary() {
        assert_eq!(Summary::of(Vec::new()), None);
    }

    #[test]
    fn nearest_rank_percentiles_of_one_to_hundred() {
        let s = Summary::of((1..=100).rev().map(f64::from).collect()).unwrap();
        assert_eq!((s.min, s.median, s.p90, s.p95, s.p99, s.max), (1.0, 50.0, 90.0, 95.0, 99.0, 100.0));
        assert_eq!(s.mean, 50.5);
        // sqrt((100² - 1) / 12) for 1..=100.
        assert!((s.stddev - (9999.0f64 / 12.0).sqrt()).abs() < 1e-9, "{}", s.stddev);
        assert_eq!(Summary::of(vec![2.0, 2.0]).unwrap().stddev, 0.0);
        assert_eq!(s.count, 100);
    }

    #[test]
    fn small_samples_take_sample_values() {
        let s = Summary::of(vec![3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.min, s.median, s.p99, s.max), (1.0, 2.0, 3.0, 3.0));
        let one = Summary::of(vec![7.5]).unwrap();
        assert_eq!((one.min, one.median, one.p90, one.max), (7.5, 7.5, 7.5, 7.5));
    }

    #[test]
    fn infinities_sort_last_and_serialize_as_null() {
        let s = Summary::of(vec![f64::INFINITY, 1.0]).unwrap();
        assert_eq!(s.max, f64::INFINITY);
        assert_eq!(s.to_json()["max"], Value::Null);
        assert_eq!(s.to_json()["min"], json!(1.0));
    }
}

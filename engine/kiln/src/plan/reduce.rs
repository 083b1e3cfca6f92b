//! Reduce planning: the axes a Reduce layer's run-time axes input names.

use crate::ir::shape::normalize_axis;

/// The axes of a rank-`rank` input that the run-time axes `values` reduce: every axis when
/// the list is empty (ONNX's default, as shape inference reads it), else each value with
/// negative ones counted from the end.
pub fn run_time_axes(values: &[i64], rank: usize) -> Result<Vec<usize>, String> {
    if values.is_empty() {
        return Ok((0..rank).collect());
    }
    values.iter().map(|&a| normalize_axis(a, rank).ok_or_else(|| format!("axis {a} is out of range for rank {rank}"))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_list_reduces_every_axis() {
        assert_eq!(run_time_axes(&[], 3).unwrap(), vec![0, 1, 2]);
        assert_eq!(run_time_axes(&[-1, 0], 3).unwrap(), vec![2, 0]);
        assert!(run_time_axes(&[3], 3).is_err());
    }
}

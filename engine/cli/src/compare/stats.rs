//! Element-wise comparison of one tensor against its reference.
//!
//! Floats: an element fails only when it is outside both tolerances,
//! `|a - r| > atol && |a - r| > rtol * |r|`. NaN equals NaN, NaN against a number fails, and
//! an infinity must be matched by the same infinity. Integers and bools compare exactly.

use crate::stats::Summary;
use kiln::{DataType, HostTensor};

/// Absolute and relative tolerance of a float comparison.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerances {
    pub rtol: f64,
    pub atol: f64,
}

/// The tolerances of every compared tensor: a default, and per-tensor rtol or atol
/// (`--rtol name:x`) that replace the default's for that tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct ToleranceSet {
    pub default: Tolerances,
    pub rtol: std::collections::BTreeMap<String, f64>,
    pub atol: std::collections::BTreeMap<String, f64>,
}

impl ToleranceSet {
    pub fn uniform(default: Tolerances) -> ToleranceSet {
        ToleranceSet { default, rtol: Default::default(), atol: Default::default() }
    }

    /// The tolerances of tensor `name`.
    pub fn of(&self, name: &str) -> Tolerances {
        Tolerances {
            rtol: self.rtol.get(name).copied().unwrap_or(self.default.rtol),
            atol: self.atol.get(name).copied().unwrap_or(self.default.atol),
        }
    }
}

/// The outcome for one tensor.
#[derive(Clone, Debug)]
pub struct TensorComparison {
    pub name: String,
    pub dtype: DataType,
    pub shape: Vec<usize>,
    pub elements: usize,
    /// Elements outside tolerance (or, for exact types, different).
    pub mismatches: usize,
    pub detail: Detail,
}

#[derive(Clone, Debug)]
pub enum Detail {
    Float(FloatErrors),
    /// Integers and bools: compared bit for bit.
    Exact,
    /// The tensors cannot be compared element by element (shape, type or a missing
    /// tensor); always a failure.
    Incomparable(String),
}

/// Error figures of a float tensor, over the elements where both values are finite.
#[derive(Clone, Debug)]
pub struct FloatErrors {
    pub absolute: Option<Summary>,
    /// `|a - r| / |r|`; infinite where `r = 0` and `a != 0`.
    pub relative: Option<Summary>,
    /// Elements where NaN or an infinity is not matched exactly.
    pub non_finite_mismatches: usize,
    /// The element of largest absolute error: flat index, value, reference value.
    pub worst: Option<(usize, f64, f64)>,
}

impl TensorComparison {
    pub fn passed(&self) -> bool {
        self.mismatches == 0 && !matches!(self.detail, Detail::Incomparable(_))
    }

    /// A tensor the candidate backend did not produce.
    pub fn missing(name: &str, reference: &HostTensor) -> TensorComparison {
        TensorComparison {
            name: name.to_string(),
            dtype: reference.dtype(),
            shape: reference.shape().to_vec(),
            elements: reference.len(),
            mismatches: reference.len(),
            detail: Detail::Incomparable("the backend did not produce this tensor".into()),
        }
    }
}

/// Compares `candidate` with `reference` element by element.
pub fn compare_tensor(name: &str, candidate: &HostTensor, reference: &HostTensor, tol: Tolerances) -> TensorComparison {
    let incomparable = |reason: String| TensorComparison {
        name: name.to_string(),
        dtype: candidate.dtype(),
        shape: candidate.shape().to_vec(),
        elements: reference.len(),
        mismatches: reference.len(),
        detail: Detail::Incomparable(reason),
    };
    if candidate.shape() != reference.shape() {
        return incomparable(format!(
            "shape {:?} differs from the reference's {:?}",
            candidate.shape(),
            reference.shape()
        ));
    }
    let (dtype, reference_dtype) = (candidate.dtype(), reference.dtype());
    let (mismatches, detail) = if dtype.is_float() && reference_dtype.is_float() {
        // Types may differ (an f16 engine output against f32): compare the values.
        let errors = compare_floats(&candidate.to_f64_vec(), &reference.to_f64_vec(), tol);
        (errors.0, Detail::Float(errors.1))
    } else if dtype != reference_dtype {
        return incomparable(format!("type {dtype} differs from the reference's {reference_dtype}"));
    } else {
        match exact_mismatches(candidate, reference) {
            Some(count) => (count, Detail::Exact),
            None => return incomparable(format!("unsupported dtype {dtype} for comparison")),
        }
    };
    TensorComparison {
        name: name.to_string(),
        dtype,
        shape: candidate.shape().to_vec(),
        elements: candidate.len(),
        mismatches,
        detail,
    }
}

/// Mismatch count and error figures of two equally long float sequences.
fn compare_floats(values: &[f64], reference: &[f64], tol: Tolerances) -> (usize, FloatErrors) {
    let mut absolute = Vec::with_capacity(values.len());
    let mut relative = Vec::with_capacity(values.len());
    let mut mismatches = 0;
    let mut non_finite_mismatches = 0;
    let mut worst: Option<(usize, f64, f64)> = None;
    for (i, (&a, &r)) in values.iter().zip(reference).enumerate() {
        if !a.is_finite() || !r.is_finite() {
            let same = (a.is_nan() && r.is_nan()) || a == r;
            if !same {
                mismatches += 1;
                non_finite_mismatches += 1;
            }
            continue;
        }
        let abs = (a - r).abs();
        let rel = if r == 0.0 {
            if abs == 0.0 {
                0.0
            } else {
                f64::INFINITY
            }
        } else {
            abs / r.abs()
        };
        if abs > tol.atol && abs > tol.rtol * r.abs() {
            mismatches += 1;
        }
        if worst.is_none_or(|(_, wa, wr)| abs > (wa - wr).abs()) {
            worst = Some((i, a, r));
        }
        absolute.push(abs);
        relative.push(rel);
    }
    let errors =
        FloatErrors { absolute: Summary::of(absolute), relative: Summary::of(relative), non_finite_mismatches, worst };
    (mismatches, errors)
}

/// Elements whose bytes differ, for same-typed integer or bool tensors; `None` for a type
/// without a whole-byte element size.
fn exact_mismatches(candidate: &HostTensor, reference: &HostTensor) -> Option<usize> {
    if let (Some(a), Some(r)) = (candidate.as_strings(), reference.as_strings()) {
        return (a.len() == r.len()).then(|| a.iter().zip(r).filter(|(x, y)| x != y).count());
    }
    let size = candidate.dtype().size_bytes()?;
    if size == 0 {
        return None;
    }
    let (a, r) = (candidate.data().to_le_bytes(), reference.data().to_le_bytes());
    if a.len() != candidate.len() * size || r.len() != a.len() {
        return None;
    }
    Some(a.chunks_exact(size).zip(r.chunks_exact(size)).filter(|(x, y)| x != y).count())
}

/// A flat index as a multi-index into `shape`, e.g. `[0, 3]`.
pub fn multi_index(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut index = vec![0; shape.len()];
    for (slot, &dim) in index.iter_mut().zip(shape).rev() {
        if dim > 0 {
            *slot = flat % dim;
            flat /= dim;
        }
    }
    index
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln::TensorData;

    const TOL: Tolerances = Tolerances { rtol: 1e-3, atol: 1e-6 };

    fn f32s(values: &[f32]) -> HostTensor {
        HostTensor::from_f32(vec![values.len()], values.to_vec()).unwrap()
    }

    #[test]
    fn an_element_fails_only_outside_both_tolerances() {
        // 1000 vs 1000.5: abs 0.5 > atol but within rtol * 1000 = 1.
        let c = compare_tensor("t", &f32s(&[1000.5, 0.0]), &f32s(&[1000.0, 0.0]), TOL);
        assert!(c.passed(), "{c:?}");
        // 1 vs 1.01: outside both.
        let c = compare_tensor("t", &f32s(&[1.01, 0.0]), &f32s(&[1.0, 0.0]), TOL);
        assert_eq!(c.mismatches, 1);
        // 1e-7 vs 0: relative error infinite, but within atol.
        let c = compare_tensor("t", &f32s(&[1e-7]), &f32s(&[0.0]), TOL);
        assert!(c.passed(), "{c:?}");
        let Detail::Float(e) = &c.detail else { panic!("float detail") };
        assert_eq!(e.relative.unwrap().max, f64::INFINITY);
    }

    #[test]
    fn error_figures_are_reported() {
        let c = compare_tensor("t", &f32s(&[1.0, 2.5, 3.0, 4.0]), &f32s(&[1.0, 2.0, 3.0, 4.0]), TOL);
        assert_eq!(c.mismatches, 1);
        let Detail::Float(e) = &c.detail else { panic!("float detail") };
        let abs = e.absolute.unwrap();
        assert_eq!((abs.max, abs.mean, abs.median), (0.5, 0.125, 0.0));
        assert_eq!(e.relative.unwrap().max, 0.25);
        assert_eq!(e.worst, Some((1, 2.5, 2.0)));
    }

    #[test]
    fn nan_and_infinity_rules() {
        let (nan, inf) = (f32::NAN, f32::INFINITY);
        assert!(compare_tensor("t", &f32s(&[nan, inf, -inf]), &f32s(&[nan, inf, -inf]), TOL).passed());
        let c = compare_tensor("t", &f32s(&[nan, 1.0, inf, -inf]), &f32s(&[1.0, nan, -inf, 3.0e38]), TOL);
        assert_eq!(c.mismatches, 4);
        let Detail::Float(e) = &c.detail else { panic!("float detail") };
        assert_eq!(e.non_finite_mismatches, 4);
        assert!(e.absolute.is_none());
    }

    #[test]
    fn integers_and_bools_compare_exactly() {
        let a = HostTensor::from_i64(vec![3], vec![1, 2, 3]).unwrap();
        let b = HostTensor::from_i64(vec![3], vec![1, 2, 4]).unwrap();
        let c = compare_tensor("t", &a, &b, Tolerances { rtol: 1.0, atol: 10.0 });
        assert_eq!(c.mismatches, 1);
        assert!(matches!(c.detail, Detail::Exact));
        let t = HostTensor::new(vec![2], TensorData::Bool(vec![true, false])).unwrap();
        let f = HostTensor::new(vec![2], TensorData::Bool(vec![true, true])).unwrap();
        assert_eq!(compare_tensor("t", &t, &f, TOL).mismatches, 1);
        assert!(compare_tensor("t", &t, &t, TOL).passed());
    }

    #[test]
    fn shape_or_type_differences_are_failures() {
        let c = compare_tensor("t", &f32s(&[1.0, 2.0]), &f32s(&[1.0, 2.0, 3.0]), TOL);
        assert!(!c.passed());
        assert!(matches!(&c.detail, Detail::Incomparable(r) if r.contains("shape")));
        let i = HostTensor::from_i64(vec![2], vec![1, 2]).unwrap();
        let c = compare_tensor("t", &i, &f32s(&[1.0, 2.0]), TOL);
        assert!(matches!(&c.detail, Detail::Incomparable(r) if r.contains("type")));
    }

    #[test]
    fn half_precision_compares_against_f32_by_value() {
        let h = HostTensor::new(vec![2], TensorData::F16(vec![half::f16::from_f32(0.5), half::f16::from_f32(1.0)]));
        let c = compare_tensor("t", &h.unwrap(), &f32s(&[0.5, 1.0]), TOL);
        assert!(c.passed(), "{c:?}");
    }

    #[test]
    fn multi_index_is_row_major() {
        assert_eq!(multi_index(7, &[2, 3, 4]), vec![0, 1, 3]);
        assert_eq!(multi_index(23, &[2, 3, 4]), vec![1, 2, 3]);
        assert_eq!(multi_index(0, &[]), Vec::<usize>::new());
    }
}

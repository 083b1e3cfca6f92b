//! The official ONNX runner's comparison (`Runner.assert_similar_outputs`): equal shape,
//! equal element type, then `|out - ref| <= atol + rtol * |ref|` element-wise, where NaN
//! equals NaN and an infinity must match in position and sign; bf16 uses rtol ≥ 2^-6.

use kiln::{DataType, HostTensor};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    pub rtol: f64,
    pub atol: f64,
}

/// Why one output differs from its reference; `None` when it matches.
pub fn compare_output(out: &HostTensor, reference: &HostTensor, tolerance: Tolerance) -> Option<String> {
    if out.shape() != reference.shape() {
        return Some(format!("shape {:?} != expected {:?}", out.shape(), reference.shape()));
    }
    if out.dtype() != reference.dtype() {
        return Some(format!("dtype {} != expected {}", out.dtype(), reference.dtype()));
    }
    if let (Some(got), Some(want)) = (out.as_strings(), reference.as_strings()) {
        // Strings compare exactly, as the ONNX runner does.
        let mismatched = got.iter().zip(want).filter(|(a, b)| a != b).count();
        let first = got.iter().zip(want).position(|(a, b)| a != b)?;
        return Some(format!(
            "{mismatched} of {} strings differ; first at {first}: {:?} != expected {:?}",
            got.len(),
            got[first],
            want[first]
        ));
    }
    let rtol = if out.dtype() == DataType::BF16 { tolerance.rtol.max(2f64.powi(-6)) } else { tolerance.rtol };
    let (got, want) = (out.to_f64_vec(), reference.to_f64_vec());
    let mut mismatched = 0usize;
    let mut first = None;
    let mut max_abs = 0f64;
    for (i, (&a, &r)) in got.iter().zip(&want).enumerate() {
        let close = if a.is_nan() || r.is_nan() {
            a.is_nan() && r.is_nan()
        } else if a.is_infinite() || r.is_infinite() {
            a == r
        } else {
            (a - r).abs() <= tolerance.atol + rtol * r.abs()
        };
        if !close {
            mismatched += 1;
            first.get_or_insert((i, a, r));
            if (a - r).is_finite() {
                max_abs = max_abs.max((a - r).abs());
            }
        }
    }
    let (i, a, r) = first?;
    Some(format!(
        "{mismatched}/{} elements differ (first at flat index {i}: {a} vs expected {r}; max_abs {max_abs:.3e}; \
         rtol {rtol:e}, atol {:e})",
        got.len(),
        tolerance.atol
    ))
}

/// Compares every output with its reference, naming the first that differs.
pub fn compare_outputs(
    outputs: &[(String, HostTensor)],
    references: &[HostTensor],
    tolerance: Tolerance,
) -> Result<(), String> {
    if outputs.len() != references.len() {
        return Err(format!("{} outputs, expected {}", outputs.len(), references.len()));
    }
    for (i, ((name, out), reference)) in outputs.iter().zip(references).enumerate() {
        if let Some(why) = compare_output(out, reference, tolerance) {
            return Err(format!("wrong values: output #{i} `{name}`: {why}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;
    use kiln::TensorData;

    const DEFAULT: Tolerance = Tolerance { rtol: 1e-3, atol: 1e-7 };

    fn f32s(values: &[f32]) -> HostTensor {
        HostTensor::from_f32(vec![values.len()], values.to_vec()).unwrap()
    }

    #[test]
    fn values_within_rtol_match_and_beyond_do_not() {
        assert_eq!(compare_output(&f32s(&[1.0005, -2.0]), &f32s(&[1.0, -2.0]), DEFAULT), None);
        let why = compare_output(&f32s(&[1.002, -2.0]), &f32s(&[1.0, -2.0]), DEFAULT).unwrap();
        assert!(why.starts_with("1/2 elements differ"), "{why}");
    }

    #[test]
    fn nan_equals_nan_and_infinities_must_match_in_sign() {
        let reference = f32s(&[f32::NAN, f32::INFINITY]);
        assert_eq!(compare_output(&f32s(&[f32::NAN, f32::INFINITY]), &reference, DEFAULT), None);
        assert!(compare_output(&f32s(&[0.0, f32::INFINITY]), &reference, DEFAULT).is_some());
        assert!(compare_output(&f32s(&[f32::NAN, f32::NEG_INFINITY]), &reference, DEFAULT).is_some());
        assert!(compare_output(&f32s(&[f32::NAN, f32::MAX]), &reference, DEFAULT).is_some());
    }

    #[test]
    fn shape_and_dtype_must_be_equal() {
        let flat = f32s(&[1.0, 2.0]);
        let column = flat.clone().reshaped(vec![2, 1]).unwrap();
        assert!(compare_output(&flat, &column, DEFAULT).unwrap().starts_with("shape"));
        let doubles = HostTensor::new(vec![2], TensorData::F64(vec![1.0, 2.0])).unwrap();
        assert!(compare_output(&doubles, &flat, DEFAULT).unwrap().starts_with("dtype"));
    }

    #[test]
    fn strings_compare_exactly() {
        let strings = |v: &[&str]| HostTensor::from_strings(vec![v.len()], v.iter().map(|s| s.to_string()).collect()).unwrap();
        let tolerance = Tolerance { rtol: 1e-3, atol: 1e-7 };
        assert_eq!(compare_output(&strings(&["a", "b"]), &strings(&["a", "b"]), tolerance), None);
        let message = compare_output(&strings(&["a", "B"]), &strings(&["a", "b"]), tolerance).unwrap();
        assert!(message.contains("1 of 2 strings differ"), "{message}");
    }

    #[test]
    fn bf16_allows_two_ulps() {
        let bf = |v: &[f32]| {
            HostTensor::new(vec![v.len()], TensorData::BF16(v.iter().map(|&x| bf16::from_f32(x)).collect())).unwrap()
        };
        // 1.0 and the next bf16 above it (1 + 2^-7) differ by 0.78 %: within 2^-6.
        assert_eq!(compare_output(&bf(&[1.0078125]), &bf(&[1.0]), DEFAULT), None);
        assert!(compare_output(&bf(&[1.03125]), &bf(&[1.0]), DEFAULT).is_some());
    }
}

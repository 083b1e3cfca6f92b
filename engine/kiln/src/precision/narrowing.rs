//! Values the precision pass moves into a 16-bit type, converted as TensorRT converts weights
//! to FP16: a nonzero value below the type's smallest subnormal becomes that subnormal rather
//! than zero, and a finite value beyond its range becomes its largest finite value rather
//! than infinity. So an epsilon that guards a division keeps guarding it: `F.normalize`
//! divides by `max(‖x‖, 1e-12)`, and 1e-12 rounds to 0 in f16, which makes a zero row 0/0.
//! Explicit Cast layers keep IEEE rounding; this is only for what the builder chose to reduce.

use crate::ir::dtype::DataType;
use crate::ir::layer::{ActivationKind, LayerKind};
use crate::ir::narrow::{bf16_from_f64, f16_from_f64};
use crate::ir::rewrite::convert_float;
use crate::ir::tensor::{HostTensor, TensorData};

/// Weights in a narrower float type, with how many values the guarded conversion changed.
pub(crate) struct Narrowed {
    pub tensor: HostTensor,
    /// Nonzero values that would have become zero.
    pub raised: usize,
    /// Finite values that would have become infinite.
    pub clamped: usize,
}

impl Narrowed {
    /// A warning for the build log when the conversion changed anything.
    pub fn warning(&self, what: &str, to: DataType) -> Option<String> {
        if self.raised == 0 && self.clamped == 0 {
            return None;
        }
        let (tiny, max) = limits(to)?;
        Some(format!(
            "{what} in {to}: {} nonzero values below {to}'s smallest subnormal ({tiny:e}) kept as it, not flushed to zero; {} beyond ±{max:e} clamped to it",
            self.raised, self.clamped
        ))
    }
}

/// The smallest positive subnormal and the largest finite value of a 16-bit float type.
fn limits(to: DataType) -> Option<(f64, f64)> {
    match to {
        DataType::F16 => Some((half::f16::from_bits(1).to_f64(), half::f16::MAX.to_f64())),
        DataType::BF16 => Some((half::bf16::from_bits(1).to_f64(), half::bf16::MAX.to_f64())),
        _ => None,
    }
}

/// `values` as a 16-bit float type `T` under the guarded rule, in one pass; `changed` counts
/// the values raised to the smallest subnormal `tiny` and those clamped to ±`max`.
fn guard_each<T: Copy + Into<f64> + std::ops::Neg<Output = T>>(values: &[f64], round: fn(f64) -> T, tiny: T, max: T, changed: &mut (usize, usize)) -> Vec<T> {
    let signed = |t: T, v: f64| if v < 0.0 { -t } else { t };
    values
        .iter()
        .map(|&v| {
            let r = round(v);
            let held: f64 = r.into();
            if held == 0.0 && v != 0.0 {
                changed.0 += 1;
                signed(tiny, v)
            } else if held.is_infinite() && v.is_finite() {
                changed.1 += 1;
                signed(max, v)
            } else {
                r
            }
        })
        .collect()
}

/// Float `values` in `to` under the guarded rule (None for a type other than f16 and bf16),
/// with how many were raised and clamped.
fn guarded(values: &[f64], to: DataType) -> Option<(TensorData, (usize, usize))> {
    use half::{bf16, f16};
    let mut changed = (0, 0);
    let data = match to {
        DataType::F16 => TensorData::F16(guard_each(values, f16_from_f64, f16::from_bits(1), f16::MAX, &mut changed)),
        DataType::BF16 => TensorData::BF16(guard_each(values, bf16_from_f64, bf16::from_bits(1), bf16::MAX, &mut changed)),
        _ => return None,
    };
    Some((data, changed))
}

/// Float weights converted to `to`; for f16 and bf16 with the guarded rule of the module docs.
pub(crate) fn narrow_weights(w: &HostTensor, to: DataType) -> Option<Narrowed> {
    if !w.dtype().is_float() {
        return None;
    }
    let Some((data, (raised, clamped))) = guarded(&w.to_f64_vec(), to) else {
        return Some(Narrowed { tensor: convert_float(w, to)?, raised: 0, clamped: 0 });
    };
    Some(Narrowed { tensor: HostTensor::new(w.shape().to_vec(), data).ok()?, raised, clamped })
}

/// A Clip computed in `to` whose nonzero minimum or maximum `to` would store as zero, with
/// that bound raised to the smallest subnormal (the value Clip writes for every input below
/// it); None when nothing changes.
pub(crate) fn guarded_clip(kind: &LayerKind, to: DataType) -> Option<LayerKind> {
    let LayerKind::Activation { kind: ActivationKind::Clip { min, max } } = kind else { return None };
    let bound = |b: f32| match guarded(&[f64::from(b)], to) {
        Some((TensorData::F16(v), (1, _))) => v[0].to_f32(),
        Some((TensorData::BF16(v), (1, _))) => v[0].to_f32(),
        _ => b,
    };
    let (new_min, new_max) = (bound(*min), bound(*max));
    ((new_min, new_max) != (*min, *max)).then_some(LayerKind::Activation { kind: ActivationKind::Clip { min: new_min, max: new_max } })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(v: &[f32]) -> HostTensor {
        HostTensor::from_f32(vec![v.len()], v.to_vec()).unwrap()
    }

    #[test]
    fn an_epsilon_below_f16s_range_stays_nonzero_and_huge_values_saturate() {
        let n = narrow_weights(&f32s(&[1e-12, -1e-12, 0.0, 1.0, 1e5, -1e6, f32::INFINITY, 3e-8]), DataType::F16).unwrap();
        let got = n.tensor.to_f64_vec();
        let tiny = half::f16::from_bits(1).to_f64();
        // 3e-8 rounds to the smallest subnormal on its own (round to nearest): not counted.
        assert_eq!(got, vec![tiny, -tiny, 0.0, 1.0, 65504.0, -65504.0, f64::INFINITY, tiny]);
        assert_eq!((n.raised, n.clamped), (2, 2));
        let warning = n.warning("constant `eps`", DataType::F16).unwrap();
        assert!(warning.contains("2 nonzero values") && warning.contains("2 beyond"), "{warning}");
    }

    #[test]
    fn representable_weights_convert_as_a_cast_does() {
        let w = f32s(&[0.1, -2.5, 1e-5, 60000.0]);
        let n = narrow_weights(&w, DataType::F16).unwrap();
        assert_eq!(n.tensor, convert_float(&w, DataType::F16).unwrap());
        assert!(n.warning("w", DataType::F16).is_none());
        // bf16 has f32's range: 1e-12 is representable.
        let n = narrow_weights(&f32s(&[1e-12]), DataType::BF16).unwrap();
        assert_eq!(n.raised, 0);
    }

    #[test]
    fn a_clip_minimum_that_f16_would_flush_is_raised() {
        let clip = |min, max| LayerKind::Activation { kind: ActivationKind::Clip { min, max } };
        let tiny = half::f16::from_bits(1).to_f32();
        assert_eq!(guarded_clip(&clip(1e-12, f32::MAX), DataType::F16), Some(clip(tiny, f32::MAX)));
        assert_eq!(guarded_clip(&clip(0.0, 6.0), DataType::F16), None);
        assert_eq!(guarded_clip(&clip(1e-12, 1.0), DataType::BF16), None);
    }
}

//! An integer layer's second quantization ([`Requantization`]) as a table: the island it
//! stands for is a function of one byte, so a device kernel looks the second level up instead
//! of dequantizing, dividing and rounding per element. Each entry is computed
//! in the f32 operations of the DequantizeLinear, Relu and QuantizeLinear the layer stands for.

use crate::ir::dtype::DataType;
use crate::ir::quantized::Requantization;

/// An 8-bit tensor's per-tensor dequantization: its type, scale and zero point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dequantization {
    pub dtype: DataType,
    pub scale: f32,
    pub zero: f32,
}

impl Dequantization {
    /// `f32(level − zero)·scale` of a byte read as `dtype`, as DequantizeLinear computes it.
    pub fn value(&self, byte: u8) -> f32 {
        let level = if self.dtype == DataType::I8 { f64::from(byte as i8) } else { f64::from(byte) };
        ((level - f64::from(self.zero)) as f32) * self.scale
    }
}

/// The second level's byte of each first level's byte: `then` after levels dequantized by
/// `first`, into `scale` and `zero`.
pub fn second_levels(then: Requantization, first: Dequantization, scale: f32, zero: f32) -> Result<Vec<u8>, String> {
    let level = second_level(then, scale, zero)?;
    Ok((0..=255u8).map(|byte| level(first.value(byte))).collect())
}

/// The second level's byte of each pair of a first level's byte and a skip connection's (the
/// join: `DQ(first) + DQ(join)`, added in f32 as the Add does, then `then`), at entry
/// `join_byte · 256 + first_byte`: 65,536 entries, a kernel's lookup in place of the join's
/// arithmetic and its ties.
pub fn joined_levels(then: Requantization, first: Dequantization, join: Dequantization, scale: f32, zero: f32) -> Result<Vec<u8>, String> {
    let level = second_level(then, scale, zero)?;
    let firsts: Vec<f32> = (0..=255u8).map(|byte| first.value(byte)).collect();
    Ok((0..=255u8).flat_map(|j| {
        let joined = join.value(j);
        firsts.iter().map(move |&y| y + joined)
    }).map(level).collect())
}

/// `then`'s level byte of a joined or dequantized value: its ReLU, then QuantizeLinear into
/// `scale` and `zero`.
fn second_level(then: Requantization, scale: f32, zero: f32) -> Result<impl Fn(f32) -> u8, String> {
    let range = level_range(then.to).ok_or_else(|| format!("a second quantization writes int8 or uint8, not {}", then.to))?;
    Ok(move |mut u: f32| {
        if then.relu {
            u = u.max(0.0);
        }
        let q = quantized(u, scale, f64::from(zero), range);
        if then.to == DataType::I8 { q as i8 as u8 } else { q as u8 }
    })
}

/// The lowest and highest level of an 8-bit integer type; `None` for another type.
pub(super) fn level_range(to: DataType) -> Option<(f64, f64)> {
    match to {
        DataType::I8 => Some((-128.0, 127.0)),
        DataType::U8 => Some((0.0, 255.0)),
        _ => None,
    }
}

/// QuantizeLinear of `u`: the f32 quotient by `scale` rounded half to even, plus `zero`,
/// saturated to `(lo, hi)`. A NaN stays NaN, and its `as` cast to an integer is level 0.
fn quantized(u: f32, scale: f32, zero: f64, (lo, hi): (f64, f64)) -> f64 {
    (f64::from((u / scale).round_ties_even()) + zero).clamp(lo, hi)
}

/// QuantizeLinear's level of every value of a 16-bit float type (`from`: f16 or bf16), indexed
/// by the value's bits: the f32 quotient by `scale` rounded half to even, plus `zero`, saturated
/// to `to`'s range (int8 or uint8), NaN at level 0, as the cpu oracle quantizes. A kernel that
/// rounds a value to `from` before its grid (attention's scores and probabilities) looks its
/// level up where a division would decide the ties.
pub fn levels_of_16bit_floats(from: DataType, scale: f32, zero: i32, to: DataType) -> Result<Vec<i32>, String> {
    let range = level_range(to).ok_or_else(|| format!("a level table holds int8 or uint8 levels, not {to}"))?;
    let value: fn(u16) -> f32 = match from {
        DataType::F16 => |bits| half::f16::from_bits(bits).to_f32(),
        DataType::BF16 => |bits| half::bf16::from_bits(bits).to_f32(),
        other => return Err(format!("a level table is indexed by f16 or bf16 bits, not {other}")),
    };
    Ok((0..=u16::MAX).map(|bits| quantized(value(bits), scale, f64::from(zero), range) as i32).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_16bit_value_has_its_quantized_level() {
        let f16 = |x: f32| usize::from(half::f16::from_f32(x).to_bits());
        let levels = levels_of_16bit_floats(DataType::F16, 0.5, 3, DataType::I8).expect("table");
        assert_eq!(levels.len(), 65536);
        // 1.25 / 0.5 = 2.5: half to even, 2 + 3; -0.75 / 0.5 = -1.5 → -2 + 3; 1000 saturates.
        assert_eq!([levels[f16(1.25)], levels[f16(-0.75)], levels[f16(1000.0)], levels[f16(-1000.0)]], [5, 1, 127, -128]);
        // NaN at level 0, infinities saturated.
        assert_eq!([levels[0x7e00], levels[f16(f32::INFINITY)], levels[f16(f32::NEG_INFINITY)]], [0, 127, -128]);
        let bf16 = levels_of_16bit_floats(DataType::BF16, 1.0 / 127.0, 0, DataType::U8).expect("table");
        assert_eq!(bf16[usize::from(half::bf16::from_f32(1.0).to_bits())], 127);
        assert!(levels_of_16bit_floats(DataType::F32, 1.0, 0, DataType::I8).is_err());
        assert!(levels_of_16bit_floats(DataType::F16, 1.0, 0, DataType::I16).is_err());
    }

    #[test]
    fn the_table_holds_each_bytes_second_level() {
        let first = Dequantization { dtype: DataType::I8, scale: 16.0, zero: 3.0 };
        let relu = Requantization { relu: true, to: DataType::U8 };
        let levels = second_levels(relu, first, 12.0, 30.0).expect("table");
        // Byte 0xff is level −1: (−1 − 3)·16 = −64, clamped at 0 by the ReLU: level 30.
        assert_eq!(levels[0xff], 30);
        // Level 6: (6 − 3)·16 / 12 = 4 exactly, + 30; level 5: 32 / 12 = 2.67 → 3; level 0:
        // −48 clamped at 0 by the ReLU; level 127: 1984 / 12 = 165.3 → 165, + 30 = 195.
        assert_eq!([levels[6], levels[5], levels[0], levels[127]], [34, 33, 30, 195]);
        // A tie: levels of 1.5 and 2.5 round to 2 (half to even).
        let ties = second_levels(Requantization { relu: false, to: DataType::I8 }, Dequantization { dtype: DataType::U8, scale: 1.0, zero: 0.0 }, 2.0, 0.0).expect("table");
        assert_eq!([ties[3], ties[5], ties[1], ties[255]], [2, 2, 0, 127]);
        assert!(second_levels(Requantization { relu: false, to: DataType::F32 }, first, 1.0, 0.0).is_err());
    }

    #[test]
    fn the_join_table_holds_each_pairs_second_level() {
        let first = Dequantization { dtype: DataType::I8, scale: 16.0, zero: 3.0 };
        let join = Dequantization { dtype: DataType::U8, scale: 8.0, zero: 10.0 };
        let relu = Requantization { relu: true, to: DataType::I8 };
        let table = joined_levels(relu, first, join, 32.0, -5.0).expect("table");
        assert_eq!(table.len(), 65536);
        let at = |join: u8, first: u8| table[usize::from(join) * 256 + usize::from(first)];
        // (7 − 3)·16 + (12 − 10)·8 = 80, / 32 = 2.5: half to even 2, − 5 = −3.
        assert_eq!(at(12, 7), (-3i8) as u8);
        // (8 − 3)·16 + (12 − 10)·8 = 96 / 32 = 3, − 5 = −2; the ReLU floors −64 + 0 at 0: −5.
        assert_eq!([at(12, 8), at(10, (-1i8) as u8)], [(-2i8) as u8, (-5i8) as u8]);
        // The largest pair: (124·16 + 245·8) / 32 = 123.25 → 123, − 5 = 118.
        assert_eq!(at(255, 127), 118);
        // With a join of zero (its zero point) each row is the second levels' table.
        let plain = second_levels(relu, first, 32.0, -5.0).expect("table");
        assert_eq!(&table[10 * 256..11 * 256], plain.as_slice());
        assert!(joined_levels(Requantization { relu: false, to: DataType::F32 }, first, join, 1.0, 0.0).is_err());
    }
}

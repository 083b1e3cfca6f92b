//! A skip connection's join (`DQ(first) + DQ(join) → Add → [Relu] → QuantizeLinear`) as one
//! integer line: where the 65,536 second levels of [`super::requantization::joined_levels`] are
//! `clamp((u·α + j·β + γ) >> shift)` for every first level `u` a kernel can produce and every
//! join byte `j`, a kernel computes each with two integer multiply-adds instead of looking it up
//! in a 64 KiB table (a scattered byte load from shared memory, which bounds the join kernel).
//!
//! The line is exact by construction, not by argument: the f32 arithmetic the table holds
//! (products, sum, quotient, ties to even) is not linear, so the search tries integer
//! coefficients near the ideal ratios, finds the offsets that keep every pair's level, and
//! checks the kernel's own arithmetic (32-bit, wrapping) against the table for every pair. A
//! join with no such line (a level the f32 rounding flips against every nearby line) keeps the
//! table.

use super::requantization::{level_range, Dequantization};
use crate::ir::dtype::DataType;
use crate::ir::quantized::Requantization;

/// The bits of the rounding constant 1.5·2^23 (`KILN_ROUNDING_MAGIC_BITS` of the kernels'
/// common.cuh): a level's rounding add leaves `MAGIC_BITS + level − zero` as its word.
pub const MAGIC_BITS: i32 = 0x4B40_0000;

/// How far from the ideal ratios (in units of the last place) the search tries coefficients.
const SEARCH_RADIUS: i32 = 8;

/// A join's second level of a first level's rounding word `x` (`MAGIC_BITS + level − zero`) and
/// a join byte's value `j` (int8 or uint8, as the join's type): `max((x·alpha + j·beta + gamma)
/// >> shift, lo)` in wrapping 32-bit arithmetic, saturated to int8. A uint8 output's levels are
/// computed less 128 (`unsigned_out`), so one saturation serves both types, and their bytes
/// flipped back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JoinLine {
    pub alpha: i32,
    pub beta: i32,
    pub gamma: i32,
    pub shift: u32,
    pub lo: i32,
    pub signed_join: bool,
    pub unsigned_out: bool,
}

impl JoinLine {
    /// The kernel's stored byte for the word `x` and the join byte `b`.
    pub fn byte(&self, x: i32, b: u8) -> u8 {
        let j = if self.signed_join { i32::from(b as i8) } else { i32::from(b) };
        let t = x.wrapping_mul(self.alpha).wrapping_add(j.wrapping_mul(self.beta)).wrapping_add(self.gamma);
        let level = (t >> self.shift).max(self.lo).clamp(-128, 127);
        (level as u8) ^ if self.unsigned_out { 0x80 } else { 0 }
    }

    /// The words a kernel reads: alpha, beta, gamma, shift, lo, the output bytes' flip (a 16-bit
    /// pair's), whether the join is int8, and a zero.
    pub fn words(&self) -> [i32; 8] {
        let flip = if self.unsigned_out { 0x8080 } else { 0 };
        [self.alpha, self.beta, self.gamma, self.shift as i32, self.lo, flip, i32::from(self.signed_join), 0]
    }
}

/// The line of `table` (`joined_levels(then, first, join, scale, zero)`, `[join byte][first
/// byte]`) over the first levels `first_levels` (inclusive: the kernel's clamp, ReLU's floor
/// included), if one holds every pair; None otherwise, or for a join that is not 8-bit, scales
/// that are not positive and finite, or a zero point that is not an integer.
pub fn joined_line(table: &[u8], then: Requantization, first: Dequantization, first_levels: (i32, i32), join: Dequantization, scale: f32) -> Option<JoinLine> {
    let (first_lo, first_hi) = first_levels;
    // Every type is 8-bit (the levels' order and the kernel's saturation assume it).
    level_range(then.to)?;
    level_range(first.dtype)?;
    level_range(join.dtype)?;
    let positive = |s: f32| s.is_finite() && s > 0.0;
    if table.len() != 65_536 || !positive(first.scale) || !positive(join.scale) || !positive(scale) || first.zero.fract() != 0.0 || first_lo > first_hi {
        return None;
    }
    let first_zero = first.zero as i32;
    let value = |dtype: DataType, byte: u8| if dtype == DataType::I8 { i32::from(byte as i8) } else { i32::from(byte) };
    // A uint8 output's levels less 128: the kernel's saturation is int8's.
    let out_offset = if then.to == DataType::U8 { 128 } else { 0 };
    // Every pair the kernel meets: u = level − zero, the join's value, and the table's level.
    let mut pairs = Vec::with_capacity(65_536);
    for level in first_lo..=first_hi {
        let first_byte = level as u8;
        for b in 0..=255u8 {
            let target = value(then.to, table[usize::from(b) * 256 + usize::from(first_byte)]) - out_offset;
            pairs.push((i64::from(level - first_zero), i64::from(value(join.dtype, b)), i64::from(target)));
        }
    }
    // The floor is the table's least level (ReLU's, or the saturation's); the int8 saturation is
    // the ceiling: pairs at either constrain the line from one side only.
    let lo = pairs.iter().map(|p| p.2).min()?;
    let hi = 127;
    let (ra, rb) = (f64::from(first.scale) / f64::from(scale), f64::from(join.scale) / f64::from(scale));
    let u_max = pairs.iter().map(|p| p.0.abs()).max()? as f64;
    // The largest shift that keeps |t| below 2^30 with room for the offset.
    let reach = u_max * ra + 512.0 * rb + 600.0;
    let shift = (30.0 - reach.log2()).floor().clamp(0.0, 30.0) as u32;
    let unit = (1i64 << shift) as f64;
    let (alpha0, beta0) = ((ra * unit).round() as i64, (rb * unit).round() as i64);
    for radius in 0..=SEARCH_RADIUS as i64 {
        for da in -radius..=radius {
            for db in -radius..=radius {
                if da.abs().max(db.abs()) != radius {
                    continue;
                }
                let (alpha, beta) = (alpha0 + da, beta0 + db);
                if alpha <= 0 || beta <= 0 {
                    continue;
                }
                let Some(gamma) = offset(&pairs, alpha, beta, shift, lo, hi) else { continue };
                let line = JoinLine {
                    alpha: i32::try_from(alpha).ok()?,
                    beta: i32::try_from(beta).ok()?,
                    gamma: i32::try_from(gamma).ok()?.wrapping_sub(MAGIC_BITS.wrapping_mul(alpha as i32)),
                    shift,
                    lo: lo as i32,
                    signed_join: join.dtype == DataType::I8,
                    unsigned_out: then.to == DataType::U8,
                };
                if holds(&line, table, first_levels, first_zero) {
                    return Some(line);
                }
            }
        }
    }
    None
}

/// The middle of the offsets γ that keep every pair's level with coefficients `alpha` and
/// `beta` (`lo ≤ (u·α + j·β + γ) >> shift ≤ hi` saturating as the clamp does), if any; it
/// also keeps every sum within 32 bits.
fn offset(pairs: &[(i64, i64, i64)], alpha: i64, beta: i64, shift: u32, lo: i64, hi: i64) -> Option<i64> {
    let (mut least, mut below) = (i64::MIN, i64::MAX);
    for &(u, j, target) in pairs {
        let base = u * alpha + j * beta;
        if target > lo {
            least = least.max((target << shift) - base);
        }
        if target < hi {
            below = below.min(((target + 1) << shift) - base);
        }
        if least >= below {
            return None;
        }
    }
    let gamma = if least == i64::MIN { below - 1 } else if below == i64::MAX { least } else { least + (below - least) / 2 };
    let fits = pairs.iter().all(|&(u, j, _)| i32::try_from(u * alpha + j * beta + gamma).is_ok());
    fits.then_some(gamma)
}

/// Whether the kernel's arithmetic gives the table's byte for every first level in range and
/// every join byte.
fn holds(line: &JoinLine, table: &[u8], (first_lo, first_hi): (i32, i32), first_zero: i32) -> bool {
    (first_lo..=first_hi).all(|level| {
        let x = MAGIC_BITS.wrapping_add(level - first_zero);
        (0..=255u8).all(|b| line.byte(x, b) == table[usize::from(b) * 256 + usize::from(level as u8)])
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::requantization::joined_levels;

    fn line_of(then: Requantization, first: Dequantization, first_levels: (i32, i32), join: Dequantization, scale: f32, zero: f32) -> (Vec<u8>, Option<JoinLine>) {
        let table = joined_levels(then, first, join, scale, zero).expect("table");
        let line = joined_line(&table, then, first, first_levels, join, scale);
        (table, line)
    }

    /// ResNet-like joins (uint8 levels, a ReLU after the add, scales of a calibrated network)
    /// have lines, each giving the table's level for every pair through the kernel's arithmetic.
    #[test]
    fn a_line_found_gives_every_pairs_level() {
        let relu = Requantization { relu: true, to: DataType::U8 };
        let cases = [(0.0213f32, 131.0f32, 0.0371f32, 97.0f32, 0.0297f32, 0.0f32), (0.051, 128.0, 0.0128, 0.0, 0.043, 0.0), (0.0071, 4.0, 0.0093, 250.0, 0.0111, 0.0)];
        for (sa, za, sb, zb, so, zo) in cases {
            let first = Dequantization { dtype: DataType::U8, scale: sa, zero: za };
            let join = Dequantization { dtype: DataType::U8, scale: sb, zero: zb };
            let (table, line) = line_of(relu, first, (0, 255), join, so, zo);
            let line = line.expect("a line");
            for level in 0..=255i32 {
                for b in 0..=255u8 {
                    let x = MAGIC_BITS.wrapping_add(level - za as i32);
                    assert_eq!(line.byte(x, b), table[usize::from(b) * 256 + level as usize], "level {level}, join {b}, {line:?}");
                }
            }
            assert_eq!(line.words(), [line.alpha, line.beta, line.gamma, line.shift as i32, line.lo, 0x8080, 0, 0]);
        }
    }

    /// An int8 join and int8 levels without a ReLU: the join byte read as its signed value.
    #[test]
    fn signed_levels_and_joins_take_their_values_order() {
        let then = Requantization { relu: false, to: DataType::I8 };
        let first = Dequantization { dtype: DataType::I8, scale: 0.031, zero: -3.0 };
        let join = Dequantization { dtype: DataType::I8, scale: 0.027, zero: 5.0 };
        let (table, line) = line_of(then, first, (-128, 127), join, 0.047, 2.0);
        let line = line.expect("a line");
        assert_eq!((line.words()[5], line.words()[6]), (0, 1));
        for level in -128..=127i32 {
            for b in 0..=255u8 {
                let x = MAGIC_BITS.wrapping_add(level + 3);
                assert_eq!(line.byte(x, b), table[usize::from(b) * 256 + usize::from(level as u8)]);
            }
        }
    }

    /// A table no line holds (one pair's level changed) has none, and the inputs a kernel does
    /// not take have none.
    #[test]
    fn a_table_no_line_holds_has_none() {
        let then = Requantization { relu: false, to: DataType::U8 };
        let first = Dequantization { dtype: DataType::U8, scale: 0.021, zero: 128.0 };
        let join = Dequantization { dtype: DataType::U8, scale: 0.03, zero: 128.0 };
        let mut table = joined_levels(then, first, join, 0.043, 128.0).expect("table");
        assert!(joined_line(&table, then, first, (0, 255), join, 0.043).is_some());
        // First level 200 with join byte 128 (its zero point): 0.021·72 / 0.043 = 35.2 → 163.
        // Six levels more than its neighbour's (first level 201) breaks the order no line breaks.
        assert_eq!(table[128 * 256 + 200], 163);
        table[128 * 256 + 200] = 169;
        assert_eq!(joined_line(&table, then, first, (0, 255), join, 0.043), None);
        let float = Dequantization { dtype: DataType::F32, ..join };
        assert_eq!(joined_line(&table, then, first, (0, 255), float, 0.043), None);
        assert_eq!(joined_line(&table, then, first, (0, 255), join, -0.043), None);
        // Levels of 16 into 32 (a ratio of one half): odd levels beside the join's zero point are
        // ties, rounded to even, which no line does.
        let halves = Dequantization { dtype: DataType::U8, scale: 16.0, zero: 100.0 };
        let ties = joined_levels(then, halves, join, 32.0, 128.0).expect("table");
        assert_eq!(joined_line(&ties, then, halves, (0, 255), join, 32.0), None);
    }
}

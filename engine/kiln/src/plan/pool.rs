//! Pooling window arithmetic shared by every backend: which cells of a window lie inside
//! the input, found by division rather than by visiting the window, so a window of 2^31
//! cells over a 4-cell axis costs 4 steps, not 2^31.

use crate::PoolingParams;
use std::ops::Range;

/// The window indices `k` in `0..window` whose position `start + k·dilation` lies in
/// `lo..hi` (empty when none does). `dilation` must be at least 1.
pub fn cells_within(start: i128, window: i128, dilation: i128, lo: i128, hi: i128) -> Range<i128> {
    let first = if lo > start { (lo - start + dilation - 1) / dilation } else { 0 };
    let end = if hi > start { ((hi - 1 - start) / dilation + 1).min(window) } else { 0 };
    first..end.max(first)
}

/// One output position's window on one axis: the input cells it covers (window indices
/// whose position is inside `0..input`) and how many of its cells lie inside the padded
/// extent `[-pre, input + post)`, the divisor of an average that counts padding (ceil
/// mode's overhang past the end padding never counts).
#[derive(Clone, Debug)]
pub struct AxisWindow {
    pub start: i128,
    pub inside: Range<i128>,
    pub padded_count: u64,
}

/// The window of output position `o` along spatial axis `d` of an `input`-long axis.
pub fn axis_window(p: &PoolingParams, d: usize, input: usize, o: usize) -> AxisWindow {
    let at = |v: &[usize], default: usize| v.get(d).copied().unwrap_or(default) as i128;
    let (window, stride, dilation) = (at(&p.window, 1), at(&p.strides, 1), at(&p.dilations, 1).max(1));
    let start = o as i128 * stride - at(&p.pre_padding, 0);
    let n = input as i128;
    let inside = cells_within(start, window, dilation, 0, n);
    let padded = cells_within(start, window, dilation, i128::MIN / 4, n + at(&p.post_padding, 0));
    AxisWindow { start, inside, padded_count: (padded.end - padded.start) as u64 }
}

/// Checks that every position a window visits, `start + k·dilation`, and the padded extent
/// of each spatial axis fit in `max` (the widest integer a device kernel computes them
/// in), so kernels need no overflow checks of their own.
pub fn check_extent(p: &PoolingParams, in_spatial: &[usize], max: i128) -> Result<(), String> {
    for (d, &input) in in_spatial.iter().enumerate() {
        let at = |v: &[usize], default: usize| v.get(d).copied().unwrap_or(default) as i128;
        let span = (at(&p.window, 1) - 1).max(0) * at(&p.dilations, 1);
        let extent = at(&p.pre_padding, 0) + input as i128 + at(&p.post_padding, 0) + span + at(&p.strides, 1);
        if extent > max {
            return Err(format!(
                "pooling axis {d}: window {} with dilation {}, padding {}+{} and stride {} over {input} cells \
                 reach past {max}, the kernel's index range",
                at(&p.window, 1),
                at(&p.dilations, 1),
                at(&p.pre_padding, 0),
                at(&p.post_padding, 0),
                at(&p.strides, 1)
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same range found by visiting every window index.
    fn by_visiting(start: i128, window: i128, dilation: i128, lo: i128, hi: i128) -> Range<i128> {
        let inside: Vec<i128> = (0..window).filter(|k| (lo..hi).contains(&(start + k * dilation))).collect();
        match (inside.first(), inside.last()) {
            (Some(&a), Some(&b)) => a..b + 1,
            _ => 0..0,
        }
    }

    #[test]
    fn division_finds_the_cells_visiting_finds() {
        for start in -12..12 {
            for window in 1..9 {
                for dilation in 1..4 {
                    for (lo, hi) in [(0, 5), (0, 1), (-3, 7), (2, 2)] {
                        let r = cells_within(start, window, dilation, lo, hi);
                        let expected = by_visiting(start, window, dilation, lo, hi);
                        assert_eq!(r.end - r.start, expected.end - expected.start, "{start} {window} {dilation} {lo}..{hi}");
                        if !r.is_empty() {
                            assert_eq!(r, expected);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_huge_window_costs_only_its_inside_cells() {
        let r = cells_within(-7, i32::MAX as i128, 1, 0, 4);
        assert_eq!(r, 7..11);
    }
}

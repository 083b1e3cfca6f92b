//! Pad planning: per axis, where each output coordinate reads from (constant, edge,
//! reflect and wrap padding; negative pads crop first).

use crate::ir::layer::PaddingMode;

/// Where output coordinate `o` of one axis reads from: `Some(input coordinate)` or `None`
/// for the constant. Negative pads crop first; positive pads then extend the cropped range.
pub fn source_coordinate(mode: PaddingMode, o: usize, axis: PadAxis) -> Result<Option<usize>, String> {
    let PadAxis { begin, lo, kept } = axis;
    let j = o as i64 - begin as i64;
    let n = kept as i64;
    if (0..n).contains(&j) {
        return Ok(Some(lo + j as usize));
    }
    if mode == PaddingMode::Constant {
        return Ok(None);
    }
    if n == 0 {
        return Err(format!("{mode:?} padding needs a non-empty axis"));
    }
    let k = match mode {
        PaddingMode::Edge => j.clamp(0, n - 1),
        PaddingMode::Wrap => j.rem_euclid(n),
        // Mirror without repeating the edge, as often as the pad needs (numpy "reflect").
        PaddingMode::Reflect => {
            if n == 1 {
                0
            } else {
                let period = 2 * (n - 1);
                let r = j.rem_euclid(period);
                if r < n {
                    r
                } else {
                    period - r
                }
            }
        }
        PaddingMode::Constant => unreachable!("handled above"),
    };
    Ok(Some(lo + k as usize))
}

/// One padded axis: `begin` output coordinates of padding (positive pads) precede the
/// `kept` input coordinates starting at `lo` (what negative pads leave).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PadAxis {
    pub begin: usize,
    pub lo: usize,
    pub kept: usize,
}

/// The axes of a Pad of `x_shape` by `pads` (`[begin…, end…]`, negative crops) to `out_shape`.
pub fn axes(x_shape: &[usize], pads: &[i64], out_shape: &[usize]) -> Result<Vec<PadAxis>, String> {
    let rank = x_shape.len();
    if pads.len() != 2 * rank || out_shape.len() != rank {
        return Err(format!("pads {pads:?} do not match rank {rank}"));
    }
    (0..rank)
        .map(|d| {
            let n = x_shape[d] as i64;
            let (begin, end) = (pads[d], pads[d + rank]);
            // Saturating: pads of i64::MIN crop everything, never wrap.
            let lo = 0i64.saturating_sub(begin).max(0);
            let kept = n.saturating_sub(lo).saturating_sub(0i64.saturating_sub(end).max(0));
            if kept < 0 {
                return Err(format!("pads {pads:?} crop more than axis {d} holds"));
            }
            Ok(PadAxis { begin: begin.max(0) as usize, lo: lo as usize, kept: kept as usize })
        })
        .collect()
}

/// Per axis, for each output coordinate of Pad: its input coordinate, or `None` where the
/// constant goes (what a device backend gathers through).
pub fn source_maps(
    mode: PaddingMode,
    x_shape: &[usize],
    pads: &[i64],
    out_shape: &[usize],
) -> Result<Vec<Vec<Option<usize>>>, String> {
    let axes = axes(x_shape, pads, out_shape)?;
    // An empty output gathers nothing: its other axes may be long, and their maps need
    // not exist.
    if out_shape.contains(&0) {
        return Ok(vec![Vec::new(); out_shape.len()]);
    }
    axes.into_iter()
        .zip(out_shape)
        .map(|(axis, &len)| (0..len).map(|o| source_coordinate(mode, o, axis)).collect())
        .collect()
}

//! DFT: `[x (…, 1|2), axis (0-D int), length (0-D int)?] -> [y]`; Col2Im.

use super::{rule, InferResult, Inputs, OutFact};
use crate::ir::shape::{normalize_axis, Dim, Shape};

/// The signal axis of a DFT input of `rank` (the last axis holds re/im and is never one).
pub fn dft_axis(axis: i64, rank: usize) -> Result<usize, String> {
    match normalize_axis(axis, rank) {
        Some(a) if a + 1 < rank => Ok(a),
        _ => Err(format!("DFT axis {axis} is out of range for a signal of rank {rank} (the last axis is re/im)")),
    }
}

/// The transform length: `length` when given, else the input's length along the axis
/// (twice the bins less one for an inverse onesided transform, numpy's `irfft`).
pub fn dft_length(input_len: usize, length: Option<i64>, inverse: bool, onesided: bool) -> Result<usize, String> {
    match length {
        Some(n) if n < 1 => Err(format!("DFT length must be positive, got {n}")),
        Some(n) => Ok(n as usize),
        None if inverse && onesided => match input_len {
            0 | 1 => Err(format!("an inverse onesided DFT needs at least 2 bins, got {input_len}")),
            bins => (bins - 1).checked_mul(2).ok_or_else(|| format!("{bins} bins overflow the DFT length")),
        },
        None => Ok(input_len),
    }
}


/// Length of the output along the axis for a transform of length `n`.
pub fn dft_output_len(n: usize, inverse: bool, onesided: bool) -> usize {
    if onesided && !inverse {
        n / 2 + 1
    } else {
        n
    }
}

pub(super) fn dft(ins: &Inputs, inverse: bool, onesided: bool) -> InferResult<Vec<OutFact>> {
    ins.arity(2, 3)?;
    let x = ins.float(0)?;
    let rank = x.shape.rank();
    if rank < 2 {
        return rule(Some(0), format!("a DFT signal needs a re/im axis and a signal axis, got shape {}", x.shape));
    }
    let parts = &x.shape.dims()[rank - 1];
    if parts.fixed().is_some_and(|c| c != 1 && c != 2) {
        return rule(Some(0), format!("the last axis of a DFT signal must be 1 (real) or 2 (complex), got {parts}"));
    }
    let length = match ins.get(2) {
        Some(_) => ins.index_scalar(2)?.map(Some),
        None => Some(None),
    };
    let axis = ins.index_scalar(1)?.map(|a| dft_axis(a, rank)).transpose().or_else(|e| rule(Some(1), e))?;
    let out_parts = if inverse && onesided { 1 } else { 2 };
    let mut dims = x.shape.dims().to_vec();
    dims[rank - 1] = Dim::Fixed(out_parts);
    match axis {
        Some(axis) => {
            let along = match (length, dims[axis].fixed()) {
                (Some(length), Some(len)) => {
                    let n = dft_length(len, length, inverse, onesided).or_else(|e| rule(Some(2), e))?;
                    Dim::Fixed(dft_output_len(n, inverse, onesided))
                }
                (Some(Some(n)), None) if n > 0 => Dim::Fixed(dft_output_len(n as usize, inverse, onesided)),
                // Without onesided or a length, the transform keeps the axis's length.
                (Some(None), _) if !onesided => dims[axis].clone(),
                _ => Dim::Unknown,
            };
            dims[axis] = along;
        }
        None => {
            // The axis is known only at run time: every signal dim may change, unless the
            // transform keeps lengths.
            let keeps_lengths = !onesided && matches!(length, Some(None));
            if !keeps_lengths {
                for d in &mut dims[..rank - 1] {
                    *d = Dim::Unknown;
                }
            }
        }
    }
    Ok(vec![OutFact::new(x.dtype, Shape(dims))])
}


/// The number of block positions along each spatial dim of a Col2Im image (im2col's grid).
pub fn col2im_blocks(
    image: &[usize],
    block: &[usize],
    strides: &[usize],
    dilations: &[usize],
    pads: &[usize],
) -> Result<Vec<usize>, String> {
    let n = image.len();
    if block.len() != n || strides.len() != n || dilations.len() != n || pads.len() != 2 * n {
        return Err(format!(
            "Col2Im: image {image:?}, block {block:?}, strides {strides:?}, dilations {dilations:?} and pads {pads:?} \
             do not all cover {n} spatial dims"
        ));
    }
    (0..n)
        .map(|d| {
            let too_large = || format!("Col2Im: the sizes of spatial dim {d} overflow");
            let extent = dilations[d].checked_mul(block[d].saturating_sub(1)).and_then(|e| e.checked_add(1));
            let padded = image[d].checked_add(pads[d]).and_then(|p| p.checked_add(pads[n + d]));
            let (Some(extent), Some(padded)) = (extent, padded) else {
                return Err(too_large());
            };
            if block[d] == 0 || strides[d] == 0 || padded < extent {
                return Err(format!(
                    "Col2Im: a block of {} (dilation {}) does not fit the padded image length {padded}",
                    block[d], dilations[d]
                ));
            }
            Ok((padded - extent) / strides[d] + 1)
        })
        .collect()
}

pub(super) fn col2im(
    ins: &Inputs,
    strides: &[usize],
    dilations: &[usize],
    pads: &[usize],
) -> InferResult<Vec<OutFact>> {
    ins.arity(3, 3)?;
    let x = ins.req(0)?;
    if x.shape.rank() != 3 {
        return rule(Some(0), format!("Col2Im input must be (N, C·∏block, L), got shape {}", x.shape));
    }
    let (image_fact, image) = ins.index_list(1)?;
    let (_, block) = ins.index_list(2)?;
    let spatial = match image_fact.shape.dims().first().and_then(Dim::fixed) {
        Some(n) if image_fact.shape.rank() == 1 => n,
        _ => return rule(Some(1), format!("Col2Im image_shape must be 1-D of fixed length, got {}", image_fact.shape)),
    };
    if strides.len() != spatial || dilations.len() != spatial || pads.len() != 2 * spatial {
        return rule(None, format!("Col2Im strides, dilations and pads must cover {spatial} spatial dims"));
    }
    let to_usize = |v: &[i64], slot: usize| -> InferResult<Vec<usize>> {
        v.iter().map(|&d| usize::try_from(d).or_else(|_| rule(Some(slot), format!("negative dim {d}")))).collect()
    };
    let dims = x.shape.dims();
    let channels = match (&block, dims[1].fixed()) {
        (Some(block), Some(c)) => {
            let block = to_usize(block, 2)?;
            let per_channel = block.iter().try_fold(1usize, |p, &b| p.checked_mul(b)).unwrap_or(0);
            if per_channel == 0 || c % per_channel != 0 {
                return rule(Some(0), format!("Col2Im: {c} rows do not split into blocks of {per_channel}"));
            }
            if let (Some(image), Some(l)) = (&image, dims[2].fixed()) {
                let grid =
                    col2im_blocks(&to_usize(image, 1)?, &block, strides, dilations, pads).or_else(|e| rule(None, e))?;
                if grid.iter().try_fold(1usize, |p, &g| p.checked_mul(g)) != Some(l) {
                    return rule(Some(0), format!("Col2Im: {l} columns, but the image holds {grid:?} blocks"));
                }
            }
            Dim::Fixed(c / per_channel)
        }
        _ => Dim::Unknown,
    };
    let mut out = vec![dims[0].clone(), channels];
    match image {
        Some(image) => out.extend(to_usize(&image, 1)?.into_iter().map(Dim::Fixed)),
        None => out.extend(std::iter::repeat_n(Dim::Unknown, spatial)),
    }
    Ok(vec![OutFact::new(x.dtype, Shape(out))])
}

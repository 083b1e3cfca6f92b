//! Rules of GridSample, BitCast, NonMaxSuppression, Unique and RoiAlign.

use super::{rule, InferResult, Inputs, OutFact};
use crate::ir::dtype::DataType;
use crate::ir::shape::{Dim, Shape};

/// `x (N,C,*spatial)`, `grid (N,*out_spatial,r)` with `r` the spatial rank.
pub(super) fn grid_sample(ins: &Inputs) -> InferResult<Vec<OutFact>> {
    ins.arity(2, 2)?;
    let x = ins.float(0)?;
    let grid = ins.float(1)?;
    let rank = x.shape.rank();
    if rank < 3 {
        return rule(Some(0), format!("GridSample input must be (N, C, spatial…) of rank 3 or more, got {}", x.shape));
    }
    if grid.shape.rank() != rank {
        return rule(Some(1), format!("GridSample grid {} must have the rank of the input {}", grid.shape, x.shape));
    }
    let (xd, gd) = (x.shape.dims(), grid.shape.dims());
    if xd[0].differs_from(&gd[0]) {
        return rule(Some(1), format!("GridSample grid batch {} differs from the input batch {}", gd[0], xd[0]));
    }
    if gd[rank - 1].differs_from(&Dim::Fixed(rank - 2)) {
        return rule(Some(1), format!("GridSample grid {} must end in {} coordinates per point", grid.shape, rank - 2));
    }
    let mut out = vec![xd[0].clone(), xd[1].clone()];
    out.extend_from_slice(&gd[1..rank - 1]);
    Ok(vec![OutFact::new(x.dtype, Shape(out))])
}

/// Same shape, the bits of each element read as `to` (of the same width; bool is a byte).
pub(super) fn bit_cast(ins: &Inputs, to: DataType) -> InferResult<Vec<OutFact>> {
    ins.arity(1, 1)?;
    let x = ins.req(0)?;
    let (Some(from_size), Some(to_size)) = (x.dtype.size_bytes(), to.size_bytes()) else {
        return rule(Some(0), format!("BitCast is not defined on strings ({} to {to})", x.dtype));
    };
    if from_size != to_size {
        return rule(
            Some(0),
            format!("BitCast needs types of one width: {} is {from_size} bytes, {to} is {to_size}", x.dtype),
        );
    }
    Ok(vec![OutFact::new(to, x.shape.clone())])
}

/// `boxes (B,S,4)`, `scores (B,C,S)` and optional scalars → `(count, 3)` i64.
pub(super) fn non_max_suppression(ins: &Inputs) -> InferResult<Vec<OutFact>> {
    ins.arity(2, 5)?;
    let boxes = ins.float(0)?;
    let scores = ins.float(1)?;
    if boxes.shape.rank() != 3 || boxes.shape.dims()[2].differs_from(&Dim::Fixed(4)) {
        return rule(Some(0), format!("NonMaxSuppression boxes must be (batch, boxes, 4), got {}", boxes.shape));
    }
    if scores.shape.rank() != 3 {
        return rule(
            Some(1),
            format!("NonMaxSuppression scores must be (batch, classes, boxes), got {}", scores.shape),
        );
    }
    let (b, s) = (boxes.shape.dims(), scores.shape.dims());
    if b[0].differs_from(&s[0]) || b[1].differs_from(&s[2]) {
        return rule(Some(1), format!("NonMaxSuppression scores {} do not match boxes {}", scores.shape, boxes.shape));
    }
    if ins.get(2).is_some() {
        ins.index_scalar(2)?;
    }
    for slot in [3, 4] {
        if let Some(f) = ins.get(slot) {
            let single = f.shape.volume() == Some(1);
            if !f.dtype.is_float() || !single {
                return rule(
                    Some(slot),
                    format!(
                        "NonMaxSuppression threshold input {slot} must be a float scalar, got {} {}",
                        f.dtype, f.shape
                    ),
                );
            }
        }
    }
    Ok(vec![OutFact::new(DataType::I64, Shape(vec![Dim::Unknown, Dim::Fixed(3)]))])
}

/// `y` has an unknown count of elements (or of slices along `axis`); `inverse_indices` has
/// one entry per element (or slice) of `x`.
pub(super) fn unique(ins: &Inputs, axis: Option<usize>) -> InferResult<Vec<OutFact>> {
    ins.arity(1, 1)?;
    let x = ins.req(0)?;
    let (y, inverse) = match axis {
        None => {
            let count = x.shape.volume().map_or(Dim::Unknown, Dim::Fixed);
            (Shape(vec![Dim::Unknown]), Shape(vec![count]))
        }
        Some(a) => {
            super::check_axis(a, x.shape.rank(), Some(0))?;
            let mut dims = x.shape.dims().to_vec();
            let along = std::mem::replace(&mut dims[a], Dim::Unknown);
            (Shape(dims), Shape(vec![along]))
        }
    };
    let list = || OutFact::new(DataType::I64, Shape(vec![Dim::Unknown]));
    Ok(vec![OutFact::new(x.dtype, y), list(), OutFact::new(DataType::I64, inverse), list()])
}

/// RoiAlign: `[x (N, C, H, W), rois (R, 4), batch_indices (R)] -> [y (R, C, oh, ow)]`.
pub(super) fn roi_align(ins: &Inputs, output_size: [usize; 2]) -> InferResult<Vec<OutFact>> {
    ins.arity(3, 3)?;
    let x = ins.float(0)?;
    if x.shape.rank() != 4 {
        return rule(Some(0), format!("RoiAlign input must be (N, C, H, W), got {}", x.shape));
    }
    let rois = ins.float(1)?;
    ins.same_type(0, 1)?;
    let rd = rois.shape.dims();
    if rd.len() != 2 || rd[1].differs_from(&Dim::Fixed(4)) {
        return rule(Some(1), format!("RoiAlign rois must be (R, 4), got {}", rois.shape));
    }
    let indices = ins.req(2)?;
    if !indices.dtype.is_index() || indices.shape.rank() != 1 || indices.shape.dims()[0].differs_from(&rd[0]) {
        return rule(Some(2), format!("RoiAlign batch_indices must be (R) i32/i64, got {} {}", indices.dtype, indices.shape));
    }
    let [h, w] = output_size;
    let dims = vec![rd[0].clone(), x.shape.dims()[1].clone(), Dim::Fixed(h), Dim::Fixed(w)];
    Ok(vec![OutFact::new(x.dtype, Shape(dims))])
}

//! OneHot: `[indices, values (2 elems: off, on), depth (0-D int)] -> [y]`.

use super::{rule, InferResult, Inputs, OutFact};
use crate::ir::shape::{Dim, Shape};

pub(crate) fn infer(axis: i64, ins: &Inputs) -> InferResult<Vec<OutFact>> {
    ins.arity(3, 3)?;
    let indices = ins.req(0)?;
    if !indices.dtype.is_index() {
        return rule(Some(0), format!("OneHot indices must be i32/i64, not {}", indices.dtype));
    }
    let values = ins.req(1)?;
    if values.shape.rank() != 1 || values.shape.dims()[0].differs_from(&Dim::Fixed(2)) {
        return rule(Some(1), format!("OneHot values must be [off, on], got shape {}", values.shape));
    }
    let depth = ins.index_scalar(2)?;
    let depth = match depth {
        Some(d) if d < 1 => return rule(Some(2), format!("OneHot depth must be positive, got {d}")),
        Some(d) => Dim::Fixed(d as usize),
        None => Dim::Unknown,
    };
    let rank = indices.shape.rank() + 1;
    let Some(axis) = crate::ir::shape::normalize_axis(axis, rank) else {
        return rule(None, format!("OneHot axis {axis} is out of range for an output of rank {rank}"));
    };
    let mut dims = indices.shape.dims().to_vec();
    dims.insert(axis, depth);
    Ok(vec![OutFact::new(values.dtype, Shape(dims))])
}

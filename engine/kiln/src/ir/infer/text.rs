//! Shapes and types of the string operators ([`TextOp`]).

use super::{rule, InferResult, Inputs, OutFact};
use crate::ir::dtype::DataType;
use crate::ir::layer::TextOp;
use crate::ir::shape::{Dim, Shape};

pub(super) fn infer(op: &TextOp, ins: &Inputs) -> InferResult<Vec<OutFact>> {
    match op {
        TextOp::Normalize { .. } => {
            ins.arity(1, 1)?;
            let x = ins.of_type(0, DataType::String)?;
            let dims = x.shape.dims();
            // The element count after stopword removal is known only from the data.
            let shape = match dims {
                [_] => Shape(vec![Dim::Unknown]),
                [one, _] if one.fixed() == Some(1) => Shape(vec![Dim::Fixed(1), Dim::Unknown]),
                _ => return rule(Some(0), format!("StringNormalizer takes shape (C) or (1, C), got {}", x.shape)),
            };
            Ok(vec![OutFact::new(DataType::String, shape)])
        }
        TextOp::Concat => {
            ins.arity(2, 2)?;
            ins.of_type(0, DataType::String)?;
            ins.of_type(1, DataType::String)?;
            Ok(vec![OutFact::new(DataType::String, ins.broadcast(&[0, 1])?)])
        }
        TextOp::Split { .. } => {
            ins.arity(1, 1)?;
            let x = ins.of_type(0, DataType::String)?;
            let mut dims = x.shape.dims().to_vec();
            let counts = Shape(dims.clone());
            dims.push(Dim::Unknown);
            Ok(vec![OutFact::new(DataType::String, Shape(dims)), OutFact::new(DataType::I64, counts)])
        }
        TextOp::RegexFullMatch { pattern } => {
            ins.arity(1, 1)?;
            let x = ins.of_type(0, DataType::String)?;
            if let Err(e) = regex::Regex::new(pattern) {
                return rule(None, format!("RegexFullMatch pattern `{pattern}` is invalid: {e}"));
            }
            Ok(vec![OutFact::new(DataType::Bool, x.shape.clone())])
        }
    }
}

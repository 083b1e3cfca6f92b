//! Shape and type rules of the loop and if-conditional boundary layers.
//!
//! These rules see one layer at a time; the rules that span a whole loop or conditional
//! (nesting, where each input comes from, back edges) live in [`crate::ir::control`].

use super::{check_axis, rule, Fact, InferResult, Inputs, OutFact};
use crate::ir::dtype::DataType;
use crate::ir::layer::{LayerKind, LoopOutputKind, TripLimitKind};
use crate::ir::shape::{Dim, Shape};

/// Infers a boundary layer; `kind` must be one of the seven boundary kinds.
pub(super) fn boundary(kind: &LayerKind, ins: &Inputs) -> InferResult<Vec<OutFact>> {
    use LayerKind as K;
    match kind {
        K::TripLimit { kind: TripLimitKind::Count, .. } => {
            ins.arity(1, 1)?;
            let t = ins.req(0)?;
            if !t.dtype.is_index() || !single_element(t) {
                return rule(Some(0), format!("a COUNT trip limit takes a 0-D i32/i64 tensor, got {} {}", t.dtype, t.shape));
            }
            Ok(vec![])
        }
        K::TripLimit { kind: TripLimitKind::While, .. } => {
            ins.arity(1, 1)?;
            scalar_bool(ins, 0, "a WHILE trip limit")?;
            Ok(vec![])
        }
        K::Iterator { axis, .. } => {
            ins.arity(1, 1)?;
            let x = ins.req(0)?;
            if x.shape.rank() == 0 {
                return rule(Some(0), "an iterator needs a tensor of rank 1 or more to iterate over");
            }
            check_axis(*axis, x.shape.rank(), Some(0))?;
            let mut dims = x.shape.dims().to_vec();
            dims.remove(*axis);
            Ok(vec![OutFact::new(x.dtype, Shape(dims))])
        }
        K::Recurrence { shape, .. } => {
            ins.arity(1, 2)?;
            let initial = ins.req(0)?;
            let declared = shape.as_ref().unwrap_or(initial.shape);
            let as_declared = Fact::new(initial.dtype, declared, None);
            if shape.is_some() {
                same_type_and_shape(as_declared, initial, 0, "the initial value of a recurrence", "its declared shape")?;
            }
            if let Some(next) = ins.get(1) {
                same_type_and_shape(as_declared, next, 1, "the next value (input 1) of a recurrence", "its current value")?;
            }
            // The value changes from iteration to iteration: never a build-time constant.
            Ok(vec![OutFact::new(initial.dtype, declared.clone())])
        }
        K::LoopOutput { kind: LoopOutputKind::LastValue, .. } => {
            if ins.get(1).is_some() {
                return rule(Some(1), "a LAST_VALUE loop output takes no length input");
            }
            ins.arity(1, 2)?;
            let x = ins.req(0)?;
            Ok(vec![OutFact::new(x.dtype, x.shape.clone())])
        }
        K::LoopOutput { axis, .. } => {
            ins.arity(1, 2)?;
            let x = ins.req(0)?;
            if *axis > x.shape.rank() {
                return rule(Some(0), format!("axis {axis} is out of range for stacking rank-{} values", x.shape.rank()));
            }
            let length = match ins.get(1) {
                None => Dim::Unknown,
                Some(len) => {
                    if !len.dtype.is_index() || len.shape.rank() != 0 {
                        return rule(Some(1), format!("the length must be a 0-D i32/i64 tensor, got {} {}", len.dtype, len.shape));
                    }
                    match len.value.and_then(|v| v.to_i64_vec()).and_then(|v| v.first().copied()) {
                        Some(n) if n < 0 => return rule(Some(1), format!("the length is negative ({n})")),
                        Some(n) => Dim::Fixed(n as usize),
                        None => Dim::Unknown,
                    }
                }
            };
            let mut dims = x.shape.dims().to_vec();
            dims.insert(*axis, length);
            Ok(vec![OutFact::new(x.dtype, Shape(dims))])
        }
        K::Condition { .. } => {
            ins.arity(1, 1)?;
            scalar_bool(ins, 0, "a condition")?;
            Ok(vec![])
        }
        K::IfConditionalInput { .. } => {
            ins.arity(1, 1)?;
            let x = ins.req(0)?;
            Ok(vec![OutFact::with_value(x.dtype, x.shape.clone(), x.value.cloned())])
        }
        K::IfConditionalOutput { shape: Some(declared), .. } => {
            ins.arity(2, 2)?;
            let as_declared = Fact::new(ins.req(0)?.dtype, declared, None);
            same_type_and_shape(as_declared, ins.req(0)?, 0, "the true-branch output (input 0)", "the declared output")?;
            same_type_and_shape(as_declared, ins.req(1)?, 1, "the false-branch output (input 1)", "the declared output")?;
            Ok(vec![OutFact::new(as_declared.dtype, declared.clone())])
        }
        K::IfConditionalOutput { shape: None, .. } => {
            ins.arity(2, 2)?;
            let (t, f) = (ins.req(0)?, ins.req(1)?);
            same_type_and_shape(t, f, 1, "the false-branch output (input 1)", "the true-branch output (input 0)")?;
            // A dim the branches do not provably share is known only once a branch has run
            // (ONNX lets branches differ: torchvision's box ops return an empty [0] tensor
            // from one branch and [N] from the other).
            let dims = t
                .shape
                .dims()
                .iter()
                .zip(f.shape.dims())
                .map(|(a, b)| if a.same_as(b) { a.clone() } else { Dim::Unknown })
                .collect();
            Ok(vec![OutFact::new(t.dtype, Shape(dims))])
        }
        other => rule(None, format!("{} is not a loop or conditional boundary layer", other.type_name())),
    }
}

fn single_element(f: Fact) -> bool {
    f.shape.rank() == 0 || (f.shape.rank() == 1 && f.shape.dims()[0].same_as(&Dim::Fixed(1)))
}

fn scalar_bool(ins: &Inputs, slot: usize, what: &str) -> InferResult<()> {
    let f = ins.req(slot)?;
    if f.dtype != DataType::Bool || !single_element(f) {
        return rule(Some(slot), format!("{what} takes a 0-D bool tensor, got {} {}", f.dtype, f.shape));
    }
    Ok(())
}

/// `b` (in `slot`) must have `a`'s type and rank, with no dim provably different.
fn same_type_and_shape(a: Fact, b: Fact, slot: usize, b_what: &str, a_what: &str) -> InferResult<()> {
    let differs = a.shape.rank() != b.shape.rank()
        || a.shape.dims().iter().zip(b.shape.dims()).any(|(x, y)| x.differs_from(y));
    if a.dtype != b.dtype || differs {
        return rule(
            Some(slot),
            format!("{b_what} is {}{} but {a_what} is {}{}; they must have the same type and shape", b.dtype, b.shape, a.dtype, a.shape),
        );
    }
    Ok(())
}

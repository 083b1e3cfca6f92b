//! Symbolic output dims of a plugin: small expressions over the input dims, evaluated
//! on kiln's shapes (symbolic at build time, concrete at run time).

use crate::ir::shape::{Dim, Shape};

/// One output dim as an expression of the input dims.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DimExpr {
    Const(i64),
    /// Dim `axis` of input `input`.
    Input {
        input: usize,
        axis: usize,
    },
    Add(Box<DimExpr>, Box<DimExpr>),
    Sub(Box<DimExpr>, Box<DimExpr>),
    Mul(Box<DimExpr>, Box<DimExpr>),
    FloorDiv(Box<DimExpr>, Box<DimExpr>),
    CeilDiv(Box<DimExpr>, Box<DimExpr>),
    Max(Box<DimExpr>, Box<DimExpr>),
    Min(Box<DimExpr>, Box<DimExpr>),
}

impl DimExpr {
    /// The dim over `inputs`: a copied input dim keeps its name; arithmetic on known
    /// dims gives a fixed dim; arithmetic on unknown ones an unknown dim. Errors name a
    /// reference past the inputs, a division by zero or a negative result.
    pub fn eval(&self, inputs: &[&Shape]) -> Result<Dim, String> {
        if let DimExpr::Input { input, axis } = self {
            return input_dim(inputs, *input, *axis).cloned();
        }
        match self.value(inputs)? {
            Some(v) if v < 0 => Err(format!("the dim `{self}` is negative ({v})")),
            Some(v) => Ok(Dim::Fixed(v as usize)),
            None => Ok(Dim::Unknown),
        }
    }

    fn value(&self, inputs: &[&Shape]) -> Result<Option<i64>, String> {
        let pair = |a: &DimExpr, b: &DimExpr| -> Result<Option<(i64, i64)>, String> {
            Ok(a.value(inputs)?.zip(b.value(inputs)?))
        };
        Ok(match self {
            DimExpr::Const(v) => Some(*v),
            DimExpr::Input { input, axis } => input_dim(inputs, *input, *axis)?.fixed().map(|v| v as i64),
            DimExpr::Add(a, b) => pair(a, b)?.map(|(a, b)| a.saturating_add(b)),
            DimExpr::Sub(a, b) => pair(a, b)?.map(|(a, b)| a.saturating_sub(b)),
            DimExpr::Mul(a, b) => pair(a, b)?.map(|(a, b)| a.saturating_mul(b)),
            DimExpr::Max(a, b) => pair(a, b)?.map(|(a, b)| a.max(b)),
            DimExpr::Min(a, b) => pair(a, b)?.map(|(a, b)| a.min(b)),
            DimExpr::FloorDiv(a, b) | DimExpr::CeilDiv(a, b) => match pair(a, b)? {
                Some((_, 0)) => return Err(format!("the dim `{self}` divides by zero")),
                Some((a, b)) if matches!(self, DimExpr::FloorDiv(..)) => Some(a.div_euclid(b)),
                Some((a, b)) => Some(-((-a).div_euclid(b))),
                None => None,
            },
        })
    }
}

fn input_dim<'s>(inputs: &[&'s Shape], input: usize, axis: usize) -> Result<&'s Dim, String> {
    let shape = inputs.get(input).ok_or_else(|| format!("input {input} does not exist ({} inputs)", inputs.len()))?;
    shape.dims().get(axis).ok_or_else(|| format!("input {input} has rank {}, no axis {axis}", shape.rank()))
}

impl std::fmt::Display for DimExpr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (op, a, b) = match self {
            DimExpr::Const(v) => return write!(f, "{v}"),
            DimExpr::Input { input, axis } => return write!(f, "in{input}[{axis}]"),
            DimExpr::Add(a, b) => ("+", a, b),
            DimExpr::Sub(a, b) => ("-", a, b),
            DimExpr::Mul(a, b) => ("*", a, b),
            DimExpr::FloorDiv(a, b) => ("floordiv", a, b),
            DimExpr::CeilDiv(a, b) => ("ceildiv", a, b),
            DimExpr::Max(a, b) => ("max", a, b),
            DimExpr::Min(a, b) => ("min", a, b),
        };
        write!(f, "({a} {op} {b})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(a: DimExpr, b: DimExpr) -> DimExpr {
        DimExpr::Add(Box::new(a), Box::new(b))
    }

    #[test]
    fn expressions_keep_symbolic_dims_and_compute_known_ones() {
        let a = Shape(vec![Dim::Named("batch".into()), Dim::Fixed(6)]);
        let inputs = [&a];
        assert_eq!(DimExpr::Input { input: 0, axis: 0 }.eval(&inputs).unwrap(), Dim::Named("batch".into()));
        let half = DimExpr::CeilDiv(Box::new(DimExpr::Input { input: 0, axis: 1 }), Box::new(DimExpr::Const(4)));
        assert_eq!(half.eval(&inputs).unwrap(), Dim::Fixed(2));
        assert_eq!(add(DimExpr::Input { input: 0, axis: 0 }, DimExpr::Const(1)).eval(&inputs).unwrap(), Dim::Unknown);
        assert!(DimExpr::Input { input: 1, axis: 0 }.eval(&inputs).unwrap_err().contains("input 1 does not exist"));
        assert!(DimExpr::Sub(Box::new(DimExpr::Const(1)), Box::new(DimExpr::Const(3))).eval(&inputs).is_err());
    }
}

//! Einsum equations (numpy / ONNX syntax): parsing against the operand ranks and the
//! output shape. The cpu kernel evaluates the parsed form.

use super::{rule, InferResult, Inputs, OutFact};
use crate::ir::dtype::DataType;
use crate::ir::shape::{Dim, Shape};

/// Letters get labels `0..52`; the dims an ellipsis stands for get labels from 52 on,
/// right-aligned across operands as numpy broadcasts them.
const ELLIPSIS_BASE: usize = 52;

/// An equation resolved against its operands' ranks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EinsumSpec {
    /// The label of each dim of each operand.
    pub operands: Vec<Vec<usize>>,
    /// The label of each output dim.
    pub output: Vec<usize>,
    /// Labels are `< num_labels`.
    pub num_labels: usize,
}

/// One side of a term: its letter labels and where the ellipsis sits, if any.
struct Term {
    before: Vec<usize>,
    after: Option<Vec<usize>>,
}

fn letter(c: char) -> Result<usize, String> {
    match c {
        // Upper case sorts first in implicit outputs.
        'A'..='Z' => Ok(c as usize - 'A' as usize),
        'a'..='z' => Ok(26 + c as usize - 'a' as usize),
        _ => Err(format!("`{c}` is not a label (labels are ASCII letters)")),
    }
}

fn parse_term(term: &str) -> Result<Term, String> {
    let parse = |s: &str| s.chars().map(letter).collect::<Result<Vec<_>, _>>();
    match term.split_once("...") {
        None => Ok(Term { before: parse(term)?, after: None }),
        Some((a, b)) if !b.contains('.') => Ok(Term { before: parse(a)?, after: Some(parse(b)?) }),
        Some(_) => Err(format!("term `{term}` has more than one ellipsis")),
    }
}

impl EinsumSpec {
    pub fn parse(equation: &str, ranks: &[usize]) -> Result<EinsumSpec, String> {
        let eq: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
        let (lhs, rhs) = match eq.split_once("->") {
            Some((l, r)) => (l, Some(r)),
            None => (eq.as_str(), None),
        };
        let terms: Vec<&str> = lhs.split(',').collect();
        if terms.len() != ranks.len() {
            return Err(format!(
                "equation `{equation}` has {} operands but {} inputs are given",
                terms.len(),
                ranks.len()
            ));
        }
        let mut parsed = Vec::with_capacity(terms.len());
        let mut ellipsis_rank = 0;
        for (term, &rank) in terms.iter().zip(ranks) {
            let t = parse_term(term)?;
            let letters = t.before.len() + t.after.as_ref().map_or(0, Vec::len);
            let ell = match &t.after {
                None if letters == rank => 0,
                Some(_) if letters <= rank => rank - letters,
                _ => return Err(format!("term `{term}` does not match an operand of rank {rank}")),
            };
            ellipsis_rank = ellipsis_rank.max(ell);
            parsed.push((t, ell));
        }
        let ellipsis = |n: usize| (ellipsis_rank - n..ellipsis_rank).map(|k| ELLIPSIS_BASE + k);
        let operands: Vec<Vec<usize>> = parsed
            .iter()
            .map(|(t, ell)| {
                let mut labels = t.before.clone();
                if let Some(after) = &t.after {
                    labels.extend(ellipsis(*ell));
                    labels.extend(after);
                }
                labels
            })
            .collect();
        let output = match rhs {
            Some(rhs) => {
                let t = parse_term(rhs)?;
                let mut labels = t.before;
                if let Some(after) = t.after {
                    labels.extend(ellipsis(ellipsis_rank));
                    labels.extend(after);
                }
                for (i, l) in labels.iter().enumerate() {
                    if labels[..i].contains(l) {
                        return Err(format!("output `{rhs}` repeats a label"));
                    }
                    if !operands.iter().any(|o| o.contains(l)) {
                        return Err(format!("output `{rhs}` has a label that no operand has"));
                    }
                }
                labels
            }
            None => {
                // Implicit output: the broadcast dims, then the letters used once, sorted.
                let mut labels: Vec<usize> = ellipsis(ellipsis_rank).collect();
                labels
                    .extend((0..ELLIPSIS_BASE).filter(|l| operands.iter().flatten().filter(|&x| x == l).count() == 1));
                labels
            }
        };
        Ok(EinsumSpec { operands, output, num_labels: ELLIPSIS_BASE + ellipsis_rank })
    }

    /// The length of every label (`None` for labels no operand uses); ellipsis dims of
    /// length 1 broadcast.
    pub fn label_dims(&self, shapes: &[&[Dim]]) -> Result<Vec<Option<Dim>>, String> {
        let mut dims: Vec<Option<Dim>> = vec![None; self.num_labels];
        for (labels, shape) in self.operands.iter().zip(shapes) {
            for (&l, d) in labels.iter().zip(shape.iter()) {
                let merged = match (&dims[l], d) {
                    (None, d) => d.clone(),
                    (Some(a), d) if l >= ELLIPSIS_BASE && d.fixed() == Some(1) => a.clone(),
                    (Some(a), d) if l >= ELLIPSIS_BASE && a.fixed() == Some(1) => d.clone(),
                    (Some(a), d) if a.differs_from(d) => {
                        return Err(format!("a label has lengths {} and {} in different places", a, d))
                    }
                    (Some(a), _) if a.is_fixed() => a.clone(),
                    (Some(_), d) => d.clone(),
                };
                dims[l] = Some(merged);
            }
        }
        Ok(dims)
    }

    /// The output dims.
    pub fn output_dims(&self, shapes: &[&[Dim]]) -> Result<Vec<Dim>, String> {
        let dims = self.label_dims(shapes)?;
        Ok(self.output.iter().map(|&l| dims[l].clone().unwrap_or(Dim::Fixed(1))).collect())
    }
}

/// `[x0, x1, …] -> [y]`: every operand numeric and of one type.
pub(crate) fn infer(equation: &str, ins: &Inputs) -> InferResult<Vec<OutFact>> {
    if ins.0.is_empty() {
        return rule(None, "Einsum needs at least one operand");
    }
    let facts = (0..ins.0.len()).map(|i| ins.req(i)).collect::<InferResult<Vec<_>>>()?;
    let dtype = facts[0].dtype;
    for (i, f) in facts.iter().enumerate() {
        if f.dtype == DataType::Bool {
            return rule(Some(i), "Einsum operands must be numeric, not bool");
        }
        if f.dtype != dtype {
            return rule(Some(i), format!("Einsum operands must share one type, got {dtype} and {}", f.dtype));
        }
    }
    let ranks: Vec<usize> = facts.iter().map(|f| f.shape.rank()).collect();
    let spec = EinsumSpec::parse(equation, &ranks).or_else(|e| rule(None, e))?;
    let shapes: Vec<&[Dim]> = facts.iter().map(|f| f.shape.dims()).collect();
    let dims = spec.output_dims(&shapes).or_else(|e| rule(None, e))?;
    Ok(vec![OutFact::new(dtype, Shape(dims))])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed(d: &[usize]) -> Vec<Dim> {
        d.iter().map(|&n| Dim::Fixed(n)).collect()
    }

    #[test]
    fn explicit_and_implicit_outputs() {
        let s = EinsumSpec::parse("bij,bjk->bik", &[3, 3]).unwrap();
        let (a, b) = (fixed(&[2, 3, 4]), fixed(&[2, 4, 5]));
        assert_eq!(s.output_dims(&[&a, &b]).unwrap(), fixed(&[2, 3, 5]));
        let s = EinsumSpec::parse("ij", &[2]).unwrap();
        assert_eq!(s.output, vec![34, 35]);
        let s = EinsumSpec::parse("ji", &[2]).unwrap();
        assert_eq!(s.output, vec![34, 35]);
        let s = EinsumSpec::parse("bA,Ab", &[2, 2]).unwrap();
        assert!(s.output.is_empty());
        let s = EinsumSpec::parse("ab,Bc", &[2, 2]).unwrap();
        assert_eq!(s.output, vec![1, 26, 27, 28]);
        let s = EinsumSpec::parse("...ii->...i", &[4]).unwrap();
        let x = fixed(&[2, 3, 5, 5]);
        assert_eq!(s.output_dims(&[&x]).unwrap(), fixed(&[2, 3, 5]));
    }

    #[test]
    fn rejects_bad_equations() {
        assert!(EinsumSpec::parse("ij,jk", &[2]).is_err());
        assert!(EinsumSpec::parse("ijk", &[2]).is_err());
        assert!(EinsumSpec::parse("ij->ii", &[2]).is_err());
        assert!(EinsumSpec::parse("ij->k", &[2]).is_err());
        assert!(EinsumSpec::parse("i1", &[2]).is_err());
        let s = EinsumSpec::parse("i,i", &[1, 1]).unwrap();
        assert!(s.output_dims(&[&fixed(&[3]), &fixed(&[4])]).is_err());
    }
}

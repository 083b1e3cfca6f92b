//! Einsum as a matrix product. A two-operand float equation with one contracted label, one
//! free label in each operand and any number of batch labels (in both operands and the output)
//! is a batched MatrixMultiply: attention written as `bhid,bhjd->bhij` then `bhij,bhjd->bhid`
//! (torchvision's MaxViT, many transformers), or `bik,bkj->bij`. The backends' Einsum kernels
//! are general index loops; a product runs on cuBLASLt and tensor cores, and the attention
//! and epilogue passes after this one see it. An operand is transposed only where its labels
//! are in neither `[batch…, free, contracted]` nor the transposed-operand order, and the
//! product `[batch…, i, j]` only where the output orders its labels otherwise. Anything else
//! (a label summed in one operand only, a repeated label, more than one contracted or free
//! label per operand) stays an Einsum.

use super::graph::has_control_flow;
use super::{Pass, PassContext, PassError};
use crate::ir::infer::EinsumSpec;
use crate::ir::layer::{LayerKind, MatrixOp, ShuffleParams};
use crate::ir::network::{Layer, Network, TensorId};
use crate::ir::rewrite::Rewriter;

#[derive(Clone, Copy, Debug, Default)]
pub struct EinsumLowering;

impl Pass for EinsumLowering {
    fn name(&self) -> &'static str {
        "einsum-lowering"
    }

    fn run(&self, network: &Network, _: &PassContext<'_>) -> Result<Option<Network>, PassError> {
        if has_control_flow(network) {
            return Ok(None);
        }
        let mut rb = Rewriter::new(network);
        let mut changed = false;
        for (i, l) in network.layers().iter().enumerate() {
            match product_plan(network, l) {
                Some((plan, a, b)) => {
                    lower(&mut rb, l, &plan, a, b)?;
                    changed = true;
                }
                None => {
                    rb.keep(i)?;
                }
            }
        }
        Ok(if changed { Some(rb.finish_as_source()?) } else { None })
    }
}

/// How an equation runs as one product: each operand's permutation (empty: none) and
/// matrix op, and the product's permutation into the output's order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ProductPlan {
    pub perm_a: Vec<usize>,
    pub op_a: MatrixOp,
    pub perm_b: Vec<usize>,
    pub op_b: MatrixOp,
    pub perm_out: Vec<usize>,
}

fn product_plan(network: &Network, l: &Layer) -> Option<(ProductPlan, TensorId, TensorId)> {
    let LayerKind::Einsum { equation } = &l.kind else { return None };
    let [Some(a), Some(b)] = l.inputs[..] else { return None };
    let (da, db) = (network.tensor(a), network.tensor(b));
    if !da.dtype.is_float() || da.dtype != db.dtype {
        return None;
    }
    let spec = EinsumSpec::parse(equation, &[da.shape.rank(), db.shape.rank()]).ok()?;
    Some((plan_of(&spec)?, a, b))
}

/// The plan for a parsed equation (see the module docs), or None.
pub(crate) fn plan_of(spec: &EinsumSpec) -> Option<ProductPlan> {
    let [a, b] = &spec.operands[..] else { return None };
    let out = &spec.output;
    let distinct = |labels: &[usize]| labels.iter().enumerate().all(|(i, l)| !labels[..i].contains(l));
    if !distinct(a) || !distinct(b) || !distinct(out) {
        return None;
    }
    let only = |labels: Vec<usize>| -> Option<usize> { (labels.len() == 1).then(|| labels[0]) };
    let contracted = only(a.iter().copied().filter(|l| b.contains(l) && !out.contains(l)).collect())?;
    let free_a = only(a.iter().copied().filter(|l| !b.contains(l)).collect())?;
    let free_b = only(b.iter().copied().filter(|l| !a.contains(l)).collect())?;
    let batch: Vec<usize> = out.iter().copied().filter(|l| a.contains(l) && b.contains(l)).collect();
    // Every label is batch, free or contracted: nothing summed within one operand.
    if !out.contains(&free_a) || !out.contains(&free_b) || out.len() != batch.len() + 2 || a.len() != batch.len() + 2 || b.len() != batch.len() + 2 {
        return None;
    }
    let order = |have: &[usize], want: Vec<usize>| -> Vec<usize> { want.iter().map(|l| have.iter().position(|h| h == l).expect("a label of the operand")).collect() };
    let with = |tail: [usize; 2]| batch.iter().copied().chain(tail).collect::<Vec<_>>();
    let operand = |have: &[usize], plain: [usize; 2]| {
        let straight = order(have, with(plain));
        let transposed = order(have, with([plain[1], plain[0]]));
        if is_identity(&straight) || !is_identity(&transposed) {
            (straight, MatrixOp::None)
        } else {
            (transposed, MatrixOp::Transpose)
        }
    };
    let (perm_a, op_a) = operand(a, [free_a, contracted]);
    let (perm_b, op_b) = operand(b, [contracted, free_b]);
    let perm_out = order(&with([free_a, free_b]), out.clone());
    let none_if_identity = |p: Vec<usize>| if is_identity(&p) { Vec::new() } else { p };
    Some(ProductPlan { perm_a: none_if_identity(perm_a), op_a, perm_b: none_if_identity(perm_b), op_b, perm_out: none_if_identity(perm_out) })
}

fn is_identity(p: &[usize]) -> bool {
    p.iter().enumerate().all(|(i, &d)| i == d)
}

fn transpose(perm: &[usize]) -> LayerKind {
    LayerKind::Shuffle(ShuffleParams { first_transpose: perm.to_vec(), ..Default::default() })
}

fn lower(rb: &mut Rewriter<'_>, l: &Layer, plan: &ProductPlan, a: TensorId, b: TensorId) -> Result<(), PassError> {
    let operand = |rb: &mut Rewriter<'_>, t: TensorId, perm: &[usize], which: &str| -> Result<TensorId, PassError> {
        let t = rb.get(t)?;
        if perm.is_empty() {
            return Ok(t);
        }
        let name = format!("{} ({which} transposed)", l.name);
        Ok(rb.add_layer(&name, transpose(perm), vec![Some(t)], &[name.clone()])?[0])
    };
    let (a, b) = (operand(rb, a, &plan.perm_a, "a")?, operand(rb, b, &plan.perm_b, "b")?);
    let product = LayerKind::MatrixMultiply { op_a: plan.op_a, op_b: plan.op_b };
    if plan.perm_out.is_empty() {
        rb.add(&l.name, product, vec![Some(a), Some(b)], &l.outputs)?;
    } else {
        let name = format!("{} (product)", l.name);
        let p = rb.add_layer(&l.name, product, vec![Some(a), Some(b)], &[name])?[0];
        rb.add(&format!("{} (output transposed)", l.name), transpose(&plan.perm_out), vec![Some(p)], &l.outputs)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(equation: &str, ranks: [usize; 2]) -> Option<ProductPlan> {
        plan_of(&EinsumSpec::parse(equation, &ranks).unwrap())
    }

    #[test]
    fn attention_einsums_are_products_without_transposes() {
        let scores = plan("bghid,bghjd->bghij", [5, 5]).unwrap();
        assert_eq!(scores, ProductPlan { perm_a: vec![], op_a: MatrixOp::None, perm_b: vec![], op_b: MatrixOp::Transpose, perm_out: vec![] });
        let mix = plan("bghij,bghjd->bghid", [5, 5]).unwrap();
        assert_eq!(mix, ProductPlan { perm_a: vec![], op_a: MatrixOp::None, perm_b: vec![], op_b: MatrixOp::None, perm_out: vec![] });
        assert_eq!(plan("ki,kj->ij", [2, 2]).unwrap().op_a, MatrixOp::Transpose);
    }

    #[test]
    fn batch_labels_out_of_place_are_transposed() {
        // a: [i, b, k] → [b, i, k]; output [i, b, j] from the product's [b, i, j].
        let p = plan("ibk,bkj->ibj", [3, 3]).unwrap();
        assert_eq!((p.perm_a, p.op_a), (vec![1, 0, 2], MatrixOp::None));
        assert_eq!(p.perm_out, vec![1, 0, 2]);
    }

    #[test]
    fn equations_that_are_not_one_product_stay_einsums() {
        for (eq, ranks) in [("ij,jk->", [2, 2]), ("ii,ij->ij", [2, 2]), ("bij,bjk->bi", [3, 3]), ("ijk,jkl->il", [3, 3]), ("ij,j->i", [2, 1]), ("ij,kl->ijkl", [2, 2])] {
            assert_eq!(plan(eq, ranks), None, "{eq}");
        }
    }
}

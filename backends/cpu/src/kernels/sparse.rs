//! The 2:4 sparse matrix product, a SPARSE_WEIGHTS tactic ([`kiln::sparsity`]): the right
//! operand is compressed to the two kept values of every group of four rows (input
//! channels) with their row numbers, and each output sums only those, half the
//! multiply-adds of the dense product. The builder offers it only for weights that satisfy
//! 2:4, where the kept values are all the non-zeros: the result is the dense product's up to
//! summation order.

use super::matmul::Plan;
use crate::element::{pack, FloatElem, Real};
use kiln::sparsity::{kept_positions, GROUP, KEPT};
use kiln::TensorData;

pub(super) fn float_matmul_sparse<T: FloatElem>(plan: &Plan, a: &[T], b: &[T]) -> TensorData {
    let (m, k, n) = (plan.rows(), plan.a.cols, plan.cols());
    if k % GROUP != 0 {
        return super::alt::float_matmul_blocked(plan, a, b);
    }
    let (a, b) = (T::widen_slice(a), T::widen_slice(b));
    let groups = k / GROUP;
    let mut c = vec![T::Acc::ZERO; plan.batch * m * n];
    let (mut rows, mut values) = (vec![0usize; groups * n * KEPT], vec![T::Acc::ZERO; groups * n * KEPT]);
    for bi in 0..plan.batch {
        let (la, lb) = plan.layouts(bi);
        // Compressed weights, [group][column][KEPT]: the kept row numbers and their values.
        for g in 0..groups {
            for j in 0..n {
                let at = |r: usize| b[lb.offset + (g * GROUP + r) * lb.row_stride + j * lb.col_stride];
                for (q, r) in kept_positions(std::array::from_fn(|r| at(r).to_f64())).into_iter().enumerate() {
                    rows[(g * n + j) * KEPT + q] = g * GROUP + r;
                    values[(g * n + j) * KEPT + q] = at(r);
                }
            }
        }
        let base = bi * m * n;
        for i in 0..m {
            let x = |p: usize| a[la.offset + i * la.row_stride + p * la.col_stride];
            let out = &mut c[base + i * n..base + (i + 1) * n];
            for g in 0..groups {
                let (rows, values) = (&rows[g * n * KEPT..(g + 1) * n * KEPT], &values[g * n * KEPT..(g + 1) * n * KEPT]);
                for (j, o) in out.iter_mut().enumerate() {
                    let q = j * KEPT;
                    *o = *o + x(rows[q]) * values[q] + x(rows[q + 1]) * values[q + 1];
                }
            }
        }
    }
    pack(T::narrow_vec(c))
}

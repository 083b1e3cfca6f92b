//! Batched matrix multiplication with broadcast batch dims: floats through matrixmultiply,
//! integers with a plain wrapping multiply-add loop.

use super::{alt, typed, Variant};
use crate::element::{numeric_data, pack, FloatElem, IntElem, Real};
use crate::layout::volume;
use kiln::plan::matmul::{operands, MatrixOperand};
use kiln::{HostTensor, MatrixOp, TensorData};
use kiln_cpu_gemm::MatrixLayout;

/// The shared geometry of one product: both operands ([`kiln::plan::matmul`]) and where
/// each output batch reads its matrices.
pub(super) struct Plan {
    pub(super) a: MatrixOperand,
    pub(super) b: MatrixOperand,
    pub(super) batch: usize,
    a_offsets: Vec<usize>,
    b_offsets: Vec<usize>,
}

impl Plan {
    fn new(
        a_shape: &[usize],
        op_a: MatrixOp,
        b_shape: &[usize],
        op_b: MatrixOp,
        out_shape: &[usize],
    ) -> Result<Plan, String> {
        let (a, b) = operands(a_shape, op_a, b_shape, op_b)?;
        let matrix_dims = usize::from(op_a != MatrixOp::Vector) + usize::from(op_b != MatrixOp::Vector);
        let batch_shape = out_shape
            .get(..out_shape.len().wrapping_sub(matrix_dims))
            .ok_or_else(|| format!("output shape {out_shape:?} lacks the matrix dims"))?;
        let (a_offsets, b_offsets) = (a.batch_offsets(batch_shape)?, b.batch_offsets(batch_shape)?);
        Ok(Plan { batch: volume(batch_shape), a, b, a_offsets, b_offsets })
    }

    pub(super) fn rows(&self) -> usize {
        self.a.rows
    }

    pub(super) fn cols(&self) -> usize {
        self.b.cols
    }

    /// The gemm layouts of `a`'s and `b`'s matrices for output batch `i`.
    pub(super) fn layouts(&self, i: usize) -> (MatrixLayout, MatrixLayout) {
        (layout(&self.a, self.a_offsets[i]), layout(&self.b, self.b_offsets[i]))
    }
}

fn layout(operand: &MatrixOperand, offset: usize) -> MatrixLayout {
    MatrixLayout { offset, row_stride: operand.row_stride, col_stride: operand.col_stride }
}

pub fn matrix_multiply(
    a: &HostTensor,
    op_a: MatrixOp,
    b: &HostTensor,
    op_b: MatrixOp,
    out_shape: &[usize],
    variant: Variant,
) -> Result<TensorData, String> {
    let plan = Plan::new(a.shape(), op_a, b.shape(), op_b, out_shape)?;
    numeric_data!(a.data(), "MatrixMultiply", v =>
        float: match variant {
            Variant::Alternate => alt::float_matmul_blocked(&plan, v, typed(b, "input 1")?),
            Variant::Sparse => super::sparse::float_matmul_sparse(&plan, v, typed(b, "input 1")?),
            Variant::Primary => float_matmul(&plan, v, typed(b, "input 1")?)?,
        },
        int: int_matmul(&plan, v, typed(b, "input 1")?))
}

fn float_matmul<T: FloatElem>(plan: &Plan, a: &[T], b: &[T]) -> Result<TensorData, String> {
    let (a, b) = (T::widen_slice(a), T::widen_slice(b));
    let (m, n) = (plan.rows(), plan.cols());
    let mut c = vec![T::Acc::ZERO; plan.batch * m * n];
    for i in 0..plan.batch {
        let (la, lb) = plan.layouts(i);
        T::Acc::gemm(
            m,
            plan.a.cols,
            n,
            &a,
            la,
            &b,
            lb,
            &mut c,
            MatrixLayout::row_major(i * m * n, n),
            false,
        )
        .map_err(|e| e.to_string())?;
    }
    Ok(pack(T::narrow_vec(c)))
}

fn int_matmul<T: IntElem>(plan: &Plan, a: &[T], b: &[T]) -> TensorData {
    let (m, k, n) = (plan.rows(), plan.a.cols, plan.cols());
    let mut c = Vec::with_capacity(plan.batch * m * n);
    for bi in 0..plan.batch {
        let (la, lb) = plan.layouts(bi);
        for i in 0..m {
            for j in 0..n {
                let mut acc = T::zero();
                for p in 0..k {
                    let x = a[la.offset + i * la.row_stride + p * la.col_stride];
                    let y = b[lb.offset + p * lb.row_stride + j * lb.col_stride];
                    acc = acc.wrapping_add(x.wrapping_mul(y));
                }
                c.push(acc);
            }
        }
    }
    pack(c)
}

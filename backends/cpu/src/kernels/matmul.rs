//! Batched matrix multiplication with broadcast batch dims: floats through matrixmultiply,
//! integers with a plain wrapping multiply-add loop.

use super::{alt, typed, Variant};
use crate::element::{numeric_data, pack, FloatElem, IntElem, Real};
use crate::layout::{volume, Broadcast};
use kiln::{HostTensor, MatrixOp, TensorData};
use kiln_cpu_gemm::MatrixLayout;

/// One operand seen as a stack of `rows × cols` matrices.
#[derive(Debug)]
pub(super) struct Operand {
    batch: Vec<usize>,
    pub(super) rows: usize,
    pub(super) cols: usize,
    row_stride: usize,
    col_stride: usize,
}

impl Operand {
    /// `a` as a stack of `M × K` matrices (`as_left`) or `b` as `K × N` matrices.
    fn new(shape: &[usize], op: MatrixOp, as_left: bool, slot: usize) -> Result<Operand, String> {
        let r = shape.len();
        let need = if op == MatrixOp::Vector { 1 } else { 2 };
        if r < need {
            return Err(format!("input {slot} has rank {r} but {op:?} needs at least {need}"));
        }
        let batch = shape[..r - need].to_vec();
        Ok(match (op, as_left) {
            // A vector is a single row on the left and a single column on the right.
            (MatrixOp::Vector, true) => {
                Operand { batch, rows: 1, cols: shape[r - 1], row_stride: shape[r - 1], col_stride: 1 }
            }
            (MatrixOp::Vector, false) => Operand { batch, rows: shape[r - 1], cols: 1, row_stride: 1, col_stride: 1 },
            (MatrixOp::None, _) => {
                Operand { batch, rows: shape[r - 2], cols: shape[r - 1], row_stride: shape[r - 1], col_stride: 1 }
            }
            (MatrixOp::Transpose, _) => {
                Operand { batch, rows: shape[r - 1], cols: shape[r - 2], row_stride: 1, col_stride: shape[r - 1] }
            }
        })
    }

    fn size(&self) -> usize {
        self.rows * self.cols
    }

    pub(super) fn layout(&self, batch_index: usize) -> MatrixLayout {
        MatrixLayout { offset: batch_index * self.size(), row_stride: self.row_stride, col_stride: self.col_stride }
    }
}

/// The shared geometry of one product.
pub(super) struct Plan {
    pub(super) a: Operand,
    pub(super) b: Operand,
    pub(super) batch: usize,
    pub(super) a_batch: Broadcast,
    pub(super) b_batch: Broadcast,
}

impl Plan {
    fn new(
        a_shape: &[usize],
        op_a: MatrixOp,
        b_shape: &[usize],
        op_b: MatrixOp,
        out_shape: &[usize],
    ) -> Result<Plan, String> {
        let a = Operand::new(a_shape, op_a, true, 0)?;
        let b = Operand::new(b_shape, op_b, false, 1)?;
        if a.cols != b.rows {
            return Err(format!("inner dimensions differ: {} vs {}", a.cols, b.rows));
        }
        let matrix_dims = usize::from(op_a != MatrixOp::Vector) + usize::from(op_b != MatrixOp::Vector);
        let batch_shape = out_shape
            .get(..out_shape.len().wrapping_sub(matrix_dims))
            .ok_or_else(|| format!("output shape {out_shape:?} lacks the matrix dims"))?;
        let a_batch = Broadcast::new(&a.batch, batch_shape)?;
        let b_batch = Broadcast::new(&b.batch, batch_shape)?;
        Ok(Plan { batch: volume(batch_shape), a, b, a_batch, b_batch })
    }

    pub(super) fn rows(&self) -> usize {
        self.a.rows
    }

    pub(super) fn cols(&self) -> usize {
        self.b.cols
    }
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
        float: if variant == Variant::Alternate {
            alt::float_matmul_blocked(&plan, v, typed(b, "input 1")?)
        } else {
            float_matmul(&plan, v, typed(b, "input 1")?)?
        },
        int: int_matmul(&plan, v, typed(b, "input 1")?))
}

fn float_matmul<T: FloatElem>(plan: &Plan, a: &[T], b: &[T]) -> Result<TensorData, String> {
    let (a, b) = (T::widen_slice(a), T::widen_slice(b));
    let (m, n) = (plan.rows(), plan.cols());
    let mut c = vec![T::Acc::ZERO; plan.batch * m * n];
    for i in 0..plan.batch {
        T::Acc::gemm(
            m,
            plan.a.cols,
            n,
            &a,
            plan.a.layout(plan.a_batch.at(i)),
            &b,
            plan.b.layout(plan.b_batch.at(i)),
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
        let (la, lb) = (plan.a.layout(plan.a_batch.at(bi)), plan.b.layout(plan.b_batch.at(bi)));
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

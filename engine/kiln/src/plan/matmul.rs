//! Matrix-multiply planning: each operand of a batched product as a stack of `rows × cols`
//! matrices read through element strides (a transpose is only a stride swap), and where each
//! batch's matrix starts once the operands' batch dims broadcast.

use crate::ir::layer::MatrixOp;
use crate::ir::broadcast;

/// One operand seen as a stack of `rows × cols` matrices: element `(i, j)` of batch matrix
/// `b` is at `offset(b) + i·row_stride + j·col_stride`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatrixOperand {
    /// The leading dims that index the matrices.
    pub batch: Vec<usize>,
    pub rows: usize,
    pub cols: usize,
    pub row_stride: usize,
    pub col_stride: usize,
}

impl MatrixOperand {
    /// The left operand (`as_left`, input 0) as `M × K` matrices, or the right one (input 1)
    /// as `K × N` matrices.
    pub fn new(shape: &[usize], op: MatrixOp, as_left: bool) -> Result<MatrixOperand, String> {
        let r = shape.len();
        let need = if op == MatrixOp::Vector { 1 } else { 2 };
        if r < need {
            let slot = usize::from(!as_left);
            return Err(format!("input {slot} has rank {r} but {op:?} needs at least {need}"));
        }
        let batch = shape[..r - need].to_vec();
        let last = shape[r - 1];
        Ok(match (op, as_left) {
            // A vector is a single row on the left and a single column on the right.
            (MatrixOp::Vector, true) => MatrixOperand { batch, rows: 1, cols: last, row_stride: last, col_stride: 1 },
            (MatrixOp::Vector, false) => MatrixOperand { batch, rows: last, cols: 1, row_stride: 1, col_stride: 1 },
            (MatrixOp::None, _) => {
                MatrixOperand { batch, rows: shape[r - 2], cols: last, row_stride: last, col_stride: 1 }
            }
            (MatrixOp::Transpose, _) => {
                MatrixOperand { batch, rows: last, cols: shape[r - 2], row_stride: 1, col_stride: last }
            }
        })
    }

    /// Elements in one matrix of the stack.
    pub fn size(&self) -> usize {
        self.rows * self.cols
    }

    /// The element offset of this operand's matrix for each batch of `batch_shape`, in
    /// row-major order, its own batch dims broadcast to it.
    pub fn batch_offsets(&self, batch_shape: &[usize]) -> Result<Vec<usize>, String> {
        Ok(broadcast::positions(&self.batch, batch_shape)?.into_iter().map(|at| at * self.size()).collect())
    }
}

/// Both operands of `a · b`, checked to agree on the inner dimension K.
pub fn operands(
    a_shape: &[usize],
    op_a: MatrixOp,
    b_shape: &[usize],
    op_b: MatrixOp,
) -> Result<(MatrixOperand, MatrixOperand), String> {
    let (a, b) = (MatrixOperand::new(a_shape, op_a, true)?, MatrixOperand::new(b_shape, op_b, false)?);
    if a.cols != b.rows {
        return Err(format!(
            "inner dimensions differ: {} vs {} ({a_shape:?} {op_a:?} · {b_shape:?} {op_b:?})",
            a.cols, b.rows
        ));
    }
    Ok((a, b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transposed_batched_operand_swaps_its_strides() {
        let t = MatrixOperand::new(&[2, 3, 4], MatrixOp::Transpose, true).unwrap();
        assert_eq!(t, MatrixOperand { batch: vec![2], rows: 4, cols: 3, row_stride: 1, col_stride: 4 });
        let n = MatrixOperand::new(&[2, 3, 4], MatrixOp::None, false).unwrap();
        assert_eq!(n, MatrixOperand { batch: vec![2], rows: 3, cols: 4, row_stride: 4, col_stride: 1 });
    }

    #[test]
    fn a_vector_is_a_row_on_the_left_and_a_column_on_the_right() {
        let left = MatrixOperand::new(&[5], MatrixOp::Vector, true).unwrap();
        assert_eq!((left.rows, left.cols, left.row_stride, left.col_stride), (1, 5, 5, 1));
        let right = MatrixOperand::new(&[7, 5], MatrixOp::Vector, false).unwrap();
        assert_eq!((right.batch, right.rows, right.cols, right.row_stride), (vec![7], 5, 1, 1));
        assert!(MatrixOperand::new(&[5], MatrixOp::None, false).unwrap_err().contains("input 1"));
        assert!(operands(&[2, 3], MatrixOp::None, &[2, 3], MatrixOp::None).is_err());
    }

    #[test]
    fn batch_offsets_repeat_a_broadcast_operand() {
        let (a, b) = operands(&[3, 1, 2, 4], MatrixOp::None, &[2, 4, 5], MatrixOp::None).unwrap();
        // a's matrices are 2×4 (8 elements), b's 4×5 (20); the batch is (3, 2).
        assert_eq!(a.batch_offsets(&[3, 2]).unwrap(), [0, 0, 8, 8, 16, 16]);
        assert_eq!(b.batch_offsets(&[3, 2]).unwrap(), [0, 20, 0, 20, 0, 20]);
        assert!(a.batch_offsets(&[2, 2]).is_err());
        assert_eq!(a.batch_offsets(&[3, 0]).unwrap(), Vec::<usize>::new());
    }
}

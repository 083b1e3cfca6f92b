//! Safe, bounds-checked entry points to `matrixmultiply`'s strided GEMM kernels.
//!
//! `matrixmultiply::{sgemm, dgemm}` take raw pointers and strides. This crate is the one
//! place where kiln's cpu backend (which forbids `unsafe`) reaches them: every call checks
//! that each element the kernel may touch lies inside the given slices and that distinct
//! elements of C do not alias, so the wrappers are sound for any arguments.

use std::fmt;

/// Where a matrix lies inside a slice: element `(i, j)` is at
/// `offset + i * row_stride + j * col_stride`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatrixLayout {
    pub offset: usize,
    pub row_stride: usize,
    pub col_stride: usize,
}

impl MatrixLayout {
    /// A dense row-major matrix with `cols` columns starting at `offset`.
    pub fn row_major(offset: usize, cols: usize) -> MatrixLayout {
        MatrixLayout { offset, row_stride: cols, col_stride: 1 }
    }

    /// The transpose of a dense row-major matrix with `cols` columns starting at `offset`.
    pub fn transposed(offset: usize, cols: usize) -> MatrixLayout {
        MatrixLayout { offset, row_stride: 1, col_stride: cols }
    }

    /// The index of the last element of a `rows × cols` matrix (both non-zero).
    fn last_index(&self, rows: usize, cols: usize) -> Option<usize> {
        let r = (rows - 1).checked_mul(self.row_stride)?;
        let c = (cols - 1).checked_mul(self.col_stride)?;
        self.offset.checked_add(r)?.checked_add(c)
    }

    /// Whether distinct `(i, j)` of a `rows × cols` matrix address distinct elements.
    fn is_injective(&self, rows: usize, cols: usize) -> bool {
        // Order the (extent, stride) pairs by stride: the inner one must be non-zero and
        // the outer one must step over a whole inner run.
        let (mut inner, mut outer) = ((rows, self.row_stride), (cols, self.col_stride));
        if inner.1 > outer.1 {
            std::mem::swap(&mut inner, &mut outer);
        }
        let inner_ok = inner.0 <= 1 || inner.1 >= 1;
        let outer_ok = outer.0 <= 1 || inner.0.checked_mul(inner.1).is_some_and(|span| outer.1 >= span.max(1));
        inner_ok && outer_ok
    }

    fn strides(&self) -> Option<(isize, isize)> {
        Some((isize::try_from(self.row_stride).ok()?, isize::try_from(self.col_stride).ok()?))
    }
}

/// Arguments that would make the kernel read or write outside its slices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayoutError(String);

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid gemm layout: {}", self.0)
    }
}

impl std::error::Error for LayoutError {}

fn check_operand(name: &str, len: usize, layout: &MatrixLayout, rows: usize, cols: usize) -> Result<(), LayoutError> {
    match layout.last_index(rows, cols) {
        Some(last) if last < len => {}
        _ => {
            return Err(LayoutError(format!(
                "{name} ({rows} × {cols}, {layout:?}) does not fit in a slice of {len} elements"
            )))
        }
    }
    layout.strides().map(|_| ()).ok_or_else(|| LayoutError(format!("{name} strides overflow isize")))
}

macro_rules! safe_gemm {
    ($name:ident, $t:ty, $kernel:path) => {
        /// `C ← A·B` (or `C ← A·B + C` when `accumulate`) for an `m × k` matrix A, a
        /// `k × n` matrix B and an `m × n` matrix C, each at its layout inside its slice.
        #[allow(clippy::too_many_arguments)]
        pub fn $name(
            m: usize,
            k: usize,
            n: usize,
            a: &[$t],
            la: MatrixLayout,
            b: &[$t],
            lb: MatrixLayout,
            c: &mut [$t],
            lc: MatrixLayout,
            accumulate: bool,
        ) -> Result<(), LayoutError> {
            if m == 0 || n == 0 {
                return Ok(());
            }
            check_operand("C", c.len(), &lc, m, n)?;
            if !lc.is_injective(m, n) {
                return Err(LayoutError(format!("C layout {lc:?} makes elements of a {m} × {n} matrix alias")));
            }
            if k == 0 {
                // An empty sum: C keeps its value or becomes zero.
                if !accumulate {
                    for i in 0..m {
                        for j in 0..n {
                            c[lc.offset + i * lc.row_stride + j * lc.col_stride] = 0.0;
                        }
                    }
                }
                return Ok(());
            }
            check_operand("A", a.len(), &la, m, k)?;
            check_operand("B", b.len(), &lb, k, n)?;
            let ((rsa, csa), (rsb, csb), (rsc, csc)) = match (la.strides(), lb.strides(), lc.strides()) {
                (Some(x), Some(y), Some(z)) => (x, y, z),
                _ => return Err(LayoutError("strides overflow isize".into())),
            };
            let beta = if accumulate { 1.0 } else { 0.0 };
            let a_ptr = a[la.offset..].as_ptr();
            let b_ptr = b[lb.offset..].as_ptr();
            let c_ptr = c[lc.offset..].as_mut_ptr();
            // SAFETY: `check_operand` proved that the last element of A, B and C (hence
            // every element, since strides are non-negative) lies inside its slice; the
            // injectivity check proved that distinct elements of C do not alias; `c` is a
            // unique borrow, so C overlaps neither A nor B; strides fit in isize.
            unsafe {
                $kernel(m, k, n, 1.0, a_ptr, rsa, csa, b_ptr, rsb, csb, beta, c_ptr, rsc, csc);
            }
            Ok(())
        }
    };
}

safe_gemm!(sgemm, f32, matrixmultiply::sgemm);
safe_gemm!(dgemm, f64, matrixmultiply::dgemm);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multiplies_row_major_and_transposed_operands() {
        // A = [[1, 2, 3], [4, 5, 6]], B = [[1, 0], [0, 1], [1, 1]] stored transposed.
        let a = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let bt = [1.0f32, 0.0, 1.0, 0.0, 1.0, 1.0];
        let mut c = [0.0f32; 4];
        sgemm(
            2,
            3,
            2,
            &a,
            MatrixLayout::row_major(0, 3),
            &bt,
            MatrixLayout::transposed(0, 3),
            &mut c,
            MatrixLayout::row_major(0, 2),
            false,
        )
        .unwrap();
        assert_eq!(c, [4.0, 5.0, 10.0, 11.0]);
        sgemm(
            2,
            3,
            2,
            &a,
            MatrixLayout::row_major(0, 3),
            &bt,
            MatrixLayout::transposed(0, 3),
            &mut c,
            MatrixLayout::row_major(0, 2),
            true,
        )
        .unwrap();
        assert_eq!(c, [8.0, 10.0, 20.0, 22.0]);
    }

    #[test]
    fn rejects_out_of_bounds_and_aliasing_layouts() {
        let a = [1.0f64; 4];
        let mut c = [0.0f64; 4];
        let err = dgemm(
            2,
            3,
            2,
            &a,
            MatrixLayout::row_major(0, 3),
            &a,
            MatrixLayout::row_major(0, 2),
            &mut c,
            MatrixLayout::row_major(0, 2),
            false,
        );
        assert!(err.is_err());
        let alias = MatrixLayout { offset: 0, row_stride: 1, col_stride: 1 };
        let err =
            dgemm(2, 1, 2, &a, MatrixLayout::row_major(0, 1), &a, MatrixLayout::row_major(0, 2), &mut c, alias, false);
        assert!(err.is_err());
    }

    #[test]
    fn empty_inner_dimension_zeroes_c() {
        let mut c = [7.0f32; 4];
        sgemm(
            2,
            0,
            2,
            &[],
            MatrixLayout::row_major(0, 0),
            &[],
            MatrixLayout::row_major(0, 2),
            &mut c,
            MatrixLayout::row_major(0, 2),
            false,
        )
        .unwrap();
        assert_eq!(c, [0.0; 4]);
    }
}

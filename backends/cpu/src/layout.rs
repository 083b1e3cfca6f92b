//! Row-major indexing helpers shared by the kernels: strides, strided walks, numpy
//! broadcasting, axis lanes and reduction plans.

/// Row-major strides of a shape.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut out = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        out[i] = out[i + 1] * shape[i + 1];
    }
    out
}

pub fn volume(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Calls `f` with the source offset of every element of an `out_shape` walk, in row-major
/// order, where a step along axis `d` moves the source by `steps[d]` (negative, zero and
/// permuted steps express slicing, broadcasting and transposition).
pub fn strided_walk(out_shape: &[usize], steps: &[isize], base: isize, mut f: impl FnMut(usize)) {
    let total = volume(out_shape);
    if total == 0 {
        return;
    }
    let rank = out_shape.len();
    let mut index = vec![0usize; rank];
    let mut offset = base;
    for _ in 0..total {
        f(offset as usize);
        for d in (0..rank).rev() {
            index[d] += 1;
            offset += steps[d];
            if index[d] < out_shape[d] {
                break;
            }
            offset -= steps[d] * out_shape[d] as isize;
            index[d] = 0;
        }
    }
}

/// Gathers the elements of a strided walk into a new vector.
pub fn gather_strided<T: Copy>(data: &[T], out_shape: &[usize], steps: &[isize], base: isize) -> Vec<T> {
    let mut out = Vec::with_capacity(volume(out_shape));
    strided_walk(out_shape, steps, base, |o| out.push(data[o]));
    out
}

/// Calls `f` with every multi-index of `shape` in row-major order, stopping at an error.
pub fn try_for_each_index<E>(shape: &[usize], mut f: impl FnMut(&[usize]) -> Result<(), E>) -> Result<(), E> {
    let total = volume(shape);
    let mut index = vec![0usize; shape.len()];
    for _ in 0..total {
        f(&index)?;
        for d in (0..shape.len()).rev() {
            index[d] += 1;
            if index[d] < shape[d] {
                break;
            }
            index[d] = 0;
        }
    }
    Ok(())
}

/// Permutes the axes of a row-major tensor: output axis `k` is input axis `perm[k]`.
pub fn transpose<T: Copy>(data: &[T], shape: &[usize], perm: &[usize]) -> (Vec<T>, Vec<usize>) {
    let in_strides = strides(shape);
    let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let steps: Vec<isize> = perm.iter().map(|&p| in_strides[p] as isize).collect();
    (gather_strided(data, &out_shape, &steps, 0), out_shape)
}

/// Maps flat output indices to flat input indices under numpy broadcasting of an input
/// shape to an output shape.
#[derive(Debug)]
pub enum Broadcast {
    /// Same shape: the identity.
    Same,
    /// A single element read everywhere.
    Scalar,
    /// Precomputed source offset of every output element.
    Table(Vec<usize>),
}

impl Broadcast {
    pub fn new(in_shape: &[usize], out_shape: &[usize]) -> Result<Broadcast, String> {
        if in_shape == out_shape {
            return Ok(Broadcast::Same);
        }
        let steps = broadcast_steps(in_shape, out_shape)?;
        if volume(in_shape) == 1 {
            return Ok(Broadcast::Scalar);
        }
        let mut table = Vec::with_capacity(volume(out_shape));
        strided_walk(out_shape, &steps, 0, |o| table.push(o));
        Ok(Broadcast::Table(table))
    }

    #[inline]
    pub fn at(&self, i: usize) -> usize {
        match self {
            Broadcast::Same => i,
            Broadcast::Scalar => 0,
            Broadcast::Table(t) => t[i],
        }
    }
}

/// Source steps that broadcast `in_shape` (right-aligned) over `out_shape`
/// ([`kiln::ir::broadcast::strides`]).
pub fn broadcast_steps(in_shape: &[usize], out_shape: &[usize]) -> Result<Vec<isize>, String> {
    Ok(kiln::ir::broadcast::strides(in_shape, out_shape)?.into_iter().map(|s| s as isize).collect())
}

/// A tensor seen as `outer × len × inner` around one axis.
#[derive(Clone, Copy, Debug)]
pub struct Lanes {
    pub outer: usize,
    pub len: usize,
    pub inner: usize,
}

impl Lanes {
    pub fn around(shape: &[usize], axis: usize) -> Lanes {
        Lanes { outer: volume(&shape[..axis]), len: shape[axis], inner: volume(&shape[axis + 1..]) }
    }

    /// Offset of element `i` of the lane `(o, j)`.
    #[inline]
    pub fn at(&self, o: usize, i: usize, j: usize) -> usize {
        (o * self.len + i) * self.inner + j
    }
}

/// Offsets for reducing a tensor over some axes: `bases` holds, in output order, the
/// offset of each output's first member, and `members` the offsets (relative to a base)
/// of the elements reduced into one output.
#[derive(Debug)]
pub struct Reduction {
    pub bases: Vec<usize>,
    pub members: Vec<usize>,
}

impl Reduction {
    /// `reduced[d]` says whether axis `d` is reduced.
    pub fn new(shape: &[usize], reduced: &[bool]) -> Reduction {
        let st = strides(shape);
        let (mut kept_shape, mut kept_steps, mut red_shape, mut red_steps) = (vec![], vec![], vec![], vec![]);
        for (d, &n) in shape.iter().enumerate() {
            if reduced[d] {
                red_shape.push(n);
                red_steps.push(st[d] as isize);
            } else {
                kept_shape.push(n);
                kept_steps.push(st[d] as isize);
            }
        }
        let mut bases = Vec::with_capacity(volume(&kept_shape));
        strided_walk(&kept_shape, &kept_steps, 0, |o| bases.push(o));
        let mut members = Vec::with_capacity(volume(&red_shape));
        strided_walk(&red_shape, &red_steps, 0, |o| members.push(o));
        Reduction { bases, members }
    }
}

/// Normalizes a possibly negative index against a length; `None` when out of range.
pub fn wrap_index(index: i64, len: usize) -> Option<usize> {
    let n = len as i64;
    let i = if index < 0 { index + n } else { index };
    (0..n).contains(&i).then_some(i as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_table_repeats_rows_and_columns() {
        let b = Broadcast::new(&[3, 1], &[2, 3, 2]).unwrap();
        let got: Vec<usize> = (0..12).map(|i| b.at(i)).collect();
        assert_eq!(got, [0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2]);
        assert!(Broadcast::new(&[2], &[3]).is_err());
        assert!(Broadcast::new(&[2, 3], &[3]).is_err());
    }

    #[test]
    fn transpose_swaps_axes() {
        let (t, s) = transpose(&[1, 2, 3, 4, 5, 6], &[2, 3], &[1, 0]);
        assert_eq!(s, [3, 2]);
        assert_eq!(t, [1, 4, 2, 5, 3, 6]);
    }

    #[test]
    fn reduction_lists_members_and_bases() {
        let r = Reduction::new(&[2, 3, 2], &[false, true, false]);
        assert_eq!(r.bases, [0, 1, 6, 7]);
        assert_eq!(r.members, [0, 2, 4]);
    }
}

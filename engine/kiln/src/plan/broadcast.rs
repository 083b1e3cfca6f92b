//! Numpy broadcasting as the kernels read it: the strides that walk an input at the
//! coordinates of the output it broadcasts to.

/// Row-major element strides of `from` (right-aligned) read at the coordinates of `to`: 0
/// along the leading dims `from` lacks and along every size-1 dim (whose index is always 0).
pub fn strides(from: &[usize], to: &[usize]) -> Result<Vec<usize>, String> {
    let fail = || format!("shape {from:?} does not broadcast to {to:?}");
    if from.len() > to.len() {
        return Err(fail());
    }
    let lead = to.len() - from.len();
    let mut own = vec![0; from.len()];
    let mut step = 1;
    for d in (0..from.len()).rev() {
        own[d] = step;
        step *= from[d];
    }
    (0..to.len())
        .map(|d| match d.checked_sub(lead).map(|i| (from[i], own[i])) {
            None => Ok(0),
            Some((1, _)) => Ok(0),
            Some((n, stride)) if n == to[d] => Ok(stride),
            Some(_) => Err(fail()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_axes_read_with_stride_zero() {
        assert_eq!(strides(&[3, 1], &[2, 3, 4]).unwrap(), vec![0, 1, 0]);
        assert_eq!(strides(&[2, 3], &[2, 3]).unwrap(), vec![3, 1]);
        assert_eq!(strides(&[], &[5]).unwrap(), vec![0]);
        assert!(strides(&[2], &[3]).is_err());
        assert!(strides(&[1, 2], &[2]).is_err());
    }
}

//! Numpy broadcasting as kernels and host evaluation read it: the strides that walk an input
//! at the coordinates of the output it broadcasts to, and the input position each output
//! element reads.

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

/// For each element of a `to`-shaped tensor in row-major order, the position in a
/// `from`-shaped one that broadcasting reads.
pub fn positions(from: &[usize], to: &[usize]) -> Result<Vec<usize>, String> {
    let steps = strides(from, to)?;
    let count: usize = to.iter().product();
    let position = |i: usize| {
        let (mut rest, mut at) = (i, 0);
        for (&d, &step) in to.iter().zip(&steps).rev() {
            at += rest % d * step;
            rest /= d;
        }
        at
    };
    Ok((0..count).map(position).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_repeat_the_broadcast_axes() {
        assert_eq!(positions(&[3, 1], &[2, 3, 2]).unwrap(), vec![0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2]);
        assert_eq!(positions(&[], &[2]).unwrap(), vec![0, 0]);
        assert!(positions(&[2], &[3]).is_err());
    }

    #[test]
    fn broadcast_axes_read_with_stride_zero() {
        assert_eq!(strides(&[3, 1], &[2, 3, 4]).unwrap(), vec![0, 1, 0]);
        assert_eq!(strides(&[2, 3], &[2, 3]).unwrap(), vec![3, 1]);
        assert_eq!(strides(&[], &[5]).unwrap(), vec![0]);
        assert!(strides(&[2], &[3]).is_err());
        assert!(strides(&[1, 2], &[2]).is_err());
    }
}

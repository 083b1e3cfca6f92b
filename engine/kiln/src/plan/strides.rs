//! Strided views: which elements of a buffer a tensor reads when its shape and element
//! strides say so, and how a permutation or a reshape changes them without moving bytes.
//! The cuda backend runs Shuffle and Slice as such views; the attention pass uses the same
//! rules to see that a chain of reshapes and transposes only swaps a key's last two dims.

use crate::ir::layer::ShuffleParams;

/// Row-major element strides.
pub fn contiguous(shape: &[usize]) -> Vec<i64> {
    let mut st = vec![1i64; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        st[d] = st[d + 1] * shape[d + 1] as i64;
    }
    st
}

/// The shape and strides after permuting the axes by `perm` (`out dim i` = `in dim perm[i]`).
pub fn permuted(shape: &[usize], strides: &[i64], perm: &[usize]) -> Result<(Vec<usize>, Vec<i64>), String> {
    let r = shape.len();
    let mut seen = vec![false; r];
    if perm.len() != r || strides.len() != r || perm.iter().any(|&p| p >= r || std::mem::replace(&mut seen[p], true)) {
        return Err(format!("{perm:?} is not a permutation of rank {r}"));
    }
    Ok((perm.iter().map(|&p| shape[p]).collect(), perm.iter().map(|&p| strides[p]).collect()))
}

/// The strides of `new_shape` reading the same elements as `(shape, strides)` in row-major
/// order, where a view can (PyTorch's `view` rule: only dims that are contiguous with each
/// other merge or split).
pub fn reshaped(shape: &[usize], strides: &[i64], new_shape: &[usize]) -> Option<Vec<i64>> {
    if shape.iter().product::<usize>() != new_shape.iter().product::<usize>() {
        return None;
    }
    if shape.contains(&0) || shape.is_empty() {
        return Some(contiguous(new_shape));
    }
    let mut out = vec![0i64; new_shape.len()];
    let mut view_d = new_shape.len() as isize - 1;
    let mut chunk_base = *strides.last()?;
    let (mut tensor_numel, mut view_numel) = (1i64, 1i64);
    for d in (0..shape.len()).rev() {
        tensor_numel *= shape[d] as i64;
        let chunk_ends = d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base);
        if chunk_ends {
            while view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d as usize] == 1) {
                out[view_d as usize] = view_numel * chunk_base;
                view_numel *= new_shape[view_d as usize] as i64;
                view_d -= 1;
            }
            if view_numel != tensor_numel {
                return None;
            }
            if d > 0 {
                chunk_base = strides[d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    (view_d == -1).then_some(out)
}

/// A Shuffle (first transpose, reshape, second transpose) applied to the view `(shape,
/// strides)` with `out_shape` the layer's output shape: the output view, or `None` where a
/// reshape needs a copy.
pub fn shuffled(p: &ShuffleParams, shape: &[usize], strides: &[i64], out_shape: &[usize]) -> Option<(Vec<usize>, Vec<i64>)> {
    let (shape, strides) = if p.first_transpose.is_empty() { (shape.to_vec(), strides.to_vec()) } else { permuted(shape, strides, &p.first_transpose).ok()? };
    if p.second_transpose.is_empty() {
        return Some((out_shape.to_vec(), reshaped(&shape, &strides, out_shape)?));
    }
    // The shape between reshape and second transpose: out[i] = mid[perm[i]].
    let perm = &p.second_transpose;
    if perm.len() != out_shape.len() || perm.iter().any(|&q| q >= out_shape.len()) {
        return None;
    }
    let mut mid = vec![0usize; out_shape.len()];
    for (i, &q) in perm.iter().enumerate() {
        mid[q] = out_shape[i];
    }
    let mid_strides = reshaped(&shape, &strides, &mid)?;
    permuted(&mid, &mid_strides, perm).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutations_compose_and_cancel() {
        // BERT's head split: [b, s, h, d] → [b, h, s, d], heads `d` apart, rows `h·d` apart.
        let (shape, st) = permuted(&[2, 128, 12, 64], &contiguous(&[2, 128, 12, 64]), &[0, 2, 1, 3]).unwrap();
        assert_eq!((shape.clone(), st.clone()), (vec![2, 12, 128, 64], vec![128 * 768, 64, 768, 1]));
        // The head merge transposes it back to packed strides.
        let (back, back_st) = permuted(&shape, &st, &[0, 2, 1, 3]).unwrap();
        assert_eq!(back_st, contiguous(&back));
        assert!(permuted(&[2, 3], &[3, 1], &[0, 0]).is_err());
        assert!(permuted(&[2, 3], &[3, 1], &[1]).is_err());
    }

    #[test]
    fn sliced_columns_split_into_heads_as_a_view() {
        // Q = columns 0..768 of a [2, 128, 2304] projection, split into 12 heads of 64.
        let q = [2304 * 128, 2304, 1];
        assert_eq!(reshaped(&[2, 128, 768], &q, &[2, 128, 12, 64]), Some(vec![2304 * 128, 2304, 64, 1]));
        // Merging the sequence into the batch is fine; merging columns across rows is not.
        assert_eq!(reshaped(&[2, 128, 768], &q, &[256, 768]), Some(vec![2304, 1]));
        assert_eq!(reshaped(&[2, 128, 768], &q, &[2, 128 * 768]), None);
        // A transposed view cannot flatten its swapped axes.
        assert_eq!(reshaped(&[3, 4], &[1, 3], &[12]), None);
        assert_eq!(reshaped(&[3, 4], &[4, 1], &[2, 6]), Some(vec![6, 1]));
        assert_eq!(reshaped(&[3, 4], &[4, 1], &[5, 2]), None);
    }

    #[test]
    fn a_reshape_transpose_reshape_chain_is_one_transpose() {
        // SDPA's key as the dynamo exporter writes it: [b, h, s, d] → [b·h, s, d] → [b·h, d, s]
        // → [b, h, d, s]: the last two dims swapped.
        let (b, h, s, d) = (2, 3, 5, 4);
        let (mut shape, mut st) = (vec![b, h, s, d], contiguous(&[b, h, s, d]));
        let merge = ShuffleParams { reshape: Some(vec![(b * h) as i64, s as i64, d as i64]), ..Default::default() };
        let swap = ShuffleParams { first_transpose: vec![0, 2, 1], ..Default::default() };
        let split = ShuffleParams { reshape: Some(vec![b as i64, h as i64, d as i64, s as i64]), ..Default::default() };
        for (p, out) in [(&merge, vec![b * h, s, d]), (&swap, vec![b * h, d, s]), (&split, vec![b, h, d, s])] {
            (shape, st) = shuffled(p, &shape, &st, &out).unwrap();
        }
        assert_eq!((shape, st), permuted(&[b, h, s, d], &contiguous(&[b, h, s, d]), &[0, 1, 3, 2]).unwrap());
    }
}

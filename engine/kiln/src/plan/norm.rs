//! Normalization planning: the view a Normalization layer takes statistics over. Grouped
//! normalization splits the channel axis 1 into (group, channel in group), a pure reshape,
//! and adds the channels in a group to the reduced axes.

/// The view of a normalized tensor and the axes of it that the statistics reduce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NormView {
    /// The input shape, axis 1 split into `(groups, channels per group)` when grouped.
    pub view: Vec<usize>,
    /// Per axis of `view`: whether the statistics reduce over it.
    pub reduced: Vec<bool>,
    /// Channels per group when axis 1 is split.
    per_group: Option<usize>,
}

impl NormView {
    /// Statistics of `shape` over `axes`; with `num_groups > 1` per (sample, group), axis 1
    /// standing for the channels of a group.
    pub fn new(shape: &[usize], axes: &[usize], num_groups: usize) -> Result<NormView, String> {
        let rank = shape.len();
        if let Some(&a) = axes.iter().find(|&&a| a >= rank) {
            return Err(format!("axis {a} is out of range for rank {rank}"));
        }
        if num_groups <= 1 {
            let mut reduced = vec![false; rank];
            for &a in axes {
                reduced[a] = true;
            }
            return Ok(NormView { view: shape.to_vec(), reduced, per_group: None });
        }
        if rank < 2 || shape[1] % num_groups != 0 {
            return Err(format!("shape {shape:?} has no channel axis that splits into {num_groups} groups"));
        }
        let per = shape[1] / num_groups;
        let mut view = vec![shape[0], num_groups, per];
        view.extend_from_slice(&shape[2..]);
        // The channels within a group are always reduced; axis 1 names them too.
        let mut reduced = vec![false; rank + 1];
        reduced[2] = true;
        for &a in axes {
            reduced[match a {
                0 => 0,
                1 => 2,
                _ => a + 1,
            }] = true;
        }
        Ok(NormView { view, reduced, per_group: Some(per) })
    }

    /// Element strides over the input shape (a tensor's own or broadcast ones) as strides
    /// over the view: the split channel axis steps `per group` channels per group.
    pub fn strides(&self, strides: &[usize]) -> Vec<usize> {
        match self.per_group {
            None => strides.to_vec(),
            Some(per) => {
                let mut v = vec![strides[0], strides[1] * per, strides[1]];
                v.extend_from_slice(&strides[2..]);
                v
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_split_the_channel_axis_and_reduce_its_channels() {
        let g = NormView::new(&[2, 6, 5], &[2], 3).unwrap();
        assert_eq!(g.view, [2, 3, 2, 5]);
        assert_eq!(g.reduced, [false, false, true, true]);
        assert_eq!(g.strides(&[30, 5, 1]), [30, 10, 5, 1]);
        assert_eq!(NormView::new(&[2, 6, 5], &[0, 1], 2).unwrap().reduced, [true, false, true, false]);
        assert!(NormView::new(&[2, 6, 5], &[2], 4).is_err());
    }

    #[test]
    fn without_groups_the_view_is_the_shape() {
        let n = NormView::new(&[2, 3, 4], &[1, 2], 1).unwrap();
        assert_eq!((n.view.as_slice(), n.reduced.as_slice()), ([2, 3, 4].as_slice(), [false, true, true].as_slice()));
        assert_eq!(n.strides(&[12, 4, 1]), [12, 4, 1]);
        assert!(NormView::new(&[2, 3], &[2], 1).unwrap_err().contains("out of range"));
    }
}

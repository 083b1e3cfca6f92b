//! Quantization parameter indexing (Quantize / Dequantize): which scale and zero point
//! apply to each element of x.

/// Element `i` of x takes parameter `(i / inner) % len`: one parameter for the whole
/// tensor, one per index along the quantization axis, or one per element (a scale of x's
/// shape: blocked quantization the importer expanded).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamIndex {
    pub inner: usize,
    pub len: usize,
}

impl ParamIndex {
    pub fn new(x_shape: &[usize], scale_shape: &[usize], axis: Option<usize>) -> Result<ParamIndex, String> {
        let params: usize = scale_shape.iter().product();
        let count: usize = x_shape.iter().product();
        if params == 1 {
            return Ok(ParamIndex { inner: 1, len: 1 });
        }
        if scale_shape.len() > 1 || (axis.is_none() && scale_shape == x_shape) {
            return if scale_shape == x_shape {
                Ok(ParamIndex { inner: 1, len: count.max(1) })
            } else {
                Err(format!("scale must be 0-D, 1-D or of x's shape {x_shape:?}, got shape {scale_shape:?}"))
            };
        }
        match axis {
            Some(a) if a < x_shape.len() && x_shape[a] == params => {
                Ok(ParamIndex { inner: x_shape[a + 1..].iter().product::<usize>().max(1), len: params.max(1) })
            }
            _ => Err(format!(
                "{params} scales need an axis of that length (axis {axis:?} of shape {x_shape:?}); \
                 per-tensor scales hold one element"
            )),
        }
    }

    /// The output channel of each element of an integer layer's row-major output of `shape`
    /// (its per-channel scales, bias and level tables).
    pub fn output_channels(p: &crate::ir::quantized::QuantizedParams, shape: &[usize]) -> ParamIndex {
        let axis = p.anchor.output_channel_axis(shape.len());
        ParamIndex {
            inner: shape.get(axis + 1..).map_or(1, |d| d.iter().product::<usize>()).max(1),
            len: shape.get(axis).copied().unwrap_or(1).max(1),
        }
    }

    /// The parameter of element `i`.
    #[inline]
    pub fn at(&self, i: usize) -> usize {
        (i / self.inner) % self.len
    }
}

/// A zero point must hold as many elements as the scale.
pub fn check_zero_point(scale_len: usize, zero_point_len: Option<usize>) -> Result<(), String> {
    match zero_point_len {
        Some(z) if z != scale_len => Err(format!("zero point has {z} elements but scale has {scale_len}")),
        _ => Ok(()),
    }
}

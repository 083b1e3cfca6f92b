//! RoiAlign planning: a layer's attributes as one spec, and the input checks every backend
//! makes before it pools (the pooling itself follows the ONNX reference in each kernel).

use crate::ir::layer::LayerKind;

/// The attributes of a RoiAlign layer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RoiAlignSpec {
    /// A bin pools its samples' largest weighted corner, else their average.
    pub max: bool,
    pub output_size: [usize; 2],
    /// Samples per bin along each axis; 0 adapts them to the region's size.
    pub sampling_ratio: usize,
    pub spatial_scale: f32,
    /// Regions shift by -0.5 pixel; without it each is at least one pixel wide (ONNX's
    /// legacy `output_half_pixel`).
    pub half_pixel: bool,
}

impl RoiAlignSpec {
    /// The spec of a RoiAlign layer `kind`.
    pub fn of(kind: &LayerKind) -> Result<RoiAlignSpec, String> {
        match *kind {
            LayerKind::RoiAlign { max, output_size, sampling_ratio, spatial_scale, half_pixel } => {
                Ok(RoiAlignSpec { max, output_size, sampling_ratio, spatial_scale, half_pixel })
            }
            _ => Err(format!("a {} layer has no RoiAlign attributes", kind.type_name())),
        }
    }
}

/// The `[N, C, H, W]` dims of RoiAlign's input `x_shape`, checked to hold an image, and that
/// `rois_len` coordinates give four per each of the `count` batch indices.
pub fn image(x_shape: &[usize], rois_len: usize, count: usize) -> Result<[usize; 4], String> {
    let [batch, channels, height, width] = x_shape[..] else {
        return Err(format!("RoiAlign input must be (N, C, H, W), got {x_shape:?}"));
    };
    if height == 0 || width == 0 {
        return Err(format!("RoiAlign input {x_shape:?} has an empty image"));
    }
    if rois_len != 4 * count {
        return Err(format!("RoiAlign: {} rois but {count} batch indices", rois_len / 4));
    }
    Ok([batch, channels, height, width])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_roi_align_layer_gives_its_spec() {
        let spec =
            RoiAlignSpec { max: true, output_size: [2, 3], sampling_ratio: 0, spatial_scale: 0.5, half_pixel: false };
        let RoiAlignSpec { max, output_size, sampling_ratio, spatial_scale, half_pixel } = spec;
        let kind = LayerKind::RoiAlign { max, output_size, sampling_ratio, spatial_scale, half_pixel };
        assert_eq!(RoiAlignSpec::of(&kind).unwrap(), spec);
        assert!(RoiAlignSpec::of(&LayerKind::Shape).is_err());
    }

    #[test]
    fn the_input_must_be_an_image_with_four_coordinates_per_region() {
        assert_eq!(image(&[1, 3, 4, 5], 8, 2).unwrap(), [1, 3, 4, 5]);
        assert!(image(&[3, 4, 5], 8, 2).unwrap_err().contains("(N, C, H, W)"));
        assert!(image(&[1, 3, 0, 5], 8, 2).unwrap_err().contains("empty image"));
        assert!(image(&[1, 3, 4, 5], 8, 3).unwrap_err().contains("2 rois but 3"));
    }
}

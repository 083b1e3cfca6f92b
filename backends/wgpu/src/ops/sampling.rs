//! ONNX GridSample: bilinear / nearest / bicubic sampling of 1–3 spatial dims with zeros,
//! border or reflection padding, as the cpu backend computes it (in f32 on the device).

use super::{count_word, output, KResult};
use crate::shaders::Instance;
use crate::value::{DeviceTensor, Recorder};
use kiln::{GridSampleMode, GridSamplePadding, GridSampleParams};

/// The most spatial dims the kernel samples (its tap tables hold 3 axes).
pub const MAX_SPATIAL: usize = 3;

/// Samples `x` `[N, C, D…]` at `grid` `[N, P…, spatial]` into `[N, C, P…]`.
pub fn grid_sample(
    rec: &Recorder,
    p: &GridSampleParams,
    x: &DeviceTensor,
    grid: &DeviceTensor,
    out_shape: &[usize],
) -> KResult<DeviceTensor> {
    let (xs, gs) = (&x.shape, &grid.shape);
    let rank = xs.len();
    if rank < 3 || gs.len() != rank || gs[0] != xs[0] || gs[rank - 1] != rank - 2 {
        return Err(kiln::invalid!("GridSample grid {gs:?} does not fit input {xs:?}"));
    }
    let spatial = rank - 2;
    if spatial > MAX_SPATIAL {
        return Err(kiln::invalid!("GridSample over {spatial} spatial dims: the WGSL kernel samples at most {MAX_SPATIAL}"));
    }
    if !x.dtype.is_float() || !grid.dtype.is_float() {
        return Err(kiln::invalid!("GridSample of {} at a {} grid: the WGSL kernel samples floats only", x.dtype, grid.dtype));
    }
    let out = output(rec, x.dtype, out_shape)?;
    let points: usize = gs[1..rank - 1].iter().product();
    let cells: usize = xs[2..].iter().product();
    let mode = match p.mode {
        GridSampleMode::Nearest => 0,
        GridSampleMode::Linear => 1,
        GridSampleMode::Cubic => 2,
    };
    let padding = match p.padding {
        GridSamplePadding::Zeros => 0,
        GridSamplePadding::Border => 1,
        GridSamplePadding::Reflection => 2,
    };
    let mut params = vec![
        count_word(out.len())?,
        spatial as u32,
        count_word(xs[1].max(1))?,
        count_word(points.max(1))?,
        mode,
        padding,
        u32::from(p.align_corners),
        count_word(cells)?,
    ];
    let mut lens = [0u32; MAX_SPATIAL];
    for (l, &d) in lens.iter_mut().zip(&xs[2..]) {
        *l = count_word(d)?;
    }
    params.extend(lens);
    rec.dispatch_1d(&Instance::plain("grid_sample"), &params, &[&x.buffer, &grid.buffer, &out.buffer], out.len())
        .map_err(kiln::KernelError::from)?;
    super::pointwise::narrow(rec, out)
}

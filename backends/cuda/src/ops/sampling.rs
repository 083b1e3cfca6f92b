//! ONNX GridSample on the device (`kernels/grid_sample.cu`): every mode, padding mode and
//! `align_corners`, any number of spatial axes, computed in double as kiln-cpu computes it.

use kiln::{invalid, DataType, GridSampleMode, GridSamplePadding, GridSampleParams, KernelError};
use crate::ops::KResult;
use super::{pointwise, Ctx};
use crate::buffer::{Arg, DeviceTensor, Layout};
use crate::sources::Source;

/// What the kernel is told about one sampling: (batch·channels·points elements, channels,
/// points per batch, the spatial lengths as a layout).
#[derive(Debug, PartialEq)]
pub struct Plan {
    pub elements: usize,
    pub channels: usize,
    pub points: usize,
    pub spatial: Vec<usize>,
}

/// Checks `x` (N, C, spatial…) against `grid` (N, points…, spatial count) and the inferred
/// output shape (N, C, points…).
pub fn plan(x: &[usize], grid: &[usize], out_shape: &[usize]) -> KResult<Plan> {
    let rank = x.len();
    if rank < 3 || grid.len() != rank || grid[0] != x[0] || grid[rank - 1] != rank - 2 {
        return Err(invalid!("GridSample grid {grid:?} does not fit input {x:?}"));
    }
    if rank - 2 > 8 {
        return Err(invalid!("GridSample over {} spatial axes is over the CUDA kernel's limit of 8", rank - 2));
    }
    let expected: Vec<usize> = x[..2].iter().chain(&grid[1..rank - 1]).copied().collect();
    if out_shape != expected {
        return Err(invalid!("GridSample output {out_shape:?} differs from {expected:?}"));
    }
    let points = grid[1..rank - 1].iter().product();
    Ok(Plan { elements: out_shape.iter().product(), channels: x[1], points, spatial: x[2..].to_vec() })
}

fn mode_code(mode: GridSampleMode) -> i32 {
    match mode {
        GridSampleMode::Nearest => 0,
        GridSampleMode::Linear => 1,
        GridSampleMode::Cubic => 2,
    }
}

fn padding_code(padding: GridSamplePadding) -> i32 {
    match padding {
        GridSamplePadding::Zeros => 0,
        GridSamplePadding::Border => 1,
        GridSamplePadding::Reflection => 2,
    }
}

/// Samples `x` at the grid's points; `out_shape` is (N, C, points…).
pub fn grid_sample(
    cx: &Ctx,
    p: &GridSampleParams,
    x: &DeviceTensor,
    grid: &DeviceTensor,
    out_shape: &[usize],
) -> KResult<DeviceTensor> {
    super::float64_suffix(grid.dtype, "GridSample").map_err(|_| invalid!("a GridSample grid of {} has no CUDA kernel", grid.dtype))?;
    let suffix = super::float64_suffix(x.dtype, "GridSample")?;
    let plan = plan(&x.shape, &grid.shape, out_shape)?;
    let out = cx.gpu.empty(x.dtype, out_shape.to_vec()).map_err(KernelError::from)?;
    if plan.elements == 0 {
        return Ok(out);
    }
    // The kernel reads coordinates in double, as kiln-cpu does (widening is exact).
    let grid = pointwise::cast(cx, grid, DataType::F64)?;
    let mut l = Layout { rank: plan.spatial.len() as i32, ..Layout::default() };
    for (d, &len) in plan.spatial.iter().enumerate() {
        l.shape[d] = len as i64;
    }
    let args = [
        Arg::I64(plan.elements as i64),
        Arg::I64(plan.channels as i64),
        Arg::I64(plan.points as i64),
        Arg::Layout(l),
        Arg::I32(mode_code(p.mode)),
        Arg::I32(padding_code(p.padding)),
        Arg::I32(p.align_corners as i32),
        cx.arg(&grid),
        cx.arg(x),
        cx.arg(&out),
    ];
    cx.launch_elements(Source::GridSample.kernel(format!("grid_sample_{suffix}")), plan.elements, &args)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::plan;

    #[test]
    fn plans_two_and_three_spatial_axes() {
        let p = plan(&[2, 3, 4, 5], &[2, 6, 7, 2], &[2, 3, 6, 7]).unwrap();
        assert_eq!((p.elements, p.channels, p.points, p.spatial), (2 * 3 * 42, 3, 42, vec![4, 5]));
        let p = plan(&[1, 2, 3, 4, 5], &[1, 2, 2, 2, 3], &[1, 2, 2, 2, 2]).unwrap();
        assert_eq!((p.points, p.spatial), (8, vec![3, 4, 5]));
    }

    #[test]
    fn rejects_grids_that_do_not_fit() {
        assert!(plan(&[2, 3, 4, 5], &[2, 6, 7, 3], &[2, 3, 6, 7]).is_err());
        assert!(plan(&[2, 3, 4, 5], &[1, 6, 7, 2], &[2, 3, 6, 7]).is_err());
        assert!(plan(&[2, 3], &[2, 2], &[2, 3]).is_err());
        assert!(plan(&[2, 3, 4, 5], &[2, 6, 7, 2], &[2, 3, 7, 6]).is_err());
    }
}

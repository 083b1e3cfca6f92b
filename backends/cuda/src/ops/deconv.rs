//! Transposed convolution (Deconvolution, ONNX ConvTranspose) on the device
//! (`kernels/deconv.cu`): a direct kernel over 1, 2, 3 or more spatial axes with groups,
//! strides, dilations, pads, output padding and an optional bias.

use kiln::{invalid, DeconvolutionParams, HostTensor, KernelError, TensorData};
use crate::ops::KResult;
use super::Ctx;
use crate::buffer::{Arg, DeviceTensor};
use crate::sources::Source;

/// What the kernel is told: per spatial axis input, output and kernel length, stride, dilation
/// and leading crop (`DeconvAxis` in kernels/deconv.cu, flattened), input channels, output
/// maps and groups.
#[derive(Debug, PartialEq)]
pub struct Plan {
    pub axes: Vec<i64>,
    pub channels: usize,
    pub maps: usize,
    pub groups: usize,
}

/// Checks input `x` [N, C, in…], weights `w` [C, maps / groups, kernel…] and `out_shape`
/// [N, maps, out…] against each other and the parameters (kiln-cpu's rules; an empty list is
/// the default: stride and dilation 1, no padding).
pub fn plan(
    p: &DeconvolutionParams,
    x: &[usize],
    w: &[usize],
    bias: Option<usize>,
    out_shape: &[usize],
) -> KResult<Plan> {
    let rank = x.len();
    if rank < 3 || w.len() != rank || out_shape.len() != rank {
        return Err(invalid!("deconvolution needs N×C×spatial input and kernel of one rank, got {x:?} and {w:?}"));
    }
    let spatial = rank - 2;
    if spatial > 8 {
        return Err(invalid!("deconvolution over {spatial} spatial axes is over the CUDA kernel's limit of 8"));
    }
    let list = |v: &[usize], default: usize, what: &str| -> KResult<Vec<usize>> {
        match v.len() {
            0 => Ok(vec![default; spatial]),
            n if n == spatial => Ok(v.to_vec()),
            n => Err(invalid!("deconvolution {what} has {n} values for {spatial} spatial axes")),
        }
    };
    let strides = list(&p.strides, 1, "strides")?;
    let dilations = list(&p.dilations, 1, "dilations")?;
    let pre = list(&p.pre_padding, 0, "leading padding")?;
    if strides.contains(&0) || dilations.contains(&0) {
        return Err("deconvolution strides and dilations must be positive".into());
    }
    let groups = p.groups;
    let maps = w[1] * groups;
    if groups == 0 || x[1] != w[0] || x[1] % groups != 0 || out_shape[..2] != [x[0], maps] {
        return Err(invalid!("input {x:?}, kernel {w:?} and {groups} groups do not fit together"));
    }
    if let Some(len) = bias {
        if len != maps {
            return Err(invalid!("bias has {len} elements for {maps} output maps"));
        }
    }
    let mut axes = Vec::with_capacity(6 * spatial);
    for d in 0..spatial {
        for v in [x[2 + d], out_shape[2 + d], w[2 + d], strides[d], dilations[d], pre[d]] {
            axes.push(i64::try_from(v).map_err(|_| invalid!("deconvolution parameter {v} is too large"))?);
        }
    }
    Ok(Plan { axes, channels: x[1], maps, groups })
}

/// `x` transposed-convolved by `w` (plus `bias`, one per output map) onto `out_shape`.
pub fn deconvolution(
    cx: &Ctx,
    p: &DeconvolutionParams,
    x: &DeviceTensor,
    w: &DeviceTensor,
    bias: Option<&DeviceTensor>,
    out_shape: &[usize],
) -> KResult<DeviceTensor> {
    let suffix = super::float64_suffix(x.dtype, "Deconvolution")?;
    if let Some(t) = std::iter::once(w).chain(bias).find(|t| t.dtype != x.dtype) {
        return Err(invalid!("deconvolution of {} by {} operands", x.dtype, t.dtype));
    }
    let plan = plan(p, &x.shape, &w.shape, bias.map(|b| b.len()), out_shape)?;
    let out = cx.gpu.empty(x.dtype, out_shape.to_vec()).map_err(KernelError::from)?;
    let n = out.len();
    if n == 0 {
        return Ok(out);
    }
    let spatial = plan.axes.len() / 6;
    let table = HostTensor::new(vec![plan.axes.len()], TensorData::I64(plan.axes)).map_err(KernelError::from)?;
    let table = cx.gpu.upload(&table).map_err(KernelError::from)?;
    let args = [
        Arg::I64(n as i64),
        Arg::I32(spatial as i32),
        cx.arg(&table),
        Arg::I64(plan.channels as i64),
        Arg::I64(plan.maps as i64),
        Arg::I64(plan.groups as i64),
        cx.arg(x),
        cx.arg(w),
        bias.map_or(Arg::NULL, |b| cx.arg(b)),
        cx.arg(&out),
    ];
    cx.launch_elements(Source::Deconvolution.kernel(format!("deconv_{suffix}")), n, &args)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(groups: usize, spatial: usize) -> DeconvolutionParams {
        DeconvolutionParams {
            groups,
            strides: vec![2; spatial],
            dilations: vec![1; spatial],
            pre_padding: vec![1; spatial],
            post_padding: vec![0; spatial],
            output_padding: vec![1; spatial],
        }
    }

    #[test]
    fn plans_grouped_two_d() {
        // 4 input channels in 2 groups, 3 maps per group: 6 output maps.
        let plan = plan(&params(2, 2), &[1, 4, 3, 5], &[4, 3, 2, 3], Some(6), &[1, 6, 5, 10]).unwrap();
        assert_eq!((plan.channels, plan.maps, plan.groups), (4, 6, 2));
        assert_eq!(plan.axes, vec![3, 5, 2, 2, 1, 1, 5, 10, 3, 2, 1, 1]);
    }

    #[test]
    fn empty_lists_default() {
        let p = DeconvolutionParams {
            groups: 1,
            strides: vec![],
            dilations: vec![],
            pre_padding: vec![],
            post_padding: vec![],
            output_padding: vec![],
        };
        let plan = plan(&p, &[2, 1, 4], &[1, 2, 3], None, &[2, 2, 6]).unwrap();
        assert_eq!(plan.axes, vec![4, 6, 3, 1, 1, 0]);
    }

    #[test]
    fn mismatches_are_errors() {
        let p = params(1, 1);
        assert!(plan(&p, &[1, 2, 4], &[3, 1, 3], None, &[1, 1, 8]).is_err());
        assert!(plan(&p, &[1, 2, 4], &[2, 1, 3], Some(2), &[1, 1, 8]).is_err());
        assert!(plan(&p, &[1, 2, 4], &[2, 1, 3], None, &[1, 2, 8]).is_err());
        assert!(plan(&params(0, 1), &[1, 2, 4], &[2, 1, 3], None, &[1, 0, 8]).is_err());
        assert!(plan(&params(1, 2), &[1, 2, 4], &[2, 1, 3], None, &[1, 1, 8]).is_err());
        assert!(plan(&p, &[1, 2, 4], &[2, 1, 3, 3], None, &[1, 1, 8]).is_err());
    }
}

//! kiln's own pooling kernel (`kernels/pool.cu`): max and average pooling over 1, 2, 3 or more
//! spatial axes with strides, dilations, asymmetric padding and ceil mode, on float types
//! (average summed in double, as kiln-cpu does) and max pooling on integer types; and its 2-D
//! kernel for every channels-last float input. cuDNN runs the row-major 2-D float cases it can
//! (`compute::pooling`); everything else comes here.

use kiln::{invalid, DataType, HostTensor, KernelError, PoolingKind, PoolingParams, TensorData};
use crate::ops::KResult;
use super::Ctx;
use crate::buffer::{Arg, DeviceTensor};
use crate::sources::Source;

/// Kernel-name suffixes of `pool_*`.
pub const SUFFIXES: [&str; 12] = ["f32", "f16", "bf16", "f64", "i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64"];

/// The suffix of the pooling kernel for `kind` on `dtype`, or why none runs it.
pub fn suffix(kind: PoolingKind, dtype: DataType) -> KResult<&'static str> {
    use DataType as D;
    let float = |s| Ok(s);
    let int = |s| match kind {
        PoolingKind::Max => Ok(s),
        PoolingKind::Average => Err(invalid!("average pooling on {dtype} has no CUDA kernel")),
    };
    match dtype {
        D::F32 => float("f32"),
        D::F16 => float("f16"),
        D::BF16 => float("bf16"),
        D::F64 => float("f64"),
        D::I8 => int("i8"),
        D::U8 => int("u8"),
        D::I16 => int("i16"),
        D::U16 => int("u16"),
        D::I32 => int("i32"),
        D::U32 => int("u32"),
        D::I64 => int("i64"),
        D::U64 => int("u64"),
        other => Err(invalid!("pooling on {other} has no CUDA kernel")),
    }
}

/// Per spatial axis: input and output length, window, stride, dilation, leading and trailing
/// padding (`PoolAxis` in kernels/pool.cu), flattened.
pub fn axes(p: &PoolingParams, x: &[usize], out_shape: &[usize]) -> KResult<Vec<i64>> {
    if x.len() < 3 || out_shape.len() != x.len() || out_shape[..2] != x[..2] {
        return Err(invalid!("pooling of {x:?} onto {out_shape:?}"));
    }
    let spatial = x.len() - 2;
    if spatial > 8 {
        return Err(invalid!("pooling over {spatial} spatial axes is over the CUDA kernel's limit of 8"));
    }
    // An empty list is the default (stride and dilation 1, no padding).
    let list = |v: &[usize], default: usize, what: &str| -> KResult<Vec<usize>> {
        match v.len() {
            0 => Ok(vec![default; spatial]),
            n if n == spatial => Ok(v.to_vec()),
            n => Err(invalid!("pooling {what} has {n} values for {spatial} spatial axes")),
        }
    };
    if p.window.len() != spatial || p.window.contains(&0) {
        return Err(invalid!("pooling window {:?} for {spatial} spatial axes", p.window));
    }
    let strides = list(&p.strides, 1, "strides")?;
    let dilations = list(&p.dilations, 1, "dilations")?;
    let pre = list(&p.pre_padding, 0, "leading padding")?;
    let post = list(&p.post_padding, 0, "trailing padding")?;
    if strides.contains(&0) || dilations.contains(&0) {
        return Err("pooling strides and dilations must be positive".into());
    }
    // The kernel computes window positions in i64 without overflow checks.
    kiln::plan::pool::check_extent(p, &x[2..], (i64::MAX / 4) as i128).map_err(|e| invalid!("{e}"))?;
    let mut out = Vec::with_capacity(7 * spatial);
    for d in 0..spatial {
        let axis = [x[2 + d], out_shape[2 + d], p.window[d], strides[d], dilations[d], pre[d], post[d]];
        for v in axis {
            out.push(i64::try_from(v).map_err(|_| invalid!("pooling parameter {v} is too large"))?);
        }
    }
    Ok(out)
}

/// Pools a channels-last 2-D float (or, max only, 8-bit) `x` onto `out_shape` with kiln's NHWC kernel; the output
/// is channels-last too. None where the kernel does not apply (another layout, rank or type).
pub fn pooling_channels_last(cx: &Ctx, p: &PoolingParams, x: &DeviceTensor, out_shape: &[usize]) -> KResult<Option<DeviceTensor>> {
    pooling_nhwc(cx, p, x, out_shape, None)
}

/// An 8-bit max pooling of channels-last `x` whose maxima are then mapped through `map` (256
/// bytes: the level each level becomes, of type `to`) in the same pass: a fused layer headed by
/// the pooling ([`kiln::FusedAnchor::Pooling`]). None where the kernel does not apply (16
/// channels a thread: C a multiple of 16, aligned).
pub fn max_pooling_mapped(cx: &Ctx, p: &PoolingParams, x: &DeviceTensor, out_shape: &[usize], (map, to): (&DeviceTensor, DataType)) -> KResult<Option<DeviceTensor>> {
    if p.kind != PoolingKind::Max || map.len() != 256 || !matches!(x.dtype, DataType::I8 | DataType::U8) || !matches!(to, DataType::I8 | DataType::U8) {
        return Ok(None);
    }
    pooling_nhwc(cx, p, x, out_shape, Some((map, to)))
}

fn pooling_nhwc(cx: &Ctx, p: &PoolingParams, x: &DeviceTensor, out_shape: &[usize], map: Option<(&DeviceTensor, DataType)>) -> KResult<Option<DeviceTensor>> {
    // The kernel suffix and how many channels one thread takes where they divide C (16 bytes).
    let (suffix, vector) = match x.dtype {
        DataType::F32 => ("f32", 4),
        DataType::F16 => ("f16", 8),
        DataType::BF16 => ("bf16", 8),
        DataType::I8 if p.kind == PoolingKind::Max => ("i8", 16),
        DataType::U8 if p.kind == PoolingKind::Max => ("u8", 16),
        _ => return Ok(None),
    };
    if !x.channels_last() || x.shape.len() != 4 {
        return Ok(None);
    }
    // [in, out, window, stride, dilation, pre, post] per axis, checked as the general kernel's.
    let axes = axes(p, &x.shape, out_shape)?;
    let c = x.shape[1];
    let vector = if c % vector == 0 && super::lane_aligned(cx, x, vector) { vector } else { 1 };
    if map.is_some() && vector != 16 {
        return Ok(None);
    }
    let mut out = cx.gpu.empty(map.map_or(x.dtype, |(_, to)| to), out_shape.to_vec()).map_err(KernelError::from)?;
    out.strides = Some(DeviceTensor::channels_last_strides(out_shape));
    let threads = out.len() / vector;
    // The kernel indexes threads and dims in int.
    let int = |v: i64| i32::try_from(v).ok();
    let [h, w] = [&axes[..7], &axes[7..]];
    let dims = [c as i64, h[0], w[0], h[1], w[1], h[2], w[2], h[3], w[3], h[4], w[4], h[5], w[5], h[6], w[6]];
    let (Some(n), Some(dims)) = (int(threads as i64), dims.iter().map(|&d| int(d)).collect::<Option<Vec<i32>>>()) else { return Ok(None) };
    if threads == 0 {
        return Ok(Some(out));
    }
    let mut args: Vec<Arg> = std::iter::once(n).chain(dims).map(Arg::I32).collect();
    args.extend([Arg::I32((p.kind == PoolingKind::Average) as i32), Arg::I32(p.average_count_excludes_padding as i32), cx.arg(x), cx.arg(&out)]);
    args.extend(map.map(|(m, _)| cx.arg(m)));
    let name = match (vector, map) {
        (1, _) => format!("pool2d_nhwc_{suffix}"),
        (_, None) => format!("pool2d_nhwc_{suffix}_x{vector}"),
        (_, Some(_)) => format!("pool2d_nhwc_{suffix}_x{vector}_mapped"),
    };
    cx.launch_elements(Source::Pool.kernel(name), threads, &args)?;
    Ok(Some(out))
}

/// Pools row-major `x` onto `out_shape` with kiln's kernel.
pub fn pooling(cx: &Ctx, p: &PoolingParams, x: &DeviceTensor, out_shape: &[usize]) -> KResult<DeviceTensor> {
    let suffix = suffix(p.kind, x.dtype)?;
    let axes = axes(p, &x.shape, out_shape)?;
    let out = cx.gpu.empty(x.dtype, out_shape.to_vec()).map_err(KernelError::from)?;
    let n = out.len();
    if n == 0 {
        return Ok(out);
    }
    let spatial = axes.len() / 7;
    let table = HostTensor::new(vec![axes.len()], TensorData::I64(axes)).map_err(KernelError::from)?;
    let table = cx.gpu.upload(&table).map_err(KernelError::from)?;
    let args = [
        Arg::I64(n as i64),
        Arg::I32(spatial as i32),
        cx.arg(&table),
        Arg::I32((p.kind == PoolingKind::Average) as i32),
        Arg::I32(p.average_count_excludes_padding as i32),
        cx.arg(x),
        cx.arg(&out),
    ];
    cx.launch_elements(Source::Pool.kernel(format!("pool_{suffix}")), n, &args)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(kind: PoolingKind, window: Vec<usize>) -> PoolingParams {
        PoolingParams {
            kind,
            strides: vec![],
            dilations: vec![],
            pre_padding: vec![],
            post_padding: vec![],
            window,
            ceil_mode: false,
            average_count_excludes_padding: true,
        }
    }

    #[test]
    fn three_d_axes_carry_every_parameter() {
        let p = PoolingParams {
            strides: vec![1, 2, 3],
            dilations: vec![2, 1, 1],
            pre_padding: vec![0, 1, 0],
            post_padding: vec![1, 0, 2],
            ..params(PoolingKind::Average, vec![2, 3, 2])
        };
        let axes = axes(&p, &[1, 2, 5, 6, 7], &[1, 2, 4, 3, 3]).unwrap();
        assert_eq!(axes, vec![5, 4, 2, 1, 2, 0, 1, 6, 3, 3, 2, 1, 1, 0, 7, 3, 2, 3, 1, 0, 2]);
    }

    #[test]
    fn empty_lists_default_and_bad_ones_are_errors() {
        let axes1 = axes(&params(PoolingKind::Max, vec![3]), &[2, 3, 8], &[2, 3, 6]).unwrap();
        assert_eq!(axes1, vec![8, 6, 3, 1, 1, 0, 0]);
        assert!(axes(&params(PoolingKind::Max, vec![3, 3]), &[2, 3, 8], &[2, 3, 6]).is_err());
        assert!(axes(&params(PoolingKind::Max, vec![0]), &[2, 3, 8], &[2, 3, 6]).is_err());
        assert!(axes(&params(PoolingKind::Max, vec![3]), &[2, 3, 8], &[2, 4, 6]).is_err());
        let p = PoolingParams { strides: vec![1, 1], ..params(PoolingKind::Max, vec![3]) };
        assert!(axes(&p, &[2, 3, 8], &[2, 3, 6]).is_err());
    }

    #[test]
    fn integers_pool_max_only() {
        assert_eq!(suffix(PoolingKind::Max, DataType::U8), Ok("u8"));
        assert!(suffix(PoolingKind::Average, DataType::U8).is_err());
        assert_eq!(suffix(PoolingKind::Average, DataType::BF16), Ok("bf16"));
        assert!(suffix(PoolingKind::Max, DataType::Bool).is_err());
    }
}

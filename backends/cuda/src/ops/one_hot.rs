//! OneHot on the device (`kernels/one_hot.cu`), as kiln-cpu's `one_hot::one_hot`.

use kiln::{invalid, DataType, HostTensor, KernelError};
use crate::ops::KResult;
use super::Ctx;
use crate::buffer::{Arg, DeviceTensor};
use crate::sources::Source;

/// Element widths of `one_hot_*` (the values are copied as raw bytes).
pub const WIDTHS: [&str; 4] = ["u8", "u16", "u32", "u64"];

fn width(dtype: DataType) -> KResult<&'static str> {
    match crate::buffer::storage_size(dtype).map_err(KernelError::from)? {
        1 => Ok("u8"),
        2 => Ok("u16"),
        4 => Ok("u32"),
        8 => Ok("u64"),
        other => Err(invalid!("OneHot on {other}-byte elements has no CUDA kernel")),
    }
}

/// Why OneHot with these indices and values has no kernel, if it has none.
pub fn unsupported(indices: Option<DataType>, values: Option<DataType>) -> Option<String> {
    if let Some(t) = indices.filter(|t| !t.is_integer() || !super::typed::stores(*t)) {
        return Some(format!("OneHot indices must be integers, not {t}"));
    }
    values.and_then(|t| width(t).err().map(|e| e.to_string()))
}

/// `(outer, depth_len, inner)` of the output [indices' leading dims, depth, trailing dims]
/// with the depth axis at `axis` (negative counts from the end of the output).
pub fn one_hot_plan(indices: &[usize], axis: i64, out_shape: &[usize]) -> KResult<(usize, usize, usize)> {
    let rank = out_shape.len();
    let axis = kiln::ir::shape::normalize_axis(axis, rank)
        .ok_or_else(|| invalid!("OneHot axis {axis} is out of range for an output of rank {rank}"))?;
    if out_shape[..axis].iter().chain(&out_shape[axis + 1..]).ne(indices.iter()) {
        return Err(invalid!("OneHot output shape {out_shape:?} does not fit indices {indices:?}"));
    }
    Ok((out_shape[..axis].iter().product(), out_shape[axis], out_shape[axis + 1..].iter().product()))
}

/// OneHot: `values[1]` where an index (negative ones wrapped by `depth`) equals the position
/// along `axis`, `values[0]` elsewhere.
pub fn one_hot(
    cx: &Ctx,
    indices: &DeviceTensor,
    values: &DeviceTensor,
    depth: &HostTensor,
    axis: i64,
    out_shape: &[usize],
) -> KResult<DeviceTensor> {
    if let Some(why) = unsupported(Some(indices.dtype), Some(values.dtype)) {
        return Err(KernelError::Unsupported(why));
    }
    if values.len() != 2 {
        return Err(invalid!("OneHot values must hold [off, on], got {} elements", values.len()));
    }
    let depth = match depth.to_i64_vec().as_deref() {
        Some([d]) => *d,
        _ => return Err("OneHot depth must be one integer".into()),
    };
    let (_, depth_len, inner) = one_hot_plan(&indices.shape, axis, out_shape)?;
    let indices = if indices.dtype == DataType::I64 {
        indices.clone()
    } else {
        super::typed::cast(cx, indices, DataType::I64, true, kiln::E8M0Rounding::Up)?
    };
    let out = cx.gpu.empty(values.dtype, out_shape.to_vec()).map_err(KernelError::from)?;
    let n = out.len();
    if n == 0 {
        return Ok(out);
    }
    let args = [
        Arg::I64(n as i64),
        Arg::I64(depth_len as i64),
        Arg::I64(inner as i64),
        Arg::I64(depth),
        cx.arg(&indices),
        cx.arg(values),
        cx.arg(&out),
    ];
    cx.launch_elements(Source::OneHot.kernel(format!("one_hot_{}", width(values.dtype)?)), n, &args)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_hot_plans() {
        assert_eq!(one_hot_plan(&[2, 3], -1, &[2, 3, 10]).unwrap(), (6, 10, 1));
        assert_eq!(one_hot_plan(&[2, 3], 1, &[2, 10, 3]).unwrap(), (2, 10, 3));
        assert_eq!(one_hot_plan(&[2, 3], 0, &[10, 2, 3]).unwrap(), (1, 10, 6));
        assert!(one_hot_plan(&[2, 3], 1, &[2, 3, 10]).is_err());
        assert!(one_hot_plan(&[2, 3], 3, &[2, 3, 10]).is_err());
        assert!(unsupported(Some(DataType::F32), Some(DataType::F32)).is_some());
        assert!(unsupported(Some(DataType::I32), Some(DataType::BF16)).is_none());
    }
}

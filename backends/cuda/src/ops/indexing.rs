//! Select (Where), ParametricReLU, Fill, GatherElements, GatherND, ScatterElements and ScatterND on the device
//! (`kernels/select.cu`, `kernels/indexing.cu`).

use kiln::{invalid, DataType, HostTensor, KernelError, ScatterMode, ScatterReduction, TensorData};
use crate::ops::KResult;
use super::{broadcast_layout, contiguous_strides, movement, pointwise, Ctx};
use crate::buffer::{width_suffix, Arg, DeviceTensor, Layout};
use crate::sources::Source;

/// Kernel-name suffixes of the kernels instantiated per element type (scatter, TopK, running sums).
pub const TYPED_SUFFIXES: [&str; 13] =
    ["f32", "f16", "bf16", "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "bool"];

/// The suffix of `dtype` among [`TYPED_SUFFIXES`].
pub fn typed_suffix(dtype: DataType) -> KResult<&'static str> {
    use DataType as D;
    Ok(match dtype {
        D::F32 => "f32",
        D::F16 => "f16",
        D::BF16 => "bf16",
        D::F64 => "f64",
        D::I8 => "i8",
        D::I16 => "i16",
        D::I32 => "i32",
        D::I64 => "i64",
        D::U8 => "u8",
        D::U16 => "u16",
        D::U32 => "u32",
        D::U64 => "u64",
        D::Bool => "bool",
        #[allow(unreachable_patterns)]
        other => return Err(invalid!("unsupported dtype {other} for the CUDA indexing kernels")),
    })
}

fn width(dtype: DataType) -> KResult<&'static str> {
    width_suffix(dtype).map_err(KernelError::from)
}

/// A zeroed i32 flag that kernels set on an out-of-range index.
fn error_flag(cx: &Ctx) -> KResult<DeviceTensor> {
    let zero = HostTensor::new(vec![1], TensorData::I32(vec![0])).map_err(KernelError::from)?;
    cx.gpu.upload(&zero).map_err(KernelError::from)
}

fn rank_checked(shape: &[usize]) -> KResult<()> {
    if shape.len() > 8 {
        return Err(invalid!("rank {} is over the CUDA kernels' limit of 8", shape.len()));
    }
    Ok(())
}

/// Element-wise indices: the data's rank, `axis` inside it, and no longer than the data on
/// the other axes (the kernels read the data at the indices' own coordinates there).
fn fits_off_axis(indices: &[usize], data: &[usize], axis: usize) -> bool {
    indices.len() == data.len()
        && axis < data.len()
        && indices.iter().zip(data).enumerate().all(|(d, (i, n))| d == axis || i <= n)
}

/// `out = cond ? a : b`, all three broadcast onto `out_shape`.
pub fn select(
    cx: &Ctx,
    cond: &DeviceTensor,
    a: &DeviceTensor,
    b: &DeviceTensor,
    out_shape: &[usize],
) -> KResult<DeviceTensor> {
    if cond.dtype != DataType::Bool {
        return Err(invalid!("Select's condition is {}, not bool", cond.dtype));
    }
    if a.dtype != b.dtype {
        return Err(invalid!("Select's branches differ in type: {} and {}", a.dtype, b.dtype));
    }
    let layout = broadcast_layout(out_shape, &[&cond.shape, &a.shape, &b.shape])?;
    let out = cx.gpu.empty(a.dtype, out_shape.to_vec()).map_err(KernelError::from)?;
    let n = out.len();
    let name = format!("select_{}", width(a.dtype)?);
    cx.launch_elements(
        Source::Select.kernel(name),
        n,
        &[Arg::I64(n as i64), Arg::Layout(layout), cx.arg(cond), cx.arg(a), cx.arg(b), cx.arg(&out)],
    )?;
    Ok(out)
}

/// ParametricReLU: `x < 0 ? x * slope : x`, `slope` broadcast onto `x`.
pub fn prelu(cx: &Ctx, x: &DeviceTensor, slope: &DeviceTensor, out_shape: &[usize]) -> KResult<DeviceTensor> {
    if slope.dtype != x.dtype {
        return Err(invalid!("ParametricReLU's slope is {}, the input {}", slope.dtype, x.dtype));
    }
    let suffix = crate::buffer::float_suffix(x.dtype).map_err(KernelError::from)?;
    let layout = broadcast_layout(out_shape, &[&x.shape, &slope.shape])?;
    let out = cx.gpu.empty(x.dtype, out_shape.to_vec()).map_err(KernelError::from)?;
    let n = out.len();
    let args = [Arg::I64(n as i64), Arg::Layout(layout), cx.arg(x), cx.arg(slope), cx.arg(&out)];
    cx.launch_elements(Source::Select.kernel(format!("prelu_{suffix}")), n, &args)?;
    Ok(out)
}

/// A tensor of `out_shape` holding `value` (0-D, of the output type) everywhere.
pub fn fill(cx: &Ctx, value: &HostTensor, out_shape: &[usize]) -> KResult<DeviceTensor> {
    if value.len() != 1 {
        return Err(invalid!("Fill's value has {} elements, not 1", value.len()));
    }
    let one = cx.gpu.upload(value).map_err(KernelError::from)?.reshaped(Vec::new());
    movement::expand(cx, &one, out_shape)
}

/// ONNX GatherElements along `axis`: the output has the indices' shape.
pub fn gather_elements(
    cx: &Ctx,
    data: &DeviceTensor,
    indices: &DeviceTensor,
    axis: usize,
) -> KResult<DeviceTensor> {
    rank_checked(&data.shape)?;
    if !fits_off_axis(&indices.shape, &data.shape, axis) {
        return Err(invalid!(
            "GatherElements: indices {:?} against data {:?} on axis {axis}",
            indices.shape, data.shape
        ));
    }
    let idx = pointwise::cast(cx, indices, DataType::I64)?;
    let mut l = Layout { rank: data.shape.len() as i32, ..Layout::default() };
    for (d, (&n, s)) in indices.shape.iter().zip(contiguous_strides(&data.shape)).enumerate() {
        l.shape[d] = n as i64;
        l.stride[0][d] = s;
    }
    let out = cx.gpu.empty(data.dtype, indices.shape.clone()).map_err(KernelError::from)?;
    let flag = error_flag(cx)?;
    let n = out.len();
    let name = format!("gather_elements_{}", width(data.dtype)?);
    let args = [
        Arg::I64(n as i64),
        Arg::Layout(l),
        Arg::I32(axis as i32),
        Arg::I64(data.shape[axis] as i64),
        cx.arg(data),
        cx.arg(&idx),
        cx.arg(&out),
        cx.arg(&flag),
    ];
    cx.launch_elements(Source::Indexing.kernel(name), n, &args)?;
    cx.defer_check(
        flag,
        format!("a GatherElements index is out of range for axis {axis} of length {}", data.shape[axis]),
    );
    Ok(out)
}

/// The dims and strides of the `tuple` data axes after `batch_dims` that index tuples address,
/// and the contiguous slice each tuple selects.
fn tuple_layout(data: &[usize], batch_dims: usize, tuple: usize) -> KResult<(Layout, usize)> {
    if tuple == 0 || batch_dims + tuple > data.len() || tuple > 8 {
        return Err(invalid!(
            "index tuples of {tuple} coordinates after {batch_dims} batch dims do not fit data {data:?}"
        ));
    }
    let st = contiguous_strides(data);
    let mut l = Layout { rank: tuple as i32, ..Layout::default() };
    for d in 0..tuple {
        l.shape[d] = data[batch_dims + d] as i64;
        l.stride[0][d] = st[batch_dims + d];
    }
    Ok((l, data[batch_dims + tuple..].iter().product()))
}

/// ONNX GatherND with `batch_dims` leading batch axes shared by data and indices.
pub fn gather_nd(
    cx: &Ctx,
    data: &DeviceTensor,
    indices: &DeviceTensor,
    batch_dims: usize,
    out_shape: &[usize],
) -> KResult<DeviceTensor> {
    let q = indices.shape.len();
    if q == 0 || batch_dims >= q || data.shape.get(..batch_dims) != indices.shape.get(..batch_dims) {
        return Err(invalid!(
            "GatherND: indices {:?} against data {:?} with {batch_dims} batch dims",
            indices.shape, data.shape
        ));
    }
    let (l, slice) = tuple_layout(&data.shape, batch_dims, indices.shape[q - 1])?;
    let batches: usize = data.shape[..batch_dims].iter().product();
    let tuples: usize = indices.shape[batch_dims..q - 1].iter().product();
    let batch_stride: usize = data.shape[batch_dims..].iter().product();
    let idx = pointwise::cast(cx, indices, DataType::I64)?;
    let out = cx.gpu.empty(data.dtype, out_shape.to_vec()).map_err(KernelError::from)?;
    if out.len() != batches * tuples * slice {
        return Err(invalid!("GatherND: output {out_shape:?} does not hold {batches}×{tuples}×{slice} elements"));
    }
    let flag = error_flag(cx)?;
    let name = format!("gather_nd_{}", width(data.dtype)?);
    let args = [
        Arg::I64(batches as i64),
        Arg::I64(tuples as i64),
        Arg::I64(slice as i64),
        Arg::I64(batch_stride as i64),
        Arg::Layout(l),
        cx.arg(data),
        cx.arg(&idx),
        cx.arg(&out),
        cx.arg(&flag),
    ];
    cx.launch_elements(Source::Indexing.kernel(name), out.len(), &args)?;
    cx.defer_check(flag, format!("a GatherND index is out of range for data {:?}", data.shape));
    Ok(out)
}

fn reduction_code(r: ScatterReduction) -> i32 {
    match r {
        ScatterReduction::None => 0,
        ScatterReduction::Add => 1,
        ScatterReduction::Mul => 2,
        ScatterReduction::Max => 3,
        ScatterReduction::Min => 4,
    }
}

/// ONNX ScatterElements / ScatterND: a copy of `data` with `updates` written (or combined by
/// `reduction`) at `indices`; duplicates combine in index order.
pub fn scatter(
    cx: &Ctx,
    mode: ScatterMode,
    reduction: ScatterReduction,
    data: &DeviceTensor,
    indices: &DeviceTensor,
    updates: &DeviceTensor,
) -> KResult<DeviceTensor> {
    rank_checked(&data.shape)?;
    if updates.dtype != data.dtype {
        return Err(invalid!("Scatter's updates are {}, the data {}", updates.dtype, data.dtype));
    }
    let suffix = typed_suffix(data.dtype)?;
    let out = movement::gather_strided(cx, data, &data.shape, &contiguous_strides(&data.shape), 0)?;
    let idx = pointwise::cast(cx, indices, DataType::I64)?;
    let flag = error_flag(cx)?;
    let op = Arg::I32(reduction_code(reduction));
    match mode {
        ScatterMode::Elements { axis } => {
            if indices.shape != updates.shape || !fits_off_axis(&indices.shape, &data.shape, axis) {
                return Err(invalid!(
                    "ScatterElements: indices {:?}, updates {:?}, data {:?}, axis {axis}",
                    indices.shape, updates.shape, data.shape
                ));
            }
            let mut l = Layout { rank: data.shape.len() as i32, ..Layout::default() };
            let (data_st, idx_st) = (contiguous_strides(&data.shape), contiguous_strides(&indices.shape));
            for d in 0..data.shape.len() {
                l.shape[d] = indices.shape[d] as i64;
                l.stride[0][d] = data_st[d];
                l.stride[1][d] = idx_st[d];
            }
            let lines = if indices.shape[axis] == 0 { 0 } else { indices.len() / indices.shape[axis] };
            let args = [
                Arg::I64(lines as i64),
                Arg::Layout(l),
                Arg::I32(axis as i32),
                Arg::I64(data.shape[axis] as i64),
                op,
                cx.arg(&idx),
                cx.arg(updates),
                cx.arg(&out),
                cx.arg(&flag),
            ];
            cx.launch_elements(Source::Indexing.kernel(format!("scatter_elements_{suffix}")), lines, &args)?;
        }
        ScatterMode::Nd => {
            let q = indices.shape.len();
            let tuple = *indices.shape.last().ok_or("ScatterND's indices are 0-D")?;
            let (l, slice) = tuple_layout(&data.shape, 0, tuple)?;
            let tuples: usize = indices.shape[..q - 1].iter().product();
            if updates.len() != tuples * slice {
                return Err(invalid!("ScatterND: {} updates for {tuples} tuples of {slice} elements", updates.len()));
            }
            let args = [
                Arg::I64(tuples as i64),
                Arg::I64(slice as i64),
                Arg::Layout(l),
                op,
                cx.arg(&idx),
                cx.arg(updates),
                cx.arg(&out),
                cx.arg(&flag),
            ];
            cx.launch_elements(Source::Indexing.kernel(format!("scatter_nd_{suffix}")), slice, &args)?;
        }
    }
    cx.defer_check(flag, format!("a Scatter index is out of range for data {:?}", data.shape));
    Ok(out)
}

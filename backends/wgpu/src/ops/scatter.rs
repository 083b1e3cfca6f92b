//! Scatter (ONNX ScatterElements / ScatterND, every reduction) and GatherND. A scatter
//! copies the data, then applies the updates in the cpu backend's sequential order
//! wherever two updates can meet the same element (see `shaders/scatter_*.wgsl`).

use super::sort::typed_instance;
use super::{count_word, output, strides, words8, KResult};
use crate::wgsl::Storage;
use crate::shaders::Instance;
use crate::value::{DeviceTensor, Recorder};
use kiln::{DataType, ScatterMode, ScatterReduction};

const REDUCTIONS: [ScatterReduction; 5] = [
    ScatterReduction::None,
    ScatterReduction::Add,
    ScatterReduction::Mul,
    ScatterReduction::Max,
    ScatterReduction::Min,
];

/// The scatter kernel `body` (`scatter_elements` / `scatter_nd`) combining with `reduction`
/// on `s`; `boolean`: 0/1 words, where add is `or` (numpy's ufuncs on bool).
pub fn scatter_instance(body: &'static str, reduction: ScatterReduction, s: Storage, boolean: bool) -> Instance {
    use ScatterReduction as R;
    let float = s == Storage::F32;
    let combine = match reduction {
        R::None => "u",
        R::Add if boolean => "max(a, u)",
        R::Add => "a + u",
        R::Mul => "a * u",
        // NaN wins, as the cpu backend's nan_max / nan_min.
        R::Max if float => "select(max(a, u), a + u, k_nan(a) || k_nan(u))",
        R::Min if float => "select(min(a, u), a + u, k_nan(a) || k_nan(u))",
        R::Max => "max(a, u)",
        R::Min => "min(a, u)",
    };
    let nan =
        if float { "fn k_nan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > F32_INF; }\n" } else { "" };
    let prelude = format!("alias A = {};\n{nan}fn combine(a: A, u: A) -> A {{ return {combine}; }}\n", s.wgsl());
    let ty = if boolean { "bool" } else { s.wgsl() };
    typed_instance(body, format!("{body}/{reduction:?}/{ty}"), prelude)
}

/// Index tensors the kernels read as i32 words.
fn index_words(t: &DeviceTensor) -> KResult<&DeviceTensor> {
    match t.dtype {
        DataType::I32 | DataType::I64 | DataType::I16 | DataType::I8 => Ok(t),
        other => Err(kiln::invalid!("indices must be signed integers, not {other}")),
    }
}

pub fn scatter(
    rec: &Recorder,
    mode: ScatterMode,
    reduction: ScatterReduction,
    data: &DeviceTensor,
    indices: &DeviceTensor,
    updates: &DeviceTensor,
) -> KResult<DeviceTensor> {
    let storage = Storage::of(data.dtype).ok_or_else(|| kiln::invalid!("unsupported dtype {} for Scatter", data.dtype))?;
    let indices = index_words(indices)?;
    if updates.dtype != data.dtype {
        return Err(kiln::invalid!("updates are {}, data {}", updates.dtype, data.dtype));
    }
    let boolean = data.dtype == DataType::Bool;
    let dense = strides(&data.shape);
    let signed: Vec<i64> = dense.iter().map(|&s| s as i64).collect();
    let out = super::layout::gather_view(rec, data, &data.shape, 0, &signed)?;
    let (body, params, count) = match mode {
        ScatterMode::Elements { axis } => {
            let rank = data.shape.len();
            if indices.shape.len() != rank || updates.shape != indices.shape {
                return Err(kiln::invalid!(
                    "ScatterElements needs indices and updates of one shape and the data's rank: data {:?}, \
                     indices {:?}, updates {:?}",
                    data.shape, indices.shape, updates.shape
                ));
            }
            if let Some(d) = (0..rank).find(|&d| d != axis && indices.shape[d] > data.shape[d]) {
                return Err(kiln::invalid!(
                    "indices shape {:?} exceeds data shape {:?} on axis {d}",
                    indices.shape, data.shape
                ));
            }
            let along = *indices.shape.get(axis).ok_or_else(|| kiln::invalid!("axis {axis} is out of range"))?;
            let lines = indices.len().checked_div(along).unwrap_or(0);
            let mut params = vec![count_word(lines)?, rank as u32, axis as u32, count_word(data.shape[axis])?];
            params.extend(words8(&indices.shape)?);
            params.extend(words8(&strides(&indices.shape))?);
            params.extend(words8(&dense)?);
            ("scatter_elements", params, lines)
        }
        ScatterMode::Nd => {
            let q = indices.shape.len();
            let tuple = *indices.shape.last().ok_or("ScatterND indices must have rank at least 1")?;
            if tuple > data.shape.len() {
                return Err(kiln::invalid!("{tuple} index components exceed data rank {}", data.shape.len()));
            }
            let mut expected = indices.shape[..q - 1].to_vec();
            expected.extend_from_slice(&data.shape[tuple..]);
            if updates.shape != expected {
                return Err(kiln::invalid!("updates shape {:?} should be {expected:?}", updates.shape));
            }
            let slice: usize = data.shape[tuple..].iter().product();
            let tuples: usize = indices.shape[..q - 1].iter().product();
            let mut params = vec![count_word(slice)?, count_word(tuples)?, tuple as u32];
            params.extend(words8(&data.shape[..tuple])?);
            params.extend(words8(&dense[..tuple])?);
            ("scatter_nd", params, slice)
        }
    };
    let kernel = scatter_instance(body, reduction, storage, boolean);
    rec.dispatch_1d(&kernel, &params, &[&indices.buffer, &updates.buffer, &out.buffer], count)
        .map_err(kiln::KernelError::from)?;
    super::pointwise::narrow(rec, out)
}

/// ONNX GatherND with `batch_dims` leading axes shared by data and indices.
pub fn gather_nd(
    rec: &Recorder,
    data: &DeviceTensor,
    indices: &DeviceTensor,
    batch_dims: usize,
    shape: &[usize],
) -> KResult<DeviceTensor> {
    let indices = index_words(indices)?;
    let q = indices.shape.len();
    let tuple = *indices.shape.last().ok_or("GatherND indices must have rank at least 1")?;
    if batch_dims >= q || batch_dims + tuple > data.shape.len() {
        return Err(kiln::invalid!(
            "{tuple} index components after {batch_dims} batch dims exceed data rank {}",
            data.shape.len()
        ));
    }
    let st = strides(&data.shape);
    let slice: usize = data.shape[batch_dims + tuple..].iter().product();
    let per_batch: usize = indices.shape[batch_dims..q - 1].iter().product();
    let batch_stride: usize = data.shape[batch_dims..].iter().product();
    let out = output(rec, data.dtype, shape)?;
    let mut params = vec![
        count_word(out.len())?,
        count_word(slice.max(1))?,
        tuple as u32,
        count_word(per_batch.max(1))?,
        count_word(batch_stride)?,
    ];
    params.extend(words8(&data.shape[batch_dims..batch_dims + tuple])?);
    params.extend(words8(&st[batch_dims..batch_dims + tuple])?);
    rec.dispatch_1d(&Instance::plain("gather_nd"), &params, &[&data.buffer, &indices.buffer, &out.buffer], out.len())
        .map_err(kiln::KernelError::from)?;
    Ok(out)
}

/// Every instantiation of this module's kernels, for naga validation.
pub fn instantiations() -> Vec<Instance> {
    let mut all = vec![Instance::plain("gather_nd")];
    for body in ["scatter_elements", "scatter_nd"] {
        for r in REDUCTIONS {
            for s in Storage::ALL {
                all.push(scatter_instance(body, r, s, false));
            }
            all.push(scatter_instance(body, r, Storage::U32, true));
        }
    }
    all
}

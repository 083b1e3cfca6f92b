//! Pointwise kernels: binary elementwise with broadcasting, unary, activations, casts,
//! select, parametric ReLU, fused epilogues and the narrowing pass for types stored
//! widened (f16, bf16, 8/16-bit integers).

use super::{broadcast_strides, count_word, output, words8, KResult};
use crate::wgsl::{CastMode, Storage};
use crate::shaders::Instance;
use crate::value::{DeviceTensor, Packing, Recorder};
use kiln::{ActivationKind, DataType, ElementwiseOp, PostOp, UnaryOp};

fn storage(t: &DeviceTensor) -> KResult<Storage> {
    Storage::of(t.dtype).ok_or_else(|| kiln::invalid!("unsupported dtype {} on the wgpu backend", t.dtype))
}

fn map_err<T>(r: Result<T, crate::device::DeviceError>) -> KResult<T> {
    r.map_err(kiln::KernelError::from)
}

/// `op(a, b)` broadcast to `shape`, producing `dtype`.
pub fn binary(
    rec: &Recorder,
    op: ElementwiseOp,
    a: &DeviceTensor,
    b: &DeviceTensor,
    shape: &[usize],
    dtype: DataType,
) -> KResult<DeviceTensor> {
    let s = storage(a)?;
    let halves = a.packing == Packing::Half;
    if b.packing != a.packing {
        return Err(kiln::invalid!("Elementwise {op:?}: one operand is stored as f16 halves, the other as words"));
    }
    let kernel = if halves { Instance::binary_f16(op) } else { Instance::binary(op, s) };
    let (o, kernel) = kernel.ok_or_else(|| kiln::invalid!("no WGSL kernel for Elementwise {op:?} on {}", a.dtype))?;
    let out = pointwise_output(rec, halves && o == Storage::F32, dtype, shape)?;
    let n = out.len();
    let mut params = vec![count_word(n)?, shape.len() as u32];
    params.extend(words8(shape)?);
    params.extend(words8(&broadcast_strides(&a.shape, shape)?)?);
    params.extend(words8(&broadcast_strides(&b.shape, shape)?)?);
    map_err(rec.dispatch_1d(&kernel, &params, &[&a.buffer, &b.buffer, &out.buffer], n))?;
    narrow(rec, out)
}

fn run_unary(
    rec: &Recorder,
    kernel: &Instance,
    p: [f32; 3],
    x: &DeviceTensor,
    dtype: DataType,
) -> KResult<DeviceTensor> {
    let halves_out = x.packing == Packing::Half && kernel.writes_halves();
    let out = pointwise_output(rec, halves_out, dtype, &x.shape)?;
    let n = out.len();
    let params = [count_word(n)?, p[0].to_bits(), p[1].to_bits(), p[2].to_bits()];
    map_err(rec.dispatch_1d(kernel, &params, &[&x.buffer, &out.buffer], n))?;
    narrow(rec, out)
}

/// The output of a pointwise kernel: f16 halves where its f16 instantiation writes them.
fn pointwise_output(rec: &Recorder, halves: bool, dtype: DataType, shape: &[usize]) -> KResult<DeviceTensor> {
    match halves {
        true if dtype == DataType::F16 => rec.alloc_halves(shape).map_err(kiln::KernelError::from),
        true => Err(kiln::invalid!("an f16 kernel writes halves, but the output is {dtype}")),
        false => output(rec, dtype, shape),
    }
}

pub fn unary(rec: &Recorder, op: UnaryOp, x: &DeviceTensor, dtype: DataType) -> KResult<DeviceTensor> {
    let kernel = match x.packing {
        Packing::Half => Instance::unary_f16(op),
        Packing::Word => Instance::unary(op, storage(x)?),
    };
    let (_, kernel) = kernel.ok_or_else(|| kiln::invalid!("no WGSL kernel for Unary {op:?} on {}", x.dtype))?;
    run_unary(rec, &kernel, [0.0; 3], x, dtype)
}

pub fn activation(rec: &Recorder, kind: &ActivationKind, x: &DeviceTensor) -> KResult<DeviceTensor> {
    let kernel = match x.packing {
        Packing::Half => Instance::activation_f16(kind),
        Packing::Word => Instance::activation(kind, storage(x)?),
    };
    let (kernel, p) = kernel.ok_or_else(|| kiln::invalid!("no WGSL kernel for Activation {kind:?} on {}", x.dtype))?;
    run_unary(rec, &kernel, p, x, x.dtype)
}

/// Cast (CastNarrow with a non-default `mode`) of `x` to `to`.
pub fn cast(rec: &Recorder, x: &DeviceTensor, to: DataType, mode: CastMode) -> KResult<DeviceTensor> {
    let (_, kernel, p) =
        Instance::cast(x.dtype, to, mode).ok_or_else(|| kiln::invalid!("no WGSL kernel for Cast {} -> {to}", x.dtype))?;
    run_unary(rec, &kernel, p, x, to)
}

/// `cond ? a : b` broadcast to `shape`.
pub fn select(
    rec: &Recorder,
    cond: &DeviceTensor,
    a: &DeviceTensor,
    b: &DeviceTensor,
    shape: &[usize],
) -> KResult<DeviceTensor> {
    let out = output(rec, a.dtype, shape)?;
    let n = out.len();
    let mut params = vec![count_word(n)?, shape.len() as u32];
    params.extend(words8(shape)?);
    for t in [cond, a, b] {
        params.extend(words8(&broadcast_strides(&t.shape, shape)?)?);
    }
    map_err(rec.dispatch_1d(
        &Instance::plain("select"),
        &params,
        &[&cond.buffer, &a.buffer, &b.buffer, &out.buffer],
        n,
    ))?;
    Ok(out)
}

/// `x < 0 ? x * slope : x`, slope broadcast: `select(x < 0, x * slope, x)`.
pub fn parametric_relu(
    rec: &Recorder,
    x: &DeviceTensor,
    slope: &DeviceTensor,
    shape: &[usize],
) -> KResult<DeviceTensor> {
    let scaled = binary(rec, ElementwiseOp::Prod, x, slope, shape, x.dtype)?;
    let zero = fill(rec, x.dtype, &[], 0)?;
    let negative = binary(rec, ElementwiseOp::Less, x, &zero, &x.shape, DataType::Bool)?;
    select(rec, &negative, &scaled, x, shape)
}

/// A tensor of `shape` whose every word is `word`.
pub fn fill(rec: &Recorder, dtype: DataType, shape: &[usize], word: u32) -> KResult<DeviceTensor> {
    let out = output(rec, dtype, shape)?;
    let n = out.len();
    map_err(rec.dispatch_1d(&Instance::plain("fill"), &[count_word(n)?, word], &[&out.buffer], n))?;
    Ok(out)
}

/// Rounds (f16, bf16) or wraps (8/16-bit integers) a freshly written tensor in place, so
/// every layer output holds exactly its logical type's values, as on the cpu backend.
pub fn narrow(rec: &Recorder, t: DeviceTensor) -> KResult<DeviceTensor> {
    if t.packing == Packing::Half {
        return Ok(t); // f16 kernels round as they store
    }
    let kind = match t.dtype {
        DataType::F16 => 0,
        DataType::BF16 => 1,
        DataType::I8 => 2,
        DataType::I16 => 3,
        DataType::U8 => 4,
        DataType::U16 => 5,
        _ => return Ok(t),
    };
    let n = t.len();
    map_err(rec.dispatch_1d(&Instance::plain("narrow"), &[count_word(n)?, kind], &[&t.buffer], n))?;
    Ok(t)
}

/// Applies a fused layer's epilogue to the anchor's output; `inputs` are the fused
/// layer's inputs, which the steps' operands index.
pub fn epilogue(
    rec: &Recorder,
    mut running: DeviceTensor,
    steps: &[PostOp],
    inputs: &[Option<DeviceTensor>],
    shape: &[usize],
    dtype: DataType,
) -> KResult<DeviceTensor> {
    let input = |i: usize| inputs.get(i).and_then(Option::as_ref).ok_or_else(|| kiln::invalid!("epilogue input {i} is missing"));
    for step in steps {
        running = match *step {
            PostOp::Quantize { to, scale, zero } => {
                super::quant::quantize(rec, &running, input(scale)?, zero.map(input).transpose()?, None, to)?
            }
            PostOp::Dequantize { scale, zero } => {
                let scale = input(scale)?;
                super::quant::dequantize(rec, &running, scale, zero.map(input).transpose()?, None, scale.dtype)?
            }
            PostOp::Normalization { axis, epsilon, scale, bias } => {
                super::reduce::normalization(rec, &running, input(scale)?, Some(input(bias)?), &[axis], epsilon, 1)?
            }
            PostOp::Activation(kind) => activation(rec, &kind, &running)?,
            PostOp::Unary(op) => unary(rec, op, &running, running.dtype)?,
            // The layer's last step (inference checks it): its output is the layer's.
            PostOp::Reduce { op, axes, .. } => super::reduce::reduce(rec, op, &running, &axes.axes(), shape, running.dtype)?,
            PostOp::Elementwise { op, operand, running_first } => {
                let other = inputs
                    .get(operand)
                    .and_then(Option::as_ref)
                    .ok_or_else(|| kiln::invalid!("epilogue operand {operand} is missing"))?;
                let out_shape = kiln_broadcast(&running.shape, &other.shape)?;
                let out_dtype = if op.is_comparison() { DataType::Bool } else { running.dtype };
                if running_first {
                    binary(rec, op, &running, other, &out_shape, out_dtype)?
                } else {
                    binary(rec, op, other, &running, &out_shape, out_dtype)?
                }
            }
        };
    }
    if running.shape != shape || running.dtype != dtype {
        return Err(kiln::invalid!(
            "the epilogue produced {}{:?}, inference expects {dtype}{shape:?}",
            running.dtype, running.shape
        ));
    }
    Ok(running)
}

/// The numpy broadcast of two shapes.
pub fn kiln_broadcast(a: &[usize], b: &[usize]) -> KResult<Vec<usize>> {
    let rank = a.len().max(b.len());
    (0..rank)
        .map(|i| {
            let x = if i + a.len() >= rank { a[i + a.len() - rank] } else { 1 };
            let y = if i + b.len() >= rank { b[i + b.len() - rank] } else { 1 };
            match (x, y) {
                (x, y) if x == y => Ok(x),
                (1, y) => Ok(y),
                (x, 1) => Ok(x),
                _ => Err(kiln::invalid!("shapes {a:?} and {b:?} do not broadcast")),
            }
        })
        .collect()
}

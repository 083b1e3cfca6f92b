//! Elementwise binary ops (numpy broadcasting), activations, unary ops and casts.

use kiln::{invalid, ActivationKind, DataType, ElementwiseOp, KernelError, UnaryOp};
use crate::ops::KResult;
use super::layout::to_row_major;
use super::{broadcast_shape, coalesce, coalesce_joint, empty_in_layout, keeps_channels_last, strided_layout, Ctx};
use super::chain_source::{chain_kernel, Program, Step, CHAIN_ROW_MAX};
use crate::buffer::{float_suffix, Arg, ChainLayout, DeviceTensor, Layout, CHAIN_OPERANDS, CHAIN_RANK, CHAIN_STEPS};
use crate::sources::Source;

/// The op code `binary_*` / `compare_*` / `logic_bool` take (the `OP_*` defines in elementwise.cu).
fn binary_code(op: ElementwiseOp) -> Option<i32> {
    use ElementwiseOp as E;
    Some(match op {
        E::Sum => 0,
        E::Sub => 1,
        E::Prod => 2,
        E::Div => 3,
        E::Pow => 4,
        E::Max => 5,
        E::Min => 6,
        E::Equal => 7,
        E::Greater => 8,
        E::Less => 9,
        E::GreaterOrEqual => 10,
        E::LessOrEqual => 11,
        E::And => 12,
        E::Or => 13,
        E::Xor => 14,
        E::FloorDiv => 15,
        E::Mod => 16,
        E::Fmod => 17,
        _ => return None,
    })
}

/// The kernel for `op` on `dtype` operands, or why there is none.
pub fn binary_kernel(op: ElementwiseOp, dtype: DataType) -> KResult<(String, i32)> {
    let code = binary_code(op).ok_or_else(|| invalid!("{op:?} has no CUDA kernel"))?;
    let name = if op.is_logical() {
        (dtype == DataType::Bool).then(|| "logic_bool".to_string())
    } else if op.is_comparison() {
        match dtype {
            DataType::F32 | DataType::F16 | DataType::BF16 | DataType::I32 | DataType::I64 => Some(format!("compare_{}", dtype.name())),
            _ => None,
        }
    } else if dtype.is_float() {
        float_suffix(dtype).ok().map(|s| format!("binary_{s}"))
    } else if matches!(dtype, DataType::I32 | DataType::I64) && matches!(op, ElementwiseOp::Sum | ElementwiseOp::Sub | ElementwiseOp::Prod | ElementwiseOp::Max | ElementwiseOp::Min) {
        Some(format!("binary_{}", dtype.name()))
    } else {
        None
    };
    name.map(|n| (n, code)).ok_or_else(|| invalid!("{op:?} on {dtype} has no CUDA kernel"))
}

/// `out = a op b`, broadcasting both onto `out_shape`; `out_dtype` is bool for comparisons.
/// Either may be stored in any layout; the output is channels-last where an operand of its
/// shape is (see [`keeps_channels_last`]).
pub fn binary(cx: &Ctx, op: ElementwiseOp, a: &DeviceTensor, b: &DeviceTensor, out_dtype: DataType, out_shape: &[usize]) -> KResult<DeviceTensor> {
    if super::typed::binary_supported(op, a.dtype) {
        let (a, b) = (to_row_major(cx, a)?, to_row_major(cx, b)?);
        return super::typed::binary(cx, op, &a, &b, out_dtype, out_shape);
    }
    // Float arithmetic is a one-step generated chain: the pair's coordinates computed once, in
    // 32 bits (Swin's rank-5 mask add over 49-wide rows took 10x its memory time here).
    let arithmetic = !op.is_comparison() && !op.is_logical() && out_dtype == a.dtype && b.dtype == a.dtype;
    if arithmetic {
        if let Some(out) = chain(cx, a, None, &[ChainStep::Binary { op, operand: b.clone(), running_first: true, dequantize: None }])?.filter(|o| o.shape == out_shape) {
            return Ok(out);
        }
    }
    let (name, code) = binary_kernel(op, a.dtype)?;
    let nhwc = keeps_channels_last(&[a, b], out_shape);
    let out = empty_in_layout(cx, out_dtype, out_shape, nhwc)?;
    let order = nhwc.then(|| DeviceTensor::channels_last_order(out_shape.len()));
    let layout = coalesce(strided_layout(out_shape, &[a, b], order.as_deref())?, 2);
    let n = out.len();
    let args = [cx.arg(a), cx.arg(b), cx.arg(&out)];
    // Float arithmetic has `binary_vec_*` kernels (comparisons and integers do not).
    let vector = (name.starts_with("binary_") && float_suffix(a.dtype).is_ok()).then(|| vector_elements(a.dtype, &[(layout, 2)], &args)).flatten();
    let (name, count) = match vector {
        Some(k) => (name.replacen("binary_", "binary_vec_", 1), n / k),
        None => (name, n),
    };
    let [pa, pb, po] = args;
    cx.launch_elements(Source::Elementwise.kernel(name), count, &[Arg::I32(code), Arg::I64(count as i64), Arg::Layout(layout), pa, pb, po])?;
    Ok(out)
}

/// Elements per 16-byte vector where a float kernel may run on vectors (`*_vec_*`): every
/// operand a layout uses is read with innermost stride 1 (at vector-aligned offsets) or 0
/// (broadcast), the innermost length is a whole number of vectors, and every address in `args`
/// is 16-byte aligned. The output is dense.
pub fn vector_elements(dtype: DataType, layouts: &[(crate::buffer::Layout, usize)], args: &[Arg]) -> Option<usize> {
    let k = 16 / crate::buffer::storage_size(dtype).ok()?;
    vector_lanes(k, layouts, args).then_some(k)
}

/// Whether a kernel may access `k` elements at a time: every pointer 16-byte aligned, and
/// every slot's innermost dim a multiple of `k`, read contiguously (from a `k`-aligned offset)
/// or broadcast.
pub fn vector_lanes(k: usize, layouts: &[(crate::buffer::Layout, usize)], args: &[Arg]) -> bool {
    let k = k as i64;
    let aligned = args.iter().all(|a| matches!(a, Arg::Ptr(p) if p.address() % 16 == 0));
    let fits = layouts.iter().all(|(l, used)| {
        let Some(inner) = (l.rank as usize).checked_sub(1) else { return false };
        l.shape[inner] % k == 0
            && (0..*used).all(|w| match l.stride[w][inner] {
                0 => true,
                1 => l.offset[w] % k == 0 && (0..inner).all(|d| l.stride[w][d] % k == 0),
                _ => false,
            })
    });
    aligned && fits
}

/// `(code, alpha, beta)` of an activation for `unary_*`.
pub fn activation_code(kind: ActivationKind) -> (i32, f32, f32) {
    use ActivationKind as A;
    match kind {
        A::Relu => (0, 0.0, 0.0),
        A::Sigmoid => (1, 0.0, 0.0),
        A::Tanh => (2, 0.0, 0.0),
        A::LeakyRelu { alpha } => (3, alpha, 0.0),
        A::Elu { alpha } => (4, alpha, 0.0),
        A::Selu { alpha, gamma } => (5, alpha, gamma),
        A::Softsign => (6, 0.0, 0.0),
        A::Softplus => (7, 0.0, 0.0),
        A::Clip { min, max } => (8, min, max),
        A::HardSigmoid { alpha, beta } => (9, alpha, beta),
        A::HardSwish => (10, 0.0, 0.0),
        A::ScaledTanh { alpha, beta } => (11, alpha, beta),
        A::ThresholdedRelu { alpha } => (12, alpha, 0.0),
        A::GeluErf => (13, 0.0, 0.0),
        A::GeluTanh => (14, 0.0, 0.0),
        A::Celu { alpha } => (15, alpha, 0.0),
        A::Mish => (16, 0.0, 0.0),
        A::Swish => (17, 0.0, 0.0),
    }
}

/// `(code, alpha, beta)` of a float unary op for `unary_*`, if it has one.
pub fn unary_code(op: UnaryOp) -> Option<(i32, f32, f32)> {
    use UnaryOp as U;
    let code = match op {
        U::Exp => 32,
        U::Log => 33,
        U::Sqrt => 34,
        U::Recip => 35,
        U::Abs => 36,
        U::Neg => 37,
        U::Sin => 38,
        U::Cos => 39,
        U::Tan => 40,
        U::Sinh => 41,
        U::Cosh => 42,
        U::Asin => 43,
        U::Acos => 44,
        U::Atan => 45,
        U::Asinh => 46,
        U::Acosh => 47,
        U::Atanh => 48,
        U::Ceil => 49,
        U::Floor => 50,
        U::Round => 51,
        U::Erf => 52,
        U::Sign => 53,
        U::Not | U::IsNan | U::IsInf { .. } => return None,
    };
    Some((code, 0.0, 0.0))
}

/// A float unary kernel (`code` from [`activation_code`] / [`unary_code`]) into a new tensor,
/// or in place when `out` is `x` itself (the fused epilogue's running value). A row-major or
/// channels-last `x` keeps its layout (the kernel runs over the packed bytes); another view is
/// packed row-major first.
pub fn unary(cx: &Ctx, (code, alpha, beta): (i32, f32, f32), x: &DeviceTensor, out: Option<&DeviceTensor>) -> KResult<DeviceTensor> {
    let suffix = float_suffix(x.dtype).map_err(KernelError::from)?;
    let packed;
    let x = if x.strides.is_none() || x.channels_last() {
        x
    } else {
        packed = to_row_major(cx, x)?;
        &packed
    };
    let out = match out {
        Some(o) if o.strides == x.strides => o.clone(),
        _ => empty_in_layout(cx, x.dtype, &x.shape, x.channels_last())?,
    };
    let n = x.len();
    let (src, dst) = (cx.arg(x), cx.arg(&out));
    let dense = crate::buffer::Layout { rank: 1, shape: [n as i64, 0, 0, 0, 0, 0, 0, 0], ..Default::default() };
    let (name, count) = match vector_elements(x.dtype, &[(dense, 0)], &[src, dst]) {
        Some(k) => (format!("unary_vec_{suffix}"), n / k),
        None => (format!("unary_{suffix}"), n),
    };
    cx.launch_elements(Source::Elementwise.kernel(name), count, &[Arg::I32(code), Arg::F32(alpha), Arg::F32(beta), Arg::I64(count as i64), src, dst])?;
    Ok(out)
}

/// The cast kernel's name for a pair of types, if kiln has one.
pub fn cast_kernel(from: DataType, to: DataType) -> Option<String> {
    use DataType as D;
    let floats = [D::F32, D::F16, D::BF16];
    let name = |t: DataType| if t == D::Bool { "bool" } else { t.name() };
    let ok = match (from, to) {
        (D::I64, D::I32) | (D::I32, D::I64) => true,
        (f, t) if floats.contains(&t) || t == D::Bool => floats.contains(&f) || matches!(f, D::I32 | D::I64 | D::I8 | D::U8 | D::Bool),
        (f, D::I32 | D::I64 | D::I8 | D::U8) => floats.contains(&f) || f == D::Bool,
        _ => false,
    };
    ok.then(|| format!("cast_{}_{}", name(from), name(to)))
}

pub fn cast(cx: &Ctx, x: &DeviceTensor, to: DataType) -> KResult<DeviceTensor> {
    // A same-type Cast is a copy, except into a narrow float: it decodes and re-encodes
    // saturating (an e5m2 infinity becomes the largest finite value, as kiln-cpu and ONNX do).
    if x.dtype == to && !to.is_narrow_float() {
        return Ok(x.clone());
    }
    // The dedicated kernels round once only between f32, f16 and bf16 (and i32 <-> i64); every
    // other pair goes through the exact pivot of `typed_cast_any`, bit-exact with kiln-cpu.
    let floats = [DataType::F32, DataType::F16, DataType::BF16];
    let exact = (floats.contains(&x.dtype) && (floats.contains(&to) || to == DataType::Bool)) || matches!((x.dtype, to), (DataType::I32, DataType::I64) | (DataType::I64, DataType::I32));
    let name = match cast_kernel(x.dtype, to) {
        Some(name) if exact => name,
        _ => return super::typed::cast(cx, x, to, true, kiln::E8M0Rounding::Up),
    };
    let out = cx.gpu.empty(to, x.shape.clone()).map_err(KernelError::from)?;
    let n = x.len();
    if VECTOR_CASTS.contains(&name.as_str()) && n.is_multiple_of(4) && super::lane_aligned(cx, x, 4) && super::lane_aligned(cx, &out, 4) {
        cx.launch_elements(Source::Copy.kernel(format!("{name}_x4")), n / 4, &[Arg::I64((n / 4) as i64), cx.arg(x), cx.arg(&out)])?;
        return Ok(out);
    }
    cx.launch_elements(Source::Copy.kernel(name), n, &[Arg::I64(n as i64), cx.arg(x), cx.arg(&out)])?;
    Ok(out)
}

/// The casts with a four-elements-per-thread kernel (`{name}_x4` in kernels/copy.cu).
pub const VECTOR_CASTS: [&str; 4] = ["cast_f32_f16", "cast_f16_f32", "cast_f32_bf16", "cast_bf16_f32"];

/// `unary_*`'s code replacing NaN by zero (no ONNX op; attention's NaN guard).
pub const NAN_TO_ZERO: (i32, f32, f32) = (54, 0.0, 0.0);

/// One step of a pointwise chain.
#[derive(Debug)]
pub enum ChainStep {
    /// An activation or unary op: `(code, alpha, beta)` of `unary_*`.
    Unary((i32, f32, f32)),
    /// `running op operand`, or `operand op running` when not `running_first`; an integer
    /// operand read dequantized with `(scale, zero point)` where `dequantize` says.
    Binary { op: ElementwiseOp, operand: DeviceTensor, running_first: bool, dequantize: Option<(f32, f32)> },
    /// QuantizeLinear per tensor to the 8-bit type `to`.
    Quantize { to: DataType, scale: f32, zero: f32 },
    /// DequantizeLinear per tensor of the (8-bit) running value.
    Dequantize { scale: f32, zero: f32 },
    /// Layer normalization of the (f32) running value over the last axis, then `· scale + bias`
    /// (both along that axis): the chain then runs a warp per row (`chain_rows`).
    Normalize { scale: DeviceTensor, bias: DeviceTensor, epsilon: f32 },
}

/// Enough blocks of 256 threads to fill an H100/H200-class GPU several times over.
const CHAIN_MAX_BLOCKS: usize = 2048;

/// The saturation bounds of an 8-bit level type.
fn level_bounds(t: DataType) -> Option<(i32, i32)> {
    match t {
        DataType::I8 => Some((-128, 127)),
        DataType::U8 => Some((0, 255)),
        _ => None,
    }
}

/// The chain slot (operand index) reading `t`, dequantized by `dequantize`: the one a step
/// already reads it through (a tensor read by several steps, as GRN's `x * nx ... + x`, takes
/// one slot), else a new one (`true`); `None` past `CHAIN_OPERANDS` operands.
fn operand_slot<'t>(operands: &mut Vec<(&'t DeviceTensor, Option<(f32, f32)>)>, t: &'t DeviceTensor, dequantize: Option<(f32, f32)>) -> Option<(usize, bool)> {
    let bits = |d: Option<(f32, f32)>| d.map(|(s, z)| (s.to_bits(), z.to_bits()));
    if let Some(slot) = operands.iter().position(|(o, d)| same_view(o, t) && bits(*d) == bits(dequantize)) {
        return Some((slot, false));
    }
    if operands.len() == CHAIN_OPERANDS {
        return None;
    }
    operands.push((t, dequantize));
    Some((operands.len() - 1, true))
}

/// Runs `steps` on `x` (read dequantized with `(scale, zero point)` where `x_dequantize` says)
/// in one pass of a kernel generated for the chain (ops/chain_source.rs), the running value in
/// f32 between steps; `None` where a chain kernel does not apply (a type it does not take, a
/// float op on integer levels, a comparison or logical op, operands of another type than the
/// running value, more than `CHAIN_STEPS` steps or `CHAIN_OPERANDS` distinct operands, more than
/// `CHAIN_RANK` dims after coalescing or offsets past 32 bits): the steps then run one by one.
pub fn chain(cx: &Ctx, x: &DeviceTensor, x_dequantize: Option<(f32, f32)>, steps: &[ChainStep]) -> KResult<Option<DeviceTensor>> {
    let Some(Built { program, slots: all, shape, params }) = build(x, x_dequantize, steps)? else { return Ok(None) };
    launch_chain(cx, program, &all, &shape, &params)
}

/// A chain's program and what its kernels read: the slots (the running input, then each
/// distinct operand), the shape they broadcast to, and the float parameters.
pub(super) struct Built<'t> {
    pub program: Program,
    pub slots: Vec<&'t DeviceTensor>,
    pub shape: Vec<usize>,
    pub params: Vec<f32>,
}

/// The program of `steps` on `x`, or `None` where a chain kernel does not apply (see [`chain`]).
pub(super) fn build<'t>(x: &'t DeviceTensor, x_dequantize: Option<(f32, f32)>, steps: &'t [ChainStep]) -> KResult<Option<Built<'t>>> {
    if steps.len() > CHAIN_STEPS {
        return Ok(None);
    }
    // The type the running value has after each step: a float storage type, or an 8-bit one
    // after a QuantizeLinear. Dequantized reads are f32.
    let read_type = |t: &DeviceTensor, dequantize: Option<(f32, f32)>| match dequantize {
        Some(_) if level_bounds(t.dtype).is_some() => Some(DataType::F32),
        Some(_) => None,
        None => Some(t.dtype),
    };
    let Some(mut running) = read_type(x, x_dequantize) else { return Ok(None) };
    if float_suffix(running).is_err() {
        return Ok(None);
    }
    let mut params: Vec<f32> = Vec::new();
    let mut param = |scale: f32, zero: f32| {
        params.push(scale);
        params.push(zero);
        params.len() - 2
    };
    let mut dequantized = vec![x_dequantize.map(|(s, z)| param(s, z))];
    let mut program = Vec::with_capacity(steps.len());
    // Distinct operands (`operand_slot`).
    let mut operands: Vec<(&DeviceTensor, Option<(f32, f32)>)> = Vec::new();
    let mut shape = x.shape.clone();
    for step in steps {
        let float_running = float_suffix(running).is_ok();
        match step {
            ChainStep::Unary((code, alpha, beta)) if float_running => program.push(Step::Unary { code: *code, alpha: *alpha, beta: *beta }),
            ChainStep::Binary { op, operand, running_first, dequantize } if float_running => {
                let code = match binary_code(*op) {
                    Some(code) if !op.is_comparison() && !op.is_logical() => code,
                    _ => return Ok(None),
                };
                if read_type(operand, *dequantize) != Some(running) {
                    return Ok(None);
                }
                let Some((slot, new)) = operand_slot(&mut operands, operand, *dequantize) else { return Ok(None) };
                if new {
                    dequantized.push(dequantize.map(|(s, z)| param(s, z)));
                }
                shape = broadcast_shape(&shape, &operand.shape)?;
                program.push(Step::Binary { code, operand: slot, running_first: *running_first });
            }
            ChainStep::Quantize { to, scale, zero } if running == DataType::F32 => {
                let Some((lo, hi)) = level_bounds(*to) else { return Ok(None) };
                program.push(Step::Quantize { param: param(*scale, *zero), lo, hi });
                running = *to;
            }
            ChainStep::Dequantize { scale, zero } if level_bounds(running).is_some() => {
                program.push(Step::Dequantize { param: param(*scale, *zero) });
                running = DataType::F32;
            }
            ChainStep::Normalize { scale, bias, epsilon } if running == DataType::F32 && !program.iter().any(|s| matches!(s, Step::Normalize { .. })) => {
                let mut slots = [0usize; 2];
                for (slot, t) in slots.iter_mut().zip([scale, bias]) {
                    let Some((read, new)) = operand_slot(&mut operands, t, None).filter(|_| t.dtype == DataType::F32) else { return Ok(None) };
                    if new {
                        dequantized.push(None);
                    }
                    *slot = read;
                }
                let [scale, bias] = slots;
                // The row as it is here; the kernel's launch checks it is the output's.
                let len = u32::try_from(shape.last().copied().unwrap_or(0)).unwrap_or(u32::MAX);
                program.push(Step::Normalize { scale, bias, epsilon: *epsilon, len });
            }
            _ => return Ok(None),
        }
    }
    let all: Vec<&DeviceTensor> = std::iter::once(x).chain(operands.iter().map(|(o, _)| *o)).collect();
    let program = Program { slots: all.iter().map(|t| t.dtype).collect(), out: running, steps: program, dequantized, params: params.len(), reduce: None };
    Ok(Some(Built { program, slots: all, shape, params }))
}

/// Launches a built chain's kernels, writing its result.
fn launch_chain(cx: &Ctx, program: Program, all: &[&DeviceTensor], shape: &[usize], params: &[f32]) -> KResult<Option<DeviceTensor>> {
    let (Some(source), Some(lanes)) = (chain_kernel(&program), program.lanes()) else { return Ok(None) };
    // Every operand read through its own strides, the output channels-last where one is; slot
    // k (the running input, then each operand) is layout k / 3's stride row k % 3.
    let nhwc = keeps_channels_last(&all, &shape);
    // A row normalization's rows are the output's last axis, in row-major memory.
    if program.normalizes() && nhwc {
        return Ok(None);
    }
    let order = nhwc.then(|| DeviceTensor::channels_last_order(shape.len()));
    let mut groups = Vec::with_capacity(3);
    for k in 0..3 {
        let group = all.get(3 * k..).map_or(&[][..], |rest| &rest[..rest.len().min(3)]);
        groups.push((strided_layout(&shape, group, order.as_deref())?, group.len()));
    }
    let layouts = coalesce_joint(&groups);
    let used: Vec<_> = layouts.iter().zip(&groups).map(|(l, (_, used))| (*l, *used)).collect();
    let Some(compact) = chain_layout(&used) else { return Ok(None) };
    let out = empty_in_layout(cx, program.out, shape, nhwc)?;
    let n = out.len();
    let mut pointers: Vec<Arg> = all.iter().map(|t| cx.arg(t)).collect();
    pointers.push(cx.arg(&out));
    if program.normalizes() {
        // A warp per row, its values in registers: rows of runs of 4 that every slot reads
        // as runs (or broadcasts).
        let len = shape.last().copied().unwrap_or(0);
        let fixed = program.steps.iter().any(|s| matches!(*s, Step::Normalize { len: l, .. } if l as usize == len));
        if len == 0 || len % 4 != 0 || len > CHAIN_ROW_MAX || !fixed || !vector_lanes(4, &used, &pointers) {
            return Ok(None);
        }
        let rows = n / len;
        // The kernel's `unsigned` counts, which chain_layout's 32-bit offsets already bound.
        let (Ok(rows_arg), Ok(len_arg)) = (i32::try_from(rows), i32::try_from(len)) else { return Ok(None) };
        // A repeated-row slot is read at the element's place in its row where the row is the
        // innermost dim (coalescing may have split or merged it: then through coordinates).
        let mut compact = compact;
        if compact.shape[compact.rank as usize - 1] != len_arg {
            compact.row = 0;
        }
        let mut args = vec![Arg::I32(rows_arg), Arg::ChainLayout(compact)];
        args.extend(pointers);
        args.extend(params.iter().map(|&q| Arg::F32(q)));
        let blocks = u32::try_from(rows.div_ceil(8)).map_err(|_| kiln::invalid!("{rows} rows are too many for one launch"))?;
        cx.gpu.launch(&source.kernel("chain_rows"), blocks, 256, &args).map_err(KernelError::from)?;
        return Ok(Some(out));
    }
    let vector = vector_lanes(lanes, &used, &pointers);
    let runs = if vector { n / lanes } else { n };
    let mut args = vec![Arg::I32(runs as i32), Arg::ChainLayout(compact)];
    args.extend(pointers);
    let blocks = runs.div_ceil(256).clamp(1, CHAIN_MAX_BLOCKS) as u32;
    let q_args = params.iter().map(|&q| Arg::F32(q));
    // One level and column operands: a table per column where it applies.
    let by_column = match program.column_table() {
        Some(level) => by_columns(cx, &source, &compact, (&all, level), &out, &params)?,
        None => false,
    };
    match program.table_entries() {
        // The program once per input level (pair), then a lookup per element; each block
        // copies the table into shared memory, so a pair's 64 KiB is worth it per two blocks a
        // multiprocessor. The table is a function of the program and its parameters alone:
        // filled once.
        Some(entries) => {
            let levels = level_table(cx, &source, params, entries)?;
            args.push(cx.arg(&levels));
            let threads = super::chain_source::TABLE_THREADS;
            let blocks = runs.div_ceil(threads as usize).clamp(1, CHAIN_MAX_BLOCKS) as u32;
            let blocks = if entries > 256 { blocks.min(2 * cx.gpu.multiprocessors()) } else { blocks };
            let name = if vector { "chain_table_vec" } else { "chain_table" };
            cx.gpu.launch_with_shared(&source.kernel(name), (blocks, 1, 1), (threads, 1, 1), entries as u32, &args).map_err(KernelError::from)?;
        }
        None if by_column => {}
        None => {
            args.extend(q_args);
            let name = if vector { "chain_vec" } else { "chain" };
            cx.gpu.launch(&source.kernel(name), blocks, 256, &args).map_err(KernelError::from)?;
        }
    }
    Ok(Some(out))
}

/// A table program's result for every input level (or pair of levels): `entries` bytes filled
/// once by `chain_table_fill`. The table is a function of the program and its parameters alone.
pub(super) fn level_table(cx: &Ctx, source: &Source, params: &[f32], entries: usize) -> KResult<DeviceTensor> {
    Ok(cx.gpu.derived_from_weights(&[], &format!("chain_table {source:?}{}", parameter_bits(params)), || {
        let levels = cx.gpu.empty(DataType::U8, vec![entries]).map_err(KernelError::from)?;
        let fill: Vec<Arg> = std::iter::once(cx.arg(&levels)).chain(params.iter().map(|&q| Arg::F32(q))).collect();
        cx.gpu.launch(&source.kernel("chain_table_fill"), entries.div_ceil(256) as u32, 256, &fill).map_err(KernelError::from)?;
        Ok::<_, KernelError>(levels)
    })?)
}

/// Parameters as their bits, naming a table made with them.
fn parameter_bits(params: &[f32]) -> String {
    params.iter().map(|q| format!(" {:#x}", q.to_bits())).collect()
}

/// The fewest rows for which a column table (256 entries a column) is worth filling.
const COLUMN_TABLE_ROWS: usize = 512;
/// The rows a block of `chain_columns` looks up where there are blocks enough: its copy of the
/// tables (256 bytes a column) stays a quarter of its traffic (2 bytes a column a row).
const COLUMN_SHARE_ROWS: usize = 512;

/// A chain whose result is a function of one slot's level and the column (`Program::column_table`)
/// as a table of every (column, level) pair filled once (`chain_column_fill`), then looked up
/// (`chain_columns`): a few instructions an element where the dequantization, the operands'
/// steps and the quantization took tens (a Q/DQ BERT's bias-and-GELU island: 80 an element).
/// It applies where the level slot is stored as the output, rows are 16-byte multiples, and
/// every other slot varies along the innermost axis only; false (nothing launched) elsewhere.
fn by_columns(cx: &Ctx, source: &Source, l: &ChainLayout, (slots, level): (&[&DeviceTensor], usize), out: &DeviceTensor, params: &[f32]) -> KResult<bool> {
    let Some(inner) = usize::try_from(l.rank).ok().and_then(|r| r.checked_sub(1)) else { return Ok(false) };
    let columns = l.shape[inner] as usize;
    let rows = out.len() / columns.max(1);
    let per_column = (0..slots.len()).filter(|&k| k != level).all(|k| (0..inner).all(|d| l.stride[k][d] == 0) && matches!(l.stride[k][inner], 0 | 1));
    let (x, y) = (cx.arg(slots[level]), cx.arg(out));
    let aligned = [&x, &y].iter().all(|a| matches!(a, Arg::Ptr(p) if p.address() % 16 == 0));
    if l.dense >> level & 1 == 0 || columns == 0 || columns % 16 != 0 || rows < COLUMN_TABLE_ROWS || !per_column || !aligned {
        return Ok(false);
    }
    let entries = columns * 256;
    let other_slots: Vec<usize> = (0..slots.len()).filter(|&k| k != level).collect();
    let others: Vec<&DeviceTensor> = other_slots.iter().map(|&k| slots[k]).collect();
    let fill_table = || {
        let table = cx.gpu.empty(DataType::U8, vec![entries]).map_err(KernelError::from)?;
        let mut fill = vec![Arg::I32(columns as i32), Arg::ChainLayout(*l), cx.arg(&table)];
        fill.extend(others.iter().map(|t| cx.arg(t)));
        fill.extend(params.iter().map(|&q| Arg::F32(q)));
        cx.gpu.launch(&source.kernel("chain_column_fill"), entries.div_ceil(256) as u32, 256, &fill).map_err(KernelError::from)?;
        Ok::<_, KernelError>(table)
    };
    // Where the other operands are constants (a product's bias, GELU's scalars) the tables
    // are too: filled once, kept with those weights. Filling them every run was 0.21 ms of a
    // Q/DQ BERT-base's 4.3 ms of kernel time (48 islands).
    let table = match others.iter().all(|t| t.buf.outside_runs()) {
        true => {
            // The fill reads each operand at its offset plus the column times its innermost stride.
            let reads: String = other_slots.iter().map(|&k| format!(" {}:{}", l.offset[k], l.stride[k][inner])).collect();
            let what = format!("chain_columns {source:?} {columns}{reads}{}", parameter_bits(params));
            cx.gpu.derived_from_weights(&others, &what, fill_table)?
        }
        false => fill_table()?,
    };
    // Each block a tile of columns and a share of the rows: shares of COLUMN_SHARE_ROWS, fewer
    // rows where that leaves too few blocks to fill the multiprocessors.
    let tiles = columns.div_ceil(super::chain_source::COLUMN_TILE);
    let shares = rows.div_ceil(COLUMN_SHARE_ROWS).max((2 * cx.gpu.multiprocessors() as usize).div_ceil(tiles)).clamp(1, rows);
    let rows_per_block = rows.div_ceil(shares);
    let blocks = tiles * rows.div_ceil(rows_per_block);
    let args = [Arg::I32(rows as i32), Arg::I32(columns as i32), Arg::I32(rows_per_block as i32), x, y, cx.arg(&table)];
    cx.gpu.launch(&source.kernel("chain_columns"), blocks as u32, 256, &args).map_err(KernelError::from)?;
    Ok(true)
}

/// The chain kernel's compact layout of the coalesced `layouts` (three slots each, the counts
/// used): `None` past `CHAIN_RANK` dims or 32-bit offsets (the steps then run one by one).
fn chain_layout(layouts: &[(Layout, usize)]) -> Option<ChainLayout> {
    let first = layouts.first()?.0;
    let rank = usize::try_from(first.rank).ok().filter(|&r| r <= CHAIN_RANK)?;
    let shape = &first.shape[..rank];
    let elements: i64 = shape.iter().product();
    if elements >= i32::MAX as i64 {
        return None;
    }
    let fits = |v: i64| i32::try_from(v).ok();
    let mut out = ChainLayout { rank: rank.max(1) as i32, ..ChainLayout::default() };
    for (d, &n) in shape.iter().enumerate() {
        out.shape[d] = fits(n)?;
    }
    if rank == 0 {
        out.shape[0] = 1;
    }
    let dense = crate::buffer::strides_in_order(&shape.iter().map(|&n| n as usize).collect::<Vec<_>>(), &(0..rank).collect::<Vec<_>>());
    for (k, (l, used)) in layouts.iter().enumerate() {
        for w in 0..*used {
            let slot = 3 * k + w;
            let strides = &l.stride[w][..rank];
            // The largest offset read must fit too.
            let last = l.offset[w] + shape.iter().zip(strides).map(|(&n, &st)| (n - 1) * st.abs()).sum::<i64>();
            fits(last)?;
            out.offset[slot] = fits(l.offset[w])?;
            for (to, &from) in out.stride[slot].iter_mut().zip(strides) {
                *to = fits(from)?;
            }
            if l.offset[w] == 0 && strides == &dense[..] {
                out.dense |= 1 << slot;
            }
            if let Some((&inner, outer)) = strides.split_last() {
                if inner == 1 && outer.iter().all(|&st| st == 0) {
                    out.row |= 1 << slot;
                }
            }
        }
    }
    Some(out)
}

/// Whether two tensors are the same view of the same memory (one chain operand slot serves both).
fn same_view(a: &DeviceTensor, b: &DeviceTensor) -> bool {
    a.buf.ptr == b.buf.ptr && a.dtype == b.dtype && a.shape == b.shape && a.strides == b.strides
}

#[cfg(test)]
mod tests {
    use super::chain_layout;
    use crate::buffer::Layout;

    /// A layout of `shape` whose slots read with `strides` (three a layout, as the chain groups them).
    fn layouts(shape: &[i64], strides: &[&[i64]]) -> Vec<(Layout, usize)> {
        strides
            .chunks(3)
            .map(|group| {
                let mut l = Layout { rank: shape.len() as i32, ..Layout::default() };
                l.shape[..shape.len()].copy_from_slice(shape);
                for (w, s) in group.iter().enumerate() {
                    l.stride[w][..s.len()].copy_from_slice(s);
                }
                (l, group.len())
            })
            .collect()
    }

    #[test]
    fn a_chain_layout_marks_the_slots_stored_as_the_output() {
        // GRN: the running mean [N,1,1,1], x dense, a per-channel scale, the spatial norm [N,1,C].
        let l = chain_layout(&layouts(&[64, 3136, 384], &[&[1, 0, 0], &[1_204_224, 384, 1], &[0, 0, 1], &[384, 0, 1]])).expect("fits");
        assert_eq!((l.rank, &l.shape[..3]), (3, &[64, 3136, 384][..]));
        assert_eq!(l.dense, 0b0010, "only slot 1 is stored as the output");
        assert_eq!(l.row, 0b0100, "only slot 2 repeats one run of the innermost dim");
        assert_eq!(l.stride[3][..3], [384, 0, 1]);
    }

    #[test]
    fn a_chain_layout_refuses_what_32_bit_offsets_or_four_dims_cannot_hold() {
        assert!(chain_layout(&layouts(&[1 << 16, 1 << 16], &[&[1 << 16, 1]])).is_none(), "2^32 elements");
        assert!(chain_layout(&layouts(&[2, 2], &[&[1, 0], &[1 << 31, 1]])).is_none(), "an offset past 2^31");
        assert!(chain_layout(&layouts(&[2, 3, 4, 5, 6], &[&[360, 120, 30, 6, 1]])).is_none(), "five dims");
        let scalar = chain_layout(&layouts(&[], &[&[], &[]])).expect("a scalar chain");
        assert_eq!((scalar.rank, scalar.shape[0], scalar.dense), (1, 1, 0b11), "rank 0 runs as one element");
    }
}

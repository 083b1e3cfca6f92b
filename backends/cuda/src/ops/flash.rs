//! Fused scaled-dot-product attention (`kernels/attention.cu`, flash-attention 2 style) where it
//! applies: f16 / bf16 operands, head dims up to 64, at most two leading dims (outer, heads) that
//! every operand has or broadcasts, an additive mask of the same type. Q, K, V may be views (a
//! pending transpose or a slice, `DeviceTensor::strides`): the kernel reads their rows through
//! strides, so BERT's head split costs no copy, and it writes its output in the [outer,
//! sequence, heads, dim] order the head merge wants when the executor allows. Elsewhere
//! attention runs as two cuBLASLt products around a softmax (`compute::attention`).
//!
//! A Q/DQ network's attention (levels on its product, scores or probabilities; Q, K and V given
//! as levels) has a form of its own, `flash_attention_levels`: the scores of up to 128 keys kept
//! in registers (else two passes over the keys: the probabilities' grid needs each row's sum
//! first), the grids through tables as the unfused masked softmax reads them, the levels
//! dequantized as they load. It is off unless `KILN_CUDA_FLASH_ATTENTION_LEVELS=1`: on an H100
//! it ran BERT-base b32 Q/DQ at 3.00-3.03 ms against 2.96-2.97 ms for the unfused path (the
//! products around `softmax_masked_levels`), at 95-98 µs a layer in Nsight Compute, held to
//! three blocks a multiprocessor by its 168 registers (benches/gpu/QUANT.md, session 32).
//!
//! Where Q, K and V are int8 levels about zero and the probabilities have an int8 grid about
//! zero (onnxruntime's symmetric `quantize_static`), attention on levels runs
//! `attention_int8` (kernels/attention_int8.cu) instead: both products on the integer tensor
//! cores, exact int32 sums, no dequantized copy of Q, K or V. `KILN_CUDA_INT8_ATTENTION=0` turns
//! it off, for A/B timing.
//!
//! On by default; `KILN_CUDA_FLASH_ATTENTION=0` turns it off, for A/B timing.

use kiln::{invalid, AttentionParams, DataType, KernelError, LevelGrid};
use crate::ops::KResult;
use super::{layout, movement, Ctx};
use crate::buffer::{Arg, DeviceTensor, Layout};
use crate::sources::Source;

const MAX_HEAD_DIM: usize = 64;
const QUERY_ROWS_PER_BLOCK: usize = 64;
/// Keys up to which `attention_int8` keeps every score in registers (else `attention_int8_long`).
const INTEGER_KEYS_IN_REGISTERS: usize = 128;
const HAS_MASK: i32 = 1;
const ZERO_NAN_ROWS: i32 = 2;
const VECTOR_LOADS: i32 = 4;
const VECTOR_MASK: i32 = 8;
/// Where `flash_attention_levels` reads Q, K or V from (kernels/attention.cu's FA_SOURCE_*).
const SOURCE_FLOAT: i32 = 0;
const SOURCE_I8: i32 = 1;
const SOURCE_U8: i32 = 2;

/// Per leading dim (`shape` padded on the left to `lead.len()`), the operand's element stride
/// (`strides` are its own, one per axis): 0 where it broadcasts. `None` when it does not
/// broadcast onto `lead`.
fn lead_strides(shape: &[usize], strides: &[i64], lead: &[usize]) -> Option<Vec<i64>> {
    let own = shape.len().checked_sub(2)?;
    if own > lead.len() {
        return None;
    }
    let mut out = vec![0i64; lead.len()];
    for d in 0..own {
        let at = d + lead.len() - own;
        out[at] = match shape[d] {
            n if n == lead[at] && n != 1 => strides[d],
            1 => 0,
            _ => return None,
        };
    }
    Some(out)
}

/// `(outer, head)` strides from strides over at most two leading dims.
fn two_level(strides: &[i64]) -> (i64, i64) {
    match strides {
        [] => (0, 0),
        [h] => (0, *h),
        [o, h] => (*o, *h),
        _ => unreachable!("callers keep at most two leading dims"),
    }
}

pub fn enabled() -> bool {
    std::env::var("KILN_CUDA_FLASH_ATTENTION").as_deref() != Ok("0")
}

/// Whether attention on levels runs fused too (off by default: slower than unfused so far).
pub fn levels_enabled() -> bool {
    std::env::var("KILN_CUDA_FLASH_ATTENTION_LEVELS").as_deref() == Ok("1")
}

static INTEGER_ATTENTIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many attention layers this process has run on `attention_int8`.
pub fn integer_attentions_enqueued() -> u64 {
    INTEGER_ATTENTIONS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Whether the two-pass integer kernel writes the output's levels itself
/// (`KILN_CUDA_INT8_ATTENTION_LONG_LEVELS=1`); by default it writes floats, which
/// compute::attention quantizes in their layout. Its registers are at the 128 limit: a first
/// form of the levels' store spilled in its key loops, and ViT-B/16 b32 Q/DQ ran 4.50 ms with it
/// against 4.44-4.45 without (H200, same tactics). The store on its own no longer spills, and
/// still ViT ran 4.396-4.400 ms with it against 4.384-4.387 without (session 50).
fn long_levels_enabled() -> bool {
    std::env::var("KILN_CUDA_INT8_ATTENTION_LONG_LEVELS").as_deref() == Ok("1")
}

/// Whether attention on int8 levels may run on the integer tensor cores (on by default).
fn integer_enabled() -> bool {
    std::env::var("KILN_CUDA_INT8_ATTENTION").as_deref() != Ok("0")
}

/// Attention that `attention_int8` computes: Q, K, V and the probabilities on int8 grids about
/// zero.
struct IntegerForm {
    /// Turns Q·Kᵀ's integer sums into the products the graph stores before its grids.
    product_factor: f32,
    /// Turns P·V's integer sums into the output.
    output_factor: f32,
    /// The probabilities' grid.
    probs: LevelGrid,
}

/// The integer form of this attention, `None` where `attention_int8` does not compute it.
fn integer_form(p: &AttentionParams, q: &DeviceTensor, k: &DeviceTensor, v: &DeviceTensor) -> Option<IntegerForm> {
    let about_zero = |g: Option<LevelGrid>| g.filter(|g| g.levels == DataType::I8 && g.zero == 0);
    let (gq, gk, gv, probs) =
        (about_zero(p.input_grid(0))?, about_zero(p.input_grid(1))?, about_zero(p.input_grid(2))?, about_zero(p.probs_levels)?);
    if !integer_enabled() || [q, k, v].iter().any(|t| t.dtype != DataType::I8) {
        return None;
    }
    Some(IntegerForm { product_factor: gq.scale * gk.scale * p.stored_product_factor(), output_factor: probs.scale * gv.scale, probs })
}

/// `grid`'s level of every `dtype` (f16 or bf16) value, by the value's bits, on the device once
/// per grid: the level less the grid's lowest where `offset` (an index into a table of the
/// levels' values), else the level's byte.
fn level_table(cx: &Ctx, dtype: DataType, grid: &LevelGrid, offset: bool) -> KResult<DeviceTensor> {
    let name = format!("levels of {dtype:?} values on {:08x}/{}/{:?}/{offset}", grid.scale.to_bits(), grid.zero, grid.levels);
    let table = cx.gpu.named_table(name.into_bytes(), || {
        let levels = kiln::plan::requantization::levels_of_16bit_floats(dtype, grid.scale, grid.zero, grid.levels)?;
        let lowest = if offset { grid.range().0 } else { 0 };
        // A level's byte: its two's complement for int8 (`as u8` keeps the low byte).
        let bytes = levels.iter().map(|&l| (l - lowest) as u8).collect();
        kiln::HostTensor::new(vec![levels.len()], kiln::TensorData::U8(bytes)).map_err(|e| e.to_string())
    })?;
    Ok(table)
}

/// `t` with its last axis contiguous (row-major bytes unless it already is).
fn with_unit_inner(cx: &Ctx, t: &DeviceTensor) -> KResult<DeviceTensor> {
    if t.element_strides().last() == Some(&1) {
        return Ok(t.clone());
    }
    layout::to_row_major(cx, t)
}

/// K with its head dim contiguous, and whether it is still given as Kᵀ: a Kᵀ whose head dim is
/// not contiguous (row-major [lead…, d, sk]) is transposed into [lead…, sk, d] bytes.
fn key_with_unit_inner(cx: &Ctx, k: &DeviceTensor, transposed: bool) -> KResult<(DeviceTensor, bool)> {
    let r = k.shape.len();
    if !transposed {
        return Ok((with_unit_inner(cx, k)?, false));
    }
    if k.element_strides()[r - 2] == 1 {
        return Ok((k.clone(), true));
    }
    let mut perm: Vec<usize> = (0..r).collect();
    perm.swap(r - 2, r - 1);
    Ok((movement::transpose(cx, k, &perm)?, false))
}

/// The output's strides when its head merge waits: packed [outer, sequence, heads, dim].
fn merged_heads_strides(shape: &[usize]) -> Option<Vec<i64>> {
    match shape.len() {
        4 => Some(crate::buffer::strides_in_order(shape, &[0, 2, 1, 3])),
        3 => Some(crate::buffer::strides_in_order(shape, &[1, 0, 2])),
        _ => None,
    }
}

/// The fused kernel's output, or `None` where it does not apply.
pub fn attention(
    cx: &Ctx,
    p: &AttentionParams,
    q: &DeviceTensor,
    k: &DeviceTensor,
    v: &DeviceTensor,
    mask: Option<&DeviceTensor>,
    out_shape: &[usize],
) -> KResult<Option<DeviceTensor>> {
    let leveled = p.has_levels() || p.input_levels.is_some();
    let integer = integer_form(p, q, k, v);
    if leveled && integer.is_none() && !levels_enabled() {
        return Ok(None);
    }
    let dtype = p.input_levels.map_or(q.dtype, |l| l.to);
    let suffix = match dtype {
        DataType::F16 => "f16",
        DataType::BF16 => "bf16",
        _ => return Ok(None),
    };
    // Each of Q, K and V is the float type, or the levels its grid reads.
    let given = |slot: usize, t: &DeviceTensor| p.input_grid(slot).map_or(t.dtype == dtype, |g| t.dtype == g.levels);
    if !enabled() || ![q, k, v].into_iter().enumerate().all(|(slot, t)| given(slot, t)) || mask.is_some_and(|m| m.dtype != dtype) {
        return Ok(None);
    }
    let levels = match leveled {
        true => match super::compute::softmax_level_args(p, p.multiplier()) {
            Some(args) => Some(args),
            None => return Ok(None),
        },
        false => None,
    };
    let (qs, ks, vs) = (&q.shape, &k.shape, &v.shape);
    if qs.len() < 2 || ks.len() < 2 || vs.len() < 2 || out_shape.len() < 2 || out_shape.len() > 4 {
        return Ok(None);
    }
    let (sq, d) = (qs[qs.len() - 2], qs[qs.len() - 1]);
    let (sk, kd) =
        if p.key_transposed { (ks[ks.len() - 1], ks[ks.len() - 2]) } else { (ks[ks.len() - 2], ks[ks.len() - 1]) };
    let (vk, dv) = (vs[vs.len() - 2], vs[vs.len() - 1]);
    let lead = &out_shape[..out_shape.len() - 2];
    if kd != d
        || vk != sk
        || d == 0
        || d > MAX_HEAD_DIM
        || dv == 0
        || dv > MAX_HEAD_DIM
        || lead.len() > 2
        || out_shape[out_shape.len() - 2..] != [sq, dv]
    {
        return Ok(None);
    }
    let (q, v) = (with_unit_inner(cx, q)?, with_unit_inner(cx, v)?);
    let (k, key_transposed) = key_with_unit_inner(cx, k, p.key_transposed)?;
    let (q_st, k_st, v_st) = (q.element_strides(), k.element_strides(), v.element_strides());
    let k_row = if key_transposed { k_st[k_st.len() - 1] } else { k_st[k_st.len() - 2] };
    let (Some(q_lead), Some(k_lead), Some(v_lead)) =
        (lead_strides(&q.shape, &q_st, lead), lead_strides(&k.shape, &k_st, lead), lead_strides(&v.shape, &v_st, lead))
    else {
        return Ok(None);
    };
    let (outer, heads) = match lead {
        [] => (1, 1),
        [h] => (1, *h),
        [o, h] => (*o, *h),
        _ => return Ok(None),
    };
    let q_tiles = sq.div_ceil(QUERY_ROWS_PER_BLOCK);
    let blocks = q_tiles * outer * heads;
    if blocks == 0 || sk == 0 {
        return Ok(None);
    }
    // The integer kernel writes the output's levels where its QuantizeLinear is folded in; the
    // other kernels write floats, which compute::attention then quantizes.
    let out_levels = p.output_levels.filter(|_| integer.is_some() && (sk <= INTEGER_KEYS_IN_REGISTERS || long_levels_enabled()));
    let mut out = cx.gpu.empty(out_levels.map_or(dtype, |g| g.levels), out_shape.to_vec()).map_err(KernelError::from)?;
    if cx.view_output.get() {
        // The order its reader transposes it to where the executor knows it (the head dim stays
        // innermost: the kernel stores rows of it), else the usual head merge's.
        let order = cx.write_order.borrow().clone().filter(|o| o.len() == out_shape.len() && o.last() == Some(&(out_shape.len() - 1)));
        out.strides = order.map_or_else(|| merged_heads_strides(out_shape), |o| Some(crate::buffer::strides_in_order(out_shape, &o)));
    }
    let o_st = out.element_strides();
    let o_lead = lead_strides(out_shape, &o_st, lead).ok_or("the output does not fit its own shape")?;
    let mut l = Layout::default();
    for (i, st) in [&q_lead, &k_lead, &v_lead, &o_lead].into_iter().enumerate() {
        (l.stride[0][2 * i], l.stride[0][2 * i + 1]) = two_level(st);
    }
    let rows = [q_st[q_st.len() - 2], k_row, v_st[v_st.len() - 2], o_st[o_st.len() - 2]];
    l.stride[2][..4].copy_from_slice(&rows);
    let mut flags = if p.zero_nan_rows { ZERO_NAN_ROWS } else { 0 };
    if let Some(m) = mask {
        // The mask broadcasts onto (lead…, sq, sk): its own row / column strides may be 0 too.
        if m.shape.len() > lead.len() + 2 {
            return Ok(None);
        }
        let mut full = vec![1usize; lead.len() + 2 - m.shape.len()];
        full.extend(&m.shape);
        let (mr, mc) = (full[full.len() - 2], full[full.len() - 1]);
        if (mr != sq && mr != 1) || (mc != sk && mc != 1) {
            return Ok(None);
        }
        let m_st = super::contiguous_strides(&full);
        let Some(m_lead) = lead_strides(&full, &m_st, lead) else { return Ok(None) };
        (l.stride[1][0], l.stride[1][1]) = two_level(&m_lead);
        l.stride[1][2] = if mr == 1 { 0 } else { mc as i64 };
        l.stride[1][3] = if mc == 1 { 0 } else { 1 };
        flags |= HAS_MASK;
        // The mask's tile in 16-byte rows: keys contiguous, every row start aligned.
        if l.stride[1][3] == 1 && sk % 8 == 0 && cx.gpu.ptr(&m.buf) % 16 == 0 && l.stride[1][..3].iter().all(|s| s % 8 == 0) {
            flags |= VECTOR_MASK;
        }
    }
    // 16-byte row loads need every row start 16-byte aligned and whole 16-byte pieces: multiples
    // of 8 16-bit elements (of 16 levels) from aligned buffers.
    let aligned = [(&q, d), (&k, d), (&v, dv), (&out, dv)].into_iter().enumerate().all(|(i, (t, cols))| {
        let piece = if t.dtype.is_8bit_integer() { 16 } else { 8 };
        cx.gpu.ptr(&t.buf).is_multiple_of(16) && cols.is_multiple_of(piece) && [rows[i], l.stride[0][2 * i], l.stride[0][2 * i + 1]].iter().all(|s| s % piece as i64 == 0)
    });
    if aligned {
        flags |= VECTOR_LOADS;
    }
    // The integer kernel copies whole 16-byte pieces of levels.
    let integer = integer.filter(|_| aligned);
    if (leveled && integer.is_none() && !levels_enabled()) || (out_levels.is_some() && integer.is_none()) {
        return Ok(None);
    }
    let blocks =
        u32::try_from(blocks).map_err(|_| invalid!("attention over {blocks} blocks is too many for one launch"))?;
    let mask_arg = mask.map_or(Arg::NULL, |m| cx.arg(m));
    let mut args = vec![
        Arg::I64(sq as i64),
        Arg::I64(sk as i64),
        Arg::I32(d as i32),
        Arg::I32(dv as i32),
        Arg::I64(heads as i64),
        Arg::I64(q_tiles as i64),
        Arg::Layout(l),
    ];
    let kernel = match (levels, integer) {
        (None, _) => {
            args.extend([Arg::F32(p.multiplier()), Arg::I32(flags)]);
            Source::Attention.kernel(format!("flash_attention_{suffix}"))
        }
        (Some(grids), Some(form)) => {
            args.extend([Arg::F32(form.product_factor), Arg::F32(form.output_factor), Arg::I32(flags)]);
            args.extend(grids);
            // The first grid the scores meet, and the probabilities', as tables by value.
            let first = p.product_levels.or(p.scores_levels).map(|g| level_table(cx, dtype, &g, true)).transpose()?;
            args.extend([first.as_ref().map_or(Arg::NULL, |t| cx.arg(t)), cx.arg(&level_table(cx, dtype, &form.probs, false)?)]);
            let out_table = out_levels.map(|g| level_table(cx, dtype, &g, false)).transpose()?;
            args.push(out_table.as_ref().map_or(Arg::NULL, |t| cx.arg(t)));
            let (name, form) = match sk <= INTEGER_KEYS_IN_REGISTERS {
                true => ("attention_int8", "every score in registers"),
                false => ("attention_int8_long", "two passes over the keys"),
            };
            if tracing::enabled!(target: "kiln::int8", tracing::Level::INFO) {
                let writes = out_levels.map_or(String::new(), |g| format!(", writing its output's {} levels", g.levels));
                super::quant::say_once(format!(
                    "attention on int8 levels ({sq} queries × {sk} keys, head dim {d}) runs on the integer tensor cores ({name}: {form}{writes})"
                ));
            }
            INTEGER_ATTENTIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let levels = if out_levels.is_some() { "_levels" } else { "" };
            // No mask, or one mask row for every query: the kernel keeps one row a key tile.
            let rows = if mask.is_none() || l.stride[1][2] == 0 { "_rows" } else { "" };
            Source::AttentionInt8.kernel(format!("{name}{levels}{rows}_{suffix}"))
        }
        (Some(grids), None) => {
            args.extend([Arg::F32(p.stored_product_factor()), Arg::I32(flags)]);
            for slot in 0..3 {
                args.extend(match p.input_grid(slot) {
                    Some(g) => [Arg::I32(if g.levels == DataType::U8 { SOURCE_U8 } else { SOURCE_I8 }), Arg::F32(g.scale), Arg::I32(g.zero)],
                    None => [Arg::I32(SOURCE_FLOAT), Arg::F32(1.0), Arg::I32(0)],
                });
            }
            args.extend(grids);
            Source::Attention.kernel(format!("flash_attention_levels_{suffix}"))
        }
    };
    args.extend([cx.arg(&q), cx.arg(&k), cx.arg(&v), mask_arg, cx.arg(&out)]);
    cx.gpu.launch(&kernel, blocks, 128, &args).map_err(KernelError::from)?;
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::lead_strides;

    #[test]
    fn leading_strides_broadcast_or_refuse() {
        let row_major = |s: &[usize]| super::super::contiguous_strides(s);
        let lead = [2, 12];
        for (shape, expected) in [
            (vec![2, 12, 128, 64], Some(vec![12 * 128 * 64, 128 * 64])),
            (vec![12, 128, 64], Some(vec![0, 128 * 64])),
            (vec![2, 1, 1, 128], Some(vec![128, 0])),
            (vec![3, 128, 64], None),
            (vec![1, 2, 12, 8, 8], None),
        ] {
            assert_eq!(lead_strides(&shape, &row_major(&shape), &lead), expected, "{shape:?}");
        }
        // A [2, 128, 12, 64] projection viewed as [2, 12, 128, 64]: heads 64 apart.
        assert_eq!(lead_strides(&[2, 12, 128, 64], &[128 * 768, 64, 768, 1], &lead), Some(vec![128 * 768, 64]));
    }
}

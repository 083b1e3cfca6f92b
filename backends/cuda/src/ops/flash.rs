//! Fused scaled-dot-product attention (`kernels/attention.cu`, flash-attention style) where it
//! applies: f16 / bf16 operands, head dims up to 64, at most two leading dims (outer, heads) that
//! every operand has or broadcasts, an additive mask of the same type. Elsewhere attention runs
//! as two cuBLASLt products around a softmax (`compute::attention`).
//!
//! Opt-in (`KILN_CUDA_FLASH_ATTENTION=1`): on the H200, BERT-base fp16 at batch 32 and sequence
//! 128 ran 10.81 ms of GPU time unfused against 11.21 ms with this kernel, so the measured
//! faster path is the default until the choice is a timed tactic.

use super::Ctx;
use crate::device::{Arg, DeviceTensor, Layout};
use kiln::{AttentionParams, DataType};

const MAX_HEAD_DIM: usize = 64;
const QUERY_ROWS_PER_BLOCK: usize = 64;

/// Per leading dim (padded on the left to `lead.len()`), the operand's element stride: its
/// contiguous stride, or 0 where it broadcasts. `None` when it does not broadcast onto `lead`.
fn lead_strides(shape: &[usize], lead: &[usize]) -> Option<Vec<i64>> {
    let own = shape.len().checked_sub(2)?;
    if own > lead.len() {
        return None;
    }
    let mut strides = vec![0i64; lead.len()];
    let mut step: i64 = shape[own..].iter().product::<usize>() as i64;
    for d in (0..own).rev() {
        let at = d + lead.len() - own;
        strides[at] = match shape[d] {
            n if n == lead[at] && n != 1 => step,
            1 => 0,
            _ => return None,
        };
        step *= shape[d] as i64;
    }
    Some(strides)
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
    std::env::var("KILN_CUDA_FLASH_ATTENTION").as_deref() == Ok("1")
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
) -> Result<Option<DeviceTensor>, String> {
    let dtype = q.dtype;
    let suffix = match dtype {
        DataType::F16 => "f16",
        DataType::BF16 => "bf16",
        _ => return Ok(None),
    };
    if !enabled() || k.dtype != dtype || v.dtype != dtype || mask.is_some_and(|m| m.dtype != dtype) {
        return Ok(None);
    }
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
        || out_shape[out_shape.len() - 2..] != [sq, dv]
    {
        return Ok(None);
    }
    let (Some(q_st), Some(k_st), Some(v_st)) = (lead_strides(qs, lead), lead_strides(ks, lead), lead_strides(vs, lead))
    else {
        return Ok(None);
    };
    let mut l = Layout::default();
    let o_st = lead_strides(out_shape, lead).ok_or("the output does not fit its own shape")?;
    for (i, st) in [&q_st, &k_st, &v_st, &o_st].into_iter().enumerate() {
        (l.stride[0][2 * i], l.stride[0][2 * i + 1]) = two_level(st);
    }
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
        let Some(m_st) = lead_strides(&full, lead) else { return Ok(None) };
        (l.stride[1][0], l.stride[1][1]) = two_level(&m_st);
        l.stride[1][2] = if mr == 1 { 0 } else { mc as i64 };
        l.stride[1][3] = if mc == 1 { 0 } else { 1 };
    }
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
    let out = cx.gpu.empty(dtype, out_shape.to_vec()).map_err(|e| e.to_string())?;
    let blocks =
        u32::try_from(blocks).map_err(|_| format!("attention over {blocks} blocks is too many for one launch"))?;
    let scale = p.multiplier();
    let mask_arg = mask.map_or(Arg::Ptr(0), |m| cx.arg(m));
    let args = [
        Arg::I64(sq as i64),
        Arg::I64(sk as i64),
        Arg::I32(d as i32),
        Arg::I32(dv as i32),
        Arg::I64(heads as i64),
        Arg::I64(q_tiles as i64),
        Arg::Layout(l),
        Arg::F32(scale),
        Arg::I32(mask.is_some() as i32),
        Arg::I32(p.key_transposed as i32),
        Arg::I32(p.zero_nan_rows as i32),
        cx.arg(q),
        cx.arg(k),
        cx.arg(v),
        mask_arg,
        cx.arg(&out),
    ];
    cx.gpu.launch(&format!("flash_attention_{suffix}"), blocks, 128, &args).map_err(|e| e.to_string())?;
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::lead_strides;

    #[test]
    fn leading_strides_broadcast_or_refuse() {
        assert_eq!(lead_strides(&[2, 12, 128, 64], &[2, 12]), Some(vec![12 * 128 * 64, 128 * 64]));
        assert_eq!(lead_strides(&[12, 128, 64], &[2, 12]), Some(vec![0, 128 * 64]));
        assert_eq!(lead_strides(&[2, 1, 1, 128], &[2, 12]), Some(vec![128, 0]));
        assert_eq!(lead_strides(&[3, 128, 64], &[2, 12]), None);
        assert_eq!(lead_strides(&[1, 2, 12, 8, 8], &[2, 12]), None);
    }
}

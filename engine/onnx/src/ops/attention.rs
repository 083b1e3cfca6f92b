//! Attention (opsets 23–25), decomposed onto MatrixMultiply, SoftMax, Elementwise and
//! Select layers following the ONNX reference: optional KV cache, boolean or additive
//! masks, causal and sliding-window masking (offset-aligned by the cache or by
//! `nonpad_kv_seqlen`), grouped-query heads, softcap and the `qk_matmul_output` modes.

use super::build::{binary, fixed_dim, iota, reduce, with_scalar};
use super::Registry;
use crate::context::NodeContext;
use crate::error::ImportError;
use crate::tensor::{self, dtype_from_onnx};
use kiln::{
    ActivationKind, DataType, ElementwiseOp, GatherMode, LayerKind, MatrixOp, ReduceOp, ShuffleParams, TensorId,
};

pub(super) fn register(r: &mut Registry) {
    r.add("Attention", &[23, 24, 25], attention);
}

/// Where the causal / window frontier sits for each query row.
enum Offset {
    /// The same for every batch (past length, or 0).
    Fixed(i64),
    /// Per batch, as an i64 `[B, 1, 1, 1]` tensor (`nonpad_kv_seqlen - q_len`).
    PerBatch(TensorId),
}

/// `lo <= (i + offset) - j <= hi` keeps key `j` for query `i`.
#[derive(Clone, Copy)]
struct Band {
    lo: Option<i64>,
    hi: Option<i64>,
}

impl Band {
    fn allows(&self, diff: i64) -> bool {
        self.lo.is_none_or(|lo| diff >= lo) && self.hi.is_none_or(|hi| diff <= hi)
    }
}

/// `[B, S, H*D]` → `[B, H, S, D]`.
fn split_heads(ctx: &mut NodeContext, part: &str, x: TensorId, heads: i64) -> Result<TensorId, ImportError> {
    let params = ShuffleParams {
        reshape: Some(vec![0, 0, heads, -1]),
        second_transpose: vec![0, 2, 1, 3],
        zero_is_placeholder: true,
        ..Default::default()
    };
    ctx.shuffle(part, x, params)
}

fn heads_attr(ctx: &NodeContext, name: &str) -> Result<i64, ImportError> {
    match ctx.attrs.opt_int(name)? {
        Some(h) if h > 0 => Ok(h),
        Some(h) => Err(ctx.invalid(format!("{name} must be positive, got {h}"))),
        None => Err(ctx.invalid(format!("{name} is required for 3-D inputs"))),
    }
}

/// `cond ? 0 : -inf` in `dtype`.
fn to_bias(ctx: &mut NodeContext, part: &str, cond: TensorId, dtype: DataType) -> Result<TensorId, ImportError> {
    let zero = ctx.scalar(&format!("{part} zero"), dtype, 0.0)?;
    let neg_inf = ctx.scalar(&format!("{part} -inf"), dtype, f64::NEG_INFINITY)?;
    ctx.add(part, LayerKind::Select, &[cond, zero, neg_inf])
}

fn accumulate(ctx: &mut NodeContext, part: &str, bias: Option<TensorId>, t: TensorId) -> Result<TensorId, ImportError> {
    match bias {
        None => Ok(t),
        Some(b) => binary(ctx, part, ElementwiseOp::Sum, b, t),
    }
}

/// The additive bias (0 / -inf) of a causal or window band over `[q, kv]`.
fn band_bias(
    ctx: &mut NodeContext,
    part: &str,
    band: Band,
    offset: &Offset,
    (q, kv): (usize, usize),
    dtype: DataType,
) -> Result<TensorId, ImportError> {
    match offset {
        Offset::Fixed(off) => {
            let values: Vec<f64> = (0..q as i64)
                .flat_map(|i| (0..kv as i64).map(move |j| (i, j)))
                .map(|(i, j)| if band.allows(i + off - j) { 0.0 } else { f64::NEG_INFINITY })
                .collect();
            let value = tensor::from_f64(dtype, vec![q, kv], &values).map_err(|e| ctx.invalid(e))?;
            ctx.constant(part, value)
        }
        &Offset::PerBatch(offset) => {
            let i = iota(ctx, &format!("{part} rows"), q, 4, 2)?;
            let j = iota(ctx, &format!("{part} columns"), kv, 4, 3)?;
            let frontier = binary(ctx, &format!("{part} frontier"), ElementwiseOp::Sum, i, offset)?;
            let diff = binary(ctx, &format!("{part} diff"), ElementwiseOp::Sub, frontier, j)?;
            let mut allowed = None;
            for (bound, op, name) in
                [(band.lo, ElementwiseOp::GreaterOrEqual, "lower"), (band.hi, ElementwiseOp::LessOrEqual, "upper")]
            {
                let Some(bound) = bound else { continue };
                let c = ctx.const_i64(&format!("{part} {name} bound"), &[bound])?;
                let ok = binary(ctx, &format!("{part} {name}"), op, diff, c)?;
                allowed = Some(match allowed {
                    None => ok,
                    Some(a) => binary(ctx, &format!("{part} both"), ElementwiseOp::And, a, ok)?,
                });
            }
            let allowed = allowed.ok_or_else(|| ctx.invalid("an unbounded band needs no mask"))?;
            to_bias(ctx, part, allowed, dtype)
        }
    }
}

/// The mask input as an additive bias in `dtype`, padded with -inf up to `kv` keys.
fn mask_bias(ctx: &mut NodeContext, mask: TensorId, kv: usize, dtype: DataType) -> Result<TensorId, ImportError> {
    let bias = if ctx.dtype(mask) == DataType::Bool {
        to_bias(ctx, "mask bias", mask, dtype)?
    } else {
        ctx.cast("mask cast", mask, dtype)?
    };
    let rank = ctx.rank(bias);
    if rank == 0 {
        return Err(ctx.invalid("attn_mask must have at least one dimension"));
    }
    let last = fixed_dim(ctx, bias, rank - 1, "attn_mask")?;
    if last >= kv {
        if last > kv {
            return Err(ctx.invalid(format!("attn_mask covers {last} keys but there are only {kv}")));
        }
        return Ok(bias);
    }
    let mut shape = ctx.fixed_dims(bias).ok_or_else(|| ctx.unsupported("a shorter attn_mask with dynamic dims"))?;
    shape[rank - 1] = kv - last;
    let pad = ctx.constant("mask padding", tensor::filled(dtype, shape, f64::NEG_INFINITY))?;
    ctx.add("mask padded", LayerKind::Concatenation { axis: rank - 1 }, &[bias, pad])
}

fn attention(ctx: &mut NodeContext) -> Result<Vec<TensorId>, ImportError> {
    let (mut q, mut k, mut v) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
    let dtype = ctx.dtype(q);
    if !dtype.is_float() {
        return Err(ctx.unsupported(format!("{dtype} inputs (Attention needs floating point)")));
    }
    let rank = ctx.rank(q);
    if ctx.rank(k) != rank || ctx.rank(v) != rank || !(rank == 3 || rank == 4) {
        return Err(ctx.invalid("Q, K and V must all be 3-D or all be 4-D"));
    }
    if rank == 3 {
        let (hq, hkv) = (heads_attr(ctx, "q_num_heads")?, heads_attr(ctx, "kv_num_heads")?);
        q = split_heads(ctx, "Q heads", q, hq)?;
        k = split_heads(ctx, "K heads", k, hkv)?;
        v = split_heads(ctx, "V heads", v, hkv)?;
    } else if ctx.version >= 25 && (ctx.attrs.has("q_num_heads") || ctx.attrs.has("kv_num_heads")) {
        return Err(ctx.invalid("q_num_heads and kv_num_heads must not be set for 4-D inputs"));
    }
    let mask = ctx.opt_input(3);
    let (past_key, past_value) = (ctx.opt_input(4), ctx.opt_input(5));
    let nonpad = ctx.opt_input(6);
    if past_key.is_some() != past_value.is_some() {
        return Err(ctx.invalid("past_key and past_value must be given together"));
    }
    if nonpad.is_some() && past_key.is_some() {
        return Err(ctx.invalid("nonpad_kv_seqlen cannot be combined with past_key/past_value"));
    }
    let (left, right) = (ctx.attrs.int("left_window_size", -1)?, ctx.attrs.int("right_window_size", -1)?);
    if left < -1 || right < -1 {
        return Err(ctx.invalid("window sizes must be -1 or nonnegative"));
    }
    let windowed = left >= 0 || right >= 0;
    let is_causal = ctx.attrs.flag("is_causal", false)?;
    let softcap = ctx.attrs.float("softcap", 0.0)?;
    let mode = ctx.attrs.int("qk_matmul_output_mode", 0)?;
    if !(0..=3).contains(&mode) {
        return Err(ctx.invalid(format!("qk_matmul_output_mode must be 0..=3, got {mode}")));
    }

    let scale = match ctx.attrs.opt_float("scale")? {
        Some(s) => s as f64,
        None => 1.0 / (fixed_dim(ctx, q, 3, "Q head size")? as f64).sqrt(),
    };
    // The reference scales Q and K by sqrt(scale) each, rounded to the input type.
    let root = ctx.scalar("scale", dtype, scale.sqrt())?;

    if let (Some(pk), Some(pv)) = (past_key, past_value) {
        k = ctx.add("present_key", LayerKind::Concatenation { axis: 2 }, &[pk, k])?;
        v = ctx.add("present_value", LayerKind::Concatenation { axis: 2 }, &[pv, v])?;
    }
    let (present_key, present_value) = if past_key.is_some() {
        (k, v)
    } else {
        (ctx.add("present_key", LayerKind::Identity, &[k])?, ctx.add("present_value", LayerKind::Identity, &[v])?)
    };

    // ---- the additive bias ----
    let needs_lengths = mask.is_some() || is_causal || windowed || nonpad.is_some();
    let mut bias = None;
    if needs_lengths {
        let q_len = fixed_dim(ctx, q, 2, "Q sequence")?;
        let kv_len = fixed_dim(ctx, k, 2, "K sequence")?;
        if let Some(m) = mask {
            bias = Some(mask_bias(ctx, m, kv_len, dtype)?);
        }
        let nonpad64 = match nonpad {
            Some(n) => {
                let n = ctx.cast("nonpad cast", n, DataType::I64)?;
                Some(ctx.reshape("nonpad per batch", n, vec![-1, 1, 1, 1])?)
            }
            None => None,
        };
        let offset = match (past_key, nonpad64) {
            (Some(pk), _) => Offset::Fixed(fixed_dim(ctx, pk, 2, "past_key sequence")? as i64),
            (None, Some(n)) => {
                let q_const = ctx.const_i64("query length", &[q_len as i64])?;
                Offset::PerBatch(binary(ctx, "offset", ElementwiseOp::Sub, n, q_const)?)
            }
            (None, None) => Offset::Fixed(0),
        };
        if is_causal {
            let causal = band_bias(ctx, "causal", Band { lo: Some(0), hi: None }, &offset, (q_len, kv_len), dtype)?;
            bias = Some(accumulate(ctx, "causal bias", bias, causal)?);
        }
        if windowed {
            let band = Band { lo: (right >= 0).then_some(-right), hi: (left >= 0).then_some(left) };
            let window = band_bias(ctx, "window", band, &offset, (q_len, kv_len), dtype)?;
            bias = Some(accumulate(ctx, "window bias", bias, window)?);
        }
        if let Some(n) = nonpad64 {
            let j = iota(ctx, "key positions", kv_len, 4, 3)?;
            let valid = binary(ctx, "key valid", ElementwiseOp::Less, j, n)?;
            let padding = to_bias(ctx, "padding", valid, dtype)?;
            bias = Some(accumulate(ctx, "padding bias", bias, padding)?);
        }
    }

    // ---- grouped-query heads ----
    let hq = fixed_dim(ctx, q, 1, "Q heads")?;
    let hkv = fixed_dim(ctx, k, 1, "K heads")?;
    if hq != hkv {
        if hkv == 0 || hq % hkv != 0 || fixed_dim(ctx, v, 1, "V heads")? != hkv {
            return Err(ctx.invalid(format!("{hq} query heads cannot be grouped over {hkv} key/value heads")));
        }
        let reps = hq / hkv;
        let indices: Vec<i64> = (0..hq).map(|h| (h / reps) as i64).collect();
        let indices = ctx.const_i64("head groups", &indices)?;
        let gather = LayerKind::Gather { mode: GatherMode::Default { axis: 1 } };
        k = ctx.add("K grouped", gather.clone(), &[k, indices])?;
        v = ctx.add("V grouped", gather, &[v, indices])?;
    }

    // ---- scores ----
    let qs = binary(ctx, "Q scaled", ElementwiseOp::Prod, q, root)?;
    let ks = binary(ctx, "K scaled", ElementwiseOp::Prod, k, root)?;
    let matmul = LayerKind::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::Transpose };
    let mut scores = ctx.add("QK", matmul, &[qs, ks])?;
    if softcap > 0.0 {
        let scaled = with_scalar(ctx, "softcap divide", ElementwiseOp::Div, scores, softcap as f64)?;
        let capped = ctx.add("softcap tanh", LayerKind::Activation { kind: ActivationKind::Tanh }, &[scaled])?;
        scores = with_scalar(ctx, "softcap", ElementwiseOp::Prod, capped, softcap as f64)?;
    }
    let biased = accumulate(ctx, "QK biased", bias, scores)?;
    let softmax_input = match ctx.attrs.opt_int("softmax_precision")? {
        Some(code) => {
            let to = dtype_from_onnx(code as i32).map_err(|e| ctx.unsupported(e))?;
            if !to.is_float() {
                return Err(ctx.invalid(format!("softmax_precision must be a floating-point type, got {to}")));
            }
            ctx.cast("softmax precision", biased, to)?
        }
        None => biased,
    };
    let last = ctx.rank(softmax_input) - 1;
    let mut probs = ctx.add("softmax", LayerKind::SoftMax { axis: last }, &[softmax_input])?;
    if let Some(b) = bias {
        // A query row whose every key is masked attends nothing: its probabilities are 0.
        let b_rank = ctx.rank(b);
        let row_max = reduce(ctx, "bias row max", ReduceOp::Max, b, vec![b_rank - 1], true)?;
        let neg_inf = ctx.scalar("row masked -inf", ctx.dtype(b), f64::NEG_INFINITY)?;
        let masked = binary(ctx, "row masked", ElementwiseOp::Equal, row_max, neg_inf)?;
        let zero = ctx.scalar("masked row zero", ctx.dtype(probs), 0.0)?;
        probs = ctx.add("softmax guarded", LayerKind::Select, &[masked, zero, probs])?;
    }
    let probs = ctx.cast("softmax cast", probs, dtype)?;
    let qk_output = match mode {
        2 => biased,
        3 => probs,
        _ => scores,
    };
    let matmul = LayerKind::MatrixMultiply { op_a: MatrixOp::None, op_b: MatrixOp::None };
    let mut y = ctx.add("PV", matmul, &[probs, v])?;
    if rank == 3 {
        let params = ShuffleParams {
            first_transpose: vec![0, 2, 1, 3],
            reshape: Some(vec![0, 0, -1]),
            zero_is_placeholder: true,
            ..Default::default()
        };
        y = ctx.shuffle("Y merged heads", y, params)?;
    }
    Ok(vec![y, present_key, present_value, qk_output])
}

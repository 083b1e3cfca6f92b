//! Inference for the integer layer of explicit quantization ([`QuantizedParams`]): the float
//! layer it stands for gives the shape; the slots are checked for the types and scale
//! lengths its arithmetic needs.

use super::{infer_layer, rule, Fact, InferResult, Inputs, OutFact, WeightsLookup};
use crate::ir::dtype::DataType;
use crate::ir::quantized::QuantizedParams as Q;
use crate::ir::shape::Dim;

pub(super) fn quantized<'a>(p: &Q, ins: &Inputs<'_, 'a>, weights: &WeightsLookup<'_>) -> InferResult<Vec<OutFact>> {
    ins.arity(2, Q::SLOTS)?;
    if ins.0.len() != Q::SLOTS {
        return rule(None, format!("has {} input slots, not {}", ins.0.len(), Q::SLOTS));
    }
    let (x, w) = (ins.req(Q::X)?, ins.req(Q::W)?);
    let as_float = |f: Fact<'a>| Fact::new(DataType::F32, f.shape, None);
    for (slot, f) in [(Q::X, x), (Q::W, w)] {
        if !Q::operand_type(f.dtype) {
            return rule(Some(slot), format!("input {slot} must be int8, uint8 or float8 e4m3fn, not {}", f.dtype));
        }
    }
    if Q::is_fp8(x.dtype) != Q::is_fp8(w.dtype) {
        return rule(Some(Q::W), format!("x ({}) and w ({}) must both be 8-bit integers or both float8", x.dtype, w.dtype));
    }
    if Q::is_fp8(x.dtype) && (p.quantized_output() || ins.get(Q::BIAS).is_some_and(|b| b.dtype == DataType::I32)) {
        return rule(None, "a float8 layer has a float output and no int32 bias");
    }
    // The float layer's rules give the shape (and check the bias against it).
    let mut facts = vec![Some(as_float(x)), Some(as_float(w))];
    if let Some(bias) = ins.get(Q::BIAS) {
        if !(bias.dtype == DataType::I32 || bias.dtype.is_float()) {
            return rule(Some(Q::BIAS), format!("the bias must be int32 or float, not {}", bias.dtype));
        }
        if matches!(p.anchor, crate::ir::quantized::QuantizedAnchor::Convolution(_)) {
            facts.push(Some(as_float(bias)));
        }
    }
    let anchor = infer_layer(&p.anchor.kind(), &facts, weights)?;
    let [out] = <[OutFact; 1]>::try_from(anchor)
        .map_err(|_| super::InferError { input: None, rule: "the anchor must have one output".into() })?;
    let rank = out.shape.rank();
    let channels = out.shape.dims().get(p.anchor.output_channel_axis(rank)).cloned();
    let w_channels = w.shape.dims().get(p.anchor.weight_channel_axis(w.shape.rank())).cloned();
    // The int32 sums take no scales.
    let scaled = !p.sums_output();
    per_channel(ins, Q::W_SCALE, w_channels.as_ref(), scaled)?;
    per_channel(ins, Q::W_ZERO, w_channels.as_ref(), false)?;
    per_channel(ins, Q::X_SCALE, None, scaled)?;
    per_channel(ins, Q::X_ZERO, None, false)?;
    if let Some(bias) = ins.get(Q::BIAS) {
        let len = bias.shape.volume();
        let fits = bias.shape.rank() <= 1 && (len == Some(1) || channels.as_ref().and_then(Dim::fixed) == len);
        if !fits {
            return rule(Some(Q::BIAS), format!("the bias must hold one value or one per output channel, got {}", bias.shape));
        }
    }
    for slot in [Q::X_ZERO, Q::W_ZERO] {
        let owner = if slot == Q::X_ZERO { x } else { w };
        if let Some(z) = ins.get(slot) {
            if z.dtype != owner.dtype {
                return rule(Some(slot), format!("zero point {slot} must be {}, like its tensor, not {}", owner.dtype, z.dtype));
            }
        }
    }
    residual(ins, &out.shape)?;
    if p.sums_output() {
        let extra = [Q::BIAS, Q::X_SCALE, Q::W_SCALE, Q::Y_SCALE, Q::Y_ZERO, Q::RESIDUAL, Q::THEN_SCALE].into_iter().find(|&s| ins.get(s).is_some());
        if Q::is_fp8(x.dtype) || p.relu || extra.is_some() {
            return rule(extra, "an int32 output is the sums of 8-bit integers: no scales, bias, ReLU or output zero point");
        }
    } else if p.quantized_output() {
        // One output scale per channel (sibling products merged side by side) only where it
        // folds into the channel's multiplier: no float term divided by it, no second
        // quantization dequantizing the levels with it.
        let float_bias = ins.get(Q::BIAS).is_some_and(|b| b.dtype.is_float());
        let one_scale = float_bias || ins.get(Q::RESIDUAL).is_some() || p.then.is_some();
        per_channel(ins, Q::Y_SCALE, if one_scale { None } else { channels.as_ref() }, true)?;
        per_channel(ins, Q::Y_ZERO, None, false)?;
        if ins.get(Q::Y_ZERO).is_some_and(|z| z.dtype != p.output) {
            return rule(Some(Q::Y_ZERO), format!("the output zero point must be {}", p.output));
        }
    } else if !Q::float_output_type(p.output) {
        return rule(None, format!("the output must be int8 or uint8 (requantized), i32 (the sums) or f32, f16 or bf16, not {}", p.output));
    } else if ins.get(Q::Y_SCALE).is_some() || ins.get(Q::Y_ZERO).is_some() {
        return rule(None, "a float output has no output scale or zero point");
    }
    requantization(p, ins)?;
    join(p, ins, &out.shape)?;
    lookup(p, ins, channels.as_ref())?;
    Ok(vec![OutFact::new(p.output_type(), out.shape)])
}

/// The second quantization: after levels only, to an 8-bit type with one scale (and a zero
/// point of that type).
fn requantization(p: &Q, ins: &Inputs) -> InferResult<()> {
    let Some(then) = p.then else {
        return match [Q::THEN_SCALE, Q::THEN_ZERO].into_iter().find(|&s| ins.get(s).is_some()) {
            Some(s) => rule(Some(s), "a second quantization's scale or zero point without a second quantization"),
            None => Ok(()),
        };
    };
    if !p.quantized_output() || !then.to.is_8bit_integer() {
        return rule(None, format!("a second quantization takes levels to int8 or uint8, not {} to {}", p.output, then.to));
    }
    per_channel(ins, Q::THEN_SCALE, None, true)?;
    per_channel(ins, Q::THEN_ZERO, None, false)?;
    if ins.get(Q::THEN_ZERO).is_some_and(|z| z.dtype != then.to) {
        return rule(Some(Q::THEN_ZERO), format!("the second quantization's zero point must be {}", then.to));
    }
    Ok(())
}

/// The lookup table: after levels (no second quantization), 8-bit, `[channels, 256]`.
fn lookup(p: &Q, ins: &Inputs, channels: Option<&Dim>) -> InferResult<()> {
    let Some(to) = p.lookup else {
        return match ins.get(Q::LOOKUP) {
            Some(_) => rule(Some(Q::LOOKUP), "a lookup table without the layer's lookup type"),
            None => Ok(()),
        };
    };
    let Some(table) = ins.get(Q::LOOKUP) else { return rule(None, "the layer's lookup has no table") };
    if !p.quantized_output() || p.then.is_some() || !to.is_8bit_integer() {
        return rule(Some(Q::LOOKUP), format!("a lookup maps levels (with no second quantization) to int8 or uint8, not {} to {to}", p.output));
    }
    if table.dtype != to {
        return rule(Some(Q::LOOKUP), format!("the lookup table must be {to}, not {}", table.dtype));
    }
    let rows = channels.and_then(Dim::fixed);
    if table.shape.rank() != 2 || table.shape.dims().get(1).and_then(Dim::fixed) != Some(Q::LOOKUP_ROW) || rows.is_none() || table.shape.dims().first().and_then(Dim::fixed) != rows {
        return rule(Some(Q::LOOKUP), format!("the lookup table must be [{}, {}], not {}", rows.map_or("channels".to_string(), |r| r.to_string()), Q::LOOKUP_ROW, table.shape));
    }
    Ok(())
}

/// The join: with a second quantization only, 8-bit, the output's shape, one scale (and a zero
/// point of its type).
fn join(p: &Q, ins: &Inputs, out: &crate::ir::shape::Shape) -> InferResult<()> {
    let Some(j) = ins.get(Q::JOIN) else {
        return match [Q::JOIN_SCALE, Q::JOIN_ZERO].into_iter().find(|&s| ins.get(s).is_some()) {
            Some(s) => rule(Some(s), "a join's scale or zero point without a join"),
            None => Ok(()),
        };
    };
    if p.then.is_none() {
        return rule(Some(Q::JOIN), "a join is added at the second quantization: the layer has none");
    }
    if j.shape != out {
        return rule(Some(Q::JOIN), format!("the join's shape {} must be the output's, {out}", j.shape));
    }
    if !j.dtype.is_8bit_integer() {
        return rule(Some(Q::JOIN), format!("the join must be int8 or uint8, not {}", j.dtype));
    }
    per_channel(ins, Q::JOIN_SCALE, None, true)?;
    per_channel(ins, Q::JOIN_ZERO, None, false)?;
    if ins.get(Q::JOIN_ZERO).is_some_and(|z| z.dtype != j.dtype) {
        return rule(Some(Q::JOIN_ZERO), format!("the join's zero point must be {}", j.dtype));
    }
    Ok(())
}

/// The residual: the output's shape, float, or 8-bit with its one scale (and zero point).
fn residual(ins: &Inputs, out: &crate::ir::shape::Shape) -> InferResult<()> {
    let Some(r) = ins.get(Q::RESIDUAL) else {
        return match [Q::RESIDUAL_SCALE, Q::RESIDUAL_ZERO].into_iter().find(|&s| ins.get(s).is_some()) {
            Some(s) => rule(Some(s), "a residual scale or zero point without a residual"),
            None => Ok(()),
        };
    };
    if r.shape != out {
        return rule(Some(Q::RESIDUAL), format!("the residual's shape {} must be the output's, {out}", r.shape));
    }
    if r.dtype.is_8bit_integer() {
        per_channel(ins, Q::RESIDUAL_SCALE, None, true)?;
        per_channel(ins, Q::RESIDUAL_ZERO, None, false)?;
        if ins.get(Q::RESIDUAL_ZERO).is_some_and(|z| z.dtype != r.dtype) {
            return rule(Some(Q::RESIDUAL_ZERO), format!("the residual's zero point must be {}", r.dtype));
        }
        return Ok(());
    }
    if !Q::float_output_type(r.dtype) {
        return rule(Some(Q::RESIDUAL), format!("the residual must be f32, f16, bf16, int8 or uint8, not {}", r.dtype));
    }
    match [Q::RESIDUAL_SCALE, Q::RESIDUAL_ZERO].into_iter().find(|&s| ins.get(s).is_some()) {
        Some(s) => rule(Some(s), "a float residual has no scale or zero point"),
        None => Ok(()),
    }
}

/// A scale (float, `required`) or zero point slot: one element, or one per `channels`.
fn per_channel(ins: &Inputs, slot: usize, channels: Option<&Dim>, required: bool) -> InferResult<()> {
    let Some(f) = ins.get(slot) else {
        return if required { rule(Some(slot), format!("input {slot} (a scale) is required")) } else { Ok(()) };
    };
    if required && !f.dtype.is_float() {
        return rule(Some(slot), format!("scale {slot} must be float, not {}", f.dtype));
    }
    let len = f.shape.volume();
    let ok = f.shape.rank() <= 1 && (len == Some(1) || channels.and_then(Dim::fixed).is_some_and(|c| len == Some(c)));
    if !ok {
        let what = if channels.is_some() { "one element or one per output channel" } else { "one element" };
        return rule(Some(slot), format!("input {slot} must hold {what}, got {}", f.shape));
    }
    Ok(())
}

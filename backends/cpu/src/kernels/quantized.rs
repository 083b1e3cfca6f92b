//! The integer layer of explicit quantization ([`QuantizedParams`]): the sum of 8-bit
//! (integer or float8) products exactly, then one scale per output channel, in the f32 operations an integer
//! kernel (onnxruntime's QLinearConv, an INT8 tensor-core epilogue) requantizes with.

use super::fused::step;
use kiln::plan::quant::ParamIndex;
use kiln::{DataType, HostTensor, QuantizedParams as Q, TensorData};

/// Element `k` of a per-channel list, or its only element.
fn pick<T: Copy>(v: &[T], k: usize) -> T {
    v[if v.len() == 1 { 0 } else { k }]
}

pub fn quantized(p: &Q, inputs: &[Option<&HostTensor>]) -> Result<HostTensor, String> {
    let get = |i: usize| inputs.get(i).copied().flatten();
    let req = |i: usize| get(i).ok_or_else(|| format!("input {i} is required"));
    let (x, w) = (req(Q::X)?, req(Q::W)?);
    let x_zero = get(Q::X_ZERO).map_or(0.0, |z| z.to_f64_vec()[0]);
    // f64 holds every sum of 8-bit products exactly (each under 2^16, far fewer than 2^37 of
    // them), so the float kernels compute the integer accumulator. float8 e4m3fn products are
    // multiples of 2^-18 below 2^18: f64 sums of fewer than 2^17 of them are exact too.
    let xf = HostTensor::new(x.shape().to_vec(), TensorData::F64(x.to_f64_vec().iter().map(|v| v - x_zero).collect()))
        .map_err(|e| e.to_string())?;
    let mut wf = w.to_f64_vec();
    if let Some(z) = get(Q::W_ZERO) {
        let index = ParamIndex::new(w.shape(), z.shape(), Some(p.anchor.weight_channel_axis(w.shape().len())))?;
        let zeros = z.to_f64_vec();
        wf.iter_mut().enumerate().for_each(|(i, v)| *v -= zeros[index.at(i)]);
    }
    let wf = HostTensor::new(w.shape().to_vec(), TensorData::F64(wf)).map_err(|e| e.to_string())?;
    let acc = step(&p.anchor.kind(), &[Some(&xf), Some(&wf)])?;
    let shape = acc.shape().to_vec();
    let channel = ParamIndex::output_channels(p, &shape);
    if p.sums_output() {
        // ConvInteger / MatMulInteger: the sums, wrapping as int32 arithmetic does.
        let sums = acc.to_f64_vec().into_iter().map(|a| a as i64 as i32).collect();
        return HostTensor::new(shape, TensorData::I32(sums)).map_err(|e| e.to_string());
    }
    // An int32 bias is added to the accumulator, a float one after the scaling.
    let (int_bias, float_bias) = match get(Q::BIAS) {
        Some(b) if b.dtype() == DataType::I32 => (Some(b.to_f64_vec()), None),
        Some(b) => (None, Some(b.to_f64_vec().iter().map(|&v| v as f32).collect::<Vec<f32>>())),
        None => (None, None),
    };
    let x_scale = req(Q::X_SCALE)?.to_f64_vec()[0] as f32;
    let w_scale: Vec<f32> = req(Q::W_SCALE)?.to_f64_vec().iter().map(|&s| s as f32).collect();
    let y_scales: Vec<f32> = get(Q::Y_SCALE).map_or_else(Vec::new, |s| s.to_f64_vec().iter().map(|&v| v as f32).collect());
    let residual = residual(get)?;
    if residual.as_ref().is_some_and(|r| r.len() != acc.len()) {
        return Err(format!("the residual's shape is not the output's, {shape:?}"));
    }
    // With a float term the division by y_scale is not folded into the scale.
    let float_terms = float_bias.is_some() || residual.is_some();
    let scale = p.channel_scales(x_scale, &w_scale, &y_scales, float_terms)?;
    // f32(acc)·scale[k] (+ float bias[k]) (+ residual[i]): the float output, or the value to
    // requantize.
    let values = acc.to_f64_vec().into_iter().enumerate().map(|(i, a)| {
        let k = channel.at(i);
        let a = match int_bias.as_deref() {
            Some(b) => a + pick(b, k),
            None => a,
        };
        let v = a as f32 * pick(&scale, k);
        let v = float_bias.as_deref().map_or(v, |b| v + pick(b, k));
        residual.as_deref().map_or(v, |r| v + r[i])
    });
    if !p.quantized_output() {
        let out: Vec<f32> = values.map(|v| if p.relu { v.max(0.0) } else { v }).collect();
        let out = HostTensor::from_f32(shape, out).map_err(|e| e.to_string())?;
        // An f16 / bf16 output is the f32 value rounded once, as the Cast it stands for.
        return match p.output {
            DataType::F32 => Ok(out),
            to => HostTensor::new(out.shape().to_vec(), super::misc::cast(&out, to)?).map_err(|e| e.to_string()),
        };
    }
    // Divided by only with float terms, where the output has one scale (channel_scales).
    let y_scale = *y_scales.first().ok_or_else(|| format!("input {} is required", Q::Y_SCALE))?;
    let y_zero = get(Q::Y_ZERO).map_or(0.0, |z| z.to_f64_vec()[0]);
    let (low, high) = match p.output {
        DataType::I8 => (-128.0, 127.0),
        DataType::U8 => (0.0, 255.0),
        other => return Err(format!("a quantized output must be int8 or uint8, not {other}")),
    };
    let levels = values.map(|v| {
        let v = if float_terms { v / y_scale } else { v };
        let mut level = f64::from(v.round_ties_even());
        if p.relu {
            level = level.max(0.0);
        }
        (level + y_zero).clamp(low, high)
    });
    let data = match p.output {
        DataType::I8 => TensorData::I8(levels.map(|v| v as i8).collect()),
        _ => TensorData::U8(levels.map(|v| v as u8).collect()),
    };
    let levels = HostTensor::new(shape, data).map_err(|e| e.to_string())?;
    let levels = match p.then {
        Some(then) => requantized(&levels, then, get)?,
        None => levels,
    };
    match p.lookup {
        Some(_) => looked_up(&levels, req(Q::LOOKUP)?, channel),
        None => Ok(levels),
    }
}

/// Each level's byte looked up in its output channel's row of `table` (`[channels, 256]`).
fn looked_up(levels: &HostTensor, table: &HostTensor, channel: ParamIndex) -> Result<HostTensor, String> {
    let row = Q::LOOKUP_ROW;
    if table.len() != channel.len * row {
        return Err(format!("the lookup table holds {} entries, not {} channels of {row}", table.len(), channel.len));
    }
    let bytes: Vec<u8> = match levels.data() {
        TensorData::I8(v) => v.iter().map(|&b| b as u8).collect(),
        TensorData::U8(v) => v.clone(),
        _ => return Err(format!("a lookup maps 8-bit levels, not {}", levels.dtype())),
    };
    let at = |i: usize| channel.at(i) * row + usize::from(bytes[i]);
    let data = match table.data() {
        TensorData::I8(t) => TensorData::I8((0..bytes.len()).map(|i| t[at(i)]).collect()),
        TensorData::U8(t) => TensorData::U8((0..bytes.len()).map(|i| t[at(i)]).collect()),
        _ => return Err(format!("a lookup table is int8 or uint8, not {}", table.dtype())),
    };
    HostTensor::new(levels.shape().to_vec(), data).map_err(|e| e.to_string())
}

/// The second quantization of the levels `y`, as the layers it stands for compute it: the
/// oracle's DequantizeLinear of `y`, the join's DequantizeLinear added in f32 where the layer
/// has one, the ReLU and the QuantizeLinear.
fn requantized<'a>(y: &HostTensor, then: kiln::Requantization, get: impl Fn(usize) -> Option<&'a HostTensor>) -> Result<HostTensor, String> {
    let required = |slot: usize| get(slot).ok_or_else(|| format!("input {slot} is required"));
    let dequantized = |t: &HostTensor, scale: usize, zero: usize| -> Result<Vec<f32>, String> {
        let data = super::misc::dequantize(t, required(scale)?, get(zero), None)?;
        Ok(HostTensor::new(t.shape().to_vec(), data).map_err(|e| e.to_string())?.to_f64_vec().into_iter().map(|v| v as f32).collect())
    };
    let mut u = dequantized(y, Q::Y_SCALE, Q::Y_ZERO)?;
    if let Some(join) = get(Q::JOIN) {
        if join.shape() != y.shape() {
            return Err(format!("the join's shape {:?} is not the output's {:?}", join.shape(), y.shape()));
        }
        u.iter_mut().zip(dequantized(join, Q::JOIN_SCALE, Q::JOIN_ZERO)?).for_each(|(u, j)| *u += j);
    }
    if then.relu {
        u.iter_mut().for_each(|u| *u = u.max(0.0));
    }
    let u = HostTensor::from_f32(y.shape().to_vec(), u).map_err(|e| e.to_string())?;
    let data = super::misc::quantize(&u, required(Q::THEN_SCALE)?, get(Q::THEN_ZERO), None, then.to)?;
    HostTensor::new(y.shape().to_vec(), data).map_err(|e| e.to_string())
}

/// The residual as f32, in the output's element order: a float one widened, an 8-bit one
/// the oracle's DequantizeLinear of it (`f32(r − zero)·scale`).
fn residual<'a>(get: impl Fn(usize) -> Option<&'a HostTensor>) -> Result<Option<Vec<f32>>, String> {
    let Some(r) = get(Q::RESIDUAL) else { return Ok(None) };
    let values = match r.dtype().is_8bit_integer() {
        true => {
            let scale = get(Q::RESIDUAL_SCALE).ok_or_else(|| format!("input {} is required", Q::RESIDUAL_SCALE))?;
            let data = super::misc::dequantize(r, scale, get(Q::RESIDUAL_ZERO), None)?;
            HostTensor::new(r.shape().to_vec(), data).map_err(|e| e.to_string())?.to_f64_vec()
        }
        false => r.to_f64_vec(),
    };
    Ok(Some(values.iter().map(|&v| v as f32).collect()))
}

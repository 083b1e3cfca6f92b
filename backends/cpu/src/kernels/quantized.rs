//! The integer layer of explicit quantization ([`QuantizedParams`]): the sum of 8-bit
//! products exactly, then one scale per output channel, in the f32 operations an integer
//! kernel (onnxruntime's QLinearConv, an INT8 tensor-core epilogue) requantizes with.

use super::fused::step;
use kiln::{DataType, HostTensor, QuantizedParams as Q, TensorData};

/// A bias: int32 is added to the accumulator, float after the scaling.
enum Bias {
    None,
    Int(Vec<f64>),
    Float(Vec<f32>),
}

pub fn quantized(p: &Q, inputs: &[Option<&HostTensor>]) -> Result<HostTensor, String> {
    let get = |i: usize| inputs.get(i).copied().flatten();
    let req = |i: usize| get(i).ok_or_else(|| format!("input {i} is required"));
    let (x, w) = (req(Q::X)?, req(Q::W)?);
    let x_zero = get(Q::X_ZERO).map_or(0.0, |z| z.to_f64_vec()[0]);
    let w_zero = get(Q::W_ZERO).map_or_else(|| vec![0.0], HostTensor::to_f64_vec);
    // f64 holds every sum of 8-bit products exactly (each under 2^16, far fewer than 2^37 of
    // them), so the float kernels compute the integer accumulator.
    let xf = HostTensor::new(x.shape().to_vec(), TensorData::F64(x.to_f64_vec().iter().map(|v| v - x_zero).collect()))
        .map_err(|e| e.to_string())?;
    let w_axis = p.anchor.weight_channel_axis(w.shape().len());
    let w_inner: usize = w.shape().get(w_axis + 1..).map_or(1, |d| d.iter().product());
    let wf: Vec<f64> = w
        .to_f64_vec()
        .iter()
        .enumerate()
        .map(|(i, v)| v - w_zero[if w_zero.len() == 1 { 0 } else { (i / w_inner) % w_zero.len() }])
        .collect();
    let wf = HostTensor::new(w.shape().to_vec(), TensorData::F64(wf)).map_err(|e| e.to_string())?;
    let acc = step(&p.anchor.kind(), &[Some(&xf), Some(&wf)])?;
    let shape = acc.shape().to_vec();
    let axis = p.anchor.output_channel_axis(shape.len());
    let channels = shape.get(axis).copied().unwrap_or(1).max(1);
    let inner: usize = shape.get(axis + 1..).map_or(1, |d| d.iter().product());
    let per_channel = |v: &[f32], k: usize| v[if v.len() == 1 { 0 } else { k }];
    let x_scale = req(Q::X_SCALE)?.to_f64_vec()[0] as f32;
    let w_scale: Vec<f32> = req(Q::W_SCALE)?.to_f64_vec().iter().map(|&s| s as f32).collect();
    let bias = match get(Q::BIAS) {
        None => Bias::None,
        Some(b) if b.dtype() == DataType::I32 => Bias::Int(b.to_f64_vec()),
        Some(b) => Bias::Float(b.to_f64_vec().iter().map(|&v| v as f32).collect()),
    };
    let at = |v: &[f64], k: usize| v[if v.len() == 1 { 0 } else { k }];
    let acc = acc.to_f64_vec();
    let channel = |i: usize| (i / inner) % channels;
    if !p.quantized_output() {
        let out: Vec<f32> = acc
            .iter()
            .enumerate()
            .map(|(i, &a)| {
                let k = channel(i);
                let scale = x_scale * per_channel(&w_scale, k);
                let v = match &bias {
                    Bias::None => a as f32 * scale,
                    Bias::Int(b) => (a + at(b, k)) as f32 * scale,
                    Bias::Float(b) => a as f32 * scale + per_channel(b, k),
                };
                if p.relu { v.max(0.0) } else { v }
            })
            .collect();
        return HostTensor::from_f32(shape, out).map_err(|e| e.to_string());
    }
    let y_scale = req(Q::Y_SCALE)?.to_f64_vec()[0] as f32;
    let y_zero = get(Q::Y_ZERO).map_or(0.0, |z| z.to_f64_vec()[0]);
    let (low, high) = match p.output {
        DataType::I8 => (-128.0, 127.0),
        DataType::U8 => (0.0, 255.0),
        other => return Err(format!("a quantized output must be int8 or uint8, not {other}")),
    };
    let levels = acc.iter().enumerate().map(|(i, &a)| {
        let k = channel(i);
        let v = match &bias {
            // The requantization multiplier, as integer kernels fold it: x·w / y.
            Bias::None => a as f32 * (x_scale * per_channel(&w_scale, k) / y_scale),
            Bias::Int(b) => (a + at(b, k)) as f32 * (x_scale * per_channel(&w_scale, k) / y_scale),
            Bias::Float(b) => (a as f32 * (x_scale * per_channel(&w_scale, k)) + per_channel(b, k)) / y_scale,
        };
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
    HostTensor::new(shape, data).map_err(|e| e.to_string())
}

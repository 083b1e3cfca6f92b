//! Element conversions (Cast, Quantize, Dequantize), TopK, NonZero and Assertion.

use crate::element::{cast as cast_one, float_data, pack, Elem, FloatElem, IntElem, Real, Scalar};
use crate::layout::Lanes;
use kiln::plan::quant::{check_zero_point, ParamIndex};
use half::{bf16, f16};
use crate::element_narrow::cast_narrow_float;
use kiln::{
    dispatch_data, DataType, E8M0Rounding, HostTensor, TensorData, F4E2M1, F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ, F8E8M0,
    I2, I4, U2, U4,
};
use std::cmp::Ordering;

fn cast_slice<S: Elem, D: Elem>(values: &[S]) -> TensorData {
    pack(values.iter().map(|&x| cast_one::<S, D>(x)).collect::<Vec<D>>())
}

fn cast_from<S: Elem>(values: &[S], to: DataType) -> Result<TensorData, String> {
    Ok(match to {
        DataType::F32 => cast_slice::<S, f32>(values),
        DataType::F16 => cast_slice::<S, f16>(values),
        DataType::BF16 => cast_slice::<S, bf16>(values),
        DataType::F64 => cast_slice::<S, f64>(values),
        DataType::I8 => cast_slice::<S, i8>(values),
        DataType::I16 => cast_slice::<S, i16>(values),
        DataType::I32 => cast_slice::<S, i32>(values),
        DataType::I64 => cast_slice::<S, i64>(values),
        DataType::U8 => cast_slice::<S, u8>(values),
        DataType::U16 => cast_slice::<S, u16>(values),
        DataType::U32 => cast_slice::<S, u32>(values),
        DataType::U64 => cast_slice::<S, u64>(values),
        DataType::Bool => cast_slice::<S, bool>(values),
        DataType::F8E4M3FN => cast_slice::<S, F8E4M3FN>(values),
        DataType::F8E4M3FNUZ => cast_slice::<S, F8E4M3FNUZ>(values),
        DataType::F8E5M2 => cast_slice::<S, F8E5M2>(values),
        DataType::F8E5M2FNUZ => cast_slice::<S, F8E5M2FNUZ>(values),
        DataType::F8E8M0 => cast_slice::<S, F8E8M0>(values),
        DataType::F4E2M1 => cast_slice::<S, F4E2M1>(values),
        DataType::I4 => cast_slice::<S, I4>(values),
        DataType::U4 => cast_slice::<S, U4>(values),
        DataType::I2 => cast_slice::<S, I2>(values),
        DataType::U2 => cast_slice::<S, U2>(values),
        DataType::String => return Err(format!("Cast from {} to string is not supported", S::DTYPE)),
    })
}

/// Converts every element to `to` with Cast semantics (see [`Elem::from_scalar`]).
pub fn cast(x: &HostTensor, to: DataType) -> Result<TensorData, String> {
    dispatch_data!(x.data(), v => cast_from(v, to), string s => match to {
        DataType::String => Ok(TensorData::String(s.clone())),
        _ => Err(format!("Cast from string to {to} is not supported")),
    })
}

/// Cast to a narrow float type with explicit `saturate` and e8m0 rounding (CastNarrow).
pub fn cast_narrow(x: &HostTensor, to: DataType, saturate: bool, rounding: E8M0Rounding) -> Result<TensorData, String> {
    let values: Vec<Scalar> = dispatch_data!(x.data(), v => v.iter().map(|e| e.to_scalar()).collect(), string _s => return Err(format!("the cpu `{}` kernels do not take string tensors", module_path!().rsplit("::").next().unwrap_or(""))));
    cast_narrow_float(&values, to, saturate, rounding).ok_or_else(|| format!("CastNarrow cannot convert to {to}"))
}

/// Exact integer values of an integer tensor (u64 included).
fn exact_ints(t: &HostTensor, what: &str) -> Result<Vec<i128>, String> {
    fn widen<T: IntElem>(v: &[T]) -> Vec<i128> {
        v.iter().map(|x| x.to_i128()).collect()
    }
    match t.data() {
        TensorData::I8(v) => Ok(widen(v)),
        TensorData::I16(v) => Ok(widen(v)),
        TensorData::I32(v) => Ok(widen(v)),
        TensorData::I64(v) => Ok(widen(v)),
        TensorData::U8(v) => Ok(widen(v)),
        TensorData::U16(v) => Ok(widen(v)),
        TensorData::U32(v) => Ok(widen(v)),
        TensorData::U64(v) => Ok(widen(v)),
        TensorData::I4(_) | TensorData::U4(_) | TensorData::I2(_) | TensorData::U2(_) => {
            Ok(t.to_i64_vec().unwrap_or_default().into_iter().map(i128::from).collect())
        }
        other => Err(format!("{what} must be an integer tensor, not {}", other.dtype())),
    }
}

/// `saturate(round_half_even(x / scale) + zero_point)` into the integer type `to`.
pub fn quantize(
    x: &HostTensor,
    scale: &HostTensor,
    zero_point: Option<&HostTensor>,
    axis: Option<usize>,
    to: DataType,
) -> Result<TensorData, String> {
    let index = ParamIndex::new(x.shape(), scale.shape(), axis)?;
    check_zero_point(scale.len(), zero_point.map(HostTensor::len))?;
    let scales = scale.to_f64_vec();
    if to.is_narrow() {
        return quantize_narrow(x, &scales, zero_point, &index, to);
    }
    let zp = match zero_point {
        Some(z) => exact_ints(z, "the zero point")?,
        None => vec![0; scale.len()],
    };
    fn run<T: FloatElem, Q: IntElem>(x: &[T], scales: &[f64], zp: &[i128], index: &ParamIndex) -> TensorData {
        let q = x.iter().enumerate().map(|(i, &v)| {
            let p = index.at(i);
            let rounded = (v.widen() / T::Acc::of(scales[p])).round_ties_even().to_f64();
            Q::saturate_f64(rounded + zp[p] as f64)
        });
        pack(q.collect::<Vec<Q>>())
    }
    macro_rules! to {
        ($q:ty) => {
            float_data!(x.data(), "Quantize", v => run::<_, $q>(v, &scales, &zp, &index))
        };
    }
    match to {
        DataType::I8 => to!(i8),
        DataType::I16 => to!(i16),
        DataType::I32 => to!(i32),
        DataType::I64 => to!(i64),
        DataType::U8 => to!(u8),
        DataType::U16 => to!(u16),
        DataType::U32 => to!(u32),
        DataType::U64 => to!(u64),
        other => Err(format!("Quantize produces integers, not {other}")),
    }
}

/// Quantize to a storage-only type: 4/2-bit integers as
/// `clamp(round_half_even(x / scale) + zp)`; narrow floats as `x / scale + zp` rounded to
/// nearest even and saturated (the ONNX reference; float8 zero points are 0 by the spec).
fn quantize_narrow(
    x: &HostTensor,
    scales: &[f64],
    zero_point: Option<&HostTensor>,
    index: &ParamIndex,
    to: DataType,
) -> Result<TensorData, String> {
    fn ratios<T: FloatElem>(x: &[T], scales: &[f64], index: &ParamIndex) -> Vec<f64> {
        x.iter().enumerate().map(|(i, &v)| (v.widen() / T::Acc::of(scales[index.at(i)])).to_f64()).collect()
    }
    let ratios = float_data!(x.data(), "Quantize", v => ratios(v, scales, index))?;
    let zp = zero_point.map_or_else(|| vec![0.0; scales.len()], HostTensor::to_f64_vec);
    if to.is_narrow_float() {
        let values: Vec<Scalar> = ratios.iter().enumerate().map(|(i, &r)| Scalar::Float(r + zp[index.at(i)])).collect();
        return cast_narrow_float(&values, to, true, E8M0Rounding::Up).ok_or_else(|| format!("cannot quantize to {to}"));
    }
    let ints = ratios.iter().enumerate().map(|(i, &r)| {
        let v = r.round_ties_even() + zp[index.at(i)];
        if v.is_nan() { 0 } else { v as i128 }
    });
    Ok(match to {
        DataType::I4 => TensorData::I4(ints.map(I4::saturating).collect()),
        DataType::U4 => TensorData::U4(ints.map(U4::saturating).collect()),
        DataType::I2 => TensorData::I2(ints.map(I2::saturating).collect()),
        DataType::U2 => TensorData::U2(ints.map(U2::saturating).collect()),
        other => return Err(format!("Quantize cannot produce {other}")),
    })
}

/// `(x - zero_point) * scale` in the scale's type.
pub fn dequantize(
    x: &HostTensor,
    scale: &HostTensor,
    zero_point: Option<&HostTensor>,
    axis: Option<usize>,
) -> Result<TensorData, String> {
    let index = ParamIndex::new(x.shape(), scale.shape(), axis)?;
    check_zero_point(scale.len(), zero_point.map(HostTensor::len))?;
    match zero_point {
        Some(z) if z.dtype() != x.dtype() => {
            return Err(format!("zero point must be {} like the input, not {}", x.dtype(), z.dtype()))
        }
        _ => {}
    }
    // `x - zp`, exact in f64: integers up to 64 bits go through i128 first, and narrow
    // floats have at most 4 significand bits.
    let shifted: Vec<f64> = if x.dtype().is_narrow_float() {
        let zp = zero_point.map_or_else(|| vec![0.0; scale.len()], HostTensor::to_f64_vec);
        x.to_f64_vec().iter().enumerate().map(|(i, &v)| v - zp[index.at(i)]).collect()
    } else {
        let values = exact_ints(x, "Dequantize's input")?;
        let zp = match zero_point {
            Some(z) => exact_ints(z, "the zero point")?,
            None => vec![0; scale.len()],
        };
        values.iter().enumerate().map(|(i, &v)| (v - zp[index.at(i)]) as f64).collect()
    };
    fn run<T: FloatElem>(shifted: &[f64], scale: &[T], index: &ParamIndex) -> TensorData {
        let y = shifted.iter().enumerate().map(|(i, &v)| T::narrow(T::Acc::of(v) * scale[index.at(i)].widen()));
        pack(y.collect::<Vec<T>>())
    }
    float_data!(scale.data(), "Dequantize's scale", s => run(&shifted, s, &index))
}

/// Orders scalars of one tensor; NaN sorts above every number (numpy).
pub(super) fn order(a: &Scalar, b: &Scalar) -> Ordering {
    match (a, b) {
        (Scalar::Int(x), Scalar::Int(y)) => x.cmp(y),
        (Scalar::Float(x), Scalar::Float(y)) => match (x.is_nan(), y.is_nan()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            (false, false) => x.partial_cmp(y).unwrap_or(Ordering::Equal),
        },
        // One tensor holds one type; mixed scalars do not occur.
        (Scalar::Int(_), Scalar::Float(_)) => Ordering::Less,
        (Scalar::Float(_), Scalar::Int(_)) => Ordering::Greater,
    }
}

/// The `k` largest (or smallest) elements along `axis`, sorted, ties by lower index; the
/// output is always sorted (a valid order also when the layer does not ask for one).
pub fn top_k(
    x: &HostTensor,
    axis: usize,
    largest: bool,
    out_shape: &[usize],
) -> Result<(TensorData, TensorData), String> {
    let lanes = Lanes::around(x.shape(), axis);
    let k = *out_shape.get(axis).ok_or("TopK axis is out of range")?;
    if k > lanes.len {
        return Err(format!("k = {k} exceeds the axis length {}", lanes.len));
    }
    let out_lanes = Lanes { len: k, ..lanes };
    let mut picks = vec![0usize; out_lanes.outer * k * out_lanes.inner];
    let mut order_buf: Vec<usize> = Vec::with_capacity(lanes.len);
    dispatch_data!(x.data(), v => {
        for o in 0..lanes.outer {
            for j in 0..lanes.inner {
                let keys: Vec<Scalar> = (0..lanes.len).map(|i| v[lanes.at(o, i, j)].to_scalar()).collect();
                order_buf.clear();
                order_buf.extend(0..lanes.len);
                // A stable sort keeps equal keys in index order.
                if largest {
                    order_buf.sort_by(|&p, &q| order(&keys[q], &keys[p]));
                } else {
                    order_buf.sort_by(|&p, &q| order(&keys[p], &keys[q]));
                }
                for (r, &i) in order_buf.iter().take(k).enumerate() {
                    picks[out_lanes.at(o, r, j)] = i;
                }
            }
        }
    }, string _s => return Err(format!("the cpu `{}` kernels do not take string tensors", module_path!().rsplit("::").next().unwrap_or(""))));
    let values = dispatch_data!(x.data(), v => {
        let mut out = Vec::with_capacity(picks.len());
        for o in 0..out_lanes.outer {
            for r in 0..k {
                for j in 0..out_lanes.inner {
                    out.push(v[lanes.at(o, picks[out_lanes.at(o, r, j)], j)]);
                }
            }
        }
        pack(out)
    }, string _s => return Err(format!("the cpu `{}` kernels do not take string tensors", module_path!().rsplit("::").next().unwrap_or(""))));
    Ok((values, TensorData::I64(picks.into_iter().map(|i| i as i64).collect())))
}


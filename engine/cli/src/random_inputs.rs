//! Seeded random inputs (ChaCha8): the same seed gives the same data on every machine.

use crate::inputs::InputRange;
use anyhow::bail;
use half::{bf16, f16};
use kiln::{DataType, Dim, HostTensor, Network, TensorData};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;

/// The most elements a random input may have (4 GiB of f32): more is surely a mistake.
const MAX_RANDOM_ELEMENTS: usize = 1 << 30;

/// Floats uniform in `range` (default [-1, 1)), integers in its whole numbers (default
/// [0, 10)), fair bools. An input's dims come from `dims` when it names the input (checked
/// against the network by the caller); other dims that are not fixed become 1, with a warning.
pub fn random(
    network: &Network,
    dims: &crate::shapes::ShapeList,
    seed: u64,
    range: Option<InputRange>,
) -> anyhow::Result<HashMap<String, HostTensor>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut inputs = HashMap::with_capacity(network.inputs().len());
    for &t in network.inputs() {
        let desc = network.tensor(t);
        let shape: Vec<usize> = match dims.get(&desc.name) {
            Some(given) => given.clone(),
            None => desc
                .shape
                .dims()
                .iter()
                .enumerate()
                .map(|(axis, d)| match d {
                    Dim::Fixed(n) => *n,
                    dynamic => {
                        tracing::warn!(
                            "input `{}` dim {axis} ({dynamic}) is dynamic and not given: random data uses 1 (--shapes {}:… sets it)",
                            desc.name,
                            desc.name
                        );
                        1
                    }
                })
                .collect(),
        };
        let count = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d)).filter(|&n| n <= MAX_RANDOM_ELEMENTS);
        let Some(count) = count else {
            bail!("input `{}` of shape {} is too large for random data: pass it with --inputs", desc.name, desc.shape);
        };
        let data = random_data(&mut rng, desc.dtype, count, range)
            .map_err(|why| anyhow::anyhow!("no random data for input `{}`: {why}", desc.name))?;
        inputs.insert(desc.name.clone(), HostTensor::new(shape, data)?);
    }
    Ok(inputs)
}

/// The whole numbers in [lo, hi) that `dtype` holds, as a half-open range.
fn integer_bounds(dtype: DataType, range: Option<InputRange>) -> Result<(i128, i128), String> {
    let Some(r) = range else { return Ok((0, 10)) };
    let (min, max): (i128, i128) = match dtype {
        DataType::I8 => (i8::MIN.into(), i8::MAX.into()),
        DataType::I16 => (i16::MIN.into(), i16::MAX.into()),
        DataType::I32 => (i32::MIN.into(), i32::MAX.into()),
        DataType::I64 => (i64::MIN.into(), i64::MAX.into()),
        DataType::U8 => (0, u8::MAX.into()),
        DataType::U16 => (0, u16::MAX.into()),
        DataType::U32 => (0, u32::MAX.into()),
        _ => (0, u64::MAX.into()),
    };
    // f64 → i128 saturates, so huge bounds clamp instead of wrapping.
    let lo = (r.lo.ceil() as i128).max(min);
    let hi = (r.hi.ceil() as i128).min(max + 1);
    if lo >= hi {
        return Err(format!("--input-range {},{} holds no whole number of type {dtype}", r.lo, r.hi));
    }
    Ok((lo, hi))
}

fn random_data(rng: &mut ChaCha8Rng, dtype: DataType, count: usize, range: Option<InputRange>) -> Result<TensorData, String> {
    // f32-based types draw f32s, so that the default data stays what kiln always drew.
    let (lo, hi) = range.map_or((-1.0, 1.0), |r| (r.lo, r.hi));
    // rand's uniform sampler panics on an empty range or one whose width overflows.
    let usable = match dtype {
        DataType::F64 => (hi - lo).is_finite(),
        DataType::F32 | DataType::F16 | DataType::BF16 => (lo as f32) < (hi as f32) && (hi as f32 - lo as f32).is_finite(),
        _ => true,
    };
    if !usable {
        return Err(format!("--input-range {lo},{hi} is empty or too wide for type {dtype}"));
    }
    macro_rules! floats {
        ($variant:ident, $convert:expr) => {
            TensorData::$variant((0..count).map(|_| $convert(rng.gen_range(lo as f32..hi as f32))).collect())
        };
    }
    macro_rules! integers {
        ($variant:ident, $t:ty) => {{
            match range {
                None => TensorData::$variant((0..count).map(|_| rng.gen_range(0u8..10) as $t).collect()),
                Some(_) => {
                    let (lo, hi) = integer_bounds(dtype, range)?;
                    // Within the type: integer_bounds clamps to it.
                    TensorData::$variant((0..count).map(|_| rng.gen_range(lo..hi) as $t).collect())
                }
            }
        }};
    }
    Ok(match dtype {
        DataType::F32 => floats!(F32, |x| x),
        DataType::F16 => floats!(F16, f16::from_f32),
        DataType::BF16 => floats!(BF16, bf16::from_f32),
        DataType::F64 => TensorData::F64((0..count).map(|_| rng.gen_range(lo..hi)).collect()),
        DataType::I8 => match range {
            None => TensorData::I8((0..count).map(|_| rng.gen_range(0i8..10)).collect()),
            Some(_) => integers!(I8, i8),
        },
        DataType::I16 => integers!(I16, i16),
        DataType::I32 => integers!(I32, i32),
        DataType::I64 => integers!(I64, i64),
        DataType::U8 => integers!(U8, u8),
        DataType::U16 => integers!(U16, u16),
        DataType::U32 => integers!(U32, u32),
        DataType::U64 => integers!(U64, u64),
        DataType::Bool => TensorData::Bool((0..count).map(|_| rng.gen()).collect()),
        DataType::String => TensorData::String((0..count).map(|_| rng.gen_range(0u8..10).to_string()).collect()),
        narrow => {
            // 0 or 1, which every narrow type holds (e8m0 has no zero: 2^-127 stands for it).
            let values: Vec<f64> = (0..count).map(|_| f64::from(rng.gen_range(0u8..2))).collect();
            TensorData::narrow_from_f64(narrow, &values).ok_or_else(|| format!("type {narrow} has no random data"))?
        }
    })
}

//! The network inputs of `kiln run`: read from an `.npz` file or generated at random.

use crate::npz;
use anyhow::{bail, Context};
use half::{bf16, f16};
use kiln::{DataType, Dim, HostTensor, Network, TensorData};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::path::Path;

/// Seed of the random inputs, fixed so repeated runs see the same data.
pub const RANDOM_SEED: u64 = 0;

fn input_names(network: &Network) -> Vec<&str> {
    network.inputs().iter().map(|&t| network.tensor(t).name.as_str()).collect()
}

/// One array per network input, keyed by input name. Every input must be present and
/// every array must name an input; a `<u2` array stands for a bf16 input's raw bits.
/// Types and shapes are then checked by the runtime against the network.
pub fn from_npz(network: &Network, path: &Path) -> anyhow::Result<HashMap<String, HostTensor>> {
    let arrays = npz::read_npz(path)?;
    let names = input_names(network);
    if let Some((stray, _)) = arrays.iter().find(|(name, _)| !names.contains(&name.as_str())) {
        bail!("array `{stray}` in `{}` is not an input of the model (inputs: {})", path.display(), names.join(", "));
    }
    let mut arrays: HashMap<String, HostTensor> = arrays.into_iter().collect();
    let mut inputs = HashMap::with_capacity(names.len());
    for &t in network.inputs() {
        let desc = network.tensor(t);
        let Some(array) = arrays.remove(&desc.name) else {
            bail!(
                "input `{}` is missing from `{}` (it needs an array named `{}`)",
                desc.name,
                path.display(),
                desc.name
            );
        };
        let array = match (desc.dtype, array.dtype()) {
            (DataType::BF16, DataType::U16) => npz::reinterpret_u16_as_bf16(array)?,
            (DataType::BF16, actual) => {
                bail!("input `{}` must be bf16 (stored as <u2 raw bits), got {actual}", desc.name)
            }
            (narrow, actual) if narrow.is_narrow() && actual != narrow => npz::reinterpret_narrow(array, narrow)
                .with_context(|| format!("input `{}`", desc.name))?,
            (expected, actual) if expected != actual => bail!("input `{}` must be {expected}, got {actual}", desc.name),
            _ => array,
        };
        inputs.insert(desc.name.clone(), array);
    }
    Ok(inputs)
}

/// The most elements a random input may have (4 GiB of f32): more is surely a mistake.
const MAX_RANDOM_ELEMENTS: usize = 1 << 30;

/// Seeded random inputs: floats uniform in [-1, 1), integers in [0, 10), random bools.
/// An input's dims come from `dims` when it names the input (checked against the network
/// by the caller); otherwise dims that are not fixed (named or unknown) become 1.
pub fn random(network: &Network, dims: &crate::shapes::ShapeList) -> anyhow::Result<HashMap<String, HostTensor>> {
    let mut rng = ChaCha8Rng::seed_from_u64(RANDOM_SEED);
    let mut inputs = HashMap::with_capacity(network.inputs().len());
    for &t in network.inputs() {
        let desc = network.tensor(t);
        let shape: Vec<usize> = match dims.get(&desc.name) {
            Some(given) => given.clone(),
            None => desc.shape.dims().iter().map(|d| if let Dim::Fixed(n) = d { *n } else { 1 }).collect(),
        };
        let count = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d)).filter(|&n| n <= MAX_RANDOM_ELEMENTS);
        let Some(count) = count else {
            bail!("input `{}` of shape {} is too large for random data: pass it with --inputs", desc.name, desc.shape);
        };
        let tensor = HostTensor::new(shape, random_data(&mut rng, desc.dtype, count))?;
        inputs.insert(desc.name.clone(), tensor);
    }
    Ok(inputs)
}

fn random_data(rng: &mut ChaCha8Rng, dtype: DataType, count: usize) -> TensorData {
    macro_rules! floats {
        ($variant:ident, $convert:expr) => {
            TensorData::$variant((0..count).map(|_| $convert(rng.gen_range(-1.0f32..1.0))).collect())
        };
    }
    macro_rules! digits {
        ($variant:ident, $t:ty) => {
            TensorData::$variant((0..count).map(|_| <$t>::from(rng.gen_range(0u8..10))).collect())
        };
    }
    match dtype {
        DataType::F32 => floats!(F32, |x| x),
        DataType::F16 => floats!(F16, f16::from_f32),
        DataType::BF16 => floats!(BF16, bf16::from_f32),
        DataType::F64 => TensorData::F64((0..count).map(|_| rng.gen_range(-1.0f64..1.0)).collect()),
        DataType::I8 => TensorData::I8((0..count).map(|_| rng.gen_range(0i8..10)).collect()),
        DataType::I16 => digits!(I16, i16),
        DataType::I32 => digits!(I32, i32),
        DataType::I64 => digits!(I64, i64),
        DataType::U8 => digits!(U8, u8),
        DataType::U16 => digits!(U16, u16),
        DataType::U32 => digits!(U32, u32),
        DataType::U64 => digits!(U64, u64),
        DataType::Bool => TensorData::Bool((0..count).map(|_| rng.gen()).collect()),
        DataType::String => TensorData::String((0..count).map(|_| rng.gen_range(0u8..10).to_string()).collect()),
        narrow => {
            // 0 or 1, which every narrow type holds (e8m0 has no zero: 2^-127 stands for it).
            let values: Vec<f64> = (0..count).map(|_| f64::from(rng.gen_range(0u8..2))).collect();
            TensorData::narrow_from_f64(narrow, &values).expect("the remaining types are narrow")
        }
    }
}

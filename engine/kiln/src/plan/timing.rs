//! Inputs for timing a tactic: values in [-1, 1) from a xorshift stream, since kernels
//! must be timed on realistic data, not zeros. Every backend draws the same stream, so a
//! timing is reproducible from run to run.

use crate::ir::dtype::DataType;
use crate::ir::tensor::{HostTensor, TensorData};

/// `len` values in [-1, 1), advancing `seed` (which must not be 0).
pub fn uniform(len: usize, seed: &mut u64) -> Vec<f32> {
    (0..len)
        .map(|_| {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            (*seed >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// A float tensor of `dims` with [`uniform`] values, advancing `seed`.
pub fn random_tensor(dtype: DataType, dims: &[usize], seed: &mut u64) -> Result<HostTensor, String> {
    let values = uniform(dims.iter().product(), seed);
    let data = match dtype {
        DataType::F32 => TensorData::F32(values),
        DataType::F16 => TensorData::F16(values.into_iter().map(half::f16::from_f32).collect()),
        DataType::BF16 => TensorData::BF16(values.into_iter().map(half::bf16::from_f32).collect()),
        DataType::F64 => TensorData::F64(values.into_iter().map(f64::from).collect()),
        other => return Err(format!("cannot time a layer on {other} inputs")),
    };
    HostTensor::new(dims.to_vec(), data).map_err(|e| e.to_string())
}

//! Inputs for timing a tactic: values in [-1, 1) from a xorshift stream (8-bit integers over
//! their range), since kernels must be timed on realistic data, not zeros. Every backend draws
//! the same stream, so a timing is reproducible from run to run.

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

/// A tensor of `dims` with [`uniform`] values, advancing `seed`: floats as drawn, 8-bit integers
/// (the activations of integer layers) spread over their whole range.
pub fn random_tensor(dtype: DataType, dims: &[usize], seed: &mut u64) -> Result<HostTensor, String> {
    let values = uniform(dims.iter().product(), seed);
    let data = match dtype {
        DataType::I8 => TensorData::I8(values.into_iter().map(|v| (v * 128.0).floor() as i8).collect()),
        DataType::U8 => TensorData::U8(values.into_iter().map(|v| ((v + 1.0) * 128.0).floor() as u8).collect()),
        DataType::F32 => TensorData::F32(values),
        DataType::F16 => TensorData::F16(values.into_iter().map(half::f16::from_f32).collect()),
        DataType::BF16 => TensorData::BF16(values.into_iter().map(half::bf16::from_f32).collect()),
        DataType::F64 => TensorData::F64(values.into_iter().map(f64::from).collect()),
        other => return Err(format!("cannot time a layer on {other} inputs")),
    };
    HostTensor::new(dims.to_vec(), data).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eight_bit_timing_inputs_spread_over_their_range() {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let TensorData::I8(signed) = random_tensor(DataType::I8, &[4096], &mut seed).unwrap().data().clone() else { panic!("i8") };
        assert!(signed.iter().any(|&v| v < -100) && signed.iter().any(|&v| v > 100), "int8 inputs stay near 0");
        let TensorData::U8(unsigned) = random_tensor(DataType::U8, &[4096], &mut seed).unwrap().data().clone() else { panic!("u8") };
        assert!(unsigned.iter().any(|&v| v < 20) && unsigned.iter().any(|&v| v > 235), "uint8 inputs stay in a narrow band");
        assert!(random_tensor(DataType::Bool, &[4], &mut seed).unwrap_err().contains("bool"));
    }
}
